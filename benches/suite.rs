//! `make bench`: whole-process figures for the release binary, measured here
//! (no timing assertions anywhere in `make test`).
//!
//! Wall time is the median of repeated runs after a warm-up, from spawn to
//! exit; peak RSS is the child's `ru_maxrss` from `wait4`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_latchclaw");
const WARMUP: usize = 5;
const RUNS: usize = 41;

struct Sample {
    wall: Duration,
    max_rss_kib: i64,
}

/// Runs the binary once; returns wall time and peak RSS.
// The child is reaped by `wait4` (for its rusage), which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_once(home: &Path, args: &[&str]) -> Sample {
    run_program(BIN, home, args)
}

#[allow(clippy::zombie_processes)]
fn run_program(program: &str, home: &Path, args: &[&str]) -> Sample {
    let start = Instant::now();
    let child = Command::new(program)
        .args(args)
        .env("LATCHCLAW_HOME", home.join(".latchclaw"))
        .env("HOME", home)
        .env_remove("LATCHCLAW_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn latchclaw");
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter; wait4 reaps our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert!(pid > 0, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{program} {args:?} failed with status {status}"
    );
    Sample {
        wall,
        max_rss_kib: usage.ru_maxrss,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

struct Figure {
    ms: f64,
    rss_mib: f64,
}

fn measure(home: &Path, args: &[&str]) -> Figure {
    measure_program(BIN, home, args)
}

fn measure_program(program: &str, home: &Path, args: &[&str]) -> Figure {
    for _ in 0..WARMUP {
        run_program(program, home, args);
    }
    let samples: Vec<Sample> = (0..RUNS)
        .map(|_| run_program(program, home, args))
        .collect();
    Figure {
        ms: median(samples.iter().map(|s| s.wall.as_secs_f64() * 1e3).collect()),
        rss_mib: samples.iter().map(|s| s.max_rss_kib).max().unwrap_or(0) as f64 / 1024.0,
    }
}

/// Gate decisions per second over the hostile corpus (every case: shell
/// lexing, path resolution, estop check), in process.
fn gate_decisions_per_sec(home: &Path) -> (f64, usize) {
    use latchclaw::config::Config;
    use latchclaw::security::Gate;
    let ws = home.join("ws");
    let text = format!("workspace_dir = {:?}\n", ws.display().to_string());
    let cfg = Config::from_text(&text, &home.join("gate.toml"), home.join(".latchclaw")).unwrap();
    let tools: Vec<String> = latchclaw::config::TOOL_NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    let gate = Gate::new(&cfg, &tools);
    let corpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_corpus.jsonl"),
    )
    .unwrap();
    let cases: Vec<(String, serde_json::Value)> = corpus
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["tool"].as_str().unwrap().to_string(), v["args"].clone())
        })
        .collect();
    let mut n = 0usize;
    for (t, a) in &cases {
        std::hint::black_box(gate.decide(t, a));
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        for (t, a) in &cases {
            std::hint::black_box(gate.decide(t, a));
            n += 1;
        }
    }
    (n as f64 / start.elapsed().as_secs_f64(), cases.len())
}

/// A loopback server that answers every request with one fixed chat
/// completion and records how long it spent on each (read to written).
fn fake_openai() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<f64>>>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let times = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let t2 = times.clone();
    std::thread::spawn(move || {
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1}}"#;
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let start = Instant::now();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 16384];
            while let Ok(n) = s.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes());
            t2.lock().unwrap().push(start.elapsed().as_secs_f64() * 1e3);
        }
    });
    (port, times)
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores")
}

fn row(figure: &str, value: String, budget: &str, ok: bool) {
    println!(
        "| {figure:<44} | {value:>12} | {budget:>10} | {:<4} |",
        if ok { "ok" } else { "MISS" }
    );
}

