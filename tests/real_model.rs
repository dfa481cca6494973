//! A real local model in the loop (opt-in, `make test-real`): a task set of
//! the project's own (fourteen workspace tasks: reading, counting, the
//! clock, grep, git, piped stdin, and two writes judged by their effect)
//! against llama.cpp's `llama-server`, in native, text and structured
//! tool-call mode, plus a prompt-cache check; it prints how many ended
//! right and the median seconds per task. `scripts/real-llm.sh run` starts the
//! server and sets `LATCHCLAW_REAL_BASE_URL`; this file never starts one.
//!
//! Every request goes through a recording proxy on 127.0.0.1, so the
//! transcript shows what the model really wrote in each round (tool-call
//! form, loops, the answer) next to the server's token and cache figures.
//! Results: a table on stdout and in `target/real-llm/MODEL/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One task: what the user asks, under which autonomy.
struct Task {
    key: &'static str,
    message: &'static str,
    /// Under `supervised` every shell command (even `wc -l`) and every write
    /// asks the operator, and with no terminal that is a denial; the
    /// read-only tasks run under `full` so they test the model, not the
    /// missing terminal. The write task is about exactly that path.
    autonomy: &'static str,
    /// Piped to the run's stdin.
    stdin: Option<&'static str>,
}

const TASKS: &[Task] = &[
    Task {
        key: "files",
        message: "Which files are in the workspace?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "explain",
        message: "What does the file src/tally.py do? Answer in one or two sentences.",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "lines",
        message: "Use the shell to count the lines of notes.txt. How many lines does it have?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "time",
        message: "What time is it now?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "write",
        message: "Create a file named greeting.txt containing exactly this text: Hello from LatchClaw",
        autonomy: "supervised",
        stdin: None,
    },
    Task {
        key: "add",
        message: "Which function in src/calc.py adds two numbers? Give its name.",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "count",
        message: "How many files are in the src directory?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "first",
        message: "What is the first line of README.md?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "year",
        message: "What year is it?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "exists",
        message: "Does src/calc.py define a function named divide? Answer yes or no.",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "grep",
        message: "Which file in the workspace mentions the word pelican?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "git",
        message: "What is the subject of the last git commit in this repository?",
        autonomy: "full",
        stdin: None,
    },
    Task {
        key: "stdin",
        message: "How many lines does the piped text have?",
        autonomy: "full",
        stdin: Some("apple\nbanana\ncherry\ndate\nelderberry\n"),
    },
    Task {
        key: "status",
        message: "Write the word DONE into a file named status.txt.",
        autonomy: "full",
        stdin: None,
    },
];

const NOTES_LINES: usize = 23;
const GREETING: &str = "Hello from LatchClaw";

struct Settings {
    base_url: String,
    model_name: String,
    model: String,
    template: String,
    modes: Vec<String>,
    tasks: Vec<String>,
    out: PathBuf,
    run_timeout: u64,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let Some(base_url) = var("LATCHCLAW_REAL_BASE_URL") else {
            panic!(
                "LATCHCLAW_REAL_BASE_URL is not set: run `make test-real` \
                 (or `scripts/real-llm.sh run cargo test --test real_model -- --ignored --nocapture`)"
            );
        };
        let list = |k: &str, default: &str| -> Vec<String> {
            var(k)
                .unwrap_or_else(|| default.to_string())
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let model = var("LATCHCLAW_REAL_MODEL").unwrap_or_else(|| "1.5b".into());
        let out = var("LATCHCLAW_REAL_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/real-llm"))
            .join(&model);
        let s = Settings {
            model_name: var("LATCHCLAW_REAL_MODEL_NAME").unwrap_or_else(|| "local-model".into()),
            template: var("LATCHCLAW_REAL_TEMPLATE").unwrap_or_else(|| "gguf".into()),
            modes: list("LATCHCLAW_REAL_MODES", "native,text,structured"),
            tasks: var("LATCHCLAW_REAL_TASKS")
                .map(|_| list("LATCHCLAW_REAL_TASKS", ""))
                .unwrap_or_else(|| {
                    let mut all: Vec<String> = TASKS.iter().map(|t| t.key.to_string()).collect();
                    all.push("cache".into());
                    all
                }),
            run_timeout: var("LATCHCLAW_REAL_RUN_TIMEOUT")
                .and_then(|v| v.parse().ok())
                .unwrap_or(900),
            base_url,
            model,
            out,
        };
        for m in &s.modes {
            assert!(
                ["native", "text", "structured", "auto"].contains(&m.as_str()),
                "LATCHCLAW_REAL_MODES: {m} is not native, text, structured or auto"
            );
        }
        for t in &s.tasks {
            assert!(
                t == "cache" || TASKS.iter().any(|k| k.key == t),
                "LATCHCLAW_REAL_TASKS: {t} is not one of {}, cache",
                TASKS.iter().map(|k| k.key).collect::<Vec<_>>().join(", ")
            );
        }
        s
    }
}

// ---------------------------------------------------------------------------
// The recording proxy: one request per connection, passed through as is, the
// response copied back as it arrives (streams included) and kept.

#[derive(Clone, Debug)]
struct Exchange {
    request: Value,
    status: u16,
    /// The response body as JSON; a server-sent event stream is assembled
    /// into the same shape as a non-streamed reply.
    response: Value,
    ms: u128,
}

struct Proxy {
    port: u16,
    log: Arc<Mutex<Vec<Exchange>>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (l, up) = (l.clone(), upstream.clone());
                std::thread::spawn(move || {
                    if let Some(x) = relay(client, &up) {
                        l.lock().unwrap().push(x);
                    }
                });
            }
        });
        Proxy { port, log }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    fn take(&self) -> Vec<Exchange> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Reads one HTTP message head, then its body by Content-Length (requests)
