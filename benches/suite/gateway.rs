//! `latchclaw gateway` under load: 32 clients on loopback, a `/health`
//! phase and a mock `/chat` phase (one `time` call a turn, so every turn
//! writes a receipt), per-request latencies, errors, the gateway's RSS from
//! /proc, and afterwards the receipts, `receipt verify` and `/metrics`.

use super::http::Client;
use super::measure::percentile;
use super::{BIN, Report, setup_home, ws_line};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const HEALTH_EACH: usize = 320;
const CHATS_EACH: usize = 32;
/// The warm-up before the memory baseline: a soak
/// (`LATCHCLAW_BENCH_GATEWAY_SCALE=20`, 20k turns) showed the heap growing
/// over the first 1,000–2,000 turns (allocator arenas and SQLite's caches
/// filling to what 8 concurrent turns on a growing database need) and
/// level after that; /health alone moves nothing.
const WARMUP_HEALTH_EACH: usize = 32;
const WARMUP_CHATS_EACH: usize = 32;
/// A `time` call has no effect, so it writes no `started` receipt: one
/// receipt a turn.
const RECEIPTS_PER_CHAT: usize = 1;
/// `fixtures/bench_rounds.toml`: one `time` call, then the answer.
const MESSAGE: &str = "what is the time?";
/// Allowed RSS growth after warm-up; see BENCHMARKS.md "Gateway".
const DRIFT_BUDGET: f64 = 10.0;

/// The gateway process, killed if the suite stops before SIGTERM did.
struct Server {
    child: Child,
    addr: String,
}

