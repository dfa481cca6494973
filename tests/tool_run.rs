//! `tool run` on the real binary: the emergency stop's exit code, the next
//! step it suggests with no terminal, argument checking, `tool_timeout_secs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BASIC_TOOLS, Env, processes_with, wait_for_process};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

fn env_with(autonomy: &str, top: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "{top}\n[security]\nautonomy = \"{autonomy}\"\nshell_allowlist = [\"sleep\", \"touch\"]\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    env
}

#[test]
fn estop_killing_a_tool_run_command_exits_5() {
    let env = env_with("full", "shell_timeout_secs = 60");
    let child = env
        .shell_command("sleep 31.7373")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_process("31.7373", Duration::from_secs(10));
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
    let (r, v) = env.shell("sleep 0.01");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "allowed");
    // An engaged stop refuses the next call, also with 5.
    assert_eq!(env.run(&["estop"]).code, 0);
    let (r, v) = env.shell("sleep 0.01");
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
            .current_dir(&env.root)
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

#[test]
fn tool_run_checks_arguments_against_the_schema_with_exit_2() {
    let env = env_with("full", "");
    std::fs::write(env.ws.join("note-b2.txt"), "MARKER-B2-READ").unwrap();
    let cases: [(&str, &str, &str); 5] = [
        (
            "file_read",
            r#"{"path": "note-b2.txt", "lines": 3}"#,
            "unknown argument \"lines\"; allowed: end_line (integer), line_numbers (boolean), max_lines (integer), path (string), start_line (integer)",
        ),
        (
            "time",
            r#"{"zone": "UTC"}"#,
            "unknown argument \"zone\"; it takes no arguments",
        ),
        (
            "memory_search",
            r#"{"query": "x", "limit": "5"}"#,
            "argument \"limit\" must be an integer, not a string",
        ),
        (
            "shell",
            r#"{"command": 7}"#,
            "argument \"command\" must be a string, not an integer",
        ),
        (
            "file_write",
            r#"{"path": "w-b2.txt"}"#,
            "missing required argument \"content\" (string)",
        ),
    ];
    for (tool, args, want) in cases {
        let r = env.run(&["tool", "run", tool, "--json", args]);
        assert_eq!(r.code, 2, "{tool} {args}: {r:?}");
        assert!(r.stderr.contains(want), "{tool} {args}: {r:?}");
        assert!(!r.stdout.contains("MARKER-B2-READ"), "{r:?}");
    }
    assert!(!env.ws.join("w-b2.txt").exists());
    // Nothing was judged or run: no receipts.
    assert!(env.receipt_lines().is_empty());
    // The right arguments work.
    let (r, v) = env.json(&[
        "tool",
        "run",
        "file_read",
        "--json",
        r#"{"path": "note-b2.txt"}"#,
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["output"], "MARKER-B2-READ");
}

#[test]
fn the_agent_returns_schema_errors_to_the_model() {
    let env = Env::new();
    env.mock(
        "bad_args.toml",
        "",
        &format!("[security]\nautonomy = \"full\"\n[channels.cli]\n{BASIC_TOOLS}\n"),
    );
    std::fs::write(env.ws.join("secret-b2.txt"), "MARKER-B2-SECRET").unwrap();
    let cases = [
        (
            "unknown field",
            "file_read: unknown argument \\\"lines\\\"; allowed: end_line (integer), line_numbers (boolean), max_lines (integer), path (string), start_line (integer)",
        ),
        (
            "wrong type",
            "memory_search: argument \\\"limit\\\" must be an integer, not a string",
        ),
        (
            "missing field",
            "file_write: missing required argument \\\"content\\\" (string)",
        ),
    ];
    for (i, (message, want)) in cases.iter().enumerate() {
        let (r, v) = env.json(&["agent", "--json", "-m", message]);
        assert_eq!(r.code, 0, "{r:?}");
        let call = &v["tool_calls"][0];
        assert_eq!(call["status"], "failed", "{v}");
        let reason = call["reason"].as_str().unwrap();
        assert!(reason.starts_with("invalid arguments: "), "{reason}");
        // What the model read in the next round is the tool error.
        let requests = env.requests();
        let last = requests.last().unwrap().to_string();
        assert!(last.contains(want), "{want} not in {last}");
        assert!(!last.contains("MARKER-B2-SECRET"));
        let receipts = env.receipts();
        assert_eq!(receipts.len(), i + 1);
        assert_eq!(receipts[i]["status"], "failed");
        assert_eq!(receipts[i]["reason"], reason);
    }
    // A tool the model made up is not a decision for the gate: it cannot
    // run, and the model is told which tools it has.
    let (r, v) = env.json(&["agent", "--json", "-m", "invented tool"]);
    assert_eq!(r.code, 0, "{r:?}");
    let call = &v["tool_calls"][0];
    assert_eq!(
        (&call["tool"], &call["status"]),
        (&json!("launch_missiles"), &json!("failed")),
        "{v}"
    );
    let last = env.requests().last().unwrap().to_string();
    assert!(
        last.contains(
            "unknown tool \\\"launch_missiles\\\"; the tools on this channel: time, file_list"
        ),
        "{last}"
    );
    assert_eq!(env.receipts().last().unwrap()["tool"], "launch_missiles");
    assert!(!env.ws.join("out-b2.txt").exists());
    // No call was started: nothing ran.
    assert!(env.receipt_lines().iter().all(|r| r["status"] != "started"));
}

/// `shell`'s own inputs: `cwd` judged as a leading `cd DIR &&` (inside the
/// workspace, a directory), `timeout_ms` and `max_output_chars` only ever
/// shorter than the configured limits, and `truncated` when output is cut.
#[test]
fn shell_takes_cwd_timeout_and_an_output_limit() {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 60\ntool_output_max_bytes = 2048\n[security]\nautonomy = \"full\"\n\
         shell_allowlist = [\"sleep\", \"touch\", \"cat\"]\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    std::fs::create_dir_all(env.ws.join("sub/deeper")).unwrap();
    std::fs::write(env.ws.join("sub/a.txt"), "in sub\n").unwrap();
    std::fs::write(env.ws.join("top.txt"), "x".repeat(5000)).unwrap();
    let (r, v) = env.tool("shell", json!({"command": "cat a.txt", "cwd": "sub"}));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["output"], "in sub\n");
    assert_eq!(v["metadata"]["truncated"], false, "{v}");
    // By effect: the file lands in the directory named.
    let (r, _) = env.tool(
        "shell",
        json!({"command": "touch made.txt", "cwd": "sub/deeper"}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("sub/deeper/made.txt").exists());
    assert!(!env.ws.join("made.txt").exists());
    // Refused as a `cd` there would be, before anything runs.
    for (cwd, want) in [
        ("..", "outside the workspace"),
        ("/etc", "forbidden path"),
        ("top.txt", "not a directory"),
        ("sub'x", "quote"),
    ] {
        let (r, v) = env.tool("shell", json!({"command": "touch escaped.txt", "cwd": cwd}));
        assert_eq!(
            (r.code, v["status"].as_str()),
            (4, Some("denied")),
            "{cwd}: {v}"
        );
        assert!(v.to_string().contains(want), "{cwd}: {v}");
    }
    assert!(!env.root.join("escaped.txt").exists() && !env.ws.join("escaped.txt").exists());
    // A command that changes directory again is refused with it.
    let (r, _) = env.tool(
        "shell",
        json!({"command": "cd deeper && touch x", "cwd": "sub"}),
    );
    assert_eq!(r.code, 4, "{r:?}");
    assert!(!env.ws.join("sub/deeper/x").exists());

    // timeout_ms: shorter than shell_timeout_secs, the command is stopped.
    let (r, v) = env.tool("shell", json!({"command": "sleep 30", "timeout_ms": 300}));
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["metadata"]["timed_out"], true, "{v}");
    // max_output_chars: cut, and said so.
    std::fs::write(env.ws.join("small.txt"), "é".repeat(800)).unwrap();
    let (r, v) = env.tool(
        "shell",
        json!({"command": "cat small.txt", "max_output_chars": 100}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.starts_with(&"é".repeat(100))
            && out.ends_with(
                "\n…[truncated: showing the first 100 of 800 characters (max_output_chars)]"
            ),
        "{out}"
    );
    assert_eq!(v["metadata"]["truncated"], true, "{v}");
    assert_eq!(v["measured"]["truncated"], true, "{v}");
    // Asking for more than tool_output_max_bytes gets no more.
    let (_, v) = env.tool(
        "shell",
        json!({"command": "cat top.txt", "max_output_chars": 1000000}),
    );
    assert!(v["output"].as_str().unwrap().len() < 2200, "{v}");
    assert_eq!(v["metadata"]["truncated"], true, "{v}");
    // Bad values are the model's to fix.
    for args in [
        json!({"command": "true", "timeout_ms": 0}),
        json!({"command": "true", "max_output_chars": -1}),
    ] {
        let (r, _) = env.tool("shell", args.clone());
        assert_ne!(r.code, 0, "{args}");
    }
}

/// A call's `timeout_ms` cannot outlast the configured limit.
#[test]
fn shell_timeout_ms_is_capped_by_the_configuration() {
    let env = env_with("full", "shell_timeout_secs = 1");
    let (r, v) = env.tool(
        "shell",
        json!({"command": "sleep 30", "timeout_ms": 600000}),
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["metadata"]["timed_out"], true, "{v}");
    assert!(v["error"].as_str().unwrap().contains("timed out"), "{v}");
}