/// or until `done` says it is complete or the peer closes (responses).
fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 16384];
    loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            return Some(i + 4);
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn relay(mut client: TcpStream, upstream: &str) -> Option<Exchange> {
    let started = Instant::now();
    let mut req = Vec::new();
    let head_end = read_head(&mut client, &mut req)?;
    let head = String::from_utf8_lossy(&req[..head_end]).into_owned();
    let len: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut chunk = [0u8; 16384];
    while req.len() < head_end + len {
        match client.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => req.extend_from_slice(&chunk[..n]),
        }
    }
    // One request per connection: the client reconnects for the next one.
    let mut out = String::new();
    for (i, line) in head.trim_end().split("\r\n").enumerate() {
        let lower = line.to_ascii_lowercase();
        if i > 0 && (lower.starts_with("connection:") || lower.starts_with("host:")) {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("Host: {upstream}\r\nConnection: close\r\n\r\n"));
    let mut up = TcpStream::connect(upstream).ok()?;
    up.set_nodelay(true).ok();
    client.set_nodelay(true).ok();
    let mut sent = out.into_bytes();
    sent.extend_from_slice(&req[head_end..]);
    up.write_all(&sent).ok()?;

    let mut resp = Vec::new();
    loop {
        match up.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                resp.extend_from_slice(&chunk[..n]);
                if client.write_all(&chunk[..n]).is_err() {
                    break;
                }
                if response_complete(&resp) {
                    break;
                }
            }
        }
    }
    let _ = client.flush();
    let _ = client.shutdown(std::net::Shutdown::Write);
    let rhead_end = find(&resp, b"\r\n\r\n").map_or(resp.len(), |i| i + 4);
    let rhead = String::from_utf8_lossy(&resp[..rhead_end]).into_owned();
    let status = rhead
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = resp[rhead_end..].to_vec();
    if header(&rhead, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        body = dechunk(&body).0;
    }
    let text = String::from_utf8_lossy(&body).into_owned();
    let response = if header(&rhead, "content-type").is_some_and(|v| v.contains("event-stream")) {
        assemble_stream(&text)
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Some(Exchange {
        request: serde_json::from_slice(&req[head_end..]).unwrap_or(Value::Null),
        status,
        response,
        ms: started.elapsed().as_millis(),
    })
}

fn response_complete(resp: &[u8]) -> bool {
    let Some(i) = find(resp, b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&resp[..i + 4]);
    let body = &resp[i + 4..];
    if let Some(n) = header(&head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        return body.len() >= n;
    }
    if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        return dechunk(body).1;
    }
    false
}

/// The chunked body decoded, and whether its last (empty) chunk arrived.
fn dechunk(mut b: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(i) = find(b, b"\r\n") else {
            return (out, false);
        };
        let size_text = String::from_utf8_lossy(&b[..i]);
        let Ok(n) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            return (out, false);
        };
        if n == 0 {
            return (out, true);
        }
        if b.len() < i + 2 + n {
            out.extend_from_slice(&b[i + 2..]);
            return (out, false);
        }
        out.extend_from_slice(&b[i + 2..i + 2 + n]);
        b = &b[(i + 4 + n).min(b.len())..];
    }
}

/// Server-sent chunks folded into one chat completion (content and
/// tool-call deltas joined by index; usage and timings from any chunk).
fn assemble_stream(text: &str) -> Value {
    let mut content = String::new();
    let mut calls: Vec<Value> = Vec::new();
    let mut out = json!({});
    let mut finish = Value::Null;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
            continue;
        };
        for k in ["usage", "timings", "model"] {
            if !v[k].is_null() {
                out[k] = v[k].clone();
            }
        }
        let c = &v["choices"][0];
        if !c["finish_reason"].is_null() {
            finish = c["finish_reason"].clone();
        }
        if let Some(s) = c["delta"]["content"].as_str() {
            content.push_str(s);
        }
        for d in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = d["index"].as_u64().unwrap_or(0) as usize;
            while calls.len() <= i {
                calls.push(json!({"function": {"name": "", "arguments": ""}}));
            }
            for k in ["name", "arguments"] {
                if let Some(s) = d["function"][k].as_str() {
                    let prev = calls[i]["function"][k].as_str().unwrap_or("").to_string();
                    calls[i]["function"][k] = json!(prev + s);
                }
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    out["choices"] = json!([{"message": message, "finish_reason": finish}]);
    out["streamed"] = json!(true);
    out
}

// ---------------------------------------------------------------------------
// One run of the binary and what came of it.

#[derive(Default, Clone)]
struct Row {
    mode: String,
    task: String,
    exit: i32,
    answer: String,
    correct: bool,
    why: String,
    secs: f64,
    rounds: u64,
    requests: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    cached_tokens: u64,
    flags: Vec<String>,
}

struct Outcome {
    exit: i32,
    json: Value,
    stderr: String,
    secs: f64,
    exchanges: Vec<Exchange>,
}

/// A fresh home at the same path for every task: the workspace path is in
/// the system prompt, so a fixed one lets the server reuse its cached
/// prefix from one task to the next (as it would for a user's own runs).
fn fresh_env() -> Env {
    let root = std::env::temp_dir().join("latchclaw-real-model");
    let _ = std::fs::remove_dir_all(&root);
    let home = root.join("home");
    let env = Env {
        state: home.join(".latchclaw"),
        ws: home.join("ws"),
        home,
        root,
    };
    std::fs::create_dir_all(&env.state).unwrap();
    seed_workspace(&env.ws);
    env
}