fn main() {
    // `cargo bench` passes flags such as `--bench`; none are needed here.
    let home: PathBuf =
        std::env::temp_dir().join(format!("latchclaw-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(home.join("ws")).unwrap();
    for i in 0..20 {
        std::fs::write(home.join("ws").join(format!("file-{i}.txt")), "x").unwrap();
    }
    let ws = home.join("ws");
    run_once(&home, &["init", "--workspace", ws.to_str().unwrap()]);

    let size = std::fs::metadata(BIN).map(|m| m.len()).unwrap_or(0) as f64 / 1_048_576.0;
    let baseline = measure_program("/bin/true", &home, &[]);
    let version = measure(&home, &["--version"]);
    let text = measure(&home, &["agent", "-m", "hello there"]);
    let one_tool = measure(&home, &["agent", "-m", "list the files"]);
    let (gate_rate, gate_cases) = gate_decisions_per_sec(&home);

    let (port, server_times) = fake_openai();
    let cloud_home = home.join("cloud");
    std::fs::create_dir_all(cloud_home.join(".latchclaw")).unwrap();
    std::fs::write(
        cloud_home.join(".latchclaw/config.toml"),
        format!(
            "workspace_dir = {:?}\ndefault_provider = \"cloud\"\n[providers.models.cloud]\n\
             kind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n",
            ws.display().to_string()
        ),
    )
    .unwrap();
    let cloud = measure(&cloud_home, &["agent", "-m", "ping"]);
    let server_ms = median(server_times.lock().unwrap().clone());
    let over_server = cloud.ms - server_ms;

    println!("latchclaw {} — {}", env!("CARGO_PKG_VERSION"), machine());
    println!("median of {RUNS} runs after {WARMUP} warm-up runs; peak RSS is the largest seen\n");
    println!(
        "| {:<44} | {:>12} | {:>10} | {:<4} |",
        "figure", "value", "budget", ""
    );
    println!(
        "|{}|{}|{}|{}|",
        "-".repeat(46),
        "-".repeat(14),
        "-".repeat(12),
        "-".repeat(6)
    );
    row(
        "stripped release binary",
        format!("{size:.2} MiB"),
        "3.5 MiB",
        size <= 3.5,
    );
    row(
        "spawn baseline: /bin/true, median",
        format!("{:.2} ms", baseline.ms),
        "-",
        true,
    );
    row(
        "latchclaw --version, median",
        format!("{:.2} ms", version.ms),
        "-",
        true,
    );
    row(
        "agent -m, mock, text only: median",
        format!("{:.2} ms", text.ms),
        "10 ms",
        text.ms <= 10.0,
    );
    row(
        "agent -m, mock, text only: peak RSS",
        format!("{:.2} MiB", text.rss_mib),
        "8 MiB",
        text.rss_mib <= 8.0,
    );
    row(
        "agent -m, mock, 1 tool round: median",
        format!("{:.2} ms", one_tool.ms),
        "10 ms",
        one_tool.ms <= 10.0,
    );
    row(
        "agent -m, mock, 1 tool round: peak RSS",
        format!("{:.2} MiB", one_tool.rss_mib),
        "8 MiB",
        one_tool.rss_mib <= 8.0,
    );
    row(
        "agent -m, fake OpenAI server, text: median",
        format!("{:.2} ms", cloud.ms),
        "-",
        true,
    );
    row(
        "  of which over the server's own time",
        format!("{over_server:.2} ms"),
        "3 ms",
        over_server <= 3.0,
    );
    row(
        "  of which over the mock's text-only turn",
        format!("{:.2} ms", cloud.ms - text.ms),
        "-",
        true,
    );
    row(
        "agent -m, fake OpenAI server, text: peak RSS",
        format!("{:.2} MiB", cloud.rss_mib),
        "6 MiB",
        cloud.rss_mib <= 6.0,
    );
    row(
        &format!("gate decisions/s ({gate_cases}-case mixed corpus)"),
        format!("{gate_rate:.0}"),
        "50000",
        gate_rate >= 50_000.0,
    );
    let _ = std::fs::remove_dir_all(&home);
}
