//! What can go wrong talking to an MCP server, as kinds a caller can match
//! on. A leaf of `mcp`: the child, the wire and the client all make them.
//! A tool's own failure (`isError: true`) is not one of these: it is a
//! [`super::CallResult`] with `is_error` set, which the model reads.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server's config cannot be used as written (a program not found,
    /// a directory the sandbox does not show, network asked for).
    Config,
    /// The sandbox or the process could not be set up.
    Spawn,
    /// No answer within the deadline.
    Timeout,
    /// Stopped by Ctrl-C, a signal or the emergency stop.
    Cancelled,
    /// The server exited or closed its output.
    Exited,
    /// Not JSON-RPC: malformed JSON, a line over the cap, a result of the
    /// wrong shape, too many pages or tools.
    Protocol,
    /// The server speaks a protocol version latchclaw does not.
    Version,
    /// The server answered the request with a JSON-RPC error.
    Rpc,
    /// The tool is not one the server listed or the config allows.
    UnknownTool,
    /// The server does not read what latchclaw writes to it.
    Stalled,
    /// A server reached at a url: unreachable, an HTTP error status, its
    /// session ended, or an answer without the response.
    Http,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::Spawn => "spawn",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Exited => "exited",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Version => "version",
            ErrorKind::Rpc => "rpc_error",
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::Stalled => "stalled",
            ErrorKind::Http => "http",
        }
    }
}

/// A failure with its kind and a message said for the operator (already
/// redacted where it quotes the server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpError {
    pub kind: ErrorKind,
    pub message: String,
}

impl McpError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> McpError {
        McpError {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind.as_str())
    }
}

impl std::error::Error for McpError {}
