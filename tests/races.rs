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
const ROUNDS: usize = 40;

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

    let started = Instant::now();
    let env = Arc::new(env);
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let env = env.clone();
            std::thread::spawn(move || {
                let mut outputs = Vec::new();
                for round in 0..ROUNDS {
                    let calls = [
                        ("file_read", json!({"path": "d/canary.txt"})),
                        (
                            "file_write",
                            json!({"path": "d/out.txt", "content": format!("{i}-{round}")}),
                        ),
                        ("file_list", json!({"path": "d"})),
                    ];
                    for (tool, args) in calls {
                        let r = env.run(&["tool", "run", tool, "--json", &args.to_string()]);
                        outputs.push((tool, r));
                    }
                }
                outputs
            })
        })
        .collect();
    let outputs: Vec<_> = callers
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    let elapsed = started.elapsed();
    let swaps = swaps.load(Ordering::Relaxed);

    for (tool, r) in &outputs {
        assert!(
            !r.stdout.contains(CANARY) && !r.stderr.contains(CANARY),
            "{tool} leaked the outside canary: {r:?}"
        );
        assert!(
            !r.stdout.contains(MARKER),
            "{tool} listed the outside directory: {r:?}"
        );
    }
    let (mut ok, mut denied, mut refused) = (0, 0, 0);
    for (tool, r) in &outputs {
        let v: serde_json::Value =
            serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
        match v["status"].as_str() {
            Some("allowed") => {
                assert_eq!(r.code, 0, "{r:?}");
                if *tool == "file_read" {
                    assert_eq!(v["output"], "inside", "{r:?}");
                }
                ok += 1;
            }
            Some("denied") => {
                assert_eq!(r.code, 4, "{r:?}");
                denied += 1;
            }
            // The gate allowed it, then the tool found the swapped-in symlink.
            Some("failed") => {
                let err = v["error"].as_str().unwrap_or("");
                assert!(err.contains("symlink"), "{r:?}");
                refused += 1;
            }
            other => panic!("unexpected status {other:?}: {r:?}"),
        }
    }
    eprintln!(
        "{} calls ({ok} ran, {denied} denied by the gate, {refused} refused by the tool) \
         against {swaps} swaps in {elapsed:?}",
        outputs.len()
    );
    // The calls and the swaps really overlapped: some calls saw each state.
    assert!(swaps >= MIN_SWAPS);
    assert!(ok > 0 && denied > 0 && refused > 0);
    assert!(elapsed < Duration::from_secs(60));

    let mut names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["canary.txt", MARKER], "nothing is written outside");
    assert_eq!(
        std::fs::read_to_string(outside.join("canary.txt")).unwrap(),
        CANARY
    );
    assert!(std::fs::symlink_metadata(&d).unwrap().is_dir());
    let written = std::fs::read_to_string(d.join("out.txt")).unwrap();
    assert!(written.contains('-'), "{written}");
}
