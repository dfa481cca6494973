//! The REPL on a real pseudo-terminal: slash commands, an inline approval,
//! Ctrl-C cancelling a long shell command, /new, Ctrl-D.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/pty.rs"]
mod pty;

use common::{BASIC_TOOLS, Env, processes_with};
use pty::Pty;

#[test]
fn repl_session() {
    let env = Env::new();
    std::fs::write(env.ws.join("notes.txt"), "remember the milk").unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n\
         [security]\nshell_allowlist = [\"sleep\"]\n\
         [channels.cli]\n{BASIC_TOOLS}\n",
        common::lit(&env.root.join("repl.toml"))
    ));
    std::fs::write(
        env.root.join("repl.toml"),
        r#"
[[script]]
when = "write"
[[script.responses]]
tool_calls = [{ name = "file_write", arguments = { path = "out.txt", content = "inline" } }]
[[script.responses]]
text = "wrote: {{tool_results}}"

[[script]]
when = "nap"
[[script.responses]]
tool_calls = [{ name = "shell", arguments = { command = "sleep 40.7171" } }]
[[script.responses]]
text = "napped: {{tool_results}}"

[[script]]
[[script.responses]]
text = "echo: {{user_message}}"
"#,
    )
    .unwrap();
    let mut p = Pty::spawn(&env, &["agent"]);
    p.expect("latchclaw> ");
    p.send("/help\n");
    p.expect("/new  start a new conversation");
    p.send("/tools\n");
    p.expect("file_write");
    p.send("/policy\n");
    p.expect("autonomy: supervised");
    p.send("hello there\n");
    p.expect("echo: hello there");
    p.send("/memory hello\n");
    p.expect("[hello] there");

    // Inline approval on the same terminal.
    p.send("please write it\n");
    p.expect("Approve? [y/N");
    p.send("y\n");
    p.expect("wrote: wrote 6 bytes");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("out.txt")).unwrap(),
        "inline"
    );

    // Ctrl-C cancels the long shell command; the REPL survives. The sleep
    // is high risk under supervised, so approve it in the prompt first.
    p.send("/new\n");
    p.expect("new conversation");
    let mut cfg = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    cfg = cfg.replace("[security]", "[security]\nautonomy = \"full\"");
    std::fs::write(env.state.join("config.toml"), cfg).unwrap();
    p.send("/exit\n");
    assert_eq!(p.wait(), Some(0));

    let mut p = Pty::spawn(&env, &["agent"]);
    p.expect("latchclaw> ");
    p.send("take a nap\n");
    let sleeping = || !processes_with("40.7171").is_empty();
    if !common::eventually(std::time::Duration::from_secs(10), sleeping) {
        panic!("the sleep never started:\n{}", p.transcript());
    }
    p.send("\x03");
    p.expect("[cancelled]");
    assert!(!sleeping(), "the shell command was killed");
    p.expect("latchclaw> ");
    p.send("still here?\n");
    p.expect("echo: still here?");
    // Ctrl-D leaves — sent at the prompt: while a turn ends the terminal is
    // cooked, and the line discipline would take ^D as an end of input
    // for a read that is not waiting.
    p.expect("latchclaw> ");
    p.send("\x04");
    assert_eq!(p.wait(), Some(0));
    // The cancelled command's call has both receipts: Ctrl-C is an outcome.
    let lines = env.receipt_lines();
    let nap: Vec<_> = lines.iter().filter(|r| r["tool"] == "shell").collect();
    assert_eq!(nap.len(), 2, "{lines:?}");
    assert_eq!(
        (&nap[0]["status"], &nap[1]["status"]),
        (&"started".into(), &"failed".into())
    );
    assert_eq!(nap[1]["started_id"], nap[0]["id"]);
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (r.code, &v["unfinished"]),
        (0, &serde_json::json!([])),
        "{r:?}"
    );
}

// ---- the line editor ----

/// A REPL whose mock answers `said<MESSAGE>` (after `extra_scripts`) and
/// records every request.
fn editor_env(extra_scripts: &str) -> Env {
    let env = Env::new();
    let fixture = env.root.join("said.toml");
    std::fs::write(
        &fixture,
        format!("{extra_scripts}\n[[script]]\n[[script.responses]]\ntext = \"said<{{{{user_message}}}}>\"\n"),
    )
    .unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\nrecord_requests = {}\n\
         [channels.cli]\ntools_allow = [\"file_write\"]\n",
        common::lit(&fixture),
        common::lit(&env.root.join("requests.jsonl"))
    ));
    env
}

/// The REPL on a terminal the editor works on.
fn editor(env: &Env, term: &str) -> Pty {
    Pty::spawn_env(env, &["agent"], &[("TERM", term)])
}

/// The user message of each provider request that starts a turn.
fn sent(env: &Env) -> Vec<String> {
    let mut out = Vec::new();
    for r in env.requests() {
        let msgs = r["request"]["messages"].as_array().unwrap();
        let last = msgs.last().unwrap();
        if last["role"] == "user" {
            out.push(last["content"].as_str().unwrap().to_string());
        }
    }
    out
}