fn seed_workspace(ws: &Path) {
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("README.md"),
        "# scratch\n\nA few files to try latchclaw on.\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("src/tally.py"),
        "import sys\nfrom collections import Counter\n\n\n\
         def top_words(path, n=10):\n    \
         with open(path) as f:\n        \
         words = f.read().lower().split()\n    \
         return Counter(words).most_common(n)\n\n\n\
         if __name__ == \"__main__\":\n    \
         for word, count in top_words(sys.argv[1]):\n        \
         print(f\"{count:6} {word}\")\n",
    )
    .unwrap();
    let notes: String = (1..=NOTES_LINES)
        .map(|i| format!("note {i}: buy item number {}\n", i * 7))
        .collect();
    std::fs::write(ws.join("notes.txt"), notes).unwrap();
    std::fs::write(ws.join("data.csv"), "word,count\nthe,12\nclaw,3\n").unwrap();
    // The name says nothing of what each function does.
    std::fs::write(
        ws.join("src/calc.py"),
        "def plus(a, b):\n    return a + b\n\n\ndef minus(a, b):\n    return a - b\n\n\n\
         def times(a, b):\n    return a * b\n",
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(
        ws.join("docs/birds.md"),
        "# Birds seen\n\nA heron, two gulls and one pelican by the pier.\n",
    )
    .unwrap();
    std::fs::write(ws.join("docs/trees.md"), "# Trees\n\nOak, birch, rowan.\n").unwrap();
    common::git(ws, &["init", "-q"]);
    common::git(ws, &["add", "."]);
    for (subject, file) in [
        ("Start the scratch space", "README.md"),
        (GIT_SUBJECT, "src/tally.py"),
    ] {
        std::fs::write(ws.join(".touch"), subject).unwrap();
        common::git(ws, &["add", file, ".touch"]);
        common::git(
            ws,
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=b@c",
                "commit",
                "-qm",
                subject,
            ],
        );
    }
}

const GIT_SUBJECT: &str = "Add the word counter";
const PIPED_LINES: usize = 5;

fn configure(env: &Env, s: &Settings, base_url: &str, mode: &str, autonomy: &str) {
    env.config(&format!(
        "default_provider = \"real\"\n\
         [security]\nautonomy = \"{autonomy}\"\n\
         [channels.cli]\n\
         tools_allow = [\"file_read\", \"file_list\", \"file_write\", \"time\", \"memory_search\", \"shell\", \"grep\", \"git\"]\n\
         [providers.models.real]\n\
         kind = \"openai-compatible\"\n\
         base_url = {}\n\
         model = {}\n\
         temperature = 0.0\n\
         max_tokens = 512\n\
         tool_mode = \"{mode}\"\n\
         timeout_secs = 600\n",
        lit(Path::new(base_url)),
        lit(Path::new(&s.model_name)),
    ));
}

fn run_agent(env: &Env, proxy: &Proxy, s: &Settings, args: &[&str]) -> Outcome {
    run_agent_with(env, proxy, s, args, None)
}

/// `run_agent`, with `stdin` piped in when given.
fn run_agent_with(
    env: &Env,
    proxy: &Proxy,
    s: &Settings,
    args: &[&str],
    stdin: Option<&str>,
) -> Outcome {
    proxy.take();
    let timeout = s.run_timeout.to_string();
    let mut all = vec!["agent", "--json", "--timeout", &timeout];
    all.extend_from_slice(args);
    let t = Instant::now();
    let r = match stdin {
        Some(input) => env.run_with_stdin(&all, input),
        None => env.run(&all),
    };
    let secs = t.elapsed().as_secs_f64();
    // The proxy logs a request once its response is sent; give the last
    // relay thread a moment to push it.
    std::thread::sleep(Duration::from_millis(50));
    Outcome {
        exit: r.code,
        json: serde_json::from_str(&r.stdout).unwrap_or(Value::Null),
        stderr: r.stderr,
        secs,
        exchanges: proxy.take(),
    }
}

/// Text that reads like tool-call syntax, where only an answer belongs.
fn tool_syntax(answer: &str) -> Option<&'static str> {
    let lower = answer.to_lowercase();
    [
        "<tool_call>",
        "\"name\":",
        "```json",
        "<tool_result",
        "<tool_response>",
    ]
    .into_iter()
    .find(|m| lower.contains(m))
}

fn row_of(mode: &str, task: &str, o: &Outcome) -> Row {
    let answer = o.json["answer"].as_str().unwrap_or("").to_string();
    let usage = &o.json["usage"];
    let mut flags = Vec::new();
    if let Some(m) = tool_syntax(&answer) {
        flags.push(format!("tool-call syntax in answer ({m})"));
    }
    if o.exit == 6 {
        flags.push("exit 6 (rounds or time ran out)".into());
    }
    if o.json.is_null() {
        flags.push("no --json output".into());
    }
    Row {
        mode: mode.into(),
        task: task.into(),
        exit: o.exit,
        answer,
        secs: o.secs,
        rounds: o.json["rounds"].as_u64().unwrap_or(0),
        requests: o.exchanges.len(),
        prompt_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        cached_tokens: usage["cached_tokens"].as_u64().unwrap_or(0),
        flags,
        ..Row::default()
    }
}

fn has_word(hay: &str, word: &str) -> bool {
    hay.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w == word)
}

/// The date and the hour as the `time` tool reports them right now.
fn time_tool(env: &Env) -> (String, String) {
    let (_, v) = env.json(&["tool", "run", "time", "--json", "{}"]);
    let out = v["output"].as_str().unwrap_or("").to_string();
    // "Local time: 2026-11-22T20:41:17.284Z (time zone UTC)…"
    let local = out
        .split("Local time:")
        .nth(1)
        .unwrap_or("")
        .trim()
        .to_string();
    (
        local.get(..10).unwrap_or("").to_string(),
        local.get(11..13).unwrap_or("").to_string(),
    )
}

