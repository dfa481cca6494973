//! `provider list`, `provider test`.

use super::config::env_is_set;
use crate::cli::ctx::{Ctx, print_json};
use crate::config::{ProviderConfig, ProviderSettings};
use crate::error::{Result, exit};
use crate::util::one_line;
use serde_json::{Value, json};

pub fn list(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let rows: Vec<Value> = cfg
        .providers
        .values()
        .map(|p| {
            json!({
                "name": p.name, "kind": p.kind().as_str(), "model": p.model,
                "base_url": base_url(p), "api_key_env": p.api_key_env(),
                "api_key_set": env_is_set(p.api_key_env()),
                "default": p.name == cfg.default_provider,
                "providers": match &p.settings {
                    ProviderSettings::Reliable(r) => r.providers.clone(),
                    _ => Vec::new(),
                },
            })
        })
        .collect();
    if json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    println!(
        "{:20} {:18} {:14} {:28} KEY",
        "NAME", "KIND", "MODEL", "BASE URL"
    );
    for p in cfg.providers.values() {
        let key = match (p.api_key_env(), env_is_set(p.api_key_env())) {
            (Some(k), Some(true)) => format!("{k} (set)"),
            (Some(k), _) => format!("{k} (not set)"),
            (None, _) => "-".into(),
        };
        let mut name = p.name.clone();
        if p.name == cfg.default_provider {
            name.push_str(" *");
        }
        let url = match &p.settings {
            ProviderSettings::Reliable(r) => r.providers.join(" -> "),
            _ => base_url(p).unwrap_or("-").to_string(),
        };
        println!(
            "{name:20} {:18} {:14} {url:28} {key}",
            p.kind().as_str(),
            p.model
        );
    }
    println!("(* = default_provider)");
    Ok(exit::OK)
}

fn base_url(p: &ProviderConfig) -> Option<&str> {
    match &p.settings {
        ProviderSettings::OpenAiCompatible(o) => Some(&o.base_url),
        _ => None,
    }
}

/// The tiny requests `provider test` sends.
fn request(
    model: &str,
    text: &str,
    tools: Vec<crate::providers::ToolSpec>,
) -> crate::providers::ChatRequest {
    use crate::providers::{ChatRequest, Message, Role};
    ChatRequest {
        system_prompt: "You are being tested. Follow the instruction exactly.".into(),
        messages: vec![Message::new(Role::User, text)],
        tools,
        model: model.into(),
        temperature: Some(0.0),
        options: Default::default(),
        metadata: Default::default(),
        calls_only: false,
    }
}

fn probe_tool() -> crate::providers::ToolSpec {
    crate::providers::ToolSpec {
        name: "get_time".into(),
        description: "Returns the current time.".into(),
        parameters: json!({"type": "object", "properties": {}}),
        example: json!({}),
        bounds: Value::Null,
    }
}

const TEXT_PROBE: &str = "Reply with the single word: pong";
const TOOL_PROBE: &str = "Call the get_time tool now.";

type Probe = (
    std::result::Result<crate::providers::ChatResponse, crate::providers::ProviderError>,
    u128,
);

fn timed(
    f: impl FnOnce() -> std::result::Result<
        crate::providers::ChatResponse,
        crate::providers::ProviderError,
    >,
) -> Probe {
    let started = std::time::Instant::now();
    let r = f();
    (r, started.elapsed().as_millis())
}

/// What `provider test` found about tool calls on an openai-compatible
/// server, and the tool mode it chose.
struct Modes {
    configured: ToolMode,
    /// The native (or, under `text`, text) tool probe.
    tools: Option<Probe>,
    /// Whether the native probe's call came back as text.
    as_text: bool,
    structured: Option<Probe>,
    /// The server's words when it refused `response_format`.
    refused: Option<String>,
    uses: ToolMode,
    why: String,
}

use crate::config::ToolMode;

