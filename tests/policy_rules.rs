//! Policy rules (`[[policy.rules]]`) on the real binary: rules match what
//! the gate parsed (every spelling of an option's meaning), never widen a
//! wall, their examples are checked by `config validate`, `policy check`
//! names the deciding rule, and `policy replay` re-judges recorded calls
//! without running them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit};
use serde_json::{Value, json};

fn check(env: &Env, tool: &str, args: Value) -> Value {
    let (r, v) = env.json(&["policy", "check", tool, "--json", &args.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    v
}

fn shell_check(env: &Env, command: &str) -> Value {
    check(env, "shell", json!({ "command": command }))
}

/// rm allowlisted (and no longer forbidden) under full autonomy: without a
/// rule the gate asks about it; the rule denies its recursive forms.
fn rm_env(rules: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "[security]\nautonomy = \"full\"\nforbidden_commands = [\"sudo\"]\n\
         shell_allowlist = [\"ls\", \"cat\", \"cp\", \"rm\", \"tee\"]\n{rules}"
    ));
    common::write_files(
        &env.ws,
        &[
            ("victim/keep.txt", "canary"),
            ("a.txt", "a"),
            ("b.txt", "b"),
        ],
    );
    env
}

const NO_RM_R: &str = r#"
[[policy.rules]]
name = "no-recursive-rm"
tool = "shell"
program = "rm"
flags = ["recursive"]
effect = "deny"
reason = "recursive removal needs a person"
"#;

#[test]
fn a_rule_on_recursion_denies_every_spelling_and_nothing_else() {
    let env = rm_env(NO_RM_R);
    for c in [
        "rm -r -f victim",
        "rm -fr victim",
        "rm -rf victim",
        "rm --recursive victim",
        "rm --recur victim",
        "rm -R victim",
        "ls && rm -Rf victim",
    ] {
        let v = shell_check(&env, c);
        assert_eq!(v["decision"], "deny", "{c}: {v}");
        assert_eq!(v["refusal"], "policy", "{c}: {v}");
        assert_eq!(v["rule"], "no-recursive-rm", "{c}: {v}");
    }
    // Neighbours: the same program without recursion, and a file literally
    // named like the option after `--`, are the gate's alone.
    for c in [
        "rm a.txt",
        "rm -f a.txt",
        "rm -- -r",
        "rm -v -- victim -r",
        "cat -- -r",
    ] {
        let v = shell_check(&env, c);
        assert_eq!(v["rule"], Value::Null, "{c}: {v}");
        assert_ne!(v["refusal"], "policy", "{c}: {v}");
    }
    // By effect, through the same path the agent takes.
    for c in ["rm -r -f victim", "rm -fr victim", "rm --recursive victim"] {
        let (r, v) = env.shell(c);
        assert_eq!(r.code, 4, "{c}: {r:?}");
        assert_eq!(v["status"], "denied", "{c}: {v}");
        assert!(
            env.ws.join("victim/keep.txt").exists(),
            "{c} removed the tree"
        );
    }
    // The denial receipt carries the rule's reason.
    let last = env.receipts().pop().unwrap();
    assert_eq!(last["status"], "denied");
    assert!(
        last["reason"].as_str().unwrap().contains("no-recursive-rm"),
        "{last}"
    );
}

