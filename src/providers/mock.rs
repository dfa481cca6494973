//! The deterministic mock provider: answers from a script (a TOML fixture
//! file, or the built-in one), so tests and offline demos need no network.
//!
//! The mock keeps no state between calls: which response comes next is
//! read off the request (the number of assistant messages since the last
//! user message), so a script replays the same way in every process.

use super::provider::{
    Capabilities, ChatRequest, ChatResponse, Provider, ProviderError, ProviderErrorKind, Role,
    StreamSink, ToolCall,
};
use crate::config::{MockSettings, ProviderConfig};
use crate::error::{Error, Result};
use serde::Deserialize;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

/// The script used when no `fixture` is configured: it lists files or tells
/// the time when asked, and otherwise echoes.
const BUILTIN: &str = r#"
[[script]]
when = ["file", "ls", "director"]
[[script.responses]]
tool_calls = [{ name = "file_list", arguments = { path = "." } }]
[[script.responses]]
text = "I listed the workspace with file_list. {{tool_results}}"

[[script]]
when = ["time", "date", "clock"]
[[script.responses]]
tool_calls = [{ name = "time" }]
[[script.responses]]
text = "{{tool_results}}"

[[script]]
[[script.responses]]
text = "LatchClaw mock provider here (no model configured). You said: {{user_message}}"
"#;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    /// Fail every call with this error kind (for fallback tests).
    error: Option<String>,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    script: Vec<Script>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    when: Option<OneOrMany>,
    responses: Vec<Response>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Response {
    #[serde(default)]
    text: String,
    #[serde(default)]
    tool_calls: Vec<FixtureCall>,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FixtureCall {
    id: Option<String>,
    name: String,
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

pub struct MockProvider {
    name: String,
    model: String,
    fixture: Fixture,
    record: Option<PathBuf>,
    /// Pass the answer to a streaming caller in pieces (`stream = false`:
    /// all at once), so the display path runs without a server.
    stream: bool,
}

fn parse_error_kind(s: &str, origin: &str) -> Result<ProviderErrorKind> {
    ProviderErrorKind::parse(s).ok_or_else(|| {
        Error::usage(format!(
            "{origin}: error \"{s}\" is not allowed; allowed values: {}",
            ProviderErrorKind::ALLOWED.join(", ")
        ))
    })
}

impl MockProvider {
    pub fn from_config(p: &ProviderConfig, m: &MockSettings) -> Result<MockProvider> {
        let (text, origin) = match &m.fixture {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|e| {
                    Error::usage(format!(
                        "provider \"{}\": cannot read fixture {}: {e}",
                        p.name,
                        path.display()
                    ))
                })?,
                path.display().to_string(),
            ),
            None => (BUILTIN.to_string(), "built-in mock script".to_string()),
        };
        let fixture: Fixture = toml::from_str(&text).map_err(|e| {
            Error::usage(format!("mock fixture {origin}: {}", e.to_string().trim()))
        })?;
        if let Some(k) = &fixture.error {
            parse_error_kind(k, &origin)?;
        }
        for (i, s) in fixture.script.iter().enumerate() {
            if s.responses.is_empty() {
                return Err(Error::usage(format!(
                    "mock fixture {origin}: script[{i}] has no responses"
                )));
            }
            for r in &s.responses {
                if let Some(k) = &r.error {
                    parse_error_kind(k, &origin)?;
                }
            }
        }
        Ok(MockProvider {
            name: p.name.clone(),
            model: p.model.clone(),
            fixture,
            record: m.record_requests.clone(),
            stream: m.stream,
        })
    }

    fn fail(&self, kind: &str) -> ProviderError {
        let kind = ProviderErrorKind::parse(kind).unwrap_or(ProviderErrorKind::Server);
        ProviderError {
            kind,
            provider: self.name.clone(),
            message: format!("scripted {} error from the mock fixture", kind.as_str()),
        }
    }

    fn record(&self, req: &ChatRequest) {
        let Some(path) = &self.record else { return };
        let mut line = serde_json::json!({ "provider": self.name, "request": req }).to_string();
        line.push('\n');
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            log::warn!(
                "mock provider: cannot record request to {}: {e}",
                path.display()
            );
        }
    }
}

/// `text` in up to `n` pieces of about equal length, cut at char boundaries.
fn pieces(text: &str, n: usize) -> Vec<&str> {
    let step = text.len().div_ceil(n).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + step).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[start..end]);
        start = end;
    }
    out
}

/// Replaces `{{user_message}}` and `{{tool_results}}` in a scripted text.
fn fill(template: &str, user: &str, tool_results: &str) -> String {
    template
        .replace("{{user_message}}", user)
        .replace("{{tool_results}}", tool_results)
}

impl Provider for MockProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tool_calls: true,
        }
    }

    fn chat_streaming(
        &self,
        req: &ChatRequest,
        sink: &mut dyn StreamSink,
    ) -> Result<ChatResponse, ProviderError> {
        self.record(req);
        self.wait(sink)?;
        let resp = self.answer(req)?;
        if self.stream {
            for piece in pieces(&resp.final_text, 3) {
                sink.text(piece);
            }
        }
        Ok(resp)
    }
}

