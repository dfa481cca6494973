//! The REPL on a real pseudo-terminal: slash commands, an inline approval,
//! Ctrl-C cancelling a long shell command, /new, Ctrl-D.

mod common;
#[path = "common/pty.rs"]
mod pty;

use common::Env;
use pty::Pty;

#[test]
fn repl_session() {
    let env = Env::new();
    std::fs::write(env.ws.join("notes.txt"), "remember the milk").unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n\
         [security]\nshell_allowlist = [\"sleep\"]\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\"]\n",
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
    p.expect("Approve? [y/N]");
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
    let t = std::time::Instant::now();
    while !sleeping() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "{}",
            p.transcript()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    p.send("\x03");
    p.expect("cancelled by the operator");
    assert!(!sleeping(), "the shell command was killed");
    p.expect("latchclaw> ");
    p.send("still here?\n");
    p.expect("echo: still here?");
    // Ctrl-D leaves.
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

fn sleeping() -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("40.7171"))
            .unwrap_or(false)
    })
}
