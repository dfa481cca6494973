//! `latchclaw gateway` on the real binary over loopback: every endpoint,
//! the token, the bind rules, and the limits a stranger runs into.
#![cfg(feature = "gateway")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, processes_with, wait_for_process, wait_until};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const TOOLS: &str = "tools_allow = [\"time\", \"file_read\", \"shell\", \"memory_search\"]";

/// A running gateway, killed when dropped.
struct Gateway {
    child: Child,
    addr: String,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token(env: &Env) -> String {
    let r = env.run(&["gateway", "token"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.stdout.trim().to_string()
}

/// The mock provider with `fixtures/gateway.toml`, `[gateway]` keys, and
/// `security` keys.
fn setup(env: &Env, gateway: &str, security: &str) {
    let bind = if gateway.contains("bind =") {
        ""
    } else {
        "bind = \"127.0.0.1:0\""
    };
    env.mock(
        "gateway.toml",
        "shell_timeout_secs = 60",
        &format!("[security]\n{security}\n[channels.cli]\n{TOOLS}\n[gateway]\n{bind}\n{gateway}\n"),
    );
}

fn start(env: &Env) -> Gateway {
    start_with_stderr(env, Stdio::null())
}

/// `start`, the gateway's stderr (its log) going to `stderr`.
fn start_with_stderr(env: &Env, stderr: Stdio) -> Gateway {
    let mut child = env
        .command(&["gateway"])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .to_string();
    Gateway { child, addr }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Reads one response off `s` (Content-Length framed, as the gateway always is).
fn read_reply(s: &mut impl BufRead) -> Reply {
    let mut status_line = String::new();
    s.read_line(&mut status_line).unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        s.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').unwrap();
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .expect("every response has a Content-Length");
    let mut body = vec![0; len];
    s.read_exact(&mut body).unwrap();
    Reply {
        status,
        headers,
        body: String::from_utf8(body).unwrap(),
    }
}

fn raw(addr: &str, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request).unwrap();
    read_reply(&mut BufReader::new(s))
}

fn request(addr: &str, method: &str, path: &str, auth: Option<&str>, body: Option<&str>) -> Reply {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    if let Some(a) = auth {
        req.push_str(&format!("Authorization: {a}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or(""));
    raw(addr, req.as_bytes())
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn get(g: &Gateway, t: &str, path: &str) -> Reply {
    request(&g.addr, "GET", path, Some(&bearer(t)), None)
}

fn post(g: &Gateway, t: &str, path: &str, body: &Value) -> Reply {
    request(
        &g.addr,
        "POST",
        path,
        Some(&bearer(t)),
        Some(&body.to_string()),
    )
}

#[test]
fn health_is_open_and_everything_else_needs_the_whole_token() {
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    assert!(t.len() > 60, "{t}");
    let stored = std::fs::read_to_string(env.state.join("gateway.token")).unwrap();
    assert!(!stored.contains(&t[5..]), "the token itself is stored");
    let g = start(&env);
    let r = request(&g.addr, "GET", "/health", None, None);
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    for auth in [
        None,
        Some(
            "Bearer lcgw_0000000000000000000000000000000000000000000000000000000000000000"
                .to_string(),
        ),
        Some(bearer(&t[..t.len() - 1])),
        Some(bearer(&t[..10])),
        Some(format!("bearer {t}")),
        Some(bearer(&t.to_uppercase())),
        Some(t.clone()),
        Some(format!("Basic {t}")),
    ] {
        for path in ["/status", "/tools", "/metrics", "/receipts", "/nowhere"] {
            let r = request(&g.addr, "GET", path, auth.as_deref(), None);
            assert_eq!(r.status, 401, "{auth:?} {path}: {}", r.body);
            assert_eq!(r.header("WWW-Authenticate"), Some("Bearer"));
            assert_eq!(r.json()["code"], "unauthorized");
            assert!(!r.body.contains(&t[5..15]));
        }
    }
    // Refused calls change nothing.
    let r = request(&g.addr, "POST", "/estop", None, Some("{}"));
    assert_eq!(r.status, 401);
    assert!(!env.state.join("ESTOP").exists());

    let r = get(&g, &t, "/status");
    assert_eq!(r.status, 200, "{}", r.body);
    let s = r.json();
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(s["provider"]["name"], "m");
    assert_eq!(s["provider"]["kind"], "mock");
    assert_eq!(s["autonomy"], "supervised");
    assert_eq!(s["estop"]["engaged"], false);
    assert!(s["confinement"]["mode"].is_string());
    assert_eq!(s["receipts"]["chain_valid"], true);
    assert_eq!(s["receipts"]["count"], 0);
    // No CORS headers unless configured.
    let r = raw(
        &g.addr,
        format!("GET /status HTTP/1.1\r\nHost: x\r\nOrigin: http://evil.example\r\nAuthorization: Bearer {t}\r\n\r\n").as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert!(
        r.headers
            .iter()
            .all(|(n, _)| !n.to_ascii_lowercase().starts_with("access-control"))
    );

    let r = get(&g, &t, "/tools");
    let tools = r.json();
    let time = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "time")
        .unwrap();
    assert_eq!(
        (time["enabled"].clone(), time["risk"].clone()),
        (json!(true), json!("low"))
    );
    // Whether this build holds a tool, as `tool list` says it.
    let pdf = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "pdf_extract")
        .unwrap();
    assert_eq!(pdf["built"], json!(cfg!(feature = "pdf")));
    assert_eq!(time["built"], json!(true));
    let write = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "file_write")
        .unwrap();
    assert_eq!(write["enabled"], false);

    let r = get(&g, &t, "/nowhere");
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (404, json!("not_found"))
    );
    let r = request(&g.addr, "DELETE", "/status", Some(&bearer(&t)), None);
    assert_eq!((r.status, r.header("Allow")), (405, Some("GET")));
    let r = request(&g.addr, "POST", "/health", None, Some("{}"));
    assert_eq!(r.status, 405);
}

#[test]
fn the_token_is_refused_twice_and_rotation_takes_effect_without_a_restart() {
    let env = Env::new();
    setup(&env, "", "");
    // No token: the gateway does not start.
    let r = env.run(&["gateway"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("`latchclaw gateway token` creates one"),
        "{r:?}"
    );
    let old = token(&env);
    let r = env.run(&["gateway", "token"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("a token exists") && r.stderr.contains("--rotate replaces it"),
        "{r:?}"
    );
    assert!(r.stdout.is_empty());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(env.state.join("gateway.token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let g = start(&env);
    assert_eq!(get(&g, &old, "/status").status, 200);
    let r = env.run(&["gateway", "token", "--rotate"]);
    assert_eq!(r.code, 0, "{r:?}");
    let new = r.stdout.trim().to_string();
    assert_ne!(new, old);
    assert_eq!(get(&g, &old, "/status").status, 401);
    assert_eq!(get(&g, &new, "/status").status, 200);
}

#[test]
fn a_non_loopback_bind_needs_the_switch_and_a_token() {
    let env = Env::new();
    setup(&env, "", "");
    // Neither: both are named.
    let r = env.run(&["gateway", "--bind", "0.0.0.0:0"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("allow_public_bind = true (it is false)")
            && r.stderr.contains("none exists yet"),
        "{r:?}"
    );
    // The switch without a token.
    setup(&env, "allow_public_bind = true", "");
    let r = env.run(&["gateway", "--bind", "0.0.0.0:0"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("none exists yet"), "{r:?}");
    // A token without the switch.
    setup(&env, "", "");
    token(&env);
    for bind in ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"] {
        let r = env.run(&["gateway", "--bind", bind]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains("not a loopback address"), "{r:?}");
    }
    // The config's bind is held to the same rule.
    setup(&env, "bind = \"0.0.0.0:0\"", "");
    let r = env.run(&["gateway"]);
    assert_eq!(r.code, 2, "{r:?}");
    let r = env.run(&["gateway", "--bind", "localhost"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("--bind: \"localhost\" is not ADDR:PORT"),
        "{r:?}"
    );
    setup(&env, "bind = \"nope\"\nworkers = 0", "");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("gateway.bind") && r.stderr.contains("gateway.workers"),
        "{r:?}"
    );
}

#[test]
fn chat_runs_turns_through_the_gate_and_receipts_and_counts_them() {
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    let g = start(&env);
    let r = post(&g, &t, "/chat", &json!({"message": "what time is it"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["exit_reason"], "completed");
    assert_eq!(v["tool_calls"][0]["tool"], "time");
    assert_eq!(v["tool_calls"][0]["status"], "allowed");
    assert_eq!(v["pending_approvals"], json!([]));
    assert!(v["answer"].as_str().unwrap().starts_with("It is"));
    let conv = v["conversation_id"].as_str().unwrap().to_string();

    // Policy refusal: a denial, with its receipt.
    let v = post(
        &g,
        &t,
        "/chat",
        &json!({"message": "read shadow", "conversation_id": conv}),
    )
    .json();
    assert_eq!(v["conversation_id"], conv.as_str());
    assert_eq!(v["exit_reason"], "refused");
    assert_eq!(v["tool_calls"][0]["status"], "denied");

    // Needs approval: it waits, and the CLI sees it.
    let v = post(&g, &t, "/chat", &json!({"message": "make a file"})).json();
    let pending = v["pending_approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{v}");
    assert_eq!(v["tool_calls"][0]["pending_approval"], pending[0]);
    assert!(!env.ws.join("made.txt").exists());
    let (_, list) = env.json(&["approvals", "list", "--json"]);
    assert!(
        list.to_string().contains(pending[0].as_str().unwrap()),
        "{list}"
    );

    // Bad bodies.
    for (body, code) in [
        ("{", "bad_request"),
        ("{\"message\": 3}", "bad_request"),
        ("{\"message\": \"  \"}", "bad_request"),
        (
            "{\"message\": \"x\", \"conversation_id\": 3}",
            "bad_request",
        ),
    ] {
        let r = request(&g.addr, "POST", "/chat", Some(&bearer(&t)), Some(body));
        assert_eq!(
            (r.status, r.json()["code"].clone()),
            (400, json!(code)),
            "{body}"
        );
    }
    let r = post(
        &g,
        &t,
        "/chat",
        &json!({"message": "hi", "conversation_id": "conv-none"}),
    );
    assert_eq!(r.status, 404, "{}", r.body);

    // The same receipts the CLI writes, and a chain that verifies.
    let rc = env.receipts();
    assert_eq!(rc.len(), 3, "{rc:?}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
    let r = get(&g, &t, "/receipts?since=1&limit=2");
    let page = r.json();
    assert_eq!(page["total"], env.receipt_lines().len());
    assert_eq!(page["receipts"].as_array().unwrap().len(), 2);
    assert_eq!(page["receipts"][0]["position"], 2);
    assert_eq!(page["next_since"], 3);
    assert_eq!(get(&g, &t, "/receipts?limit=0").status, 400);
    assert_eq!(get(&g, &t, "/receipts?since=x").status, 400);

    // A message carrying the token: read-outs never show it.
    let v = post(
        &g,
        &t,
        "/chat",
        &json!({"message": format!("remember {t} please")}),
    )
    .json();
    assert!(!v.to_string().contains(&t[5..]), "{v}");
    let hits = get(&g, &t, "/memory/search?q=remember").json();
    assert!(!hits.as_array().unwrap().is_empty(), "{hits}");
    assert!(!hits.to_string().contains(&t[5..]), "{hits}");

    let hits = get(&g, &t, "/memory/search?q=shadow&limit=5").json();
    assert!(
        hits.as_array()
            .is_some_and(|h| !h.is_empty() && h.len() <= 5),
        "{hits}"
    );
    assert_eq!(hits[0]["conversation_id"], conv.as_str());
    assert_eq!(get(&g, &t, "/memory/search").status, 400);

    let status = get(&g, &t, "/status").json();
    assert_eq!(status["receipts"]["count"], env.receipt_lines().len());

    let m = get(&g, &t, "/metrics").body;
    for line in [
        "latchclaw_conversations_total 3",
        "latchclaw_tool_calls_total{tool=\"time\",status=\"allowed\"} 1",
        "latchclaw_tool_calls_total{tool=\"file_read\",status=\"denied\"} 1",
        "latchclaw_tool_calls_total{tool=\"shell\",status=\"denied\"} 1",
        "latchclaw_tool_denials_total{tool=\"file_read\"} 1",
        "latchclaw_tool_denials_total{tool=\"shell\"} 1",
        "latchclaw_provider_errors_total 0",
        "latchclaw_receipt_chain_valid 1",
        "latchclaw_http_requests_total{path=\"/chat\",code=\"200\"} 4",
    ] {
        assert!(m.lines().any(|l| l == line), "{line} missing:\n{m}");
    }
    // Every run recorded.
    let (_, runs) = env.json(&["runs", "list", "--json"]);
    assert!(runs.to_string().contains("gateway POST /chat"), "{runs}");
}

/// Every sample line parses, HELP and TYPE come first, counters end in
/// `_total`; then the reference parser, where it is installed.
#[test]
fn metrics_are_prometheus_text() {
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    let g = start(&env);
    post(&g, &t, "/chat", &json!({"message": "what time is it"}));
    post(&g, &t, "/chat", &json!({"message": "read shadow"}));
    get(&g, &t, "/nowhere\"x");
    let r = get(&g, &t, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = r.body;
    let mut helped = Vec::new();
    let mut typed: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.push(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                helped.last().is_some_and(|h| h == name),
                "TYPE before HELP: {line}"
            );
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            if kind == "counter" {
                assert!(name.ends_with("_total"), "{line}");
            }
            typed.push((name.into(), kind.into()));
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
            let name = series.split('{').next().unwrap();
            assert!(
                name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{line}"
            );
            let (family, kind) = typed
                .last()
                .unwrap_or_else(|| panic!("sample before TYPE: {line}"));
            let suffix = name
                .strip_prefix(family.as_str())
                .unwrap_or_else(|| panic!("{line} under {family}"));
            match kind.as_str() {
                "histogram" => assert!(["_bucket", "_sum", "_count"].contains(&suffix), "{line}"),
                _ => assert_eq!(suffix, "", "{line}"),
            }
            if let Some(labels) = series.strip_prefix(name)
                && !labels.is_empty()
            {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                // name="value" pairs, quotes escaped inside.
                let inner = &labels[1..labels.len() - 1];
                let mut rest = inner;
                while !rest.is_empty() {
                    let (k, v) = rest.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                    assert!(
                        k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                        "{line}"
                    );
                    let mut end = None;
                    let mut escaped = false;
                    for (i, c) in v.char_indices() {
                        match (escaped, c) {
                            (true, _) => escaped = false,
                            (false, '\\') => escaped = true,
                            (false, '"') => {
                                end = Some(i);
                                break;
                            }
                            _ => {}
                        }
                    }
                    let end = end.unwrap_or_else(|| panic!("unterminated label: {line}"));
                    rest = v[end + 1..].strip_prefix(',').unwrap_or(&v[end + 1..]);
                }
            }
        }
    }
    let families: Vec<&str> = typed.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "latchclaw_conversations_total",
        "latchclaw_tool_calls_total",
        "latchclaw_tool_denials_total",
        "latchclaw_provider_errors_total",
        "latchclaw_receipt_chain_valid",
        "latchclaw_http_requests_total",
        "latchclaw_http_request_duration_seconds",
    ] {
        assert!(families.contains(&want), "{want} missing");
    }

    let has_parser = std::process::Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_parser {
        // The format check above ran; the reference parser's did not.
        return common::skip(
            "python3 prometheus_client is not installed: no reference parser check",
        );
    }
    let mut child = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/prometheus_check.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The client names counter families without `_total`.
    assert_eq!(
        parsed["latchclaw_tool_calls"]["type"], "counter",
        "{parsed}"
    );
    let samples = parsed["latchclaw_tool_calls"]["samples"]
        .as_array()
        .unwrap();
    assert!(
        samples.iter().any(|s| s[0] == "latchclaw_tool_calls_total"
            && s[1] == json!({"tool": "time", "status": "allowed"})
            && s[2] == 1.0),
        "{samples:?}"
    );
    assert_eq!(
        parsed["latchclaw_http_request_duration_seconds"]["type"],
        "histogram"
    );
    assert_eq!(
        parsed["latchclaw_receipt_chain_valid"]["samples"][0][2],
        1.0
    );
    let other = parsed["latchclaw_http_requests"]["samples"]
        .as_array()
        .unwrap();
    assert!(
        other
            .iter()
            .any(|s| s[1]["path"] == "other" && s[1]["code"] == "404"),
        "{other:?}"
    );
}

#[test]
fn oversized_chunked_and_malformed_requests_get_their_codes() {
    let env = Env::new();
    setup(&env, "max_body_bytes = 1000", "");
    let t = token(&env);
    let g = start(&env);
    // Over the limit: 413 before the body is read (none is sent at all).
    let r = raw(
        &g.addr,
        format!("POST /chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nContent-Length: 50000000\r\n\r\n").as_bytes(),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (413, json!("body_too_large"))
    );
    assert_eq!(r.header("Connection"), Some("close"));
    // And when it is sent.
    let big = "x".repeat(5000);
    let r = request(&g.addr, "POST", "/chat", Some(&bearer(&t)), Some(&big));
    assert_eq!(r.status, 413);
    let r = raw(
        &g.addr,
        format!("POST /chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").as_bytes(),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (411, json!("length_required"))
    );
    let r = raw(
        &g.addr,
        b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    let r = raw(&g.addr, b"NOT A REQUEST\r\n\r\n");
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (400, json!("bad_request"))
    );
    let r = raw(
        &g.addr,
        format!(
            "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(20_000)
        )
        .as_bytes(),
    );
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (431, json!("head_too_large"))
    );
    let many: String = (0..100).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = raw(
        &g.addr,
        format!("GET /health HTTP/1.1\r\n{many}\r\n").as_bytes(),
    );
    assert_eq!(r.status, 431);
    // The gateway still answers.
    assert_eq!(request(&g.addr, "GET", "/health", None, None).status, 200);
}

/// The slow client's head deadline. The bounds below are fractions of it,
/// so a loaded machine has room while what they catch stays caught: a
/// client served only once the slow one is cut waits the whole deadline.
const SLOW_HEAD_MS: u64 = 3000;

#[test]
fn a_slow_client_is_cut_at_the_deadline_and_blocks_no_one() {
    let env = Env::new();
    setup(
        &env,
        &format!("workers = 2\nheader_timeout_ms = {SLOW_HEAD_MS}"),
        "",
    );
    token(&env);
    let g = start(&env);
    let deadline = Duration::from_millis(SLOW_HEAD_MS);
    let t0 = Instant::now();
    let mut slow = TcpStream::connect(&g.addr).unwrap();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    // It goes on dribbling, past the deadline: a per-read timeout would
    // never fire.
    let dribble = {
        let mut s = slow.try_clone().unwrap();
        std::thread::spawn(move || {
            for _ in 0..(SLOW_HEAD_MS / 100 + 30) {
                std::thread::sleep(Duration::from_millis(100));
                if s.write_all(b"X").is_err() {
                    return;
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        let at = Instant::now();
        assert_eq!(request(&g.addr, "GET", "/health", None, None).status, 200);
        // The first of them, served only at the slow client's cut, would
        // have waited most of the deadline.
        assert!(at.elapsed() < deadline / 2, "{:?}", at.elapsed());
    }
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = read_reply(&mut BufReader::new(&slow));
    let took = t0.elapsed();
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (408, json!("timeout"))
    );
    // Cut at its deadline: not before it, and long before its dribbling
    // would have ended (deadline + 3 s) or the read above timed out.
    assert!(
        took >= deadline - Duration::from_millis(100)
            && took < deadline + Duration::from_millis(2500),
        "cut after {took:?}"
    );
    let _ = dribble.join();
}

#[test]
fn connections_past_the_limit_get_503_and_idle_ones_give_way() {
    let env = Env::new();
    setup(
        &env,
        "workers = 1\nmax_connections = 2\nheader_timeout_ms = 3000\nidle_timeout_ms = 60000",
        "",
    );
    let t = token(&env);
    let g = start(&env);
    // A kept-alive connection that goes idle does not keep the one worker.
    let mut idle = TcpStream::connect(&g.addr).unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut idle_reader = BufReader::new(idle.try_clone().unwrap());
    assert_eq!(read_reply(&mut idle_reader).status, 200);
    // The bounds in this test are half the silent connections' head
    // deadline (3 s): a newcomer queued behind a held worker would wait
    // for that deadline (and behind the idle one, for its 60 s).
    let at = Instant::now();
    assert_eq!(get(&g, &t, "/status").status, 200);
    assert!(
        at.elapsed() < Duration::from_millis(1500),
        "{:?}",
        at.elapsed()
    );
    // Two silent connections: one holds the worker until its deadline, one waits.
    let a = TcpStream::connect(&g.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let b = TcpStream::connect(&g.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let at = Instant::now();
    let r = request(&g.addr, "GET", "/health", None, None);
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (503, json!("overloaded"))
    );
    assert_eq!(r.header("Retry-After"), Some("1"));
    assert!(
        at.elapsed() < Duration::from_millis(1500),
        "{:?}",
        at.elapsed()
    );
    drop((a, b));
    // Once they are gone, it answers again.
    // (On a loaded machine the first tries may still find them there and
    // get 503 too: the count below includes those.)
    let mut refused = 1;
    wait_until(Duration::from_secs(8), "never recovered", || {
        std::thread::sleep(Duration::from_millis(80));
        match request(&g.addr, "GET", "/health", None, None).status {
            200 => true,
            503 => {
                refused += 1;
                false
            }
            _ => false,
        }
    });
    let m = get(&g, &t, "/metrics").body;
    let want = format!("latchclaw_http_requests_total{{path=\"other\",code=\"503\"}} {refused}");
    assert!(m.contains(&want), "{want}: {m}");
}

#[test]
fn the_rate_limit_answers_429_with_retry_after() {
    let env = Env::new();
    setup(&env, "rate_limit_per_minute = 3", "");
    let t = token(&env);
    let g = start(&env);
    for _ in 0..3 {
        assert_eq!(get(&g, &t, "/status").status, 200);
    }
    let r = get(&g, &t, "/tools");
    assert_eq!(
        (r.status, r.json()["code"].clone()),
        (429, json!("rate_limited"))
    );
    let secs: u64 = r.header("Retry-After").unwrap().parse().unwrap();
    assert!((1..=20).contains(&secs), "{secs}");
    // /health is not counted, and refused tokens take nothing.
    assert_eq!(request(&g.addr, "GET", "/health", None, None).status, 200);
    assert_eq!(
        request(&g.addr, "GET", "/status", Some("Bearer nope"), None).status,
        401
    );
}

#[test]
fn estop_over_http_stops_a_running_shell_call() {
    let env = Env::new();
    setup(
        &env,
        "",
        "autonomy = \"full\"\nshell_allowlist = [\"sleep\"]",
    );
    let t = token(&env);
    let g = start(&env);
    let (addr, tok) = (g.addr.clone(), t.clone());
    let chat = std::thread::spawn(move || {
        let at = Instant::now();
        let r = request(
            &addr,
            "POST",
            "/chat",
            Some(&bearer(&tok)),
            Some(&json!({"message": "run: sleep"}).to_string()),
        );
        (r, at.elapsed())
    });
    wait_for_process("30.7373", Duration::from_secs(10));
    let stop = Instant::now();
    let r = post(&g, &t, "/estop", &json!({"reason": "runaway"}));
    assert_eq!(r.status, 200, "{}", r.body);
    let (reply, took) = chat.join().unwrap();
    assert!(
        stop.elapsed() < Duration::from_secs(3),
        "{:?}",
        stop.elapsed()
    );
    assert!(took < Duration::from_secs(10));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let v = reply.json();
    assert_eq!(v["exit_reason"], "estop", "{v}");
    assert!(processes_with("30.7373").is_empty());
    let s = get(&g, &t, "/status").json();
    assert_eq!(s["estop"]["engaged"], true);
    assert!(
        s["estop"]["reason"].as_str().unwrap().contains("runaway"),
        "{s}"
    );
    // The CLI sees it, and the gateway's clear is the CLI's.
    assert!(env.state.join("ESTOP").exists());
    let r = request(&g.addr, "DELETE", "/estop", Some(&bearer(&t)), None);
    assert_eq!(r.json(), json!({"estop": false, "was_engaged": true}));
    assert!(!env.state.join("ESTOP").exists());
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

#[test]
fn concurrent_chats_keep_receipts_and_memory_whole() {
    let env = Env::new();
    setup(&env, "workers = 4", "");
    let t = token(&env);
    let g = start(&env);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (addr, tok) = (g.addr.clone(), t.clone());
            std::thread::spawn(move || {
                let msg = if i % 2 == 0 {
                    "what time is it"
                } else {
                    "read shadow"
                };
                request(
                    &addr,
                    "POST",
                    "/chat",
                    Some(&bearer(&tok)),
                    Some(&json!({"message": msg}).to_string()),
                )
                .status
            })
        })
        .collect();
    for th in threads {
        assert_eq!(th.join().unwrap(), 200);
    }
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    // 4 `time` calls (no effect: no started receipt) and 4 denials.
    assert_eq!(env.receipt_lines().len(), 8);
    let (_, convs) = env.json(&["memory", "list", "--json"]);
    assert_eq!(convs.as_array().unwrap().len(), 8);
}

/// With `receipts.anchor_file` set, concurrent chats anchor heads the log
/// holds; a log cut short of the last one takes no receipt from a chat.
#[test]
fn chats_anchor_their_heads_and_refuse_a_log_cut_short() {
    let env = Env::new();
    let anchor = env.root.join("anchor.log");
    setup(
        &env,
        "workers = 4",
        &format!("[receipts]\nanchor_file = {}", common::lit(&anchor)),
    );
    let t = token(&env);
    let g = start(&env);
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (addr, tok) = (g.addr.clone(), t.clone());
            std::thread::spawn(move || {
                let msg = ["what time is it", "read shadow"][i % 2];
                let body = json!({"message": msg}).to_string();
                request(&addr, "POST", "/chat", Some(&bearer(&tok)), Some(&body)).status
            })
        })
        .collect();
    for th in threads {
        assert_eq!(th.join().unwrap(), 200);
    }
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 8);
    // Every anchored head is the receipt at its position.
    let text = std::fs::read_to_string(&anchor).unwrap();
    assert_eq!(text.lines().count(), 8, "{text}");
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let n: usize = f[1].parse().unwrap();
        assert_eq!(lines[n - 1]["receipt_hash"], f[2], "{text}");
    }
    let r = env.run(&["receipt", "verify"]);
    assert!(
        r.code == 0 && r.stdout.contains("anchor: receipt "),
        "{r:?}"
    );

    // Cut by every receipt after the first: the next chat takes none.
    let log = env.state.join("tool_receipts.log");
    let whole = std::fs::read(&log).unwrap();
    let first = whole.iter().position(|b| *b == b'\n').unwrap() + 1;
    std::fs::write(&log, &whole[..first]).unwrap();
    let r = post(&g, &t, "/chat", &json!({"message": "what time is it"}));
    assert_eq!(
        (r.status, &r.json()["code"]),
        (500, &json!("integrity")),
        "{}",
        r.body
    );
    assert!(
        r.body.contains("holds 1 receipt, but the anchor file")
            && r.body.contains("`latchclaw receipt anchor --reset`"),
        "{}",
        r.body
    );
    assert_eq!(std::fs::read(&log).unwrap(), &whole[..first]);
    assert_eq!(std::fs::read_to_string(&anchor).unwrap(), text);
    // Restored: chats go on.
    std::fs::write(&log, &whole).unwrap();
    let r = post(&g, &t, "/chat", &json!({"message": "what time is it"}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

#[test]
fn cors_headers_only_for_listed_origins() {
    let env = Env::new();
    setup(&env, "cors_origins = [\"http://localhost:3000\"]", "");
    let t = token(&env);
    let g = start(&env);
    let ask = |origin: &str| {
        raw(
            &g.addr,
            format!("GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: {origin}\r\nAuthorization: Bearer {t}\r\n\r\n").as_bytes(),
        )
    };
    let r = ask("http://localhost:3000");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("http://localhost:3000")
    );
    let r = ask("http://localhost:3001");
    assert_eq!(r.header("Access-Control-Allow-Origin"), None);
    let r = raw(
        &g.addr,
        b"OPTIONS /chat HTTP/1.1\r\nHost: x\r\nOrigin: http://localhost:3000\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 204);
    assert!(
        r.header("Access-Control-Allow-Headers")
            .unwrap()
            .contains("Authorization")
    );
    setup(&env, "cors_origins = [\"*\"]", "");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("gateway.cors_origins[0]"), "{r:?}");
}

#[test]
fn sigterm_stops_the_gateway() {
    let env = Env::new();
    setup(&env, "", "");
    token(&env);
    let mut g = start(&env);
    assert_eq!(request(&g.addr, "GET", "/health", None, None).status, 200);
    // A kept-alive client does not hold the shutdown up.
    let mut idle = TcpStream::connect(&g.addr).unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    read_reply(&mut BufReader::new(idle.try_clone().unwrap()));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(g.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    wait_until(Duration::from_secs(4), "still running", || {
        g.child.try_wait().unwrap().is_some()
    });
    assert!(TcpStream::connect(&g.addr).is_err());
}

/// Runs a gateway with its log (at `info`) in a file.
fn start_logged(env: &Env) -> (Gateway, std::path::PathBuf) {
    let log = env.root.join("gateway.log");
    let g = start_with_stderr(env, std::fs::File::create(&log).unwrap().into());
    (g, log)
}

/// A fresh client's `/health`, timed.
fn fresh_health(addr: &str) -> Duration {
    let at = Instant::now();
    let r = request(addr, "GET", "/health", None, None);
    assert_eq!(r.status, 200, "{}", r.body);
    at.elapsed()
}

#[test]
fn stalled_heads_and_pipeliners_hold_no_worker() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let env = Env::new();
    setup(&env, "workers = 4\nheader_timeout_ms = 20000", "");
    token(&env);
    let g = start(&env);
    // Twice as many heads that never end as there are workers.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(&g.addr).unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // As many pipeliners as workers, sending nonstop; half read what they
    // get, half never do.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for i in 0..8 {
        let s = TcpStream::connect(&g.addr).unwrap();
        s.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut w = s.try_clone().unwrap();
        let stop_w = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let batch = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(50);
            while !stop_w.load(Ordering::SeqCst) {
                if w.write_all(&batch).is_err() && i % 2 == 0 {
                    // The reading half: only a failure ends it.
                    return;
                }
            }
        }));
        if i % 2 == 0 {
            let (stop_r, answered) = (Arc::clone(&stop), Arc::clone(&answered));
            threads.push(std::thread::spawn(move || {
                let mut r = BufReader::new(s);
                r.get_mut()
                    .set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut line = String::new();
                while !stop_r.load(Ordering::SeqCst) {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) => return,
                        // A body has no newline: it starts the next line.
                        Ok(_) => {
                            answered
                                .fetch_add(line.matches("HTTP/1.1 200").count(), Ordering::SeqCst);
                        }
                        _ => {}
                    }
                }
            }));
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // Ten fresh clients at least, and more until the pipeliners have had
    // their answers (the load was real while the fresh ones were timed).
    let mut worst = Duration::ZERO;
    let mut fresh = 0;
    let until = Instant::now() + Duration::from_secs(30);
    while fresh < 10 || (answered.load(Ordering::SeqCst) <= 200 && Instant::now() < until) {
        worst = worst.max(fresh_health(&g.addr));
        fresh += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let piped = answered.load(Ordering::SeqCst);
    stop.store(true, Ordering::SeqCst);
    // Served between the others, a fresh client takes milliseconds (up to
    // a second or so on a loaded 2-core machine, these eight pipeliners
    // included). Held up by a stalled head it would wait for the 20 s
    // head deadline; by a pipeliner that never reads, for ever: 5 s is
    // generous and a quarter of the first.
    assert!(
        worst < Duration::from_secs(5),
        "a fresh /health took {worst:?}"
    );
    assert!(piped > 200, "the pipeliners got {piped} answers");
    drop(stalled);
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn a_connection_is_closed_after_a_thousand_requests() {
    let env = Env::new();
    setup(&env, "", "");
    token(&env);
    let g = start(&env);
    let mut s = TcpStream::connect(&g.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut w = w;
        let _ = w.write_all(&b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1005));
    });
    let mut r = BufReader::new(&mut s);
    for n in 1..=1000 {
        let reply = read_reply(&mut r);
        assert_eq!(reply.status, 200);
        let conn = reply.header("Connection").unwrap();
        assert_eq!(conn, if n == 1000 { "close" } else { "keep-alive" }, "{n}");
    }
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    let _ = writer.join();
}

#[test]
fn a_stranger_is_refused_before_its_body_and_a_slow_body_gets_408() {
    // The body's deadline. "At once" below is half of it: generous on a
    // loaded machine, and still short of a reply that waited for the body.
    let deadline = Duration::from_millis(3000);
    let env = Env::new();
    setup(
        &env,
        &format!("header_timeout_ms = {}", deadline.as_millis()),
        "",
    );
    let t = token(&env);
    let g = start(&env);
    for auth in [String::new(), "Authorization: Bearer lcgw_nope\r\n".into()] {
        let mut s = TcpStream::connect(&g.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(
            format!(
                "POST /estop HTTP/1.1\r\nHost: x\r\n{auth}Expect: 100-continue\r\n\
                 Content-Length: 20\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let mut r = BufReader::new(s);
        let reply = read_reply(&mut r);
        assert_eq!(reply.status, 401, "{auth}: {}", reply.body);
        assert_eq!(reply.header("Connection"), Some("close"));
        // Nothing more: no `100 Continue`, before or after.
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    assert!(!env.state.join("ESTOP").exists());
    // What needs no token reads no body: answered at once, the body unsent.
    for (head, status) in [
        ("POST /health", 405),
        ("GET /health", 400),
        ("PUT /health", 405),
    ] {
        let at = Instant::now();
        let r = raw(
            &g.addr,
            format!("{head} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, status, "{head}: {}", r.body);
        assert!(at.elapsed() < deadline / 2, "{head}: {:?}", at.elapsed());
    }
    // With the token, the client is told to go on.
    let mut s = TcpStream::connect(&g.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = "{\"reason\": \"test\"}";
    s.write_all(
        format!(
            "POST /estop HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
             Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    r.read_line(&mut line).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    assert_eq!(read_reply(&mut r).status, 200);
    assert!(env.state.join("ESTOP").exists());
    // An admitted body that stops coming: 408 at its deadline.
    let at = Instant::now();
    let mut s = TcpStream::connect(&g.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST /chat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\
             Content-Length: 100\r\n\r\n{{\"mess"
        )
        .as_bytes(),
    )
    .unwrap();
    let reply = read_reply(&mut BufReader::new(s));
    let took = at.elapsed();
    assert_eq!(
        (reply.status, reply.json()["code"].clone()),
        (408, json!("timeout"))
    );
    assert!(
        took >= deadline - Duration::from_millis(100)
            && took < deadline + Duration::from_millis(2500),
        "{took:?}"
    );
    assert!(fresh_health(&g.addr) < deadline / 2);
}

#[test]
fn authorization_and_content_length_are_read_strictly() {
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    let g = start(&env);
    let with = |auth: &str| {
        raw(
            &g.addr,
            format!("GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n")
                .as_bytes(),
        )
    };
    for ok in [
        format!("Authorization: Bearer {t}\r\n"),
        format!("Authorization: Bearer\t{t}\r\n"),
        format!("Authorization: Bearer  \t {t} \t\r\n"),
    ] {
        assert_eq!(with(&ok).status, 200, "{ok:?}");
    }
    // Unicode spaces are not optional whitespace; the scheme is as written.
    for refused in [
        format!("Authorization: Bearer\u{a0}{t}\r\n"),
        format!("Authorization: Bearer {t}\u{3000}\r\n"),
        format!("Authorization: Bearer\u{2003}{t}\r\n"),
        format!("Authorization: Bearer{t}\r\n"),
        format!("Authorization: BEARER {t}\r\n"),
        format!("Authorization: Bearer {t} {t}\r\n"),
    ] {
        assert_eq!(with(&refused).status, 401, "{refused:?}");
    }
    // Two Authorization headers are ambiguous, also when both are right.
    for twice in [
        format!("Authorization: Bearer {t}\r\nAuthorization: Bearer {t}\r\n"),
        format!("Authorization: Bearer {t}\r\nAuthorization: Bearer lcgw_x\r\n"),
        format!("Authorization: Bearer lcgw_x\r\nAuthorization: Bearer {t}\r\n"),
    ] {
        let r = with(&twice);
        assert_eq!(
            (r.status, r.json()["code"].clone()),
            (400, json!("bad_request")),
            "{twice:?}"
        );
        assert!(r.body.contains("more than one Authorization"), "{}", r.body);
    }
    // Content-Length is 1*DIGIT, once.
    let estop = |lengths: &str, body: &str| {
        raw(
            &g.addr,
            format!(
                "POST /estop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                 Authorization: Bearer {t}\r\n{lengths}\r\n{body}"
            )
            .as_bytes(),
        )
    };
    for lengths in [
        "Content-Length: +0\r\n",
        "Content-Length: -0\r\n",
        "Content-Length: 0x2\r\n",
        "Content-Length: 2 2\r\n",
        "Content-Length: \r\n",
        "Content-Length: 99999999999999999999999\r\n",
        "Content-Length: 2\r\nContent-Length: 2\r\n",
        "Content-Length: 2\r\nContent-Length: 3\r\n",
    ] {
        let r = estop(lengths, "{}");
        assert_eq!(
            (r.status, r.json()["code"].clone()),
            (400, json!("bad_request")),
            "{lengths:?}"
        );
    }
    assert!(!env.state.join("ESTOP").exists());
    assert_eq!(estop("Content-Length: 2\r\n", "{}").status, 200);
    assert!(env.state.join("ESTOP").exists());
}

#[test]
fn the_token_never_comes_back_nor_reaches_state_or_the_model() {
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    let hex = t.strip_prefix("lcgw_").unwrap().to_string();
    let upper = hex.to_ascii_uppercase();
    let g = start(&env);
    let leaks = |what: &str, text: &str| {
        for v in [&t, &hex, &upper] {
            assert!(!text.contains(v.as_str()), "{what} holds the token: {text}");
        }
    };
    let mut bodies = Vec::new();
    for value in [&t, &hex, &upper] {
        for path in [
            format!("/receipts?limit={value}"),
            format!("/receipts?since={value}"),
            format!("/memory/search?q=x&limit={value}"),
        ] {
            let r = get(&g, &t, &path);
            assert_eq!(r.status, 400, "{path}: {}", r.body);
            bodies.push(r.body);
        }
        let r = post(
            &g,
            &t,
            "/chat",
            &json!({"message": "hello", "conversation_id": value}),
        );
        assert_eq!(r.status, 404, "{}", r.body);
        bodies.push(r.body);
    }
    let r = post(
        &g,
        &t,
        "/estop",
        &json!({"reason": format!("stop {t} / {hex} / {upper}")}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    bodies.push(r.body);
    let estop_file = std::fs::read_to_string(env.state.join("ESTOP")).unwrap();
    leaks("ESTOP", &estop_file);
    assert!(estop_file.contains("[REDACTED"), "{estop_file}");
    bodies.push(get(&g, &t, "/status").body);
    assert_eq!(
        request(&g.addr, "DELETE", "/estop", Some(&bearer(&t)), None).status,
        200
    );
    let r = post(
        &g,
        &t,
        "/chat",
        &json!({"message": format!("remember {t} and {hex} and {upper}")}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["answer"]
            .as_str()
            .unwrap()
            .starts_with("echo: remember [REDACTED")
    );
    bodies.push(r.body);
    bodies.push(get(&g, &t, "/memory/search?q=remember").body);
    bodies.push(get(&g, &t, "/receipts").body);
    for b in &bodies {
        leaks("a response", b);
    }
    let requests = env.requests();
    assert!(!requests.is_empty());
    leaks(
        "the provider's requests",
        &serde_json::to_string(&requests).unwrap(),
    );
    drop(g);
    let mut checked = 0;
    for entry in std::fs::read_dir(&env.state).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            let bytes = std::fs::read(&path).unwrap();
            leaks(
                &path.display().to_string(),
                &String::from_utf8_lossy(&bytes),
            );
            checked += 1;
        }
    }
    assert!(
        env.state.join("memory.sqlite").exists() && checked >= 3,
        "{checked} files"
    );
}

#[test]
fn a_token_file_others_may_write_is_refused_at_once() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    setup(&env, "", "");
    let t = token(&env);
    let (g, log) = start_logged(&env);
    let file = env.state.join("gateway.token");
    assert_eq!(get(&g, &t, "/status").status, 200);
    for mode in [0o666, 0o620, 0o602] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        for _ in 0..3 {
            let r = get(&g, &t, "/status");
            assert_eq!(r.status, 401, "mode {mode:o}: {}", r.body);
        }
        assert_eq!(request(&g.addr, "GET", "/health", None, None).status, 200);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(get(&g, &t, "/status").status, 200, "mode 600 again");
    }
    drop(g);
    let text = std::fs::read_to_string(&log).unwrap();
    let refusals: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("every request is refused"))
        .collect();
    // One line each time it became writable, saying why.
    assert_eq!(refusals.len(), 3, "{text}");
    assert!(
        refusals[0].contains("may be written by others (mode 666"),
        "{text}"
    );
    assert!(refusals[0].contains("chmod 600"), "{text}");
    assert!(!text.contains(&t[5..]), "{text}");
}

#[test]
#[cfg(feature = "sop")]
fn sop_runs_start_and_show_behind_the_token() {
    let env = Env::new();
    setup(&env, "", "autonomy = \"full\"");
    let t = token(&env);
    let dir = env.ws.join("sops").join("tick");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SOP.toml"),
        "name = \"tick\"\n[[steps]]\nid = \"now\"\nkind = \"tool\"\ntool = \"time\"\n\
         [[steps]]\nid = \"ok\"\nkind = \"approval\"\nprompt = \"Go on?\"\n",
    )
    .unwrap();
    let g = start(&env);
    // The token, as every endpoint but /health.
    let r = request(&g.addr, "POST", "/sop/tick/run", None, Some("{}"));
    assert_eq!(r.status, 401, "{}", r.body);
    let r = request(&g.addr, "GET", "/sop/runs/x", Some("Bearer nope"), None);
    assert_eq!(r.status, 401, "{}", r.body);
    // Nobody answers at the gateway: the run parks at its approval.
    let r = post(&g, &t, "/sop/tick/run", &json!({}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["status"], "waiting_approval", "{v}");
    assert_eq!(v["exit_code"], 4);
    assert_eq!(v["steps"][0]["state"], "done");
    assert!(v["approval_id"].is_string(), "{v}");
    let run = v["run_id"].as_str().unwrap();
    let r = get(&g, &t, &format!("/sop/runs/{run}"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "waiting_approval");
    assert_eq!(get(&g, &t, "/sop/runs/sop-none").status, 404);
    assert_eq!(post(&g, &t, "/sop/none/run", &json!({})).status, 404);
    assert_eq!(get(&g, &t, "/sop/tick/run").status, 405);
    // Decided and continued at the CLI.
    assert_eq!(env.run(&["sop", "approve", run, "--yes"]).code, 0);
    let r = env.run(&["sop", "resume", run]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        get(&g, &t, &format!("/sop/runs/{run}")).json()["status"],
        "completed"
    );
}

/// `[memory] session = "daily"`: a chat continued past the boundary goes
/// on in a new conversation (the answer names it), and with
/// `summarize_conversations` the old one gets its summary; one within the
/// session stays where it is.
#[test]
fn a_chat_continued_past_the_session_boundary_starts_a_new_conversation() {
    let env = Env::new();
    setup(
        &env,
        "[memory]\nsession = \"daily\"\nsummarize_conversations = true",
        "",
    );
    // 2026-11-02T10:00:00Z, then the next morning.
    let monday = "1793613600";
    let tuesday = "1793700000";
    fn clock(now: &str) -> [(&str, &str); 2] {
        [("TZ", "UTC"), ("LATCHCLAW_TEST_NOW", now)]
    }
    let r = env.run_env(&["agent", "-m", "hello there", "--json"], &clock(monday));
    assert_eq!(r.code, 0, "{r:?}");
    let old: Value = serde_json::from_str(&r.stdout).unwrap();
    let old = old["conversation_id"].as_str().unwrap().to_string();
    let t = token(&env);
    let mut child = env
        .command(&["gateway"])
        .envs(clock(tuesday))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let g = Gateway {
        addr: line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string(),
        child,
    };
    let v = post(
        &g,
        &t,
        "/chat",
        &json!({"message": "hello again", "conversation_id": old}),
    )
    .json();
    assert_eq!(v["exit_reason"], "completed", "{v}");
    let new = v["conversation_id"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    // Within the session: the same conversation.
    let v = post(
        &g,
        &t,
        "/chat",
        &json!({"message": "and again", "conversation_id": new}),
    )
    .json();
    assert_eq!(v["conversation_id"], new.as_str());
    drop(g);
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let row = |id: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|c| c["conversation_id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        row(&old)["summaries"].as_array().unwrap().len(),
        1,
        "{list}"
    );
    assert_eq!(row(&new)["summaries"], json!([]));
    assert_eq!(row(&new)["turns"], 4, "{list}");
    assert_eq!(row(&new)["first_message"], "hello again");
}
