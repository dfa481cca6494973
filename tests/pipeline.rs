//! Pipelines: stdin as context, `-m -`, stdin as the whole message, and the
//! input cap. The mock echoes the user message it received.

mod common;

use common::{Env, Run};
use std::io::Write;
use std::process::Stdio;

fn with_stdin(env: &Env, args: &[&str], input: &[u8]) -> Run {
    let mut child = env
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The process may refuse early (too much input): a broken pipe is fine.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().unwrap().into()
}

fn echo_env(extra: &str) -> Env {
    let env = Env::new();
    env.mock("by_message.toml", extra, "");
    env
}

#[test]
fn piped_stdin_is_context_for_the_message() {
    let env = echo_env("");
    let r = with_stdin(
        &env,
        &["agent", "-m", "summarise the errors"],
        b"ERROR disk full\nINFO ok\n",
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("echo: summarise the errors"), "{r:?}");
    assert!(r.stdout.contains("ERROR disk full"), "{r:?}");
    // Only the answer is on stdout.
    assert!(r.stdout.ends_with("```\n"), "{r:?}");
}

#[test]
fn dash_reads_the_message_and_bare_stdin_runs_one_turn() {
    let env = echo_env("");
    let r = with_stdin(&env, &["agent", "-m", "-"], b"what is up?\n");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "echo: what is up?\n"),
        "{r:?}"
    );
    let r = with_stdin(&env, &["agent"], b"no flag at all");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "echo: no flag at all\n"),
        "{r:?}"
    );
    let r = with_stdin(&env, &["agent", "--json"], b"as json");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["answer"], "echo: as json");
    let r = with_stdin(&env, &["agent"], b"   \n");
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("empty"), "{r:?}");
}

#[test]
fn input_over_the_cap_is_an_error_not_a_cut() {
    let env = echo_env("max_input_bytes = 64");
    let big = vec![b'x'; 100];
    for args in [
        &["agent", "-m", "-"][..],
        &["agent"],
        &["agent", "-m", "hi"],
    ] {
        let r = with_stdin(&env, args, &big);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(r.stderr.contains("max_input_bytes"), "{r:?}");
    }
    let r = with_stdin(&env, &["agent", "-m", "-"], &[0xff, 0xfe, b'a']);
    assert!(r.code == 2 && r.stderr.contains("UTF-8"), "{r:?}");
    // Nothing was sent to the provider or stored.
    assert!(env.requests().is_empty());
}
