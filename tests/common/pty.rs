//! Runs latchclaw on a fresh pseudo-terminal (stdin, stdout, stderr and the
//! controlling terminal), like a person at a terminal would.
#![allow(dead_code)]
// The pseudo-terminal calls (libc).
#![allow(unsafe_code)]

use crate::common::Env;
use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A new pseudo-terminal: the master fd and the slave's path.
pub fn open_pty() -> (i32, CString) {
    // SAFETY: plain libc pty calls; results checked.
    // Close-on-exec: tests run in parallel threads, and a master inherited
    // by another test's child keeps this terminal open after ours exits.
    let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) };
    assert!(master >= 0);
    // SAFETY: integer calls on the master opened above.
    assert_eq!(unsafe { libc::grantpt(master) }, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::unlockpt(master) }, 0);
    let mut name = [0 as libc::c_char; 128];
    assert_eq!(
        // SAFETY: ptsname_r writes at most `name.len()` bytes into `name`.
        unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) },
        0
    );
    // SAFETY: ptsname_r succeeded, so `name` holds a NUL-terminated path.
    let slave = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_owned();
    (master, slave)
}

/// Makes the slave the child's controlling terminal (in a new session) and,
/// with `stdio`, its stdin, stdout and stderr too. The slave fd stays open
/// in the child: with none left, the master would read EIO early.
pub fn attach(cmd: &mut Command, slave: CString, stdio: bool) {
    // SAFETY: async-signal-safe calls only, after fork.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            let fd = libc::open(slave.as_ptr(), libc::O_RDWR);
            if fd < 0 || libc::ioctl(fd, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if stdio {
                for target in 0..3 {
                    libc::dup2(fd, target);
                }
            }
            Ok(())
        });
    }
}

/// Copies everything the terminal shows into `transcript` until EOF. The
/// reader has its own copy of the fd: the caller closing `master` can then
/// never leave it reading a number reused by another test's file.
pub fn record(master: i32) -> Arc<Mutex<String>> {
    let transcript = Arc::new(Mutex::new(String::new()));
    let t2 = transcript.clone();
    // SAFETY: duplicating our own fd; the thread owns and closes the copy.
    let master = unsafe { libc::fcntl(master, libc::F_DUPFD_CLOEXEC, 0) };
    assert!(master >= 0);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a local buffer from our own fd.
            let n = unsafe { libc::read(master, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            t2.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n as usize]));
        }
        // SAFETY: the copy made above, closed once.
        unsafe { libc::close(master) };
    });
    transcript
}

pub struct Pty {
    master: i32,
    child: Child,
    transcript: Arc<Mutex<String>>,
    seen: usize,
    slave: CString,
    /// The test's own descriptor of the terminal (`modes`).
    held: Option<i32>,
}

impl Pty {
    pub fn spawn(env: &Env, args: &[&str]) -> Pty {
        Pty::spawn_env(env, args, &[])
    }

    /// `spawn` with these environment variables set.
    pub fn spawn_env(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Pty {
        let (master, slave) = open_pty();
        let mut cmd = env.base_command(args);
        cmd.envs(vars.iter().copied());
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        attach(&mut cmd, slave.clone(), true);
        let child = cmd.spawn().unwrap();
        let transcript = record(master);
        Pty {
            master,
            child,
            transcript,
            seen: 0,
            slave,
            held: None,
        }
    }

    /// The terminal's modes now. The first call opens the terminal in the
    /// test and keeps it open, so the modes the child leaves outlive it:
    /// the last close of a pseudo-terminal resets them.
    pub fn modes(&mut self) -> libc::termios {
        let slave = &self.slave;
        let fd = *self.held.get_or_insert_with(|| {
            // SAFETY: opening a path we own the master of.
            let fd = unsafe {
                libc::open(
                    slave.as_ptr(),
                    libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
                )
            };
            assert!(fd >= 0, "{}", std::io::Error::last_os_error());
            fd
        });
        // SAFETY: tcgetattr fills the struct we pass.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0);
        t
    }

    /// Sets the terminal's size, as a window resize would.
    pub fn resize(&self, cols: u16, rows: u16) {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        assert_eq!(
            // SAFETY: TIOCSWINSZ reads the winsize we pass.
            unsafe { libc::ioctl(self.master, libc::TIOCSWINSZ, &ws) },
            0
        );
    }

    /// The child's process id (to signal it).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Everything the terminal showed after what `expect` matched so far.
    pub fn unseen(&self) -> String {
        self.transcript.lock().unwrap()[self.seen..].to_string()
    }

    pub fn send(&self, text: &str) {
        // SAFETY: writing our own bytes to our own fd.
        unsafe { libc::write(self.master, text.as_ptr().cast(), text.len()) };
    }

    /// Waits until `needle` appears after what earlier calls matched.
    pub fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            {
                let t = self.transcript.lock().unwrap();
                if let Some(i) = t[self.seen..].find(needle) {
                    self.seen += i + needle.len();
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "never saw {needle:?} in:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// True once the process has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub fn transcript(&self) -> String {
        self.transcript.lock().unwrap().clone()
    }

    pub fn wait(mut self) -> Option<i32> {
        self.wait_exit()
    }

    /// `wait`, keeping the terminal (to read its modes after the exit).
    pub fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            assert!(
                Instant::now() < deadline,
                "did not exit:\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A test that fails (or forgets to wait) never leaves its child running:
/// a hung child once held a test binary for 17 minutes.
impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // SAFETY: our own fds, closed once, here; the terminal first, so
        // the recorder reads its end.
        unsafe {
            if let Some(fd) = self.held {
                libc::close(fd);
            }
            libc::close(self.master);
        }
    }
}
