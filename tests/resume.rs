//! A conversation whose run stopped mid-round — killed during a tool,
//! stopped by `--timeout`, waiting for an approval, a provider error, a
//! receipt that could not be written, or stored by an older latchclaw — is
//! continued with `agent --resume` against a server that enforces OpenAI's
//! rule for tool calls (`fake_server::strict_openai`): every call answered,
//! no result without its call. Each continuation must succeed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;
#[path = "common/pty.rs"]
mod pty;

use common::{Env, Run, processes_with, wait_for_process, wait_until};
use fake_server::{FakeServer, Recorded, Reply, pairing_error, strict_openai};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What the resumed run's provider answers when it has nothing to call.
const RESUMED: &str = "Resumed and answered.";
/// What latchclaw says to the model on `--resume` without a message.
const RESUME_MESSAGE: &str = "The operator has decided";

/// A chat completion calling `calls` (id, tool, arguments).
fn calls(calls: &[(&str, &str, Value)]) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    Reply::json(
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "finish_reason": "tool_calls",
                            "message": {"role": "assistant", "content": null,
                                        "tool_calls": tool_calls}}]})
        .to_string(),
    )
}

fn text(answer: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": answer}}]})
        .to_string(),
    )
}

fn messages(req: &Recorded) -> Vec<Value> {
    req.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The text of the last message, and whether it is a tool result.
fn last(req: &Recorded) -> (String, bool) {
    let m = messages(req);
    let l = m.last().cloned().unwrap_or_default();
    (
        l["content"].as_str().unwrap_or("").to_string(),
        l["role"] == "tool",
    )
}

/// The state dir, workspace and a provider pointing at `server`, under
/// `autonomy`, with `sleep` and `echo` on the shell allowlist.
fn env_for(server: &FakeServer, autonomy: &str, extra_top: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"strict\"\nshell_timeout_secs = 60\n{extra_top}\n\
         [providers.models.strict]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         model = \"gpt-4o-mini\"\nretries = 0\ntimeout_secs = 10\n\
         [security]\nautonomy = \"{autonomy}\"\nshell_allowlist = [\"sleep\", \"echo\"]\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\"]\n",
        server.url()
    ));
    env
}

/// No request the server got broke the pairing rule.
fn assert_all_paired(server: &FakeServer) {
    for (i, r) in server.requests().iter().enumerate() {
        if let Some(reply) = pairing_error(&r.json()) {
            panic!(
                "request {i} breaks the pairing rule: {}\n{}",
                String::from_utf8_lossy(&reply.body),
                r.body
            );
        }
    }
}

