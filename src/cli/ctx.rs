//! What every command gets (`Ctx`: the config path, the command line, the
//! process's redactor) and the output helpers the commands share. A leaf
//! of `cli`: the dispatch (`mod.rs`) makes a `Ctx`, each `cmd/` file uses it.

use crate::config::Config;
use crate::error::Result;
use crate::memory::Memory;
use crate::security::redact::Redactor;
use std::path::PathBuf;
use std::sync::Arc;

/// What every command gets besides its own options.
pub struct Ctx {
    /// `--config PATH`.
    pub config: Option<PathBuf>,
    /// The command line as given, for the run record.
    pub line: String,
    /// The process's redactor (shared with the logger): every holder of
    /// it — memory, providers, the runtime, the gateway — gets this one.
    pub redactor: Arc<Redactor>,
    /// `agent -q`: no notes on stderr.
    pub quiet: bool,
    /// Set once the config's notes were printed (a command may load it
    /// more than once).
    pub notes_said: std::cell::Cell<bool>,
}

impl Ctx {
    /// A provider name given on the command line, the built-in mock's old
    /// name resolved (with its note, unless quiet).
    pub fn provider_name<'n>(&self, cfg: &Config, name: &'n str) -> &'n str {
        let (name, note) = cfg.provider_name(name);
        if let Some(n) = note
            && !self.quiet
        {
            eprintln!("latchclaw: note: {n}");
        }
        name
    }

    pub fn load_config(&self) -> Result<Config> {
        let cfg = Config::load(self.config.as_deref())?;
        // `[tools."NAME"]` of a name no built-in has: a plugin's tool, which
        // only the state dir knows.
        let mut unknown = crate::plugins::unknown_config_tools(&cfg);
        // What only the option tables know: a rule's flags and options.
        let at = match &cfg.policy.file {
            Some(f) => format!("{}: rules", f.display()),
            None => "policy.rules".to_string(),
        };
        unknown.extend(crate::security::policy::check_rules(&cfg.policy.rules, &at));
        if !unknown.is_empty() {
            return Err(crate::config::ConfigErrors {
                file: cfg.config_path.display().to_string(),
                errors: unknown,
            }
            .into());
        }
        if !self.quiet && !self.notes_said.replace(true) {
            for n in &cfg.notes {
                eprintln!("latchclaw: note: {n}");
            }
        }
        // From here on, log lines, errors and memory read-outs are scrubbed
        // of the secrets this config names.
        for name in self.redactor.learn_config(&cfg) {
            log::info!(
                target: "event::secret_too_short",
                "{name} holds fewer than {} bytes: not redacted by exact match",
                crate::security::redact::MIN_SECRET_BYTES
            );
        }
        log::info!(target: "event::startup", "version={}", env!("CARGO_PKG_VERSION"));
        log::info!(target: "event::config_path", "path={} loaded={}", cfg.config_path.display(), cfg.source.is_some());
        log::info!(target: "event::workspace_path", "path={}", cfg.workspace_dir.display());
        Ok(cfg)
    }

    pub fn open_memory(&self) -> Result<Memory> {
        let cfg = self.load_config()?;
        Memory::open(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            Arc::clone(&self.redactor),
        )
    }

    /// The memory database for a command that only reads it: `None` when
    /// there is none yet (nothing is created).
    pub fn read_memory(&self) -> Result<Option<Memory>> {
        let cfg = self.load_config()?;
        Memory::open_existing(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            Arc::clone(&self.redactor),
        )
    }
}

/// Every `--json` output: one compact object (or array) on one line, its
/// hidden characters written as `\uXXXX` (the same value to a parser).
pub fn print_json(v: &impl serde::Serialize) {
    let text = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    println!("{}", crate::util::json_visible(&text));
}

/// Rows under a header, each column as wide as its widest cell (in chars)
/// so long names do not push the rest out of line; the last column is not
/// padded. `right` lists the columns aligned right (numbers).
pub fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut out = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i == last {
                out.push_str(c);
            } else if right.contains(&i) {
                out.push_str(&format!("{}{c}  ", " ".repeat(pad)));
            } else {
                out.push_str(&format!("{c}{}  ", " ".repeat(pad)));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push('\n');
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// `1 receipt`, `2 receipts`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    #[test]
    fn table_columns_line_up_with_long_cells() {
        let t = super::table(
            &["ID", "N", "NOTE"],
            &[
                vec!["a".into(), "1".into(), "x".into()],
                vec!["a-much-longer-id".into(), "123".into(), "y".into()],
            ],
            &[1],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ID                  N  NOTE");
        assert_eq!(lines[1], "a                   1  x");
        assert_eq!(lines[2], "a-much-longer-id  123  y");
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(super::count(1u32, "receipt"), "1 receipt");
        assert_eq!(super::count(0u32, "receipt"), "0 receipts");
        assert_eq!(super::count(3u32, "turn"), "3 turns");
    }
}
