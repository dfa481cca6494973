//! Streaming answers (server-sent events) from the openai-compatible
//! provider against the fake server: content and tool-call deltas, framing,
//! cut streams, servers that ignore or refuse streaming, `--no-stream`;
//! then on a pseudo-terminal: the answer shown as it arrives, tool status
//! lines on stderr only, nothing of `<think>` or tool-call syntax shown,
//! Ctrl-C and `--timeout` cutting a stream.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Closes the pseudo-terminal's raw master descriptor.
#![allow(unsafe_code)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;
#[path = "common/pty.rs"]
mod pty;

use common::{Env, Run, fixture, lit};
use fake_server::{FakeServer, Reply};
use pty::Pty;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_for(server: &FakeServer, extra: &str) -> Env {
    let env = Env::new();
    std::fs::write(env.ws.join("alpha.txt"), "a").unwrap();
    env.config(&format!(
        "default_provider = \"cloud\"\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         model = \"gpt-4o-mini\"\ntimeout_secs = 5\nretries = 0\n{extra}\n",
        server.url()
    ));
    env
}

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

/// One chunk carrying `delta`.
fn chunk(delta: Value) -> String {
    data(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}),
    )
}

fn text(t: &str) -> String {
    chunk(json!({"content": t}))
}

fn finish(reason: &str) -> String {
    data(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}),
    )
}

fn usage(prompt: u64, completion: u64, cached: u64) -> String {
    data(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-mini",
                "choices": [],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "prompt_tokens_details": {"cached_tokens": cached}}}),
    )
}

const DONE: &str = "data: [DONE]\n\n";

/// Events sent at once, one chunk each.
fn now(events: &[String]) -> Vec<(u64, String)> {
    events.iter().map(|e| (0, e.clone())).collect()
}

/// A streamed answer with `words` as its content deltas.
fn answer(words: &[&str]) -> Reply {
    let mut ev: Vec<String> = words.iter().map(|w| text(w)).collect();
    ev.extend([finish("stop"), usage(30, 5, 0), DONE.to_string()]);
    Reply::sse(now(&ev))
}

/// A native `file_list` call on `.`, its id, name and arguments split
/// across chunks.
fn file_list_call() -> Reply {
    let tc = |v: Value| chunk(json!({"tool_calls": [v]}));
    Reply::sse(now(&[
        chunk(json!({"role": "assistant", "content": null})),
        tc(json!({"index": 0, "id": "call_S1", "type": "function",
                  "function": {"name": "file_list", "arguments": ""}})),
        tc(json!({"index": 0, "function": {"arguments": "{\"pa"}})),
        tc(json!({"index": 0, "function": {"arguments": "th\": "}})),
        tc(json!({"index": 0, "function": {"arguments": "\".\"}"}})),
        finish("tool_calls"),
        DONE.to_string(),
    ]))
}

fn agent(env: &Env, args: &[&str]) -> Run {
    let mut all = vec!["agent"];
    all.extend_from_slice(args);
    env.run(&all)
}

/// The turns of the only conversation.
fn turns(env: &Env) -> Vec<Value> {
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let conv = list[0]["conversation_id"].as_str().unwrap().to_string();
    let (_, turns) = env.json(&["memory", "show", &conv, "--json"]);
    turns.as_array().unwrap().clone()
}

#[test]
fn content_deltas_make_the_answer_with_usage_from_the_last_chunk() {
    let server = FakeServer::start(vec![Reply::sse(now(&[
        chunk(json!({"role": "assistant", "content": ""})),
        text("Hel"),
        text("lo, "),
        text("wörld."),
        finish("stop"),
        usage(120, 7, 96),
        DONE.to_string(),
    ]))]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "hi", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["answer"], "Hello, wörld.");
    assert_eq!(
        (
            &v["usage"]["prompt_tokens"],
            &v["usage"]["completion_tokens"],
            &v["usage"]["cached_tokens"]
        ),
        (&json!(120), &json!(7), &json!(96))
    );
    let body = server.requests()[0].json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    let accept = server.requests()[0].header("accept").unwrap().to_string();
    assert!(accept.contains("text/event-stream"), "{accept}");
    // Piped stdout gets only the final answer, as without streaming.
    let server = FakeServer::start(vec![answer(&["Hel", "lo."])]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "hi"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "Hello.\n"), "{r:?}");
    assert_eq!(turns(&env)[1]["metadata"]["finish_reason"], "stop");
}

