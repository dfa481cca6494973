//! `make bench`: LatchClaw's figures against their budgets, measured on
//! whole processes of the release binary and on realistic data sizes (no
//! timing assertions anywhere in `make test`).
//!
//! Prints one table (figure, value, budget, holds) and the scaling curves,
//! and writes both to `target/bench-results.md`. Data sets are generated on
//! the first run and cached under `target/bench-data/`.
//!
//! `LATCHCLAW_BENCH_MAX=100000` stops the data sizes at 100k (a quick run);
//! `LATCHCLAW_BENCH_BUILTIN=1` uses the built-in timer even if hyperfine is
//! installed. Names after `--` run only those groups of rows:
//! `cargo bench --bench suite -- stall` (groups: static, cli, stall, search,
//! verify, append, gate, redact, grep, mcp, code, sop, plan, replay, horizons, gateway;
//! and `features`, run only
//! when named: what each Cargo feature adds to the binary, one release
//! build without it each).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod code;
mod data;
mod gateway;
mod http;
mod mcp;
mod measure;
mod server;

use latchclaw::receipts::{NewReceipt, ReceiptLog};
use measure::{Cmd, Figure, Meter, RUNS, percentile};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_latchclaw");
const MIB: f64 = 1_048_576.0;
const SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
const APPEND_PROCS: usize = 8;
const APPENDS_PER_PROC: usize = 250;

struct Row {
    figure: String,
    value: String,
    budget: String,
    /// None: reported, no budget.
    holds: Option<bool>,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    curves: Vec<String>,
    notes: Vec<String>,
}

impl Report {
    fn row(&mut self, figure: impl Into<String>, value: String, budget: &str, holds: Option<bool>) {
        self.rows.push(Row {
            figure: figure.into(),
            value,
            budget: budget.into(),
            holds,
        });
    }