const RAW_OFF: libc::tcflag_t = libc::ICANON | libc::ECHO | libc::ISIG;

fn is_cooked(t: &libc::termios) -> bool {
    t.c_lflag & RAW_OFF == RAW_OFF && t.c_iflag & libc::ICRNL != 0
}

#[cfg(feature = "lineedit")]
fn is_raw(t: &libc::termios) -> bool {
    t.c_lflag & RAW_OFF == 0 && t.c_iflag & libc::ICRNL == 0
}

#[test]
#[cfg(feature = "lineedit")]
fn editing_keys_shape_the_message_the_model_gets() {
    let env = editor_env("");
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    // Left thrice to the start, insert; End, Ctrl-A, Ctrl-E.
    p.send("rld\x1b[D\x1b[D\x1b[Dwo\x1b[F!\x01E1 \x05?\r");
    p.expect("said<E1 world!?>");
    // The accepted line stays on the screen whole.
    assert!(
        p.transcript().contains("latchclaw> E1 world!?\r"),
        "{}",
        p.transcript()
    );
    // Ctrl-U kills what is before the cursor.
    p.expect("latchclaw> ");
    p.send("junk E1\x15E1 kept\r");
    p.expect("said<E1 kept>");
    // Ctrl-W twice: two words back.
    p.expect("latchclaw> ");
    p.send("E1 one two three\x17\x17four\r");
    p.expect("said<E1 one four>");
    // Home and End in their other spellings, Delete, Ctrl-K, Backspace,
    // Ctrl-D on a line with text deletes.
    p.expect("latchclaw> ");
    p.send(
        "xxE1 cut here\x1b[H\x1b[3~\x04\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x0b\x7f\x1b[4~ and\r",
    );
    p.expect("said<E1 cu and>");
    // Multi-byte characters move and delete as one.
    p.expect("latchclaw> ");
    p.send("E1 naïve 日本\x1b[D\x7f語\x1bOD\x7f\r");
    p.expect("said<E1 naïve語本>");
    // Typed and pasted at once, Enter inside: two lines.
    p.expect("latchclaw> ");
    p.send("\x1b[200~E1 pasted one\rE1 pasted two\x1b[201~\r");
    p.expect("said<E1 pasted one>");
    p.expect("said<E1 pasted two>");
    p.expect("latchclaw> ");
    p.send("/exit\r");
    assert_eq!(p.wait(), Some(0));
    assert_eq!(
        sent(&env),
        [
            "E1 world!?",
            "E1 kept",
            "E1 one four",
            "E1 cu and",
            "E1 naïve語本",
            "E1 pasted one",
            "E1 pasted two"
        ]
    );
}

#[test]
#[cfg(feature = "lineedit")]
fn up_recalls_earlier_lines_across_sessions_from_a_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = editor_env("");
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    p.send("H2 first\r");
    p.expect("said<H2 first>");
    p.expect("latchclaw> ");
    p.send("H2 second\r");
    p.expect("said<H2 second>");
    // A line typed with a leading space is not kept.
    p.expect("latchclaw> ");
    p.send(" H2 secret\r");
    p.expect("said<H2 secret>");
    p.expect("latchclaw> ");
    p.send("\x1b[A\x1b[A\r");
    p.expect("said<H2 first>");
    // A line being typed survives a walk through the history.
    p.expect("latchclaw> ");
    p.send("H2 dra\x1b[A\x1b[A\x1b[B\x1b[Bft\r");
    p.expect("said<H2 draft>");
    p.expect("latchclaw> ");
    p.send("\x04");
    assert_eq!(p.wait(), Some(0));
    let file = env.state.join("repl_history");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "H2 first\nH2 second\nH2 first\nH2 draft\n"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // A second session starts with that history.
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    p.send("\x1b[A\x1b[A\x1b[A!\r");
    p.expect("said<H2 second!>");
    p.expect("latchclaw> ");
    p.send("\x04");
    assert_eq!(p.wait(), Some(0));
    assert_eq!(
        sent(&env),
        [
            "H2 first",
            "H2 second",
            "H2 secret",
            "H2 first",
            "H2 draft",
            "H2 second!"
        ]
    );
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .ends_with("H2 draft\nH2 second!\n")
    );
}

#[test]
#[cfg(feature = "lineedit")]
fn ctrl_c_at_the_prompt_clears_the_line_and_the_terminal_is_cooked_between_lines() {
    let env = editor_env(
        "[[script]]\nwhen = \"C3 write\"\n[[script.responses]]\n\
         tool_calls = [{ name = \"file_write\", arguments = { path = \"c3.txt\", content = \"x\" } }]\n\
         [[script.responses]]\ntext = \"C3 done: {{tool_results}}\"\n",
    );
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    assert!(is_raw(&p.modes()), "raw while a line is read");
    p.send("C3 abandoned\x03");
    p.expect("C3 abandoned^C");
    p.expect("latchclaw> ");
    assert!(!p.exited());
    p.send("C3 after\r");
    p.expect("said<C3 after>");
    // While a turn runs the terminal is cooked: the approval reads a
    // whole line, and Ctrl-C would be a signal.
    p.expect("latchclaw> ");
    p.send("C3 write it\r");
    p.expect("Approve? [y/N");
    assert!(is_cooked(&p.modes()), "cooked during a turn");
    p.send("n\n");
    p.expect("C3 done:");
    p.expect("latchclaw> ");
    assert!(!env.ws.join("c3.txt").exists());
    p.send("\x04");
    assert_eq!(p.wait_exit(), Some(0));
    assert!(is_cooked(&p.modes()), "cooked after the REPL");
    assert_eq!(sent(&env), ["C3 after", "C3 write it"]);
}

