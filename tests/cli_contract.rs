//! The command line as a contract: flags anywhere, `--json` on every data
//! command, the positional prompt, help and completions from one set of
//! definitions, non-UTF-8 arguments, singular counts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BIN, Env};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Every data command: the same JSON whether `--json` comes first, in the
/// middle or last.
#[test]
fn json_is_taken_in_any_position_by_every_data_command() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    assert_eq!(env.run(&["agent", "-m", "hi"]).code, 0);
    let skill = env.state.join("skills/demo");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: demo\ndescription: d\n---\nbody\n",
    )
    .unwrap();
    let echo = common::fixture("plugins/echo");
    if cfg!(feature = "plugins") {
        assert_eq!(
            env.run(&["plugin", "install", echo.to_str().unwrap()]).code,
            0
        );
    }
    for cmd in [
        &["config", "show"][..],
        &["provider", "list"],
        &["tool", "list"],
        &["policy", "show"],
        &["memory", "list"],
        &["memory", "search", "hi"],
        &["memory", "notes"],
        &["memory", "notes", "--category", "fact"],
        &["receipt", "list"],
        &["receipt", "verify"],
        &["receipt", "head"],
        &["receipt", "repair"],
        &["approvals", "list"],
        &["runs", "list"],
        &["prompt", "show"],
        &["skill", "list"],
        &["skill", "show", "demo"],
        &["plugin", "list"],
        &["plugin", "show", "echo"],
        &["mcp", "list"],
        &["task", "list"],
    ]
    .into_iter()
    .filter(|c| {
        (c[0] != "plugin" || cfg!(feature = "plugins")) && (c[0] != "mcp" || cfg!(feature = "mcp"))
    }) {
        let last: Vec<&str> = cmd.iter().copied().chain(["--json"]).collect();
        let first: Vec<&str> = ["--json"].into_iter().chain(cmd.iter().copied()).collect();
        let middle: Vec<&str> = [cmd[0], "--json"]
            .into_iter()
            .chain(cmd[1..].iter().copied())
            .collect();
        let (r, want) = env.json(&last);
        assert_eq!(r.code, 0, "{last:?}: {r:?}");
        for argv in [&first, &middle] {
            let (r, got) = env.json(argv);
            assert_eq!(r.code, 0, "{argv:?}: {r:?}");
            if cmd[0] == "runs" {
                // Each run records its own command line; the rows match.
                assert_eq!(got.as_array().map(Vec::len), want.as_array().map(Vec::len));
            } else if cmd[..2] == ["memory", "search"] {
                // A hit's score decays with its age, so it moves between two
                // calls; the hits and their order do not.
                let unscored = |v: &serde_json::Value| {
                    let mut v = v.clone();
                    for hit in v.as_array_mut().into_iter().flatten() {
                        hit.as_object_mut().map(|o| o.remove("score"));
                    }
                    v
                };
                assert_eq!(unscored(&got), unscored(&want), "{argv:?}");
                assert!(got[0]["score"].as_f64().is_some_and(|s| s > 0.0), "{got}");
            } else {
                assert_eq!(got, want, "{argv:?}");
            }
        }
    }
    // `tool list --json` used to be refused; both orders are one list.
    let (_, v) = env.json(&["tool", "list", "--json"]);
    assert!(
        v.as_array().unwrap().iter().any(|t| t["name"] == "shell"),
        "{v}"
    );
}