    fn render(&self, header: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{header}\n");
        let _ = writeln!(
            s,
            "| {:<58} | {:>16} | {:>20} | {:<5} |",
            "figure", "value", "budget", "holds"
        );
        let _ = writeln!(
            s,
            "|{}|{}|{}|{}|",
            "-".repeat(60),
            "-".repeat(18),
            "-".repeat(22),
            "-".repeat(7)
        );
        for r in &self.rows {
            let holds = match r.holds {
                Some(true) => "yes",
                Some(false) => "MISS",
                None => "-",
            };
            let _ = writeln!(
                s,
                "| {:<58} | {:>16} | {:>20} | {:<5} |",
                r.figure, r.value, r.budget, holds
            );
        }
        if !self.curves.is_empty() {
            let _ = writeln!(s, "\nScaling curves\n");
            for c in &self.curves {
                let _ = writeln!(s, "{c}");
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "\n{n}");
        }
        s
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Child mode for the concurrent-append figure: `suite append-worker LOG N`.
    if args.first().map(String::as_str) == Some("append-worker") {
        append_worker(Path::new(&args[1]), args[2].parse().unwrap());
        return;
    }
    // `cargo bench` passes flags such as `--bench`; none are needed here.
    let only: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |group: &str| only.is_empty() || only.contains(&group);
    let max = std::env::var("LATCHCLAW_BENCH_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(usize::MAX);
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&n| n <= max).collect();

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-run");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let meter = Meter::new();
    let mut report = Report::default();
    let started = Instant::now();

    if run("static") {
        static_figures(&mut report);
    }
    // Four release builds: only when asked for by name.
    if only.contains(&"features") {
        feature_figures(&mut report);
    }
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for i in 0..20 {
        std::fs::write(ws.join(format!("file-{i}.txt")), "x").unwrap();
    }
    if run("cli") {
        cli_figures(&meter, &mut report, &root, &ws);
    }
    if run("stall") {
        stall_figures(&mut report, &root, &ws);
    }
    let vocab = data::Vocabulary::new(30_000);
    if run("search") {
        search_figures(&meter, &mut report, &root, &vocab, &sizes);
    }
    if run("verify") {
        verify_figures(&meter, &mut report, &root, &vocab, &sizes);
    }
    if run("append") {
        append_figures(&mut report, &root);
    }
    if run("gate") {
        gate_figure(&mut report, &root);
    }
    if run("redact") {
        redact_figures(&mut report, &vocab);
    }
    if run("grep") {
        grep_figures(&mut report, &root, &vocab);
    }
    if run("mcp") && cfg!(feature = "mcp") {
        mcp::figures(&mut report, &root, &ws);
        mcp::turn_figures(&mut report, &root, &ws);
    }
    if run("code") && cfg!(feature = "code") {
        code::figures(&mut report, &root, &ws);
    }
    if run("sop") && cfg!(feature = "sop") {
        sop_figures(&mut report, &root, &ws);
    }
    if run("plan") && cfg!(feature = "plan") {
        plan_figures(&mut report, &root, &ws);
    }
    if run("replay") {
        replay_figures(&mut report, &root, &ws);
    }
    if run("horizons") {
        horizon_figures(&meter, &mut report, &root, &vocab, &sizes);
    }
    if run("gateway") && cfg!(feature = "gateway") {
        gateway::figures(&mut report, &root, &ws);
    }

    let header = format!(
        "latchclaw {} — {}\n{}; timings are medians of {RUNS} runs after {} warm-up runs unless a row says otherwise\nsuite time {:.0} s",
        env!("CARGO_PKG_VERSION"),
        machine(),
        meter.describe(),
        measure::WARMUP,
        started.elapsed().as_secs_f64()
    );
    let text = report.render(&header);
    println!("{text}");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-results.md");
    std::fs::write(&out, &text).unwrap();
    println!("(written to {})", out.display());
    let _ = std::fs::remove_dir_all(&root);
}

/// `memory summarize --period day` over a day of 200 conversations (the
/// mock answering; `--redo`, so every run reads the day and writes the
/// summary), and `memory_recall` with filters over 10k to 1M items.
fn horizon_figures(
    meter: &Meter,
    report: &mut Report,
    root: &Path,
    vocab: &data::Vocabulary,
    sizes: &[usize],
) {
    let fixture = root.join("summarize.toml");
    std::fs::write(
        &fixture,
        "[[script]]\n[[script.responses]]\ntext = \"summary: {{user_message}}\"\n",
    )
    .unwrap();
    let home = setup_home(
        root,
        "summarize",
        &format!(
            "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {:?}\n",
            fixture.display().to_string()
        ),
    );
    data::day_db(vocab, 200, &home.join(".latchclaw/memory.sqlite"));
    let c = cmd(
        &home,
        &[
            "memory",
            "summarize",
            "--period",
            "day",
            "--key",
            "2026-11-02",
            "--redo",
        ],
    );
    let out = c.command_for_setup().output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let f = meter.measure(&c, 21);
    report.row(
        "memory summarize --period day, 200 conversations (mock)",
        ms(f.median()),
        "-",
        None,
    );
    report.row("  peak RSS", mib(f.rss_mib), "-", None);
    let filters = [
        r#"{"store_filter": "summaries", "summary_types": ["daily-summary"], "period_key_prefix": "2026-10"}"#.to_string(),
        r#"{"categories": ["open-loop", "project"], "from": "2026-06-01", "to": "2026-06-30"}"#.to_string(),
        r#"{"summary_types": ["weekly-summary"], "from": "2019-03-01", "to": "2019-03-31"}"#.to_string(),
        format!(r#"{{"query": "{}", "store_filter": "user_memory"}}"#, vocab.word(300)),
        format!(r#"{{"query": "{}", "summary_types": ["monthly-summary", "quarterly-summary"]}}"#, vocab.word(40)),
        r#"{"categories": ["health"], "limit": 50}"#.to_string(),
    ];
    let mut curve = String::from(
        "| items | database | generated in | recall p50 | recall p95 |\n|---|---|---|---|---|\n",
    );
    for &n in sizes {
        let (db, made) = data::items_db(vocab, n);
        let home = setup_home(
            root,
            &format!("recall-{n}"),
            &format!(
                "[memory]\npath = {:?}\n[channels.cli]\ntools_allow = [\"memory_recall\"]\n",
                db.display().to_string()
            ),
        );
        let mut times = Vec::new();
        for q in &filters {
            let c = cmd(&home, &["tool", "run", "memory_recall", "--json", q]);
            let out = c.command_for_setup().output().unwrap();
            assert!(
                out.status.success(),
                "{q}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            times.extend(meter.measure(&c, 11).times);
        }
        let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64 / MIB;
        let (p50, p95) = (percentile(&times, 50), percentile(&times, 95));
        let _ = writeln!(
            curve,
            "| {n} | {size:.0} MiB | {} | {} | {} |",
            made.map_or("cached".into(), |s| format!("{s:.0} s")),
            ms(p50),
            ms(p95)
        );
        let big = n == 1_000_000;
        report.row(
            format!(
                "memory_recall with filters, {n} items: p50 ({} filters × 11)",
                filters.len()
            ),
            ms(p50),
            if big { "≤ 20 ms" } else { "-" },
            big.then_some(p50 <= 20.0),
        );
    }
    report.curves.push(format!(
        "memory_recall through `tool run` (whole process, {} filter sets: store, types, period-key prefix, time ranges, words):\n\n{curve}",
        filters.len()
    ));
}

/// A SOP of `n` `time` steps (and an approval step last, with `park`).
fn sop_text(name: &str, n: usize, park: bool) -> String {
    let mut t = format!("name = \"{name}\"\n");
    for i in 0..n {
        t.push_str(&format!(
            "[[steps]]\nid = \"s{i}\"\nkind = \"tool\"\ntool = \"time\"\n"
        ));
    }
    if park {
        t.push_str("[[steps]]\nid = \"ok\"\nkind = \"approval\"\nprompt = \"Go on?\"\n");
    }
    t
}

/// Wall times (ms) of `runs` runs of a command that exits `code`.
fn timed_exiting(c: &Cmd, code: i32, runs: usize) -> Vec<f64> {
    (0..measure::WARMUP + runs)
        .map(|_| {
            let at = Instant::now();
            let out = c.command_for_setup().output().unwrap();
            let took = at.elapsed().as_secs_f64() * 1e3;
            assert_eq!(out.status.code(), Some(code), "{:?}", c.args);
            took
        })
        .skip(measure::WARMUP)
        .collect()
}

/// Issue 26: what a tool-only SOP step costs (a 20-step run against a
/// 1-step run of the same tool, interleaved; with and without receipts,
/// whose fsync is the tool call's own, as `tool run` pays it), and
/// `sop resume` of a 1,000-step run parked at its last step (loading,
/// checking and walking the whole run's state).
fn sop_figures(report: &mut Report, root: &Path, ws: &Path) {
    for receipts in [false, true] {
        let home = setup_home(
            root,
            &format!("sop-{receipts}"),
            &format!("{}[receipts]\nenabled = {receipts}\n", ws_line(ws)),
        );
        for (name, n) in [("one", 1), ("twenty", 20)] {
            let dir = home.join(".latchclaw/sops").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("SOP.toml"), sop_text(name, n, false)).unwrap();
        }
        let (one, twenty) = measure::paired(
            &cmd(&home, &["sop", "run", "one"]),
            &cmd(&home, &["sop", "run", "twenty"]),
            RUNS,
        );
        let (one, twenty) = (percentile(&one, 50), percentile(&twenty, 50));
        let label = if receipts {
            "receipts on"
        } else {
            "receipts off"
        };
        report.row(
            format!("sop run, 20 `time` steps ({label})"),
            ms(twenty),
            "-",
            None,
        );
        let per = (twenty - one) / 19.0;
        if receipts {
            report.row(
                "  per step, with the tool's receipt (its fsync)",
                ms(per),
                "-",
                None,
            );
        } else {
            report.row(
                "  per step: SOP state (2 SQLite commits), gate, tool",
                ms(per),
                "≤ 2 ms",
                Some(per <= 2.0),
            );
        }
    }
    let home = setup_home(
        root,
        "sop-resume",
        &format!("{}[receipts]\nenabled = false\n", ws_line(ws)),
    );
    let dir = home.join(".latchclaw/sops/thousand");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("SOP.toml"), sop_text("thousand", 999, true)).unwrap();
    let out = cmd(&home, &["sop", "run", "thousand", "--json"])
        .command_for_setup()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = v["run_id"].as_str().unwrap().to_string();
    let times = timed_exiting(&cmd(&home, &["sop", "resume", &run]), 4, RUNS);
    let median = percentile(&times, 50);
    report.row(
        "sop resume, a 1,000-step run parked at its last step",
        ms(median),
        "≤ 50 ms",
        Some(median <= 50.0),
    );
}

/// A mock turn whose `plan` call holds one task, and one whose plan holds
/// eleven, each task a turn of its own with one `time` call: what a task
/// costs (its state's commits, its turn's, the gate, the receipt).
fn plan_figures(report: &mut Report, root: &Path, ws: &Path) {
    let fixture = root.join("plan.toml");
    let tasks = |n: usize| {
        (0..n)
            .map(|i| {
                format!(
                    "{{ title = \"zqtask {i}\", purpose = \"p\", instructions = \"tell the time\", \
                     evaluation = \"\", tools = [\"time\"] }}"
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::from(
        "[[script]]\nwhen = \"zqtask\"\n[[script.responses]]\ntool_calls = [{ name = \"time\" }]\n\
         [[script.responses]]\ntext = \"noon\"\n",
    );
    for (name, n) in [("one", 1), ("eleven", 11)] {
        text.push_str(&format!(
            "[[script]]\nwhen = \"plan {name}\"\n[[script.responses]]\n\
             tool_calls = [{{ name = \"plan\", arguments = {{ tasks = [{}] }} }}]\n\
             [[script.responses]]\ntext = \"done\"\n",
            tasks(n)
        ));
    }
    std::fs::write(&fixture, text).unwrap();
    let home = setup_home(
        root,
        "plan",
        &format!(
            "{}default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {:?}\n\
             [security]\nautonomy = \"full\"\n[tools.plan]\nenabled = true\n\
             rate_limit = {{ per_minute = 10000, per_hour = 1000000 }}\n",
            ws_line(ws),
            fixture.display().to_string()
        ),
    );
    let (one, eleven) = measure::paired(
        &cmd(&home, &["agent", "-m", "plan one"]),
        &cmd(&home, &["agent", "-m", "plan eleven"]),
        RUNS,
    );
    let (one, eleven) = (percentile(&one, 50), percentile(&eleven, 50));
    report.row(
        "agent, a plan of 11 tasks, one `time` call each (mock)",
        ms(eleven),
        "-",
        None,
    );
    let per = (eleven - one) / 10.0;
    report.row(
        "  per task: its state, its turn, the call and its receipt",
        ms(per),
        "≤ 10 ms",
        Some(per <= 10.0),
    );
}

/// `policy replay` of 20,000 stored calls under a proposed rule set: each
/// call judged twice (the config in force, the proposal), nothing run.
fn replay_figures(report: &mut Report, root: &Path, ws: &Path) {
    use latchclaw::memory::{Memory, Round, RoundResult};
    const CALLS: usize = 20_000;
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let config = format!("{}[security]\nautonomy = \"full\"\n", ws_line(ws));
    let home = setup_home(root, "replay", &config);
    let proposed = home.join("proposed.toml");
    std::fs::write(
        &proposed,
        format!(
            "{config}[[policy.rules]]\nname = \"no-recursive-copy\"\nprogram = \"cp\"\n\
             flags = [\"recursive\"]\neffect = \"deny\"\nreason = \"r\"\n\
             [[policy.rules]]\nname = \"ask-reads\"\ntool = \"file_read\"\n\
             paths = [\"*.txt\"]\neffect = \"ask\"\nreason = \"r\"\n"
        ),
    )
    .unwrap();
    // 2,000 distinct calls, each ten times over: an agent's log repeats
    // its calls (`ls`, the same test command, the same file read).
    const DISTINCT: usize = 2_000;
    let call = |k: usize| -> serde_json::Value {
        let f = format!("file-{}.txt", k % 20);
        match k % 5 {
            0 => {
                serde_json::json!({"name": "shell", "arguments": {"command": format!("cp -a src dst-{k}")}})
            }
            1 => {
                serde_json::json!({"name": "shell", "arguments": {"command": format!("head -n {k} {f}")}})
            }
            2 => {
                serde_json::json!({"name": "file_read", "arguments": {"path": f, "start_line": k}})
            }
            3 => {
                serde_json::json!({"name": "grep", "arguments": {"pattern": format!("w{k}"), "path": "."}})
            }
            _ => {
                serde_json::json!({"name": "file_list", "arguments": {"path": ".", "depth": k % 7 + 1, "glob": format!("*{k}*")}})
            }
        }
    };
    let m = Memory::open(
        &home.join(".latchclaw/memory.sqlite"),
        5000,
        Default::default(),
    )
    .unwrap();
    for round in 0..CALLS / 10 {
        let mut tool_calls = Vec::new();
        let mut results = Vec::new();
        for i in 0..10 {
            let mut c = call((round * 10 + i) % DISTINCT);
            let id = format!("call_{i}");
            c["id"] = serde_json::json!(id);
            tool_calls.push(c);
            results.push(RoundResult {
                call_id: id.clone(),
                content: "ok".into(),
                tool_results: None,
                metadata: serde_json::json!({"tool_call_id": id, "status": "allowed"}).to_string(),
            });
        }
        m.add_round(
            &Round {
                conversation_id: format!("conv-{}", round % 50),
                content: String::new(),
                tool_calls: serde_json::Value::Array(tool_calls).to_string(),
                call_ids: (0..10).map(|i| format!("call_{i}")).collect(),
                provider: "mock".into(),
                model: "mock".into(),
                metadata: "{}".into(),
                results,
            },
            "",
        )
        .unwrap();
    }
    drop(m);
    let c = cmd(
        &home,
        &[
            "--config",
            proposed.to_str().unwrap(),
            "policy",
            "replay",
            "--json",
        ],
    );
    let mut judging = Vec::new();
    let mut distinct = 0;
    let times: Vec<f64> = (0..measure::WARMUP + 5)
        .map(|_| {
            let at = Instant::now();
            let out = c.command_for_setup().output().unwrap();
            let took = at.elapsed().as_secs_f64() * 1e3;
            assert!(out.status.success(), "{out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["judged"], CALLS as u64, "{v}");
            judging.push(v["elapsed_ms"].as_f64().unwrap());
            distinct = v["distinct"].as_u64().unwrap();
            took
        })
        .skip(measure::WARMUP)
        .collect();
    let judging: Vec<f64> = judging.into_iter().skip(measure::WARMUP).collect();
    let whole = percentile(&times, 50);
    let rate = CALLS as f64 / (whole / 1e3);
    assert_eq!(distinct, DISTINCT as u64);
    report.row(
        "policy replay, 20,000 stored calls (2,000 distinct) under a proposed rule set (whole process)",
        format!("{rate:.0} calls/s ({})", ms(whole)),
        "≥ 20000 calls/s",
        Some(rate >= 20_000.0),
    );
    let judge = percentile(&judging, 50);
    report.row(
        "  the judging loop alone (each distinct call judged under both configs once)",
        format!("{:.0} calls/s", CALLS as f64 / (judge / 1e3)),
        "-",
        None,
    );
}

/// The Cargo features a build can leave out (README, "Builds and
/// features"), all in the default build.
const FEATURES: [&str; 4] = ["gateway", "pdf", "lineedit", "tls"];

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// Bytes of a release binary built with `--no-default-features` and these
/// features, in its own target dir (`make release-minimal`'s): built in
/// target/release it would replace the binary this suite measures. The
/// first build there compiles every dependency (a few minutes).
fn build_without_defaults(features: &[&str]) -> Result<u64, String> {
    eprintln!(
        "building the release binary with features [{}] in target/minimal…",
        features.join(", ")
    );
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(cargo())
        .args(["build", "--release", "--no-default-features"])
        .args(["--features", &features.join(",")])
        .arg("--target-dir")
        .arg(dir.join("target/minimal"))
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    std::fs::metadata(dir.join("target/minimal/release/latchclaw"))
        .map(|m| m.len())
        .map_err(|e| e.to_string())
}

/// The number of crates a build compiles (`cargo tree`, normal deps).
fn crate_count(target: &str, extra: &[&str]) -> Option<usize> {
    let out = Command::new(cargo())
        .args([
            "tree", "-e", "normal", "--prefix", "none", "--target", target,
        ])
        .args(extra)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    let crates: std::collections::BTreeSet<&str> = text
        .lines()
        .map(|l| l.trim_end_matches(" (*)"))
        .filter(|l| !l.is_empty())
        .collect();
    out.status.success().then_some(crates.len())
}

/// The sizes of both builds (every feature; the minimal one) and the
/// number of crates compiled into each.
fn static_figures(report: &mut Report) {
    let size = std::fs::metadata(BIN).map(|m| m.len()).unwrap_or(0) as f64 / MIB;
    let every = FEATURES
        .iter()
        .all(|f| latchclaw::features::built().contains(f));
    report.row(
        if every {
            "stripped release binary, default build (every feature)".to_string()
        } else {
            format!(
                "stripped release binary, this build ({})",
                latchclaw::features::line()
            )
        },
        format!("{size:.2} MiB"),
        if every { "≤ 4.0 MiB" } else { "-" },
        every.then_some(size <= 4.0),
    );
    match build_without_defaults(&[]) {
        Ok(bytes) => {
            let size = bytes as f64 / MIB;
            report.row(
                "stripped release binary, minimal (--no-default-features)",
                format!("{size:.2} MiB"),
                "≤ 2.6 MiB",
                Some(size <= 2.6),
            );
        }
        Err(e) => {
            report.row(
                "stripped release binary, minimal (--no-default-features)",
                "build failed".into(),
                "≤ 2.6 MiB",
                Some(false),
            );
            report.notes.push(format!("minimal build: {e}"));
        }
    }
    let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let n = crate_count(&target, &[]);
    report.row(
        format!("crates compiled for {target} (normal deps + latchclaw)"),
        n.map_or("cargo tree failed".into(), |n| n.to_string()),
        "≤ 70",
        Some(n.is_some_and(|n| n <= 70)),
    );
    let n = crate_count(&target, &["--no-default-features"]);
    report.row(
        "  of which in the minimal build",
        n.map_or("cargo tree failed".into(), |n| n.to_string()),
        "-",
        None,
    );
}

/// What each feature adds: the default binary's size less that of a build
/// with every other feature (`cargo bench --bench suite -- features`).
fn feature_figures(report: &mut Report) {
    let every = std::fs::metadata(BIN).map(|m| m.len()).unwrap_or(0);
    for f in FEATURES {
        let others: Vec<&str> = FEATURES.into_iter().filter(|g| *g != f).collect();
        let label = format!("feature `{f}`: the default binary less a build without it");
        match build_without_defaults(&others) {
            Ok(bytes) => report.row(
                label,
                format!("{:.1} KiB", (every as f64 - bytes as f64) / 1024.0),
                "-",
                None,
            ),
            Err(e) => {
                report.row(label, "build failed".into(), "-", Some(false));
                report.notes.push(format!("build without {f}: {e}"));
            }
        }
    }
}

fn setup_home(root: &Path, name: &str, config: &str) -> PathBuf {
    let home = root.join(name);
    std::fs::create_dir_all(home.join(".latchclaw")).unwrap();
    // Every tool is rate-limited by default (10 a minute in a run, 200 an
    // hour across runs); a benchmark runs the same call thousands of times.
    let mut config = config.to_string();
    for tool in [
        "time",
        "file_list",
        "file_read",
        "shell",
        "memory_search",
        "git",
        "grep",
    ] {
        config.push_str(&format!(
            "\n[tools.{tool}]\nrate_limit = {{ per_minute = 10000, per_hour = 1000000 }}\n"
        ));
    }
    std::fs::write(home.join(".latchclaw/config.toml"), config).unwrap();
    home
}

fn ws_line(ws: &Path) -> String {
    format!("workspace_dir = {:?}\n", ws.display().to_string())
}

fn cmd<'a>(home: &'a Path, args: &[&str]) -> Cmd<'a> {
    Cmd {
        program: BIN,
        args: args.iter().map(|s| s.to_string()).collect(),
        home,
    }
}

fn ms(v: f64) -> String {
    format!("{v:.2} ms")
}

fn mib(v: f64) -> String {
    format!("{v:.2} MiB")
}

/// Start-up, one-shot turns on the mock and against a loopback server.
fn cli_figures(meter: &Meter, report: &mut Report, root: &Path, ws: &Path) {
    let mock = root.join("mock");
    std::fs::create_dir_all(&mock).unwrap();
    let status = cmd(&mock, &[])
        .command_for_setup()
        .args(["init", "--workspace", ws.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "latchclaw init failed");

    let baseline = meter.measure(
        &Cmd {
            program: "/bin/true",
            args: Vec::new(),
            home: &mock,
        },
        RUNS,
    );
    report.row(
        "process spawn floor: /bin/true",
        ms(baseline.median()),
        "-",
        None,
    );
    let version = meter.measure(&cmd(&mock, &["--version"]), RUNS);
    report.row(
        "latchclaw --version",
        ms(version.median()),
        "≤ 1 ms",
        Some(version.median() <= 1.0),
    );
    report.row(
        "  of which over the spawn floor",
        ms(version.median() - baseline.median()),
        "-",
        None,
    );
    let text = meter.measure(&cmd(&mock, &["agent", "-m", "hello there"]), RUNS);
    time_and_rss(report, "agent -m, mock, text only", &text, 5.0, Some(6.0));

    let rounds = setup_home(
        root,
        "rounds",
        &format!(
            "{}max_tool_rounds = 10\n[providers.models.mock]\nkind = \"mock\"\nfixture = {:?}\n",
            ws_line(ws),
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/bench_rounds.toml")
                .display()
                .to_string()
        ),
    );
    let mut medians = Vec::new();
    for (n, message) in [(1, "one round"), (5, "five rounds")] {
        let f = meter.measure(&cmd(&rounds, &["agent", "-m", message]), RUNS);
        let budget = 5.0 + 0.5 * n as f64;
        let label = format!(
            "agent -m, mock, {n} tool round{}",
            if n > 1 { "s" } else { "" }
        );
        time_and_rss(report, &label, &f, budget, None);
        medians.push(f.median());
    }
    let per_round = (medians[1] - medians[0]) / 4.0;
    report.row(
        "  each tool round: (5 rounds − 1 round) / 4",
        ms(per_round),
        "≤ 0.5 ms",
        Some(per_round <= 0.5),
    );

    // The sandbox around one shell call: the same `tool run shell` with the
    // kernel walls on (namespaces, Landlock, seccomp) and off, alternately.
    let walled = setup_home(root, "walled", &ws_line(ws));
    let bare = setup_home(
        root,
        "bare",
        &format!("{}[security]\nconfinement = \"off\"\n", ws_line(ws)),
    );
    let shell = [
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "echo hi"}"#,
    ];
    let (on, off) = measure::paired(&cmd(&walled, &shell), &cmd(&bare, &shell), RUNS);
    let (on, off) = (measure::percentile(&on, 50), measure::percentile(&off, 50));
    report.row("tool run shell `echo hi`, sandboxed", ms(on), "-", None);
    report.row(
        "tool run shell `echo hi`, confinement off",
        ms(off),
        "-",
        None,
    );
    let added = on - off;
    report.row(
        "  what the sandbox adds to a shell call",
        ms(added),
        "≤ 2 ms",
        Some(added <= 2.0),
    );

    let server = server::start();
    let cloud = setup_home(
        root,
        "cloud",
        &format!(
            "{}default_provider = \"cloud\"\n[providers.models.cloud]\n\
             kind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"bench\"\n",
            ws_line(ws),
            server.port
        ),
    );
    let f = meter.measure(&cmd(&cloud, &["agent", "-m", "ping"]), RUNS);
    let over = f.median() - server::median_ms(&server);
    report.row(
        "agent -m, fake OpenAI server on loopback, text",
        ms(f.median()),
        "-",
        None,
    );
    report.row(
        "  of which over the server's own time",
        ms(over),
        "≤ 3 ms",
        Some(over <= 3.0),
    );
    report.row(
        "  of which over the mock's text-only turn",
        ms(f.median() - text.median()),
        "-",
        None,
    );
    report.row(
        "  peak RSS",
        mib(f.rss_mib),
        "≤ 6 MiB",
        Some(f.rss_mib <= 6.0),
    );
}

/// The one-tool-round turn (`time`, then the answer) against the fake
/// server, which keeps the connection alive and writes each reply's head
/// and body in two writes, Nagle on: the second request reuses the
/// connection, and a client that delays its ACK of the head waits 40 ms for
/// the body. Compared with the same turn on the mock, run alternately.
fn stall_figures(report: &mut Report, root: &Path, ws: &Path) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bench_rounds.toml");
    let mock = setup_home(
        root,
        "stall-mock",
        &format!(
            "{}[providers.models.mock]\nkind = \"mock\"\nfixture = {:?}\n",
            ws_line(ws),
            fixture.display().to_string()
        ),
    );
    let server = server::start_tool_round();
    let fake = setup_home(
        root,
        "stall-server",
        &format!(
            "{}default_provider = \"cloud\"\n[providers.models.cloud]\n\
             kind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nmodel = \"bench\"\n",
            ws_line(ws),
            server.port
        ),
    );
    let message = ["agent", "-m", "what is the time?"];
    let (on_mock, on_server) =
        measure::paired(&cmd(&mock, &message), &cmd(&fake, &message), 2 * RUNS - 1);
    let (m, s) = (percentile(&on_mock, 50), percentile(&on_server, 50));
    // Each run's difference from the mock run just before it: load that
    // comes and goes cancels out of most pairs.
    let diffs: Vec<f64> = on_mock.iter().zip(&on_server).map(|(m, s)| s - m).collect();
    let over = percentile(&diffs, 50);
    report.row("agent -m, mock, 1 `time` round", ms(m), "-", None);
    report.row(
        "one-tool-round turn, two-write keep-alive fake server",
        ms(s),
        "-",
        None,
    );
    report.row(
        "  of which over the same turn on the mock (paired runs)",
        ms(over),
        "≤ 1.5 ms",
        Some(over <= 1.5),
    );
    // The figure means something only if the turn's second request did
    // reuse the connection.
    let per_connection = server::requests_per_connection(&server);
    report.row(
        "  requests per connection (a turn makes 2)",
        format!("{per_connection:.2}"),
        "2",
        Some(per_connection == 2.0),
    );
    report.row(
        "  fake server's own time per request",
        ms(server::median_ms(&server)),
        "-",
        None,
    );
}

fn time_and_rss(report: &mut Report, label: &str, f: &Figure, budget_ms: f64, rss: Option<f64>) {
    report.row(
        label,
        ms(f.median()),
        &format!("≤ {budget_ms} ms"),
        Some(f.median() <= budget_ms),
    );
    let (budget, holds) = match rss {
        Some(max) => (format!("≤ {max} MiB"), Some(f.rss_mib <= max)),
        None => ("-".into(), None),
    };
    report.row("  peak RSS", mib(f.rss_mib), &budget, holds);
}

/// `memory search` against 10k, 100k and 1M stored turns.
fn search_figures(
    meter: &Meter,
    report: &mut Report,
    root: &Path,
    vocab: &data::Vocabulary,
    sizes: &[usize],
) {
    // Words across the frequency range: very common to rare, two-word
    // queries, a prefix-length word, and one that matches nothing.
    let queries: Vec<String> = vec![
        vocab.word(2).into(),
        vocab.word(40).into(),
        vocab.word(250).into(),
        vocab.word(3_000).into(),
        vocab.word(25_000).into(),
        format!("{} {}", vocab.word(60), vocab.word(700)),
        format!(
            "{} {} {}",
            vocab.word(14),
            vocab.word(41),
            vocab.word(9_000)
        ),
        "zzqxv".into(),
    ];
    let mut curve = String::from(
        "| stored turns | database | generated in | search p50 | search p95 | peak RSS |\n|---|---|---|---|---|---|\n",
    );
    for &n in sizes {
        let (db, made) = data::turns_db(vocab, n);
        let home = setup_home(
            root,
            &format!("search-{n}"),
            &format!("[memory]\npath = {:?}\n", db.display().to_string()),
        );
        let mut times = Vec::new();
        let mut rss: f64 = 0.0;
        for q in &queries {
            let f = meter.measure(&cmd(&home, &["memory", "search", q]), 11);
            times.extend(f.times);
            rss = rss.max(f.rss_mib);
        }
        let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64 / MIB;
        let (p50, p95) = (percentile(&times, 50), percentile(&times, 95));
        let _ = writeln!(
            curve,
            "| {n} | {size:.0} MiB | {} | {} | {} | {} |",
            made.map_or("cached".into(), |s| format!("{s:.0} s")),
            ms(p50),
            ms(p95),
            mib(rss)
        );
        let budget = if n == 1_000_000 { "≤ 20 ms" } else { "-" };
        report.row(
            format!(
                "memory search, {n} turns: p50 ({} queries × 11)",
                queries.len()
            ),
            ms(p50),
            budget,
            (n == 1_000_000).then_some(p50 <= 20.0),
        );
    }
    report.curves.push(format!(
        "memory search (whole process, {} queries from very common to absent words):\n\n{curve}",
        queries.len()
    ));
}

/// `receipt verify` on 10k, 100k and 1M receipts.
fn verify_figures(
    meter: &Meter,
    report: &mut Report,
    root: &Path,
    vocab: &data::Vocabulary,
    sizes: &[usize],
) {
    let mut curve = String::from(
        "| receipts | log | generated in | verify median | receipts/s | peak RSS |\n|---|---|---|---|---|---|\n",
    );
    let mut rss_by_size = Vec::new();
    for &n in sizes {
        let (log, made) = data::receipts_log(vocab, n);
        let (home, verified) = verify_log(root, &format!("verify-{n}"), &log, n);
        assert!(
            verified.is_ok(),
            "generated log does not verify: {verified:?}"
        );
        let runs = if n >= 1_000_000 { 7 } else { 15 };
        let f = meter.measure(&cmd(&home, &["receipt", "verify"]), runs);
        let rate = n as f64 / (f.median() / 1e3);
        let size = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) as f64 / MIB;
        let _ = writeln!(
            curve,
            "| {n} | {size:.0} MiB | {} | {} | {rate:.0} | {} |",
            made.map_or("cached".into(), |s| format!("{s:.1} s")),
            ms(f.median()),
            mib(f.rss_mib)
        );
        report.row(
            format!("receipt verify, {n} receipts: receipts/s"),
            format!("{rate:.0}"),
            if n == 1_000_000 { "≥ 500000" } else { "-" },
            (n == 1_000_000).then_some(rate >= 500_000.0),
        );
        rss_by_size.push((n, f.rss_mib));
    }
    // Judged from the first log larger than verify's 8 MiB read buffer: a
    // smaller one touches only part of it, so its peak is lower by what
    // it leaves untouched, not by anything that grows with the log.
    let from = rss_by_size
        .iter()
        .find(|(n, _)| *n >= 100_000)
        .or(rss_by_size.first());
    if let (Some(&(small, low)), Some(&(large, high))) = (from, rss_by_size.last()) {
        report.row(
            format!("receipt verify peak RSS, {small} → {large} receipts"),
            format!("{low:.1} → {high:.1} MiB"),
            "flat (≤ +4 MiB)",
            Some(high - low <= 4.0),
        );
    }
    report
        .curves
        .push(format!("receipt verify (whole process):\n\n{curve}"));
}

/// A state dir whose receipts log is `log`, and whether `latchclaw receipt
/// verify` accepts it as a chain of exactly `n` receipts (Err: what it said).
fn verify_log(root: &Path, name: &str, log: &Path, n: usize) -> (PathBuf, Result<(), String>) {
    let home = setup_home(
        root,
        name,
        &format!("[receipts]\npath = {:?}\n", log.display().to_string()),
    );
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt;
        let mut key = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(home.join(".latchclaw/receipt.key"))
            .unwrap();
        key.write_all(&data::BENCH_KEY).unwrap();
    }
    let out = cmd(&home, &["receipt", "verify"])
        .command_for_setup()
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    // Every generated or appended receipt is keyed, and its hmac checked.
    let ok = out.status.success()
        && said.starts_with(&format!("ok: {n} receipts"))
        && said.contains("\nkeyed: every receipt carries an hmac, each checked");
    (home, if ok { Ok(()) } else { Err(said) })
}

fn new_receipt<'a>(
    args: &'a serde_json::Value,
    result: Option<&'a serde_json::Value>,
    started_id: Option<&'a str>,
) -> NewReceipt<'a> {
    NewReceipt {
        conversation_id: "conv-bench",
        tool: "file_list",
        args,
        result,
        status: if result.is_some() {
            latchclaw::receipts::Status::Allowed
        } else {
            latchclaw::receipts::Status::Started
        },
        risk: latchclaw::security::Risk::Low,
        reason: "allowed by policy",
        started_id,
        measured: None,
    }
}