/// The only conversation in the memory.
fn conversation(env: &Env) -> String {
    let (r, v) = env.json(&["memory", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    v[0]["conversation_id"].as_str().unwrap().to_string()
}

/// `agent --resume CONV --json`, which must end well with `answer`.
fn resume(env: &Env, server: &FakeServer, conv: &str, answer: &str) -> (Run, Value) {
    let (r, v) = env.json(&["agent", "--resume", conv, "--json"]);
    assert_eq!((r.code, v["answer"].as_str()), (0, Some(answer)), "{r:?}");
    assert_all_paired(server);
    (r, v)
}

/// The tool messages of the last request, by call id.
fn results_sent(server: &FakeServer) -> Vec<(String, String)> {
    let reqs = server.requests();
    messages(reqs.last().unwrap())
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn killed_during_a_slow_tool_then_resumed() {
    let server = strict_openai(|req, _| match last(req) {
        (_, true) => text("after the nap"),
        (t, false) if t.contains("take a nap") => calls(&[
            ("call_nap", "shell", json!({"command": "sleep 7.4646"})),
            ("call_time", "time", json!({})),
        ]),
        _ => text(RESUMED),
    });
    let env = env_for(&server, "full", "");
    let mut child = env
        .command(&["agent", "-m", "take a nap"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut sleeping = Vec::new();
    wait_until(Duration::from_secs(15), "sleep never started", || {
        assert!(child.try_wait().unwrap().is_none(), "latchclaw ended early");
        sleeping = processes_with("7.4646");
        !sleeping.is_empty()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    for p in sleeping {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p.pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
    let conv = conversation(&env);
    resume(&env, &server, &conv, RESUMED);
    // Nothing of the cut round was stored, so nothing half of it is sent;
    // the receipts keep the call that was cut off.
    let sent = messages(server.requests().last().unwrap());
    assert!(
        sent.iter()
            .all(|m| m["role"] != "tool" && m.get("tool_calls").is_none()),
        "{sent:?}"
    );
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["unfinished"][0]["tool"], "shell", "{v}");
}

#[test]
fn stopped_by_timeout_mid_tool_then_resumed() {
    let server = strict_openai(|req, _| match last(req) {
        (_, true) => text("after the naps"),
        (t, false) if t.contains("two naps") => calls(&[
            ("call_a", "shell", json!({"command": "sleep 30.4747"})),
            ("call_b", "shell", json!({"command": "echo second"})),
        ]),
        _ => text(RESUMED),
    });
    let env = env_for(&server, "full", "");
    let t0 = Instant::now();
    let (r, v) = env.json(&["agent", "-m", "two naps", "--timeout", "3", "--json"]);
    assert_eq!(
        (r.code, v["exit_reason"].as_str()),
        (6, Some("timeout")),
        "{r:?}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let left = processes_with("30.4747");
    assert!(left.is_empty(), "the sleep was killed: {left:?}");
    let conv = conversation(&env);
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0].0, "call_a");
    assert!(results[0].1.contains("timed out"), "{results:?}");
    // The second call never started: its result says so.
    assert_eq!(results[1].0, "call_b");
    assert!(
        results[1]
            .1
            .starts_with("no result: not run, the run was stopped (--timeout)"),
        "{results:?}"
    );
    assert_eq!(env.receipts().len(), 1, "only the first call ran");
}

#[test]
fn stopped_by_the_timeout_while_waiting_for_approval_then_resumed() {
    // The operator never answers; at the deadline the question is given up,
    // the call waits as a pending approval (exit 4) and the round is stored
    // with a result saying so.
    let server = strict_openai(|req, _| match last(req) {
        (_, true) => text("after the write"),
        (t, false) if t.contains("write the note") => calls(&[(
            "call_w",
            "file_write",
            json!({"path": "note.txt", "content": "x"}),
        )]),
        _ => text(RESUMED),
    });
    let env = env_for(&server, "supervised", "");
    let mut p = pty::Pty::spawn(&env, &["agent", "-m", "write the note", "--timeout", "3"]);
    p.expect("Approve? [y/N");
    assert_eq!(p.wait(), Some(4));
    let conv = conversation(&env);
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].0, "call_w");
    assert!(
        results[0]
            .1
            .contains("no answer before the run's --timeout of 3 s was reached")
            && results[0]
                .1
                .contains("it waits for the operator's approval"),
        "{results:?}"
    );
    assert!(!env.ws.join("note.txt").exists());
}

/// A server for the approval tests: it calls file_write when asked to,
/// calls it again when latchclaw says the operator approved it, and
/// otherwise answers.
fn approval_server() -> FakeServer {
    strict_openai(|req, _| {
        let write = || {
            calls(&[(
                "call_w",
                "file_write",
                json!({"path": "greeting.txt", "content": "hello"}),
            )])
        };
        let approved = messages(req).iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains("the operator approved this call"))
        });
        match last(req) {
            (_, true) => text("Done, or waiting for approval."),
            (t, false) if t.contains("write a greeting") => write(),
            (t, false) if t.contains(RESUME_MESSAGE) && approved => write(),
            _ => text(RESUMED),
        }
    })
}

/// A run with no terminal leaves its write pending; returns the
/// conversation and the approval id.
fn pending_write(env: &Env) -> (String, String) {
    let (r, v) = env.json(&["agent", "-m", "write a greeting", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let id = v["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    (v["conversation_id"].as_str().unwrap().to_string(), id)
}

#[test]
fn a_pending_approval_approved_then_resumed() {
    let server = approval_server();
    let env = env_for(&server, "supervised", "");
    let (conv, id) = pending_write(&env);
    assert_all_paired(&server);
    assert_eq!(env.run(&["approve", &id, "--yes"]).code, 0);
    let (_, v) = env.json(&["agent", "--resume", &conv, "--json"]);
    assert_eq!(
        (v["exit_code"].as_i64(), v["answer"].as_str()),
        (Some(0), Some("Done, or waiting for approval.")),
        "{v}"
    );
    assert_all_paired(&server);
    assert_eq!(v["tool_calls"][0]["status"], "approved", "{v}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("greeting.txt")).unwrap(),
        "hello"
    );
    // The resumed request held the first call with its "waiting" result.
    let first = &results_sent(&server)[0];
    assert!(
        first.1.contains("waits for the operator's approval"),
        "{first:?}"
    );
}

#[test]
fn a_pending_approval_denied_then_resumed() {
    let server = approval_server();
    let env = env_for(&server, "supervised", "");
    let (conv, id) = pending_write(&env);
    assert_eq!(env.run(&["deny", &id]).code, 0);
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1.contains("waits for the operator's approval"));
    assert!(!env.ws.join("greeting.txt").exists());
}

#[test]
fn a_provider_error_in_round_two_then_resumed() {
    let server = strict_openai(|req, _| {
        let resumed = messages(req).iter().any(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.contains(RESUME_MESSAGE))
        });
        match last(req) {
            (_, true) if !resumed => Reply::fixture(500, "server_error.json"),
            (_, true) => text("after the time"),
            (t, false) if t.contains("what time") => calls(&[
                ("call_t", "time", json!({})),
                ("call_l", "file_list", json!({"path": "."})),
            ]),
            _ => text(RESUMED),
        }
    });
    let env = env_for(&server, "supervised", "");
    let (r, v) = env.json(&["agent", "-m", "what time is it", "--json"]);
    assert_eq!(
        (r.code, v["exit_reason"].as_str()),
        (3, Some("error")),
        "{r:?}"
    );
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    resume(&env, &server, &conv, RESUMED);
    let ids: Vec<String> = results_sent(&server).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, ["call_t", "call_l"]);
}