fn judge(task: &str, row: &mut Row, env: &Env, clock: &[(String, String)]) {
    let a = row.answer.to_lowercase();
    let (ok, why) = match task {
        "files" => {
            let names = ["readme.md", "notes.txt", "data.csv", "src", "docs"];
            let named = names
                .iter()
                .filter(|n| a.contains(*n) || (**n == "src" && a.contains("tally.py")))
                .count();
            (named >= 3, format!("{named} of 5 entries named"))
        }
        "add" => {
            let ok = has_word(&a, "plus") && !has_word(&a, "minus") && !has_word(&a, "times");
            (ok, format!("names plus alone: {}", yes(ok)))
        }
        "count" => {
            let ok = has_word(&a, "2") || has_word(&a, "two");
            (ok, format!("2 files: {}", yes(ok)))
        }
        "first" => {
            let ok = a.contains("# scratch");
            (ok, format!("\"# scratch\": {}", yes(ok)))
        }
        "year" => {
            let year = clock
                .iter()
                .find_map(|(date, _)| date.get(..4))
                .unwrap_or("");
            let ok = !year.is_empty() && has_word(&a, year);
            (ok, format!("the time tool's year {year}: {}", yes(ok)))
        }
        "exists" => {
            let no = has_word(&a, "no") || has_word(&a, "not") || a.contains("n't");
            let ok = no && !has_word(&a, "yes");
            (ok, format!("says no: {}", yes(ok)))
        }
        "grep" => {
            let ok = a.contains("birds.md");
            (ok, format!("docs/birds.md named: {}", yes(ok)))
        }
        "git" => {
            let ok = a.contains(&GIT_SUBJECT.to_lowercase());
            (ok, format!("the subject quoted: {}", yes(ok)))
        }
        "stdin" => {
            let n = PIPED_LINES.to_string();
            let ok = has_word(&a, &n) || has_word(&a, "five");
            (ok, format!("{n} lines: {}", yes(ok)))
        }
        "status" => {
            let got = std::fs::read_to_string(env.ws.join("status.txt")).ok();
            let ok = got.as_deref().map(str::trim) == Some("DONE");
            // Exit 0 and no file: an effect claimed that never happened.
            if got.is_none() && row.exit == 0 {
                row.flags.push("exit 0 without the write".into());
            }
            (
                ok,
                match got {
                    None => "status.txt missing".into(),
                    Some(t) => format!("status.txt = {:?}", one_line(&t, 60)),
                },
            )
        }
        "explain" => {
            let ok = a.contains("word")
                && ["count", "frequen", "common", "occur", "how often"]
                    .iter()
                    .any(|k| a.contains(k));
            (ok, format!("says it counts words: {}", yes(ok)))
        }
        "lines" => {
            let ok = has_word(&a, &NOTES_LINES.to_string());
            (ok, format!("{NOTES_LINES} in the answer: {}", yes(ok)))
        }
        "time" => {
            let ok = clock.iter().any(|(date, hour)| {
                (!date.is_empty() && a.contains(date.as_str()))
                    || (!hour.is_empty() && a.contains(&format!("{hour}:")))
                    || hour.parse::<u32>().is_ok_and(|h| {
                        let h12 = if h % 12 == 0 { 12 } else { h % 12 };
                        let ampm = if h < 12 { "am" } else { "pm" };
                        a.contains(&format!("{h12}:"))
                            && (a.contains(ampm) || a.contains(&ampm.replace('m', ".m.")))
                    })
            });
            (
                ok,
                format!("the time tool's date or hour in the answer: {}", yes(ok)),
            )
        }
        "write" => {
            let got = std::fs::read_to_string(env.ws.join("greeting.txt")).ok();
            let ok = got.as_deref().map(str::trim) == Some(GREETING);
            if got.is_none() && row.exit == 0 {
                row.flags.push("exit 0 without the write".into());
            }
            (
                ok,
                match got {
                    None => "greeting.txt missing".into(),
                    Some(t) => format!("greeting.txt = {:?}", one_line(&t, 60)),
                },
            )
        }
        _ => (false, String::new()),
    };
    row.correct = ok && row.exit == 0 && row.flags.is_empty();
    row.why = if row.exit != 0 {
        format!("exit {}; {why}", row.exit)
    } else {
        why
    };
}

fn yes(ok: bool) -> &'static str {
    if ok { "yes" } else { "no" }
}

fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

