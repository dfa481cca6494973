//! What the gate answers: a call's `Risk`, the `Verdict` (and of a
//! refusal, its kind: `Refusal`) and the `Decision` that carries them with
//! the resolved path or the judged plan. A leaf of `security`.

use super::plan::Plan;
use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// The gate's answer: run it, ask the operator first, or refuse it, and
/// then of what kind the refusal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny(Refusal),
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny(_) => "deny",
        }
    }
}

/// Why the gate refused a call, by kind (the reason says it in words):
/// what `policy check --json`, tests and scripts match on instead of prose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The emergency stop is engaged.
    Estop,
    /// The tool is disabled or not configured (`tools.NAME.enabled`,
    /// `[tools.web_search]`).
    Unavailable,
    /// The channel does not offer the tool (`channels.cli.tools_allow`).
    NotOnChannel,
    /// The arguments are malformed or over a limit.
    Arguments,
    /// A path the policy refuses: outside the workspace, forbidden,
    /// protected, secret-named, a link out.
    Path,
    /// A URL or address the network policy refuses.
    Network,
    /// A shell command (or the git tool's argv) the judge refuses.
    Command,
    /// `confinement = "required"` and the kernel wall is not there.
    Confinement,
    /// The autonomy level does not run a call of this risk.
    Autonomy,
    /// Over the tool's `rate_limit`.
    RateLimit,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Estop => "estop",
            Refusal::Unavailable => "unavailable",
            Refusal::NotOnChannel => "not_on_channel",
            Refusal::Arguments => "arguments",
            Refusal::Path => "path",
            Refusal::Network => "network",
            Refusal::Command => "command",
            Refusal::Confinement => "confinement",
            Refusal::Autonomy => "autonomy",
            Refusal::RateLimit => "rate_limit",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Decision {
    pub risk: Risk,
    pub verdict: Verdict,
    pub reason: String,
    /// True when the emergency stop caused the denial.
    pub estop: bool,
    /// The resolved path the tool must use (tools that take a path).
    pub path: Option<PathBuf>,
    /// shell: the plan the runner executes, exactly as judged.
    pub plan: Option<Plan>,
}

impl Risk {
    pub fn parse(s: &str) -> Option<Risk> {
        [Risk::Low, Risk::Medium, Risk::High]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl serde::Serialize for Risk {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Decision {
    /// A call that waits for the operator (a pending approval decided later).
    pub fn ask(risk: Risk, reason: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Ask,
            ..Decision::deny(risk, Refusal::Arguments, reason)
        }
    }

    /// A refusal of `kind`.
    pub fn deny(risk: Risk, kind: Refusal, reason: impl Into<String>) -> Decision {
        Decision {
            risk,
            verdict: Verdict::Deny(kind),
            reason: reason.into(),
            estop: false,
            path: None,
            plan: None,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} risk): {}",
            self.verdict.as_str(),
            self.risk.as_str(),
            self.reason
        )
    }
}