/// A conversation as latchclaw stored it before rounds were stored whole:
/// killed mid-round, its second call has no result, and a stray result
/// answers no call. With `context_turns = 3` the window also starts among
/// the results of a whole round, and widens back to its call.
#[test]
fn an_older_conversation_with_a_call_left_unanswered_is_sent_whole() {
    let server = strict_openai(|req, _| match last(req) {
        (_, true) => text("unused"),
        _ => text(RESUMED),
    });
    let env = env_for(&server, "full", "[memory]\ncontext_turns = 3\n");
    let (r, v) = env.json(&["agent", "-m", "hello", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    let db = rusqlite::Connection::open(env.state.join("memory.sqlite")).unwrap();
    let call = |id: &str| json!({"id": id, "name": "time", "arguments": {}});
    let insert =
        |n: u32, role: &str, content: &str, calls: Option<Value>, answers: Option<&str>| {
            db.execute(
                "INSERT INTO turns (conversation_id, turn_id, timestamp, ts_unix, role, content,
                                tool_calls, metadata)
             VALUES (?1, ?2, '2026-01-01T00:00:00Z', 0, ?3, ?4, ?5, ?6)",
                rusqlite::params![
                    conv,
                    format!("turn-old-{n}"),
                    role,
                    content,
                    calls.map(|c| c.to_string()),
                    answers.map(|id| json!({"tool_call_id": id}).to_string())
                ],
            )
            .unwrap();
        };
    insert(1, "user", "older question", None, None);
    insert(
        2,
        "assistant",
        "",
        Some(json!([call("old_a"), call("old_b")])),
        None,
    );
    insert(3, "tool", "old a result", None, Some("old_a"));
    insert(4, "tool", "stray result", None, Some("nobody"));
    insert(
        5,
        "assistant",
        "",
        Some(json!([call("w_a"), call("w_b"), call("w_c")])),
        None,
    );
    insert(6, "tool", "w_a result", None, Some("w_a"));
    insert(7, "tool", "w_b result", None, Some("w_b"));
    insert(8, "tool", "w_c result", None, Some("w_c"));
    drop(db);
    // Unrepaired, this conversation is refused: the check is real.
    let mut raw = vec![json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "old_a", "type": "function"}, {"id": "old_b", "type": "function"}]})];
    raw.push(json!({"role": "tool", "tool_call_id": "old_a", "content": "old a result"}));
    raw.push(json!({"role": "user", "content": "next"}));
    let refused = pairing_error(&json!({ "messages": raw })).expect("refused");
    assert_eq!(refused.status, 400);
    assert!(
        String::from_utf8_lossy(&refused.body).contains("did not have response messages: old_b")
    );

    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    let ids: Vec<&str> = results.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(ids, ["w_a", "w_b", "w_c"], "{results:?}");

    // With a window wide enough for all of it, old_b gets a result saying
    // it has none, and the stray result is not sent.
    let cfg = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    std::fs::write(
        env.state.join("config.toml"),
        cfg.replace("context_turns = 3", "context_turns = 100"),
    )
    .unwrap();
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    let old_b = results
        .iter()
        .find(|r| r.0 == "old_b")
        .expect("old_b answered");
    assert!(
        old_b.1.starts_with("no result: the run was cut off"),
        "{old_b:?}"
    );
    assert!(results.iter().all(|r| r.1 != "stray result"), "{results:?}");
}

