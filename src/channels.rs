//! Channels carry messages between a person and the runtime. Only `cli`
//! exists so far: one-shot (`agent -m`) and the REPL. Operator approval is a
//! channel matter too: the CLI asks on the controlling terminal.

use crate::error::{Result, exit};
use crate::providers::Provider;
use crate::runtime::{Runtime, TurnOutcome};
use crate::security::Decision;
use serde_json::Value;
use std::io::{BufRead, Write};

pub enum Approval {
    Approved,
    Denied(String),
    /// Nobody to ask (no terminal): the call waits as a pending approval.
    Unavailable(String),
}

/// Asks a person whether a call may run. Only the runtime calls it, so
/// nothing in a model's output can answer for the operator.
pub trait Approver {
    fn ask(&self, tool: &str, decision: &Decision, args: &Value) -> Approval;
}

/// Asks on `/dev/tty`, so it works when stdin is a pipe; with no terminal
/// (cron) the answer is no.
pub struct TtyApprover;

impl Approver for TtyApprover {
    fn ask(&self, tool: &str, d: &Decision, args: &Value) -> Approval {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty");
        let Ok(mut tty) = tty else {
            return Approval::Unavailable(
                "no terminal to ask the operator (unattended run): denied".into(),
            );
        };
        let prompt = format!(
            "\nlatchclaw wants to run a tool\n  tool: {}\n  risk: {}\n  reason: {}\n  arguments: {}\nApprove? [y/N] ",
            crate::util::printable(tool),
            d.risk.as_str(),
            crate::util::printable(&d.reason),
            crate::util::printable(&args.to_string())
        );
        if tty
            .write_all(prompt.as_bytes())
            .and_then(|_| tty.flush())
            .is_err()
        {
            return Approval::Denied("the terminal could not be written: denied".into());
        }
        let mut answer = String::new();
        if std::io::BufReader::new(&tty)
            .read_line(&mut answer)
            .is_err()
        {
            return Approval::Denied("no answer from the terminal: denied".into());
        }
        match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Approval::Approved,
            _ => Approval::Denied("the operator did not approve".into()),
        }
    }
}

/// Reads all of `r`, refusing more than `max` bytes or text that is not UTF-8.
fn read_capped(r: impl std::io::Read, max: usize) -> Result<String> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(crate::error::Error::usage(format!(
            "the input on stdin is larger than max_input_bytes ({max} bytes); \
             send less, or raise max_input_bytes in the config"
        )));
    }
    String::from_utf8(buf)
        .map_err(|_| crate::error::Error::usage("the input on stdin is not UTF-8 text"))
}

/// What a one-shot turn says, from `-m` and stdin:
/// - `-m -`: the message is stdin;
/// - `-m TEXT` with stdin piped: TEXT, then stdin as context;
/// - no `-m` with stdin piped: stdin is the message;
/// - no `-m` on a terminal: `None`, the REPL.
pub fn one_shot_input(message: Option<&str>, max: usize) -> Result<Option<String>> {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    let piped = !stdin.is_terminal();
    let text = match message {
        Some("-") => read_capped(stdin.lock(), max)?.trim_end().to_string(),
        Some(m) if piped => {
            let context = read_capped(stdin.lock(), max.saturating_sub(m.len()))?;
            if context.trim().is_empty() {
                m.to_string()
            } else {
                format!(
                    "{m}\n\nInput (from stdin):\n```\n{}\n```",
                    context.trim_end()
                )
            }
        }
        Some(m) => m.to_string(),
        None if piped => read_capped(stdin.lock(), max)?.trim_end().to_string(),
        None => return Ok(None),
    };
    if text.len() > max {
        return Err(crate::error::Error::usage(format!(
            "the message is larger than max_input_bytes ({max} bytes)"
        )));
    }
    if text.trim().is_empty() {
        return Err(crate::error::Error::usage(
            "the message is empty (give -m MESSAGE, or pipe text into latchclaw agent)",
        ));
    }
    Ok(Some(text))
}

extern "C" fn on_sigint(_: libc::c_int) {
    // Only an atomic store here: the shell runner sees the flag within its
    // poll interval and kills the call's processes outside the handler.
    crate::runtime::CANCEL.store(true, std::sync::atomic::Ordering::SeqCst);
}

