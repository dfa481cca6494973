//! `code_run` on the real binary, by effect, with a secret planted in
//! latchclaw's environment: a snippet cannot find its value (environment,
//! /proc, the state dir, the prelude, its own output and files), cannot
//! send it to a host it is not bound to in any spelling, and the bound
//! host (a fake server on 127.0.0.1) receives the real value; a `tool()`
//! call the gate refuses is refused with a receipt; runaway snippets end;
//! a mock-scripted agent turn uses it, and `code stats|failures` show it.
// The `code` feature (the minimal build refuses it: tests/features.rs).
#![cfg(feature = "code")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{Env, Run, lit};
use fake_server::{FakeServer, Reply};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// The planted secret, in `LC_TEST_API_TOKEN`.
const VALUE: &str = "ghp_PlantedCodeRunSecret_5f3a9c1e7b2d";
const VAR: &str = "LC_TEST_API_TOKEN";

fn have(program: &str) -> bool {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(program).is_file())
}

/// Python and Node on the fixed PATH, or the test says why it is skipped.
fn interpreters(test: &str) -> bool {
    for p in ["python3", "node"] {
        if !have(p) {
            common::skip(format!("{test}: no {p} on /usr/local/bin:/usr/bin:/bin"));
            return false;
        }
    }
    true
}

/// A config with `code_run` on (low risk: it runs under `autonomy`
/// without asking), the secret bound to 127.0.0.1, and both 127.0.0.1 and
/// localhost allowed to the http policy (two hosts on this machine).
fn env_with(autonomy: &str, extra: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "[security]\nautonomy = \"{autonomy}\"\n\
         [channels.cli]\ntools_allow = [\"code_run\", \"shell\", \"file_read\", \"time\"]\n\
         [tools.code_run]\nrisk = \"low\"\n{extra}\n\
         [tools.code_run.secrets]\nAPI_TOKEN = {{ env = \"{VAR}\", hosts = [\"127.0.0.1\"] }}\n\
         [tools.http]\nallowed_domains = [\"127.0.0.1\", \"localhost\"]\n\
         allow_private = [\"127.0.0.1\", \"localhost\"]\n"
    ));
    env
}

/// `tool run code_run` with the secret in latchclaw's environment: the run
/// and its result, and the snippet's own result (`output` parsed).
fn code(env: &Env, language: &str, source: &str, extra: Value) -> (Run, Value, Value) {
    let mut args = json!({"language": language, "code": source});
    for (k, v) in extra.as_object().unwrap() {
        args[k] = v.clone();
    }
    let r = env.run_env(
        &["tool", "run", "code_run", "--json", &args.to_string()],
        &[(VAR, VALUE)],
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    let inner: Value =
        serde_json::from_str(v["output"].as_str().unwrap_or("null")).unwrap_or(Value::Null);
    (r, v, inner)
}

/// Every file under `dir`, as bytes, with its path.
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p.display().to_string(), b));
            }
        }
    }
    out
}

