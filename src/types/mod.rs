//! Types every layer shares, at the bottom of the crate (above `util`,
//! below `config`): the tool table and a provider call's token counts.
//! Nothing here imports a module above it.

pub mod args;
pub mod period;

use serde::Serialize;

/// One row per tool, the one table `ToolName` is derived from: its variant,
/// the name models, configs, receipts and the command line use, and whether
/// the CLI offers it when `channels.cli.tools_allow` is absent. `ALL`,
/// `as_str`, `parse` and `on_by_default` all come from these rows, so a tool
/// cannot be declared and left out of the list.
macro_rules! tool_table {
    ($($variant:ident => $name:literal, on_by_default: $on:literal;)+) => {
        /// Every built-in tool. `tool list`, the schemas a model is offered,
        /// the config's `tools_allow` check and the gate's decision are all
        /// derived from this one table: adding a tool is a row in
        /// `tool_table!`, and the compiler then points at each `match` that
        /// has to say what the new tool means.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum ToolName {
            $($variant,)+
        }

        impl ToolName {
            /// In the order `tool list` shows them.
            pub const ALL: [ToolName; [$(stringify!($variant)),+].len()] =
                [$(ToolName::$variant,)+];

            /// The name models, configs, receipts and the command line use.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ToolName::$variant => $name,)+
                }
            }

            /// Offered on the CLI when `channels.cli.tools_allow` is absent.
            pub const fn on_by_default(self) -> bool {
                match self {
                    $(ToolName::$variant => $on,)+
                }
            }
        }
    };
}

// Off by default: the tools that write files or reach the network (and
// `code_run`, which runs what a model writes), the note
// tools (each schema sent costs every request bytes), `ask_user` (a run the
// operator left alone should not stop to ask); `web_search` is offered once
// a provider is configured.
tool_table! {
    Time => "time", on_by_default: true;
    FileList => "file_list", on_by_default: true;
    FileRead => "file_read", on_by_default: true;
    FileWrite => "file_write", on_by_default: false;
    Shell => "shell", on_by_default: true;
    Http => "http", on_by_default: false;
    MemorySearch => "memory_search", on_by_default: true;
    Git => "git", on_by_default: true;
    MemoryStore => "memory_store", on_by_default: false;
    MemoryRecall => "memory_recall", on_by_default: false;
    MemoryForget => "memory_forget", on_by_default: false;
    Grep => "grep", on_by_default: true;
    AskUser => "ask_user", on_by_default: false;
    WebSearch => "web_search", on_by_default: false;
    PdfExtract => "pdf_extract", on_by_default: false;
    Plan => "plan", on_by_default: false;
    CodeRun => "code_run", on_by_default: false;
    CodeStatus => "code_status", on_by_default: false;
}

impl ToolName {
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Whether a call of it starts child processes (each in the sandbox),
    /// so the namespaces they share are worth making before it runs.
    pub const fn starts_children(self) -> bool {
        matches!(self, ToolName::Shell | ToolName::Git | ToolName::CodeRun)
    }

    /// "time, file_list, …" for errors that say what is allowed.
    pub fn list() -> String {
        let names: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
        names.join(", ")
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Whether `name` can be a tool's name as a model calls it:
/// `^[a-zA-Z0-9_-]{1,64}$`, what every provider's function-calling API
/// accepts. External tools (plugins) are held to it.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Tokens one provider call used, as the server reported them; a run adds
/// them up and its record keeps the sum.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens the server took from its prompt cache (when it says).
    pub cached_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::ToolName;

    #[test]
    fn names_are_unique_and_parse_back() {
        for (i, t) in ToolName::ALL.iter().enumerate() {
            assert_eq!(ToolName::parse(t.as_str()), Some(*t));
            assert!(!ToolName::ALL[..i].iter().any(|o| o.as_str() == t.as_str()));
        }
        assert_eq!(ToolName::parse("Time"), None);
    }
}
