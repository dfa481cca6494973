//! Cron safety: `--lock`, `--timeout` and the record of every run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{Env, processes_with, wait_for_process};
use serde_json::Value;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn sleeper(shell_timeout: u64) -> Env {
    let env = Env::new();
    env.mock(
        "shell_cmd.toml",
        &format!("shell_timeout_secs = {shell_timeout}"),
        "[security]\nautonomy = \"full\"\nshell_allowlist = [\"sleep\"]\n\
         [channels.cli]\ntools_allow = [\"shell\"]\n",
    );
    env
}

#[test]
fn a_held_lock_refuses_a_second_run() {
    let env = sleeper(3);
    let first = env
        .command(&["agent", "--lock", "nightly", "-m", "run: sleep"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_process("30.5151", Duration::from_secs(10));
    let r = env.run(&["agent", "--lock", "nightly", "-m", "hi"]);
    assert_eq!(r.code, 8, "{r:?}");
    assert!(
        r.stderr.contains("another run holds the lock \"nightly\""),
        "{r:?}"
    );
    // Another name is not blocked.
    assert_eq!(env.run(&["agent", "--lock", "hourly", "-m", "hi"]).code, 0);
    let out = first.wait_with_output().unwrap();
    // The tool timed out; the agent still answered.
    assert_eq!(out.status.code(), Some(0));
    // Once released, the lock can be taken again.
    assert_eq!(env.run(&["agent", "--lock", "nightly", "-m", "hi"]).code, 0);
    let (_, runs) = env.json(&["runs", "list", "--json"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 4, "the refused run is recorded too: {runs:?}");
    assert!(runs.iter().all(|r| r["ended_at"].is_string()));
    let refused: Vec<_> = runs.iter().filter(|r| r["exit_code"] == 8).collect();
    assert_eq!(refused.len(), 1, "{runs:?}");
    assert!(
        refused[0]["exit_reason"]
            .as_str()
            .unwrap()
            .starts_with("locked: another run holds the lock \"nightly\""),
        "{refused:?}"
    );
    let slept = runs.iter().find(|r| r["lock_name"] == "nightly").unwrap();
    assert_eq!(slept["lock_name"], "nightly");
    assert!(
        slept["conversation_id"]
            .as_str()
            .unwrap()
            .starts_with("conv-")
    );
    let r = env.run(&["agent", "--lock", "../x", "-m", "hi"]);
    assert!(r.code == 2 && r.stderr.contains("not a lock name"), "{r:?}");
}

#[test]
fn timeout_bounds_a_running_tool() {
    let env = sleeper(60);
    let t = Instant::now();
    let r = env.run(&["agent", "--timeout", "1", "-m", "run: nap", "--json"]);
    let took = t.elapsed();
    assert_eq!(r.code, 6, "{r:?}");
    // Far under the 60 s nap; loose enough for a loaded 2-core CI machine.
    assert!(took < Duration::from_secs(10), "{took:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["exit_reason"], "timeout");
    let left = processes_with("30.6262");
    assert!(left.is_empty(), "the process group is gone: {left:?}");
    let (_, runs) = env.json(&["runs", "list", "--json"]);
    assert_eq!(runs[0]["exit_code"], 6);
}

#[test]
fn timeout_bounds_a_stuck_provider() {
    let server = fake_server::FakeServer::start(vec![fake_server::Reply::hang()]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"slow\"\n[providers.models.slow]\nkind = \"openai-compatible\"\n\
         base_url = \"{}/v1\"\ntimeout_secs = 30\nretries = 0\n",
        server.url()
    ));
    let t = Instant::now();
    let r = env.run(&["agent", "--timeout", "1", "-m", "hi"]);
    assert_eq!(r.code, 6, "{r:?}");
    // The wait for the server is abandoned at the deadline (not after the
    // provider's 30 s), and the turn ends as a timeout does.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // The marker goes to stderr; stdout (a report file) gets nothing.
    assert!(
        r.stderr
            .contains("[stopped: the run's --timeout of 1 s was reached]\n"),
        "{r:?}"
    );
    assert_eq!(r.stdout, "");
    let (_, runs) = env.json(&["runs", "list", "--json"]);
    assert_eq!(runs[0]["exit_code"].as_i64(), Some(6), "{runs}");
    // The user's turn was persisted before the provider was called.
    assert!(env.run(&["memory", "search", "hi"]).stdout.contains("user"));
}
