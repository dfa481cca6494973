//! Test harness: runs the real `latchclaw` binary in a throwaway home, and
//! the helpers the test files share (processes by marker, waiting, skips,
//! git, files).
#![allow(dead_code)]
// `setsid` in a pre_exec hook (libc).
#![allow(unsafe_code)]

use serde_json::Value;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_latchclaw");

/// `channels.cli.tools_allow` with the everyday tools: time, the file
/// tools, shell and memory_search.
pub const BASIC_TOOLS: &str = "tools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\"]";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A new empty directory `<tmp>/<prefix>-<pid>-<n>`, canonical (the test
/// compares paths the binary resolved).
pub fn temp_root(prefix: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::canonicalize(&root).unwrap()
}

/// A temporary `HOME` holding the state dir and the workspace.
pub struct Env {
    pub root: PathBuf,
    pub home: PathBuf,
    pub state: PathBuf,
    pub ws: PathBuf,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// A TOML string literal for a path.
pub fn lit(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Env {
    pub fn new() -> Env {
        let root = temp_root("latchclaw-it");
        let home = root.join("home");
        let state = home.join(".latchclaw");
        let ws = home.join("ws");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        Env {
            root,
            home,
            state,
            ws,
        }
    }

    /// Writes `config.toml`: the workspace, then `extra` (top-level keys
    /// first, then tables).
    pub fn config(&self, extra: &str) -> &Env {
        let text = format!("workspace_dir = {}\n{extra}\n", lit(&self.ws));
        std::fs::write(self.state.join("config.toml"), text).unwrap();
        self
    }

    /// Config whose default provider is the mock with `fixture` (and the
    /// request recorder on).
    pub fn mock(&self, fixture_name: &str, extra_top: &str, extra_tables: &str) -> &Env {
        self.config(&format!(
            "default_provider = \"m\"\n{extra_top}\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\nrecord_requests = {}\n{extra_tables}",
            lit(&fixture(fixture_name)),
            lit(&self.root.join("requests.jsonl"))
        ))
    }

    /// The binary with `args` in this home, the log settings of the
    /// environment left out; stdio and the terminal are the caller's.
    pub fn base_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        // In the workspace, as a user would be, and not in the repository
        // the tests run from: a run inside a git work tree works there
        // (README, "The workspace").
        let here = if self.ws.is_dir() {
            &self.ws
        } else {
            &self.root
        };
        c.args(args)
            .current_dir(here)
            .env("LATCHCLAW_HOME", &self.state)
            .env("HOME", &self.home)
            .env_remove("LATCHCLAW_LOG")
            .env_remove("LATCHCLAW_LOG_LEVEL")
            .env_remove("RUST_LOG");
        // The stop signals as a terminal gives them: latchclaw keeps one it
        // finds ignored (nohup), and a test run started in the background
        // or under nohup would pass that on to every test's Ctrl-C.
        // SAFETY: signal(2) is async-signal-safe and touches no Rust state.
        unsafe {
            c.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        c
    }

    /// `base_command` with stdin from /dev/null and no controlling terminal.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = self.base_command(args);
        c.stdin(Stdio::null());
        // No controlling terminal, as under cron: approvals must answer no.
        // SAFETY: setsid is async-signal-safe and touches no Rust state.
        unsafe {
            c.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Run {
        self.command(args).output().unwrap().into()
    }

    /// `run` with `input` piped to stdin.
    pub fn run_with_stdin(&self, args: &[&str], input: &str) -> Run {
        use std::io::Write;
        let mut c = self.command(args);
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap().into()
    }

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap().into()
    }

    /// Every line of the receipts log, parsed.
    pub fn receipt_lines(&self) -> Vec<Value> {
        json_lines(&self.state.join("tool_receipts.log"))
    }

    /// One receipt per finished call: its outcome (allowed, approved,
    /// failed or denied). The `started` receipts written before a tool
    /// runs are left out; `receipt_lines` has them.
    pub fn receipts(&self) -> Vec<Value> {
        let mut all = self.receipt_lines();
        all.retain(|r| r["status"] != "started");
        all
    }

    /// Requests the mock provider recorded, in order.
    pub fn requests(&self) -> Vec<Value> {
        json_lines(&self.root.join("requests.jsonl"))
    }

    /// `tool run shell` with `command`, not started yet (to signal it, or
    /// to run something meanwhile).
    pub fn shell_command(&self, command: &str) -> Command {
        let args = serde_json::json!({ "command": command }).to_string();
        self.command(&["tool", "run", "shell", "--json", &args])
    }

    /// `tool run shell` with `command`, and its parsed JSON result.
    pub fn shell(&self, command: &str) -> (Run, Value) {
        self.tool("shell", serde_json::json!({ "command": command }))
    }

    /// `tool run NAME --json ARGS`, and its parsed JSON result.
    pub fn tool(&self, name: &str, args: Value) -> (Run, Value) {
        self.json(&["tool", "run", name, "--json", &args.to_string()])
    }

    /// The parsed `--json` output of a run.
    pub fn json(&self, args: &[&str]) -> (Run, Value) {
        let r = self.run(args);
        let v = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
        (r, v)
    }
}

/// Every line of a JSON-lines file, parsed; none when it does not exist.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// A tool result's `output`, "" when it has none.
pub fn output(v: &Value) -> &str {
    v["output"].as_str().unwrap_or("")
}

/// Writes each `(relative path, text)` under `root`, making the directories.
pub fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (f, text) in files {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// Makes `dir` a repository with everything in it committed.
pub fn commit_all(dir: &Path) {
    git(dir, &["init", "-q"]);
    git(dir, &["add", "."]);
    git(
        dir,
        &[
            "-c",
            "user.name=a",
            "-c",
            "user.email=b@c",
            "commit",
            "-qm",
            "one",
        ],
    );
}

/// Runs git in `dir` with no system or global config (`HOME` is `dir`),
/// and fails the test when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

// ---- processes ----

/// A live process `processes_with` found.
#[derive(Debug, Clone)]
pub struct Process {
    pub pid: i32,
    /// Its arguments joined by spaces.
    pub cmdline: String,
}

/// Live processes whose command line holds `marker` (an unusual number a
/// test gives its `sleep`), leaving out this test binary and the programs
/// whose own arguments name the marker: any `latchclaw` (its `--json`
/// holds the command it runs) and cargo.
pub fn processes_with(marker: &str) -> Vec<Process> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        if name == me {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        let program = raw.split(|b| *b == 0).next().unwrap_or_default();
        let program = Path::new(std::ffi::OsStr::from_bytes(program))
            .file_name()
            .unwrap_or_default();
        if cmdline.contains(marker) && program != "latchclaw" && program != "cargo" {
            found.push(Process { pid, cmdline });
        }
    }
    found
}

/// Waits (up to `within`) until a process holding `marker` runs, and
/// returns the ones that do.
pub fn wait_for_process(marker: &str, within: Duration) -> Vec<Process> {
    let mut found = Vec::new();
    wait_until(
        within,
        &format!("no process with {marker:?} started"),
        || {
            found = processes_with(marker);
            !found.is_empty()
        },
    );
    found
}

// ---- waiting ----

/// Polls `ready` every 20 ms until it says true or `within` has passed;
/// whether it did.
pub fn eventually(within: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `eventually`, failing the test with `what` when `ready` never says true.
pub fn wait_until(within: Duration, what: &str, ready: impl FnMut() -> bool) {
    assert!(eventually(within, ready), "{what} within {within:?}");
}

// ---- skips ----

/// Says that the running test cannot do its work on this machine, and why:
/// one line `SKIPPED: <test>: <reason>` on stderr, written past the test
/// harness's capture so that a skip never passes silently
/// (`cargo test 2>&1 | grep -c '^SKIPPED: '` counts them). The caller
/// returns after it: `return common::skip("no Landlock");`. With
/// `LATCHCLAW_TESTS_NO_SKIP` set (a machine that must run everything) the
/// skip fails the test instead.
pub fn skip(reason: impl std::fmt::Display) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    let line = format!("SKIPPED: {test}: {reason}");
    assert!(
        std::env::var_os("LATCHCLAW_TESTS_NO_SKIP").is_none(),
        "{line} (LATCHCLAW_TESTS_NO_SKIP is set)"
    );
    // Not eprintln!, which the harness holds back for a passing test.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
