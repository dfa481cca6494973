//! Test harness: runs the real `latchclaw` binary in a throwaway home.
#![allow(dead_code)]
// `setsid` in a pre_exec hook (libc).
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

pub const BIN: &str = env!("CARGO_BIN_EXE_latchclaw");

static COUNTER: AtomicUsize = AtomicUsize::new(0);

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
        let root = std::env::temp_dir().join(format!(
            "latchclaw-it-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
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

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("LATCHCLAW_HOME", &self.state)
            .env("HOME", &self.home)
            .env_remove("LATCHCLAW_LOG")
            .env_remove("LATCHCLAW_LOG_LEVEL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
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

    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = self.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap().into()
    }

    /// Every line of the receipts log, parsed.
    pub fn receipt_lines(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state.join("tool_receipts.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// One receipt per finished call: its outcome (allowed, approved,
    /// failed or denied). The `started` receipts written before a tool
    /// runs are left out; `receipt_lines` has them.
    pub fn receipts(&self) -> Vec<serde_json::Value> {
        let mut all = self.receipt_lines();
        all.retain(|r| r["status"] != "started");
        all
    }

    /// Requests the mock provider recorded, in order.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.root.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// `tool run shell` with `command`, and its parsed JSON result.
    pub fn shell(&self, command: &str) -> (Run, serde_json::Value) {
        let args = serde_json::json!({ "command": command }).to_string();
        self.json(&["tool", "run", "shell", "--json", &args])
    }

    /// The parsed `--json` output of a run.
    pub fn json(&self, args: &[&str]) -> (Run, serde_json::Value) {
        let r = self.run(args);
        let v = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
        (r, v)
    }
}