#[test]
fn tool_call_deltas_are_put_together_by_index() {
    let tc = |v: Value| chunk(json!({"tool_calls": [v]}));
    // Two calls, their pieces interleaved.
    let server = FakeServer::start(vec![
        Reply::sse(now(&[
            tc(json!({"index": 0, "id": "call_A", "type": "function",
                      "function": {"name": "file_list", "arguments": "{\"path\""}})),
            tc(json!({"index": 1, "id": "call_B", "type": "function",
                      "function": {"name": "time", "arguments": ""}})),
            tc(json!({"index": 0, "function": {"arguments": ": \".\"}"}})),
            tc(json!({"index": 1, "function": {"arguments": "{}"}})),
            finish("tool_calls"),
            DONE.to_string(),
        ])),
        answer(&["The workspace ", "holds alpha.txt."]),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "list the files and the time"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "The workspace holds alpha.txt.\n"),
        "{r:?}"
    );
    let rc = env.receipts();
    assert_eq!(rc.len(), 2, "{rc:?}");
    assert_eq!(
        (&rc[0]["tool"], &rc[1]["tool"]),
        (&json!("file_list"), &json!("time")),
        "{rc:?}"
    );
    let msgs = server.requests()[1].json()["messages"].clone();
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_A");
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\".\"}"
    );
    assert_eq!(msgs[2]["tool_calls"][1]["id"], "call_B");
    assert_eq!(
        (&msgs[3]["tool_call_id"], &msgs[4]["tool_call_id"]),
        (&json!("call_A"), &json!("call_B"))
    );
    assert!(msgs[3]["content"].as_str().unwrap().contains("alpha.txt"));
}

#[test]
fn text_tool_calls_and_think_in_a_stream() {
    let server = FakeServer::start(vec![
        answer(&[
            "<thi",
            "nk>I should list.</th",
            "ink>\n<tool_",
            "call>{\"name\": \"file_list\", \"argu",
            "ments\": {\"path\": \".\"}}</tool_call>",
        ]),
        answer(&["<think>done</think>", "It holds ", "alpha.txt."]),
    ]);
    // Native: `auto` would turn structured after a call written as text.
    let env = env_for(&server, "tool_mode = \"native\"");
    let r = agent(&env, &["-m", "list"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "It holds alpha.txt.\n"),
        "{r:?}"
    );
    assert_eq!(env.receipts()[0]["tool"], "file_list");
    let msgs = server.requests()[1].json()["messages"].clone();
    assert_eq!(
        msgs[2]["tool_calls"][0]["function"]["arguments"], "{\"path\":\".\"}",
        "{msgs}"
    );
    // The call's text is not kept as the assistant's words.
    assert_eq!(msgs[2]["content"], Value::Null, "{msgs}");
}

#[test]
fn crlf_framing_comments_multi_line_data_and_no_done() {
    let one = json!({"choices": [{"index": 0, "delta": {"content": "Framed "}}]});
    let two = json!({"choices": [{"index": 0, "delta": {"content": "well."}}]});
    // `two` split over two data lines of one event.
    let two = two.to_string();
    let (a, b) = two.split_at(20);
    let events = [
        ": ping\r\n\r\n".to_string(),
        format!("event: message\r\nid: 1\r\ndata: {one}\r\n\r\n"),
        ":comment between\r\n".to_string(),
        format!("data: {a}\r\ndata: {b}\r\n\r\n"),
        finish("stop").replace('\n', "\r\n"),
        // Ends here: no [DONE], but the finish_reason came.
    ];
    let server = FakeServer::start(vec![Reply::sse(now(&events))]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "hi"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "Framed well.\n"), "{r:?}");
}

