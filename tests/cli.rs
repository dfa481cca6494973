//! Command-line contract: help, bad input, the path policy through
//! `tool run`, locking and concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit};
use std::os::unix::fs::symlink;

#[test]
fn help_on_every_command_and_version() {
    let env = Env::new();
    for args in [
        &["--help"][..],
        &["init", "--help"],
        &["config", "validate", "--help"],
        &["config", "show", "--help"],
        &["provider", "list", "--help"],
        &["tool", "list", "--help"],
        &["tool", "run", "--help"],
        &["agent", "--help"],
        &["memory", "list", "--help"],
        &["memory", "search", "--help"],
        &["memory", "show", "--help"],
        &["memory", "clear", "--help"],
        &["receipt", "list", "--help"],
        &["receipt", "verify", "--help"],
        &["estop", "--help"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(
            r.stdout.contains("Usage") && r.stdout.contains("Exit codes"),
            "{args:?}"
        );
    }
    // The version, then the features built (tests/features.rs).
    let r = env.run(&["--version"]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("latchclaw {}", env!("CARGO_PKG_VERSION")),
        "{r:?}"
    );
    assert!(
        lines.len() == 2 && lines[1].starts_with("features: "),
        "{r:?}"
    );
}

#[test]
fn usage_errors_exit_2_with_a_clear_message() {
    let env = Env::new();
    env.config("");
    let cases: &[(&[&str], &str)] = &[
        (&[], "no command"),
        (&["frobnicate"], "unknown command"),
        (
            &["tool", "run", "teleport", "--json", "{}"],
            "unknown tool \"teleport\"; known tools:",
        ),
        (&["tool", "run", "time", "--json", "{nope"], "invalid JSON"),
        (
            &["tool", "run", "time", "--json", "[1]"],
            "must be a JSON object",
        ),
        (&["tool", "run"], "needs a tool name"),
        (&["memory", "clear"], "--yes"),
        (&["memory", "list", "--yes"], "does not take --yes"),
        (&["memory", "show", "conv-nope"], "no conversation"),
        (&["memory", "list", "--limit", "-3"], "--limit"),
        (&["agent", "--bogus"], "invalid option"),
        (&["agent", "-m"], "missing argument"),
        (&["agent", "-m", "  "], "empty"),
        (
            &["agent", "--conversation", "conv-missing", "-m", "x"],
            "no conversation",
        ),
        (
            &[
                "--config",
                "/nonexistent/latchclaw.toml",
                "config",
                "validate",
            ],
            "cannot read config",
        ),
    ];
    for (args, want) in cases {
        let r = env.run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(want),
            "{args:?} should say {want:?}: {r:?}"
        );
        assert!(!r.stderr.contains("panicked"), "{r:?}");
    }
}

#[test]
fn config_errors_all_at_once_with_key_paths() {
    let env = Env::new();
    env.config(
        "max_tool_rounds = \"many\"\nmystery = 1\ndefault_provider = \"ghost\"\n\
         [security]\nautonomy = \"godmode\"\nworkspace_only = 1\n\
         [memory]\nbackend = \"postgres\"\n\
         [providers.models.p]\nkind = \"telepathy\"\n",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "7 errors",
        "max_tool_rounds: expected an integer",
        "mystery: unknown key",
        "default_provider: \"ghost\" is not defined",
        "security.autonomy: \"godmode\" is not allowed; allowed values: readonly, supervised, full",
        "security.workspace_only: expected true or false",
        "memory.backend: \"postgres\" is not allowed; allowed values: sqlite",
        "providers.models.p.kind: \"telepathy\" is not allowed; allowed values: mock, openai-compatible, reliable, router",
    ] {
        assert!(r.stderr.contains(want), "missing {want:?}: {r:?}");
    }
}

#[test]
fn malformed_toml_names_line_and_column() {
    let env = Env::new();
    std::fs::write(
        env.state.join("config.toml"),
        "a = 1\n[security\nautonomy = 2\n",
    )
    .unwrap();
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("malformed TOML at line 2, column"),
        "{r:?}"
    );
}

