//! The operator at the terminal: the `Approver` the runtime asks before an
//! `ask` call runs, and the confirmation for `latchclaw approve` — a person,
//! never anything a model wrote.

use crate::control::{RunControl, Stop};
use crate::error::{Error, Result};
use crate::runtime::{Approval, Approver};
use crate::security::Decision;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;

/// How wide a wrapped argument line may be, indentation included.
const WIDTH: usize = 100;

/// Asks on the terminal whether pending approval `id` may be approved (its
/// call was printed in full just before, by `describe`).
pub fn confirm(id: &str) -> Result<()> {
    let question = format!("Approve {id} (shown above)? [y/N] ");
    match ask_tty(&question, &RunControl::new(None)) {
        Approval::Approved => Ok(()),
        Approval::Unavailable(_) => Err(Error::usage(
            "approving needs a terminal to confirm on, or --yes typed by the operator",
        )),
        Approval::Denied(why) => Err(Error::usage(format!("not approved: {why}"))),
    }
}

/// A call as the operator judges it: tool, risk, reason and every
/// argument in full, long values wrapped (never cut: the end of a long
/// command is where a dangerous part hides). Each argument is `key: value`
/// with string values as they are (controls escaped); continuation lines
/// are indented by `indent` plus four spaces.
pub fn describe(tool: &str, risk: &str, reason: &str, args: &Value, indent: &str) -> String {
    let mut out = String::new();
    let mut line = |key: &str, value: &str| {
        let first = format!("{indent}{key}: ");
        let more = format!("{indent}    ");
        let width = |prefix: &str| WIDTH.saturating_sub(prefix.chars().count()).max(20);
        for (i, piece) in wrap(value, width(&first), width(&more)).iter().enumerate() {
            out.push_str(if i == 0 { &first } else { &more });
            out.push_str(piece);
            out.push('\n');
        }
    };
    line("tool", &crate::util::printable(tool));
    line("risk", risk);
    line("reason", &crate::util::printable(reason));
    match args.as_object() {
        Some(m) if m.is_empty() => line("arguments", "none"),
        Some(m) => {
            for (k, v) in m {
                let text = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                line(
                    &format!("argument {}", crate::util::printable(k)),
                    &crate::util::printable(&text),
                );
            }
        }
        None => line("arguments", &crate::util::printable(&args.to_string())),
    }
    out
}

/// `text` in pieces of at most `first` characters (the first piece) and
/// `width` (the rest), broken after a space when there is one near the end
/// of a piece; the pieces put together are `text` exactly.
pub fn wrap(text: &str, first: usize, width: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    let mut w = first.max(1);
    while chars.len() - at > w {
        let window = &chars[at..at + w];
        let cut = window
            .iter()
            .rposition(|c| *c == ' ')
            .filter(|&i| i + 1 >= w * 2 / 3)
            .map_or(w, |i| i + 1);
        out.push(window[..cut].iter().collect());
        at += cut;
        w = width.max(1);
    }
    out.push(chars[at..].iter().collect());
    out
}

/// Asks on `/dev/tty`, so it works when stdin is a pipe; with no terminal
/// (cron) the answer is no.
pub struct TtyApprover;

impl Approver for TtyApprover {
    fn ask(&self, tool: &str, d: &Decision, args: &Value, control: &RunControl) -> Approval {
        let prompt = format!(
            "\nlatchclaw wants to run a tool\n{}Approve? [y/N] ",
            describe(tool, d.risk.as_str(), &d.reason, args, "  ")
        );
        ask_tty(&prompt, control)
    }
}

/// Writes `prompt` on the terminal and reads the answer: yes only for `y`
/// or `yes`.
fn ask_tty(prompt: &str, control: &RunControl) -> Approval {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(mut tty) = tty else {
        return Approval::Unavailable(
            "no terminal to ask the operator (unattended run): denied".into(),
        );
    };
    if tty
        .write_all(prompt.as_bytes())
        .and_then(|_| tty.flush())
        .is_err()
    {
        return Approval::Denied("the terminal could not be written: denied".into());
    }
    // The operator's answer is awaited only while the run may go on:
    // the deadline or Ctrl-C ends the wait (a line read would not).
    loop {
        if let Some(stop) = control.stop() {
            let _ = tty.write_all(b"\n");
            let why = control.why(stop);
            return match stop {
                Stop::Cancelled => Approval::Denied(format!("{why}: denied")),
                Stop::Timeout => Approval::Unavailable(format!("no answer before {why}")),
            };
        }
        let mut pfd = libc::pollfd {
            fd: tty.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the length of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, 100) };
        if n > 0 {
            break;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Approval::Denied("no answer from the terminal: denied".into());
        }
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