impl MockProvider {
    /// `delay_ms`, as a slow server takes it; like the real provider, the
    /// wait ends early when the run must stop (its deadline, Ctrl-C).
    fn wait(&self, sink: &mut dyn StreamSink) -> Result<(), ProviderError> {
        use std::time::{Duration, Instant};
        let end = Instant::now() + Duration::from_millis(self.fixture.delay_ms);
        loop {
            if let Some(why) = sink.stop() {
                return Err(ProviderError {
                    kind: ProviderErrorKind::StreamCut,
                    provider: self.name.clone(),
                    message: format!("stopped: {why} (the mock was still waiting)"),
                });
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
    }

    fn answer(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        if let Some(kind) = &self.fixture.error {
            return Err(self.fail(kind));
        }
        // Lines latchclaw adds itself are not the user's: the script goes on.
        let last_user = req
            .messages
            .iter()
            .rposition(|m| m.role == Role::User && !m.from_runtime);
        let user = last_user.map_or("", |i| req.messages[i].content.as_str());
        let since_user = &req.messages[last_user.map_or(0, |i| i + 1)..];
        let step = since_user
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let last_assistant = since_user.iter().rposition(|m| m.role == Role::Assistant);
        let tool_results = since_user[last_assistant.map_or(since_user.len(), |i| i + 1)..]
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| m.content.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let lower = user.to_lowercase();
        let script = self.fixture.script.iter().find(|s| match &s.when {
            None => true,
            Some(OneOrMany::One(w)) => lower.contains(&w.to_lowercase()),
            Some(OneOrMany::Many(ws)) => ws.iter().any(|w| lower.contains(&w.to_lowercase())),
        });
        let Some(script) = script else {
            return Ok(ChatResponse {
                final_text: format!("mock: no script matches the message \"{user}\""),
                provider: self.name.clone(),
                model: self.model.clone(),
                ..Default::default()
            });
        };
        // Past the end, the last response repeats.
        let resp = &script.responses[step.min(script.responses.len() - 1)];
        if let Some(kind) = &resp.error {
            return Err(self.fail(kind));
        }
        let tool_calls = resp
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: c.id.clone().unwrap_or_else(|| format!("call_{step}_{i}")),
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        let prompt_tokens = req
            .messages
            .iter()
            .map(|m| m.content.len() as u64 / 4)
            .sum();
        let final_text = fill(&resp.text, user, &tool_results);
        Ok(ChatResponse {
            usage: Some(super::provider::Usage {
                prompt_tokens,
                completion_tokens: final_text.len() as u64 / 4,
                cached_tokens: 0,
            }),
            final_text,
            tool_calls,
            provider: self.name.clone(),
            model: self.model.clone(),
            tool_mode: None,
            finish_reason: Some(
                if resp.tool_calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
                .into(),
            ),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::providers::provider::Message;

    fn provider(fixture: &str) -> MockProvider {
        MockProvider {
            name: "m".into(),
            model: "mock".into(),
            fixture: toml::from_str(fixture).unwrap(),
            record: None,
            stream: true,
        }
    }

    fn req(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            system_prompt: String::new(),
            messages,
            tools: Vec::new(),
            model: "mock".into(),
            temperature: None,
            options: Default::default(),
            metadata: Default::default(),
            calls_only: false,
        }
    }

    #[test]
    fn builtin_script_parses_and_lists_files() {
        let p = provider(BUILTIN);
        let r = p
            .chat(&req(vec![Message::new(Role::User, "What files are here?")]))
            .unwrap();
        assert_eq!(r.tool_calls[0].name, "file_list");
        let mut msgs = vec![Message::new(Role::User, "What files are here?")];
        msgs.push(Message {
            tool_calls: r.tool_calls.clone(),
            ..Message::new(Role::Assistant, "")
        });
        msgs.push(Message {
            tool_call_id: Some("call_0_0".into()),
            ..Message::new(Role::Tool, "a.txt")
        });
        let r = p.chat(&req(msgs)).unwrap();
        assert!(r.tool_calls.is_empty());
        assert!(r.final_text.contains("a.txt"), "{}", r.final_text);
        let r = p
            .chat(&req(vec![Message::new(Role::User, "hello")]))
            .unwrap();
        assert!(r.final_text.ends_with("You said: hello"));
    }

    #[test]
    fn streaming_passes_the_answer_in_pieces() {
        struct Collect(Vec<String>);
        impl StreamSink for Collect {
            fn text(&mut self, d: &str) {
                self.0.push(d.to_string());
            }
            fn stop(&mut self) -> Option<String> {
                None
            }
        }
        let p = provider("[[script]]\n[[script.responses]]\ntext = \"héllo wörld, streamed\"\n");
        let mut sink = Collect(Vec::new());
        let r = p
            .chat_streaming(&req(vec![Message::new(Role::User, "x")]), &mut sink)
            .unwrap();
        assert!(sink.0.len() > 1, "{:?}", sink.0);
        assert_eq!(sink.0.concat(), r.final_text);
        assert_eq!(pieces("", 3), Vec::<&str>::new());
        assert_eq!(pieces("éé", 3).concat(), "éé");
    }

    #[test]
    fn scripts_are_chosen_by_message_and_errors_are_typed() {
        let p = provider(
            "[[script]]\nwhen = \"boom\"\n[[script.responses]]\nerror = \"rate_limit\"\n\
             [[script]]\nwhen = \"x\"\n[[script.responses]]\ntext = \"got x\"\n",
        );
        let e = p
            .chat(&req(vec![Message::new(Role::User, "BOOM now")]))
            .unwrap_err();
        assert_eq!(e.kind, ProviderErrorKind::RateLimit);
        assert_eq!(
            p.chat(&req(vec![Message::new(Role::User, "x")]))
                .unwrap()
                .final_text,
            "got x"
        );
        assert!(
            p.chat(&req(vec![Message::new(Role::User, "zzz")]))
                .unwrap()
                .final_text
                .contains("no script")
        );
    }
}