/// What the model wrote in each round, with the server's figures.
fn transcript(title: &str, o: &Outcome) -> String {
    let mut t = format!("### {title}\n\nexit {} in {:.1} s", o.exit, o.secs);
    if !o.json.is_null() {
        let _ = write!(
            t,
            ", rounds {}, exit_reason {}",
            o.json["rounds"], o.json["exit_reason"]
        );
    }
    t.push_str("\n\n");
    for (i, x) in o.exchanges.iter().enumerate() {
        let r = &x.response;
        let m = &r["choices"][0]["message"];
        let _ = writeln!(
            t,
            "- request {}: HTTP {}, {} messages, prompt {} tok (cached {}), completion {} tok, \
             {} ms (prompt {} ms, generation {} ms), finish {}",
            i + 1,
            x.status,
            x.request["messages"].as_array().map_or(0, Vec::len),
            r["usage"]["prompt_tokens"],
            cached_of(r),
            r["usage"]["completion_tokens"],
            x.ms,
            r["timings"]["prompt_ms"].as_f64().unwrap_or(0.0).round(),
            r["timings"]["predicted_ms"].as_f64().unwrap_or(0.0).round(),
            r["choices"][0]["finish_reason"],
        );
        // The server's own figures leave out time spent queued behind
        // another client's request (one slot): a gap here means the run
        // shared the server and its figures and the cache suffered.
        let busy = r["timings"]["prompt_ms"].as_f64().unwrap_or(0.0)
            + r["timings"]["predicted_ms"].as_f64().unwrap_or(0.0);
        if busy > 0.0 && x.ms as f64 > busy + 3000.0 {
            let _ = writeln!(
                t,
                "  note: {:.0} s more than the server worked on it: queued behind another client?",
                (x.ms as f64 - busy) / 1000.0
            );
        }
        if let Some(c) = m["content"].as_str().filter(|c| !c.is_empty()) {
            let _ = writeln!(t, "  content: {}", quote(c, 600));
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            for c in calls {
                let _ = writeln!(
                    t,
                    "  tool_call: {} {}",
                    c["function"]["name"],
                    one_line(&c["function"]["arguments"].to_string(), 300)
                );
            }
        }
        if x.status != 200 {
            let _ = writeln!(t, "  error: {}", quote(&r.to_string(), 400));
        }
    }
    if !o.json.is_null() {
        for c in o.json["tool_calls"].as_array().into_iter().flatten() {
            let _ = writeln!(
                t,
                "- latchclaw ran {} {} → {} ({})",
                c["tool"],
                one_line(&c["arguments"].to_string(), 200),
                c["status"],
                one_line(c["reason"].as_str().unwrap_or(""), 160)
            );
        }
        let _ = writeln!(
            t,
            "- answer: {}",
            quote(o.json["answer"].as_str().unwrap_or(""), 600)
        );
    }
    // Warnings and errors latchclaw printed (denials, retries, the reason a
    // run stopped); info lines are left out.
    for line in o
        .stderr
        .lines()
        .filter(|l| !l.contains(" info:") && !l.trim().is_empty())
        .take(8)
    {
        let _ = writeln!(t, "- stderr: {}", one_line(line, 300));
    }
    t.push('\n');
    t
}

fn cached_of(r: &Value) -> u64 {
    r["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| r["timings"]["cache_n"].as_u64())
        .unwrap_or(0)
}

/// Newlines and fences as they were, on one line (a JSON string).
fn quote(s: &str, max: usize) -> String {
    let q = serde_json::to_string(s).unwrap();
    if q.chars().count() > max {
        format!("{}…", q.chars().take(max).collect::<String>())
    } else {
        q
    }
}

fn save_exchanges(s: &Settings, name: &str, xs: &[Exchange]) {
    let mut text = String::new();
    for x in xs {
        text.push_str(
            &json!({"ms": x.ms, "status": x.status, "request": x.request, "response": x.response})
                .to_string(),
        );
        text.push('\n');
    }
    std::fs::write(s.out.join(format!("exchanges-{name}.jsonl")), text).unwrap();
}

// ---------------------------------------------------------------------------
// The tasks.

fn run_task(s: &Settings, proxy: &Proxy, mode: &str, task: &Task, log: &mut String) -> Vec<Row> {
    let env = fresh_env();
    configure(&env, s, &proxy.base_url(), mode, task.autonomy);
    let before = time_tool(&env);
    let o = run_agent_with(&env, proxy, s, &["-m", task.message], task.stdin);
    let after = time_tool(&env);
    let name = format!("{mode}-{}", task.key);
    let mut xs = o.exchanges.clone();
    let _ = write!(log, "{}", transcript(&format!("{mode} / {}", task.key), &o));
    let mut row = row_of(mode, task.key, &o);
    if task.key != "write" {
        judge(task.key, &mut row, &env, &[before, after]);
        save_exchanges(s, &name, &xs);
        return vec![row];
    }

    // The supervised write: with no terminal the call waits as a pending
    // approval (exit 4); the operator approves it and resumes.
    let mut first = row;
    first.task = "write (pending)".into();
    let (_, pending) = env.json(&["approvals", "list", "--json"]);
    let pending = pending.as_array().cloned().unwrap_or_default();
    let expected = o.exit == 4 && pending.len() == 1 && pending[0]["tool"] == "file_write";
    first.correct = expected && first.flags.is_empty();
    first.why = match pending.first() {
        None => format!("exit {}; no pending approval", o.exit),
        Some(p) => format!(
            "exit {}; pending {} {}",
            o.exit,
            p["tool"],
            one_line(&p["arguments"].to_string(), 80)
        ),
    };
    let mut rows = vec![first];
    let Some(p) = pending.iter().find(|p| p["tool"] == "file_write") else {
        save_exchanges(s, &name, &xs);
        return rows;
    };
    let id = p["id"].as_str().unwrap();
    let conv = p["conversation_id"].as_str().unwrap();
    let approved = env.run(&["approve", id, "--yes"]);
    assert_eq!(approved.code, 0, "approve: {approved:?}");
    let o2 = run_agent(&env, proxy, s, &["--resume", conv]);
    let _ = write!(
        log,
        "{}",
        transcript(&format!("{mode} / write, resumed"), &o2)
    );
    let mut second = row_of(mode, "write (resumed)", &o2);
    judge("write", &mut second, &env, &[]);
    xs.extend(o2.exchanges.iter().cloned());
    save_exchanges(s, &name, &xs);
    rows.push(second);
    rows
}

/// Two turns of one conversation: how much of the second turn's first
/// prompt the server found in its cache, against the size of the system
/// prompt and tools.
fn cache_check(s: &Settings, proxy: &Proxy, mode: &str, log: &mut String) -> (Row, String, bool) {
    let env = fresh_env();
    configure(&env, s, &proxy.base_url(), mode, "full");
    let o1 = run_agent(
        &env,
        proxy,
        s,
        &[
            "-m",
            "Hello, I am Ada. Say hello back in one short sentence.",
        ],
    );
    let _ = write!(
        log,
        "{}",
        transcript(&format!("{mode} / cache, turn 1"), &o1)
    );
    let conv = o1.json["conversation_id"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let o2 = run_agent(
        &env,
        proxy,
        s,
        &["--conversation", &conv, "-m", "What is my name?"],
    );
    let _ = write!(
        log,
        "{}",
        transcript(&format!("{mode} / cache, turn 2"), &o2)
    );
    let mut xs = o1.exchanges.clone();
    xs.extend(o2.exchanges.iter().cloned());
    save_exchanges(s, &format!("{mode}-cache"), &xs);

    let fixed = o1
        .exchanges
        .first()
        .and_then(|x| system_and_tools_tokens(s, &x.request));
    let cached = o2.exchanges.first().map(|x| cached_of(&x.response));
    let mut row = row_of(mode, "cache (turn 2)", &o2);
    let (ok, note) = match (fixed, cached) {
        (Some(f), Some(c)) if f > 0 => {
            let pct = 100.0 * c as f64 / f as f64;
            (
                pct >= 90.0,
                format!("turn 2 cached {c} tok = {pct:.0}% of system prompt + tools ({f} tok)"),
            )
        }
        _ => (
            false,
            format!("could not measure (system+tools {fixed:?}, cached {cached:?})"),
        ),
    };
    row.correct = ok && o1.exit == 0 && row.exit == 0;
    row.why = format!("turn 1 exit {}; {note}", o1.exit);
    (row, note, ok)
}

/// Tokens of the system prompt and tools as the server renders them: the
/// request's system message and tools through llama-server's own template
/// (`/apply-template`), then `/tokenize`.
fn system_and_tools_tokens(s: &Settings, request: &Value) -> Option<u64> {
    let root = s.base_url.trim_end_matches('/').trim_end_matches("/v1");
    let mut body = json!({"messages": [request["messages"][0].clone()]});
    if !request["tools"].is_null() {
        body["tools"] = request["tools"].clone();
    }
    let agent = ureq::Agent::new_with_defaults();
    let post = |path: &str, body: Value| -> Option<Value> {
        let mut r = agent
            .post(format!("{root}{path}"))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .ok()?;
        serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()
    };
    let prompt = post("/apply-template", body)?;
    let tokens = post("/tokenize", json!({"content": prompt["prompt"]}))?;
    tokens["tokens"].as_array().map(|t| t.len() as u64)
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| mode | task | exit | correct | s | rounds | requests | prompt tok | completion tok | cached tok | notes | answer (first 200 chars) |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let mut notes = r.why.clone();
        for f in &r.flags {
            notes.push_str("; **");
            notes.push_str(f);
            notes.push_str("**");
        }
        let answer: String = r.answer.chars().take(200).collect();
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} |",
            r.mode,
            r.task,
            r.exit,
            yes(r.correct),
            r.secs,
            r.rounds,
            r.requests,
            r.prompt_tokens,
            r.completion_tokens,
            r.cached_tokens,
            notes.replace('|', "\\|"),
            one_line(&answer, 200)
                .replace('|', "\\|")
                .replace('`', "\\`"),
        );
    }
    t
}

