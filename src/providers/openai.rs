//! `openai-compatible`: blocking `POST {base_url}/chat/completions` with
//! ureq, for OpenAI, OpenRouter, llama.cpp's server, Ollama, vLLM and LM
//! Studio. Native tool calling, or tools described in the prompt and read
//! back from `<tool_call>` blocks for models without it.

use super::textcalls::{decode_arguments, parse_text_calls, strip_think};
use super::{
    Capabilities, ChatRequest, ChatResponse, Message, Provider, ProviderError, ProviderErrorKind,
    Role, ToolCall, ToolSpec, Usage,
};
use crate::config::{ProviderConfig, ToolMode};
use serde_json::{Value, json};
use std::cell::Cell;
use std::io::Read;
use std::time::Duration;

/// The longest `Retry-After` we wait out before giving up (so `reliable`
/// can fall back instead).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
const BACKOFF_BASE_MS: u64 = 200;

pub struct OpenAiCompatible {
    name: String,
    model: String,
    url: String,
    api_key_env: Option<String>,
    headers: Vec<(String, String)>,
    temperature: Option<f64>,
    max_tokens: Option<u64>,
    /// `auto` becomes `text` for the rest of the process once the server
    /// says it has no tool support.
    mode: Cell<ToolMode>,
    retries: u32,
    max_response_bytes: u64,
    timeout_secs: u64,
    agent: ureq::Agent,
}

/// Why one HTTP exchange failed.
enum SendError {
    /// Worth another try (after `wait`, when the server said so).
    Retry(ProviderError, Option<Duration>),
    /// The server rejected the tools field.
    ToolsUnsupported(ProviderError),
    Fatal(ProviderError),
}

impl OpenAiCompatible {
    pub fn from_config(p: &ProviderConfig, max_response_bytes: u64) -> OpenAiCompatible {
        let base = p.base_url.clone().unwrap_or_default();
        let timeout = Duration::from_secs(p.timeout_secs);
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
            .user_agent(format!("latchclaw/{}", env!("CARGO_PKG_VERSION")))
            .build();
        OpenAiCompatible {
            name: p.name.clone(),
            model: p.model.clone(),
            url: format!("{}/chat/completions", base.trim_end_matches('/')),
            api_key_env: p.api_key_env.clone(),
            headers: p.headers.clone(),
            temperature: p.temperature,
            max_tokens: p.max_tokens,
            mode: Cell::new(p.tool_mode),
            retries: p.retries,
            max_response_bytes,
            timeout_secs: p.timeout_secs,
            agent: config.new_agent(),
        }
    }

    /// Our own time limit ran out. Not retried: a slow local model would
    /// start its generation over from scratch and run out again.
    fn timed_out(&self, detail: impl std::fmt::Display) -> SendError {
        SendError::Fatal(self.err(
            ProviderErrorKind::Timeout,
            format!(
                "no complete answer within {} s ({detail}); raise \
                 providers.models.{}.timeout_secs for a slow model",
                self.timeout_secs, self.name
            ),
        ))
    }

    fn err(&self, kind: ProviderErrorKind, message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind,
            provider: self.name.clone(),
            message: message.into(),
        }
    }

    /// The request body for one call in the given tool mode.
    pub fn body(&self, req: &ChatRequest, mode: ToolMode) -> Value {
        wire_body(req, mode, self.temperature, self.max_tokens)
    }
}