impl Server {
    fn start(home: &Path) -> Server {
        let mut child = Command::new(BIN)
            .args(["gateway", "--bind", "127.0.0.1:0"])
            .env("LATCHCLAW_HOME", home.join(".latchclaw"))
            .env("HOME", home)
            .env_remove("LATCHCLAW_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(home.join("gateway.stderr")).unwrap())
            .spawn()
            .expect("start latchclaw gateway");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("no `listening on` line from the gateway: {line:?}"))
            .to_string();
        Server { child, addr }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM; how the gateway ended: `Ok(seconds to exit)` when it
    /// stopped as it should (it says so, and ends by the signal it got, as
    /// an interrupted `latchclaw` run does), else what happened.
    fn stop(mut self, home: &Path) -> Result<f64, String> {
        use std::os::unix::process::ExitStatusExt;
        let t0 = Instant::now();
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(status)) = self.child.try_wait() {
                let said = std::fs::read_to_string(home.join("gateway.stderr")).unwrap_or_default();
                let by_signal = status.success() || status.signal() == Some(libc::SIGTERM);
                return if by_signal && said.contains("gateway stopped") {
                    Ok(t0.elapsed().as_secs_f64())
                } else {
                    Err(format!("{status}: {said}"))
                };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("still running 10 s after SIGTERM".into())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`, `RssAnon`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        })
        .unwrap_or(0)
}

/// VmRSS and its anonymous part (the heap: where a leak would show; the
/// rest is the binary's and libraries' pages and SQLite's shared memory).
#[derive(Clone, Copy)]
struct Sample {
    rss: u64,
    anon: u64,
}

fn sample(pid: u32) -> Sample {
    Sample {
        rss: status_kib(pid, "VmRSS"),
        anon: status_kib(pid, "RssAnon"),
    }
}

/// The gateway's memory once a second on a thread of its own, and on demand.
struct Rss {
    pid: u32,
    samples: Arc<Mutex<Vec<Sample>>>,
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Rss {
    fn watch(pid: u32) -> Rss {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let (s, d) = (Arc::clone(&samples), Arc::clone(&done));
        let thread = std::thread::spawn(move || {
            loop {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(50));
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                }
                s.lock().unwrap().push(sample(pid));
            }
        });
        Rss {
            pid,
            samples,
            done,
            thread: Some(thread),
        }
    }

    /// Samples now; returns the sample and its index.
    fn mark(&self) -> (Sample, usize) {
        let mut s = self.samples.lock().unwrap();
        s.push(sample(self.pid));
        (*s.last().unwrap(), s.len() - 1)
    }

    fn finish(mut self) -> Vec<Sample> {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// One phase: every request's latency, the failures, connections opened.
struct Phase {
    latencies: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
    connects: usize,
    secs: f64,
}

impl Phase {
    fn requests(&self) -> usize {
        self.latencies.len() + self.errors
    }
}

/// `CLIENTS` threads, started together, each sending `each` requests
/// through `request` on its own kept-alive connection.
fn load(
    addr: &str,
    headers: &str,
    each: usize,
    request: fn(&mut Client) -> Result<(), String>,
) -> Phase {
    let start = Arc::new(Barrier::new(CLIENTS + 1));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (start, mut client) = (Arc::clone(&start), Client::new(addr, headers));
            std::thread::spawn(move || {
                let mut times = Vec::with_capacity(each);
                let mut errors = Vec::new();
                start.wait();
                for _ in 0..each {
                    let t = Instant::now();
                    match request(&mut client) {
                        Ok(()) => times.push(t.elapsed().as_secs_f64() * 1e3),
                        Err(e) => errors.push(e),
                    }
                }
                (times, errors, client.connects)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    let mut phase = Phase {
        latencies: Vec::with_capacity(CLIENTS * each),
        errors: 0,
        first_error: None,
        connects: 0,
        secs: 0.0,
    };
    for th in threads {
        let (times, errors, connects) = th.join().unwrap();
        phase.latencies.extend(times);
        phase.errors += errors.len();
        phase.first_error = phase.first_error.or(errors.into_iter().next());
        phase.connects += connects;
    }
    phase.secs = t0.elapsed().as_secs_f64();
    phase
}

fn health(c: &mut Client) -> Result<(), String> {
    let r = c.send("GET", "/health", None)?;
    if r.status != 200 || !r.body.contains("\"ok\"") {
        return Err(format!("/health: {} {}", r.status, r.body));
    }
    Ok(())
}

/// A turn that did not complete its `time` round is an error too.
fn chat(c: &mut Client) -> Result<(), String> {
    let body = json!({ "message": MESSAGE }).to_string();
    let r = c.send("POST", "/chat", Some(&body))?;
    let v: Value = serde_json::from_str(&r.body).unwrap_or_default();
    let calls = v["tool_calls"].as_array().map_or(0, Vec::len);
    if r.status != 200 || v["exit_reason"] != "completed" || calls != 1 {
        return Err(format!("/chat: {} {}", r.status, r.body));
    }
    Ok(())
}

/// A state dir on the scripted mock, with a token; returns (home, token).
fn setup(root: &Path, ws: &Path) -> (std::path::PathBuf, String) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bench_rounds.toml");
    // The per-token rate limit would answer most of 1,000 chats with 429.
    let home = setup_home(
        root,
        "gateway",
        &format!(
            "{}default_provider = \"mock\"\n[providers.models.mock]\nkind = \"mock\"\n\
             fixture = {:?}\n[gateway]\nrate_limit_per_minute = 1000000\n",
            ws_line(ws),
            fixture.display().to_string()
        ),
    );
    let out = Command::new(BIN)
        .args(["gateway", "token"])
        .env("LATCHCLAW_HOME", home.join(".latchclaw"))
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success(), "latchclaw gateway token: {out:?}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    (home, token)
}

/// `receipt verify --json` after the run: (ok, receipts).
fn verify(home: &Path) -> (bool, u64) {
    let out = Command::new(BIN)
        .args(["receipt", "verify", "--json"])
        .env("LATCHCLAW_HOME", home.join(".latchclaw"))
        .env("HOME", home)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (
        out.status.success() && v["ok"] == true,
        v["receipts"].as_u64().unwrap_or(0),
    )
}

/// The sum of a `/metrics` family's samples whose line starts with `prefix`
/// (a name, or a name and the first labels).
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.starts_with(prefix)
                && (prefix.ends_with([',', '}']) || l[prefix.len()..].starts_with([' ', '{']))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn phase_rows(report: &mut Report, name: &str, p: &Phase, at_least: usize) {
    let n = p.requests();
    report.row(
        format!("gateway {name}, {CLIENTS} clients: requests, errors"),
        format!("{n}, {} errors", p.errors),
        &format!("≥ {at_least}, 0 errors"),
        Some(n >= at_least && p.errors == 0),
    );
    if let Some(e) = &p.first_error {
        report
            .notes
            .push(format!("gateway {name}: first error: {e}"));
    }
    let l = &p.latencies;
    if !l.is_empty() {
        report.row(
            "  latency p50 / p99 / max",
            format!(
                "{:.2} / {:.2} / {:.1} ms",
                percentile(l, 50),
                percentile(l, 99),
                percentile(l, 100)
            ),
            "-",
            None,
        );
    }
    report.row(
        "  requests/s",
        format!("{:.0}", n as f64 / p.secs),
        "-",
        None,
    );
    report.row(
        "  connections opened (reopened when the gateway closes one)",
        p.connects.to_string(),
        "-",
        None,
    );
}

/// `LATCHCLAW_BENCH_GATEWAY_SCALE=N`: N times the requests of each
/// phase (a longer soak for the memory figure).
fn scale() -> usize {
    std::env::var("LATCHCLAW_BENCH_GATEWAY_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 1)
        .unwrap_or(1)
}

pub fn figures(report: &mut Report, root: &Path, ws: &Path) {
    let (home, token) = setup(root, ws);
    let server = Server::start(&home);
    let rss = Rss::watch(server.pid());
    let (start, _) = rss.mark();
    let auth = format!("Authorization: Bearer {token}\r\n");
    let warm = (
        load(&server.addr, "", WARMUP_HEALTH_EACH, health),
        load(&server.addr, &auth, WARMUP_CHATS_EACH, chat),
    );
    let (warmed, warm_at) = rss.mark();
    let health_phase = load(&server.addr, "", HEALTH_EACH * scale(), health);
    rss.mark();
    let chat_phase = load(&server.addr, &auth, CHATS_EACH * scale(), chat);
    let (end, _) = rss.mark();
    let hwm = status_kib(server.pid(), "VmHWM");
    let metrics = Client::new(&server.addr, &auth)
        .send("GET", "/metrics", None)
        .map(|r| r.body)
        .unwrap_or_default();
    let samples = rss.finish();
    let stopped = server.stop(&home);

    phase_rows(report, "GET /health", &health_phase, 10_000);
    phase_rows(
        report,
        "POST /chat (mock, 1 `time` call)",
        &chat_phase,
        1_000,
    );
    let warm_errors = warm.0.errors + warm.1.errors;
    if warm_errors > 0 {
        report.row(
            "gateway warm-up errors",
            warm_errors.to_string(),
            "0",
            Some(false),
        );
    }
    let chats = warm.1.latencies.len() + chat_phase.latencies.len();
    let healths = warm.0.latencies.len() + health_phase.latencies.len();
    after_rows(report, &home, &metrics, chats, healths);
    memory_rows(report, &samples[warm_at..], start, warmed, end, hwm);
    report.row(
        "  SIGTERM: the gateway stops (seconds to exit)",
        match &stopped {
            Ok(secs) => format!("yes, {secs:.2} s"),
            Err(_) => "no".into(),
        },
        "yes, ≤ 5 s",
        Some(stopped.as_ref().is_ok_and(|&s| s <= 5.0)),
    );
    if let Err(e) = stopped {
        report.notes.push(format!("gateway SIGTERM: {e}"));
    }
}

/// The receipts the turns wrote, `receipt verify`, and `/metrics`' counts.
fn after_rows(report: &mut Report, home: &Path, metrics: &str, chats: usize, healths: usize) {
    let (valid, receipts) = verify(home);
    let want = (chats * RECEIPTS_PER_CHAT) as u64;
    report.row(
        "  receipts after the run / turns × 1; `receipt verify`",
        format!(
            "{receipts} / {want}, {}",
            if valid { "valid" } else { "BROKEN" }
        ),
        "equal, valid",
        Some(valid && receipts == want),
    );
    let conversations = metric(metrics, "latchclaw_conversations_total");
    let time_calls = metric(metrics, "latchclaw_tool_calls_total{tool=\"time\",");
    let chain = metric(metrics, "latchclaw_receipt_chain_valid");
    let chat_200 = metric(
        metrics,
        "latchclaw_http_requests_total{path=\"/chat\",code=\"200\"}",
    );
    let health_200 = metric(
        metrics,
        "latchclaw_http_requests_total{path=\"/health\",code=\"200\"}",
    );
    let agree = conversations as usize == chats
        && time_calls as usize == chats
        && chat_200 as usize == chats
        && health_200 as usize == healths
        && chain == 1.0;
    report.row(
        "  /metrics: conversations, `time` calls, chain valid",
        format!("{conversations}, {time_calls}, {chain}"),
        &format!("{chats}, {chats}, 1"),
        Some(agree && conversations >= 1000.0),
    );
    if !agree {
        report.notes.push(format!(
            "gateway /metrics: /chat 200s {chat_200} (sent {chats}), /health 200s {health_200} (sent {healths})"
        ));
    }
}

/// RSS at the marks, and the drift: the largest sample after warm-up
/// over the sample taken just after it (`after[0]`).
fn memory_rows(
    report: &mut Report,
    after: &[Sample],
    start: Sample,
    warmed: Sample,
    end: Sample,
    hwm: u64,
) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let drift = |of: fn(&Sample) -> u64| {
        let peak = after.iter().map(of).max().unwrap_or(0) as f64;
        (peak - of(&warmed) as f64) / of(&warmed).max(1) as f64 * 100.0
    };
    report.row(
        "gateway VmRSS: start / after warm-up / end",
        format!(
            "{:.1} / {:.1} / {:.1} MiB",
            mib(start.rss),
            mib(warmed.rss),
            mib(end.rss)
        ),
        "-",
        None,
    );
    let d = drift(|s| s.rss);
    report.row(
        format!(
            "  VmRSS drift after warm-up: largest of {} samples",
            after.len()
        ),
        format!("{d:+.1} %"),
        &format!("≤ {DRIFT_BUDGET} %"),
        Some(warmed.rss > 0 && d <= DRIFT_BUDGET),
    );
    report.row(
        "  of it anonymous (heap): after warm-up / end, largest drift",
        format!(
            "{:.1} / {:.1} MiB, {:+.1} %",
            mib(warmed.anon),
            mib(end.anon),
            drift(|s| s.anon)
        ),
        "-",
        None,
    );
    report.row(
        "  VmHWM at the end",
        format!("{:.1} MiB", mib(hwm)),
        "-",
        None,
    );
    let series: Vec<String> = after
        .iter()
        .map(|s| format!("{:.1}/{:.1}", mib(s.rss), mib(s.anon)))
        .collect();
    report.notes.push(format!(
        "gateway VmRSS/RssAnon after warm-up, MiB (once a second and at each phase's end): {}",
        series.join(" ")
    ));
}
