//! Secrets stay secret, on the real binary: what a tool reads or a command
//! prints, and what a provider's error carries, never reaches the server,
//! memory, the receipts or the logs; and the operator sees a pending call
//! whole before approving it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{Env, Run, lit};
use fake_server::{FakeServer, Reply};
use serde_json::{Value, json};

/// The provider's key: `api_key_env`'s value.
const KEY: &str = "sk-test-PlantedProviderKey-0123456789abcdef";
/// A value named in `[security] secret_env`.
const OTHER: &str = "db-Password-Planted-9f8e7d6c";

/// Secrets that appear in the workspace. Built at run time so that no
/// scanner of this repository takes them for real ones.
fn planted() -> Vec<String> {
    vec![
        format!("AKIA{}", "IOSFODNN7EXAMPLE"),
        format!("wJalrXUtnFEMI/K7MDENG/{}", "bPxRfiCYEXAMPLEKEY"),
        format!("sk-{}", "proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
        // The PEM body's lines.
        "MIIEpAIBAAKCAQEA1c7PlantedPemBodyLineOne0123456789abcdefABCDEF".into(),
        "BA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC7PlantedPemBodyLineTwo==".into(),
        KEY.into(),
        OTHER.into(),
    ]
}

fn secret_file() -> String {
    let p = planted();
    format!(
        "# deploy notes\n\
         [default]\naws_access_key_id = {}\naws_secret_access_key = {}\n\
         OPENAI_KEY={}\n\
         -----BEGIN RSA {}-----\n{}\n{}\n-----END RSA PRIVATE KEY-----\n\
         provider: {}\ndatabase: {}\nend of notes\n",
        p[0], p[1], p[2], "PRIVATE KEY", p[3], p[4], p[5], p[6]
    )
}

/// A chat completion that calls one tool.
fn call(id: &str, name: &str, args: Value) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                   "role": "assistant", "content": null,
                   "tool_calls": [{"id": id, "type": "function", "function": {
                       "name": name, "arguments": args.to_string()}}]}}]})
        .to_string(),
    )
}

fn answer(text: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-2", "object": "chat.completion", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": text}}]})
        .to_string(),
    )
}

fn env_for(server: &FakeServer, extra: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"cloud\"\n\
         [security]\nautonomy = \"full\"\nsecret_env = [\"LC_DB_PASSWORD\"]\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         model = \"gpt-4o-mini\"\napi_key_env = \"LC_TEST_KEY\"\ntimeout_secs = 5\nretries = 0\n{extra}",
        server.url()
    ));
    env
}

const SECRETS_ENV: [(&str, &str); 3] = [
    ("LC_TEST_KEY", KEY),
    ("LC_DB_PASSWORD", OTHER),
    ("LATCHCLAW_LOG_LEVEL", "info"),
];