#[test]
fn a_cut_stream_is_a_typed_error_and_keeps_the_partial_answer() {
    let cases = [
        // Cut in the middle of an event, the body never ended.
        (
            Reply::sse_cut(now(&[
                text("Partial "),
                text("answer"),
                "data: {\"cho".into(),
            ])),
            "middle of an event",
        ),
        // The body ended cleanly, but before any finish_reason or [DONE].
        (
            Reply::sse(now(&[text("Partial "), text("answer")])),
            "before the answer finished",
        ),
        // The server reports an error mid-stream.
        (
            Reply::sse(now(&[
                text("Partial "),
                text("answer"),
                data(json!({"error": {"message": "the model crashed"}})),
            ])),
            "the model crashed",
        ),
    ];
    for (reply, why) in cases {
        let server = FakeServer::start(vec![reply]);
        let env = env_for(&server, "");
        let r = agent(&env, &["-m", "hi"]);
        assert_eq!(r.code, 3, "{why}: {r:?}");
        assert!(
            r.stderr.contains("(stream_cut)") && r.stderr.contains(why),
            "{why}: {r:?}"
        );
        assert!(
            r.stderr.contains("bytes of the stream had arrived"),
            "{r:?}"
        );
        assert!(r.stderr.contains("14 chars of text"), "{r:?}");
        assert!(r.stderr.contains("marked cut"), "{r:?}");
        assert_eq!(r.stdout, "", "{why}: piped stdout gets no partial answer");
        let t = turns(&env);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(
            (&t[1]["role"], &t[1]["content"], &t[1]["metadata"]["cut"]),
            (&json!("assistant"), &json!("Partial answer"), &json!(true)),
            "{why}"
        );
        let (_, runs) = env.json(&["runs", "list", "--json"]);
        assert_eq!(runs[0]["exit_code"], 3, "{runs}");
    }
}

#[test]
fn a_cut_partial_answer_keeps_no_reasoning_or_half_calls() {
    let server = FakeServer::start(vec![Reply::sse_cut(now(&[
        text("<think>secret plan</think>"),
        text("Partial answer "),
        text("<tool_call>{\"name\": \"fi"),
    ]))]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    let t = turns(&env);
    assert_eq!(
        (&t[1]["content"], &t[1]["metadata"]["cut"]),
        (&json!("Partial answer"), &json!(true)),
        "{t:?}"
    );
}

#[test]
fn the_providers_own_timeout_cuts_a_slow_stream() {
    let server = FakeServer::start(vec![slow_answer("Slow ", 4000, "never")]);
    let env = env_for(&server, "");
    let cfg = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    std::fs::write(
        env.state.join("config.toml"),
        cfg.replace("timeout_secs = 5", "timeout_secs = 1"),
    )
    .unwrap();
    let t = Instant::now();
    let r = agent(&env, &["-m", "hi"]);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("(stream_cut)") && r.stderr.contains("timeout_secs"),
        "{r:?}"
    );
    assert_eq!(turns(&env)[1]["content"], "Slow");
}

#[test]
fn a_cut_stream_does_not_fall_back() {
    let server = FakeServer::start(vec![Reply::sse(now(&[text("Half")]))]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"r\"\n\
         [providers.models.r]\nkind = \"reliable\"\nproviders = [\"cloud\", \"m\"]\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\nretries = 0\n\
         [providers.models.m]\nkind = \"mock\"\nfixture = {}\n",
        server.url(),
        lit(&fixture("hello.toml"))
    ));
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("(stream_cut)"), "{r:?}");
    assert!(!r.stderr.contains("provider_fallback"), "{r:?}");
}

#[test]
fn the_stream_is_bounded_by_max_response_bytes() {
    let mut events: Vec<String> = (0..200).map(|_| text(&"x".repeat(100))).collect();
    events.extend([finish("stop"), DONE.to_string()]);
    let server = FakeServer::start(vec![Reply::sse(now(&events))]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"cloud\"\nmax_response_bytes = 4096\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n",
        server.url()
    ));
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("(stream_cut)") && r.stderr.contains("max_response_bytes (4096 bytes)"),
        "{r:?}"
    );
}