/// The JSON body of a chat completions request (`prompt show` measures it).
pub fn wire_body(
    req: &ChatRequest,
    mode: ToolMode,
    temperature: Option<f64>,
    max_tokens: Option<u64>,
) -> Value {
    {
        let text_tools = mode == ToolMode::Text && !req.tools.is_empty();
        let mut system = req.system_prompt.clone();
        if text_tools {
            system.push_str(&text_mode_instructions(req));
        }
        let mut messages = vec![json!({"role": "system", "content": system})];
        for m in &req.messages {
            // In text mode a result is labelled with its tool's name: labelled
            // with the call id, Qwen2.5-Coder-1.5B went on to call the next
            // tool in the list instead of answering.
            let tool = m.tool_call_id.as_deref().and_then(|id| {
                req.messages
                    .iter()
                    .flat_map(|a| &a.tool_calls)
                    .find(|c| c.id == id)
                    .map(|c| c.name.as_str())
            });
            messages.push(wire_message(m, mode == ToolMode::Text, tool));
        }
        let mut body = json!({
            "model": req.model.clone(),
            "messages": messages,
            "stream": false,
        });
        if !req.tools.is_empty() && mode != ToolMode::Text {
            body["tools"] = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
        }
        if let Some(t) = req.temperature.or(temperature) {
            body["temperature"] = json!(t);
        }
        if let Some(n) = max_tokens {
            body["max_tokens"] = json!(n);
        }
        body
    }
}

impl OpenAiCompatible {
    /// The key, read from the environment at call time, never stored elsewhere.
    fn key(&self) -> Result<Option<String>, ProviderError> {
        match &self.api_key_env {
            None => Ok(None),
            Some(var) => match std::env::var(var) {
                Ok(k) if !k.is_empty() => Ok(Some(k)),
                _ => Err(self.err(
                    ProviderErrorKind::Auth,
                    format!("environment variable {var} (api_key_env) is not set"),
                )),
            },
        }
    }

    /// Removes the key from any text that may be shown or logged.
    fn scrub(&self, text: &str, key: Option<&str>) -> String {
        let mut s: String = text.chars().take(300).collect();
        if let Some(k) = key.filter(|k| k.len() >= 4) {
            s = s.replace(k, "[redacted]");
        }
        crate::util::printable(&s)
    }