/// Appends `n` receipts through the library as tool calls in a run do: a
/// started receipt, then the outcome naming it (`n` even).
fn append_worker(log: &Path, n: usize) {
    let key = latchclaw::receipts::Key::from_bytes(&data::BENCH_KEY);
    let log = ReceiptLog::with_key(log, key);
    let args = serde_json::json!({"path": "."});
    for i in 0..n / 2 {
        let started = log
            .append(&new_receipt(&args, None, None))
            .expect("append receipt");
        let result = serde_json::json!({"entries": i});
        log.append(&new_receipt(&args, Some(&result), Some(&started.id)))
            .expect("append receipt");
    }
}

/// Receipt appends with the normal durability (lock, write, fdatasync per
/// receipt): one process, then eight at once on one log.
fn append_figures(report: &mut Report, root: &Path) {
    let dir = root.join("append");
    std::fs::create_dir_all(&dir).unwrap();
    let single = dir.join("single.log");
    let start = Instant::now();
    let mut n = 0;
    while n < 200 || start.elapsed() < Duration::from_secs(2) {
        append_worker(&single, 50);
        n += 50;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    report.row(
        format!("receipt append, one process ({n} appends, fdatasync each)"),
        format!("{rate:.0}/s"),
        "≥ 500/s",
        Some(rate >= 500.0),
    );

    let shared = dir.join("shared.log");
    let me = std::env::current_exe().unwrap();
    let start = Instant::now();
    let children: Vec<_> = (0..APPEND_PROCS)
        .map(|_| {
            Command::new(&me)
                .arg("append-worker")
                .arg(&shared)
                .arg(APPENDS_PER_PROC.to_string())
                .spawn()
                .unwrap()
        })
        .collect();
    let all_ok = children
        .into_iter()
        .all(|mut c| c.wait().is_ok_and(|s| s.success()));
    let secs = start.elapsed().as_secs_f64();
    let total = APPEND_PROCS * APPENDS_PER_PROC;
    let (_, verified) = verify_log(root, "append-verify", &shared, total);
    let valid = all_ok && verified.is_ok();
    report.row(
        format!("receipt append, {APPEND_PROCS} processes × {APPENDS_PER_PROC} at once"),
        format!("{:.0}/s", total as f64 / secs),
        "chain valid",
        Some(valid),
    );
    if !valid {
        report
            .notes
            .push(format!("concurrent append: verify said {verified:?}"));
    }
}

/// Gate decisions per second over the hostile corpus (shell lexing, path
/// resolution, URL checks, estop), in process.
fn gate_figure(report: &mut Report, root: &Path) {
    use latchclaw::config::Config;
    use latchclaw::security::Gate;
    let ws = root.join("ws");
    let cfg = Config::from_text(
        &ws_line(&ws),
        &root.join("gate.toml"),
        root.join(".latchclaw"),
    )
    .unwrap();
    let gate = Gate::new(&cfg, &latchclaw::tools::ToolName::ALL);
    let corpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_corpus.jsonl"),
    )
    .unwrap();
    let cases: Vec<(latchclaw::tools::ToolName, serde_json::Value)> = corpus
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let tool = latchclaw::tools::ToolName::parse(v["tool"].as_str().unwrap()).unwrap();
            (tool, v["args"].clone())
        })
        .collect();
    for (t, a) in &cases {
        std::hint::black_box(gate.decide(*t, a));
    }
    let mut n = 0usize;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        for (t, a) in &cases {
            std::hint::black_box(gate.decide(*t, a));
            n += 1;
        }
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    // The rate is a mean, so a few costly cases can carry it: name them.
    if let Some(k) = std::env::var("LATCHCLAW_BENCH_GATE_SLOWEST")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        let mut costs: Vec<(Duration, usize)> = cases
            .iter()
            .enumerate()
            .map(|(i, (t, a))| {
                let t0 = Instant::now();
                for _ in 0..20 {
                    std::hint::black_box(gate.decide(*t, a));
                }
                (t0.elapsed() / 20, i)
            })
            .collect();
        costs.sort_unstable_by(|a, b| b.cmp(a));
        let total: Duration = costs.iter().map(|c| c.0).sum();
        eprintln!("gate: one pass {total:?}; the {k} costliest cases:");
        for (d, i) in costs.iter().take(k) {
            let (t, a) = &cases[*i];
            let shown: String = a.to_string().chars().take(90).collect();
            eprintln!("  {d:>10.1?}  line {:>4}  {} {shown}", i + 1, t.as_str());
        }
    }
    report.row(
        format!("gate decisions/s ({}-case hostile corpus)", cases.len()),
        format!("{rate:.0}"),
        "≥ 50000",
        Some(rate >= 50_000.0),
    );
}

