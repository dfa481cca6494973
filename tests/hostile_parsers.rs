//! Tools that parse hostile input (`grep`'s regular expressions, the PDF
//! reader) on inputs built to take hours: each call ends at its deadline,
//! at the emergency stop set by another process and at Ctrl-C, within a
//! few ticks, through `tool run`, an agent turn and the gateway; the parser
//! child is gone with it and the next call, from another process, gets the
//! tool lock at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::{Value, json};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Leftmost-first and greedy: each match runs to the one `z` at the end of
/// the file, and costs about a hundred states a byte. On the 256 KiB file
/// below, 10,000 matching lines take hours (a 4 KiB one took 13 s).
const PATTERN: &str = r"(?s)^a.{0,100}.*z";

/// How late a stop may be seen here: the child is waited on a 10 ms tick,
/// and a loaded two-core machine runs the tests side by side.
const PROMPT: Duration = Duration::from_millis(600);

#[derive(Clone, Copy, Debug)]
enum Parser {
    Grep,
    #[cfg(feature = "pdf")]
    Pdf,
}

const PARSERS: &[Parser] = &[
    Parser::Grep,
    #[cfg(feature = "pdf")]
    Parser::Pdf,
];

impl Parser {
    fn tool(self) -> &'static str {
        match self {
            Parser::Grep => "grep",
            #[cfg(feature = "pdf")]
            Parser::Pdf => "pdf_extract",
        }
    }

    fn args(self) -> String {
        match self {
            Parser::Grep => json!({"pattern": PATTERN, "path": "slow.txt", "max_matches": 10000}),
            #[cfg(feature = "pdf")]
            Parser::Pdf => json!({"path": "slow.pdf"}),
        }
        .to_string()
    }

    /// What the mock model is told to get this call (fixtures/hostile_parsers.toml).
    fn message(self) -> &'static str {
        match self {
            Parser::Grep => "slow grep",
            #[cfg(feature = "pdf")]
            Parser::Pdf => "slow pdf",
        }
    }
}

/// A PDF with no cross-reference table, so the reader rebuilds it by
/// scanning, and 200,000 `trailer <<` whose dictionaries each run to the end
/// of the file: quadratic in its 2 MiB (a 384 KiB one took 7 minutes).
fn slow_pdf() -> Vec<u8> {
    let mut pdf = b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n".to_vec();
    pdf.extend_from_slice(&b"trailer <<".repeat(200_000));
    pdf
}

/// The slow inputs in the workspace, the mock model, readonly autonomy.
fn setup(env: &Env, tool_timeout_secs: u64, tables: &str) {
    std::fs::write(
        env.ws.join("slow.txt"),
        format!("{}z\n", "a\n".repeat(128 * 1024)),
    )
    .unwrap();
    std::fs::write(env.ws.join("slow.pdf"), slow_pdf()).unwrap();
    env.mock(
        "hostile_parsers.toml",
        &format!("tool_timeout_secs = {tool_timeout_secs}"),
        &format!(
            "[security]\nautonomy = \"readonly\"\n[channels.cli]\n\
             tools_allow = [\"grep\", \"pdf_extract\", \"time\"]\n{tables}"
        ),
    );
}

fn spawn_tool(env: &Env, p: Parser) -> Child {
    env.command(&["tool", "run", p.tool(), "--json", &p.args()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The parser children (`latchclaw __parse KIND`) of process `pid`.
fn parser_children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let (Ok(stat), Ok(cmdline)) = (
            std::fs::read_to_string(entry.path().join("stat")),
            std::fs::read(entry.path().join("cmdline")),
        ) else {
            continue;
        };
        // The parent's pid is the second field after the name's `)`.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) && String::from_utf8_lossy(&cmdline).contains("__parse") {
            found.push(child);
        }
    }
    found
}

/// Waits until `pid` runs a parser child, and returns it: the call is then
/// deep in the hostile input.
fn parsing(pid: u32) -> u32 {
    let mut child = 0;
    common::wait_until(Duration::from_secs(20), "no parser child", || {
        child = parser_children(pid).first().copied().unwrap_or(0);
        child != 0
    });
    child
}

fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn finish(child: Child) -> (std::process::ExitStatus, Value, String) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    (out.status, v, format!("{stdout}\n--- stderr\n{stderr}"))
}