#[test]
fn provider_config_errors_and_cycles_are_clear() {
    let env = Env::new();
    env.config("default_provider = \"cloud\"\n[providers.models.cloud]\nkind = \"router\"\n");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("default_route: missing"), "{r:?}");
    env.config("[providers.models.x]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\ntool_mode = \"smoke-signals\"\n[providers.models.x.headers]\nAuthorization = \"Bearer sk-x\"\n");
    let r = env.run(&["config", "validate"]);
    assert!(
        r.code == 2 && r.stderr.contains("auto, native, text"),
        "{r:?}"
    );
    assert!(
        r.stderr.contains("credentials do not belong in the config"),
        "{r:?}"
    );
    env.config(
        "default_provider = \"a\"\n[providers.models.a]\nkind = \"reliable\"\nproviders = [\"b\"]\n\
         [providers.models.b]\nkind = \"reliable\"\nproviders = [\"a\"]\n",
    );
    let r = env.run(&["agent", "-m", "hi"]);
    assert!(
        r.code == 2 && r.stderr.contains("provider cycle: a -> b -> a"),
        "{r:?}"
    );
    // A key of another kind is an error naming the kind and what it takes,
    // with the rest in the same pass.
    env.config(
        "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
         fixture = \"f.toml\"\n\
         [providers.models.m]\nkind = \"mock\"\nbase_url = \"http://h/v1\"\ntemperature = 3\n",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "3 errors",
        "providers.models.m.base_url: a key of openai-compatible providers, not of mock ones; \
         mock providers take: kind, model, timeout_secs, max_tools, fixture, record_requests, \
         stream",
        "providers.models.m.temperature: a key of openai-compatible providers",
        "providers.models.o.fixture: a key of mock providers, not of openai-compatible ones; \
         openai-compatible providers take: kind, model, timeout_secs, max_tools, base_url, \
         api_key_env, \
         temperature, max_tokens, headers, tool_mode, stream, retries",
    ] {
        assert!(r.stderr.contains(want), "missing {want:?}: {r:?}");
    }
}

#[test]
fn env_expansion_in_config_paths() {
    let env = Env::new();
    let fixture = common::fixture("hello.toml");
    std::fs::write(
        env.state.join("config.toml"),
        "workspace_dir = \"${LC_TEST_WS}\"\ndefault_provider = \"m\"\n\
         [providers.models.m]\nkind = \"mock\"\nfixture = \"$LC_TEST_FIXTURE\"\n\
         [receipts]\npath = \"~/receipts/log.jsonl\"\n",
    )
    .unwrap();
    let vars = [
        ("LC_TEST_WS", env.ws.to_str().unwrap()),
        ("LC_TEST_FIXTURE", fixture.to_str().unwrap()),
    ];
    let r = env.run_env(&["agent", "-m", "hi"], &vars);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\n"), "{r:?}");
    let r = env.run_env(&["config", "show", "--json"], &vars);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["receipts"]["path"],
        env.home.join("receipts/log.jsonl").display().to_string()
    );
    // An unset variable is an error naming it.
    let r = env.run(&["config", "validate"]);
    assert!(
        r.code == 2 && r.stderr.contains("LC_TEST_WS is not set"),
        "{r:?}"
    );
}

