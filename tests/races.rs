//! Check-to-use races on the file tools, against the real binary: a
//! workspace directory is swapped for a symlink to an outside directory (and
//! back) while `file_read`, `file_write` and `file_list` run through it. The
//! gate may well decide while the real directory is in place; the tool must
//! then refuse the symlink it finds instead of following it out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const CANARY: &str = "CANARY-text-that-lives-outside-the-workspace";
const MARKER: &str = "zz-only-in-the-outside-dir";
const MIN_SWAPS: usize = 1000;
const CALLERS: usize = 3;
/// Rounds (a read, a write and a listing) each caller runs at least...
const MIN_ROUNDS: usize = 40;
/// ...and at most, while one of the three outcomes has not been seen: on a
/// loaded machine the race window (the swap between the gate's decision
/// and the tool's open) can take many more calls to hit.
const MAX_ROUNDS: usize = 400;
/// One call's bound: a few milliseconds on an idle machine; a tool that
/// kept retrying against the swaps would not end.
const CALL_BOUND: Duration = Duration::from_secs(20);

/// How a call through the swapping directory ended.
#[derive(Clone, Copy)]
enum Outcome {
    /// The gate allowed it and it ran on the real directory.
    Ran,
    /// The gate saw the symlink and refused it.
    Denied,
    /// The gate allowed it, then the tool found the swapped-in symlink.
    Refused,
}

/// Checks one call's result: nothing of the outside directory in it, and
/// an exit code and status that agree. What it was.
fn outcome(tool: &str, r: &common::Run) -> Outcome {
    assert!(
        !r.stdout.contains(CANARY) && !r.stderr.contains(CANARY),
        "{tool} leaked the outside canary: {r:?}"
    );
    assert!(
        !r.stdout.contains(MARKER),
        "{tool} listed the outside directory: {r:?}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    match v["status"].as_str() {
        Some("allowed") => {
            assert_eq!(r.code, 0, "{r:?}");
            if tool == "file_read" {
                assert_eq!(v["output"], "inside", "{r:?}");
            }
            Outcome::Ran
        }
        Some("denied") => {
            assert_eq!(r.code, 4, "{r:?}");
            Outcome::Denied
        }
        Some("failed") => {
            assert_eq!(r.code, 3, "{r:?}");
            let err = v["error"].as_str().unwrap_or("");
            assert!(err.contains("symlink"), "{r:?}");
            Outcome::Refused
        }
        other => panic!("unexpected status {other:?}: {r:?}"),
    }
}

/// Sets the flag when dropped by a panic.
struct StopOnPanic(Arc<AtomicBool>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// The outside directory as the test made it: nothing written into it.
fn assert_untouched(outside: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["canary.txt", MARKER], "nothing is written outside");
    assert_eq!(
        std::fs::read_to_string(outside.join("canary.txt")).unwrap(),
        CANARY
    );
}

/// Atomically exchanges two names (renameat2 RENAME_EXCHANGE): `d` is at
/// every moment either the real directory or the symlink, never missing.
fn exchange(a: &Path, b: &Path) {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    if let Err(e) = renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE) {
        panic!("renameat2: {e}");
    }
}

#[test]
fn a_directory_swapped_for_a_symlink_never_leaks_or_receives_writes() {
    let env = Env::new();
    env.config(
        "[security]\nautonomy = \"full\"\n[channels.cli]\n\
         tools_allow = [\"file_list\", \"file_read\", \"file_write\"]\n",
    );
    let outside = env.root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("canary.txt"), CANARY).unwrap();
    std::fs::write(outside.join(MARKER), CANARY).unwrap();
    let d = env.ws.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("canary.txt"), "inside").unwrap();
    let swap = env.ws.join("d.swap");
    std::os::unix::fs::symlink(&outside, &swap).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps, d, swap) = (stop.clone(), swaps.clone(), d.clone(), swap.clone());
        std::thread::spawn(move || {
            // Even count: `d` ends as the real directory again.
            while !(stop.load(Ordering::Relaxed) && swaps.load(Ordering::Relaxed) >= MIN_SWAPS) {
                exchange(&d, &swap);
                exchange(&d, &swap);
                swaps.fetch_add(2, Ordering::Relaxed);
            }
        })
    };

    // Every call is checked as it ends, and the outside directory after
    // every round; the callers go on past MIN_ROUNDS until each outcome
    // was seen (by any of them), or MAX_ROUNDS.
    let started = Instant::now();
    let env = Arc::new(env);
    let seen: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (env, seen, outside) = (env.clone(), seen.clone(), outside.clone());
            let stop = stop.clone();
            std::thread::spawn(move || {
                // A caller that fails stops the others (and the swapper).
                let _abort = StopOnPanic(stop.clone());
                for round in 0..MAX_ROUNDS {
                    let all_seen = seen.iter().all(|n| n.load(Ordering::Relaxed) > 0);
                    if (round >= MIN_ROUNDS && all_seen) || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let calls = [
                        ("file_read", json!({"path": "d/canary.txt"})),
                        (
                            "file_write",
                            json!({"path": "d/out.txt", "content": format!("{i}-{round}")}),
                        ),
                        ("file_list", json!({"path": "d"})),
                    ];
                    for (tool, args) in calls {
                        let at = Instant::now();
                        let r = env.run(&["tool", "run", tool, "--json", &args.to_string()]);
                        let took = at.elapsed();
                        assert!(took < CALL_BOUND, "{tool} took {took:?}: {r:?}");
                        seen[outcome(tool, &r) as usize].fetch_add(1, Ordering::Relaxed);
                    }
                    assert_untouched(&outside);
                }
            })
        })
        .collect();
    for c in callers {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let elapsed = started.elapsed();
    let swaps = swaps.load(Ordering::Relaxed);
    let [ran, denied, refused] = [0, 1, 2].map(|o| seen[o].load(Ordering::Relaxed));
    eprintln!(
        "{} calls ({ran} ran, {denied} denied by the gate, {refused} refused by the tool) \
         against {swaps} swaps in {elapsed:?}",
        ran + denied + refused
    );
    // The calls and the swaps really overlapped: some calls saw each state.
    assert!(swaps >= MIN_SWAPS);
    assert!(
        ran > 0 && denied > 0 && refused > 0,
        "not every outcome within {MAX_ROUNDS} rounds: {ran} ran, {denied} denied, {refused} refused"
    );
    assert_untouched(&outside);
    assert!(std::fs::symlink_metadata(&d).unwrap().is_dir());
    let written = std::fs::read_to_string(d.join("out.txt")).unwrap();
    assert!(written.contains('-'), "{written}");
}