/// The `grep` tool over a 100k-file tree against `rg`, else `grep -rn`,
/// on the same tree, paired runs; both print every matching line.
fn grep_figures(report: &mut Report, root: &Path, vocab: &data::Vocabulary) {
    const FILES: usize = 100_000;
    let (tree, made) = data::grep_tree(vocab, FILES);
    if let Some(secs) = made {
        report.notes.push(format!(
            "grep tree of {FILES} files generated in {secs:.0} s"
        ));
    }
    let home = setup_home(
        root,
        "grep",
        &format!(
            "{}tool_output_max_bytes = 16777216\ntool_timeout_secs = 600\n[security]\nautonomy = \"readonly\"\n",
            ws_line(&tree)
        ),
    );
    let args = serde_json::json!({"pattern": data::GREP_NEEDLE, "max_matches": 10000}).to_string();
    let ours = cmd(&home, &["tool", "run", "grep", "--json", &args]);
    let check = ours.command_for_setup().output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).expect("grep --json");
    let want = FILES.div_ceil(97);
    assert_eq!(v["metadata"]["matches"], want, "{v}");
    assert_eq!(v["metadata"]["files_searched"], FILES, "{v}");
    let rg = ["/usr/bin/rg", "/usr/local/bin/rg"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let tree_s = tree.to_str().unwrap().to_string();
    let (program, other_args, name) = match rg {
        Some(rg) => (
            rg,
            vec!["-n", "--no-heading", data::GREP_NEEDLE, &tree_s],
            "rg -n",
        ),
        None => ("grep", vec!["-rn", data::GREP_NEEDLE, &tree_s], "grep -rn"),
    };
    let theirs = Cmd {
        program,
        args: other_args.iter().map(|s| s.to_string()).collect(),
        home: &home,
    };
    let (a, b) = measure::paired(&ours, &theirs, 5);
    let (ma, mb) = (percentile(&a, 50), percentile(&b, 50));
    report.row(
        format!("grep tool, {FILES} files ({want} matching lines)"),
        ms(ma),
        "-",
        None,
    );
    report.row(format!("  {name} on the same tree"), ms(mb), "-", None);
    report.row(
        format!("  grep tool / {name} (paired medians)"),
        format!("{:.2}", ma / mb),
        "≤ 3",
        Some(ma / mb <= 3.0),
    );
}

