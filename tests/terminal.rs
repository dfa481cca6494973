//! Terminal hygiene on the real binary: model text and stored messages are
//! neutralised on a terminal and exact through a pipe; no escape codes with
//! NO_COLOR; a provider error is printed once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;
#[path = "common/pty.rs"]
mod pty;

use common::Env;
use fake_server::{FakeServer, Reply};
use pty::Pty;

const HOSTILE: &str = "B2-start\u{1b}]0;pwned-title\u{7} seen\u{1b}[8mB2-hidden\u{1b}[0m\r\ttab kept\nsecond line\u{9b}2J end";

fn hostile_env() -> Env {
    let env = Env::new();
    env.mock("hostile_text.toml", "", "");
    env
}

fn no_raw_controls(transcript: &str) {
    // The pty turns "\n" into "\r\n"; nothing else may be a control.
    let bad: Vec<char> = transcript
        .replace("\r\n", "\n")
        .chars()
        .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
        .collect();
    assert!(bad.is_empty(), "raw controls {bad:?} in {transcript:?}");
}

#[test]
fn an_answer_on_a_terminal_cannot_retitle_or_hide() {
    let env = hostile_env();
    let mut p = Pty::spawn(&env, &["agent", "-m", "hi"]);
    p.expect("end");
    let t = p.transcript();
    assert_eq!(p.wait(), Some(0));
    no_raw_controls(&t);
    assert!(
        t.contains("B2-start\\u{1b}]0;pwned-title\\u{7} seen\\u{1b}[8mB2-hidden"),
        "{t:?}"
    );
    // Layout survives: the tab and the line break.
    assert!(
        t.contains("\ttab kept\r\nsecond line\\u{9b}2J end"),
        "{t:?}"
    );
}

#[test]
fn a_piped_answer_keeps_the_exact_bytes() {
    let env = hostile_env();
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stdout, format!("{HOSTILE}\n"));
}

#[test]
fn memory_show_neutralises_stored_messages_on_a_terminal_only() {
    let env = hostile_env();
    let (r, v) = env.json(&["agent", "--json", "-m", "hi \u{1b}[2Juser-b2"]);
    assert_eq!(r.code, 0, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap();

    let mut p = Pty::spawn(&env, &["memory", "show", conv]);
    p.expect("end");
    let t = p.transcript();
    assert_eq!(p.wait(), Some(0));
    no_raw_controls(&t);
    assert!(t.contains("hi \\u{1b}[2Juser-b2"), "{t:?}");
    assert!(t.contains("\\u{1b}]0;pwned-title"), "{t:?}");

    for args in [&["memory", "list"][..], &["memory", "search", "B2-start"]] {
        let mut p = Pty::spawn(&env, args);
        p.expect("\\u{1b}");
        let t = p.transcript();
        assert_eq!(p.wait(), Some(0));
        no_raw_controls(&t);
    }

    // Piped: the stored bytes as they are.
    let r = env.run(&["memory", "show", conv]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("hi \u{1b}[2Juser-b2"), "{r:?}");
    assert!(r.stdout.contains(HOSTILE), "{r:?}");
}

#[test]
fn no_escape_codes_with_no_color_even_around_tool_calls() {
    // A tool call shows a status line on the terminal's stderr; it is
    // rewritten in place without escape codes.
    let env = Env::new();
    std::fs::write(env.ws.join("b2-listed.txt"), "x").unwrap();
    env.mock("by_message.toml", "", "");
    let mut p = Pty::spawn_env(
        &env,
        &["agent", "-m", "use two tools"],
        &[("NO_COLOR", "1")],
    );
    p.expect("UTC time");
    let t = p.transcript();
    assert_eq!(p.wait(), Some(0));
    assert!(t.contains("→ time"), "{t:?}");
    assert!(!t.contains('\u{1b}'), "{t:?}");
}

#[test]
fn a_provider_error_is_printed_once() {
    let server = FakeServer::start(vec![Reply::json(
        500,
        r#"{"error": {"message": "B2-upstream-broke"}}"#,
    )]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"cloud\"\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\n\
         api_key_env = \"LC_TEST_KEY\"\ntimeout_secs = 2\nretries = 0\n",
        server.url()
    ));
    let r = env.run_env(&["agent", "-m", "hi"], &[("LC_TEST_KEY", "k")]);
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(r.stderr.matches("B2-upstream-broke").count(), 1, "{r:?}");
    assert_eq!(r.stderr.matches("500").count(), 1, "{r:?}");
    assert_eq!(server.requests().len(), 1);
}
