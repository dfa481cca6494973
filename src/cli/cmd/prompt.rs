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
    let layers = crate::prompt::layers(&cfg, &rt.gate)?;
    let system = crate::prompt::build(&cfg, &rt.gate)?;
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
    };
    let native = openai::wire_body(&req, ToolMode::Native, None, None).to_string();
    let text = openai::wire_body(&req, ToolMode::Text, None, None).to_string();
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
            "request_bytes": {"native": native.len(), "text": text.len()},
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
    Ok(exit::OK)
}