fn commit() -> String {
    std::process::Command::new("git")
        .args(["log", "-1", "--format=%h %s"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a llama-server: make test-real"]
fn real_model_tasks() {
    let s = Settings::from_env();
    std::fs::create_dir_all(&s.out).unwrap();
    let proxy = Proxy::start(&s.base_url);
    let mut rows = Vec::new();
    let mut log = String::new();
    let mut verdicts = Vec::new();
    let mut measured = Vec::new();
    // For the summary, per mode: each task run and whether it ended right,
    // and the cache check's verdict when it ran.
    let mut summary: Vec<Ran> = Vec::new();
    for mode in &s.modes {
        let mut mode_rows = Vec::new();
        // A task counts once, by its last run (the write task by its resumed run).
        let mut outcomes = Vec::new();
        let mut ran = Vec::new();
        let mut cache = None;
        for task in TASKS.iter().filter(|t| s.tasks.iter().any(|k| k == t.key)) {
            eprintln!("[real-model] {mode} / {} …", task.key);
            let r = run_task(&s, &proxy, mode, task, &mut log);
            for row in &r {
                eprintln!(
                    "[real-model]   {} exit {} {} in {:.1} s: {}",
                    row.task,
                    row.exit,
                    if row.correct { "correct" } else { "WRONG" },
                    row.secs,
                    one_line(&row.answer, 120)
                );
            }
            outcomes.push(r.last().is_some_and(|row| row.correct));
            // A task's time is all its runs' (the write's pending and resumed).
            let secs: f64 = r.iter().map(|row| row.secs).sum();
            measured.push((mode.clone(), r.last().is_some_and(|row| row.correct), secs));
            ran.push((task.key, r.last().is_some_and(|row| row.correct)));
            mode_rows.extend(r);
        }
        if s.tasks.iter().any(|k| k == "cache") {
            eprintln!("[real-model] {mode} / cache …");
            let (row, note, ok) = cache_check(&s, &proxy, mode, &mut log);
            eprintln!("[real-model]   {note}");
            cache = Some(ok);
            verdicts.push((format!("{mode}: prompt cache ≥ 90 %"), ok, note));
            mode_rows.push(row);
        }
        let correct = outcomes.iter().filter(|ok| **ok).count();
        let bad: Vec<String> = mode_rows
            .iter()
            .filter(|r| !r.flags.is_empty())
            .map(|r| format!("{}: {}", r.task, r.flags.join(", ")))
            .collect();
        // No run may answer with tool-call text, run out of rounds or end
        // with exit 0 on a write that did not happen; on the 1.5B model
        // structured mode must get 80 % of the tasks right (issue 24),
        // the others are reported beside it.
        verdicts.push((
            format!("{mode}: no tool-call text as an answer, exit 6 or claimed write"),
            bad.is_empty(),
            if bad.is_empty() {
                format!("{correct} of {} correct", outcomes.len())
            } else {
                bad.join("; ")
            },
        ));
        if s.model != "0.5b" && mode == "structured" {
            let need = (outcomes.len() * 4).div_ceil(5);
            verdicts.push((
                format!(
                    "{mode}: at least {need} of {} tasks correct",
                    outcomes.len()
                ),
                correct >= need,
                format!("{correct} correct"),
            ));
        }
        rows.extend(mode_rows);
        summary.push(Ran {
            mode: mode.clone(),
            tasks: ran,
            cache,
        });
    }

    let mut report = format!(
        "## {} ({}), chat template {}, commit {}\n\n",
        s.model_name,
        s.model,
        s.template,
        commit()
    );
    report.push_str(&table(&rows));
    report.push('\n');
    let measures = measured_line(&s.model_name, &s.modes, &measured);
    let _ = writeln!(report, "{measures}\n");
    for (what, ok, note) in &verdicts {
        let _ = writeln!(
            report,
            "- {} {what}: {note}",
            if *ok { "PASS" } else { "FAIL" }
        );
    }
    let summary = summary_line(&s.model_name, &summary);
    let _ = writeln!(report, "\n{summary}");
    std::fs::write(s.out.join("results.md"), &report).unwrap();
    std::fs::write(s.out.join("transcript.md"), &log).unwrap();
    println!("{log}\n{report}");
    println!(
        "results: {}\ntranscript: {}\nexchanges: {}/exchanges-*.jsonl",
        s.out.join("results.md").display(),
        s.out.join("transcript.md").display(),
        s.out.display()
    );
    println!("{measures}");
    eprintln!("[real-model] {measures}");
    // Last, on both streams, so it is the line a reader of either finds.
    println!("{summary}");
    eprintln!("[real-model] {summary}");
    let failed: Vec<&str> = verdicts
        .iter()
        .filter(|v| !v.1)
        .map(|v| v.0.as_str())
        .collect();
    assert!(failed.is_empty(), "not met: {}", failed.join("; "));
}

/// Per mode: how many tasks ended right and the median seconds a task
/// took (the cache check is not a task).
fn measured_line(model: &str, modes: &[String], measured: &[(String, bool, f64)]) -> String {
    let per_mode: Vec<String> = modes
        .iter()
        .filter_map(|mode| {
            let runs: Vec<&(String, bool, f64)> =
                measured.iter().filter(|(m, _, _)| m == mode).collect();
            if runs.is_empty() {
                return None;
            }
            let right = runs.iter().filter(|(_, ok, _)| *ok).count();
            let mut secs: Vec<f64> = runs.iter().map(|(_, _, s)| *s).collect();
            secs.sort_by(f64::total_cmp);
            let n = secs.len();
            let median = if n % 2 == 1 {
                secs[n / 2]
            } else {
                (secs[n / 2 - 1] + secs[n / 2]) / 2.0
            };
            Some(format!(
                "{mode} {right} of {n} right, median {median:.1} s per task"
            ))
        })
        .collect();
    format!("measured: {model}: {}", per_mode.join("; "))
}

/// What one mode ran, for the summary.
struct Ran {
    mode: String,
    /// Each task and whether it ended right (by its last run).
    tasks: Vec<(&'static str, bool)>,
    /// The prompt-cache check, when it ran.
    cache: Option<bool>,
}

/// One line: the model, then per mode the tasks that ran and how many
/// ended right, naming the wrong ones, and the cache check's verdict.
fn summary_line(model: &str, modes: &[Ran]) -> String {
    let (mut right, mut all) = (0, 0);
    let per_mode: Vec<String> = modes
        .iter()
        .map(|m| {
            let ok = m.tasks.iter().filter(|(_, ok)| *ok).count();
            right += ok;
            all += m.tasks.len();
            let names: Vec<&str> = m.tasks.iter().map(|(t, _)| *t).collect();
            let wrong: Vec<&str> = m
                .tasks
                .iter()
                .filter(|(_, ok)| !ok)
                .map(|(t, _)| *t)
                .collect();
            let mut line = format!(
                "{}: {ok} of {} ({})",
                m.mode,
                m.tasks.len(),
                names.join(", ")
            );
            if !wrong.is_empty() {
                let _ = write!(line, ", wrong: {}", wrong.join(", "));
            }
            if let Some(c) = m.cache {
                let _ = write!(line, ", prompt cache {}", if c { "ok" } else { "FAILED" });
            }
            line
        })
        .collect();
    format!(
        "summary: {model}: {right} of {all} tasks ended right; {}",
        per_mode.join("; ")
    )
}

// The harness's own parsing, checked without a server (these run in `make test`).

#[test]
fn the_measure_counts_right_tasks_and_takes_the_median() {
    let m = |mode: &str, ok, secs| (mode.to_string(), ok, secs);
    let measured = [
        m("text", true, 10.0),
        m("text", false, 30.0),
        m("text", true, 20.0),
        m("structured", true, 4.0),
        m("structured", true, 6.0),
    ];
    let modes = ["native".to_string(), "text".into(), "structured".into()];
    assert_eq!(
        measured_line("q", &modes, &measured),
        "measured: q: text 2 of 3 right, median 20.0 s per task; \
         structured 2 of 2 right, median 5.0 s per task"
    );
}

#[test]
fn the_summary_names_the_tasks_and_counts_the_right_ones() {
    let modes = vec![
        Ran {
            mode: "native".into(),
            tasks: vec![("files", true), ("explain", false), ("lines", true)],
            cache: Some(true),
        },
        Ran {
            mode: "text".into(),
            tasks: vec![("files", true)],
            cache: None,
        },
    ];
    assert_eq!(
        summary_line("m", &modes),
        "summary: m: 3 of 4 tasks ended right; native: 2 of 3 (files, explain, lines), \
         wrong: explain, prompt cache ok; text: 1 of 1 (files)"
    );
}

#[test]
fn dechunk_reads_whole_and_cut_bodies() {
    let whole = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n";
    assert_eq!(dechunk(whole), (b"hello world".to_vec(), true));
    let cut = b"5\r\nhello\r\n6\r\n wo";
    assert_eq!(dechunk(cut), (b"hello wo".to_vec(), false));
    assert_eq!(dechunk(b"zz\r\n"), (Vec::new(), false));
}

#[test]
fn response_complete_by_length_chunks_or_never() {
    assert!(response_complete(
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    ));
    assert!(!response_complete(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{}"
    ));
    assert!(response_complete(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    ));
    assert!(!response_complete(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"
    ));
    // Neither: read to the end of the connection.
    assert!(!response_complete(b"HTTP/1.1 200 OK\r\n\r\n{}"));
}

#[test]
fn stream_assembled_like_a_whole_reply() {
    let sse = concat!(
        ": keep-alive comment\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"lo\",\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"ti\",\"arguments\":\"{\\\"a\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"me\",\"arguments\":\"\\\":1}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":7},\"timings\":{\"cache_n\":5}}\n\n",
        "data: [DONE]\n\n",
    );
    let v = assemble_stream(sse);
    let m = &v["choices"][0]["message"];
    assert_eq!(m["content"], "Hello");
    assert_eq!(m["tool_calls"][0]["function"]["name"], "time");
    assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["prompt_tokens"], 7);
    assert_eq!(cached_of(&v), 5);
}

#[test]
fn tool_call_syntax_in_an_answer_is_flagged() {
    assert_eq!(
        tool_syntax("```json\n{\"name\": \"time\", \"arguments\": {}}\n```"),
        Some("\"name\":")
    );
    assert_eq!(tool_syntax("<TOOL_CALL>{}"), Some("<tool_call>"));
    assert_eq!(
        tool_syntax("<tool_result>\n23\n</tool_result>"),
        Some("<tool_result")
    );
    assert_eq!(tool_syntax("notes.txt has 23 lines."), None);
}

#[test]
fn judged_loosely_but_not_blindly() {
    let env = Env::new();
    let mut row = Row {
        answer: "notes.txt has 23 lines.".into(),
        ..Row::default()
    };
    judge("lines", &mut row, &env, &[]);
    assert!(row.correct, "{}", row.why);
    // 123 or 2.3 is not 23; and a right answer with a bad exit is not correct.
    for (answer, exit) in [("It has 123 lines.", 0), ("about 2.3k", 0), ("23", 4)] {
        let mut row = Row {
            answer: answer.into(),
            exit,
            ..Row::default()
        };
        judge("lines", &mut row, &env, &[]);
        assert!(!row.correct, "{answer} (exit {exit}) judged correct");
    }
    let mut row = Row {
        answer: "README.md, notes.txt and the src directory.".into(),
        ..Row::default()
    };
    judge("files", &mut row, &env, &[]);
    assert!(row.correct, "{}", row.why);
    row.answer = "README.md and notes.txt".into();
    judge("files", &mut row, &env, &[]);
    assert!(!row.correct);
    let clock = [("2026-11-22".to_string(), "21".to_string())];
    for (answer, ok) in [
        ("It is 21:05 UTC.", true),
        ("Today is 2026-11-22.", true),
        ("It is 9:05 PM.", true),
        ("It is 9:05 AM.", false),
        ("It is 14:30.", false),
    ] {
        let mut row = Row {
            answer: answer.into(),
            ..Row::default()
        };
        judge("time", &mut row, &env, &clock);
        assert_eq!(row.correct, ok, "{answer}");
    }
    let mut row = Row::default();
    judge("write", &mut row, &env, &[]);
    assert!(!row.correct, "no greeting.txt yet");
    // Exit 0 without the file: a claimed effect, flagged.
    assert_eq!(row.flags, ["exit 0 without the write"]);
    std::fs::write(env.ws.join("greeting.txt"), format!("{GREETING}\n")).unwrap();
    let mut row = Row::default();
    judge("write", &mut row, &env, &[]);
    assert!(row.correct, "{}", row.why);
    let clock = [("2026-11-22".to_string(), "21".to_string())];
    for (task, answer, ok) in [
        ("add", "The function `plus` adds two numbers.", true),
        ("add", "plus and minus", false),
        ("count", "There are 2 files in src.", true),
        ("count", "There are 12 files.", false),
        ("first", "The first line is: # scratch", true),
        ("year", "It is 2026.", true),
        ("year", "It is 2025.", false),
        ("exists", "No, it does not.", true),
        (
            "exists",
            "The function divide is not defined in src/calc.py.",
            true,
        ),
        ("exists", "Yes.", false),
        ("grep", "docs/birds.md mentions it.", true),
        ("git", "The last commit is \"Add the word counter\".", true),
        ("stdin", "The piped text has 5 lines.", true),
        ("stdin", "It has 15 lines.", false),
    ] {
        let mut row = Row {
            answer: answer.into(),
            ..Row::default()
        };
        judge(task, &mut row, &env, &clock);
        assert_eq!(row.correct, ok, "{task}: {answer}");
    }
    let mut row = Row::default();
    judge("status", &mut row, &env, &[]);
    assert!(!row.correct && !row.flags.is_empty());
    std::fs::write(env.ws.join("status.txt"), "DONE\n").unwrap();
    let mut row = Row::default();
    judge("status", &mut row, &env, &[]);
    assert!(row.correct, "{}", row.why);
}