    fn send_once(
        &self,
        body: &str,
        key: Option<&str>,
        had_tools: bool,
    ) -> Result<Vec<u8>, SendError> {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(k) = key {
            request = request.header("Authorization", format!("Bearer {k}"));
        }
        for (n, v) in &self.headers {
            request = request.header(n.as_str(), v.as_str());
        }
        let mut resp = match request.send(body) {
            Ok(r) => r,
            Err(e) => return Err(self.transport_error(e)),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut bytes = Vec::new();
        let read = resp
            .body_mut()
            .as_reader()
            .take(self.max_response_bytes + 1)
            .read_to_end(&mut bytes);
        if let Err(e) = read {
            if e.kind() == std::io::ErrorKind::TimedOut {
                return Err(self.timed_out(format!("reading the response: {e}")));
            }
            return Err(SendError::Retry(
                self.err(
                    ProviderErrorKind::Network,
                    format!("reading the response: {e}"),
                ),
                None,
            ));
        }
        if bytes.len() as u64 > self.max_response_bytes {
            return Err(SendError::Fatal(self.err(
                ProviderErrorKind::BadResponse,
                format!(
                    "response larger than max_response_bytes ({} bytes)",
                    self.max_response_bytes
                ),
            )));
        }
        if (200..300).contains(&status) {
            return Ok(bytes);
        }
        let detail = self.scrub(&server_message(&bytes), key);
        let msg = format!("HTTP {status}: {detail}");
        Err(match status {
            401 | 403 => SendError::Fatal(self.err(ProviderErrorKind::Auth, msg)),
            408 => SendError::Retry(self.err(ProviderErrorKind::Timeout, msg), retry_after),
            429 => SendError::Retry(self.err(ProviderErrorKind::RateLimit, msg), retry_after),
            500..=599 => SendError::Retry(self.err(ProviderErrorKind::Server, msg), retry_after),
            400 | 422 if had_tools && says_tools_unsupported(&detail) => {
                SendError::ToolsUnsupported(self.err(ProviderErrorKind::BadRequest, msg))
            }
            _ => SendError::Fatal(self.err(ProviderErrorKind::BadRequest, msg)),
        })
    }

    fn transport_error(&self, e: ureq::Error) -> SendError {
        match e {
            ureq::Error::Timeout(t) => self.timed_out(t),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => self.timed_out(io),
            ureq::Error::BadUri(u) => SendError::Fatal(
                self.err(ProviderErrorKind::BadRequest, format!("bad base_url: {u}")),
            ),
            other => SendError::Retry(
                self.err(
                    ProviderErrorKind::Network,
                    format!("{} ({})", other, self.url),
                ),
                None,
            ),
        }
    }

    /// One logical request: retries with exponential backoff and jitter.
    fn send(&self, body: &str, key: Option<&str>, had_tools: bool) -> Result<Vec<u8>, SendError> {
        let mut attempt = 0;
        loop {
            match self.send_once(body, key, had_tools) {
                Err(SendError::Retry(e, wait)) if attempt < self.retries => {
                    let backoff = BACKOFF_BASE_MS << attempt.min(6);
                    let jittered = Duration::from_millis(backoff / 2 + fastrand::u64(0..=backoff));
                    let pause = match wait {
                        Some(w) if w > MAX_RETRY_AFTER => {
                            return Err(SendError::Fatal(ProviderError {
                                message: format!(
                                    "{} (Retry-After {} s is too long to wait)",
                                    e.message,
                                    w.as_secs()
                                ),
                                ..e
                            }));
                        }
                        Some(w) => w,
                        None => jittered,
                    };
                    log::warn!(
                        target: "event::provider_retry",
                        "{e}; retry {} of {} in {} ms",
                        attempt + 1,
                        self.retries,
                        pause.as_millis()
                    );
                    std::thread::sleep(pause);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn parse(&self, bytes: &[u8], tools: &[ToolSpec]) -> Result<ChatResponse, ProviderError> {
        let bad = |m: String| self.err(ProviderErrorKind::BadResponse, m);
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("the response is not JSON: {e}")))?;
        let Some(message) = v["choices"].get(0).map(|c| &c["message"]) else {
            return Err(bad(format!(
                "the response has no choices: {}",
                self.scrub(&server_message(bytes), None)
            )));
        };
        let content = match &message["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        };
        let mut calls = Vec::new();
        let native = message["tool_calls"]
            .as_array()
            .cloned()
            .or_else(|| {
                message
                    .get("function_call")
                    .map(|f| vec![json!({"function": f})])
            })
            .unwrap_or_default();
        for (i, tc) in native.iter().enumerate() {
            let f = &tc["function"];
            calls.push(ToolCall {
                id: tc["id"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map_or_else(|| format!("call_{i}"), String::from),
                name: f["name"].as_str().unwrap_or("").to_string(),
                arguments: decode_arguments(&f["arguments"]),
            });
        }
        // What the model wrote, for `LATCHCLAW_LOG_LEVEL=info` (diagnosing a
        // model that loops or answers with markup starts here).
        log::info!(
            target: "event::provider_reply",
            "provider {}: content {:?}, {} native call(s)",
            self.name,
            crate::util::truncate_middle(&content, 2000),
            calls.len()
        );
        let mut text = strip_think(&content);
        // Calls written as text are read in every mode: a server's template
        // may not turn what a model wrote into native calls.
        if calls.is_empty() {
            let (text_calls, rest) = parse_text_calls(&text, tools);
            calls = text_calls;
            text = rest;
        }
        let usage = usage_of(&v);
        Ok(ChatResponse {
            final_text: text.trim().to_string(),
            tool_calls: calls,
            usage,
            provider: self.name.clone(),
            model: v["model"].as_str().unwrap_or(&self.model).to_string(),
            finish_reason: v["choices"][0]["finish_reason"].as_str().map(String::from),
        })
    }
}

impl Provider for OpenAiCompatible {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_tool_calls: self.mode.get() != ToolMode::Text,
            deterministic: false,
        }
    }

    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let key = self.key()?;
        loop {
            let mode = self.mode.get();
            let body = self.body(req, mode).to_string();
            let had_tools = !req.tools.is_empty() && mode != ToolMode::Text;
            log::info!(
                "provider {}: POST {} ({} bytes, tool mode {})",
                self.name,
                self.url,
                body.len(),
                mode.as_str()
            );
            match self.send(&body, key.as_deref(), had_tools) {
                Ok(bytes) => return self.parse(&bytes, &req.tools),
                Err(SendError::ToolsUnsupported(e)) if mode == ToolMode::Auto => {
                    log::warn!(
                        target: "event::provider_tool_mode",
                        "provider {}: the server does not support native tools ({}); switching to text tool calls",
                        self.name,
                        e.message
                    );
                    self.mode.set(ToolMode::Text);
                }
                Err(
                    SendError::ToolsUnsupported(e) | SendError::Fatal(e) | SendError::Retry(e, _),
                ) => {
                    return Err(e);
                }
            }
        }
    }
}

/// The provider's own error text: `error.message`, else the start of the body.
fn server_message(bytes: &[u8]) -> String {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let m = v["error"]["message"]
        .as_str()
        .or_else(|| v["error"].as_str())
        .or_else(|| v["message"].as_str())
        .or_else(|| v["detail"].as_str());
    match m {
        Some(m) => m.to_string(),
        None => String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned(),
    }
}

fn says_tools_unsupported(text: &str) -> bool {
    let t = text.to_lowercase();
    t.contains("tool")
        && [
            "not support",
            "unsupported",
            "does not support",
            "no support",
            "not supported",
            "not available",
        ]
        .iter()
        .any(|p| t.contains(p))
}

fn wire_message(m: &Message, text_mode: bool, tool: Option<&str>) -> Value {
    match m.role {
        Role::User => json!({"role": "user", "content": m.wire_content()}),
        Role::Assistant if text_mode => {
            let mut content = m.content.clone();
            // Written back exactly as the instructions show it, name first:
            // a model copies the form of its own earlier turns.
            for c in &m.tool_calls {
                content.push_str(&format!(
                    "\n```json\n{{\"name\": {}, \"arguments\": {}}}\n```",
                    json!(c.name),
                    c.arguments
                ));
            }
            json!({"role": "assistant", "content": content})
        }
        Role::Assistant => {
            let mut v = json!({
                "role": "assistant",
                "content": if m.content.is_empty() && !m.tool_calls.is_empty() { Value::Null } else { json!(m.content) },
            });
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                    })
                    .collect();
            }
            v
        }
        Role::Tool if text_mode => json!({
            "role": "user",
            "content": format!(
                "<tool_result name={}>\n{}\n</tool_result>",
                json!(tool.unwrap_or("unknown")),
                m.content
            ),
        }),
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.as_deref().unwrap_or(""),
            "content": m.content,
        }),
    }
}

/// The fenced form is the one small coder models write unprompted
/// (Qwen2.5-Coder); told to use `<tool_call>` tags and `<tool_result>`
/// replies, the 1.5B model wrote results of its own instead of calls.
fn text_mode_instructions(req: &ChatRequest) -> String {
    let mut s = String::from(
        "\n\nYou can call tools. To call one, reply with only a block like this:\n\
         ```json\n{\"name\": \"TOOL_NAME\", \"arguments\": {...}}\n```\n\
         The result comes back in the next message; never write a result yourself. Tools:\n",
    );
    for t in &req.tools {
        s.push_str(&format!(
            "- {}: {} Parameters (JSON schema): {}\n",
            t.name, t.description, t.parameters
        ));
    }
    s
}

/// Token counts, when the server reports them. Cached prompt tokens are
/// `usage.prompt_tokens_details.cached_tokens` (OpenAI, recent llama.cpp)
/// or llama.cpp's own `timings.cache_n`.
pub(crate) fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| v["timings"]["cache_n"].as_u64())
        .unwrap_or(0);
    Some(Usage {
        prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        cached_tokens: cached,
    })
}
