//! Unattended runs: a call that needs approval with no terminal is denied
//! now, kept as a pending approval, decided later by the operator, and runs
//! exactly once when the conversation resumes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::Value;

fn env() -> Env {
    let env = Env::new();
    env.mock(
        "write_report.toml",
        "",
        "[channels.cli]\ntools_allow = [\"file_write\", \"time\"]\n",
    );
    env
}

fn pending(env: &Env, all: bool) -> Vec<Value> {
    let args: &[&str] = if all {
        &["approvals", "list", "--all", "--json"]
    } else {
        &["approvals", "list", "--json"]
    };
    let (_, v) = env.json(args);
    v.as_array().unwrap().clone()
}

#[test]
fn pending_approval_lifecycle() {
    let env = env();
    let report = env.ws.join("report.txt");
    let (r, v) = env.json(&["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    let call = &v["tool_calls"][0];
    assert_eq!(call["status"], "denied");
    let id = call["pending_approval"].as_str().unwrap().to_string();
    assert!(!report.exists());

    let list = pending(&env, false);
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0]["id"].as_str(), list[0]["tool"].as_str()),
        (Some(id.as_str()), Some("file_write"))
    );
    assert_eq!(list[0]["conversation_id"], conv.as_str());
    assert_eq!(list[0]["arguments"]["path"], "report.txt");
    assert_eq!(list[0]["risk"], "medium");

    // No terminal and no --yes: approving is refused.
    let r = env.run(&["approve", &id]);
    assert!(r.code == 2 && r.stderr.contains("--yes"), "{r:?}");
    let r = env.run(&["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run(&["approve", &id, "--yes"]);
    assert!(
        r.code == 2 && r.stderr.contains("already approved"),
        "{r:?}"
    );

    // Resume: the model repeats the call and it runs, once.
    let (r, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["conversation_id"], conv.as_str());
    assert_eq!(v["tool_calls"][0]["status"], "approved");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "quarterly numbers"
    );
    let all = pending(&env, true);
    assert_eq!(all[0]["status"], "used");

    // The same request again is not pre-approved.
    std::fs::remove_file(&report).unwrap();
    let (r, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(!report.exists());
    let again = v["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(again, id);
    let statuses: Vec<String> = env
        .receipts()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["denied", "approved", "denied"]);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

#[test]
fn approval_is_for_one_conversation_and_deny_sticks() {
    let env = env();
    let (_, a) = env.json(&["agent", "-m", "write the report", "--json"]);
    let conv_a = a["conversation_id"].as_str().unwrap().to_string();
    let id_a = a["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(env.run(&["approve", &id_a, "--yes"]).code, 0);
    // A look-alike call in another conversation is not approved.
    let (r, b) = env.json(&["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_ne!(b["conversation_id"], conv_a.as_str());
    assert!(!env.ws.join("report.txt").exists());
    // Denying keeps it from running.
    let id_b = b["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    let conv_b = b["conversation_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["deny", &id_b]).code, 0);
    let (r, _) = env.json(&["agent", "--resume", &conv_b, "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(!env.ws.join("report.txt").exists());
    // The approved one still runs in its own conversation.
    let (r, _) = env.json(&["agent", "--resume", &conv_a, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("report.txt").exists());
    let r = env.run(&["approve", "approval-nope", "--yes"]);
    assert!(r.code == 2 && r.stderr.contains("no approval"), "{r:?}");
}

#[test]
fn a_write_repeated_at_once_opens_no_second_approval_before_or_after_resume() {
    let env = Env::new();
    env.mock(
        "write_twice.toml",
        "",
        "[channels.cli]\ntools_allow = [\"file_write\", \"time\"]\n",
    );
    let (r, v) = env.json(&["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    // The repeat was answered from the refusal: one pending approval.
    let list = pending(&env, false);
    assert_eq!(list.len(), 1, "{list:?}");
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["approve", &id, "--yes"]).code, 0);
    let (r, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["tool_calls"][0]["status"], "approved");
    // The model asked for the write again at once: not run, not queued.
    assert!(pending(&env, false).is_empty());
    let all = pending(&env, true);
    assert_eq!((all.len(), &all[0]["status"]), (1, &"used".into()));
    assert_eq!(
        std::fs::read_to_string(env.ws.join("report.txt")).unwrap(),
        "quarterly numbers"
    );
    // The resumed request gave the model the approved call's result.
    let reqs = env.requests();
    let m = reqs.iter().rev().find(|q| {
        q["request"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "wrote 17 bytes to report.txt")
    });
    assert!(m.is_some(), "{reqs:?}");
}

/// The model does not repeat the approved call after `--resume`: the
/// runtime runs it, once, and gives the model its result; the run does not
/// claim a success it did not have.
#[test]
fn an_approved_call_the_model_does_not_repeat_is_run_by_the_runtime_once() {
    let env = Env::new();
    env.mock(
        "forgets_approved.toml",
        "",
        "[channels.cli]\ntools_allow = [\"file_write\", \"time\"]\n",
    );
    let report = env.ws.join("report.txt");
    let (r, v) = env.json(&["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    let id = v["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(env.run(&["approve", &id, "--yes"]).code, 0);
    let (r, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let calls = v["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    assert_eq!(calls[0]["status"], "approved", "{v}");
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        "quarterly numbers"
    );
    // The model was given the result (the mock quotes what it got).
    let answer = v["answer"].as_str().unwrap_or_default();
    assert!(answer.starts_with("Resumed with: "), "{v}");
    assert!(answer.contains("report.txt"), "{v}");
    let all = pending(&env, true);
    assert_eq!((all.len(), &all[0]["status"]), (1, &"used".into()));
    // Resumed again: nothing approved is left, nothing runs again.
    std::fs::remove_file(&report).unwrap();
    let (r, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(v["tool_calls"].as_array().unwrap().is_empty(), "{v}");
    assert!(!report.exists());
    let statuses: Vec<String> = env
        .receipts()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["denied", "approved"]);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// A write waiting for the operator shows what it changes: a unified diff
/// against the file as it is now (a new file: its lines), escaped, in
/// `approvals list`, its `--json` (`preview`) and `approve`.
#[test]
fn a_pending_write_shows_its_diff() {
    let env = env();
    let report = env.ws.join("report.txt");
    // A new file: every line added.
    let (r, _) = env.json(&["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let list = pending(&env, false);
    let preview = list[0]["preview"].as_str().unwrap();
    assert_eq!(
        preview,
        "--- /dev/null (a new file)\n+++ b/report.txt\n@@ -0,0 +1,1 @@\n+quarterly numbers\n"
    );
    // The file there now: the diff is against it, computed when shown.
    std::fs::write(&report, "title\nlast year's numbers\n\u{1b}[2Jend\n").unwrap();
    let list = pending(&env, false);
    let preview = list[0]["preview"].as_str().unwrap();
    assert!(
        preview.starts_with("--- a/report.txt\n+++ b/report.txt\n@@ -1,3 +1,1 @@\n"),
        "{preview}"
    );
    for line in [
        "-title",
        "-last year's numbers",
        "-\\u{1b}[2Jend",
        "+quarterly numbers",
    ] {
        assert!(preview.lines().any(|l| l == line), "{line}: {preview}");
    }
    let text = env.run(&["approvals", "list"]);
    assert!(
        text.stdout
            .contains("    change:\n      --- a/report.txt\n"),
        "{text:?}"
    );
    assert!(
        text.stdout
            .contains("argument content: (17 bytes; the change below)"),
        "{text:?}"
    );
    assert!(!text.stdout.contains('\u{1b}'), "escaped: {text:?}");
    let id = list[0]["id"].as_str().unwrap();
    let r = env.run(&["approve", id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("    -last year's numbers\n    -\\u{1b}[2Jend\n    +quarterly numbers\n"),
        "{r:?}"
    );
}

/// A call `tool run` left pending: approving it says to run the same
/// `tool run` again (there is no conversation to resume), and that runs it.
#[test]
fn a_tool_run_call_approved_is_run_by_the_same_tool_run() {
    let env = env();
    let args = r#"{"path": "note.txt", "content": "hi"}"#;
    let (r, v) = env.json(&["tool", "run", "file_write", "--json", args]);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied", "{v}");
    let list = pending(&env, false);
    let id = list[0]["id"].as_str().unwrap().to_string();
    let r = env.run(&["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("latchclaw tool run file_write"), "{r:?}");
    assert!(!r.stdout.contains("--resume"), "{r:?}");
    let (r, _) = env.json(&["tool", "run", "file_write", "--json", args]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("note.txt")).unwrap(),
        "hi"
    );
}
