//! What this build holds. The Cargo features a constrained machine can
//! leave out (README, "Builds and features"): `gateway` (the `gateway` and
//! `service` commands), `pdf` (the `pdf_extract` tool), `lineedit` (the
//! REPL's line editor), `tls` (https), `mcp` (MCP servers' tools),
//! `plugins` (plugins' tools), `sop` (SOPs), `plan` (the `plan` tool) and
//! `code` (`code_run`, `code_status`). A missing one's code stays compiled
//! but unreachable (a constant `cfg!` branch), so the linker drops it. A command or a tool left out
//! stays known: it is refused here, saying how to get it.

use crate::error::Error;
use crate::types::ToolName;

/// Every optional feature and whether this build has it, in the order
/// `latchclaw --version` lists them.
pub const ALL: [(&str, bool); 9] = [
    ("gateway", cfg!(feature = "gateway")),
    ("pdf", cfg!(feature = "pdf")),
    ("lineedit", cfg!(feature = "lineedit")),
    ("tls", cfg!(feature = "tls")),
    ("mcp", cfg!(feature = "mcp")),
    ("plugins", cfg!(feature = "plugins")),
    ("sop", cfg!(feature = "sop")),
    ("plan", cfg!(feature = "plan")),
    ("code", cfg!(feature = "code")),
];

/// The features built in, by name.
pub fn built() -> Vec<&'static str> {
    ALL.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect()
}

/// `features: gateway, pdf, lineedit, tls`, the line `--version` adds.
pub fn line() -> String {
    let on = built();
    if on.is_empty() {
        "features: none (minimal build)".into()
    } else {
        format!("features: {}", on.join(", "))
    }
}

/// What an https URL gets from a build without `tls`.
pub const NO_TLS: &str = "this latchclaw was built without TLS (feature `tls`); use http:// to a \
local server or rebuild with default features";

/// `Err(NO_TLS)` for an https URL in a build without `tls`.
pub fn check_url(url: &str) -> Result<(), &'static str> {
    let https = url
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case("https:"));
    if https && !cfg!(feature = "tls") {
        Err(NO_TLS)
    } else {
        Ok(())
    }
}

/// The feature a command needs (its path, `"service install"`), when this
/// build lacks it.
pub fn command_missing(path: &str) -> Option<&'static str> {
    let group = path.split(' ').next().unwrap_or(path);
    match group {
        "gateway" | "service" if !cfg!(feature = "gateway") => Some("gateway"),
        "mcp" if !cfg!(feature = "mcp") => Some("mcp"),
        "plugin" if !cfg!(feature = "plugins") => Some("plugins"),
        "sop" if !cfg!(feature = "sop") => Some("sop"),
        _ => None,
    }
}

/// The feature a tool needs, when this build lacks it.
pub fn tool_missing(tool: ToolName) -> Option<&'static str> {
    match tool {
        ToolName::PdfExtract if !cfg!(feature = "pdf") => Some("pdf"),
        ToolName::Plan if !cfg!(feature = "plan") => Some("plan"),
        ToolName::CodeRun | ToolName::CodeStatus if !cfg!(feature = "code") => Some("code"),
        _ => None,
    }
}

/// How to get a feature this build lacks.
pub fn how(feature: &str) -> String {
    format!(
        "latchclaw was built without the feature `{feature}`; rebuild with default features \
         (`cargo install --locked --path .`) or add `--features {feature}`"
    )
}

/// A command this build lacks: a usage error (exit 2).
pub fn command_not_built(path: &str, feature: &str) -> Error {
    Error::usage(format!(
        "`latchclaw {path}` is not in this build: {}",
        how(feature)
    ))
}

/// Why a tool is refused, when this build lacks it.
pub fn tool_not_built(tool: ToolName) -> Option<String> {
    tool_missing(tool).map(|f| format!("tool \"{tool}\" is not in this build: {}", how(f)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_line_names_what_is_built() {
        let line = line();
        assert!(line.starts_with("features: "), "{line}");
        for (name, on) in ALL {
            assert_eq!(line.contains(name), on, "{line}");
        }
    }

    #[test]
    fn https_needs_tls_and_http_never_does() {
        assert_eq!(check_url("http://127.0.0.1:8080/v1"), Ok(()));
        assert_eq!(check_url("HTTP://example.com/"), Ok(()));
        let https = [check_url("https://api.example/v1"), check_url("HTTPS://a/")];
        for r in https {
            assert_eq!(r.is_ok(), cfg!(feature = "tls"), "{r:?}");
        }
    }

    #[test]
    fn only_the_optional_commands_and_the_pdf_tool_can_be_missing() {
        for path in [
            "gateway",
            "gateway token",
            "service install",
            "service status",
        ] {
            assert_eq!(command_missing(path).is_some(), !cfg!(feature = "gateway"));
        }
        for path in ["mcp list", "mcp approve"] {
            assert_eq!(command_missing(path).is_some(), !cfg!(feature = "mcp"));
        }
        for path in ["plugin list", "plugin install"] {
            assert_eq!(command_missing(path).is_some(), !cfg!(feature = "plugins"));
        }
        for path in ["agent", "tool run", "receipt verify", "memory search"] {
            assert_eq!(command_missing(path), None);
        }
        for path in ["sop run", "sop list"] {
            assert_eq!(command_missing(path).is_some(), !cfg!(feature = "sop"));
        }
        for t in ToolName::ALL {
            let gone = match t {
                ToolName::PdfExtract => !cfg!(feature = "pdf"),
                ToolName::Plan => !cfg!(feature = "plan"),
                ToolName::CodeRun | ToolName::CodeStatus => !cfg!(feature = "code"),
                _ => false,
            };
            assert_eq!(tool_missing(t).is_some(), gone, "{t}");
        }
        let e = command_not_built("gateway", "gateway");
        assert_eq!(e.exit_code(), crate::error::exit::USAGE);
        assert!(
            e.msg.contains("`latchclaw gateway` is not in this build")
                && e.msg.contains("--features gateway"),
            "{e}"
        );
    }
}