#[test]
#[cfg(feature = "lineedit")]
fn sigterm_at_the_prompt_puts_the_terminal_back() {
    let env = editor_env("");
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    assert!(is_raw(&p.modes()));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(p.pid()).unwrap(),
        rustix::process::Signal::TERM,
    );
    assert_eq!(p.wait_exit(), None, "died of the signal");
    assert!(is_cooked(&p.modes()));
    // It ended by its own path: the run is recorded as ended by it.
    let (r, runs) = env.json(&["runs", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (&runs[0]["exit_code"], &runs[0]["exit_reason"]),
        (
            &serde_json::json!(143),
            &serde_json::json!("signal: stopped by signal 15")
        ),
        "{runs}"
    );

    // What the check would see with nothing put back (SIGKILL cannot be
    // caught): the terminal stays raw.
    let mut p = editor(&env, "xterm");
    p.expect("latchclaw> ");
    assert!(is_raw(&p.modes()));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(p.pid()).unwrap(),
        rustix::process::Signal::KILL,
    );
    assert_eq!(p.wait_exit(), None);
    assert!(is_raw(&p.modes()));
}

#[test]
fn a_dumb_terminal_reads_plain_lines() {
    let env = editor_env("");
    let mut p = editor(&env, "dumb");
    p.expect("latchclaw> ");
    assert!(is_cooked(&p.modes()));
    // Keys are no commands here: Ctrl-A is a byte of the line.
    p.send("D5 plain\x01x\n");
    p.expect("said<D5 plain");
    p.expect("latchclaw> ");
    p.send("\x04");
    assert_eq!(p.wait(), Some(0));
    assert_eq!(sent(&env), ["D5 plain\u{1}x"]);
    assert!(!env.state.join("repl_history").exists());
}

/// A build without the line editor reads plain lines on any terminal,
/// as the editor does on a dumb one: cooked, keys as bytes, no history.
#[test]
#[cfg(not(feature = "lineedit"))]
fn without_the_editor_a_terminal_reads_plain_lines() {
    let env = editor_env("");
    let mut p = editor(&env, "xterm-256color");
    p.expect("latchclaw> ");
    assert!(is_cooked(&p.modes()));
    // No editing: Ctrl-A and an arrow key are bytes of the line.
    p.send("E7 plain\x01x\x1b[D\n");
    p.expect("said<E7 plain");
    p.expect("latchclaw> ");
    assert!(is_cooked(&p.modes()));
    p.send("/help\n");
    p.expect("Ctrl-C cancels a running turn");
    p.expect("latchclaw> ");
    assert!(
        !p.transcript().contains("keys: arrows"),
        "{}",
        p.transcript()
    );
    p.send("\x04");
    assert_eq!(p.wait(), Some(0));
    assert_eq!(sent(&env), ["E7 plain\u{1}x\u{1b}[D"]);
    assert!(!env.state.join("repl_history").exists());
}

#[test]
#[cfg(feature = "lineedit")]
fn a_long_line_scrolls_sideways_in_a_narrow_terminal() {
    let env = editor_env("");
    let mut p = editor(&env, "xterm");
    p.resize(30, 10);
    p.expect("latchclaw> ");
    let line = format!("L6start-{}-L6end", "x".repeat(80));
    for chunk in line.as_bytes().chunks(7) {
        p.send(std::str::from_utf8(chunk).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    p.expect("-L6end\x1b[K");
    p.send("\x01");
    p.expect("latchclaw> L6start-");
    p.send("\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C\x1b[C>\r");
    let typed = format!("L6start->{}-L6end", "x".repeat(80));
    p.expect(&format!("said<{typed}>"));
    p.expect("latchclaw> ");
    p.send("/exit\r");
    assert_eq!(p.wait_exit(), Some(0));
    assert_eq!(sent(&env), [typed.as_str()]);
    // Every redraw fits in 29 columns, the cursor included.
    let t = p.transcript();
    let mut redraws = 0;
    for seg in t.split('\r') {
        let Some(rest) = seg.strip_prefix("latchclaw> ") else {
            continue;
        };
        let Some(end) = rest.find("\x1b[K") else {
            continue;
        };
        redraws += 1;
        assert!(11 + rest[..end].chars().count() <= 29, "{seg:?}");
    }
    for col in t.split("\x1b[").filter_map(|s| s.split_once('C')) {
        if let Ok(n) = col.0.parse::<usize>() {
            assert!(n <= 29, "cursor at column {n}");
        }
    }
    assert!(redraws > 5, "{t:?}");
}
