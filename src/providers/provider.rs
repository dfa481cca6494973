//! The `Provider` trait and what crosses it: messages, a request, the
//! response, typed errors, the sink a stream is passed to. A leaf of
//! `providers`: every provider and the factory (`mod.rs`) use it.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

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
    /// One call's arguments, shown to the model in text and structured
    /// tool modes (`tools::example`); null: none.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub example: Value,
    /// What the tool takes of some arguments beyond their type, as schema
    /// keywords by argument (`{"depth": {"minimum": 1, "maximum": 5}}`,
    /// `tools::bounds`): structured mode's schema holds them, so a grammar
    /// cannot produce a value the tool refuses. Null: none.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub bounds: Value,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChatRequest {
    pub system_prompt: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// This run's model options (`agent -o`), over the provider's own.
    #[serde(skip_serializing_if = "ModelOptions::is_empty")]
    pub options: ModelOptions,
    pub metadata: BTreeMap<String, String>,
    /// This request must be answered with a call (after a reminder to
    /// look first): structured mode leaves the answer out of its schema,
    /// native mode sends `tool_choice: "required"`; text mode cannot say.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub calls_only: bool,
}

/// Sampling options given for one run (`agent -o KEY=VALUE`). They travel
/// with each request, so a `reliable` or `router` provider passes them to
/// whichever provider answers; an openai-compatible one sends them in
/// place of its configured `temperature` and `max_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ModelOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

impl ModelOptions {
    pub const KEYS: [&str; 4] = ["temperature", "max_tokens", "top_p", "seed"];

    pub fn is_empty(&self) -> bool {
        *self == ModelOptions::default()
    }

    /// Sets one option from `KEY=VALUE`; the error names what is wrong and
    /// what is allowed. The ranges are the config's for `temperature` and
    /// `max_tokens`, the OpenAI API's for `top_p`.
    pub fn set(&mut self, given: &str) -> std::result::Result<(), String> {
        let allowed = || Self::KEYS.join(", ");
        let Some((key, value)) = given.split_once('=') else {
            return Err(format!(
                "\"{}\" is not KEY=VALUE; keys: {} (e.g. -o temperature=0)",
                crate::util::printable(given),
                allowed()
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        let number = |lo: f64, hi: f64| -> std::result::Result<f64, String> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| (lo..=hi).contains(v))
                .ok_or_else(|| {
                    format!(
                        "{key}: \"{}\" is not a number from {lo} to {hi}",
                        crate::util::printable(value)
                    )
                })
        };
        match key {
            "temperature" => self.temperature = Some(number(0.0, 2.0)?),
            "top_p" => self.top_p = Some(number(0.0, 1.0)?),
            "max_tokens" => {
                let n = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=10_000_000).contains(n));
                self.max_tokens = Some(n.ok_or_else(|| {
                    format!(
                        "max_tokens: \"{}\" is not a whole number from 1 to 10000000",
                        crate::util::printable(value)
                    )
                })?);
            }
            "seed" => {
                self.seed = Some(value.parse::<i64>().map_err(|_| {
                    format!(
                        "seed: \"{}\" is not a whole number",
                        crate::util::printable(value)
                    )
                })?);
            }
            other => {
                let near = crate::util::suggest::nearest(other, Self::KEYS)
                    .map(|k| format!("did you mean {k}? "))
                    .unwrap_or_default();
                return Err(format!(
                    "unknown option \"{}\"; {near}allowed: {}",
                    crate::util::printable(other),
                    allowed()
                ));
            }
        }
        Ok(())
    }
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
    /// How tools went to the model in the request this answers (an
    /// openai-compatible provider's; none for the mock).
    pub tool_mode: Option<crate::config::ToolMode>,
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
