//! SOPs (README: "SOPs"): the seed's daily-check under cron conditions,
//! validation in one pass, approvals bound to the SOP's hash, and exactly
//! once: kills at a step boundary and mid-step, then resume, proved by
//! canary files and receipts; concurrent resumes; `--timeout`.
// The `sop` feature (the minimal build refuses it: tests/features.rs).
#![cfg(feature = "sop")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, fixture, wait_for_process, wait_until};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;

const TOOLS: &str = "[channels.cli]\ntools_allow = [\"file_list\", \"file_read\", \"file_write\", \"shell\", \"time\"]\n";

/// A home whose mock summarises, at `autonomy`.
fn env(autonomy: &str) -> Env {
    let env = Env::new();
    env.mock(
        "sop_summary.toml",
        "",
        &format!("[security]\nautonomy = \"{autonomy}\"\nshell_allowlist = [\"sleep\", \"touch\", \"echo\"]\n{TOOLS}"),
    );
    env
}

fn put_sop(env: &Env, name: &str, text: &str) -> std::path::PathBuf {
    let dir = env.ws.join("sops").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("SOP.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn daily_check(env: &Env) -> std::path::PathBuf {
    let text = std::fs::read_to_string(fixture("sops/daily-check/SOP.toml")).unwrap();
    put_sop(env, "daily-check", &text)
}

/// `sop run --json` (or resume): the object and the run.
fn sop_json(env: &Env, args: &[&str]) -> (i32, Value) {
    let r = env.run(args);
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(v["exit_code"], r.code, "{r:?}");
    (r.code, v)
}

fn states(v: &Value) -> Vec<String> {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}={}",
                s["id"].as_str().unwrap(),
                s["state"].as_str().unwrap()
            )
        })
        .collect()
}

/// Receipts of tool calls made in a SOP step (`sop:NAME:HASH:RUN:STEP`).
fn receipts_of(env: &Env, step: &str, status: &str) -> usize {
    env.receipt_lines()
        .iter()
        .filter(|r| {
            r["conversation_id"]
                .as_str()
                .is_some_and(|c| c.starts_with("sop:") && c.ends_with(&format!(":{step}")))
                && r["status"] == status
        })
        .count()
}