/// Text a tool returns: prose, code and config lines, log lines with ids,
/// hashes, URLs and `key=value` pairs (the separators the redactor stops
/// at), about `bytes` long.
fn ordinary_text(vocab: &data::Vocabulary, bytes: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(21);
    let mut out = String::with_capacity(bytes + 256);
    while out.len() < bytes {
        let w = vocab.text(&mut rng, 3);
        let w: Vec<&str> = w.split(' ').collect();
        // A generated `x_secret: 12` would be a secret assignment.
        let word = |i: usize| {
            let w = w[i % w.len()]
                .trim_end_matches(['.', '?', '!'])
                .to_lowercase();
            let secretish = ["password", "passwd", "secret", "token", "key"];
            if secretish.iter().any(|s| w.contains(s)) {
                "item".to_string()
            } else {
                w
            }
        };
        match rng.u8(..6) {
            0 | 1 => {
                out.push_str(&vocab.text(&mut rng, 40));
                out.push('\n');
            }
            2 => out.push_str(&format!(
                "    let {}_{} = self.{}(&{}, {})?;\n",
                word(0),
                word(1),
                word(2),
                word(0),
                rng.u32(..1000)
            )),
            3 => out.push_str(&format!(
                "2026-11-22T10:{:02}:{:02}.{:03}Z INFO request_id={:08x}-{:04x}-{:04x}-{:04x}-{:012x} \
                 status={} path=/api/v1/{}/{} took={}ms\n",
                rng.u8(..60),
                rng.u8(..60),
                rng.u16(..1000),
                rng.u32(..),
                rng.u16(..),
                rng.u16(..),
                rng.u16(..),
                rng.u64(..1 << 48),
                [200, 201, 404, 500][rng.usize(..4)],
                word(0),
                word(1),
                rng.u16(..5000)
            )),
            4 => out.push_str(&format!(
                "commit {:016x}{:016x}{:08x}\nAuthor: {} <{}@example.com>\nsee https://example.com/{}/{}?page={}\n",
                rng.u64(..),
                rng.u64(..),
                rng.u32(..),
                word(0),
                word(1),
                word(1),
                word(2),
                rng.u8(..50)
            )),
            _ => out.push_str(&format!(
                "{}_{}: {}\n--{}-{}={} # {}\n",
                word(0),
                word(1),
                rng.u32(..100_000),
                word(2),
                word(0),
                word(1),
                word(2)
            )),
        }
    }
    out
}

