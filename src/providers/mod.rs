//! Model providers behind one small trait. The runtime only sees
//! [`Provider`]; which server (or script) answers is decided here.

mod mock;
pub mod openai;
mod reliable;
mod router;
pub mod sse;
pub mod textcalls;
pub mod visible;

use crate::config::{Config, ProviderSettings};
use crate::error::{Error, Result};
use crate::security::redact::Redactor;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

pub use mock::MockProvider;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Memory notes sent ahead of this (user) message, quoted as data. Kept
    /// apart from `content` so the system prompt stays the same from turn
    /// to turn (a server's prompt cache keeps working) and so the notes are
    /// never stored as if the user had written them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// A line latchclaw itself adds (the last-round request, a request to
    /// answer in plain text): sent as a user message, never stored.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub from_runtime: bool,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            notes: None,
            from_runtime: false,
        }
    }

    /// A user-role line from latchclaw itself.
    pub fn runtime(content: impl Into<String>) -> Message {
        Message {
            from_runtime: true,
            ..Message::new(Role::User, content)
        }
    }

    /// The text a server sees: the notes, quoted, then the message.
    pub fn wire_content(&self) -> std::borrow::Cow<'_, str> {
        match &self.notes {
            Some(n) => format!("{n}\n\n{}", self.content).into(),
            None => self.content.as_str().into(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    pub system_prompt: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    pub metadata: BTreeMap<String, String>,
}

pub use crate::types::Usage;

#[derive(Debug, Clone, Default)]
pub struct ChatResponse {
    pub final_text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<Usage>,
    /// The provider that actually answered (differs from the configured one
    /// behind `reliable`).
    pub provider: String,
    pub model: String,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderErrorKind {
    Network,
    Timeout,
    Auth,
    RateLimit,
    Server,
    BadRequest,
    BadResponse,
    /// A streamed answer that stopped before it was complete (the server
    /// closed or failed mid-stream, or the run's deadline or Ctrl-C cut it).
    StreamCut,
}

impl ProviderErrorKind {
    pub const ALLOWED: &'static [&'static str] = &[
        "network",
        "timeout",
        "auth",
        "rate_limit",
        "server",
        "bad_request",
        "bad_response",
        "stream_cut",
    ];
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
    pub fn parse(s: &str) -> Option<ProviderErrorKind> {
        use ProviderErrorKind::*;
        [
            Network,
            Timeout,
            Auth,
            RateLimit,
            Server,
            BadRequest,
            BadResponse,
            StreamCut,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
    }
    /// Errors another provider might not have. A cut stream does not fall
    /// back: part of its answer may already be on the screen, and another
    /// provider would start a different one.
    pub fn falls_back(self) -> bool {
        use ProviderErrorKind::*;
        matches!(self, Network | Timeout | Auth | RateLimit | Server)
    }
}

/// The next step an unreachable provider's error ends with (`provider
/// test` leaves it out of its own report).
pub fn provider_test_hint(name: &str) -> String {
    format!(" try `latchclaw provider test {name}`")
}

#[derive(Debug, Clone)]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    pub provider: String,
    pub message: String,
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "provider \"{}\" failed ({}): {}",
            self.provider,
            self.kind.as_str(),
            self.message
        )
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Capabilities {
    pub native_tool_calls: bool,
}

/// Receives an answer while it streams in, and may stop the call.
pub trait StreamSink {
    /// The next piece of the model's text as the server sent it: it may hold
    /// `<think>` reasoning or tool calls written as text (`visible` says
    /// what of it can be shown).
    fn text(&mut self, delta: &str);
    /// Asked at least every 100 ms while a call waits on the server; `Some`
    /// (why) abandons the call at once with a `StreamCut` error.
    fn stop(&mut self) -> Option<String>;
}

/// A sink that shows nothing and never stops a call.
pub struct NoSink;

impl StreamSink for NoSink {
    fn text(&mut self, _: &str) {}
    fn stop(&mut self) -> Option<String> {
        None
    }
}

pub trait Provider {
    fn name(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    /// One request, passing the answer's text to `sink` as it arrives
    /// (when the provider streams) and stopping when `sink` says so.
    fn chat_streaming(
        &self,
        req: &ChatRequest,
        sink: &mut dyn StreamSink,
    ) -> Result<ChatResponse, ProviderError>;
    /// One request, the answer all at once.
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.chat_streaming(req, &mut NoSink)
    }
}

/// Builds the named provider (and, for `reliable`, the ones it wraps);
/// `redactor` scrubs its errors.
pub fn build(cfg: &Config, name: &str, redactor: &Arc<Redactor>) -> Result<Box<dyn Provider>> {
    build_inner(cfg, name, redactor, &mut Vec::new())
}

fn build_inner(
    cfg: &Config,
    name: &str,
    redactor: &Arc<Redactor>,
    stack: &mut Vec<String>,
) -> Result<Box<dyn Provider>> {
    if stack.iter().any(|s| s == name) {
        stack.push(name.to_string());
        return Err(Error::usage(format!(
            "provider cycle: {}",
            stack.join(" -> ")
        )));
    }
    let p = cfg.provider(name)?;
    log::info!(target: "event::provider_selected", "provider={name} kind={}", p.kind().as_str());
    match &p.settings {
        ProviderSettings::Mock(m) => Ok(Box::new(MockProvider::from_config(p, m)?)),
        ProviderSettings::Reliable(rel) => {
            stack.push(name.to_string());
            let inner = rel
                .providers
                .iter()
                .map(|n| build_inner(cfg, n, redactor, stack))
                .collect::<Result<Vec<_>>>()?;
            stack.pop();
            Ok(Box::new(reliable::Reliable::new(name, inner)))
        }
        ProviderSettings::OpenAiCompatible(o) => {
            crate::features::check_url(&o.base_url).map_err(|e| {
                Error::usage(format!(
                    "providers.models.{name}.base_url = \"{}\": {e}",
                    o.base_url
                ))
            })?;
            Ok(Box::new(openai::OpenAiCompatible::from_config(
                p,
                o,
                cfg.max_response_bytes,
                Arc::clone(redactor),
            )))
        }
        ProviderSettings::Router(rt) => {
            stack.push(name.to_string());
            let mut names: Vec<&String> = rt
                .hints
                .iter()
                .chain(rt.routes.iter())
                .map(|(_, v)| v)
                .chain(std::iter::once(&rt.default_route))
                .collect();
            names.sort();
            names.dedup();
            let providers = names
                .into_iter()
                .map(|n| build_inner(cfg, n, redactor, stack))
                .collect::<Result<Vec<_>>>()?;
            stack.pop();
            Ok(Box::new(router::Router {
                name: name.to_string(),
                providers,
                hints: rt.hints.clone(),
                routes: rt.routes.clone(),
                default_route: rt.default_route.clone(),
            }))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::ProviderErrorKind;

    #[test]
    fn error_kinds_round_trip_and_a_cut_stream_does_not_fall_back() {
        for name in ProviderErrorKind::ALLOWED {
            assert_eq!(ProviderErrorKind::parse(name).unwrap().as_str(), *name);
        }
        assert_eq!(
            ProviderErrorKind::parse("stream_cut"),
            Some(ProviderErrorKind::StreamCut)
        );
        assert!(!ProviderErrorKind::StreamCut.falls_back());
        assert!(ProviderErrorKind::Timeout.falls_back());
    }
}