#[test]
fn cp_archive_counts_as_recursive_by_the_table() {
    let env = rm_env(
        r#"
[[policy.rules]]
name = "no-recursive-copy"
tool = "shell"
program = "cp"
flags = ["recursive"]
effect = "deny"
reason = "recursive copies need a person"
examples = [{ command = "cp -a src dst", expect = "deny" }, { command = "cp a.txt b.txt", expect = "pass" }]
"#,
    );
    for c in [
        "cp -a victim dst",
        "cp -r victim dst",
        "cp -R victim dst",
        "cp --recursive victim dst",
        "cp --archive victim dst",
        "cp -va victim dst",
    ] {
        let v = shell_check(&env, c);
        assert_eq!(v["rule"], "no-recursive-copy", "{c}: {v}");
        assert_eq!(v["decision"], "deny", "{c}: {v}");
    }
    let v = shell_check(&env, "cp a.txt c.txt");
    assert_eq!(v["rule"], Value::Null, "{v}");
    assert_eq!(v["decision"], "allow", "{v}");
    let (r, v) = env.shell("cp -a victim dst");
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
    assert!(!env.ws.join("dst").exists(), "the copy ran");
    // `policy show` lists it.
    let (_, v) = env.json(&["policy", "show", "--json"]);
    assert_eq!(v["policy_rules"][0]["name"], "no-recursive-copy", "{v}");
    assert_eq!(v["policy_rules"][0]["effect"], "deny", "{v}");
    assert_eq!(v["policy_rules"][0]["examples"], 2, "{v}");
    // Its examples pass.
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("1 policy rule (2 examples checked)"),
        "{r:?}"
    );
}

#[test]
fn an_allow_never_widens_a_wall() {
    let env = Env::new();
    let secret_dir = env.ws.join("private");
    env.config(&format!(
        "[security]\nautonomy = \"supervised\"\nforbidden_paths = [{}]\n{}",
        lit(&secret_dir),
        r#"
[[policy.rules]]
name = "read-anything"
effect = "allow"
reason = "the operator trusts reads"

[[policy.rules]]
name = "rm-is-fine"
program = "rm"
effect = "allow"
reason = "removal is fine"
"#
    ));
    common::write_files(
        &env.ws,
        &[("private/canary.txt", "CANARY-PRIVATE"), ("x.txt", "x")],
    );
    // A forbidden path, outside the workspace, a forbidden command, and a
    // high-risk call under supervised: the gate's refusal stands.
    for (tool, args) in [
        ("file_read", json!({"path": "private/canary.txt"})),
        ("file_read", json!({"path": "/etc/passwd"})),
        ("shell", json!({"command": "cat private/canary.txt"})),
        ("shell", json!({"command": "rm x.txt"})),
        ("shell", json!({"command": "sudo ls"})),
    ] {
        let v = check(&env, tool, args.clone());
        assert_eq!(v["decision"], "deny", "{tool} {args}: {v}");
        assert_eq!(v["rule"], Value::Null, "{tool} {args}: {v}");
        let (r, out) = env.tool(tool, args.clone());
        assert_eq!(r.code, 4, "{tool} {args}: {r:?}");
        assert!(!r.stdout.contains("CANARY-PRIVATE"), "{r:?}");
        assert_eq!(out["status"], "denied");
    }
    assert!(env.ws.join("x.txt").exists());
    assert!(!env.receipt_lines().iter().any(|l| l["status"] == "started"));
}

#[test]
fn allow_lifts_an_ask_and_ask_adds_one_within_the_walls() {
    let env = Env::new();
    env.config(
        r#"
[channels.cli]
tools_allow = ["file_read", "file_write", "shell"]
[security]
autonomy = "supervised"

[[policy.rules]]
name = "notes-freely"
tool = "file_write"
paths = ["notes/*"]
effect = "allow"
reason = "notes are scratch space"

[[policy.rules]]
name = "ask-before-cat"
program = "cat"
effect = "ask"
reason = "cat is watched"
"#,
    );
    common::write_files(&env.ws, &[("notes/.keep", ""), ("a.txt", "A-TEXT")]);
    // Medium risk under supervised asks; the rule lets it run.
    let (r, v) = env.tool(
        "file_write",
        json!({"path": "notes/n.txt", "content": "hi"}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "allowed");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("notes/n.txt")).unwrap(),
        "hi"
    );
    // Its neighbour still asks (and with no terminal, does not run).
    let v = check(
        &env,
        "file_write",
        json!({"path": "other.txt", "content": "x"}),
    );
    assert_eq!(v["decision"], "ask", "{v}");
    let (r, _) = env.tool("file_write", json!({"path": "other.txt", "content": "x"}));
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!env.ws.join("other.txt").exists());
    // A low-risk read the gate allows is asked about.
    let v = shell_check(&env, "cat a.txt");
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("ask"), Some("ask-before-cat"))
    );
    let (r, _) = env.shell("cat a.txt");
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("A-TEXT"), "{r:?}");
    let v = shell_check(&env, "ls");
    assert_eq!(v["decision"], "allow");
}

