//! What the gate answers: a call's `Risk`, the `Verdict` (and of a
//! refusal, its kind: `Refusal`, in `refusal.rs`) and the `Decision` that
//! carries them with the resolved path or the judged plan.

use super::plan::Plan;
use super::refusal::{Refusal, Refused};
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

/// An external tool (a plugin's) as the gate judges it: what its manifest
/// declares, and whether the operator approved its definitions as they are
/// on disk now. The gate never reads a manifest: what provides the tool
/// fills this in, and the gate decides on it alone.
#[derive(Debug, Clone, Copy)]
pub struct External<'a> {
    /// The name models call it.
    pub name: &'a str,
    /// The plugin that provides it (what a policy rule's `plugin` names).
    pub plugin: &'a str,
    /// Who provides it, for reasons: `plugin "echo"`.
    pub source: &'a str,
    pub risk: Risk,
    pub read_only: bool,
    /// Hosts it declares it needs.
    pub network: &'a [String],
    /// Of those, the ones the operator's config grants (all of an MCP
    /// server's: its config declares them).
    pub granted: &'a [String],
    /// Names of latchclaw's environment variables it is given.
    pub env: &'a [String],
    /// `Some(why)`: its definitions are not the approved ones.
    pub unapproved: Option<&'a str>,
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
    /// The policy rule (`[[policy.rules]]`) that decided, if one did.
    pub rule: Option<Box<str>>,
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

    /// The refusal a judge made, of the kind it said.
    pub fn refused(risk: Risk, r: Refused) -> Decision {
        Decision::deny(risk, r.kind, r.reason)
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
            rule: None,
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
