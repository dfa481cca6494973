//! `web_search` on the real binary against fake SearXNG and Brave servers on
//! 127.0.0.1 (chunked bodies on kept-alive connections, as the real ones
//! send): results, not configured, the http tool's network policy, the key
//! never leaving the request header, upstream errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::Env;
use fake_server::{FakeServer, Reply};
use serde_json::{Value, json};

const KEY: &str = "brv-Zq8xK4471-distinctive-test-key";

fn searxng_reply() -> Reply {
    let body = json!({
        "query": "rust sqlite",
        "number_of_results": 0,
        "results": [
            {"url": "https://sqlite.org/", "title": "SQLite Home Page",
             "content": "SQLite is a C-language library.", "engine": "duckduckgo"},
            {"url": "https://docs.rs/rusqlite", "title": "rusqlite - Rust",
             "content": "Ergonomic bindings to SQLite for Rust.", "engine": "bing"},
            {"url": "https://third.example/", "title": "Third", "content": "cut by the limit"}
        ],
        "answers": [], "corrections": [], "infoboxes": [], "suggestions": []
    });
    Reply::json(200, body.to_string()).chunked(3)
}

fn brave_reply(echo: &str) -> Reply {
    let body = json!({
        "type": "search",
        "query": {"original": "latchclaw receipts"},
        "web": {"type": "search", "results": [
            {"title": "Hash <strong>chains</strong> &amp; receipts", "url": "https://a.example/receipts",
             "description": format!("Tamper-evident logs. {echo}")},
            {"title": "Second", "url": "https://b.example/", "description": "Another page."}
        ]}
    });
    Reply::json(200, body.to_string()).chunked(4)
}

fn env_with(tables: &str) -> Env {
    let env = Env::new();
    env.mock(
        "web_search.toml",
        "",
        &format!("[security]\nsecret_env = []\n{tables}"),
    );
    env
}

/// The fake servers are reachable only because the config says so.
const LOOPBACK: &str =
    "[tools.http]\nallowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n";

fn search(env: &Env, args: Value) -> (common::Run, Value) {
    let r = env.run_env(
        &["tool", "run", "web_search", "--json", &args.to_string()],
        &[("LC_BRAVE_KEY", KEY)],
    );
    let v = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    (r, v)
}

#[test]
fn searxng_results_come_back_as_title_url_and_snippet() {
    let server = FakeServer::start(vec![searxng_reply()]);
    let env = env_with(&format!(
        "{LOOPBACK}[tools.web_search]\nprovider = \"searxng\"\nurl = \"{}/searx/\"\n",
        server.url()
    ));
    let (r, v) = search(&env, json!({"query": "rust sqlite", "limit": 2}));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        v["output"],
        "1. SQLite Home Page\n   https://sqlite.org/\n   SQLite is a C-language library.\n\
         2. rusqlite - Rust\n   https://docs.rs/rusqlite\n   Ergonomic bindings to SQLite for Rust."
    );
    assert_eq!(v["metadata"], json!({"provider": "searxng", "results": 2}));
    assert_eq!(
        (v["status"].as_str(), v["risk"].as_str()),
        (Some("allowed"), Some("low"))
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/searx/search?q=rust%20sqlite&format=json");
    assert_eq!(reqs[0].header("x-subscription-token"), None);
    // Two searches on one agent: the second reuses nothing it must not.
    let (r, v) = search(&env, json!({"query": "again"}));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["metadata"]["results"], 3, "the default limit is 5");
}

#[test]
fn brave_through_the_agent_and_the_key_never_leaks() {
    // A hostile service echoes the key back in a snippet.
    let server = FakeServer::start(vec![brave_reply(&format!("token={KEY} and {KEY}"))]);
    let env = env_with(&format!(
        "{LOOPBACK}[tools.web_search]\nprovider = \"brave\"\napi_key_env = \"LC_BRAVE_KEY\"\nurl = \"{}\"\n",
        server.url()
    ));
    let mut logs = Vec::new();
    for log in ["human", "json"] {
        let r = env.run_env(
            &["agent", "-m", "what are latchclaw receipts?", "--json"],
            &[
                ("LC_BRAVE_KEY", KEY),
                ("LATCHCLAW_LOG", log),
                ("LATCHCLAW_LOG_LEVEL", "debug"),
            ],
        );
        assert_eq!(r.code, 0, "{r:?}");
        assert!(r.stdout.contains("Hash chains & receipts"), "{r:?}");
        assert!(r.stdout.contains("https://a.example/receipts"), "{r:?}");
        assert!(
            r.stdout.contains("[REDACTED"),
            "the echoed key is redacted: {r:?}"
        );
        logs.push(r);
    }
    // Sent where it belongs: the header of the request to the service.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].header("x-subscription-token"), Some(KEY));
    assert_eq!(
        reqs[0].path,
        "/res/v1/web/search?q=latchclaw%20receipts&count=3"
    );
    let offered = env.requests()[0]["request"]["tools"].to_string();
    assert!(offered.contains("\"web_search\""), "{offered}");
    // Nowhere else: stdout, stderr, the provider's requests, every file in
    // the state dir (memory, receipts, WAL) and the receipt listing.
    for r in &logs {
        assert!(!r.stdout.contains(KEY) && !r.stderr.contains(KEY), "{r:?}");
    }
    let listing = env.run(&["receipt", "list"]);
    let shown = env.run(&["memory", "show", "--json"]);
    for out in [&listing.stdout, &shown.stdout, &shown.stderr] {
        assert!(!out.contains(KEY), "{out}");
    }
    let recorded = std::fs::read(env.root.join("requests.jsonl")).unwrap();
    assert!(!contains(&recorded, KEY.as_bytes()));
    let mut checked = 0;
    for entry in walk(&env.state) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !contains(&bytes, KEY.as_bytes()),
            "{} holds the key",
            entry.display()
        );
        checked += 1;
    }
    assert!(checked >= 3, "memory, receipts and the key file at least");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn not_configured_it_is_not_offered_and_says_how_to_configure_it() {
    let env = env_with("[channels.cli]\ntools_allow = [\"time\", \"web_search\"]\n");
    let (r, v) = search(&env, json!({"query": "x"}));
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
    let e = v["error"].as_str().unwrap();
    assert!(
        e.contains("web_search is not configured")
            && e.contains("provider = \"searxng\"")
            && e.contains("api_key_env = \"BRAVE_API_KEY\""),
        "{e}"
    );
    assert_eq!(env.receipts()[0]["status"], "denied");
    // The model is not offered it; when it calls it anyway it is refused.
    let r = env.run(&["agent", "-m", "search"]);
    assert_eq!(r.code, 4, "{r:?}");
    let offered = env.requests()[0]["request"]["tools"].to_string();
    assert!(!offered.contains("web_search"), "{offered}");
    assert!(
        env.requests()[1]
            .to_string()
            .contains("web_search is not configured")
    );
    let (_, list) = env.json(&["tool", "list", "--json"]);
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "web_search")
        .unwrap()
        .clone();
    assert_eq!(row["enabled"], false, "{row}");
}