#[test]
fn an_allow_covers_a_line_only_if_it_covers_all_of_it() {
    let env = Env::new();
    env.config(
        r#"
[security]
autonomy = "supervised"
shell_allowlist = ["cp", "tee", "ls"]

[[policy.rules]]
name = "copies"
program = "cp"
effect = "allow"
reason = "copies are fine"

[[policy.rules]]
name = "notes"
program = "tee"
paths = ["notes/*"]
effect = "allow"
reason = "notes are scratch space"
"#,
    );
    common::write_files(&env.ws, &[("notes/.keep", ""), ("a.txt", "a")]);
    let v = shell_check(&env, "cp a.txt b.txt");
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("allow"), Some("copies")),
        "{v}"
    );
    let v = shell_check(&env, "tee notes/x.txt notes/y.txt");
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("allow"), Some("notes")),
        "{v}"
    );
    // Another writer on the line, or a path outside the glob: still asked.
    for c in [
        "cp a.txt b.txt && tee c.txt < a.txt",
        "tee notes/x.txt other.txt",
        // A path it reads is a path of the call too.
        "tee notes/x.txt < a.txt",
    ] {
        let v = shell_check(&env, c);
        assert_eq!(v["decision"], "ask", "{c}: {v}");
        let (r, _) = env.shell(c);
        assert_ne!(r.code, 0, "{c}: {r:?}");
    }
    assert!(!env.ws.join("c.txt").exists() && !env.ws.join("other.txt").exists());
}

#[test]
fn origin_tells_tool_run_from_an_agent() {
    let env = Env::new();
    env.config(
        r#"
[[policy.rules]]
name = "no-cli-time"
tool = "time"
origin = "cli"
effect = "deny"
reason = "not from the command line"
"#,
    );
    // `policy check` judges as an agent would: the rule is not for it.
    let v = check(&env, "time", json!({}));
    assert_eq!(v["decision"], "allow", "{v}");
    let (r, v) = env.tool("time", json!({}));
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
}

