//! `ask_user` on the real binary: with no terminal it answers "no user
//! present" at once (through `tool run` and a model's turn); on a
//! pseudo-terminal the user's line reaches the model, redacted, Ctrl-D is
//! "no answer", and the call's deadline and Ctrl-C end the wait. The
//! question is shown with its control characters escaped.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Writes to and closes the pseudo-terminal's raw master descriptor.
#![allow(unsafe_code)]

mod common;
#[path = "common/pty.rs"]
mod pty;

use common::{Env, Run};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::{Duration, Instant};

const SECRET: &str = "Quokka-Saffron-4242-planted";

fn env_with(extra: &str) -> Env {
    let env = Env::new();
    env.mock(
        "ask_user.toml",
        extra,
        "[security]\nsecret_env = [\"LC_ASK_SECRET\"]\n\
         [channels.cli]\ntools_allow = [\"time\", \"ask_user\"]\n",
    );
    env
}

#[test]
fn with_no_terminal_it_says_no_user_present_at_once() {
    let env = env_with("");
    let t = Instant::now();
    let (r, v) = env.tool("ask_user", json!({"question": "Which branch?"}));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "allowed");
    assert_eq!(v["risk"], "low");
    assert!(
        v["output"].as_str().unwrap().starts_with("no user present"),
        "{v}"
    );
    assert_eq!(v["metadata"]["answered"], false);
    // It changes nothing: one receipt, no `started` one before it.
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["tool"], "ask_user");

    // A model's turn: the model reads the same result and goes on.
    let t = Instant::now();
    let r = env.run(&["agent", "-m", "pick a colour"]);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("heard: no user present"), "{r:?}");
    let reqs = env.requests();
    let last = reqs.last().unwrap()["request"]["messages"].to_string();
    assert!(last.contains("no user present"), "{last}");
}

#[test]
fn off_by_default_allowed_under_readonly_and_its_arguments_checked() {
    let env = Env::new();
    env.config("");
    let (r, v) = env.tool("ask_user", json!({"question": "hi?"}));
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("tool \"ask_user\" is not enabled on this channel"),
        "{v}"
    );
    let (_, tools) = env.json(&["tool", "list", "--json"]);
    let row = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ask_user")
        .unwrap()
        .clone();
    assert_eq!(
        (row["enabled"].clone(), row["risk"].clone()),
        (json!(false), json!("low"))
    );
    let (_, shown) = env.json(&["prompt", "show", "--json"]);
    assert!(!shown["tools"].to_string().contains("ask_user"));

    let env = env_with("");
    let (r, v) = env.json(&[
        "policy",
        "check",
        "ask_user",
        "--json",
        "{\"question\": \"ok?\"}",
        "--autonomy",
        "readonly",
    ]);
    assert_eq!((r.code, v["decision"].clone()), (0, json!("allow")), "{v}");
    let (_, shown) = env.json(&["prompt", "show", "--json"]);
    assert!(shown["tools"].to_string().contains("ask_user"));

    // The schema: a question is required and is a string.
    for (args, want) in [
        (json!({}), "missing required argument \"question\" (string)"),
        (
            json!({"question": 7}),
            "argument \"question\" must be a string, not an integer",
        ),
        (
            json!({"question": "q", "choices": ["a"]}),
            "unknown argument \"choices\"",
        ),
    ] {
        let r = env.run(&["tool", "run", "ask_user", "--json", &args.to_string()]);
        assert_eq!(r.code, 2, "{args}: {r:?}");
        assert!(r.stderr.contains(want), "{args} should say {want:?}: {r:?}");
    }
    // Its size and emptiness: the gate's, with a receipt.
    for (q, want) in [
        (
            "x".repeat(1025),
            "\"question\" is 1025 bytes; the limit is 1024",
        ),
        ("  \n ".to_string(), "\"question\" is empty"),
    ] {
        let (r, v) = env.tool("ask_user", json!({ "question": q }));
        assert_eq!(r.code, 4, "{r:?}");
        assert_eq!(v["status"], "denied");
        assert!(v["reason"].as_str().unwrap().contains(want), "{v}");
    }
    let (r, _) = env.tool("ask_user", json!({"question": "é".repeat(512)}));
    assert_eq!(r.code, 0, "exactly 1024 bytes is allowed: {r:?}");
}