/// Paths expand `$VAR`, so `config show` writes a `$` in a path as `$$`:
/// what it prints loads back to the same values, and shows the same again.
#[test]
fn config_show_round_trips_paths_with_dollars_and_spaces() {
    let env = Env::new();
    // Unescaped, `$HOME` would load as another directory and `${` would
    // not load at all.
    let ws = env.home.join("my $HOME ws");
    let log = env.root.join("receipts ${x.log");
    std::fs::create_dir_all(&ws).unwrap();
    let escaped = |p: &std::path::Path| lit(p).replace('$', "$$");
    std::fs::write(
        env.state.join("config.toml"),
        format!(
            "workspace_dir = {}\ndefault_provider = \"m\"\n\
             [providers.models.m]\nkind = \"mock\"\nfixture = {}\nstream = false\n\
             [receipts]\npath = {}\n",
            escaped(&ws),
            lit(&common::fixture("hello.toml")),
            escaped(&log)
        ),
    )
    .unwrap();
    let (r, original) = env.json(&["config", "show", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(original["workspace_dir"], ws.display().to_string());
    assert_eq!(original["receipts"]["path"], log.display().to_string());
    assert_eq!(original["providers"]["models"]["m"]["stream"], false);
    let shown = env.run(&["config", "show"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(shown.stdout.contains("my $$HOME ws"), "{shown:?}");
    assert!(shown.stdout.contains("receipts $${x.log"), "{shown:?}");
    let copy = env.root.join("shown.toml");
    std::fs::write(&copy, &shown.stdout).unwrap();
    let copy = copy.to_str().unwrap();
    let r = env.run(&["--config", copy, "config", "validate"]);
    assert!(r.code == 0 && r.stdout.starts_with("ok: "), "{r:?}");
    let (_, reloaded) = env.json(&["--config", copy, "config", "show", "--json"]);
    assert_eq!(original, reloaded);
    let again = env.run(&["--config", copy, "config", "show"]);
    let body = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&again.stdout), body(&shown.stdout));
    // The workspace is the one the config names: a file made there is
    // listed by a tool.
    std::fs::write(ws.join("marker.txt"), "x").unwrap();
    let r = env.run(&["--config", copy, "tool", "run", "file_list", "--json", "{}"]);
    assert!(r.code == 0 && r.stdout.contains("marker.txt"), "{r:?}");
}

fn read(env: &Env, path: &str) -> common::Run {
    env.run(&[
        "tool",
        "run",
        "file_read",
        "--json",
        &serde_json::json!({ "path": path }).to_string(),
    ])
}

#[test]
fn path_policy_escapes_are_denied_through_the_binary() {
    let env = Env::new();
    env.config(&format!(
        "[security]\nforbidden_paths = [\"/etc\", \"~/.ssh\", {}]\n",
        lit(&env.ws.join("private"))
    ));
    let outside = env.home.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    std::fs::write(env.home.join(".ssh/id_rsa"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(env.ws.join("private")).unwrap();
    std::fs::write(env.ws.join("private/key"), "TOP-SECRET").unwrap();
    std::fs::write(env.ws.join("ok.txt"), "fine").unwrap();
    symlink(outside.join("secret.txt"), env.ws.join("link-out")).unwrap();
    symlink(&outside, env.ws.join("dir-out")).unwrap();
    symlink(outside.join("not-yet"), env.ws.join("dangling")).unwrap();
    symlink("loop-b", env.ws.join("loop-a")).unwrap();
    symlink("loop-a", env.ws.join("loop-b")).unwrap();
    symlink(&env.state, env.ws.join("state-link")).unwrap();
    std::fs::hard_link(outside.join("secret.txt"), env.ws.join("hard")).unwrap();

    let ok = read(&env, "ok.txt");
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(ok.stdout.contains("fine"));

    for (p, why) in [
        ("../outside/secret.txt", "outside the workspace"),
        ("./../outside/secret.txt", "outside the workspace"),
        (
            "nonexistent/../../outside/secret.txt",
            "outside the workspace",
        ),
        ("/etc/passwd", "forbidden path"),
        ("/etc/../etc/passwd", "forbidden path"),
        ("~/.ssh/id_rsa", "forbidden path"),
        ("~root/.bashrc", "~user"),
        ("link-out", "outside the workspace"),
        ("dir-out/secret.txt", "outside the workspace"),
        ("dangling", "outside the workspace"),
        ("loop-a", "loop"),
        ("private/key", "forbidden path"),
        ("./private/../private/key", "forbidden path"),
        ("state-link/config.toml", "own state"),
        ("hard", "hard links"),
        ("ok.txt\u{0}", "NUL"),
    ] {
        let r = read(&env, p);
        assert_eq!(r.code, 4, "{p}: {r:?}");
        assert!(r.stdout.contains(why), "{p} should mention {why:?}: {r:?}");
        assert!(!r.stdout.contains("TOP-SECRET"), "{p}: {r:?}");
    }
    let rc = env.receipts();
    assert_eq!(rc.len(), 17);
    assert_eq!(rc.iter().filter(|r| r["status"] == "denied").count(), 16);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);

    let r = env.run(&[
        "tool",
        "run",
        "file_list",
        "--json",
        r#"{"path": "dir-out"}"#,
    ]);
    assert_eq!(r.code, 4, "{r:?}");
}

#[test]
fn state_files_are_unreachable_even_without_workspace_only() {
    let env = Env::new();
    env.config("[security]\nworkspace_only = false\nforbidden_paths = []\n");
    env.run(&["tool", "run", "time", "--json", "{}"]);
    // /proc/PID/environ of latchclaw itself would hold provider keys.
    for p in ["/proc/self/environ", "/proc/1/environ"] {
        let r = read(&env, p);
        assert_eq!(r.code, 4, "{p}: {r:?}");
    }
    for f in [
        "config.toml",
        "tool_receipts.log",
        "memory.sqlite",
        "memory.sqlite-wal",
        "ESTOP",
        "",
    ] {
        let p = env.state.join(f).display().to_string();
        let r = read(&env, &p);
        assert_eq!(r.code, 4, "{p}: {r:?}");
        assert!(r.stdout.contains("own state"), "{r:?}");
    }
    // The workspace contains the state dir: listing hides it.
    let env2 = Env::new();
    std::fs::write(
        env2.state.join("config.toml"),
        format!("workspace_dir = {}\n", lit(&env2.home)),
    )
    .unwrap();
    let r = env2.run(&["tool", "run", "file_list", "--json", "{}"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains(".latchclaw"), "{r:?}");
    assert!(r.stdout.contains("own state hidden"), "{r:?}");
}

#[test]
fn file_read_refuses_binary_fifos_and_caps_output() {
    let env = Env::new();
    env.config("tool_output_max_bytes = 1024\n");
    std::fs::write(env.ws.join("bin"), [0u8, 159, 146, 150, 0xff]).unwrap();
    std::fs::write(env.ws.join("big.txt"), "x".repeat(5000)).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        env.ws.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let r = read(&env, "bin");
    assert!(
        r.code == 3 && r.stdout.contains("not a UTF-8 text file"),
        "{r:?}"
    );
    let r = read(&env, "fifo");
    assert!(
        r.code == 3 && r.stdout.contains("not a regular file"),
        "{r:?}"
    );
    let r = read(&env, "big.txt");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("truncated: showing the first 1024 of 5000 bytes"),
        "{r:?}"
    );
}

#[test]
fn locked_database_waits_then_fails_clearly() {
    let env = Env::new();
    env.config("[memory]\nbusy_timeout_ms = 300\n");
    assert_eq!(env.run(&["agent", "-m", "warm up"]).code, 0);
    let conn = rusqlite::Connection::open(env.state.join("memory.sqlite")).unwrap();
    conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let started = std::time::Instant::now();
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("locked"), "{r:?}");
    assert!(started.elapsed().as_millis() >= 300, "it waited first");
    conn.execute_batch("ROLLBACK").unwrap();
    assert_eq!(env.run(&["agent", "-m", "hi"]).code, 0);
}

#[test]
fn unreadable_receipts_log_is_a_clear_error() {
    let env = Env::new();
    env.config("");
    std::fs::create_dir(env.state.join("tool_receipts.log")).unwrap();
    for args in [
        &["receipt", "verify"][..],
        &["receipt", "list"],
        &["tool", "run", "time", "--json", "{}"],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 3, "{args:?}: {r:?}");
        assert!(r.stderr.contains("tool_receipts.log"), "{r:?}");
    }
}

#[test]
fn eight_processes_fifty_receipts_each_keep_one_chain() {
    let env = Env::new();
    // Each run anchors its head too: concurrent appends and anchors. 400
    // shell calls in an hour: over the default 200 an hour, so raised.
    let anchor = env.root.join("anchor.log");
    env.config(&format!(
        "[receipts]\nanchor_file = {}\n[tools.shell]\nrate_limit = {{ per_hour = 1000 }}\n",
        lit(&anchor)
    ));
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let mut cmd = env.shell_command("echo hi");
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let out = cmd.output().unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // Each call is a started receipt and its outcome; interleaved across
    // processes, every outcome still finds its start.
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["receipts"], 800, "{r:?}");
    assert_eq!(v["unfinished"], serde_json::json!([]), "{r:?}");
    let lines = env.receipt_lines();
    let outcomes: Vec<_> = lines.iter().filter(|r| r["status"] == "allowed").collect();
    assert_eq!(outcomes.len(), 400);
    for o in outcomes {
        let start = lines.iter().position(|s| s["id"] == o["started_id"]);
        assert!(
            start.is_some_and(|i| lines[i]["status"] == "started"),
            "{o}"
        );
    }
    // Every anchored head is the receipt at its position.
    let text = std::fs::read_to_string(&anchor).unwrap();
    assert_eq!(text.lines().count(), 400);
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let n: usize = f[1].parse().unwrap();
        assert_eq!(lines[n - 1]["receipt_hash"], f[2], "{l}");
    }
}

