//! `agent` as scripts see it: one `--json` object however the run ends,
//! the per-run flags, the no-setup path and the record of every run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, fixture, lit, wait_until};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The one line of `--json` output, parsed; anything else on stdout fails.
fn object(r: &common::Run) -> Value {
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stdout: {r:?}");
    let v: Value = serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(v["schema"], 1, "{v}");
    assert_eq!(v["exit_code"].as_i64(), Some(r.code as i64), "{v}");
    v
}

/// A mock provider whose every call waits `ms` first,
/// like a slow server; the wait ends at the deadline or Ctrl-C).
fn slow(env: &Env, ms: u64) {
    let f = env.root.join("slow.toml");
    std::fs::write(
        &f,
        format!("delay_ms = {ms}\n[[script]]\n[[script.responses]]\ntext = \"slow answer\"\n"),
    )
    .unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\nrecord_requests = {}\n",
        lit(&f),
        lit(&env.root.join("requests.jsonl"))
    ));
}

fn runs(env: &Env) -> Vec<Value> {
    let (r, v) = env.json(&["runs", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    v.as_array().unwrap().clone()
}

#[test]
fn json_object_when_the_provider_fails_or_the_config_is_bad() {
    let env = Env::new();
    env.mock("server_error.toml", "", "");
    let r = env.run(&["agent", "-m", "hi", "--json"]);
    assert_eq!(r.code, 3, "{r:?}");
    let v = object(&r);
    assert_eq!(v["exit_reason"], "error");
    assert!(!v["error"].as_str().unwrap().is_empty(), "{v}");
    assert!(v["conversation_id"].as_str().unwrap().starts_with("conv-"));
    let rec = &runs(&env)[0];
    assert_eq!(rec["exit_code"], 3);
    assert!(rec["exit_reason"].as_str().unwrap().starts_with("error: "));
    assert_eq!(rec["conversation_id"], v["conversation_id"]);

    // A config that parses as TOML but not as a config: after argument
    // parsing, before any run.
    env.config("max_tool_rounds = \"many\"");
    let r = env.run(&["agent", "--json", "hi"]);
    assert_eq!(r.code, 2, "{r:?}");
    let v = object(&r);
    assert_eq!(v["exit_reason"], "usage");
    assert!(
        v["error"].as_str().unwrap().contains("max_tool_rounds"),
        "{v}"
    );
    assert!(v["conversation_id"].is_null());
}

#[test]
fn an_unknown_provider_names_the_configured_ones() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    let r = env.run(&["agent", "--provider", "nope", "-m", "hi", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let v = object(&r);
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("\"nope\"") && e.contains("configured providers: m, mock"),
        "{e}"
    );
    assert!(r.stderr.contains("configured providers: m, mock"), "{r:?}");
}

#[test]
fn a_refused_lock_is_one_object_and_a_recorded_run() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    std::fs::create_dir_all(env.state.join("locks")).unwrap();
    let held = std::fs::File::create(env.state.join("locks/job-a.lock")).unwrap();
    held.lock().unwrap();
    let r = env.run(&["agent", "--lock", "job-a", "-m", "hi", "--json"]);
    assert_eq!(r.code, 8, "{r:?}");
    let v = object(&r);
    assert_eq!(v["exit_reason"], "locked");
    assert!(v["error"].as_str().unwrap().contains("\"job-a\""), "{v}");
    let rec = &runs(&env)[0];
    assert_eq!(
        (rec["exit_code"].as_i64(), &rec["lock_name"]),
        (Some(8), &"job-a".into())
    );
    assert!(rec["exit_reason"].as_str().unwrap().starts_with("locked: "));
}

#[test]
fn the_timeout_prints_the_object_and_keeps_the_conversation() {
    let env = Env::new();
    slow(&env, 6000);
    let t = Instant::now();
    let r = env.run(&["agent", "--timeout", "1", "-m", "hi", "--json"]);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(r.code, 6, "{r:?}");
    let v = object(&r);
    assert_eq!(v["exit_reason"], "timeout");
    assert!(
        v["error"].as_str().unwrap().contains("--timeout of 1 s"),
        "{v}"
    );
    let conv = v["conversation_id"].as_str().unwrap();
    assert!(conv.starts_with("conv-"), "{v}");
    let rec = &runs(&env)[0];
    assert_eq!(rec["exit_code"], 6);
    assert_eq!(rec["conversation_id"], conv);
    assert!(
        rec["exit_reason"]
            .as_str()
            .unwrap()
            .starts_with("timeout: ")
    );
    // The user's turn is there to continue from.
    let r = env.run(&["memory", "show", conv]);
    assert!(r.stdout.contains("user: hi"), "{r:?}");
}

#[test]
fn ctrl_c_prints_the_object_and_records_the_run_as_cancelled() {
    let env = Env::new();
    slow(&env, 1500);
    let child = env
        .command(&["agent", "-m", "hi", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The request is recorded just before the provider call starts.
    let requests = env.root.join("requests.jsonl");
    wait_until(Duration::from_secs(10), "never called", || {
        requests.exists()
    });
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    );
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["schema"].as_i64(), v["exit_code"].as_i64()),
        (Some(1), Some(130))
    );
    assert_eq!(v["exit_reason"], "cancelled", "{v}");
    let rec = &runs(&env)[0];
    assert_eq!(rec["exit_code"], 130);
    assert!(
        rec["exit_reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled: ")
    );
    assert_eq!(rec["conversation_id"], v["conversation_id"]);
}