/// The tool probes by configured mode: `auto` native first, then (when the
/// call came back as text or not at all) structured; `structured` and
/// `text` their own; the choice is kept for later runs (`learned.rs`).
fn probe_modes(p: &crate::providers::openai::OpenAiCompatible, model: &str) -> Modes {
    let (configured, _) = p.tool_modes();
    let ask = |mode| timed(|| p.chat_as(&request(model, TOOL_PROBE, vec![probe_tool()]), mode));
    let called = |probe: &Probe| probe.0.as_ref().is_ok_and(|r| !r.tool_calls.is_empty());
    let mut m = Modes {
        configured,
        tools: None,
        as_text: false,
        structured: None,
        refused: None,
        uses: configured,
        why: "configured".into(),
    };
    match configured {
        ToolMode::Native | ToolMode::Text => m.tools = Some(ask(configured)),
        ToolMode::Structured => {
            let s = ask(ToolMode::Structured);
            if let Some(why) = p.refusal() {
                m.refused = Some(why);
                m.uses = ToolMode::Text;
                m.why = "the server refuses response_format".into();
            }
            m.structured = Some(s);
        }
        ToolMode::Auto => {
            let native = ask(ToolMode::Auto);
            let (_, after) = p.tool_modes();
            m.as_text = after == ToolMode::Structured;
            let fine = called(&native) && after == ToolMode::Auto;
            m.tools = Some(native);
            (m.uses, m.why) = if after == ToolMode::Text {
                (
                    ToolMode::Text,
                    "the server does not support native tools".into(),
                )
            } else if fine {
                (
                    ToolMode::Native,
                    "the model's calls come back as native calls".into(),
                )
            } else {
                let s = ask(ToolMode::Structured);
                let choice = if let Some(why) = p.refusal() {
                    m.refused = Some(why);
                    (
                        ToolMode::Text,
                        "the server refuses response_format".to_string(),
                    )
                } else if called(&s) {
                    let how = if m.as_text {
                        "the model writes its tool calls as text; structured replies work"
                    } else {
                        "the model made no native call; structured replies work"
                    };
                    (ToolMode::Structured, how.to_string())
                } else {
                    (ToolMode::Native, "no tool call in either form".to_string())
                };
                m.structured = Some(s);
                choice
            };
            p.remember(m.uses, &m.why);
        }
    }
    m
}

