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

pub fn test(ctx: &Ctx, name: Option<&str>, json: bool) -> Result<i32> {
    use crate::providers::{ChatRequest, Message, Role, ToolSpec};
    let cfg = ctx.load_config()?;
    let name = match name {
        Some(n) => ctx.provider_name(&cfg, n),
        None => cfg.default_provider.as_str(),
    };
    let pc = cfg.provider(name)?;
    let provider = crate::providers::build(&cfg, name, &ctx.redactor)?;
    let request = |text: &str, tools: Vec<ToolSpec>| ChatRequest {
        system_prompt: "You are being tested. Follow the instruction exactly.".into(),
        messages: vec![Message::new(Role::User, text)],
        tools,
        model: pc.model.clone(),
        temperature: Some(0.0),
        options: Default::default(),
        metadata: Default::default(),
    };
    let started = std::time::Instant::now();
    let text = provider.chat(&request("Reply with the single word: pong", Vec::new()));
    let text_ms = started.elapsed().as_millis();
    let tool = ToolSpec {
        name: "get_time".into(),
        description: "Returns the current time.".into(),
        parameters: json!({"type": "object", "properties": {}}),
    };
    let started = std::time::Instant::now();
    let tools = provider.chat(&request("Call the get_time tool now.", vec![tool]));
    let tools_ms = started.elapsed().as_millis();
    let native = provider.capabilities().native_tool_calls;
    // This is the test the error would suggest.
    let hint = crate::providers::provider_test_hint(name);
    let error = |e: &crate::providers::ProviderError| e.to_string().replace(&hint, "");
    let called = tools.as_ref().is_ok_and(|r| !r.tool_calls.is_empty());
    let ok = text.is_ok() && tools.is_ok();
    if json {
        print_json(&json!({
            "provider": name, "kind": pc.kind().as_str(), "model": pc.model, "ok": ok,
            "text": {"ok": text.is_ok(), "latency_ms": text_ms,
                     "reply": text.as_ref().ok().map(|r| r.final_text.clone()),
                     "error": text.as_ref().err().map(error)},
            "tools": {"ok": tools.is_ok(), "latency_ms": tools_ms, "tool_call": called,
                      "native": called && native,
                      "error": tools.as_ref().err().map(error)},
        }));
    } else {
        println!(
            "provider {name} ({}, model {})",
            pc.kind().as_str(),
            pc.model
        );
        match &text {
            Ok(r) => println!(
                "text:        ok in {text_ms} ms: {}",
                one_line(&r.final_text, 60)
            ),
            Err(e) => println!("text:        FAILED in {text_ms} ms: {}", error(e)),
        }
        match &tools {
            Ok(_) if called && native => println!("tool calls:  native, ok in {tools_ms} ms"),
            Ok(_) if called => {
                println!("tool calls:  through text (<tool_call>), ok in {tools_ms} ms")
            }
            Ok(r) => println!(
                "tool calls:  none made in {tools_ms} ms (answered: {})",
                one_line(&r.final_text, 60)
            ),
            Err(e) => println!("tool calls:  FAILED in {tools_ms} ms: {}", error(e)),
        }
    }
    Ok(if ok { exit::OK } else { exit::RUNTIME })
}