#[test]
fn per_run_provider_model_system_and_workspace() {
    let env = Env::new();
    let other = env.root.join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("only-here-7731.txt"), "x").unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n\
         [providers.models.n]\nkind = \"mock\"\nfixture = {}\nrecord_requests = {}\n",
        lit(&fixture("hello.toml")),
        lit(&fixture("file_list.toml")),
        lit(&env.root.join("requests.jsonl"))
    ));
    let r = env.run(&[
        "agent",
        "--provider",
        "n",
        "--model",
        "tiny-9b",
        "--system",
        "You are a terse robot 4412.",
        "-w",
        other.to_str().unwrap(),
        "list the files",
        "--json",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = object(&r);
    assert_eq!(
        (&v["provider"], &v["model"]),
        (&"n".into(), &"tiny-9b".into())
    );
    // The gate listed -w's directory, not workspace_dir.
    assert!(
        v["answer"].as_str().unwrap().contains("only-here-7731.txt"),
        "{v}"
    );
    let req = &env.requests()[0]["request"];
    assert_eq!(req["model"], "tiny-9b");
    let system = req["system_prompt"].as_str().unwrap();
    assert!(
        system.starts_with("You are a terse robot 4412."),
        "{system}"
    );
    assert!(!system.contains("You are LatchClaw"), "{system}");
    assert!(system.contains(other.to_str().unwrap()), "{system}");
    // The default provider otherwise: `m` answers hello.
    let (_, v) = env.json(&["agent", "hi", "--json"]);
    assert_eq!(
        (&v["provider"], &v["answer"]),
        (&"m".into(), &"hello".into())
    );
}

#[test]
fn a_missing_run_workspace_is_a_plain_error_not_a_denial() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    let gone = env.root.join("no-such-dir");
    let r = env.run(&["agent", "-w", gone.to_str().unwrap(), "-m", "hi"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("does not exist") && r.stderr.contains("mkdir -p"),
        "{r:?}"
    );
    assert!(!r.stderr.contains("denied"), "{r:?}");
}

#[test]
fn no_memory_saves_no_turns_but_records_the_run() {
    let env = Env::new();
    env.mock("file_list.toml", "", "");
    std::fs::write(env.ws.join("a.txt"), "x").unwrap();
    let (r, v) = env.json(&["agent", "--no-memory", "-m", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(v["answer"].as_str().unwrap().contains("a.txt"), "{v}");
    let (_, list) = env.json(&["memory", "list", "--json"]);
    assert_eq!(list, serde_json::json!([]), "no conversation saved");
    let (_, hits) = env.json(&["memory", "search", "list", "--json"]);
    assert_eq!(hits, serde_json::json!([]));
    // The run and the tool's receipt are kept.
    assert_eq!(runs(&env).len(), 1);
    assert!(!env.receipts().is_empty());
}

#[test]
fn quiet_drops_the_notes_on_stderr() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    std::fs::remove_dir_all(&env.ws).unwrap();
    let r = env.run(&["agent", "-q", "-m", "hi"]);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (0, "hello\n", ""),
        "{r:?}"
    );
    assert!(env.ws.is_dir(), "created on first use");
    std::fs::remove_dir_all(&env.ws).unwrap();
    let r = env.run(&["agent", "-m", "hi"]);
    assert!(r.stderr.contains("created the workspace"), "{r:?}");
}

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn no_setup_reads_create_nothing_and_agent_creates_private_state() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    for (args, says) in [
        (&["memory", "list"][..], "no conversations yet"),
        (&["runs", "list"], "no runs yet"),
        (&["receipt", "list"], "no receipts yet"),
        (&["approvals", "list"], "no pending approvals"),
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {r:?}");
        assert!(!env.state.exists(), "{args:?} created the state dir");
    }
    let (r, v) = env.json(&["runs", "list", "--json"]);
    assert_eq!((r.code, v), (0, serde_json::json!([])));
    assert!(!env.state.exists());

    // No config, no state dir, no workspace: the defaults work.
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(mode(&env.state), 0o700);
    for f in ["memory.sqlite", "memory.sqlite-wal", "memory.sqlite-shm"] {
        assert_eq!(mode(&env.state.join(f)), 0o600, "{f}");
    }
    assert!(env.home.join("latchclaw-workspace").is_dir());
}

#[test]
fn runs_list_columns_line_up_with_long_names() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    assert_eq!(env.run(&["agent", "-m", "hi"]).code, 0);
    let long = "a-very-long-lock-name-for-the-nightly-job";
    assert_eq!(env.run(&["agent", "--lock", long, "-m", "hi"]).code, 0);
    let r = env.run(&["runs", "list"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{r:?}");
    let at = |l: &str, word: &str| l.find(word).unwrap_or_else(|| panic!("{word} in {l}"));
    let col = at(lines[0], "CONVERSATION");
    for l in &lines[1..] {
        assert_eq!(at(l, "conv-"), col, "{r:?}");
    }
    assert!(lines[1].contains(long), "{r:?}");
}
