//! The `http` tool: every refusal class, and real GETs against a loopback
//! test server that the config explicitly allows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::Env;
use fake_server::{FakeServer, Reply};
use serde_json::{Value, json};

fn env_with(http: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "[channels.cli]\ntools_allow = [\"http\", \"time\"]\n[tools.http]\n{http}\n"
    ));
    env
}

fn decision(env: &Env, args: Value) -> (String, String) {
    let r = env.run(&["policy", "check", "http", "--json", &args.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    (
        v["decision"].as_str().unwrap().into(),
        v["reason"].as_str().unwrap().into(),
    )
}

fn get(env: &Env, url: &str) -> (common::Run, Value) {
    let r = env.run(&[
        "tool",
        "run",
        "http",
        "--json",
        &json!({ "url": url }).to_string(),
    ]);
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    (r, v)
}

#[test]
fn every_refusal_class() {
    let env = env_with(
        "allowed_domains = [\"example.com\", \"127.0.0.1\", \"10.0.0.1\", \"[::1]\", \"169.254.169.254\", \
         \"localhost\", \"100.64.0.1\", \"[::ffff:7f00:1]\", \"192.168.1.1\", \"0.0.0.0\"]",
    );
    let cases = [
        ("ftp://example.com/x", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("gopher://example.com/", "scheme"),
        ("javascript:alert(1)", "absolute"),
        ("https://evil.test/", "not in"),
        ("https://example.com.evil.test/", "not in"),
        ("https://evilexample.com/", "not in"),
        ("https://example.com@evil.test/", "credentials"),
        ("https://example.com:pw@evil.test/", "credentials"),
        ("https://evil.test\\@example.com/", "credentials"),
        ("https://evil.test\\.example.com/", "backslash"),
        ("https://evil.test#.example.com", "not in"),
        ("https://evil.test?x=.example.com", "not in"),
        ("http://127.0.0.1/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://0177.0.0.1/", "loopback"),
        ("http://0x7f.0.0.1/", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://127.1/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
        ("http://10.0.0.1/", "private"),
        ("http://012.0.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://localhost/", "loopback"),
        ("http://LOCALHOST./", "loopback"),
    ];
    let mut bad = Vec::new();
    for (url, why) in cases {
        let (d, reason) = decision(&env, json!({ "url": url }));
        if d != "deny" || !reason.contains(why) {
            bad.push(format!("{url}: {d}: {reason} (wanted {why})"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    let (d, reason) = decision(
        &env,
        json!({"url": "https://example.com/", "method": "POST"}),
    );
    assert!(d == "deny" && reason.contains("only GET"), "{reason}");
    // The refusal is also what `tool run` reports, with a receipt.
    let (r, v) = get(&env, "http://2130706433/");
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
    assert_eq!(env.receipts()[0]["status"], "denied");
}

#[test]
fn an_empty_allowlist_allows_nothing() {
    let env = env_with("");
    let (d, reason) = decision(&env, json!({"url": "https://example.com/"}));
    assert!(d == "deny" && reason.contains("empty"), "{reason}");
}

/// Loopback test servers are reachable only because the config says so.
fn loopback_env(extra_domains: &str) -> Env {
    env_with(&format!(
        "allowed_domains = [\"127.0.0.1\"{extra_domains}]\nallow_private = [\"127.0.0.1\"]\nmax_redirects = 3"
    ))
}

#[test]
fn allowed_get_returns_text_and_json() {
    let server = FakeServer::start(vec![Reply::json(200, r#"{"temperature": 21.5}"#)]);
    let env = loopback_env("");
    let (d, _) = decision(&env, json!({"url": format!("{}/weather", server.url())}));
    assert_eq!(d, "allow", "low risk: runs without asking under supervised");
    let (r, v) = get(&env, &format!("{}/weather?city=x", server.url()));
    assert_eq!(r.code, 0, "{r:?}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.starts_with("HTTP 200") && out.contains("\"temperature\": 21.5"),
        "{out}"
    );
    assert_eq!(v["metadata"]["status"], 200);
    let reqs = server.requests();
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].path.as_str()),
        ("GET", "/weather?city=x")
    );
    assert_eq!(env.receipts()[0]["status"], "allowed");
}

#[test]
fn redirects_are_checked_at_every_hop() {
    // Bound on 127.0.0.2: a loopback target nobody allowed.
    let target = FakeServer::start_on("127.0.0.2:0", vec![Reply::json(200, "secret")]);
    let hop = |loc: String| FakeServer::start(vec![Reply::json(302, "").header("Location", &loc)]);
    let to_localhost = hop(format!("http://localhost:{}/", target.port));
    let env = loopback_env("");
    let (r, v) = get(&env, &to_localhost.url());
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("redirect to http://localhost"),
        "{v}"
    );

    // Allowed by name, but the address is loopback and only 127.0.0.1 may be.
    let to_other = hop(format!("http://127.0.0.2:{}/", target.port));
    let env = loopback_env(", \"127.0.0.2\"");
    let (r, v) = get(&env, &to_other.url());
    assert_eq!((r.code, v["status"].as_str()), (3, Some("failed")), "{r:?}");
    assert!(v["error"].as_str().unwrap().contains("loopback"), "{v}");
    assert!(
        target.requests().is_empty(),
        "the refused target was never contacted"
    );

    // A redirect within the allowed server is followed.
    let server = FakeServer::start(vec![
        Reply::json(302, "").header("Location", "/final"),
        Reply::json(200, "arrived").header("Content-Type", "text/plain"),
    ]);
    let env = loopback_env("");
    let (r, v) = get(&env, &server.url());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(v["output"].as_str().unwrap().ends_with("arrived"), "{v}");
    assert_eq!(v["metadata"]["redirects"], 1);

    // Redirect loops stop at max_redirects.
    let looping = FakeServer::start(vec![Reply::json(301, "").header("Location", "/again")]);
    let env = loopback_env("");
    let (r, v) = get(&env, &looping.url());
    assert_eq!((r.code, v["status"].as_str()), (3, Some("failed")), "{r:?}");
    assert!(
        v["error"].as_str().unwrap().contains("max_redirects"),
        "{v}"
    );
}

#[test]
fn binary_bodies_are_summarised_and_errors_reported() {
    let mut bin = Reply::json(200, vec![0u8, 159, 146, 150, 255, 0, 1]);
    bin.headers = vec![("Content-Type".into(), "application/octet-stream".into())];
    let server = FakeServer::start(vec![bin]);
    let env = loopback_env("");
    let (r, v) = get(&env, &server.url());
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("binary body: 7 bytes"),
        "{v}"
    );

    let server = FakeServer::start(vec![Reply::json(404, "nope")]);
    let env = loopback_env("");
    let (r, v) = get(&env, &server.url());
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["error"], "HTTP 404");
}