/// What a stopped call said: the result's error, or its output (a search
/// cut short keeps what it found).
fn said(v: &Value) -> String {
    format!("{} {}", v["error"].as_str().unwrap_or(""), v["output"])
}

#[test]
fn inputs_built_to_take_hours_end_at_the_deadline_and_the_lock_is_free_at_once() {
    for &p in PARSERS {
        let env = Env::new();
        setup(&env, 1, "");
        let started = Instant::now();
        let call = spawn_tool(&env, p);
        let pid = call.id();
        let child = parsing(pid);
        // Another process's call waits on the tool lock meanwhile.
        let next = env
            .command(&["tool", "run", "time", "--json", "{}"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (status, v, all) = finish(call);
        let ended = Instant::now();
        let took = ended - started;
        eprintln!("{p:?}: the call with a 1 s limit took {took:?}");
        assert!(
            took < Duration::from_millis(1800),
            "{p:?} took {took:?}: {all}"
        );
        assert!(said(&v).contains("time limit"), "{p:?}: {all}");
        assert!(
            gone(child),
            "{p:?}: the parser child {child} outlived the call"
        );
        match p {
            // A search cut short is a result with what it found.
            Parser::Grep => {
                assert_eq!(status.code(), Some(0), "{all}");
                assert_eq!(v["metadata"]["truncated"], true, "{all}");
            }
            #[cfg(feature = "pdf")]
            Parser::Pdf => assert_eq!(v["success"], false, "{all}"),
        }
        let (status, v, all) = finish(next);
        let after = ended.elapsed();
        eprintln!("{p:?}: the next call ended {after:?} after it");
        assert!(status.success() && v["success"] == true, "{all}");
        assert!(after < PROMPT, "{p:?}: the next call waited {after:?}");
    }
}

#[test]
fn the_emergency_stop_from_another_process_ends_them_at_once() {
    for &p in PARSERS {
        let env = Env::new();
        setup(&env, 600, "");
        let call = spawn_tool(&env, p);
        let child = parsing(call.id());
        let r = env.run(&["estop"]);
        assert_eq!(r.code, 0, "{r:?}");
        let engaged = Instant::now();
        let (status, v, all) = finish(call);
        let took = engaged.elapsed();
        eprintln!("{p:?}: ended {took:?} after `latchclaw estop`");
        assert!(took < PROMPT, "{p:?} took {took:?} after the estop: {all}");
        assert_eq!(status.code(), Some(5), "{all}");
        assert!(said(&v).contains("emergency stop"), "{all}");
        assert!(
            gone(child),
            "{p:?}: the parser child {child} outlived the call"
        );
        // Lifted, the next call from another process runs at once.
        assert_eq!(env.run(&["estop", "--clear"]).code, 0);
        let at = Instant::now();
        let (r, v) = env.tool("time", json!({}));
        assert!(r.code == 0 && v["success"] == true, "{r:?}");
        assert!(at.elapsed() < Duration::from_secs(2), "{:?}", at.elapsed());
    }
}

#[test]
fn ctrl_c_ends_them_at_once() {
    for &p in PARSERS {
        let env = Env::new();
        setup(&env, 600, "");
        let call = spawn_tool(&env, p);
        let child = parsing(call.id());
        let at = Instant::now();
        // SAFETY: kill(2) on the child this test started and has not reaped.
        #[allow(unsafe_code)]
        let sent = unsafe { libc::kill(call.id() as i32, libc::SIGINT) };
        assert_eq!(sent, 0);
        let (status, _, all) = finish(call);
        let took = at.elapsed();
        eprintln!("{p:?}: ended {took:?} after SIGINT");
        assert!(took < PROMPT, "{p:?} took {took:?} after SIGINT: {all}");
        // Cleaned up and recorded, then dead of the signal, as a shell call.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGINT), "{all}");
        assert!(
            gone(child),
            "{p:?}: the parser child {child} outlived the call"
        );
        let calls: Vec<Value> = env.receipts();
        assert!(calls.iter().any(|r| r["tool"] == p.tool()), "{calls:?}");
    }
}

#[test]
fn an_agent_turn_gets_the_call_back_at_its_deadline() {
    for &p in PARSERS {
        let env = Env::new();
        setup(&env, 1, "");
        let at = Instant::now();
        let (r, v) = env.json(&["agent", "-m", p.message(), "--json"]);
        let took = at.elapsed();
        eprintln!("{p:?}: the turn took {took:?}");
        assert!(
            took < Duration::from_millis(2500),
            "{p:?} took {took:?}: {r:?}"
        );
        assert_eq!(r.code, 0, "{r:?}");
        let answer = v["answer"].as_str().unwrap();
        assert!(answer.contains(" said: "), "{answer}");
        assert!(answer.contains("time limit"), "{answer}");
    }
}

#[cfg(feature = "gateway")]
mod gateway {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;

    struct Gateway {
        child: Child,
        addr: String,
        token: String,
    }

    impl Drop for Gateway {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn start(env: &Env, tool_timeout_secs: u64) -> Gateway {
        setup(
            env,
            tool_timeout_secs,
            "[gateway]\nbind = \"127.0.0.1:0\"\n",
        );
        let r = env.run(&["gateway", "token"]);
        assert_eq!(r.code, 0, "{r:?}");
        let mut child = env
            .command(&["gateway"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_string();
        Gateway {
            child,
            addr,
            token: r.stdout.trim().to_string(),
        }
    }

    /// One request on its own connection: the status and the JSON body.
    fn post(addr: &str, token: &str, path: &str, body: &Value) -> (u16, Value) {
        let body = body.to_string();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn chat(g: &Gateway, p: Parser) -> std::thread::JoinHandle<(u16, Value)> {
        let (addr, token) = (g.addr.clone(), g.token.clone());
        std::thread::spawn(move || post(&addr, &token, "/chat", &json!({"message": p.message()})))
    }

    #[test]
    fn post_estop_ends_a_running_parse_at_once() {
        let env = Env::new();
        let g = start(&env, 600);
        for &p in PARSERS {
            let reply = chat(&g, p);
            let child = parsing(g.child.id());
            let (status, v) = post(&g.addr, &g.token, "/estop", &json!({"reason": "hostile"}));
            assert_eq!(status, 200, "{v}");
            let engaged = Instant::now();
            let (status, v) = reply.join().unwrap();
            let took = engaged.elapsed();
            eprintln!("{p:?}: /chat answered {took:?} after POST /estop");
            assert!(took < PROMPT, "{p:?} took {took:?} after the estop: {v}");
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["exit_reason"], "estop", "{v}");
            assert!(
                gone(child),
                "{p:?}: the parser child {child} outlived the call"
            );
            let r = env.run(&["estop", "--clear"]);
            assert_eq!(r.code, 0, "{r:?}");
        }
    }

    #[test]
    fn a_chat_gets_the_call_back_at_its_deadline() {
        let env = Env::new();
        let g = start(&env, 1);
        for &p in PARSERS {
            let at = Instant::now();
            let (status, v) = chat(&g, p).join().unwrap();
            let took = at.elapsed();
            eprintln!("{p:?}: /chat took {took:?}");
            assert_eq!(status, 200, "{v}");
            assert!(
                took < Duration::from_millis(2500),
                "{p:?} took {took:?}: {v}"
            );
            let answer = v["answer"].as_str().unwrap_or_default();
            assert!(answer.contains("time limit"), "{v}");
        }
    }
}

/// `.gitignore` files are workspace content too: 28,000 rules that each
/// retry a star across every name of a 3.7 KB path make one entry of the
/// walk cost seconds (the call took 3.9 s against a 1 s limit before).
#[test]
fn gitignore_rules_built_to_be_slow_end_at_the_deadline() {
    let env = Env::new();
    setup(&env, 1, "");
    let rule = format!("**/*{}b\n", "a".repeat(30));
    std::fs::write(
        env.ws.join(".gitignore"),
        rule.repeat(1_000_000 / rule.len()),
    )
    .unwrap();
    let deep = (0..15).fold(env.ws.clone(), |p, _| p.join("a".repeat(250)));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("x.txt"), "x\n").unwrap();
    let at = Instant::now();
    let (r, v) = env.tool("grep", json!({"pattern": "x"}));
    let took = at.elapsed();
    eprintln!("the walk with a 1 s limit took {took:?}");
    assert!(took < Duration::from_millis(1600), "took {took:?}: {r:?}");
    assert_eq!(v["metadata"]["truncated"], true, "{r:?}");
    assert!(said(&v).contains("time limit"), "{r:?}");
}