pub fn test(ctx: &Ctx, name: Option<&str>, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let name = match name {
        Some(n) => ctx.provider_name(&cfg, n),
        None => cfg.default_provider.as_str(),
    };
    let pc = cfg.provider(name)?;
    let provider = crate::providers::build(&cfg, name, &ctx.redactor)?;
    // An openai-compatible provider is probed in each tool mode it may use.
    let openai = match &pc.settings {
        ProviderSettings::OpenAiCompatible(o) => {
            Some(crate::providers::openai::OpenAiCompatible::from_config(
                pc,
                o,
                cfg.max_response_bytes,
                std::sync::Arc::clone(&ctx.redactor),
                Some(&cfg.state_dir),
            ))
        }
        _ => None,
    };
    let plain = request(&pc.model, TEXT_PROBE, Vec::new());
    let text = timed(|| match &openai {
        // Plain text, whatever the tool mode.
        Some(p) => p.chat_as(&plain, ToolMode::Native),
        None => provider.chat(&plain),
    });
    let modes = openai.as_ref().map(|p| probe_modes(p, &pc.model));
    // Other kinds: one tool request, as the provider would send it.
    let tools = match &modes {
        Some(m) => m.tools.as_ref().or(m.structured.as_ref()),
        None => None,
    };
    let generic;
    let tools = match tools {
        Some(t) => t,
        None => {
            generic = timed(|| provider.chat(&request(&pc.model, TOOL_PROBE, vec![probe_tool()])));
            &generic
        }
    };
    let (tools, tools_ms) = (&tools.0, tools.1);
    let (text, text_ms) = (&text.0, text.1);
    let native = modes
        .as_ref()
        .map_or(provider.capabilities().native_tool_calls, |m| {
            m.tools.is_some() && !m.as_text && m.configured != ToolMode::Text
        });
    let called = tools.as_ref().is_ok_and(|r| !r.tool_calls.is_empty());
    let structured = modes.as_ref().and_then(|m| m.structured.as_ref());
    let structured_ok = structured.is_none_or(|s| s.0.is_ok());
    let ok = text.is_ok() && tools.is_ok() && structured_ok;
    // This is the test the error would suggest.
    let hint = crate::providers::provider_test_hint(name);
    let error = |e: &crate::providers::ProviderError| e.to_string().replace(&hint, "");
    let structured_called =
        structured.is_some_and(|s| s.0.as_ref().is_ok_and(|r| !r.tool_calls.is_empty()));
    if json {
        print_json(&json!({
            "provider": name, "kind": pc.kind().as_str(), "model": pc.model, "ok": ok,
            "text": {"ok": text.is_ok(), "latency_ms": text_ms,
                     "reply": text.as_ref().ok().map(|r| r.final_text.clone()),
                     "error": text.as_ref().err().map(error)},
            "tools": {"ok": tools.is_ok(), "latency_ms": tools_ms, "tool_call": called,
                      "native": called && native,
                      "error": tools.as_ref().err().map(error)},
            "structured": structured.map(|s| json!({
                "ok": s.0.is_ok(), "latency_ms": s.1,
                "accepted": modes.as_ref().is_some_and(|m| m.refused.is_none()),
                "refused": modes.as_ref().and_then(|m| m.refused.clone()),
                "tool_call": structured_called,
                "error": s.0.as_ref().err().map(error),
            })),
            "tool_mode": modes.as_ref().map(|m| json!({
                "configured": m.configured.as_str(), "uses": m.uses.as_str(), "why": m.why,
            })),
        }));
    } else {
        println!(
            "provider {name} ({}, model {})",
            pc.kind().as_str(),
            pc.model
        );
        match text {
            Ok(r) => println!(
                "text:        ok in {text_ms} ms: {}",
                one_line(&r.final_text, 60)
            ),
            Err(e) => println!("text:        FAILED in {text_ms} ms: {}", error(e)),
        }
        let tried_tools = modes.as_ref().is_none_or(|m| m.tools.is_some());
        if tried_tools {
            match tools {
                Ok(_) if called && native => println!("tool calls:  native, ok in {tools_ms} ms"),
                Ok(_) if called => {
                    println!("tool calls:  through text, ok in {tools_ms} ms")
                }
                Ok(r) => println!(
                    "tool calls:  none made in {tools_ms} ms (answered: {})",
                    one_line(&r.final_text, 60)
                ),
                Err(e) => println!("tool calls:  FAILED in {tools_ms} ms: {}", error(e)),
            }
        }
        if let (Some(s), Some(m)) = (structured, &modes) {
            let ms = s.1;
            match (&s.0, &m.refused) {
                (_, Some(why)) => println!(
                    "structured:  refused by the server in {ms} ms ({}); text tool calls instead",
                    one_line(why, 80)
                ),
                (Ok(_), None) if structured_called => {
                    println!("structured:  ok in {ms} ms (response_format accepted, the call read)")
                }
                (Ok(r), None) => println!(
                    "structured:  accepted in {ms} ms, no call made (answered: {})",
                    one_line(&r.final_text, 60)
                ),
                (Err(e), None) => println!("structured:  FAILED in {ms} ms: {}", error(e)),
            }
        }
        if let Some(m) = &modes {
            if m.configured == m.uses {
                println!("tool mode:   {}", m.uses.as_str());
            } else {
                println!(
                    "tool mode:   {} uses {}: {}",
                    m.configured.as_str(),
                    m.uses.as_str(),
                    m.why
                );
            }
        }
    }
    Ok(if ok { exit::OK } else { exit::RUNTIME })
}
