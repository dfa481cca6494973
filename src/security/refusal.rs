//! Why the gate refuses: the kinds (`Refusal`) and a refusal as a judge
//! makes it (`Refused`: its kind and its words). A leaf of `security`:
//! the grammar, the expansion and every judge say "no" with it.

use std::fmt;

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
    /// An external tool whose definitions changed since the operator
    /// approved them (`latchclaw plugin approve NAME`).
    Unapproved,
    /// A policy rule (`[[policy.rules]]`) with `effect = "deny"`.
    Policy,
    /// A call inside a plan's task of a tool the task does not name.
    NotInTask,
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
            Refusal::Unapproved => "unapproved",
            Refusal::Policy => "policy",
            Refusal::NotInTask => "not_in_task",
        }
    }
}

/// A refusal as it is made: its kind, decided where the refusal is (a path
/// the policy refuses met while judging a shell command is a `Path` one),
/// and the reason in words — what the operator and the model read, the
/// text `Display` gives unchanged. Every judging function says "no" with
/// one; `Gate::decide` puts it in the `Decision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub kind: Refusal,
    pub reason: String,
}

impl Refused {
    pub fn new(kind: Refusal, reason: impl Into<String>) -> Refused {
        Refused {
            kind,
            reason: reason.into(),
        }
    }

    /// A command (or an argv of the git tool) the judge will not run: a
    /// construct, program, option or configuration it refuses or cannot read.
    pub fn command(reason: impl Into<String>) -> Refused {
        Refused::new(Refusal::Command, reason)
    }

    /// A path the policy refuses: outside the workspace, forbidden,
    /// protected, secret-named, a link out, one that cannot be resolved.
    pub fn path(reason: impl Into<String>) -> Refused {
        Refused::new(Refusal::Path, reason)
    }

    /// Arguments malformed or over a limit.
    pub fn arguments(reason: impl Into<String>) -> Refused {
        Refused::new(Refusal::Arguments, reason)
    }

    /// A URL or address the network policy refuses.
    pub fn network(reason: impl Into<String>) -> Refused {
        Refused::new(Refusal::Network, reason)
    }

    /// The same refusal, its reason put in words around it (`f` gets the
    /// reason as it was); the kind stays the one it was made with.
    pub fn map_reason(self, f: impl FnOnce(String) -> String) -> Refused {
        Refused {
            kind: self.kind,
            reason: f(self.reason),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Refused {}
