//! The operator at the terminal: the `Approver` the runtime asks before an
//! `ask` call runs, and the confirmation for `latchclaw approve` — a person,
//! never anything a model wrote.

use crate::control::{RunControl, Stop};
use crate::error::{Error, Result};
use crate::memory::PendingApproval;
use crate::runtime::{Approval, Approver};
use crate::security::Decision;
use serde_json::Value;
use std::io::{BufRead, Write};
use std::os::fd::AsRawFd;

/// Asks on the terminal whether pending approval `id` may be approved.
pub fn confirm(id: &str, p: &PendingApproval) -> Result<()> {
    let risk = p.risk;
    let d = crate::security::Decision::ask(
        risk,
        format!(
            "pending approval {id} in conversation {}: {}",
            p.conversation_id, p.reason
        ),
    );
    match TtyApprover.ask(&p.tool, &d, &p.arguments, &RunControl::new(None)) {
        Approval::Approved => Ok(()),
        Approval::Unavailable(_) => Err(Error::usage(
            "approving needs a terminal to confirm on, or --yes typed by the operator",
        )),
        Approval::Denied(why) => Err(Error::usage(format!("not approved: {why}"))),
    }
}

/// Asks on `/dev/tty`, so it works when stdin is a pipe; with no terminal
/// (cron) the answer is no.
pub struct TtyApprover;

impl Approver for TtyApprover {
    fn ask(&self, tool: &str, d: &Decision, args: &Value, control: &RunControl) -> Approval {
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
}