#[test]
fn the_seeds_daily_check_parks_under_cron_then_approve_and_resume_write_the_summary() {
    let env = env("full");
    std::fs::write(env.ws.join("notes.txt"), "n").unwrap();
    let path = daily_check(&env);
    let r = env.run(&["sop", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    // No terminal (cron): lists, summarises, parks at the approval.
    let (code, v) = sop_json(&env, &["sop", "run", "daily-check", "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["status"], "waiting_approval");
    assert_eq!(
        states(&v),
        [
            "list=done",
            "summarize=done",
            "approval=waiting_approval",
            "write=pending"
        ]
    );
    let run = v["run_id"].as_str().unwrap().to_string();
    let approval = v["approval_id"].as_str().unwrap().to_string();
    assert!(
        v["steps"][1]["output"]
            .as_str()
            .unwrap()
            .contains("notes.txt"),
        "{v}"
    );
    assert!(!env.ws.join("daily-check.txt").exists());
    // `approvals list` shows the SOP and the step.
    let (_, list) = env.json(&["approvals", "list", "--json"]);
    let a = &list.as_array().unwrap()[0];
    assert_eq!(a["id"], approval.as_str());
    assert_eq!(a["arguments"]["sop"], "daily-check");
    assert_eq!(a["arguments"]["step"], "approval");
    assert_eq!(a["arguments"]["run"], run.as_str());
    // Resume before the approval: still parked.
    let (code, _) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 4);
    // Approving needs a person: a terminal or --yes.
    assert_eq!(env.run(&["sop", "approve", &run]).code, 2);
    let r = env.run(&["sop", "approve", &run, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!("latchclaw sop resume {run}")),
        "{r:?}"
    );
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    let written = std::fs::read_to_string(env.ws.join("daily-check.txt")).unwrap();
    assert!(written.starts_with("Daily summary:"), "{written}");
    assert!(written.contains("notes.txt"), "{written}");
    assert_eq!(written, v["steps"][1]["output"].as_str().unwrap());
    // The write's started receipt carries the SOP, its hash, the run, the step.
    let hash = crate::hash_of(&path);
    let started: Vec<Value> = env
        .receipt_lines()
        .into_iter()
        .filter(|r| r["tool"] == "file_write" && r["status"] == "started")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(
        started[0]["conversation_id"],
        format!("sop:daily-check:{}:{run}:write", &hash[..16])
    );
    // Resumed again: nothing runs twice.
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!((code, v["status"].as_str()), (0, Some("completed")));
    assert_eq!(receipts_of(&env, "write", "started"), 1);
    assert_eq!(receipts_of(&env, "list", "allowed"), 1);
    // runs and show.
    let (_, runs) = env.json(&["sop", "runs", "--json"]);
    assert_eq!(runs[0]["id"], run.as_str());
    let (_, show) = env.json(&["sop", "show", &run, "--json"]);
    assert_eq!(show["sop_hash"], hash.as_str());
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

fn hash_of(path: &std::path::Path) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(std::fs::read(path).unwrap());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn under_supervised_the_write_step_parks_too_never_skipped() {
    let env = env("supervised");
    daily_check(&env);
    let (code, v) = sop_json(&env, &["sop", "run", "daily-check", "--json"]);
    assert_eq!(code, 4, "{v}");
    let run = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["sop", "approve", &run, "--yes"]).code, 0);
    // The gate asks about file_write: the step parks, as a pending call.
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(
        states(&v),
        [
            "list=done",
            "summarize=done",
            "approval=done",
            "write=waiting_approval"
        ]
    );
    assert!(!env.ws.join("daily-check.txt").exists());
    let (_, list) = env.json(&["approvals", "list", "--json"]);
    let a = &list.as_array().unwrap()[0];
    assert_eq!(a["tool"], "file_write");
    assert!(
        a["conversation_id"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{run}:write"))
    );
    assert_eq!(env.run(&["sop", "approve", &run, "--yes"]).code, 0);
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(env.ws.join("daily-check.txt").exists());
    assert_eq!(receipts_of(&env, "write", "started"), 1);
}

#[test]
fn a_denied_approval_ends_the_run_denied() {
    let env = env("full");
    daily_check(&env);
    let (_, v) = sop_json(&env, &["sop", "run", "daily-check", "--json"]);
    let run = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["sop", "deny", &run]).code, 0);
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!((code, v["status"].as_str()), (4, Some("denied")), "{v}");
    assert!(!env.ws.join("daily-check.txt").exists());
}

#[test]
fn an_edited_sops_approval_is_refused() {
    let env = env("full");
    let path = daily_check(&env);
    let (_, v) = sop_json(&env, &["sop", "run", "daily-check", "--json"]);
    let run = v["run_id"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("daily-check.txt", "elsewhere.txt")).unwrap();
    let r = env.run(&["sop", "approve", &run, "--yes"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stderr.contains("changed since run"), "{r:?}");
    // Approved by its id anyway: the resume refuses the changed file.
    let (_, list) = env.json(&["approvals", "list", "--json"]);
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["approve", &id, "--yes"]).code, 0);
    let r = env.run(&["sop", "resume", &run]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stderr.contains("changed since run"), "{r:?}");
    assert!(!env.ws.join("elsewhere.txt").exists());
    assert!(!env.ws.join("daily-check.txt").exists());
}