/// Every file latchclaw wrote in its state directory, as text.
fn state_files(env: &Env) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(&env.state).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            let bytes = std::fs::read(&p).unwrap();
            out.push((
                p.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    out
}

fn assert_clean(what: &str, text: &str) {
    for s in planted() {
        assert!(!text.contains(&s), "{s} in {what}:\n{text}");
    }
}

#[test]
fn planted_secrets_never_leave_a_file_read_or_a_command() {
    let server = FakeServer::start(vec![
        call("call_1", "file_read", json!({"path": "notes.txt"})),
        call("call_2", "shell", json!({"command": "cat notes.txt"})),
        answer("The notes hold credentials; I will not repeat them."),
    ]);
    let env = env_for(&server, "");
    std::fs::write(env.ws.join("notes.txt"), secret_file()).unwrap();
    let r = env.run_env(&["agent", "-m", "what is in notes.txt?"], &SECRETS_ENV);
    assert_eq!(r.code, 0, "{r:?}");

    // The server: three requests, the tool results in them redacted.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3, "{r:?}");
    for q in &reqs {
        assert_clean("a request body", &q.body);
    }
    let sent = reqs[2].json();
    let tool_msgs: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(tool_msgs.len(), 2, "{sent}");
    for t in &tool_msgs {
        for mark in [
            "aws_access_key_id = [REDACTED:aws_access_key_id]",
            "aws_secret_access_key = [REDACTED:aws_secret_access_key]",
            "OPENAI_KEY=[REDACTED:openai_key]",
            "[REDACTED:private_key]\n",
            "provider: [REDACTED:env:LC_TEST_KEY]",
            "database: [REDACTED:env:LC_DB_PASSWORD]",
            "end of notes",
        ] {
            assert!(t.contains(mark), "{mark} not in {t}");
        }
    }

    // The logs: the redaction is an event, and nothing secret is logged.
    assert!(r.stderr.contains("[tool_redacted] tool=file_read"), "{r:?}");
    assert!(r.stderr.contains("[tool_redacted] tool=shell"), "{r:?}");
    assert_clean("stderr", &r.stderr);
    assert_clean("stdout", &r.stdout);

    // The receipts say the output was redacted; the files hold nothing.
    let rc = env.receipts();
    assert_eq!(rc.len(), 2);
    for receipt in &rc {
        let reason = receipt["reason"].as_str().unwrap();
        assert!(
            reason.contains(
                "output redacted: aws_access_key_id 1, aws_secret_access_key 1, \
                             env:LC_DB_PASSWORD 1, env:LC_TEST_KEY 1, openai_key 1, private_key 1"
            ),
            "{reason}"
        );
    }
    for (name, text) in state_files(&env) {
        assert_clean(&name, &text);
    }

    // Memory, as the commands show it.
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let conv = list[0]["conversation_id"].as_str().unwrap().to_string();
    let shown = env.run(&["memory", "show", &conv, "--json"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert_clean("memory show", &shown.stdout);
    let turns: Value = serde_json::from_str(&shown.stdout).unwrap();
    let tool_turn = &turns[2];
    assert_eq!(tool_turn["role"], "tool");
    assert!(
        tool_turn["content"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:private_key]"),
        "{tool_turn}"
    );
    assert_eq!(
        tool_turn["tool_results"][0]["result"]["metadata"]["redacted"]["private_key"],
        1
    );
    for q in ["aws_access_key_id", "deploy notes", "REDACTED"] {
        let found = env.run(&["memory", "search", q, "--json"]);
        assert_eq!(found.code, 0, "{found:?}");
        assert_clean("memory search", &found.stdout);
    }
    // The search found the redacted tool turns (the match is highlighted).
    let found = env.run(&["memory", "search", "REDACTED", "--json"]);
    assert!(found.stdout.contains("REDACTED]:private_key]"), "{found:?}");
}

/// Turns stored before redaction existed may hold secrets: memory read-outs
/// (show, search, the notes sent with a message, the `memory_search` tool,
/// a resumed conversation's history) redact on the way out.
#[test]
fn secrets_stored_before_are_redacted_on_the_way_out() {
    let server = FakeServer::start(vec![
        call("call_1", "memory_search", json!({"query": "zanzibar"})),
        answer("Found it."),
    ]);
    // One-shot runs recall only when asked (`memory.recall`).
    let env = env_for(&server, "[memory]\nrecall = \"always\"\n");
    let p = planted();
    let old = format!(
        "zanzibar deploy: key {} aws_secret_access_key={} and {}; provider {} db {}",
        p[0], p[1], p[2], p[5], p[6]
    );
    {
        let mem = latchclaw::memory::Memory::open(
            &env.state.join("memory.sqlite"),
            5000,
            Default::default(),
        )
        .unwrap();
        for role in [
            latchclaw::memory::TurnRole::User,
            latchclaw::memory::TurnRole::Assistant,
        ] {
            mem.add_turn(&latchclaw::memory::NewTurn {
                conversation_id: "conv-old",
                role,
                content: &old,
                ..Default::default()
            })
            .unwrap();
        }
    }
    let r = env.run_env(
        &["agent", "-m", "what about the zanzibar deploy?"],
        &SECRETS_ENV,
    );
    assert_eq!(r.code, 0, "{r:?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    // The notes sent with the message, and the tool's result, found the old
    // turns, redacted.
    let first = &reqs[0].body;
    assert!(
        first.contains("zanzibar deploy: key [REDACTED:aws_access_key_id]"),
        "{first}"
    );
    let second = reqs[1].json();
    let tool = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tool.contains("conv-old") && tool.contains("[REDACTED:"),
        "{tool}"
    );
    for q in &reqs {
        assert_clean("a request body", &q.body);
    }
    assert_clean("stderr", &r.stderr);
    let shown = env.run_env(&["memory", "show", "conv-old", "--json"], &SECRETS_ENV);
    assert!(
        shown.stdout.contains("[REDACTED:env:LC_TEST_KEY]"),
        "{shown:?}"
    );
    assert_clean("memory show", &shown.stdout);
    for args in [
        &["memory", "search", "zanzibar", "--json"][..],
        &["memory", "search", "zanzibar"],
        // No word in it: the substring search.
        &["memory", "search", ";", "--json"],
        &["memory", "list"],
        &["memory", "show", "conv-old"],
    ] {
        let out = env.run_env(args, &SECRETS_ENV);
        assert_eq!(out.code, 0, "{args:?} {out:?}");
        assert_clean(&format!("{args:?}"), &out.stdout);
    }
    // Resumed, the old conversation's history goes to the model redacted.
    let server2 = FakeServer::start(vec![answer("ok")]);
    let env2_cfg = std::fs::read_to_string(env.state.join("config.toml"))
        .unwrap()
        .replace(&server.url(), &server2.url());
    std::fs::write(env.state.join("config.toml"), env2_cfg).unwrap();
    let r = env.run_env(
        &["agent", "--resume", "conv-old", "-m", "and then?"],
        &SECRETS_ENV,
    );
    assert_eq!(r.code, 0, "{r:?}");
    let body = &server2.requests()[0].body;
    assert!(body.contains("zanzibar deploy: key [REDACTED:"), "{body}");
    assert_clean("the resumed request", body);
}

/// Every 8-byte piece of `KEY`.
fn key_pieces() -> Vec<&'static str> {
    (0..=KEY.len() - 8).map(|i| &KEY[i..i + 8]).collect()
}

fn assert_no_key_piece(what: &str, text: &str) {
    for piece in key_pieces() {
        assert!(
            !text.contains(piece),
            "{piece:?} of the key in {what}:\n{text}"
        );
    }
}

/// A provider's error text carrying the key past the 300-character cut:
/// scrubbed first, cut after, so no piece of it survives anywhere.
#[test]
fn provider_errors_are_scrubbed_before_they_are_cut() {
    // The key starts at character 290 of the server's message.
    let lead = "x".repeat(262);
    let message = format!("Incorrect API key provided: {lead}{KEY} (see the docs).");
    assert_eq!(message.find(KEY), Some(290));
    let long_json =
        json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string();
    let cases = [
        ("a JSON 401", Reply::json(401, long_json.clone())),
        (
            "a text 401",
            Reply::json(401, format!("{}:{KEY} unauthorized", "x".repeat(289))),
        ),
        // The "no choices" error was never scrubbed at all.
        (
            "a 200 without choices",
            Reply::json(
                200,
                json!({"error": {"message": format!("bad key {KEY}")}}).to_string(),
            ),
        ),
    ];
    for (what, reply) in cases {
        let server = FakeServer::start(vec![reply]);
        let env = env_for(&server, "");
        let r = env.run_env(&["agent", "-m", "hi", "--json"], &SECRETS_ENV);
        assert!(r.stderr.contains("[REDACTED:"), "{what}: {r:?}");
        assert_no_key_piece(&format!("{what}: stderr"), &r.stderr);
        assert_no_key_piece(&format!("{what}: stdout"), &r.stdout);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        // A provider error: exit 3, `error` in --json.
        assert_eq!(
            (r.code, v["exit_reason"].as_str()),
            (3, Some("error")),
            "{what}: {r:?}"
        );
        assert!(
            v["error"].as_str().unwrap().contains("[REDACTED:"),
            "{what}: {v}"
        );
        for args in [&["runs", "list"][..], &["runs", "list", "--json"]] {
            let runs = env.run(args);
            assert_no_key_piece(&format!("{what}: {args:?}"), &runs.stdout);
        }
        for (name, text) in state_files(&env) {
            assert_no_key_piece(&format!("{what}: {name}"), &text);
        }
    }
}

/// The pieces of a value `describe` wrapped: the first after `first`, the
/// rest indented by `more`.
fn unwrapped(stdout: &str, first: &str, more: &str) -> Option<String> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(first));
    let mut out = lines.next()?.strip_prefix(first)?.to_string();
    for l in lines {
        match l.strip_prefix(more) {
            Some(rest) => out.push_str(rest),
            None => break,
        }
    }
    Some(out)
}

