//! The command line. `flags` defines every command and flag once; `parse`
//! turns the raw arguments into a typed [`parse::Command`]; `help` and
//! `complete` are generated from the definitions; `cmd/` holds one file per
//! command group, each a plain function over its options.

pub(crate) mod approve;
mod cmd;
mod complete;
pub mod flags;
mod help;
mod lock;
mod onboard;
pub mod parse;
pub(crate) mod toml_text;

use crate::config::Config;
use crate::error::{Result, exit};
use crate::memory::Memory;
use crate::security::redact::Redactor;
use parse::Command;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// What every command gets besides its own options.
pub(crate) struct Ctx {
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

/// Entry point: parses, dispatches, and returns the exit code. `redactor`
/// is the process's (main.rs made it and gave it to the logger); the
/// command adds the secrets of the config it loads.
pub fn run(argv: impl IntoIterator<Item = OsString>, redactor: &Arc<Redactor>) -> Result<i32> {
    let argv: Vec<OsString> = argv.into_iter().collect();
    let line = argv
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let inv = parse::parse(argv)?;
    // `-q`: the answer or the error, nothing else on stderr.
    let quiet = matches!(&inv.command, Command::Agent(a) if a.quiet);
    let ctx = Ctx {
        config: inv.config,
        line,
        redactor: Arc::clone(redactor),
        quiet,
        notes_said: std::cell::Cell::new(false),
    };
    match inv.command {
        Command::Missing => {
            eprintln!("{}", help::top());
            Err(crate::error::Error::usage("no command given"))
        }
        Command::Help(words) => match help::for_words(&words) {
            Some(h) => {
                println!("{h}");
                Ok(exit::OK)
            }
            None => Err(crate::error::Error::usage(format!(
                "no help for `{}`: not a command (see `latchclaw --help`)",
                words.join(" ")
            ))),
        },
        Command::Version => {
            println!(
                "latchclaw {}\n{}",
                env!("CARGO_PKG_VERSION"),
                crate::features::line()
            );
            Ok(exit::OK)
        }
        Command::Completions(shell) => {
            print!("{}", complete::script(shell));
            Ok(exit::OK)
        }
        Command::Init { workspace, force } => cmd::config::init(&ctx, workspace, force),
        Command::Onboard(o) => cmd::config::onboard(&ctx, o),
        Command::ConfigValidate => cmd::config::validate(&ctx),
        Command::ConfigShow { json } => cmd::config::show(&ctx, json),
        Command::ProviderList { json } => cmd::provider::list(&ctx, json),
        Command::ProviderTest { name, json } => cmd::provider::test(&ctx, name.as_deref(), json),
        Command::ToolList { json } => cmd::tool::list(&ctx, json),
        Command::ToolRun { tool, args } => cmd::tool::run(&ctx, &tool, args.as_deref()),
        Command::PolicyCheck {
            tool,
            args,
            autonomy,
        } => cmd::tool::policy_check(&ctx, &tool, args.as_deref(), autonomy),
        Command::PolicyShow { json } => cmd::tool::policy_show(&ctx, json),
        Command::Agent(a) => cmd::agent::run(&ctx, a),
        Command::MemoryList { limit, json } => cmd::memory::list(&ctx, limit, json),
        Command::MemorySearch { query, limit, json } => {
            cmd::memory::search(&ctx, &query, limit, json)
        }
        Command::MemoryShow { id, json } => cmd::memory::show(&ctx, &id, json),
        Command::MemoryClear { yes } => cmd::memory::clear(&ctx, yes),
        Command::MemoryNotes {
            category,
            limit,
            json,
        } => cmd::memory::notes(&ctx, category.as_deref(), limit, json),
        Command::MemoryForget { id } => cmd::memory::forget(&ctx, &id),
        Command::ReceiptList { json } => cmd::receipt::list(&ctx, json),
        Command::ReceiptVerify { json, expect } => cmd::receipt::verify(&ctx, json, &expect),
        Command::ReceiptHead { json } => cmd::receipt::head(&ctx, json),
        Command::ReceiptRepair { json } => cmd::receipt::repair(&ctx, json),
        Command::ReceiptAnchor { json, reset } => cmd::receipt::anchor(&ctx, json, reset),
        Command::Estop { clear } => cmd::estop::run(&ctx, clear),
        #[cfg(feature = "gateway")]
        Command::Gateway { bind } => {
            crate::gateway::run(ctx.load_config()?, bind, Arc::clone(&ctx.redactor))
        }
        #[cfg(feature = "gateway")]
        Command::GatewayToken { rotate } => {
            crate::gateway::token(&ctx.load_config()?, rotate, &ctx.redactor)
        }
        Command::ApprovalsList { all, json } => cmd::approvals::list(&ctx, all, json),
        Command::Approve { id, yes } => cmd::approvals::decide(&ctx, &id, true, yes),
        Command::Deny { id } => cmd::approvals::decide(&ctx, &id, false, false),
        Command::RunsList { limit, json } => cmd::approvals::runs(&ctx, limit, json),
        Command::PromptShow {
            message,
            conversation,
            json,
        } => cmd::prompt::show(&ctx, message.as_deref(), conversation.as_deref(), json),
        Command::SkillList { json } => cmd::skill::list(&ctx, json),
        Command::SkillShow { name, json } => cmd::skill::show(&ctx, &name, json),
        #[cfg(feature = "gateway")]
        Command::ServiceInstall { bind, print, force } => {
            cmd::service::install(&ctx, bind, print, force)
        }
        #[cfg(feature = "gateway")]
        Command::ServiceStart => cmd::service::start(&ctx),
        #[cfg(feature = "gateway")]
        Command::ServiceStop => cmd::service::stop(&ctx),
        #[cfg(feature = "gateway")]
        Command::ServiceStatus => cmd::service::status(&ctx),
        #[cfg(feature = "gateway")]
        Command::ServiceUninstall => cmd::service::uninstall(&ctx),
        // Known, parsed and checked like any command, then refused.
        #[cfg(not(feature = "gateway"))]
        c @ (Command::Gateway { .. }
        | Command::GatewayToken { .. }
        | Command::ServiceInstall { .. }
        | Command::ServiceStart
        | Command::ServiceStop
        | Command::ServiceStatus
        | Command::ServiceUninstall) => {
            let path = match c {
                Command::GatewayToken { .. } => "gateway token",
                Command::ServiceInstall { .. } => "service install",
                Command::ServiceStart => "service start",
                Command::ServiceStop => "service stop",
                Command::ServiceStatus => "service status",
                Command::ServiceUninstall => "service uninstall",
                _ => "gateway",
            };
            Err(crate::features::command_not_built(path, "gateway"))
        }
    }
}

/// Every `--json` output: one compact object (or array) on one line, its
/// hidden characters written as `\uXXXX` (the same value to a parser).
pub(crate) fn print_json(v: &impl serde::Serialize) {
    let text = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    println!("{}", crate::util::json_visible(&text));
}

/// Rows under a header, each column as wide as its widest cell (in chars)
/// so long names do not push the rest out of line; the last column is not
/// padded. `right` lists the columns aligned right (numbers).
pub(crate) fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
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

pub(crate) use crate::util::one_line;

/// `1 receipt`, `2 receipts`.
pub(crate) fn count(n: impl Into<u64>, noun: &str) -> String {
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
