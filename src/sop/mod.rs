//! SOPs: deterministic workflows in `<workspace>/sops/NAME/SOP.toml` and
//! `<state>/sops/NAME/SOP.toml` (the state directory's wins). `format.rs`
//! reads and checks a file in one pass; `run.rs` runs one, its state in
//! SQLite (`memory::sop_runs`) written before each step's effect, its tool
//! steps through `runtime::execute_tool` (the gate, approvals, receipts),
//! parked at approvals and resumed exactly once.

mod format;
mod run;

pub use format::{Sop, valid_id};
pub use run::{Operator, Report, Resume, Runner, new_run_id, run_lock, run_of_conversation};

use crate::config::Config;
use std::path::{Path, PathBuf};

/// Where SOPs are found, lowest precedence first.
pub fn dirs(cfg: &Config) -> Vec<PathBuf> {
    vec![cfg.workspace_dir.join("sops"), cfg.state_dir.join("sops")]
}

/// One SOP file found on disk (not yet checked).
#[derive(Debug, Clone)]
pub struct Found {
    pub name: String,
    pub path: PathBuf,
}

/// Every `NAME/SOP.toml`, by name; a state-dir SOP hides a workspace one.
pub fn found(cfg: &Config) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    // In the workspace, not through a link: a model may make links there
    // (`format::read` refuses them too). The state directory's are the
    // operator's own.
    let real = |p: &Path, dir: bool| {
        std::fs::symlink_metadata(p).is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    for dir in dirs(cfg) {
        let in_workspace = dir.starts_with(&cfg.workspace_dir);
        if in_workspace && !real(&dir, true) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        crate::util::sort::sort(&mut names);
        for name in names {
            let path = dir.join(&name).join("SOP.toml");
            let usable = if in_workspace {
                real(&dir.join(&name), true) && real(&path, false)
            } else {
                path.is_file()
            };
            if !usable {
                continue;
            }
            out.retain(|f| f.name != name);
            out.push(Found { name, path });
        }
    }
    crate::util::sort::sort_by(&mut out, |a, b| a.name.cmp(&b.name));
    out
}

/// The SOP called `name`, read and checked.
pub fn load(cfg: &Config, name: &str) -> crate::error::Result<Sop> {
    use crate::error::Error;
    if !valid_id(name) {
        return Err(Error::usage(format!(
            "\"{}\" is not a SOP name: letters, digits, - and _",
            crate::util::printable(name)
        )));
    }
    let all = found(cfg);
    let Some(f) = all.iter().find(|f| f.name == name) else {
        let near = crate::util::suggest::nearest(name, all.iter().map(|f| f.name.as_str()))
            .map(|n| format!(" did you mean \"{n}\"?"))
            .unwrap_or_default();
        return Err(Error::usage(format!(
            "no SOP \"{name}\";{near} SOPs live in {}/NAME/SOP.toml and {}/NAME/SOP.toml \
             (`latchclaw sop list` shows them)",
            cfg.workspace_dir.join("sops").display(),
            cfg.state_dir.join("sops").display()
        )));
    };
    check(cfg, f).map_err(|errors| {
        Error::usage(format!(
            "SOP \"{name}\" is invalid ({} error{}):\n  {}",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            errors.join("\n  ")
        ))
    })
}

/// Reads and checks one found file: every error at once.
pub fn check(cfg: &Config, f: &Found) -> Result<Sop, Vec<String>> {
    format::load(&f.path, &f.name, cfg)
}