/// MB/s of `f` over `text`: the best of `runs` passes (the least disturbed
/// by other load).
fn throughput(text: &str, runs: usize, f: impl Fn(&str) -> usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..runs {
        let start = Instant::now();
        std::hint::black_box(f(text));
        best = best.min(start.elapsed().as_secs_f64());
    }
    text.len() as f64 / best / 1e6
}

/// The redactor (`security::redact`): throughput on ordinary text and on
/// inputs built to make a matcher go quadratic, and what it adds to a tool
/// round (one result redacted; the set-up once per process).
fn redact_figures(report: &mut Report, vocab: &data::Vocabulary) {
    use latchclaw::security::redact::Redactor;
    use latchclaw::tools::ToolResult;
    let mut r = Redactor::new();
    r.add_secret("OPENAI_API_KEY", "sk-bench-0123456789abcdefghijklmnop");
    r.add_secret("DB_PASSWORD", "bench-db-password-42");
    let redact = |t: &str| r.redact(t).len();

    let text = ordinary_text(vocab, 16 << 20);
    let mut found = latchclaw::security::redact::Counts::default();
    let clean = r.redact_counted(&text, &mut found);
    let at = clean.find("[REDACTED:").unwrap_or(0);
    assert!(
        found.is_empty(),
        "the ordinary text holds no secret: {} ({:?})",
        found.summary(),
        &clean[at.saturating_sub(80)..(at + 80).min(clean.len())]
    );
    let rate = throughput(&text, 5, redact);
    report.row(
        "redaction, ordinary text (16 MiB: prose, code, logs; 2 known values), MB/s",
        format!("{rate:.0}"),
        "≥ 100",
        Some(rate >= 100.0),
    );
    let dense: String = text
        .lines()
        .take(200_000)
        .enumerate()
        .map(|(i, l)| match i % 4 {
            0 => format!("{l} password={i}x\n"),
            1 => format!("{l} AKIA{:016}\n", i),
            2 => format!("{l} token: ghp_{:036}\n", i),
            _ => format!("{l} https://u:p{i}@host/x\n"),
        })
        .collect();
    let rate = throughput(&dense, 5, redact);
    report.row(
        "redaction, a secret on every line, MB/s",
        format!("{rate:.0}"),
        "-",
        None,
    );
    // Inputs built to make a backtracking matcher, or a rule that rescans
    // its run at every trigger, go quadratic: 10 times the input must take
    // about 10 times as long (more where 1 MiB fits in a cache and 10 MiB
    // does not, or when other load comes and goes; quadratic is 100).
    let hostile = |n: usize| {
        let fill = |unit: &str| unit.repeat(n / unit.len());
        vec![
            fill("AKIA"),
            fill("-----BEGIN"),
            fill("-----BEGIN RSA PRIVATE KEY-----"),
            fill("-----END RSA PRIVATE KEY-----\n"),
            fill("eyJ"),
            fill("eyJaaaaaaaaaa."),
            fill("sk-"),
            fill("ghp_"),
            fill("password:"),
            fill("token: a "),
            fill("https://a"),
            fill("sk-bench-0123"),
            format!("password=\"{}", "a".repeat(n)),
            format!("{}\n-----END RSA PRIVATE KEY-----", "A\n".repeat(n / 2)),
        ]
    };
    let (small, large) = (hostile(1 << 20), hostile(10 << 20));
    let mut worst_rate = (f64::MAX, String::new());
    let mut worst_ratio = (0.0f64, String::new());
    for (s, l) in small.iter().zip(&large) {
        let name = format!("{:?}", &l[..12]);
        let (rs, rl) = (throughput(s, 7, redact), throughput(l, 5, redact));
        if rl < worst_rate.0 {
            worst_rate = (rl, name.clone());
        }
        // Time ratio for 10x the bytes.
        let ratio = 10.0 * rs / rl;
        if ratio > worst_ratio.0 {
            worst_ratio = (ratio, name);
        }
    }
    report.row(
        format!(
            "redaction, slowest of {} adversarial 10 MiB inputs ({}…), MB/s",
            large.len(),
            worst_rate.1
        ),
        format!("{:.0}", worst_rate.0),
        "-",
        None,
    );
    report.row(
        format!(
            "  time for 10 MiB over time for 1 MiB, worst input ({}…)",
            worst_ratio.1
        ),
        format!("{:.1}", worst_ratio.0),
        "≤ 40 (linear: 10, quadratic: 100)",
        Some(worst_ratio.0 <= 40.0),
    );
    // Per tool round: one result redacted (output, error, metadata).
    for (label, size, budget) in [
        ("2 KiB", 2048, Some(0.02)),
        ("64 KiB (the output cap)", 65536, Some(0.65)),
    ] {
        let mut cut = size.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let output = text[..cut].to_string();
        // The best of 20 batches: the least disturbed by other load.
        let runs = 100usize;
        let mut each = f64::MAX;
        for _ in 0..20 {
            let results: Vec<ToolResult> = (0..runs)
                .map(|_| ToolResult {
                    metadata: Some(serde_json::json!({"exit_code": 0, "duration_ms": 3})),
                    ..ToolResult::ok(output.clone())
                })
                .collect();
            let start = Instant::now();
            for mut res in results {
                std::hint::black_box(res.redact(&r));
            }
            each = each.min(start.elapsed().as_secs_f64() * 1e3 / runs as f64);
        }
        report.row(
            format!("  redaction per tool round, a {label} result"),
            format!("{:.1} µs", each * 1e3),
            &budget.map_or("-".to_string(), |b| format!("≤ {} µs", b * 1e3)),
            budget.map(|b| each <= b),
        );
    }
    let mut cfg = latchclaw::config::Config::from_text(
        "[security]\nsecret_env = [\"LC_BENCH_A\", \"LC_BENCH_B\"]\n",
        Path::new("/nonexistent/config.toml"),
        PathBuf::from("/nonexistent"),
    )
    .unwrap();
    cfg.security.secret_env.push("HOME".into());
    let runs = 2000;
    let start = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(Redactor::from_config(&cfg));
    }
    let each = start.elapsed().as_secs_f64() * 1e6 / runs as f64;
    report.row(
        "  redactor set-up, once per process (reads the named variables)",
        format!("{each:.1} µs"),
        "-",
        None,
    );
}

fn first_line_of(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once([':', '=']))
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
    })
}

fn machine() -> String {
    let cpu = first_line_of("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = first_line_of("/proc/meminfo", "MemTotal")
        .and_then(|v| v.trim_end_matches(" kB").trim().parse::<f64>().ok())
        .map_or("?".into(), |kib| format!("{:.0} GiB", kib / MIB));
    let os = first_line_of("/etc/os-release", "PRETTY_NAME").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let rustc = Command::new("rustc")
        .arg("-V")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {mem} RAM; {os}, Linux {}; {rustc}",
        kernel.trim()
    )
}