/// A receipt that cannot be written (a torn receipts log) stops the run at
/// the first call: that call and the next get results saying they have
/// none. After `receipt repair`, the conversation goes on.
#[test]
fn a_receipt_that_cannot_be_written_mid_round_then_repaired_and_resumed() {
    let server = strict_openai(|req, _| match last(req) {
        (_, true) => text("after the echo"),
        (t, false) if t.contains("time and echo") => calls(&[
            ("call_1", "time", json!({})),
            ("call_2", "shell", json!({"command": "echo two"})),
        ]),
        _ => text(RESUMED),
    });
    let env = env_for(&server, "full", "");
    assert_eq!(env.run(&["tool", "run", "time"]).code, 0);
    let log = env.state.join("tool_receipts.log");
    let mut torn = std::fs::read(&log).unwrap();
    torn.extend_from_slice(b"{\"args_hash\":\"5e");
    std::fs::write(&log, &torn).unwrap();
    let (r, v) = env.json(&["agent", "-m", "time and echo", "--json"]);
    assert_eq!(
        (r.code, v["exit_reason"].as_str()),
        (7, Some("integrity")),
        "{r:?}"
    );
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("`latchclaw receipt repair`")),
        "{v}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), torn, "no receipt appended");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    // The stored round pairs: the conversation can go on even before the
    // log is repaired (this answer needs no tool).
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0]
            .1
            .starts_with("no result: the run stopped on an error before this call's result"),
        "{results:?}"
    );
    assert_eq!(
        (results[1].0.as_str(), results[1].1.as_str()),
        (
            "call_2",
            "no result: not run, the run stopped on an error at an earlier call"
        )
    );
    // Tools need the repair; then the same request in the same
    // conversation runs them.
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    let (r, v) = env.json(&["agent", "-c", "-m", "time and echo", "--json"]);
    assert_eq!(
        (r.code, v["answer"].as_str()),
        (0, Some("after the echo")),
        "{r:?}"
    );
    assert_all_paired(&server);
    assert_eq!(v["tool_calls"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// Runs `agent -m "two naps"` (a slow sleep, then an echo), does `stop`
/// while the sleep runs, and returns the run; the sleep is gone after.
fn stopped_mid_nap(env: &Env, marker: &str, stop: impl FnOnce(u32)) -> std::process::Output {
    let child = env
        .command(&["agent", "-m", "two naps", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_process(marker, Duration::from_secs(15));
    stop(child.id());
    let out = child.wait_with_output().unwrap();
    let left = processes_with(marker);
    assert!(left.is_empty(), "the sleep was killed: {left:?}");
    out
}

fn two_naps_server(marker: &str) -> FakeServer {
    let sleep = format!("sleep {marker}");
    strict_openai(move |req, _| match last(req) {
        (_, true) => text("after the naps"),
        (t, false) if t.contains("two naps") => calls(&[
            ("call_a", "shell", json!({ "command": sleep })),
            ("call_b", "shell", json!({"command": "echo second"})),
        ]),
        _ => text(RESUMED),
    })
}

#[test]
fn interrupted_by_a_signal_mid_tool_then_resumed() {
    let server = two_naps_server("30.4848");
    let env = env_for(&server, "full", "");
    let out = stopped_mid_nap(&env, "30.4848", |pid| {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::INT,
        );
    });
    // latchclaw records the turn, then dies of the signal.
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGINT),
        "{out:?}"
    );
    let conv = conversation(&env);
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(
        results[0].1.contains("cancelled (Ctrl-C or a signal)"),
        "{results:?}"
    );
    assert!(
        results[1]
            .1
            .contains("not run: the turn was cancelled by the operator"),
        "{results:?}"
    );
}

#[test]
fn stopped_by_the_emergency_stop_mid_tool_then_resumed() {
    let server = two_naps_server("30.4949");
    let env = env_for(&server, "full", "");
    let out = stopped_mid_nap(&env, "30.4949", |_| {
        assert_eq!(env.run(&["estop"]).code, 0);
    });
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(env.run(&["estop", "--clear"]).code, 0);
    let conv = conversation(&env);
    resume(&env, &server, &conv, RESUMED);
    let results = results_sent(&server);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1.contains("emergency stop"), "{results:?}");
    assert!(results[1].1.contains("denied"), "{results:?}");
}