#[test]
fn memory_clear_and_continue() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    env.run(&["agent", "-m", "first"]);
    let (_, v) = env.json(&["agent", "-c", "-m", "second", "--json"]);
    let (_, list) = env.json(&["memory", "list", "--json"]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["conversation_id"], v["conversation_id"]);
    assert_eq!(list[0]["turns"], 4);
    // The resumed turn carried the earlier messages to the provider.
    let reqs = env.requests();
    assert_eq!(reqs[1]["request"]["messages"].as_array().unwrap().len(), 3);
    let r = env.run(&["memory", "clear", "--yes"]);
    assert!(r.code == 0 && r.stdout.contains("deleted 4 turns"), "{r:?}");
    let (_, list) = env.json(&["memory", "list", "--json"]);
    assert!(list.as_array().unwrap().is_empty());
}

#[test]
fn example_config_is_valid_and_complete() {
    let env = Env::new();
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let r = env.run(&["--config", example.to_str().unwrap(), "config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    // Every key `config show` prints is documented in the example.
    let text = std::fs::read_to_string(&example).unwrap();
    let (_, v) = env.json(&[
        "--config",
        example.to_str().unwrap(),
        "config",
        "show",
        "--json",
    ]);
    for (k, val) in v.as_object().unwrap() {
        assert!(text.contains(k.as_str()), "{k} undocumented");
        if let Some(obj) = val
            .as_object()
            .filter(|_| !matches!(k.as_str(), "providers" | "channels" | "tools"))
        {
            for sub in obj.keys() {
                assert!(text.contains(&format!("{sub} ")), "{k}.{sub} undocumented");
            }
        }
    }
}

#[test]
fn tool_list_takes_json_as_a_switch() {
    let env = Env::new();
    let (r, v) = env.json(&["tool", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"shell") && names.contains(&"file_read"),
        "{names:?}"
    );
}

#[test]
fn tool_list_columns_line_up_with_long_risks() {
    let env = Env::new();
    let r = env.run(&["tool", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let header = lines[0];
    let col = header.find("DESCRIPTION").unwrap();
    // The longest risk ("low / medium (allowlisted) / high") included,
    // every description starts in the header's column, after two spaces.
    for l in &lines[1..] {
        let (head, _) = l.split_at(col);
        assert!(head.ends_with("  "), "{l:?} (column {col})");
        assert!(!l[col..].starts_with(' '), "{l:?} (column {col})");
    }
    assert!(
        r.stdout.contains("low / medium (allowlisted) / high  Runs"),
        "{r:?}"
    );
}

/// `policy check` prints JSON: a hidden character in what it echoes back
/// (the plan's argv, the reason) is a `\uXXXX` escape, the same value to a
/// parser and visible on a terminal.
#[test]
fn policy_check_output_shows_hidden_characters_as_escapes() {
    let env = Env::new();
    env.config("");
    let command = "echo Meeting notes\u{e0041}\u{e006c}\u{a0}-rf \u{202e}txt";
    let args = serde_json::json!({ "command": command }).to_string();
    let r = env.run(&["policy", "check", "shell", "--json", &args]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains(r#""notes\udb40\udc41\udb40\udc6c\u00a0-rf","\u202etxt""#),
        "{r:?}"
    );
    assert!(r.stdout.is_ascii(), "{r:?}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let argv: Vec<&str> = v["plan"][0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        argv,
        [
            "echo",
            "Meeting",
            "notes\u{e0041}\u{e006c}\u{a0}-rf",
            "\u{202e}txt"
        ]
    );
}
