//! `tool run` on the real binary: the emergency stop's exit code, the next
//! step it suggests with no terminal, argument checking, `tool_timeout_secs`.

mod common;

use common::Env;
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

const TOOLS: &str = "tools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\"]";

fn env_with(autonomy: &str, top: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "{top}\n[security]\nautonomy = \"{autonomy}\"\nshell_allowlist = [\"sleep\", \"touch\"]\n[channels.cli]\n{TOOLS}\n"
    ));
    env
}

/// Live processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            // The command itself, not the latchclaw that names it.
            if text.contains(marker) && !text.contains("latchclaw") && !text.contains("tool_run-") {
                found.push(text);
            }
        }
    }
    found
}

#[test]
fn estop_killing_a_tool_run_command_exits_5() {
    let env = env_with("full", "shell_timeout_secs = 60");
    let child = env
        .command(&[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "sleep 31.7373"}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while processes_with("31.7373").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "sleep never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(env.run(&["estop"]).code, 0);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["metadata"]["estop"], true, "{v}");
    assert!(processes_with("31.7373").is_empty());
}

#[test]
fn a_call_that_ends_on_its_own_is_not_an_estop() {
    // Same command shape, no stop: the exit is not 5.
    let env = env_with("full", "");
    let (r, v) = env.json(&[
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "sleep 0.01"}"#,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "allowed");
    // An engaged stop refuses the next call, also with 5.
    assert_eq!(env.run(&["estop"]).code, 0);
    let (r, v) = env.json(&[
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "sleep 0.01"}"#,
    ]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(v["status"], "denied");
}

/// The hint between backticks after "then run".
fn suggested_command(reason: &str) -> String {
    let rest = reason
        .split("then run `")
        .nth(1)
        .unwrap_or_else(|| panic!("no rerun suggestion in: {reason}"));
    rest.split('`').next().unwrap().to_string()
}

#[test]
fn without_a_terminal_the_suggested_next_step_works() {
    let env = env_with("supervised", "");
    let args = r#"{"command": "touch \"it's-made.txt\""}"#;
    let (r, v) = env.json(&["tool", "run", "shell", "--json", args]);
    assert_eq!(r.code, 4, "{r:?}");
    let reason = v["reason"].as_str().unwrap();
    assert!(!reason.contains("--resume"), "{reason}");
    let id = reason
        .split("pending approval ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert!(
        reason.contains(&format!("`latchclaw approve {id}`")),
        "{reason}"
    );
    let again = suggested_command(reason);
    assert!(
        again.starts_with("latchclaw tool run shell --json "),
        "{again}"
    );
    assert!(!env.ws.join("it's-made.txt").exists());

    // Running the suggestion before approving is still refused.
    let sh = |cmd: &str| {
        let bin_dir = std::path::Path::new(common::BIN).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .env("PATH", path)
            .env("LATCHCLAW_HOME", &env.state)
            .env("HOME", &env.home)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, _) = sh(&format!("setsid {again}"));
    assert_eq!(code, 4);
    assert!(!env.ws.join("it's-made.txt").exists());

    assert_eq!(env.run(&["approve", id, "--yes"]).code, 0);
    let (code, out) = sh(&format!("setsid {again}"));
    assert_eq!(code, 0, "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "approved", "{v}");
    assert!(env.ws.join("it's-made.txt").exists());
    // The approval ran once: the same command asks again.
    let (code, _) = sh(&format!("setsid {again}"));
    assert_eq!(code, 4);
}