#[test]
fn the_service_url_goes_through_the_http_network_policy() {
    let server = FakeServer::start(vec![searxng_reply()]);
    let searx = format!(
        "[tools.web_search]\nprovider = \"searxng\"\nurl = \"{}\"\n",
        server.url()
    );
    // A host outside the allowlist.
    let env = env_with(&format!(
        "[tools.http]\nallowed_domains = [\"search.example.org\"]\n{searx}"
    ));
    let (r, v) = search(&env, json!({"query": "x"}));
    assert_eq!(r.code, 4, "{r:?}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("not in tools.http.allowed_domains"),
        "{reason}"
    );
    // Allowed by name, but a loopback address nobody allowed.
    let env = env_with(&format!(
        "[tools.http]\nallowed_domains = [\"127.0.0.1\"]\n{searx}"
    ));
    let (r, v) = search(&env, json!({"query": "x"}));
    assert_eq!(r.code, 4, "{r:?}");
    let reason = v["reason"].as_str().unwrap();
    assert!(
        reason.contains("loopback") && reason.contains("allow_private"),
        "{reason}"
    );
    assert_eq!(env.receipts()[0]["status"], "denied");
    // No allowlist at all.
    let env = env_with(&searx);
    let (r, v) = search(&env, json!({"query": "x"}));
    assert_eq!(r.code, 4, "{r:?}");
    assert!(v["reason"].as_str().unwrap().contains("empty"), "{v}");
    assert!(server.requests().is_empty(), "nothing reached the service");
    // Bad arguments are the gate's too.
    let env = env_with(&format!("{LOOPBACK}{searx}"));
    for (args, why) in [
        (json!({"query": " "}), "\"query\" is empty"),
        (json!({"query": "x", "limit": 11}), "from 1 to 10"),
        (json!({"query": "q".repeat(401)}), "the limit is 400"),
    ] {
        let (r, v) = search(&env, args);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(v["reason"].as_str().unwrap().contains(why), "{v}");
    }
    assert!(server.requests().is_empty());
}

#[test]
fn upstream_errors_are_clear_failures() {
    let brave = |server: &FakeServer| {
        env_with(&format!(
            "{LOOPBACK}[tools.web_search]\nprovider = \"brave\"\napi_key_env = \"LC_BRAVE_KEY\"\nurl = \"{}\"\n",
            server.url()
        ))
    };
    let cases = [
        (
            Reply::json(
                429,
                r#"{"type":"ErrorResponse","error":{"code":"RATE_LIMITED"}}"#,
            ),
            "the brave search service answered HTTP 429: {\"type\":\"ErrorResponse\"",
        ),
        (Reply::json(500, "").close(), "answered HTTP 500"),
        (
            Reply::json(200, "<html>upstream proxy error</html>").chunked(2),
            "the search service's reply is not JSON",
        ),
        (
            Reply::json(200, r#"{"web": {"results": {"not": "a list"}}}"#),
            "has no results list (\"web.results\" expected)",
        ),
    ];
    for (reply, want) in cases {
        let server = FakeServer::start(vec![reply]);
        let env = brave(&server);
        let (r, v) = search(&env, json!({"query": "x"}));
        assert_eq!(r.code, 3, "{r:?}");
        assert_eq!(v["status"], "failed");
        let e = v["error"].as_str().unwrap();
        assert!(e.contains(want), "wanted {want:?} in {e}");
        assert!(!r.stdout.contains(KEY) && !r.stderr.contains(KEY));
    }
    // The key's variable unset: nothing is sent.
    let server = FakeServer::start(vec![brave_reply("")]);
    let env = brave(&server);
    let r = env.run(&["tool", "run", "web_search", "--json", r#"{"query": "x"}"#]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stdout.contains(
            "environment variable LC_BRAVE_KEY (tools.web_search.api_key_env) is not set"
        ),
        "{r:?}"
    );
    assert!(server.requests().is_empty());
    // A service that never answers: the call's timeout ends it.
    let server = FakeServer::start(vec![Reply::hang()]);
    let env = env_with(&format!(
        "{LOOPBACK}[tools.web_search]\nprovider = \"searxng\"\nurl = \"{}\"\ntimeout_secs = 1\n",
        server.url()
    ));
    let started = std::time::Instant::now();
    let (r, v) = search(&env, json!({"query": "x"}));
    assert_eq!(r.code, 3, "{r:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("searxng search request failed"),
        "{v}"
    );
}
