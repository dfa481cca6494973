//! The command line. `flags` defines every command and flag once; `parse`
//! turns the raw arguments into a typed [`parse::Command`]; `help` and
//! `complete` are generated from the definitions; `cmd/` holds one file per
//! command group, each a plain function over its options.

pub(crate) mod approve;
mod cmd;
mod complete;
mod ctx;
pub mod flags;
mod help;
mod lock;
mod onboard;
pub mod parse;
pub(crate) mod toml_text;
pub(crate) mod workspace;

use crate::error::{Result, exit};
use crate::security::redact::Redactor;
use ctx::Ctx;
use parse::Command;
use std::ffi::OsString;
use std::sync::Arc;

/// Entry point: parses, dispatches, and returns the exit code. `redactor`
/// is the process's (main.rs made it and gave it to the logger); the
/// command adds the secrets of the config it loads.
pub fn run(argv: impl IntoIterator<Item = OsString>, redactor: &Arc<Redactor>) -> Result<i32> {
    let argv: Vec<OsString> = argv.into_iter().collect();
    // The completion scripts' callback (hidden: not a command in `flags`).
    let mut first = argv.iter().peekable();
    while first.next_if(|a| *a == "--config").is_some() {
        first.next();
    }
    if first.peek().is_some_and(|a| *a == complete::CALLBACK) {
        return Ok(complete::callback(&argv));
    }
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
                "no help for `{}`: not a command;{} see `latchclaw --help`",
                words.join(" "),
                parse::command_hint(&words)
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
        Command::ToolStats { since, json } => cmd::tool::stats(&ctx, since, json),
        Command::ToolRun {
            tool,
            args,
            workspace,
        } => cmd::tool::run(&ctx, &tool, args.as_deref(), workspace.as_deref()),
        Command::PolicyCheck {
            tool,
            args,
            autonomy,
            workspace,
        } => cmd::tool::policy_check(&ctx, &tool, args.as_deref(), autonomy, workspace.as_deref()),
        Command::PolicyShow { json } => cmd::tool::policy_show(&ctx, json),
        Command::PolicyReplay { since, json } => cmd::policy::replay(&ctx, since.as_deref(), json),
        Command::Agent(a) => cmd::agent::run(&ctx, *a),
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
        Command::MemorySummarize {
            period,
            key,
            conversation,
            redo,
            json,
        } => cmd::memory::summarize(
            &ctx,
            period,
            key.as_deref(),
            conversation.as_deref(),
            redo,
            json,
        ),
        Command::ReceiptList { json, jsonl } => cmd::receipt::list(&ctx, json, jsonl),
        Command::ReceiptVerify { json, expect } => cmd::receipt::verify(&ctx, json, &expect),
        Command::ReceiptHead { json } => cmd::receipt::head(&ctx, json),
        Command::ReceiptRepair { json } => cmd::receipt::repair(&ctx, json),
        Command::ReceiptAnchor { json, reset } => cmd::receipt::anchor(&ctx, json, reset),
        Command::Estop { clear } => cmd::estop::run(&ctx, clear),
        Command::EstopStatus { json } => cmd::estop::status(&ctx, json),
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
        #[cfg(feature = "plugins")]
        Command::PluginList { json } => cmd::plugin::list(&ctx, json),
        #[cfg(feature = "plugins")]
        Command::PluginShow { name, json } => cmd::plugin::show(&ctx, &name, json),
        #[cfg(feature = "plugins")]
        Command::PluginInstall { path, json } => cmd::plugin::install(&ctx, &path, json),
        #[cfg(feature = "plugins")]
        Command::PluginRemove { name, json } => cmd::plugin::remove(&ctx, &name, json),
        #[cfg(feature = "plugins")]
        Command::PluginApprove { name, json } => cmd::plugin::approve(&ctx, &name, json),
        #[cfg(feature = "mcp")]
        Command::McpList { json } => cmd::mcp::list(&ctx, json),
        #[cfg(feature = "mcp")]
        Command::McpTools { name, json } => cmd::mcp::tools(&ctx, &name, json),
        #[cfg(feature = "mcp")]
        Command::McpTest { name, json } => cmd::mcp::test(&ctx, &name, json),
        #[cfg(feature = "mcp")]
        Command::McpApprove { name, json } => cmd::mcp::approve(&ctx, &name, json),
        #[cfg(feature = "sop")]
        Command::SopList { json } => cmd::sop::list(&ctx, json),
        #[cfg(feature = "sop")]
        Command::SopValidate { name, json } => cmd::sop::validate(&ctx, name.as_deref(), json),
        #[cfg(feature = "sop")]
        Command::SopRun {
            name,
            json,
            lock,
            timeout,
            workspace,
        } => cmd::sop::run(
            &ctx,
            &name,
            cmd::sop::Opts {
                json,
                lock,
                timeout,
                ..Default::default()
            },
            workspace.as_deref(),
        ),
        #[cfg(feature = "sop")]
        Command::SopResume {
            run,
            json,
            lock,
            timeout,
            retry_step,
            skip_step,
        } => cmd::sop::resume(
            &ctx,
            &run,
            cmd::sop::Opts {
                json,
                lock,
                timeout,
                retry_step,
                skip_step,
            },
        ),
        #[cfg(feature = "sop")]
        Command::SopDecide {
            run,
            approve,
            yes,
            json,
        } => cmd::sop::decide(&ctx, &run, approve, yes, json),
        #[cfg(feature = "sop")]
        Command::SopRuns { limit, json } => cmd::sop::runs(&ctx, limit, json),
        Command::CodeStats { json } => cmd::code::stats(&ctx, json),
        Command::CodeFailures { limit, json } => cmd::code::failures(&ctx, limit, json),
        #[cfg(feature = "sop")]
        Command::SopShow { run, json } => cmd::sop::show(&ctx, &run, json),
        Command::TaskList {
            conversation,
            limit,
            json,
        } => cmd::task::list(&ctx, conversation.as_deref(), limit, json),
        Command::TaskShow { path, json } => cmd::task::show(&ctx, &path, json),
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
        // Commands of a feature this build lacks: `parse` refused them
        // (known, their options checked, then refused with how to get them).
        #[cfg(not(all(
            feature = "gateway",
            feature = "mcp",
            feature = "plugins",
            feature = "sop"
        )))]
        _ => Err(crate::error::Error::new(
            crate::error::Kind::Internal,
            "a command of a feature not in this build got past the parser".to_string(),
        )),
    }
}
