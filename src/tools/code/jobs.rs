//! Background snippets (`code_run` with `background: true`): the jobs of
//! one run, owned by its runtime (`tools::Host::jobs`). A job's thread
//! serves its snippet (`run.rs`) and leaves its result here; `code_status`
//! reads it, or the output so far. When the run ends the jobs end: what is
//! still running is killed, its whole namespace with it.

use serde_json::Value;
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a snippet wrote so far (a background run's is read while it runs).
pub type Buffer = Arc<Mutex<Vec<u8>>>;

/// One background run.
pub struct Job {
    pub id: String,
    /// The snippet's process (the sandbox's outer one).
    pub pid: i32,
    pub language: String,
    pub started: Instant,
    pub out: Buffer,
    pub err: Buffer,
    /// Its result, once it ended.
    pub end: Arc<Mutex<Option<Value>>>,
    pub thread: Option<JoinHandle<()>>,
}

impl Job {
    fn ended(&self) -> bool {
        self.end.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}

/// The background runs of one run.
#[derive(Default)]
pub struct Jobs {
    list: RefCell<Vec<Job>>,
}

impl Jobs {
    /// The id the next job gets: `job-1`, `job-2`, … within a run.
    pub fn next_id(&self) -> String {
        format!("job-{}", self.list.borrow().len() + 1)
    }

    pub fn add(&self, job: Job) {
        self.list.borrow_mut().push(job);
    }

    /// `f` of the job `id`, if this run has it.
    pub fn with<T>(&self, id: &str, f: impl FnOnce(&Job) -> T) -> Option<T> {
        self.list.borrow().iter().find(|j| j.id == id).map(f)
    }

    pub fn ids(&self) -> Vec<String> {
        self.list.borrow().iter().map(|j| j.id.clone()).collect()
    }
}

impl Drop for Jobs {
    /// The run ends: every job still running is killed (its namespace
    /// with it), and its thread, which then records it, is given a moment.
    fn drop(&mut self) {
        for job in self.list.get_mut().iter_mut() {
            if !job.ended() {
                let _ = crate::sys::process::kill(job.pid);
                let _ = crate::sys::process::kill_group(job.pid);
            }
        }
        let until = Instant::now() + Duration::from_secs(5);
        for job in self.list.get_mut().iter_mut() {
            while !job.ended() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Some(t) = job.thread.take()
                && job.ended()
            {
                let _ = t.join();
            }
        }
    }
}
