//! `prompt show`: the system prompt and what a first request weighs.

use crate::cli::approve::TtyApprover;
use crate::cli::ctx::Ctx;
use crate::error::{Result, exit};
use crate::runtime::Runtime;

pub fn show(
    ctx: &Ctx,
    message: Option<&str>,
    conversation: Option<&str>,
    json: bool,
) -> Result<i32> {
    use crate::config::ToolMode;
    use crate::providers::{ChatRequest, Message, Role, openai};
    let cfg = ctx.load_config()?;
    let approver = TtyApprover;
    let rt = Runtime::new(&cfg, &approver, std::sync::Arc::clone(&ctx.redactor))?;
    let message = message.unwrap_or("");
    let notes = if message.is_empty() {
        None
    } else {
        rt.memory_notes(message, conversation)?.0
    };
    let previous = rt.previous_layer(conversation)?;
    let layers = crate::prompt::layers(&cfg, &rt.gate, &previous)?;
    let system = crate::prompt::build(&cfg, &rt.gate, &previous)?;
    let tools = rt.tool_specs();
    // The first request of a turn as an OpenAI-compatible server gets it.
    let req = ChatRequest {
        system_prompt: system.clone(),
        messages: vec![Message {
            notes: notes.clone(),
            ..Message::new(Role::User, message)
        }],
        tools: tools.clone(),
        model: cfg.default_model.clone(),
        temperature: None,
        options: Default::default(),
        metadata: Default::default(),
        calls_only: false,
    };
    let native = openai::wire_body(&req, ToolMode::Native, None, None).to_string();
    let text = openai::wire_body(&req, ToolMode::Text, None, None).to_string();
    let structured = openai::wire_body(&req, ToolMode::Structured, None, None).to_string();
    let mode = tool_mode(&cfg);
    let tool_bytes: Vec<(String, usize)> = tools
        .iter()
        .map(|t| {
            let schema = serde_json::json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}});
            (t.name.clone(), schema.to_string().len())
        })
        .collect();
    if json {
        let v = serde_json::json!({
            "system_prompt": system,
            "memory_notes": notes,
            "layers": layers.iter().map(|(n, t)| serde_json::json!({"name": n, "bytes": t.len()}))
                .collect::<Vec<_>>(),
            "system_prompt_bytes": system.len(),
            "memory_notes_bytes": notes.as_ref().map_or(0, String::len),
            "tools": tool_bytes.iter().map(|(n, b)| serde_json::json!({"name": n, "bytes": b}))
                .collect::<Vec<_>>(),
            "request_bytes": {"native": native.len(), "text": text.len(),
                              "structured": structured.len()},
            "tool_mode": mode.as_ref().map(|(configured, uses, why)| serde_json::json!({
                "provider": cfg.default_provider, "configured": configured.as_str(),
                "uses": uses.as_str(), "why": why,
            })),
        });
        println!("{v:#}");
        return Ok(exit::OK);
    }
    println!("{system}");
    if let Some(n) = &notes {
        println!("\n--- memory notes, sent with the message (not in the system prompt) ---\n{n}");
    }
    println!("\n--- bytes per layer ---");
    for (name, t) in &layers {
        println!("{name:<24} {:>6}", t.len());
    }
    println!("{:<24} {:>6}", "system prompt", system.len());
    for (name, b) in &tool_bytes {
        println!("{:<24} {b:>6}", format!("tool {name}"));
    }
    println!(
        "{:<24} {:>6}",
        "memory notes",
        notes.as_ref().map_or(0, String::len)
    );
    println!("{:<24} {:>6}", "request, native tools", native.len());
    println!("{:<24} {:>6}", "request, text tools", text.len());
    println!("{:<24} {:>6}", "request, structured", structured.len());
    if let Some((configured, uses, why)) = &mode {
        let what = match why {
            Some(why) => format!("{} uses {} ({why})", configured.as_str(), uses.as_str()),
            None => uses.as_str().to_string(),
        };
        println!("\ntool mode of {}: {what}", cfg.default_provider);
    }
    Ok(exit::OK)
}

/// The default provider's tool mode when it is openai-compatible: as
/// configured, what a run starts with, and what it learned (README: Small
/// local models).
fn tool_mode(
    cfg: &crate::config::Config,
) -> Option<(
    crate::config::ToolMode,
    crate::config::ToolMode,
    Option<String>,
)> {
    let p = cfg.provider(&cfg.default_provider).ok()?;
    let crate::config::ProviderSettings::OpenAiCompatible(o) = &p.settings else {
        return None;
    };
    let store =
        crate::providers::learned::Store::new(&cfg.state_dir, &p.name, &o.base_url, &p.model);
    let learned = store.get();
    let uses = crate::providers::openai::start_mode(o.tool_mode, learned.as_ref());
    let why = learned
        .filter(|_| uses != o.tool_mode)
        .map(|e| format!("learned {}: {}", e.at.get(..10).unwrap_or(&e.at), e.why));
    Some((o.tool_mode, uses, why))
}