#[test]
fn a_long_pending_command_is_shown_whole() {
    let env = Env::new();
    std::fs::write(env.ws.join("important.txt"), "keep me\n").unwrap();
    let preamble: String = (1..=60).map(|i| format!("step{i} ")).collect();
    let command = format!("echo checking {preamble}&& sed -i d important.txt");
    assert!(command.len() > 300);
    let fixture = env.root.join("long.toml");
    std::fs::write(
        &fixture,
        format!(
            "[[script]]\n[[script.responses]]\n\
             tool_calls = [{{ name = \"shell\", arguments = {{ command = {command:?} }} }}]\n\
             [[script.responses]]\ntext = \"Result: {{{{tool_results}}}}\"\n"
        ),
    )
    .unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n",
        lit(&fixture)
    ));
    let r = env.run(&["agent", "-m", "clean up"]);
    assert_eq!(r.code, 4, "{r:?}");

    let list = env.run(&["approvals", "list"]);
    assert_eq!(list.code, 0, "{list:?}");
    assert!(
        list.stdout.contains("    tool: shell\n    risk: medium\n"),
        "{list:?}"
    );
    assert_eq!(
        unwrapped(&list.stdout, "    argument command: ", "        ").as_deref(),
        Some(command.as_str()),
        "{list:?}"
    );
    assert!(
        list.stdout.lines().all(|l| l.chars().count() <= 100),
        "{list:?}"
    );
    let (_, pending) = env.json(&["approvals", "list", "--json"]);
    let id = pending[0]["id"].as_str().unwrap().to_string();

    // Without a terminal to confirm on: refused, after showing it whole.
    let r: Run = env.run(&["approve", &id]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--yes"), "{r:?}");
    assert_eq!(
        unwrapped(&r.stdout, "  argument command: ", "      ").as_deref(),
        Some(command.as_str()),
        "{r:?}"
    );
    let r = env.run(&["approve", &id, "--yes"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!("approving {id} in conv-")),
        "{r:?}"
    );
    assert_eq!(
        unwrapped(&r.stdout, "  argument command: ", "      ").as_deref(),
        Some(command.as_str()),
        "{r:?}"
    );
    assert!(
        r.stdout.contains(&format!("approved {id}: shell in conv-")),
        "{r:?}"
    );
    // Already decided: refused, and the call is not shown again.
    let again = env.run(&["approve", &id, "--yes"]);
    assert!(again.code == 2 && again.stdout.is_empty(), "{again:?}");
}