pub trait Channel {
    fn name(&self) -> &str;
    /// Runs the channel until it ends; returns the process exit code.
    fn start(&mut self, rt: &Runtime, provider: &dyn Provider) -> Result<i32>;
    fn send(&mut self, conversation_id: &str, message: &str) -> Result<()>;
    fn supports_draft_updates(&self) -> bool {
        false
    }
}

pub struct CliChannel {
    /// `-m`: run this one message and exit.
    pub message: Option<String>,
    pub conversation: Option<String>,
    pub json: bool,
}

impl CliChannel {
    fn deliver(&mut self, outcome: &TurnOutcome) -> Result<()> {
        if self.json {
            println!(
                "{}",
                serde_json::to_string(outcome).unwrap_or_else(|_| "{}".into())
            );
            Ok(())
        } else {
            self.send(&outcome.conversation_id, &outcome.answer)
        }
    }

    fn repl(&mut self, rt: &Runtime, provider: &dyn Provider) -> Result<i32> {
        // Ctrl-C cancels the turn in progress (and kills a running shell
        // command) instead of ending the REPL.
        // SAFETY: the handler only stores to an atomic and calls kill(2),
        // both async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
        }
        eprintln!(
            "latchclaw {} — provider {}; /help for commands, /exit to leave",
            env!("CARGO_PKG_VERSION"),
            provider.name()
        );
        let stdin = std::io::stdin();
        let mut line = String::new();
        loop {
            eprint!("latchclaw> ");
            let _ = std::io::stderr().flush();
            line.clear();
            if stdin.lock().read_line(&mut line)? == 0 {
                eprintln!();
                return Ok(exit::OK);
            }
            let input = line.trim();
            match input.split_once(' ').unwrap_or((input, "")) {
                ("", _) => continue,
                ("/exit" | "/quit", _) => return Ok(exit::OK),
                ("/help", _) => eprintln!(
                    "/tools  enabled tools\n/memory QUERY  search memory\n/policy  autonomy and workspace boundary\n\
                     /new  start a new conversation\n/exit  leave (or Ctrl-D); Ctrl-C cancels a running turn"
                ),
                ("/new", _) => {
                    self.conversation = None;
                    eprintln!("new conversation");
                }
                ("/tools", _) => {
                    for t in rt.tool_specs() {
                        eprintln!("{:14} {}", t.name, t.description);
                    }
                }
                ("/policy", _) => eprintln!("{}", rt.gate.describe(rt.cfg)),
                ("/memory", q) => match rt.memory.search(q, 10) {
                    Ok(hits) if hits.is_empty() => eprintln!("no matches"),
                    Ok(hits) => {
                        for h in hits {
                            eprintln!(
                                "{}  {}  {}: {}",
                                h.conversation_id, h.timestamp, h.role, h.snippet
                            );
                        }
                    }
                    Err(e) => eprintln!("error: {e}"),
                },
                (cmd, _) if cmd.starts_with('/') => {
                    eprintln!("unknown command {cmd}; /help lists them")
                }
                _ => {
                    crate::runtime::CANCEL.store(false, std::sync::atomic::Ordering::SeqCst);
                    match rt.agent_turn(provider, self.conversation.as_deref(), input) {
                        Ok(outcome) => {
                            self.conversation = Some(outcome.conversation_id.clone());
                            self.deliver(&outcome)?;
                        }
                        Err(e) => eprintln!("error: {e}"),
                    }
                }
            }
        }
    }
}

impl Channel for CliChannel {
    fn name(&self) -> &str {
        "cli"
    }

    fn start(&mut self, rt: &Runtime, provider: &dyn Provider) -> Result<i32> {
        log::info!(target: "event::channel_started", "channel={}", self.name());
        match self.message.clone() {
            Some(m) => {
                let outcome = rt.agent_turn(provider, self.conversation.as_deref(), &m)?;
                self.conversation = Some(outcome.conversation_id.clone());
                self.deliver(&outcome)?;
                Ok(outcome.exit_code())
            }
            None => self.repl(rt, provider),
        }
    }

    fn send(&mut self, _conversation_id: &str, message: &str) -> Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{message}")?;
        out.flush()?;
        Ok(())
    }
}