fn b64(s: &str) -> String {
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The value and every spelling a leak could take.
fn spellings() -> Vec<String> {
    vec![
        VALUE.to_string(),
        b64(VALUE),
        VALUE.chars().rev().collect(),
        VALUE[..18].to_string(),
        VALUE[18..].to_string(),
    ]
}

fn holds_any(bytes: &[u8], what: &[String]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    what.iter().find(|s| text.contains(s.as_str())).cloned()
}

#[test]
fn a_snippet_never_holds_the_secret_and_only_the_bound_host_receives_it() {
    if !interpreters("a_snippet_never_holds_the_secret_and_only_the_bound_host_receives_it") {
        return;
    }
    let env = env_with("full", "");
    let bound = FakeServer::start(vec![Reply::json(200, "{\"ok\": true}")]);
    let unbound = FakeServer::start(vec![Reply::json(200, "{\"ok\": true}")]);
    let want = {
        use sha2_hex::hex;
        hex(VALUE)
    };
    let hunt = format!(
        r#"
import base64, glob, hashlib, json, os
import latchclaw
WANT, N, STATE = {want:?}, {n}, {state}
sources = {{}}
def add(name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    sources[name] = data[:262144]
add("environ", json.dumps(dict(os.environ)))
for p in ["/proc/self/environ", "/proc/1/environ", "/proc/self/cmdline"] + glob.glob("/proc/[0-9]*/environ"):
    try:
        add(p, open(p, "rb").read())
    except Exception as e:
        add(p + " (unreadable)", type(e).__name__)
for root in [STATE, os.path.expanduser("~"), "/tmp"]:
    for dp, dn, fn in os.walk(root):
        for f in fn:
            try:
                add(os.path.join(dp, f), open(os.path.join(dp, f), "rb").read())
            except Exception:
                pass
add("prelude", repr(vars(latchclaw)))
ph = latchclaw.secret("API_TOKEN")
add("placeholder", ph)
add("secrets", json.dumps(latchclaw.secrets()))
leaks = []
for name, data in sources.items():
    for i in range(0, max(0, len(data) - N + 1)):
        if hashlib.sha256(data[i:i + N]).hexdigest() == WANT:
            leaks.append(name)
            break
print("placeholder:", ph)
print("sources:", len(sources))
print("leaks:", json.dumps(leaks))
open("written.txt", "w").write("token=" + ph + "\n")
denied = []
for label, h in [("plain", ph), ("b64", base64.b64encode(ph.encode()).decode()),
                 ("rev", ph[::-1]), ("split", ph[:9] + "|" + ph[9:])]:
    # A header takes visible ASCII only: the reversed placeholder goes in
    # the body alone.
    headers = {{"Authorization": "token " + h}} if h.isascii() else {{}}
    try:
        latchclaw.http("POST", "http://localhost:{up}/" + label, headers, "body " + h)
        print("sent", label)
    except latchclaw.Denied as e:
        denied.append(label)
print("denied:", json.dumps(denied))
r = latchclaw.http("POST", "http://127.0.0.1:{bp}/api", {{"Authorization": "token " + ph}}, {{"t": ph}})
latchclaw.output({{"bound_status": r.status, "denied": denied, "leaks": leaks}})
"#,
        n = VALUE.len(),
        state = lit(&env.state),
        up = unbound.port,
        bp = bound.port,
    );
    let (r, v, inner) = code(&env, "python", &hunt, json!({"timeout_secs": 120}));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(inner["error_category"], Value::Null, "{r:?}");
    let out = &inner["output"];
    assert_eq!(out["leaks"], json!([]), "{r:?}");
    assert_eq!(out["bound_status"], 200, "{r:?}");
    // The placeholder to the wrong host is refused, and so is one split
    // around a name no secret has; its encodings are no placeholder and go
    // out as the text they are: never the value.
    assert_eq!(out["denied"], json!(["plain", "split"]), "{r:?}");
    let stdout = inner["stdout"].as_str().unwrap();
    let sources: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("sources: "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(sources > 5, "{stdout}");
    // The bound host got the value where the snippet put its placeholder.
    let got = bound.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].header("authorization"),
        Some(format!("token {VALUE}").as_str())
    );
    assert_eq!(got[0].json()["t"], VALUE);
    // The unbound one got nothing of it, in any spelling.
    let sent = unbound.requests();
    assert_eq!(sent.len(), 2, "b64 and rev go out as text");
    for req in &sent {
        let all = format!("{:?} {}", req.headers, req.body);
        assert_eq!(holds_any(all.as_bytes(), &spellings()), None, "{all}");
        assert!(!all.contains("⟦secret:"), "{all}");
    }
    // Nothing anywhere holds it: the result (nothing was even redacted),
    // the file the snippet wrote, the state dir (receipts, memory).
    assert_eq!(v["metadata"]["redacted"], Value::Null, "{v}");
    assert_eq!(holds_any(r.stdout.as_bytes(), &spellings()), None);
    assert_eq!(holds_any(r.stderr.as_bytes(), &spellings()), None);
    let written = std::fs::read_to_string(env.ws.join("written.txt")).unwrap();
    assert_eq!(written, "token=⟦secret:API_TOKEN⟧\n");
    for (path, bytes) in files_under(&env.state).iter().chain(&files_under(&env.ws)) {
        assert_eq!(holds_any(bytes, &spellings()), None, "{path}");
    }
    // The record keeps the run and its requests, the refused one too.
    let (_, stats) = env.json(&["code", "stats", "--json"]);
    assert_eq!(stats["runs"], 1);
}

mod sha2_hex {
    /// SHA-256 of `s`, hex: the snippet looks for the value by it.
    pub fn hex(s: &str) -> String {
        let out = std::process::Command::new("sha256sum")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(s.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_string()
    }
}

#[test]
fn node_sees_no_secret_in_its_environment_and_echoes_come_back_redacted() {
    if !interpreters("node_sees_no_secret_in_its_environment_and_echoes_come_back_redacted") {
        return;
    }
    let env = env_with("full", "");
    // The bound host echoes what it was sent: the answer passes the
    // redactor before the snippet sees it.
    let echo = FakeServer::start_with("127.0.0.1:0", |req, _| {
        Reply::json(
            200,
            json!({"auth": req.header("authorization")}).to_string(),
        )
    });
    let src = format!(
        r#"
const l = require("latchclaw");
const fs = require("fs");
const env = JSON.stringify(process.env);
let proc = "";
try {{ proc = fs.readFileSync("/proc/self/environ", "latin1"); }} catch (e) {{ proc = "ERR"; }}
const r = l.http("GET", "http://127.0.0.1:{port}/echo", {{ Authorization: "token " + l.secret("API_TOKEN") }});
l.output({{ env_has_var: env.includes("{VAR}"), proc_has_var: proc.includes("{VAR}"), echoed: r.json().auth }});
"#,
        port = echo.port
    );
    let (r, v, inner) = code(&env, "node", &src, json!({}));
    assert_eq!(r.code, 0, "{r:?}");
    let out = &inner["output"];
    assert_eq!(out["env_has_var"], false, "{r:?}");
    assert_eq!(out["proc_has_var"], false, "{r:?}");
    assert_eq!(
        out["echoed"],
        format!("token [REDACTED:env:{VAR}]"),
        "{r:?}"
    );
    assert_eq!(
        echo.requests()[0].header("authorization"),
        Some(format!("token {VALUE}").as_str())
    );
    assert!(!r.stdout.contains(VALUE));
    assert_eq!(v["success"], true);
}

#[test]
fn code_carrying_a_secret_value_is_refused_with_a_receipt() {
    let env = env_with("full", "");
    let src = format!("print('{VALUE}')");
    let (r, v, _) = code(&env, "python", &src, json!({}));
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(v["status"], "denied", "{v}");
    assert!(v["reason"].as_str().unwrap().contains(VAR), "{v}");
    let receipts = env.receipts();
    let last = receipts.last().unwrap();
    assert_eq!(last["tool"], "code_run");
    assert_eq!(last["status"], "denied");
    for (path, bytes) in files_under(&env.state) {
        assert_eq!(holds_any(&bytes, &spellings()), None, "{path}");
    }
    assert!(!r.stdout.contains(VALUE) && !r.stderr.contains(VALUE));
}

#[test]
fn a_tool_call_the_gate_denies_is_denied_with_a_receipt_and_no_effect() {
    if !interpreters("a_tool_call_the_gate_denies_is_denied_with_a_receipt_and_no_effect") {
        return;
    }
    // supervised: a shell command that deletes asks, and with no terminal
    // the answer is no.
    let env = env_with("supervised", "");
    std::fs::write(env.ws.join("canary.txt"), "alive\n").unwrap();
    let src = r#"
import latchclaw
print(latchclaw.tool("shell", {"command": "cat canary.txt"}).strip())
latchclaw.tool("shell", {"command": "rm -f canary.txt"})
print("not reached")
"#;
    let (_, v, inner) = code(&env, "python", src, json!({}));
    assert_eq!(inner["error_category"], "denied", "{v}");
    assert_eq!(inner["stdout"], "alive\n", "{v}");
    assert!(env.ws.join("canary.txt").exists());
    let calls = inner["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{v}");
    assert_eq!(calls[0]["status"], "allowed");
    assert_eq!(calls[1]["status"], "denied");
    let denied_id = calls[1]["receipt_id"].as_str().unwrap();
    let receipts = env.receipts();
    let denied = receipts
        .iter()
        .find(|r| r["receipt_id"] == denied_id || r["id"] == denied_id)
        .unwrap_or_else(|| panic!("no receipt {denied_id} in {receipts:?}"));
    assert_eq!(denied["tool"], "shell");
    assert_eq!(denied["status"], "denied");
    // The snippet's own receipt comes after the calls it made.
    assert_eq!(receipts.last().unwrap()["tool"], "code_run");
    assert_eq!(receipts.last().unwrap()["status"], "failed");
}

#[test]
fn readonly_keeps_the_workspace_read_only_and_the_tmp_writable() {
    if !interpreters("readonly_keeps_the_workspace_read_only_and_the_tmp_writable") {
        return;
    }
    let env = env_with("readonly", "");
    let src = r#"
import os, latchclaw
res = {}
for name, path in [("ws", "made.txt"), ("tmp", os.path.join(os.environ["TMPDIR"], "t.txt"))]:
    try:
        open(path, "w").write("x")
        res[name] = "written"
    except OSError as e:
        res[name] = type(e).__name__
try:
    latchclaw.http("POST", "http://127.0.0.1:9/x", {}, "")
    res["post"] = "sent"
except latchclaw.Denied:
    res["post"] = "denied"
latchclaw.output(res)
"#;
    let (r, _, inner) = code(&env, "python", src, json!({}));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(inner["output"]["tmp"], "written", "{r:?}");
    assert_ne!(inner["output"]["ws"], "written", "{r:?}");
    assert_eq!(inner["output"]["post"], "denied", "{r:?}");
    assert!(!env.ws.join("made.txt").exists());
}

#[test]
fn runaway_snippets_end_cleanly() {
    if !interpreters("runaway_snippets_end_cleanly") {
        return;
    }
    let env = env_with("full", "max_output_bytes = 65536");
    // Endless output: stopped at the cap.
    let (_, _, inner) = code(
        &env,
        "python",
        "import sys\nwhile True:\n    sys.stdout.write('y' * 4096)\n",
        json!({"timeout_secs": 60}),
    );
    assert_eq!(inner["error_category"], "output_limit", "{inner}");
    // Requests sent without their answers read (each answer waits in
    // latchclaw until read): stopped at once, not grown until the deadline
    // (before, 780 MB in 8 s). A prelude that reads each answer is not
    // affected: 500 tool() calls in a row.
    let t = Instant::now();
    let (_, _, inner) = code(
        &env,
        "python",
        r#"import os
w = int(os.environ['LATCHCLAW_CODE_FDS'].split(',')[0])
req = b'{"op": "secrets"}\n' * 4096
while True:
    os.write(w, req)
"#,
        json!({"timeout_secs": 60}),
    );
    assert_eq!(inner["error_category"], "output_limit", "{inner}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let (_, _, inner) = code(
        &env,
        "python",
        r#"import latchclaw
for _ in range(500):
    latchclaw.secrets()
latchclaw.output('done')
"#,
        json!({"timeout_secs": 60}),
    );
    assert_eq!(inner["output"], "done", "{inner}");
    // A sleep past the deadline, in the interpreter and through the prelude.
    for src in [
        "import time\ntime.sleep(300)\n",
        "import latchclaw\nlatchclaw.sleep(300)\n",
    ] {
        let t = Instant::now();
        let (_, _, inner) = code(&env, "python", src, json!({"timeout_secs": 2}));
        assert_eq!(inner["error_category"], "timeout", "{inner}");
        assert!(t.elapsed() < Duration::from_secs(60));
    }
    // A fork bomb, bounded so as not to take the machine with it: every
    // process forks again, eight generations (256), then all sleep. They
    // all end with the call.
    let marker = "600.4747";
    let src = format!(
        "import os\nfor _ in range(8):\n    os.fork()\nos.execv('/bin/sleep', ['sleep', '{marker}'])\n"
    );
    let (_, _, inner) = code(&env, "python", &src, json!({"timeout_secs": 3}));
    assert_eq!(inner["error_category"], "timeout", "{inner}");
    common::wait_until(
        Duration::from_secs(20),
        "the bomb's processes to end",
        || common::processes_with(marker).is_empty(),
    );
    // And node's endless loop.
    let (_, _, inner) = code(&env, "node", "for (;;) {}\n", json!({"timeout_secs": 2}));
    assert_eq!(inner["error_category"], "timeout", "{inner}");
}

#[test]
fn errors_are_classified() {
    if !interpreters("errors_are_classified") {
        return;
    }
    let env = env_with("full", "");
    for (lang, src, category) in [
        ("python", "def (:\n", "syntax"),
        ("python", "1/0\n", "runtime"),
        ("node", "foo(\n", "syntax"),
        ("node", "JSON.parse('x')\n", "runtime"),
        (
            "python",
            "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
            "killed",
        ),
        (
            "python",
            "import latchclaw\nlatchclaw.tool('code_run', {})\n",
            "denied",
        ),
    ] {
        let (_, v, inner) = code(&env, lang, src, json!({}));
        assert_eq!(inner["error_category"], category, "{lang} {src}: {v}");
        assert_eq!(v["success"], false);
    }
    let (_, v, inner) = code(&env, "node", "console.log(6 * 7)\n", json!({}));
    assert_eq!(inner["stdout"], "42\n", "{v}");
    assert_eq!(inner["exit"], 0);
}

#[test]
fn code_run_is_off_by_default_and_high_risk() {
    let env = Env::new();
    env.config("");
    let (_, v) = env.json(&["tool", "list", "--json"]);
    let row = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "code_run")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(row["enabled"], false, "{row}");
    let (r, v) = env.tool(
        "code_run",
        json!({"language": "python", "code": "print(1)"}),
    );
    assert_ne!(r.code, 0);
    assert_eq!(v["status"], "denied");
    // On, at its default risk: supervised asks, and no terminal says no.
    let env = Env::new();
    env.config("[security]\nautonomy = \"supervised\"\n[tools.code_run]\nenabled = true\n");
    let (_, v) = env.tool(
        "code_run",
        json!({"language": "python", "code": "print(1)"}),
    );
    assert_eq!(v["risk"], "high", "{v}");
    assert_eq!(v["status"], "denied", "{v}");
}

#[test]
fn a_mock_turn_totals_a_csv_and_calls_an_authenticated_api() {
    if !interpreters("a_mock_turn_totals_a_csv_and_calls_an_authenticated_api") {
        return;
    }
    let api = FakeServer::start_with("127.0.0.1:0", |req, _| {
        if req.header("authorization") == Some(&format!("Bearer {VALUE}")) {
            Reply::json(200, "{\"open_issues\": 7}")
        } else {
            Reply::json(401, "{\"message\": \"Bad credentials\"}")
        }
    });
    let env = Env::new();
    env.mock(
        "code_run.toml",
        "[security]\nautonomy = \"full\"\n[channels.cli]\ntools_allow = [\"code_run\"]",
        &format!(
            "[tools.code_run]\nrisk = \"low\"\n\
             [tools.code_run.secrets]\nAPI_TOKEN = {{ env = \"{VAR}\", hosts = [\"127.0.0.1\"] }}\n\
             [tools.http]\nallowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n"
        ),
    );
    std::fs::write(
        env.ws.join("sales.csv"),
        "region,amount\nnorth,10.5\nsouth,20\neast,4.25\n",
    )
    .unwrap();
    std::fs::write(
        env.ws.join("api_url.txt"),
        format!("{}/repos/x/issues", api.url()),
    )
    .unwrap();
    let r = env.run_env(
        &["agent", "--json", "total the sales column"],
        &[(VAR, VALUE)],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(v["answer"].as_str().unwrap().contains("34.75"), "{v}");
    let r = env.run_env(&["agent", "--json", "ask the issues api"], &[(VAR, VALUE)]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(v["answer"].as_str().unwrap().contains("open_issues"), "{v}");
    assert_eq!(api.requests().len(), 1);
    assert!(!r.stdout.contains(VALUE));
    // A third turn's snippet does not parse.
    let r = env.run_env(&["agent", "--json", "broken snippet"], &[(VAR, VALUE)]);
    assert_eq!(r.code, 0, "{r:?}");
    let (_, stats) = env.json(&["code", "stats", "--json"]);
    assert_eq!(stats["runs"], 3, "{stats}");
    assert_eq!(stats["failures"], 1, "{stats}");
    let langs: Vec<&str> = stats["by_language"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["language"].as_str().unwrap())
        .collect();
    assert_eq!(langs, ["node", "python"]);
    assert_eq!(
        stats["by_category"],
        json!([{"category": "syntax", "failures": 1}])
    );
    let (_, failures) = env.json(&["code", "failures", "--json"]);
    let f = failures.as_array().unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0]["error_category"], "syntax");
    assert_eq!(f[0]["language"], "python");
    // The API call is in the record with its request, the value in none.
    let all = env.run(&["code", "stats"]);
    assert!(all.stdout.contains("syntax"), "{all:?}");
    for (path, bytes) in files_under(&env.state) {
        assert_eq!(holds_any(&bytes, &spellings()), None, "{path}");
    }
}

#[test]
fn background_runs_are_followed_with_code_status_and_end_with_the_run() {
    if !interpreters("background_runs_are_followed_with_code_status_and_end_with_the_run") {
        return;
    }
    let env = Env::new();
    env.mock(
        "code_background.toml",
        "[security]\nautonomy = \"full\"\n[channels.cli]\ntools_allow = [\"code_run\"]",
        "[tools.code_run]\nrisk = \"low\"\n",
    );
    let r = env.run(&["agent", "--json", "run it in the background"]);
    assert_eq!(r.code, 0, "{r:?}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(env.ws.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["one"]["state"], "running", "{report}");
    assert_eq!(report["one"]["stdout"], "first\n", "{report}");
    assert_eq!(report["two"]["state"], "done", "{report}");
    assert_eq!(report["two"]["stdout"], "42\n", "{report}");
    assert_eq!(report["two"]["exit"], 0, "{report}");
    assert!(
        report["missing"].as_str().unwrap().contains("job-1, job-2"),
        "{report}"
    );
    // code_status came with code_run, and the jobs ended with the run.
    common::wait_until(Duration::from_secs(20), "job-1 to end with the run", || {
        common::processes_with("600.5858").is_empty()
    });
    let (_, stats) = env.json(&["code", "stats", "--json"]);
    assert_eq!(stats["runs"], 3, "{stats}");
    let (_, failures) = env.json(&["code", "failures", "--json"]);
    assert_eq!(failures[0]["error_category"], "killed", "{failures}");
    // A background run with nobody to follow it (`tool run`) ends with it.
    let (_, v, _) = code(&env, "python", "print(1)\n", json!({"background": true}));
    assert_eq!(v["success"], true, "{v}");
}

#[test]
fn the_emergency_stop_and_ctrl_c_end_a_running_snippet() {
    if !interpreters("the_emergency_stop_and_ctrl_c_end_a_running_snippet") {
        return;
    }
    let env = env_with("full", "");
    for (marker, how, category) in [
        ("600.6161", "estop", "estop"),
        ("600.6262", "ctrl-c", "cancelled"),
    ] {
        let args = json!({
            "language": "python",
            "code": format!("import os\nos.execv('/bin/sleep', ['sleep', '{marker}'])\n"),
            "timeout_secs": 300,
        })
        .to_string();
        let child = env
            .command(&["tool", "run", "code_run", "--json", &args])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        common::wait_for_process(marker, Duration::from_secs(60));
        let t = Instant::now();
        if how == "estop" {
            assert_eq!(env.run(&["estop"]).code, 0);
        } else {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
        }
        let out = child.wait_with_output().unwrap();
        assert!(t.elapsed() < Duration::from_secs(60), "{how}");
        let v: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{how}: {e}: {out:?}"));
        let inner: Value = serde_json::from_str(v["output"].as_str().unwrap()).unwrap();
        assert_eq!(inner["error_category"], category, "{v}");
        common::wait_until(Duration::from_secs(20), "the snippet to end", || {
            common::processes_with(marker).is_empty()
        });
        if how == "estop" {
            assert_eq!(env.run(&["estop", "--clear"]).code, 0);
        }
    }
}