#[test]
fn a_server_that_ignores_stream_is_read_as_json() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "one_tool.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "list the files"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "The workspace holds alpha.txt.\n"),
        "{r:?}"
    );
    assert!(server.requests().iter().all(|q| q.json()["stream"] == true));
}

#[test]
fn a_server_that_refuses_streaming_is_asked_again_without_it() {
    let refusal = "{\"error\": {\"message\": \"Streaming is not supported for this model\"}}";
    let server = FakeServer::start(vec![
        Reply::json(400, refusal),
        Reply::fixture(200, "one_tool.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "list the files"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "The workspace holds alpha.txt.\n"),
        "{r:?}"
    );
    assert!(r.stderr.contains("refuses streaming"), "{r:?}");
    let streamed: Vec<Value> = server
        .requests()
        .iter()
        .map(|q| q.json()["stream"].clone())
        .collect();
    // Asked once more without it, and not again in the same run.
    assert_eq!(streamed, [json!(true), json!(false), json!(false)]);
    let bodies: Vec<Value> = server.requests().iter().map(|q| q.json()).collect();
    assert!(bodies[1].get("stream_options").is_none());
    assert_eq!(bodies[0]["messages"], bodies[1]["messages"]);
    // A refusal that says nothing about streaming is a plain error.
    let server = FakeServer::start(vec![Reply::json(
        400,
        "{\"error\": {\"message\": \"bad model name\"}}",
    )]);
    let env = env_for(&server, "");
    let r = agent(&env, &["-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("(bad_request)"), "{r:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn no_stream_flag_and_stream_false() {
    let server = FakeServer::start(vec![Reply::fixture(200, "text.json")]);
    let env = env_for(&server, "");
    let r = agent(&env, &["--no-stream", "-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    let server2 = FakeServer::start(vec![Reply::fixture(200, "text.json")]);
    let env2 = env_for(&server2, "stream = false");
    let r = agent(&env2, &["-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    for s in [&server, &server2] {
        let q = &s.requests()[0];
        let body = q.json();
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        assert_eq!(q.header("accept"), Some("application/json"));
    }
    let (_, cfg) = env2.json(&["config", "show", "--json"]);
    assert_eq!(
        cfg["providers"]["models"]["cloud"]["stream"], false,
        "{cfg}"
    );
    // A bad value, and the flag where it does not belong.
    let env3 = env_for(&server, "stream = \"yes\"");
    let r = agent(&env3, &["-m", "hi"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("providers.models.cloud.stream: expected true or false, found string"),
        "{r:?}"
    );
    let r = env.run(&["memory", "list", "--no-stream"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = env.run(&["agent", "--help"]);
    assert!(r.stdout.contains("--no-stream"), "{r:?}");
}

#[test]
fn timeout_cuts_a_stream_between_reads() {
    let server = FakeServer::start(vec![Reply::sse(vec![
        (0, text("Started, ")),
        (8000, text("never seen")),
        (0, finish("stop")),
    ])]);
    let env = env_for(&server, "");
    let t = Instant::now();
    let r = agent(&env, &["--timeout", "1", "-m", "hi"]);
    let took = t.elapsed();
    assert_eq!(r.code, 6, "{r:?}");
    assert!(took < Duration::from_millis(1900), "{took:?} {r:?}");
    // Nothing on stdout; the marker on stderr.
    assert_eq!(r.stdout, "", "{r:?}");
    assert!(
        r.stderr
            .contains("[stopped: the run's --timeout of 1 s was reached]\n"),
        "{r:?}"
    );
    let t = turns(&env);
    assert_eq!(t[1]["metadata"]["cut"], true, "{t:?}");
    assert_eq!(
        t[1]["content"],
        "Started,\n[stopped: the run's --timeout of 1 s was reached]"
    );
    let (_, runs) = env.json(&["runs", "list", "--json"]);
    assert_eq!(runs[0]["exit_code"], 6, "{runs}");
}

/// Streams that pause: the first piece, then the rest after `pause_ms`.
fn slow_answer(first: &str, pause_ms: u64, rest: &str) -> Reply {
    Reply::sse(vec![
        (0, text(first)),
        (pause_ms, text(rest)),
        (0, finish("stop")),
        (0, DONE.to_string()),
    ])
}

#[test]
fn on_a_terminal_the_answer_appears_as_it_arrives() {
    let server = FakeServer::start(vec![slow_answer("First part, ", 1500, "second part.")]);
    let env = env_for(&server, "");
    let mut p = Pty::spawn(&env, &["agent", "-m", "hi"]);
    let t = Instant::now();
    p.expect("First part,");
    assert!(
        !p.exited() && !p.transcript().contains("second"),
        "{}",
        p.transcript()
    );
    assert!(
        t.elapsed() < Duration::from_millis(1400),
        "{:?}",
        t.elapsed()
    );
    // The line's end comes after the last piece.
    p.expect("second part.\r\n");
    let transcript = p.transcript();
    assert_eq!(p.wait(), Some(0));
    // Shown once: the end of the turn prints only what was missing.
    assert_eq!(
        transcript.matches("First part").count(),
        1,
        "{transcript:?}"
    );
    assert!(
        transcript.contains("First part, second part.\r\n"),
        "{transcript:?}"
    );
}

#[test]
fn think_and_tool_call_syntax_never_reach_the_terminal() {
    let server = FakeServer::start(vec![
        answer(&[
            "<thi",
            "nk>secret plan</th",
            "ink>Let me look.\n<tool_",
            "call>{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}</tool_call>",
        ]),
        answer(&[
            "<think>more secret",
            "</think>",
            "Now the time.\n```tool",
            "_call\n{\"name\": \"time\"",
            ", \"arguments\": {}}\n```",
        ]),
        answer(&[
            "<think>last secret</think>\n\n",
            "The workspace ",
            "holds alpha.txt.",
        ]),
    ]);
    // Native: `auto` would turn structured after a call written as text.
    let env = env_for(&server, "tool_mode = \"native\"");
    let mut p = Pty::spawn(&env, &["agent", "-m", "list"]);
    p.expect("holds alpha.txt.");
    let transcript = p.transcript();
    assert_eq!(p.wait(), Some(0));
    for bad in ["secret", "tool_call", "\"name\"", "```", "think>"] {
        assert!(!transcript.contains(bad), "{bad} shown: {transcript:?}");
    }
    assert!(
        transcript.contains("Let me look.") && transcript.contains("Now the time."),
        "{transcript:?}"
    );
    assert_eq!(env.receipts().len(), 2);
}

/// Runs latchclaw with its controlling terminal a new pty, and stdout or
/// stderr (not both) on it; the other goes to a pipe. Returns the pty
/// transcript, the piped output and the exit code.
fn split_run(env: &Env, args: &[&str], stdout_on_pty: bool) -> (String, String, Option<i32>) {
    let (master, slave) = pty::open_pty();
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(slave.to_str().unwrap())
        .unwrap();
    let mut cmd = Command::new(common::BIN);
    cmd.args(args)
        .env("LATCHCLAW_HOME", &env.state)
        .env("HOME", &env.home)
        .env_remove("LATCHCLAW_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    if stdout_on_pty {
        cmd.stdout(tty).stderr(Stdio::piped());
    } else {
        cmd.stderr(tty).stdout(Stdio::piped());
    }
    pty::attach(&mut cmd, slave, false);
    let child = cmd.spawn().unwrap();
    drop(cmd);
    let transcript = pty::record(master);
    let out = child.wait_with_output().unwrap();
    // The recorder ends at EOF once the child's side is closed.
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: closing our own fd.
    unsafe { libc::close(master) };
    let piped = if stdout_on_pty {
        out.stderr
    } else {
        out.stdout
    };
    let t = transcript.lock().unwrap().clone();
    (
        t,
        String::from_utf8_lossy(&piped).into_owned(),
        out.status.code(),
    )
}

#[test]
fn tool_status_lines_go_to_stderr_only() {
    let replies = || {
        vec![
            file_list_call(),
            answer(&["The workspace ", "holds alpha.txt."]),
        ]
    };
    // stdout on the terminal, stderr piped: the answer streams, and no
    // status line anywhere (stderr is not a terminal).
    let server = FakeServer::start(replies());
    let env = env_for(&server, "");
    let (tty, piped, code) = split_run(&env, &["agent", "-m", "list"], true);
    assert_eq!(code, Some(0), "{tty:?} {piped:?}");
    assert!(
        tty.contains("The workspace holds alpha.txt.\r\n"),
        "{tty:?}"
    );
    assert!(
        !tty.contains('→') && !piped.contains('→'),
        "{tty:?} {piped:?}"
    );
    // stderr on the terminal, stdout piped: the status line is on the
    // terminal, and stdout holds exactly the answer.
    let server = FakeServer::start(replies());
    let env = env_for(&server, "");
    let (tty, piped, code) = split_run(&env, &["agent", "-m", "list"], false);
    assert_eq!(code, Some(0), "{tty:?} {piped:?}");
    assert_eq!(piped, "The workspace holds alpha.txt.\n");
    let status = tty
        .split(['\r', '\n'])
        .map(str::trim_end)
        .find(|l| l.starts_with("→ file_list: . … ") && l.ends_with(" ms"))
        .unwrap_or_else(|| panic!("no status line in {tty:?}"));
    let ms: u64 = status["→ file_list: . … ".len()..status.len() - 3]
        .parse()
        .unwrap();
    assert!(ms < 5000, "{status}");
    assert!(
        !tty.contains("alpha.txt."),
        "the answer is not on stderr: {tty:?}"
    );
}

#[test]
fn a_denied_call_says_so_on_the_status_line() {
    let server = FakeServer::start(vec![
        Reply::sse(now(&[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                "function": {"name": "file_read", "arguments": "{\"path\": \"/etc/shadow\"}"}}]}),
            ),
            finish("tool_calls"),
            DONE.to_string(),
        ])),
        answer(&["Not allowed."]),
    ]);
    let env = env_for(&server, "");
    let (tty, piped, code) = split_run(&env, &["agent", "-m", "read it"], false);
    assert_eq!(
        (code, piped.as_str()),
        (Some(4), "Not allowed.\n"),
        "{tty:?}"
    );
    assert!(tty.contains("→ file_read: /etc/shadow … denied"), "{tty:?}");
}

#[test]
fn ctrl_c_cuts_a_stream_in_the_repl_and_in_a_one_shot_run() {
    let server = FakeServer::start(vec![
        slow_answer("Partial ", 10_000, "never"),
        answer(&["Still ", "here."]),
    ]);
    let env = env_for(&server, "");
    let mut p = Pty::spawn(&env, &["agent"]);
    p.expect("latchclaw> ");
    p.send("tell me\n");
    p.expect("Partial");
    let t = Instant::now();
    p.send("\x03");
    p.expect("[cancelled]");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    p.expect("latchclaw> ");
    // The abandoned request does not hold up the next one (its server
    // still sleeps).
    let t = Instant::now();
    p.send("again\n");
    p.expect("Still here.");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    p.send("/exit\n");
    assert_eq!(p.wait(), Some(0));
    let t = turns(&env);
    assert_eq!(
        (&t[1]["content"], &t[1]["metadata"]["cut"]),
        (
            &json!("Partial\n[cancelled by the operator (Ctrl-C)]"),
            &json!(true)
        ),
        "{t:?}"
    );

    // One-shot: the turn is recorded as cancelled, then latchclaw dies of
    // the signal.
    let server = FakeServer::start(vec![slow_answer("Partial ", 10_000, "never")]);
    let env = env_for(&server, "");
    let mut p = Pty::spawn(&env, &["agent", "-m", "hi"]);
    p.expect("Partial");
    p.send("\x03");
    p.expect("[cancelled]");
    assert_eq!(p.wait(), None, "ended by SIGINT");
    let t = turns(&env);
    assert_eq!(t[1]["metadata"]["cut"], true, "{t:?}");
}
