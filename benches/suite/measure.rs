//! Whole-process measurements: wall time from spawn to exit and peak RSS.
//!
//! Wall time comes from `hyperfine` when it is on PATH (`-N`: no shell in
//! between), else from a built-in timer (spawn, `wait4`). Peak RSS comes from
//! `/usr/bin/time -v` when installed, else from the child's `ru_maxrss`.
//! `LATCHCLAW_BENCH_BUILTIN=1` forces the built-in timer and RSS reader.
// wait4(2) for the child's peak RSS (libc).
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub const WARMUP: usize = 5;
pub const RUNS: usize = 41;

/// One command line to measure, with the state dir it runs against.
pub struct Cmd<'a> {
    pub program: &'a str,
    pub args: Vec<String>,
    pub home: &'a Path,
}

impl Cmd<'_> {
    /// The command itself, output captured (for set-up and checks).
    pub fn command_for_setup(&self) -> Command {
        let mut c = self.command(self.program);
        c.args(&self.args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("LATCHCLAW_HOME", self.home.join(".latchclaw"))
            .env("HOME", self.home)
            .env_remove("LATCHCLAW_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }
}

pub struct Figure {
    /// Every timed run, in milliseconds.
    pub times: Vec<f64>,
    pub rss_mib: f64,
}

impl Figure {
    pub fn median(&self) -> f64 {
        percentile(&self.times, 50)
    }
}

pub fn percentile(v: &[f64], p: usize) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) * p).div_ceil(100)]
}

pub struct Meter {
    hyperfine: Option<PathBuf>,
    gnu_time: Option<PathBuf>,
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

impl Meter {
    pub fn new() -> Meter {
        if std::env::var_os("LATCHCLAW_BENCH_BUILTIN").is_some() {
            return Meter {
                hyperfine: None,
                gnu_time: None,
            };
        }
        Meter {
            hyperfine: which("hyperfine"),
            gnu_time: Some(PathBuf::from("/usr/bin/time")).filter(|p| p.is_file()),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "wall time: {}; peak RSS: {}",
            match &self.hyperfine {
                Some(h) => Command::new(h)
                    .arg("--version")
                    .output()
                    .map(|o| format!("{} -N", String::from_utf8_lossy(&o.stdout).trim()))
                    .unwrap_or_else(|_| "hyperfine -N".into()),
                None =>
                    "built-in timer (install hyperfine for its figures: apt-get install hyperfine)"
                        .into(),
            },
            if self.gnu_time.is_some() {
                "/usr/bin/time -v"
            } else {
                "wait4 ru_maxrss (install GNU time for its figures: apt-get install time)"
            }
        )
    }

    /// The median-ready timings of `runs` runs after a warm-up, and the
    /// largest peak RSS seen.
    pub fn measure(&self, cmd: &Cmd, runs: usize) -> Figure {
        let (times, builtin_rss) = match &self.hyperfine {
            Some(h) => (hyperfine(h, cmd, runs), 0),
            None => {
                for _ in 0..WARMUP {
                    run_waited(cmd);
                }
                let samples: Vec<(f64, i64)> = (0..runs).map(|_| run_waited(cmd)).collect();
                (
                    samples.iter().map(|s| s.0).collect(),
                    samples.iter().map(|s| s.1).max().unwrap_or(0),
                )
            }
        };
        let rss_kib = match &self.gnu_time {
            Some(t) => (0..5).map(|_| gnu_time_rss(t, cmd)).max().unwrap_or(0),
            None if builtin_rss > 0 => builtin_rss,
            None => (0..5).map(|_| run_waited(cmd).1).max().unwrap_or(0),
        };
        Figure {
            times,
            rss_mib: rss_kib as f64 / 1024.0,
        }
    }
}

/// Wall times of `cmds` run in turn, `runs` rounds after a warm-up (one
/// list per command, in round order): a figure made of several commands
/// (a difference) is then taken round by round, each round under the
/// same load.
pub fn interleaved(cmds: &[&Cmd], runs: usize) -> Vec<Vec<f64>> {
    for _ in 0..WARMUP {
        for c in cmds {
            run_waited(c);
        }
    }
    let mut out = vec![Vec::with_capacity(runs); cmds.len()];
    for _ in 0..runs {
        for (c, times) in cmds.iter().zip(out.iter_mut()) {
            times.push(run_waited(c).0);
        }
    }
    out
}

/// Wall times of `a` and `b` run alternately, `runs` times each after a
/// warm-up, so that the machine's load falls on both alike (always the
/// built-in timer: hyperfine runs one command's runs back to back).
pub fn paired(a: &Cmd, b: &Cmd, runs: usize) -> (Vec<f64>, Vec<f64>) {
    for _ in 0..WARMUP {
        run_waited(a);
        run_waited(b);
    }
    (0..runs)
        .map(|_| (run_waited(a).0, run_waited(b).0))
        .unzip()
}

/// Runs once, reaped by `wait4` for its rusage: (wall ms, peak RSS KiB).
// The child is reaped by `wait4`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run_waited(cmd: &Cmd) -> (f64, i64) {
    let start = Instant::now();
    let child = cmd.command(cmd.program).args(&cmd.args).spawn().unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain integers, valid all-zero.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 reaps our own child and fills the two out-parameters.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let wall = start.elapsed().as_secs_f64() * 1e3;
    assert!(pid > 0, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{} {:?} failed with status {status}",
        cmd.program,
        cmd.args
    );
    (wall, usage.ru_maxrss)
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn hyperfine(hyperfine: &Path, cmd: &Cmd, runs: usize) -> Vec<f64> {
    let json = cmd.home.join("hyperfine.json");
    let line = std::iter::once(cmd.program.to_string())
        .chain(cmd.args.iter().cloned())
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    let status = cmd
        .command(&hyperfine.to_string_lossy())
        .args(["-N", "--style", "none", "--warmup"])
        .arg(WARMUP.to_string())
        .arg("--runs")
        .arg(runs.to_string())
        .arg("--export-json")
        .arg(&json)
        .arg(&line)
        .status()
        .unwrap();
    assert!(status.success(), "hyperfine failed on {line}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let times = v["results"][0]["times"]
        .as_array()
        .expect("hyperfine times");
    times.iter().map(|t| t.as_f64().unwrap() * 1e3).collect()
}

fn gnu_time_rss(time: &Path, cmd: &Cmd) -> i64 {
    let out = cmd.home.join("gnu-time.txt");
    let status = cmd
        .command(&time.to_string_lossy())
        .arg("-v")
        .arg("-o")
        .arg(&out)
        .arg(cmd.program)
        .args(&cmd.args)
        .status()
        .unwrap();
    assert!(status.success(), "{} {:?} failed", cmd.program, cmd.args);
    std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes):")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("GNU time -v reports the maximum resident set size")
}
