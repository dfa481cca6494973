//! One error type for the binary; its kind decides the process exit code.

use std::fmt;

/// Exit codes, documented in README.md and `latchclaw --help`.
pub mod exit {
    pub const OK: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const RUNTIME: i32 = 3;
    pub const POLICY: i32 = 4;
    pub const ESTOP: i32 = 5;
    pub const LIMIT: i32 = 6;
    pub const INTEGRITY: i32 = 7;
    pub const LOCKED: i32 = 8;
}

/// How a command or a turn ended: the one place an ending becomes an exit
/// code (README's table) and the `exit_reason` a script reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    /// Tools ran, the model gave no answer; the user got their results.
    NoAnswer,
    /// A call was denied, by policy or by the operator.
    Refused,
    /// The emergency stop refused or killed a call.
    Estop,
    MaxToolRounds,
    /// A plan's budget (`[tools.plan]`) stopped its tree.
    PlanBudget,
    /// The run's `--timeout`.
    Timeout,
    /// The model kept answering with tool-call text latchclaw cannot run.
    UnusableReply,
    /// Ctrl-C.
    Cancelled,
    /// Another signal ended the run.
    Signal(i32),
    Failed(Kind),
}

impl Outcome {
    pub fn code(self) -> i32 {
        match self {
            Outcome::Completed | Outcome::NoAnswer => exit::OK,
            Outcome::Refused => exit::POLICY,
            Outcome::Estop => exit::ESTOP,
            Outcome::MaxToolRounds | Outcome::PlanBudget | Outcome::Timeout => exit::LIMIT,
            Outcome::UnusableReply | Outcome::Failed(Kind::Runtime) => exit::RUNTIME,
            Outcome::Cancelled => 128 + libc::SIGINT,
            Outcome::Signal(n) => 128 + n,
            Outcome::Failed(Kind::Usage) => exit::USAGE,
            Outcome::Failed(Kind::Integrity) => exit::INTEGRITY,
            Outcome::Failed(Kind::Locked) => exit::LOCKED,
            Outcome::Failed(Kind::Internal) => exit::INTERNAL,
        }
    }

    pub fn reason(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::NoAnswer => "no_answer",
            Outcome::Refused => "refused",
            Outcome::Estop => "estop",
            Outcome::MaxToolRounds => "max_tool_rounds",
            Outcome::PlanBudget => "plan_budget",
            Outcome::Timeout => "timeout",
            Outcome::UnusableReply => "unusable_reply",
            Outcome::Cancelled => "cancelled",
            Outcome::Signal(_) => "signal",
            Outcome::Failed(Kind::Usage) => "usage",
            Outcome::Failed(Kind::Runtime) => "error",
            Outcome::Failed(Kind::Integrity) => "integrity",
            Outcome::Failed(Kind::Locked) => "locked",
            Outcome::Failed(Kind::Internal) => "internal",
        }
    }
}

impl serde::Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.reason())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bad command line or bad config.
    Usage,
    /// Provider, database, file system: something failed while running.
    Runtime,
    /// The receipt chain (or another integrity check) failed.
    Integrity,
    /// Another run holds the `--lock`.
    Locked,
    /// A bug: a state the code should never reach.
    Internal,
}

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub msg: String,
    /// SQLite said "busy" or "locked": worth a retry.
    pub busy: bool,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: Kind, msg: impl Into<String>) -> Error {
        Error {
            kind,
            msg: msg.into(),
            busy: false,
        }
    }
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::new(Kind::Usage, msg)
    }
    pub fn runtime(msg: impl Into<String>) -> Error {
        Error::new(Kind::Runtime, msg)
    }
    pub fn exit_code(&self) -> i32 {
        Outcome::Failed(self.kind).code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Error {
        let busy = matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        );
        if busy {
            Error {
                busy: true,
                ..Error::runtime(format!(
                    "memory database is locked by another process and stayed locked past \
                     memory.busy_timeout_ms: {e}"
                ))
            }
        } else {
            Error::runtime(format!("memory database error: {e}"))
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::runtime(format!("I/O error: {e}"))
    }
}

/// Attaches "what we were doing" to an I/O error.
pub trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::runtime(format!("{}: {e}", what())))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_documented_exit_code() {
        let codes: Vec<i32> = [
            Kind::Usage,
            Kind::Runtime,
            Kind::Integrity,
            Kind::Locked,
            Kind::Internal,
        ]
        .into_iter()
        .map(|k| Error::new(k, "x").exit_code())
        .collect();
        assert_eq!(codes, [2, 3, 7, 8, 1]);
    }
}