#[test]
fn five_kinds_of_invalid_sop_are_reported_in_one_pass() {
    let env = env("full");
    put_sop(
        &env,
        "broken",
        r#"name = "broken"
[[steps]]
id = "one"
kind = "tool"
tool = "file_lst"
[[steps]]
id = "one"
kind = "approval"
[[steps]]
id = "three"
kind = "tool"
tool = "file_write"
args = { path = "x", content_from = "later" }
colour = "red"
[[steps]]
id = "later"
kind = "agent"
prompt = 3
"#,
    );
    daily_check(&env);
    let r = env.run(&["sop", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "step \"one\": tool: no tool \"file_lst\"; did you mean \"file_list\"?",
        "step \"one\": id: \"one\" is used by an earlier step",
        "step \"one\": prompt: missing",
        "step \"three\": args.content_from: \"later\" is not an earlier step",
        "step \"three\": colour: unknown key",
        "step \"later\": prompt: must be a string, not an integer",
    ] {
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
    assert!(r.stderr.contains("broken/SOP.toml: step"), "{r:?}");
    assert!(r.stdout.contains("daily-check: valid"), "{r:?}");
    assert_eq!(env.run(&["sop", "validate", "daily-check"]).code, 0);
    let r = env.run(&["sop", "run", "broken"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("6 errors"), "{r:?}");
    let r = env.run(&["sop", "run", "daily-chek"]);
    assert!(
        r.code == 2 && r.stderr.contains("did you mean \"daily-check\""),
        "{r:?}"
    );
    let (_, list) = env.json(&["sop", "list", "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    // Completions call back for SOP names (and run ids).
    let r = env.run(&["__complete", "sops"]);
    assert_eq!(r.stdout, "broken\ndaily-check\n", "{r:?}");
    let r = env.run(&["__complete", "sop-runs"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{r:?}");
}

/// A model can make links in the workspace (a snippet, `ln -s` under
/// `full`): a workspace SOP reached through one, a `SOP.toml` or a
/// directory leading out, is neither listed nor read, so latchclaw never
/// runs or quotes what it points at.
#[test]
fn a_sop_behind_a_symbolic_link_is_neither_listed_nor_read() {
    let env = env("full");
    daily_check(&env);
    let outside = env.root.join("outside");
    std::fs::create_dir_all(outside.join("elsewhere")).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOKEN_OUTSIDE_5521\n").unwrap();
    let text = std::fs::read_to_string(fixture("sops/daily-check/SOP.toml")).unwrap();
    std::fs::write(outside.join("elsewhere/SOP.toml"), text).unwrap();
    std::fs::create_dir_all(env.ws.join("sops/leak")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("secret.txt"),
        env.ws.join("sops/leak/SOP.toml"),
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("elsewhere"), env.ws.join("sops/away")).unwrap();
    let (_, list) = env.json(&["sop", "list", "--json"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, ["daily-check"], "{list}");
    for name in ["leak", "away"] {
        for args in [["sop", "run", name], ["sop", "validate", name]] {
            let r = env.run(&args);
            assert_ne!(r.code, 0, "{args:?}: {r:?}");
            assert!(
                !r.stdout.contains("TOKEN_OUTSIDE") && !r.stderr.contains("TOKEN_OUTSIDE"),
                "{args:?}: {r:?}"
            );
        }
    }
}

/// A canary write, a read-only wait for `go.txt` (a step boundary to be
/// killed at), a shell step that sleeps (to be killed in), a last write.
const CANARY: &str = r#"name = "canary"
[[steps]]
id = "first"
kind = "tool"
tool = "file_write"
args = { path = "first.txt", content = "1" }
[[steps]]
id = "wait"
kind = "tool"
tool = "file_list"
args = { path = "." }
until = { contains = "go.txt", max_attempts = 100, interval_secs = 1 }
[[steps]]
id = "slow"
kind = "tool"
tool = "shell"
args = { command = "touch slow.txt && sleep 41.7373" }
[[steps]]
id = "last"
kind = "tool"
tool = "file_write"
args = { path = "last.txt", content = "{{steps.first.output}}" }
"#;

fn current_run(env: &Env) -> String {
    let mut id = String::new();
    wait_until(Duration::from_secs(20), "a SOP run recorded", || {
        let r = env.run(&["sop", "runs", "--json"]);
        let v: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
        match v[0]["id"].as_str() {
            Some(s) => {
                id = s.to_string();
                true
            }
            None => false,
        }
    });
    id
}

#[test]
fn killed_at_a_boundary_and_mid_step_every_effect_happens_once() {
    let env = env("full");
    put_sop(&env, "canary", CANARY);
    let mut child = env
        .command(&["sop", "run", "canary"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = current_run(&env);
    // Killed while it waits at the read-only step, after the first write.
    wait_until(Duration::from_secs(20), "first.txt", || {
        env.ws.join("first.txt").exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    std::fs::write(env.ws.join("go.txt"), "").unwrap();
    // The read-only step runs again by itself; the first write does not.
    let mut child = env
        .command(&["sop", "resume", &run])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_process("41.7373", Duration::from_secs(20));
    // A second resume of the same run while this one moves: exit 8.
    let r = env.run(&["sop", "resume", &run]);
    assert_eq!(r.code, 8, "{r:?}");
    // Killed mid-effect, in the shell step.
    child.kill().unwrap();
    child.wait().unwrap();
    for p in common::processes_with("41.7373") {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.pid.to_string()])
            .status();
    }
    assert_eq!(receipts_of(&env, "first", "started"), 1);
    // Its effect may have happened: the run waits for the operator.
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["status"], "waiting_operator");
    assert_eq!(
        states(&v),
        ["first=done", "wait=done", "slow=unknown", "last=pending"]
    );
    assert!(
        v["message"].as_str().unwrap().contains("--retry-step slow"),
        "{v}"
    );
    assert!(!env.ws.join("last.txt").exists());
    // Still waiting until the operator says.
    assert_eq!(env.run(&["sop", "resume", &run]).code, 4);
    assert_eq!(
        env.run(&["sop", "resume", &run, "--retry-step", "first"])
            .code,
        2
    );
    // The operator checked slow.txt: the effect happened; skip it.
    assert!(env.ws.join("slow.txt").exists());
    let (code, v) = sop_json(
        &env,
        &["sop", "resume", &run, "--skip-step", "slow", "--json"],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        states(&v),
        ["first=done", "wait=done", "slow=skipped", "last=done"]
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("last.txt")).unwrap(),
        v["steps"][0]["output"].as_str().unwrap()
    );
    // Every effectful step's effect exactly once: one started receipt each.
    assert_eq!(receipts_of(&env, "first", "started"), 1);
    assert_eq!(receipts_of(&env, "slow", "started"), 1);
    assert_eq!(receipts_of(&env, "last", "started"), 1);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

#[test]
fn a_timeout_stops_the_run_resumably() {
    let env = env("full");
    put_sop(
        &env,
        "canary",
        &CANARY.replace("touch slow.txt && sleep 41.7373", "touch slow.txt"),
    );
    let (code, v) = sop_json(&env, &["sop", "run", "canary", "--timeout", "2", "--json"]);
    assert_eq!(
        (code, v["exit_reason"].as_str()),
        (6, Some("timeout")),
        "{v}"
    );
    assert_eq!(v["status"], "stopped");
    let run = v["run_id"].as_str().unwrap().to_string();
    std::fs::write(env.ws.join("go.txt"), "").unwrap();
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(receipts_of(&env, "first", "started"), 1);
    assert_eq!(receipts_of(&env, "slow", "started"), 1);
}

#[test]
fn on_failure_continue_goes_on_and_abort_stops() {
    let env = env("full");
    put_sop(
        &env,
        "fails",
        r#"name = "fails"
[[steps]]
id = "missing"
kind = "tool"
tool = "file_read"
args = { path = "nope.txt" }
on_failure = "continue"
[[steps]]
id = "retried"
kind = "tool"
tool = "file_read"
args = { path = "nope.txt" }
on_failure = { retry = 2, backoff_secs = 0 }
[[steps]]
id = "never"
kind = "tool"
tool = "file_write"
args = { path = "never.txt", content = "x" }
"#,
    );
    let (code, v) = sop_json(&env, &["sop", "run", "fails", "--json"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(
        states(&v),
        ["missing=failed", "retried=failed", "never=pending"]
    );
    assert_eq!(v["steps"][1]["attempts"], 3);
    assert!(!env.ws.join("never.txt").exists());
}

#[test]
fn ctrl_c_stops_a_run_resumably() {
    let env = env("full");
    put_sop(
        &env,
        "canary",
        &CANARY.replace("touch slow.txt && sleep 41.7373", "touch slow.txt"),
    );
    let child = env
        .command(&["sop", "run", "canary", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = current_run(&env);
    wait_until(Duration::from_secs(20), "first.txt", || {
        env.ws.join("first.txt").exists()
    });
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    );
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit_reason"], "cancelled", "{v}");
    assert_eq!(v["status"], "stopped");
    // Ended by the signal, as `agent` is (the shell sees 130).
    assert_eq!(v["exit_code"], 130);
    assert!(
        out.status.signal() == Some(libc::SIGINT) || out.status.code() == Some(130),
        "{out:?}"
    );
    std::fs::write(env.ws.join("go.txt"), "").unwrap();
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(receipts_of(&env, "first", "started"), 1);
    assert_eq!(receipts_of(&env, "last", "started"), 1);
}

use std::os::unix::process::ExitStatusExt;

#[test]
fn the_emergency_stop_stops_a_run_and_a_refused_step_runs_after_it() {
    let env = env("full");
    std::fs::write(env.ws.join("go.txt"), "").unwrap();
    put_sop(
        &env,
        "canary",
        &CANARY.replace("touch slow.txt && sleep 41.7373", "touch slow.txt"),
    );
    assert_eq!(env.run(&["estop"]).code, 0);
    let (code, v) = sop_json(&env, &["sop", "run", "canary", "--json"]);
    assert_eq!((code, v["status"].as_str()), (5, Some("stopped")), "{v}");
    // Refused before it ran: pending again, not unknown.
    assert_eq!(states(&v)[0], "first=pending");
    let run = v["run_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["estop", "--clear"]).code, 0);
    let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(receipts_of(&env, "first", "started"), 1);
}

#[test]
fn an_agent_step_has_its_own_tool_budget_and_named_inputs() {
    let env = env("full");
    std::fs::write(env.ws.join("notes.txt"), "aardvark").unwrap();
    put_sop(
        &env,
        "agent",
        r#"name = "agent"
[[steps]]
id = "read"
kind = "tool"
tool = "file_read"
args = { path = "notes.txt" }
[[steps]]
id = "now"
kind = "tool"
tool = "time"
[[steps]]
id = "sum"
kind = "agent"
prompt = "Sum it up."
inputs = ["read"]
max_tool_rounds = 0
[[steps]]
id = "save"
kind = "tool"
tool = "file_write"
args = { path = "out.txt", content = "{{steps.sum.output}}" }
"#,
    );
    let (code, v) = sop_json(&env, &["sop", "run", "agent", "--json"]);
    assert_eq!(code, 0, "{v}");
    let out = std::fs::read_to_string(env.ws.join("out.txt")).unwrap();
    assert!(
        out.contains("Sum it up.") && out.contains("aardvark"),
        "{out}"
    );
    // Only the input it names goes with the prompt.
    assert!(!out.contains("UTC"), "{out}");
}

/// Eight steps that each append their id to `log.txt` (the shell), killed
/// with SIGKILL at random moments over and over, resumed each time; the
/// test is the operator: a step left `unknown` is skipped when its line is
/// in the log and retried when it is not. At the end every line is there
/// exactly once, in order: no effect lost, none repeated.
#[test]
fn killed_at_random_moments_again_and_again_every_effect_happens_once() {
    let env = env("full");
    let mut text = String::from("name = \"appends\"\n");
    for i in 1..=8 {
        text.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\nkind = \"tool\"\ntool = \"shell\"\n\
             args = {{ command = \"echo s{i} >> log.txt; sleep 0.05\" }}\n"
        ));
    }
    put_sop(&env, "appends", &text);
    let log = env.ws.join("log.txt");
    let lines = || -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    };
    let mut rng = fastrand::Rng::with_seed(26);
    let mut run: Option<String> = None;
    let mut kills = 0;
    let mut decided = 0;
    for round in 0..60 {
        let mut args = match &run {
            None => vec!["sop".to_string(), "run".into(), "appends".into()],
            Some(r) => vec!["sop".to_string(), "resume".into(), r.clone()],
        };
        // The operator's decision on a step cut off mid-effect.
        if let Some(r) = &run {
            let (_, v) = env.json(&["sop", "show", r, "--json"]);
            if let Some(s) = v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["state"] == "unknown")
            {
                let id = s["id"].as_str().unwrap().to_string();
                let done = lines().contains(&id);
                decided += 1;
                args.push(if done { "--skip-step" } else { "--retry-step" }.into());
                args.push(id);
            }
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = env
            .command(&argv)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed at a random moment twenty times, then left to finish.
        let finish = round >= 20;
        if !finish {
            std::thread::sleep(Duration::from_millis(rng.u64(0..60)));
        }
        let status = if finish {
            child.wait().unwrap()
        } else {
            let _ = child.kill();
            kills += 1;
            child.wait().unwrap()
        };
        if run.is_none() {
            let (_, runs) = env.json(&["sop", "runs", "--json"]);
            run = runs[0]["id"].as_str().map(String::from);
            if run.is_none() {
                continue; // killed before the run was written: nothing happened
            }
        }
        if status.code() == Some(0) {
            break;
        }
    }
    let r = run.expect("a run");
    let (_, v) = env.json(&["sop", "show", &r, "--json"]);
    if v["status"] != "completed" {
        // The last round was a kill: finish it as the operator would.
        let mut args = vec!["sop", "resume", r.as_str()];
        let unknown = v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["state"] == "unknown")
            .map(|s| s["id"].as_str().unwrap().to_string());
        if let Some(id) = &unknown {
            args.push(if lines().contains(id) {
                "--skip-step"
            } else {
                "--retry-step"
            });
            args.push(id);
        }
        let out = env.run(&args);
        assert_eq!(out.code, 0, "{out:?}");
    }
    assert_eq!(
        lines(),
        ["s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"],
        "after {kills} kills and {decided} operator decisions"
    );
    eprintln!("{kills} kills, {decided} steps left unknown and decided by the operator");
    // Each step lasts at least 50 ms and a round at most 60 ms before its
    // kill, so no round finishes more than two steps: the run cannot end
    // before four kills however fast the machine.
    assert!(kills >= 4, "{kills}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// `--lock NAME` on `sop run`: a second run under the same name exits 8 at
/// once, running nothing (an agent run's lock is the same name space), and
/// the lock of a holder killed with SIGKILL is free again at once (the
/// kernel lets it go). Another name is not refused, but its tool call waits
/// for the running one (README: one call at a time), so it is not run here.
#[test]
fn a_held_lock_refuses_a_second_sop_run_and_dies_with_its_holder() {
    let env = env("full");
    let step = |id: &str, command: &str| {
        format!(
            "[[steps]]\nid = \"{id}\"\nkind = \"tool\"\ntool = \"shell\"\nargs = {{ command = \"{command}\" }}\n"
        )
    };
    put_sop(
        &env,
        "slow",
        &format!("name = \"slow\"\n{}", step("wait", "sleep 52.8383")),
    );
    put_sop(
        &env,
        "quick",
        &format!("name = \"quick\"\n{}", step("mark", "touch quick.txt")),
    );
    let mut first = env
        .command(&["sop", "run", "slow", "--lock", "nightly"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_process("52.8383", Duration::from_secs(10));
    let r = env.run(&["sop", "run", "quick", "--lock", "nightly"]);
    assert_eq!(r.code, 8, "{r:?}");
    assert!(
        r.stderr.contains("another run holds the lock \"nightly\""),
        "{r:?}"
    );
    assert!(!env.ws.join("quick.txt").exists());
    assert_eq!(env.run(&["agent", "--lock", "nightly", "-m", "hi"]).code, 8);
    // The holder killed outright: its lock goes with it.
    first.kill().unwrap();
    first.wait().unwrap();
    let r = env.run(&["sop", "run", "quick", "--lock", "nightly"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("quick.txt").exists());
}

/// SIGKILL at every step boundary and in the middle of every step of a
/// three-step SOP whose steps each append a line (the binary kills itself
/// at the exact point: `LATCHCLAW_TEST_KILL`, debug builds only), then
/// resumed by an operator who skips a step cut off after its effect and
/// retries one cut off before it. Each time: every line once, in order; one
/// started and one outcome receipt per step; a done step never re-run; a
/// step cut off mid-step waits for the operator (exit 4) unless its tool
/// was never called.
#[test]
fn killed_at_every_step_boundary_and_mid_step_every_effect_happens_once() {
    let mut points = vec!["created:run".to_string()];
    for s in ["s1", "s2", "s3"] {
        for p in ["started", "ran", "done"] {
            points.push(format!("{p}:{s}"));
        }
    }
    for point in &points {
        let env = env("full");
        let mut text = String::from("name = \"three\"\n");
        for i in 1..=3 {
            text.push_str(&format!(
                "[[steps]]\nid = \"s{i}\"\nkind = \"tool\"\ntool = \"shell\"\n\
                 args = {{ command = \"echo s{i} >> log.txt\" }}\n"
            ));
        }
        put_sop(&env, "three", &text);
        let lines = || -> Vec<String> {
            std::fs::read_to_string(env.ws.join("log.txt"))
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect()
        };
        let out = env
            .command(&["sop", "run", "three"])
            .env("LATCHCLAW_TEST_KILL", point)
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(9), "{point}: {out:?}");
        let (_, runs) = env.json(&["sop", "runs", "--json"]);
        let run = runs[0]["id"].as_str().unwrap().to_string();
        let mut operator = 0;
        for _ in 0..3 {
            let (_, v) = env.json(&["sop", "show", &run, "--json"]);
            if v["status"] == "completed" {
                break;
            }
            let mut args = vec!["sop".to_string(), "resume".into(), run.clone()];
            // `sop resume` marks a step found started `unknown` and stops.
            let (code, v) = sop_json(&env, &["sop", "resume", &run, "--json"]);
            if code == 0 {
                break;
            }
            assert_eq!(code, 4, "{point}: {v}");
            let unknown = v["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["state"] == "unknown")
                .map(|s| s["id"].as_str().unwrap().to_string())
                .unwrap_or_else(|| panic!("{point}: stopped with no unknown step: {v}"));
            operator += 1;
            let done = lines().contains(&unknown);
            args.push(if done { "--skip-step" } else { "--retry-step" }.into());
            args.push(unknown);
            let argv: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = env.run(&argv);
            assert_eq!(r.code, 0, "{point}: {r:?}");
        }
        let (_, v) = env.json(&["sop", "show", &run, "--json"]);
        assert_eq!(v["status"], "completed", "{point}: {v}");
        assert_eq!(lines(), ["s1", "s2", "s3"], "{point}");
        for s in ["s1", "s2", "s3"] {
            assert_eq!(receipts_of(&env, s, "started"), 1, "{point} {s}");
            assert_eq!(receipts_of(&env, s, "allowed"), 1, "{point} {s}");
        }
        // Only a kill between a call and its step's `done` leaves a step
        // whose effect is in doubt; one before the call does too (the
        // runner cannot know), and the operator's retry runs it once.
        let in_doubt = point.starts_with("ran:") || point.starts_with("started:");
        assert_eq!(operator, usize::from(in_doubt), "{point}");
        assert_eq!(env.run(&["receipt", "verify"]).code, 0, "{point}");
    }
}