/// Runs latchclaw with a pseudo-terminal as its controlling terminal only
/// (stdout and stderr piped): once the terminal shows the question's prompt,
/// `keys` are typed (`None`: never). Returns the run, the transcript, and
/// how long the run took after the keys (or from the start).
fn on_pty(env: &Env, args: &[&str], keys: Option<&str>) -> (Run, String, Duration) {
    let (master, slave) = pty::open_pty();
    let mut cmd = env.base_command(args);
    cmd.env("LC_ASK_SECRET", SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pty::attach(&mut cmd, slave, false);
    let mut child = cmd.spawn().unwrap();
    let transcript = pty::record(master);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut since = Instant::now();
    let mut typed = false;
    while Instant::now() < deadline {
        if let Some(k) = keys.filter(|_| !typed)
            && transcript.lock().unwrap().contains("\n> ")
        {
            // SAFETY: writing our own bytes to our own fd.
            unsafe { libc::write(master, k.as_ptr().cast(), k.len()) };
            typed = true;
            since = Instant::now();
        }
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = since.elapsed();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    // SAFETY: closing the fd we opened.
    unsafe { libc::close(master) };
    let text = transcript.lock().unwrap().clone();
    (out.into(), text, took)
}

#[test]
fn on_a_terminal_the_answer_reaches_the_model_redacted() {
    let env = env_with("");
    let answer = format!("blue, and the code is {SECRET}\n");
    let (r, tty, _) = on_pty(&env, &["agent", "-m", "pick a colour"], Some(&answer));
    assert_eq!(r.code, 0, "{r:?}\n{tty}");
    assert!(tty.contains("The model asks you"), "{tty}");
    // The model's escape sequences are shown, not obeyed.
    assert!(
        tty.contains("Which colour?\\u{1b}]0;pwned\\u{7}"),
        "{tty:?}"
    );
    assert!(!tty.contains("\u{1b}]0;"), "{tty:?}");
    assert!(
        r.stdout
            .contains("heard: blue, and the code is [REDACTED:env:LC_ASK_SECRET]"),
        "{r:?}"
    );
    let reqs = env.requests();
    let sent = reqs.last().unwrap()["request"]["messages"].to_string();
    assert!(sent.contains("blue, and the code is [REDACTED"), "{sent}");
    assert!(!sent.contains(SECRET));
    let log = std::fs::read_to_string(env.state.join("tool_receipts.log")).unwrap();
    assert!(
        log.contains("output redacted: env:LC_ASK_SECRET 1") && !log.contains(SECRET),
        "{log}"
    );
    let (_, conv) = env.json(&["memory", "list", "--json"]);
    let id = conv[0]["conversation_id"].as_str().unwrap();
    let shown = env.run(&["memory", "show", id]);
    assert!(shown.stdout.contains("blue") && !shown.stdout.contains(SECRET));
    assert!(
        !std::fs::read(env.state.join("memory.sqlite"))
            .unwrap()
            .windows(SECRET.len())
            .any(|w| w == SECRET.as_bytes())
    );
}

#[test]
fn ctrl_d_is_no_answer_and_the_wait_ends_at_the_deadline_or_ctrl_c() {
    let env = env_with("");
    let q = json!({"question": "Which colour?"}).to_string();
    let args = ["tool", "run", "ask_user", "--json", q.as_str()];
    let (r, tty, took) = on_pty(&env, &args, Some("\u{4}"));
    assert_eq!(r.code, 0, "{r:?}\n{tty}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .starts_with("user gave no answer"),
        "{v}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");

    // The call's limit: tool_timeout_secs.
    let env = env_with("tool_timeout_secs = 1");
    let t = Instant::now();
    let (r, tty, _) = on_pty(&env, &args, None);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(tty.contains("Which colour?"), "{tty}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("time limit (tool_timeout_secs) passed before the user answered"),
        "{v}"
    );

    // The run's --timeout comes first.
    let env = env_with("");
    let t = Instant::now();
    let (r, _, _) = on_pty(
        &env,
        &["agent", "--json", "--timeout", "1", "-m", "x"],
        None,
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["exit_reason"], "timeout", "{v}");

    // Ctrl-C at the question cancels the run.
    let (r, tty, took) = on_pty(&env, &["agent", "--json", "-m", "x"], Some("\u{3}"));
    assert!(took < Duration::from_secs(3), "{took:?}\n{tty}");
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["exit_reason"], "cancelled", "{v}");
    assert_eq!(v["tool_calls"][0]["status"], "failed", "{v}");
}
