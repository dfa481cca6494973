//! Receipts of calls that ran: a started receipt before the tool, the
//! outcome after; a call cut off by SIGKILL keeps its started receipt, and
//! `receipt verify` reports it without calling the chain broken.

mod common;

use common::{Env, Run};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};

const TOOLS: &str = "tools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\"]";

/// Autonomy full, `sleep` allowed: `tool run shell` runs it without asking.
fn shell_env() -> Env {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 60\n[security]\nautonomy = \"full\"\nshell_allowlist = [\"sleep\", \"echo\"]\n[channels.cli]\n{TOOLS}\n"
    ));
    env
}

fn tool_run(env: &Env, tool: &str, args: Value) -> (Run, Value) {
    env.json(&["tool", "run", tool, "--json", &args.to_string()])
}

fn statuses(env: &Env) -> Vec<String> {
    env.receipt_lines()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

/// Pids of live processes whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // latchclaw's own command line holds the marker in its --json.
            if text.contains(marker) && !text.contains("latchclaw") {
                found.push(pid);
            }
        }
    }
    found
}

/// Runs `tool run shell` with `sleep SECS` and SIGKILLs latchclaw while the
/// sleep runs; then kills the orphaned sleep (this test started it).
fn kill_mid_call(env: &Env, secs: &str) {
    let mut child = env
        .command(&[
            "tool",
            "run",
            "shell",
            "--json",
            &json!({ "command": format!("sleep {secs}") }).to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let sleeping = loop {
        let pids = pids_with(secs);
        if !pids.is_empty() {
            break pids;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "sleep never started"
        );
        assert!(child.try_wait().unwrap().is_none(), "latchclaw ended early");
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    for pid in sleeping {
        // SAFETY: signalling a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

#[test]
fn a_call_that_runs_leaves_started_then_outcome() {
    let env = Env::new();
    env.mock("file_list.toml", "", "");
    let (r, out) = tool_run(&env, "shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "allowed"]);
    let (start, done) = (&lines[0], &lines[1]);
    // The started receipt: the decision, no result yet.
    assert_eq!(
        (start["tool"].as_str(), start["risk"].as_str()),
        (Some("shell"), Some("low"))
    );
    assert!(
        start.get("result_hash").is_none() && start.get("started_id").is_none(),
        "{start}"
    );
    assert_eq!(start["args_hash"], done["args_hash"]);
    assert_eq!(start["reason"], done["reason"]);
    // The outcome names its start and follows it in the chain.
    assert_eq!(done["started_id"], start["id"]);
    assert_eq!(done["previous_hash"], start["receipt_hash"]);
    assert!(
        done["result_hash"].as_str().is_some_and(|h| h.len() == 64),
        "{done}"
    );
    // `tool run` reports the outcome's id and the start's.
    assert_eq!(out["receipt_id"], done["id"]);
    assert_eq!(out["started_receipt_id"], start["id"]);

    // A tool that changes nothing (file_list, time, file_read,
    // memory_search) leaves no effect if cut off: one receipt, after it ran.
    let (r, v) = env.json(&["agent", "-m", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["status"], "allowed");
    assert!(lines[2].get("started_id").is_none(), "{}", lines[2]);
    let call = &v["tool_calls"][0];
    assert_eq!(call["receipt_id"], lines[2]["id"]);
    assert_eq!(call["started_receipt_id"], Value::Null);
    assert_eq!(v["receipts_head"], lines[2]["receipt_hash"]);

    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: 3 receipts, head "), "{r:?}");
    assert_eq!(r.stdout.lines().count(), 1, "nothing unfinished: {r:?}");
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (v["ok"].as_bool(), v["receipts"].as_u64()),
        (Some(true), Some(3))
    );
    assert_eq!(v["unfinished"], json!([]));
    let r = env.run(&["receipt", "list"]);
    assert_eq!(
        r.stdout.lines().filter(|l| l.contains(" started ")).count(),
        1,
        "{r:?}"
    );
}

#[test]
fn a_call_killed_mid_run_keeps_its_started_receipt() {
    let env = shell_env();
    kill_mid_call(&env, "7.3131");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started"], "{lines:?}");
    let cut = lines[0]["id"].as_str().unwrap().to_string();
    assert_eq!(lines[0]["tool"], "shell");

    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "the chain is intact: {r:?}");
    assert!(r.stdout.starts_with("ok: 1 receipt, head "), "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "started, no outcome (the process was cut off): receipt 1 of 1, tool shell, id {cut}"
        )),
        "{r:?}"
    );

    // The next call chains on top; the cut-off call stays reported.
    let (r, _) = tool_run(&env, "shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "started", "allowed"]);
    assert_eq!(lines[1]["previous_hash"], lines[0]["receipt_hash"]);
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (v["ok"].as_bool(), v["receipts"].as_u64()),
        (Some(true), Some(3))
    );
    assert_eq!(v["head"], lines[2]["receipt_hash"]);
    let unfinished = v["unfinished"].as_array().unwrap();
    assert_eq!(unfinished.len(), 1, "{v}");
    assert_eq!(
        (
            unfinished[0]["position"].as_u64(),
            unfinished[0]["tool"].as_str(),
            unfinished[0]["id"].as_str(),
            unfinished[0]["conversation_id"].as_str(),
            unfinished[0]["status"].as_str(),
        ),
        (
            Some(1),
            Some("shell"),
            Some(cut.as_str()),
            Some("cli-tool-run"),
            Some("started, no outcome (the process was cut off)")
        )
    );

    // A second cut-off call: both are listed, in log order.
    kill_mid_call(&env, "7.3232");
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let at: Vec<u64> = v["unfinished"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["position"].as_u64().unwrap())
        .collect();
    assert_eq!(at, [1, 4], "{v}");
}

#[test]
fn a_denied_call_leaves_exactly_one_receipt() {
    let env = shell_env();
    let (r, out) = tool_run(&env, "shell", json!({"command": "rm -rf /"}));
    assert_eq!(r.code, 4, "{r:?}");
    let (r2, _) = tool_run(&env, "file_read", json!({"path": "/etc/passwd"}));
    assert_eq!(r2.code, 4, "{r2:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["denied", "denied"]);
    assert!(lines[0].get("started_id").is_none(), "{}", lines[0]);
    assert!(lines[0]["result_hash"].is_string(), "{}", lines[0]);
    assert_eq!(out["receipt_id"], lines[0]["id"]);
    assert_eq!(out["started_receipt_id"], Value::Null);
    // Under the emergency stop too.
    assert_eq!(env.run(&["estop"]).code, 0);
    let (r, _) = tool_run(&env, "shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(statuses(&env), ["denied", "denied", "denied"]);
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: 3 receipts"), "{r:?}");
}

#[test]
fn no_started_receipt_no_run() {
    // A torn last line: verify reports it as before, and the next call
    // writes no started receipt, so the tool does not run.
    let env = shell_env();
    let (r, _) = tool_run(&env, "shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    kill_mid_call(&env, "7.3333");
    let log = env.state.join("tool_receipts.log");
    let whole = std::fs::read_to_string(&log).unwrap();
    let torn = &whole[..whole.len() - 40];
    std::fs::write(&log, torn).unwrap();
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stdout.contains("receipt 3 of 3: torn line"), "{r:?}");
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!((r.code, v["broken_at"].as_u64()), (7, Some(3)), "{r:?}");
    let write = json!({"path": "out.txt", "content": "x"});
    let r = env.run(&["tool", "run", "file_write", "--json", &write.to_string()]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("torn"), "{r:?}");
    assert!(!env.ws.join("out.txt").exists(), "the tool did not run");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        torn,
        "nothing appended"
    );

    // A log that cannot be written at all (a directory in its place).
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    let r = env.run(&["tool", "run", "file_write", "--json", &write.to_string()]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("tool_receipts.log"), "{r:?}");
    assert!(!env.ws.join("out.txt").exists(), "the tool did not run");
}

#[test]
fn a_failed_call_pairs_like_any_other() {
    let env = shell_env();
    let (r, out) = tool_run(&env, "shell", json!({"command": "sleep x"}));
    assert_eq!(r.code, 3, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "failed"]);
    assert_eq!(lines[1]["started_id"], lines[0]["id"]);
    assert_eq!(out["receipt_id"], lines[1]["id"]);
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["unfinished"], json!([]));
}