#[test]
fn policy_show_json_is_the_policy_as_data() {
    let env = Env::new();
    env.config(
        "[security]\nautonomy = \"readonly\"\nforbidden_commands = [\"rm\", \"dd\"]\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_read\"]\n",
    );
    let (r, v) = env.json(&["policy", "show", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["autonomy"], "readonly", "{v}");
    assert_eq!(v["workspace"], env.ws.display().to_string(), "{v}");
    assert_eq!(
        v["forbidden_commands"],
        serde_json::json!(["rm", "dd"]),
        "{v}"
    );
    assert_eq!(
        v["tools_enabled"],
        serde_json::json!(["time", "file_read"]),
        "{v}"
    );
    assert_eq!(v["state_dir"], env.state.display().to_string(), "{v}");
    assert_eq!(v["estop"], false, "{v}");
    assert!(
        v["shell_allowlist"].is_array() && v["confinement"]["mode"].is_string(),
        "{v}"
    );
    assert_eq!(env.run(&["estop"]).code, 0);
    let (_, v) = env.json(&["--json", "policy", "show"]);
    assert_eq!(v["estop"], true, "{v}");
    // The text form is unchanged: lines, not JSON.
    let r = env.run(&["policy", "show"]);
    assert!(
        r.code == 0 && r.stdout.starts_with("autonomy: readonly\n"),
        "{r:?}"
    );
    // Each allowlisted program on its line, saying what latchclaw knows of it.
    assert!(
        r.stdout
            .contains("\nshell allowlist:\n  ls: 61 options; operands read"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("\n  sed: 19 options; script analysed"),
        "{r:?}"
    );
    // A missing workspace is said, not hidden.
    std::fs::remove_dir_all(&env.ws).unwrap();
    let (r, v) = env.json(&["policy", "show", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        v["workspace"].is_null() && v["workspace_error"].is_string(),
        "{v}"
    );
}

#[test]
fn misplaced_and_unknown_flags_name_the_flag_the_command_and_what_it_takes() {
    let env = Env::new();
    env.config("");
    let cases: &[(&[&str], &str)] = &[
        (
            &["tool", "list", "--yes"],
            "`latchclaw tool list` does not take --yes; its options: --json",
        ),
        (
            &["--limit", "3", "tool", "list"],
            "`latchclaw tool list` does not take --limit",
        ),
        (
            &["agent", "--frobnicate", "-m", "hi"],
            "invalid option '--frobnicate' for `latchclaw agent`; its options: --json, --message MESSAGE",
        ),
        (
            &["--json", "tool", "run", "time"],
            "`latchclaw tool run` takes --json ARGS",
        ),
        (
            &["tool", "list", "extra"],
            "`latchclaw tool list` takes no arguments",
        ),
        (
            &["memory"],
            "`latchclaw memory` needs a subcommand: list, search, show, clear, notes, forget",
        ),
        (&["memory", "forgot"], "unknown command `memory forgot`"),
        (
            &["gateway", "--rotate"],
            "`latchclaw gateway` does not take --rotate; its options: --bind ADDR:PORT",
        ),
        (
            &["gateway", "token", "--bind", "127.0.0.1:1"],
            "`latchclaw gateway token` does not take --bind; its options: --rotate",
        ),
        (
            &["gateway", "tokn"],
            "`latchclaw gateway` takes no arguments",
        ),
        (
            &["gateway", "--bind", "7878"],
            "--bind: \"7878\" is not ADDR:PORT",
        ),
        (
            &["memory", "forget"],
            "`latchclaw memory forget` needs a note id (from memory notes)",
        ),
        (
            &["memory", "forget", "1", "--json"],
            "`latchclaw memory forget` does not take --json",
        ),
        (&["memory", "notes", "--category"], "--category"),
        (
            &["memory", "list", "--category", "fact"],
            "`latchclaw memory list` does not take --category; its options: --json, --limit N",
        ),
        (
            &["completions", "powershell"],
            "allowed values: bash, zsh, fish",
        ),
        (&["help", "frobnicate"], "not a command"),
        (
            &["skill"],
            "`latchclaw skill` needs a subcommand: list, show",
        ),
        (
            &["skill", "show"],
            "`latchclaw skill show` needs a skill name",
        ),
        (
            &["plugin", "install"],
            "`latchclaw plugin install` needs a plugin directory",
        ),
        (
            &["plugin", "approve"],
            "`latchclaw plugin approve` needs a plugin name",
        ),
        (
            &["plugin", "remove", "nothing-here"],
            if cfg!(feature = "plugins") {
                "no plugin \"nothing-here\"; installed: none"
            } else {
                "`latchclaw plugin remove` is not in this build"
            },
        ),
        (
            &["mcp", "tools"],
            "`latchclaw mcp tools` needs a server name (from mcp list)",
        ),
        (
            &["mcp", "test", "nope"],
            if cfg!(feature = "mcp") {
                "no MCP server \"nope\""
            } else {
                "`latchclaw mcp test` is not in this build"
            },
        ),
        (
            &["service"],
            "`latchclaw service` needs a subcommand: install, start, stop, status, uninstall",
        ),
        (
            &["service", "install", "--bind", "localhost"],
            "--bind: \"localhost\" is not ADDR:PORT",
        ),
        (
            &["service", "start", "--force"],
            "`latchclaw service start` does not take --force; its options: none",
        ),
        (
            &["service", "status", "--print"],
            "`latchclaw service status` does not take --print",
        ),
        (
            &["skill", "show", "Bad/Name"],
            "\"Bad/Name\" is not a skill name: only a-z, 0-9, _ and - are allowed",
        ),
    ];
    for (args, want) in cases {
        let r = env.run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(want),
            "{args:?} should say {want:?}: {r:?}"
        );
    }
}

#[test]
fn a_positional_prompt_works_like_dash_m() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    let dash_m = env.run(&["agent", "-m", "what changed?"]);
    let positional = env.run(&["agent", "what changed?"]);
    assert_eq!(dash_m.code, 0, "{dash_m:?}");
    assert_eq!(positional.code, 0, "{positional:?}");
    assert!(!positional.stdout.trim().is_empty(), "{positional:?}");
    assert_eq!(positional.stdout, dash_m.stdout);
    let reqs = env.requests();
    let last_user = |i: usize| reqs[i]["request"]["messages"][0]["content"].clone();
    assert_eq!(last_user(1), "what changed?", "{reqs:?}");
    assert_eq!(last_user(0), last_user(1));
    // Flags around it, and --json, still apply.
    let (r, v) = env.json(&["--json", "agent", "what changed?", "-c"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        v["conversation_id"],
        env.json(&["memory", "list", "--json"]).1[0]["conversation_id"]
    );
    for (args, want) in [
        (&["agent", "a", "-m", "b"][..], "not both"),
        (&["agent", "what", "changed"], "one too many"),
    ] {
        let r = env.run(args);
        assert!(r.code == 2 && r.stderr.contains(want), "{args:?}: {r:?}");
    }
}

#[test]
fn non_utf8_arguments_are_usage_errors_not_panics() {
    let env = Env::new();
    env.config("");
    let bad = OsStr::from_bytes(b"/tmp/la\xfftch.toml");
    let cases: Vec<(Vec<&OsStr>, &str)> = vec![
        (
            vec![
                "--config".as_ref(),
                bad,
                "config".as_ref(),
                "validate".as_ref(),
            ],
            "--config",
        ),
        (vec!["agent".as_ref(), "-m".as_ref(), bad], "--message"),
        (vec!["agent".as_ref(), bad], "an argument"),
        (
            vec!["init".as_ref(), "--workspace".as_ref(), bad],
            "--workspace",
        ),
        (
            vec!["memory".as_ref(), "search".as_ref(), bad],
            "an argument",
        ),
    ];
    for (args, names) in cases {
        let r: common::Run = env.command(&[]).args(&args).output().unwrap().into();
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(names) && r.stderr.contains("not valid UTF-8"),
            "{args:?}: {r:?}"
        );
        assert!(
            !r.stderr.contains("panicked") && !r.stderr.contains("internal error"),
            "{r:?}"
        );
    }
}

#[test]
fn help_command_subcommand_help_and_the_exit_table_once() {
    let env = Env::new();
    let top = env.run(&["--help"]);
    assert_eq!(top.code, 0);
    assert!(
        top.stdout.contains("8  another run holds the --lock"),
        "{top:?}"
    );
    assert_eq!(env.run(&["help"]).stdout, top.stdout);
    for cmd in [
        &["memory", "search"][..],
        &["agent"],
        &["tool", "run"],
        &["policy", "show"],
        &["receipt", "repair"],
        &["receipt", "verify"],
        &["receipt", "head"],
        &["service", "install"],
        &["completions"],
    ] {
        let via_help: Vec<&str> = ["help"].into_iter().chain(cmd.iter().copied()).collect();
        let via_flag: Vec<&str> = cmd.iter().copied().chain(["--help"]).collect();
        let a = env.run(&via_help);
        let b = env.run(&via_flag);
        assert_eq!(a.code, 0, "{a:?}");
        assert_eq!(a.stdout, b.stdout, "{cmd:?}");
        assert!(
            a.stdout
                .starts_with(&format!("Usage: latchclaw {}", cmd.join(" "))),
            "{a:?}"
        );
        // One table, in `latchclaw --help`; commands point to it.
        assert!(!a.stdout.contains("8  another run holds"), "{a:?}");
        assert!(
            a.stdout.contains("Exit codes: see `latchclaw --help`"),
            "{a:?}"
        );
    }
    let r = env.run(&["help", "policy", "show"]);
    assert!(r.stdout.contains("  --json"), "{r:?}");
    let r = env.run(&["tool", "run", "--help"]);
    assert!(r.stdout.contains("  --json ARGS"), "{r:?}");
    let r = env.run(&["help", "receipt", "repair"]);
    assert!(
        r.stdout.contains("  --json") && r.stdout.contains("torn last line"),
        "{r:?}"
    );
    let r = env.run(&["receipt", "--help"]);
    assert!(r.stdout.contains("receipt repair"), "{r:?}");
    assert!(r.stdout.contains("receipt head"), "{r:?}");
    let r = env.run(&["help", "receipt", "verify"]);
    assert!(
        r.stdout.contains("  --expect-head HASH")
            && r.stdout.contains("  --since N:HASH")
            && r.stdout.contains("hmac"),
        "{r:?}"
    );
    // Only verify takes them.
    let r = env.run(&["receipt", "head", "--since", "1:ab"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--since"), "{r:?}");
    let r = env.run(&["memory", "--help"]);
    assert!(
        r.code == 0
            && r.stdout.contains("memory search QUERY")
            && r.stdout.contains("memory clear")
            && r.stdout.contains("memory notes")
            && r.stdout.contains("memory forget ID"),
        "{r:?}"
    );
    let r = env.run(&["memory", "notes", "--help"]);
    assert!(
        r.code == 0 && r.stdout.contains("--category CATEGORY") && r.stdout.contains("--json"),
        "{r:?}"
    );
}

/// Every top-level command word, as README and `--help` list them.
const COMMAND_WORDS: &[&str] = &[
    "init",
    "onboard",
    "config",
    "provider",
    "tool",
    "policy",
    "agent",
    "memory",
    "receipt",
    "estop",
    "approvals",
    "approve",
    "deny",
    "runs",
    "sop",
    "prompt",
    "service",
    "completions",
    "help",
];

/// What bash completes for `latchclaw WORDS...` (the last word is the one
/// being completed).
fn bash_complete(script: &str, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "{script}\nCOMP_WORDS=(latchclaw {})\nCOMP_CWORD={}\n_latchclaw\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        quoted.join(" "),
        words.len()
    );
    let out = std::process::Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn completions_are_generated_for_every_command_and_flag() {
    let env = Env::new();
    let r = env.run(&["completions", "bash"]);
    assert_eq!(r.code, 0, "{r:?}");
    let bash = r.stdout;
    let top_level: Vec<&str> = bash
        .lines()
        .find_map(|l| l.trim().strip_prefix("*) opts=\""))
        .expect("the top-level case")
        .split(['"', ' '])
        .collect();
    for w in COMMAND_WORDS {
        assert!(
            top_level.contains(w),
            "bash completion lacks {w}: {top_level:?}"
        );
    }
    for f in [
        "--json",
        "--message",
        "--no-stream",
        "--limit",
        "--config",
        "--workspace",
    ] {
        assert!(bash.contains(f), "bash completion lacks {f}");
    }
    // It parses, and completes what the definitions say.
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .status()
        .unwrap();
    assert!(check.success());
    assert_eq!(bash_complete(&bash, &["too"]), ["tool"]);
    assert_eq!(bash_complete(&bash, &["tool", "l"]), ["list"]);
    assert_eq!(bash_complete(&bash, &["tool", "list", "--j"]), ["--json"]);
    assert_eq!(
        bash_complete(&bash, &["--json", "tool", "list", "--j"]),
        ["--json"]
    );
    assert_eq!(
        bash_complete(&bash, &["memory", "s"]),
        ["search", "show", "summarize"]
    );
    assert_eq!(
        bash_complete(&bash, &["memory", "summarize", "--p"]),
        ["--period"]
    );
    assert_eq!(bash_complete(&bash, &["memory", "f"]), ["forget"]);
    assert_eq!(
        bash_complete(&bash, &["memory", "notes", "--c"]),
        ["--config", "--category"]
    );
    assert_eq!(
        bash_complete(&bash, &["service", "s"]),
        ["start", "stop", "status"]
    );
    assert_eq!(
        bash_complete(&bash, &["service", "install", "--p"]),
        ["--print"]
    );
    assert_eq!(bash_complete(&bash, &["receipt", "r"]), ["repair"]);
    assert_eq!(bash_complete(&bash, &["receipt", "h"]), ["head"]);
    assert_eq!(
        bash_complete(&bash, &["receipt", "verify", "--s"]),
        ["--since"]
    );
    assert_eq!(
        bash_complete(&bash, &["receipt", "repair", "--j"]),
        ["--json"]
    );
    assert_eq!(
        bash_complete(&bash, &["agent", "--no"]),
        ["--no-stream", "--no-memory"]
    );
    // A flag's value is not taken for a command word.
    assert_eq!(
        bash_complete(&bash, &["--config", "x.toml", "estop", "--c"]),
        ["--config", "--clear"]
    );
    assert!(bash_complete(&bash, &["estop", "--j"]).is_empty());

    let zsh = env.run(&["completions", "zsh"]);
    assert!(
        zsh.code == 0 && zsh.stdout.contains("bashcompinit") && zsh.stdout.contains("_latchclaw")
    );
    let fish = env.run(&["completions", "fish"]);
    assert_eq!(fish.code, 0);
    for w in COMMAND_WORDS {
        assert!(
            fish.stdout.contains(&format!("-a {w} ")),
            "fish completion lacks {w}"
        );
    }
    assert!(
        fish.stdout.contains(
            "-n '__fish_seen_subcommand_from tool; and __fish_seen_subcommand_from list' -l json"
        ),
        "{}",
        fish.stdout
    );
    assert!(
        fish.stdout.contains(
            "-n '__fish_seen_subcommand_from receipt; and __fish_seen_subcommand_from repair' -l json"
        ),
        "{}",
        fish.stdout
    );
    // Written from the same table as help: the binary says so too.
    assert!(std::path::Path::new(BIN).exists());
}

#[test]
fn one_receipt_is_singular() {
    let env = Env::new();
    env.config("");
    // A denied call leaves exactly one receipt.
    let (r, v) = env.tool("file_read", serde_json::json!({"path": "/etc/passwd"}));
    assert_eq!((r.code, v["status"].as_str()), (4, Some("denied")), "{r:?}");
    let r = env.run(&["receipt", "verify"]);
    assert!(r.stdout.starts_with("ok: 1 receipt, head "), "{r:?}");
    // `time` changes nothing: one outcome receipt, no `started` one.
    let r = env.run(&["tool", "run", "time"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run(&["receipt", "verify"]);
    assert!(r.stdout.starts_with("ok: 2 receipts, head "), "{r:?}");
    let r = env.run(&["config", "validate"]);
    assert!(r.stdout.contains("(1 provider, default"), "{r:?}");
}