#[test]
fn a_policy_file_named_by_the_config() {
    let env = Env::new();
    std::fs::write(
        env.state.join("policy.toml"),
        r#"
[[rules]]
name = "no-http-example"
tool = "http"
hosts = ["local*"]
effect = "deny"
reason = "no example hosts"
"#,
    )
    .unwrap();
    env.config(
        "policy = \"policy.toml\"\n[tools.http]\nenabled = true\n\
         allowed_domains = [\"localhost\", \"127.0.0.1\"]\nallow_private = [\"localhost\", \"127.0.0.1\"]\n",
    );
    let v = check(&env, "http", json!({"url": "http://localhost:9/x"}));
    assert_eq!(v["rule"], "no-http-example", "{v}");
    assert_eq!(v["refusal"], "policy", "{v}");
    // The same server by address: the gate allows it, the rule is not for it.
    let v = check(&env, "http", json!({"url": "http://127.0.0.1:9/x"}));
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("allow"), None),
        "{v}"
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn config_validate_checks_rules_and_examples_in_one_pass() {
    let env = rm_env(
        r#"
[[policy.rules]]
name = "wrong-example"
program = "cp"
flags = ["recursive"]
effect = "deny"
reason = "x"
examples = [{ command = "cp a.txt b.txt", expect = "deny" }, { command = "cp -R a b", expect = "pass" }]
"#,
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("policy.rules[0].examples[0]"), "{r:?}");
    assert!(r.stderr.contains("policy.rules[0].examples[1]"), "{r:?}");
    assert!(r.stderr.contains("wrong-example"), "{r:?}");

    // What the file says, every problem in one pass.
    let env = rm_env(
        r#"
[[policy.rules]]
name = "b"
tool = "shel"
effect = "maybe"
origin = "cron"

[[policy.rules]]
program = "cp"
effect = "deny"
reason = "z"
"#,
    );
    let r = env.run(&["policy", "check", "time"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "policy.rules[0].tool: \"shel\"",
        "policy.rules[0].effect: \"maybe\"",
        "policy.rules[0].reason: is required",
        "policy.rules[0].origin: \"cron\"",
        "policy.rules[1].name: is required",
    ] {
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
    // Then what only the option tables know: a meaning or option the
    // program does not have, a program without a table.
    let env = rm_env(
        r#"
[[policy.rules]]
name = "a"
program = "cp"
flags = ["recursiv"]
effect = "deny"
reason = "x"

[[policy.rules]]
name = "c"
program = "npm"
options = ["--force"]
effect = "ask"
reason = "y"

[[policy.rules]]
name = "d"
program = "rm"
options = ["--bogus"]
effect = "ask"
reason = "y"
"#,
    );
    let r = env.run(&["policy", "check", "time"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "policy.rules[0] (\"a\").flags: \"recursiv\"",
        "policy.rules[1] (\"c\").options",
        "policy.rules[2] (\"d\").options",
    ] {
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
}

const PROPOSED: &str = r#"
[[policy.rules]]
name = "no-recursive-copy"
program = "cp"
flags = ["recursive"]
effect = "deny"
reason = "recursive copies need a person"

[[policy.rules]]
name = "ask-text-reads"
tool = "file_read"
paths = ["*.txt"]
effect = "ask"
reason = "reads of text files are asked"
"#;

#[test]
fn replay_of_a_recorded_turn_changes_nothing_it_runs() {
    let env = Env::new();
    let script = env.root.join("script.toml");
    std::fs::write(
        &script,
        r#"
[[script]]
[[script.responses]]
text = "copying"
tool_calls = [
  { name = "shell", arguments = { command = "cp -a src dst" } },
  { name = "shell", arguments = { command = "cat a.txt" } },
  { name = "file_read", arguments = { path = "a.txt" } },
]
[[script.responses]]
text = "done"
"#,
    )
    .unwrap();
    let base = format!(
        "workspace_dir = {}\n[security]\nautonomy = \"full\"\n[providers.models.mock]\nkind = \"mock\"\nfixture = {}\n",
        lit(&env.ws),
        lit(&script)
    );
    std::fs::write(env.state.join("config.toml"), &base).unwrap();
    let proposed = env.root.join("proposed.toml");
    std::fs::write(&proposed, format!("{base}{PROPOSED}")).unwrap();
    common::write_files(&env.ws, &[("src/f.txt", "f"), ("a.txt", "a")]);
    let r = env.run(&["agent", "-m", "go"]);
    assert_eq!(r.code, 0, "{r:?}");
    std::fs::remove_dir_all(env.ws.join("dst")).unwrap();
    let receipts_before = env.receipt_lines().len();

    // Under the config in force: what was recorded is what it says.
    let (r, v) = env.json(&["policy", "replay", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (v["calls"].as_u64(), v["changed"].as_u64()),
        (Some(3), Some(0)),
        "{v}"
    );

    let p = proposed.display().to_string();
    let (r, v) = env.json(&["--config", &p, "policy", "replay", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["judged"], 3, "{v}");
    assert_eq!(v["changed"], 2, "{v}");
    assert_eq!(v["by_rule"]["no-recursive-copy"]["allow->deny"], 1, "{v}");
    assert_eq!(v["by_rule"]["ask-text-reads"]["allow->ask"], 1, "{v}");
    let changed: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["cp -a src dst", "a.txt"]);
    // Nothing ran: no copy, no receipt.
    assert!(!env.ws.join("dst").exists());
    assert_eq!(env.receipt_lines().len(), receipts_before);

    // --since: a receipt past the log, a date to come, a bad value.
    let (_, v) = env.json(&[
        "--config", &p, "policy", "replay", "--since", "100000", "--json",
    ]);
    assert_eq!(v["calls"], 0, "{v}");
    let (_, v) = env.json(&[
        "--config",
        &p,
        "policy",
        "replay",
        "--since",
        "2999-01-01",
        "--json",
    ]);
    assert_eq!(v["calls"], 0, "{v}");
    let (_, v) = env.json(&["--config", &p, "policy", "replay", "--since", "1", "--json"]);
    assert_eq!(v["calls"], 3, "{v}");
    let r = env.run(&["policy", "replay", "--since", "yesterday"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--since"), "{r:?}");
    // The text form names the rules and counts.
    let r = env.run(&["--config", &p, "policy", "replay"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("no-recursive-copy: allow->deny 1"),
        "{r:?}"
    );
}

#[test]
fn replay_over_a_thousand_recorded_calls_counts_per_rule() {
    use latchclaw::memory::{Memory, Round, RoundResult};
    let env = Env::new();
    let base = format!("workspace_dir = {}\n", lit(&env.ws));
    std::fs::write(
        env.state.join("config.toml"),
        format!("{base}[security]\nautonomy = \"full\"\n"),
    )
    .unwrap();
    let proposed = env.root.join("proposed.toml");
    std::fs::write(
        &proposed,
        format!("{base}[security]\nautonomy = \"full\"\n{PROPOSED}"),
    )
    .unwrap();
    common::write_files(&env.ws, &[("src/f.txt", "f"), ("a.txt", "a")]);
    let calls = [
        json!({"name": "shell", "arguments": {"command": "cp -a src dst"}}),
        json!({"name": "shell", "arguments": {"command": "cp -r src dst"}}),
        json!({"name": "shell", "arguments": {"command": "cp a.txt b.txt"}}),
        json!({"name": "file_read", "arguments": {"path": "a.txt"}}),
        json!({"name": "time", "arguments": {}}),
    ];
    let m = Memory::open(&env.state.join("memory.sqlite"), 5000, Default::default()).unwrap();
    // 100 rounds of 10 calls, in 20 conversations.
    for round in 0..100 {
        let mut tool_calls = Vec::new();
        let mut results = Vec::new();
        for i in 0..10 {
            let mut c = calls[(round * 10 + i) % calls.len()].clone();
            let id = format!("call_{i}");
            c["id"] = json!(id);
            tool_calls.push(c);
            results.push(RoundResult {
                call_id: id.clone(),
                content: "ok".into(),
                tool_results: None,
                metadata: json!({"tool_call_id": id, "status": "allowed"}).to_string(),
            });
        }
        m.add_round(
            &Round {
                conversation_id: format!("conv-{}", round % 20),
                content: String::new(),
                tool_calls: Value::Array(tool_calls).to_string(),
                call_ids: (0..10).map(|i| format!("call_{i}")).collect(),
                provider: "mock".into(),
                model: "mock".into(),
                metadata: "{}".into(),
                results,
            },
            "",
        )
        .unwrap();
    }
    drop(m);
    let p = proposed.display().to_string();
    let (r, v) = env.json(&["--config", &p, "policy", "replay", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["calls"], 1000, "{}", v["calls"]);
    assert_eq!(v["judged"], 1000);
    assert_eq!(v["by_rule"]["no-recursive-copy"]["allow->deny"], 400);
    assert_eq!(v["by_rule"]["ask-text-reads"]["allow->ask"], 200);
    assert_eq!(v["changed"], 600);
    assert_eq!(v["by_change"]["allow->deny"], 400);
    // Against what was recorded (all allowed), the config in force agrees.
    let (_, v) = env.json(&["policy", "replay", "--json"]);
    assert_eq!(
        (v["judged"].as_u64(), v["changed"].as_u64()),
        (Some(1000), Some(0))
    );
}

#[test]
#[cfg(feature = "sop")]
fn a_rule_for_sop_calls_holds_a_sop_step_and_not_an_agent() {
    let env = Env::new();
    env.config(
        r#"
[channels.cli]
tools_allow = ["file_list", "file_write", "time"]
[security]
autonomy = "full"

[[policy.rules]]
name = "sops-write-nothing"
tool = "file_write"
origin = "sop"
effect = "deny"
reason = "SOPs only read"
"#,
    );
    let dir = env.state.join("sops/writer");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SOP.toml"),
        r#"
name = "writer"
[[steps]]
id = "write"
kind = "tool"
tool = "file_write"
args = { path = "from-sop.txt", content = "x" }
"#,
    )
    .unwrap();
    let r = env.run(&["sop", "run", "writer", "--json"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(!env.ws.join("from-sop.txt").exists(), "the SOP step wrote");
    let last = env.receipts().pop().unwrap();
    assert_eq!(last["status"], "denied", "{last}");
    assert!(
        last["conversation_id"]
            .as_str()
            .unwrap()
            .starts_with("sop:"),
        "{last}"
    );
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .contains("sops-write-nothing"),
        "{last}"
    );
    // The same call outside a SOP is not the rule's.
    let (r, v) = env.tool(
        "file_write",
        json!({"path": "from-cli.txt", "content": "x"}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "allowed");
    assert!(env.ws.join("from-cli.txt").exists());
}

#[test]
fn a_path_rule_holds_through_a_link() {
    let env = Env::new();
    env.config(
        r#"
[security]
autonomy = "full"

[[policy.rules]]
name = "private-is-private"
paths = ["private/*"]
effect = "deny"
reason = "private notes"
"#,
    );
    common::write_files(
        &env.ws,
        &[("private/canary.txt", "CANARY-LINKED"), ("a.txt", "a")],
    );
    std::os::unix::fs::symlink(env.ws.join("private"), env.ws.join("p")).unwrap();
    for (tool, args) in [
        ("file_read", json!({"path": "private/canary.txt"})),
        ("file_read", json!({"path": "p/canary.txt"})),
        ("shell", json!({"command": "cat p/canary.txt"})),
        ("shell", json!({"command": "cat < p/canary.txt"})),
    ] {
        let v = check(&env, tool, args.clone());
        assert_eq!(v["rule"], "private-is-private", "{tool} {args}: {v}");
        let (r, out) = env.tool(tool, args.clone());
        assert_eq!(r.code, 4, "{tool} {args}: {r:?}");
        assert_eq!(out["status"], "denied");
        assert!(!r.stdout.contains("CANARY-LINKED"), "{r:?}");
    }
    let v = check(&env, "file_read", json!({"path": "a.txt"}));
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("allow"), None),
        "{v}"
    );
}

#[test]
#[cfg(feature = "plugins")]
fn a_plugin_rule_holds_every_tool_of_the_plugin() {
    let env = Env::new();
    env.config(
        r#"
[[policy.rules]]
name = "no-echo"
plugin = "echo"
effect = "deny"
reason = "echo is retired"
"#,
    );
    let r = env.run(&[
        "plugin",
        "install",
        common::fixture("plugins/echo").to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let v = check(&env, "echo", json!({"text": "hi"}));
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("deny"), Some("no-echo")),
        "{v}"
    );
    assert_eq!(v["refusal"], "policy", "{v}");
    let (r, v) = env.tool("echo", json!({"text": "ECHO-CANARY"}));
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
    assert!(!r.stdout.contains("ECHO-CANARY"), "{r:?}");
    // It never started: a plugin that runs gets a `started` receipt first.
    assert!(!env.receipt_lines().iter().any(|l| l["status"] == "started"));
    // A built-in is not the plugin's.
    let v = check(&env, "time", json!({}));
    assert_eq!(v["rule"], Value::Null, "{v}");
}
