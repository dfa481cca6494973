//! MCP over Streamable HTTP on the real binary, against
//! `fixtures/mcp/http_server.py` (a fake that insists on the session id it
//! gave and on the protocol version header, like real servers): listed,
//! approved, called with its answer streamed, its own request refused,
//! the session ended; HTTP failures, an ended session and a hang are typed
//! failures within the deadline; where a url may point.
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, fixture, lit, skip};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";
const TOKEN: &str = "tok-mcp-http-canary-0123456789";

/// The fake server in `mode`, and the port it listens on; killed on drop.
struct Fake {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fake {
    fn start(env: &Env, mode: &str) -> Fake {
        let log = env.root.join(format!("http-{mode}.log"));
        let mut child = Command::new(PYTHON)
            .arg(fixture("mcp/http_server.py"))
            .arg(&log)
            .arg(mode)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap();
        Fake { child, port, log }
    }

    fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn usable() -> bool {
    if !Path::new(PYTHON).is_file() {
        skip(format!("no {PYTHON}"));
        return false;
    }
    true
}

fn configure(env: &Env, url: &str, extra: &str) {
    env.config(&format!(
        "[mcp.servers.h]\nurl = \"{url}\"\nbearer_token_env = \"LC_MCP_TOKEN\"\n\
         timeout_secs = 3\nrisk = \"low\"\nread_only_tools = [\"echo\"]\n{extra}\n"
    ));
}

fn run(env: &Env, args: &[&str]) -> common::Run {
    let r = env.run_env(args, &[("LC_MCP_TOKEN", TOKEN)]);
    assert!(
        !r.stdout.contains(TOKEN) && !r.stderr.contains(TOKEN),
        "the token was shown: {r:?}"
    );
    r
}

#[test]
fn a_streamable_http_server_is_listed_approved_called_and_its_session_ended() {
    if !usable() {
        return;
    }
    let env = Env::new();
    let fake = Fake::start(&env, "ok");
    configure(&env, &format!("http://127.0.0.1:{}/mcp", fake.port), "");
    let r = run(&env, &["mcp", "test", "h"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("1 tool"), "{r:?}");
    // At trace the HTTP crate dumps what it sends as hex beside text: a
    // token there is out of the redactor's reach, so none is logged.
    let r = env.run_env(
        &["mcp", "test", "h"],
        &[("LC_MCP_TOKEN", TOKEN), ("RUST_LOG", "trace")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let hex: String = TOKEN.bytes().take(6).map(|b| format!("{b:02x}")).collect();
    let spaced = format!("{} {} {}", &hex[0..4], &hex[4..8], &hex[8..12]);
    assert!(
        !r.stderr.contains(&hex) && !r.stderr.contains(&spaced) && !r.stderr.contains(TOKEN),
        "{}",
        r.stderr
    );
    // Not approved yet: unknown, and the error says how to approve it.
    let r = run(&env, &["tool", "run", "mcp_h_echo", "--json", "{}"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("latchclaw mcp approve h"), "{r:?}");
    let r = run(&env, &["mcp", "approve", "h"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = run(
        &env,
        &[
            "tool",
            "run",
            "mcp_h_echo",
            "--json",
            r#"{"text": "over http"}"#,
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["output"], "echo: over http", "{v}");

    let seen = fake.seen();
    let posts: Vec<&Value> = seen.iter().filter(|e| e["http"] == "POST").collect();
    // Every message carried the token and accepted both kinds of answer.
    for p in &posts {
        assert_eq!(p["auth"], format!("Bearer {TOKEN}"), "{p}");
        assert_eq!(p["accept"], "application/json, text/event-stream", "{p}");
    }
    // initialize goes without a session; everything after it with the one
    // given and the version agreed.
    for p in &posts {
        if p["method"] == "initialize" {
            assert!(p["session"].is_null() && p["protocol"].is_null(), "{p}");
        } else {
            assert_eq!(p["session"], "sess-7f3a", "{p}");
            assert_eq!(p["protocol"], "2025-06-18", "{p}");
        }
    }
    let methods: Vec<&str> = posts
        .iter()
        .map(|p| p["method"].as_str().unwrap())
        .collect();
    assert!(
        methods.contains(&"notifications/initialized"),
        "{methods:?}"
    );
    assert!(methods.contains(&"tools/call"), "{methods:?}");
    // The server's own request (sampling) was refused, by a POST.
    let refusal = posts
        .iter()
        .find(|p| p["method"] == "response")
        .expect("the sampling request answered");
    assert_eq!(refusal["id"], "srv-1");
    assert_eq!(refusal["error"]["code"], -32601);
    // Each of the four runs ended its session.
    let deletes = seen.iter().filter(|e| e["http"] == "DELETE").count();
    assert_eq!(deletes, 4, "{seen:?}");
}

#[test]
fn http_failures_an_ended_session_and_a_hang_are_typed_failures() {
    if !usable() {
        return;
    }
    for (mode, want) in [
        ("fail", "HTTP 500"),
        ("expire", "the server ended the session (HTTP 404)"),
        (
            "auth",
            "HTTP 401: the server refused the credentials (check the token",
        ),
        ("hang", "did not answer tools/call in time (timeout)"),
    ] {
        let env = Env::new();
        let fake = Fake::start(&env, mode);
        configure(&env, &format!("http://127.0.0.1:{}/mcp", fake.port), "");
        assert_eq!(run(&env, &["mcp", "approve", "h"]).code, 0);
        let t = Instant::now();
        let r = run(
            &env,
            &["tool", "run", "mcp_h_echo", "--json", r#"{"text": "x"}"#],
        );
        assert_eq!(r.code, 3, "{mode}: {r:?}");
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{mode}: {:?}",
            t.elapsed()
        );
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        let error = v["error"].as_str().unwrap_or_default();
        assert!(error.contains(want), "{mode}: {v}");
    }
}

#[test]
fn where_a_url_may_point_and_what_it_may_not_be_given_with() {
    let env = Env::new();
    // Plain http beyond loopback, and https to a host its network does not
    // name: refused when the config loads, before anything is sent.
    for (url, want) in [
        (
            "http://example.com/mcp",
            "mcp.servers.h.url: plain http only to a loopback address",
        ),
        (
            "https://example.com/mcp",
            "mcp.servers.h.url: example.com is not in this server's network",
        ),
    ] {
        configure(&env, url, "");
        let r = run(&env, &["config", "validate"]);
        assert_eq!(r.code, 2, "{url}: {r:?}");
        assert!(r.stderr.contains(want), "{url}: {r:?}");
    }
    configure(
        &env,
        "https://mcp.example.com/mcp",
        "network = [\"*.example.com\"]",
    );
    assert_eq!(run(&env, &["config", "validate"]).code, 0);
    // A granted name that resolves to no public address is refused at
    // start (here: no DNS, or loopback).
    configure(
        &env,
        "https://localhost.localdomain/mcp",
        "network = [\"localhost.localdomain\"]",
    );
    let r = run(&env, &["mcp", "test", "h"]);
    assert_eq!(r.code, 3, "{r:?}");
    // The token's variable unset: validate warns, the server is not started.
    configure(&env, "http://127.0.0.1:9/mcp", "");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains(
            "mcp.servers.h.bearer_token_env: LC_MCP_TOKEN is not set in this environment"
        ),
        "{r:?}"
    );
    let r = env.run(&["mcp", "test", "h"]);
    assert!(r.stdout.contains("$LC_MCP_TOKEN is not set"), "{r:?}");
    // A url beside a command, a url with a user part, keys of a started
    // server: every problem in one pass.
    env.config(
        "[mcp.servers.h]\nurl = \"http://me@127.0.0.1:9/mcp\"\n\
         [mcp.servers.k]\nurl = \"http://127.0.0.1:9/mcp\"\ncommand = \"true\"\nargs = [\"x\"]\n\
         [mcp.servers.t]\ncommand = \"true\"\nbearer_token_env = \"LC_MCP_TOKEN\"\n\
         [mcp.servers.p]\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"LC_PROVIDER_KEY\"\n\
         [mcp.servers.q]\nurl = \"http://127.0.0.1:9/mcp\"\nnetwork = [\"127.0.0.1:99999\"]\n\
         [providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         model = \"m\"\napi_key_env = \"LC_PROVIDER_KEY\"\n",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "mcp.servers.h.url: \"http://me@127.0.0.1:9/mcp\" is not an http:// or https:// URL",
        "mcp.servers.k.url: a server has a command",
        "mcp.servers.k.args: only for a server started by command",
        "mcp.servers.t.bearer_token_env: only for a server reached at a url",
        "mcp.servers.p.bearer_token_env: LC_PROVIDER_KEY is provider o's api_key_env",
        "mcp.servers.q.network[0]: \"127.0.0.1:99999\" is not a host name",
    ] {
        assert!(r.stderr.contains(want), "{want}\n{r:?}");
    }
    // A bad url is that error alone, not also a missing command.
    assert!(!r.stderr.contains("mcp.servers.h.command"), "{r:?}");
}

/// A server stopped while a call's stream is still open: the stream is
/// closed at once (not when the HTTP timeout runs out), and nothing sent
/// after but the session's end.
#[test]
fn stopping_a_server_ends_its_requests_in_flight() {
    use latchclaw::config::{Autonomy, Config};
    use latchclaw::mcp::{ErrorKind, Launch, Server};
    use latchclaw::security::redact::Redactor;
    if !usable() {
        return;
    }
    let env = Env::new();
    let fake = Fake::start(&env, "hang");
    let text = format!(
        "workspace_dir = {}\n[mcp.servers.h]\nurl = \"http://localhost:{}/mcp\"\ntimeout_secs = 30\n",
        lit(&env.ws),
        fake.port
    );
    let cfg = Config::from_text(&text, &env.state.join("config.toml"), env.state.clone()).unwrap();
    let launch = Launch {
        cfg: &cfg,
        workspace: &env.ws,
        autonomy: Autonomy::Supervised,
        redactor: std::sync::Arc::new(Redactor::new()),
    };
    // `localhost` is the loopback address (the fake listens on 127.0.0.1).
    let mut s = Server::start(
        &cfg.mcp.servers["h"],
        &launch,
        Instant::now() + Duration::from_secs(10),
    )
    .unwrap();
    let never = || false;
    let t = Instant::now();
    let e = s
        .call(
            "echo",
            &serde_json::json!({"text": "x"}),
            t + Duration::from_secs(1),
            &never,
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    let stopped = Instant::now();
    s.stop();
    let closed = common::eventually(Duration::from_secs(3), || {
        fake.seen()
            .iter()
            .any(|e| e["http"] == "stream closed by the client")
    });
    assert!(closed, "the stream outlived the stop: {:?}", fake.seen());
    assert!(stopped.elapsed() < Duration::from_secs(3));
    let seen = fake.seen();
    assert!(seen.iter().any(|e| e["http"] == "DELETE"), "{seen:?}");
    // The cancel of the timed-out call went before the stop, none after.
    let cancels = seen
        .iter()
        .filter(|e| e["method"] == "notifications/cancelled")
        .count();
    assert!(cancels <= 1, "{seen:?}");
}
