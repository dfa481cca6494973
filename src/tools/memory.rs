//! `memory_store`, `memory_recall`, `memory_forget`: notes the model keeps
//! on purpose (see `memory::notes`). The argument readers here are shared
//! by the gate, which judges a call with them, and the tools, which act on
//! what they return.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::memory::NOTE_MAX_BYTES;
use crate::memory::notes::{NewNote, Note};
use crate::types::ToolName;
use serde_json::{Value, json};

pub use crate::types::args::{RECALL_MAX, StoreArgs, forget_id, recall_filter, store_args};

/// One note as the model and `memory notes` read it.
pub fn note_line(n: &Note) -> String {
    let day = n.created_at.get(..10).unwrap_or(&n.created_at);
    let tags = if n.tags.is_empty() {
        String::new()
    } else {
        format!(" [{}]", n.tags.join(", "))
    };
    let text: String = n
        .text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!(
        "note {} ({day}, {}){tags}: {}",
        n.id,
        n.category,
        text.trim()
    )
}

pub struct MemoryStore;

impl Tool for MemoryStore {
    fn name(&self) -> ToolName {
        ToolName::MemoryStore
    }
    fn description(&self) -> &'static str {
        "Keeps a note for later conversations (a fact, a preference, a task). Never store secrets: they are redacted."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": format!("what to remember, at most {NOTE_MAX_BYTES} bytes")},
                "category": {"type": "string", "description": "fact, preference, task or note (memory.categories)"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "up to 10 short labels"}
            },
            "required": ["text", "category"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let a = match store_args(args, &ctx.cfg.memory.categories) {
            Ok(a) => a,
            Err(e) => return ToolResult::err(e),
        };
        let stored = ctx.memory.add_note(&NewNote {
            text: &a.text,
            category: &a.category,
            tags: &a.tags,
            conversation_id: Some(ctx.conversation_id),
            source: ToolName::MemoryStore.as_str(),
        });
        match stored {
            Ok(n) => ToolResult {
                metadata: Some(json!({"id": n.id, "category": n.category, "tags": n.tags})),
                ..ToolResult::ok(format!("stored note {} ({})", n.id, n.category))
            },
            Err(e) => ToolResult::err(e.to_string()),
        }
    }
}

pub struct MemoryRecall;

impl Tool for MemoryRecall {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> ToolName {
        ToolName::MemoryRecall
    }
    fn description(&self) -> &'static str {
        "Finds stored notes by words, category, tags or date, best match first."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to look for"},
                "category": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "notes with all of these"},
                "since": {"type": "string", "description": "YYYY-MM-DD or RFC 3339"},
                "until": {"type": "string", "description": "YYYY-MM-DD or RFC 3339"},
                "limit": {"type": "integer", "description": "1 to 50, default 10"}
            }
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let f = match recall_filter(args, &ctx.cfg.memory.categories) {
            Ok(f) => f,
            Err(e) => return ToolResult::err(e),
        };
        match ctx.memory.notes(&f) {
            Ok(notes) if notes.is_empty() => ToolResult::ok("no notes match".into()),
            Ok(notes) => {
                let ids: Vec<i64> = notes.iter().map(|n| n.id).collect();
                let text = notes.iter().map(note_line).collect::<Vec<_>>().join("\n");
                ToolResult {
                    metadata: Some(json!({"ids": ids})),
                    ..ToolResult::ok(crate::util::truncate_middle(
                        &text,
                        ctx.cfg.tool_output_max_bytes,
                    ))
                }
            }
            Err(e) => ToolResult::err(e.to_string()),
        }
    }
}

pub struct MemoryForget;

impl Tool for MemoryForget {
    fn name(&self) -> ToolName {
        ToolName::MemoryForget
    }
    fn description(&self) -> &'static str {
        "Deletes a stored note by its id (from memory_recall)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"id": {"type": "integer", "description": "the note's id"}},
            "required": ["id"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let id = match forget_id(args) {
            Ok(id) => id,
            Err(e) => return ToolResult::err(e),
        };
        match ctx.memory.forget_note(id) {
            Ok(n) => ToolResult {
                metadata: Some(json!({"id": id})),
                ..ToolResult::ok(format!("forgot {}", note_line(&n)))
            },
            Err(e) => ToolResult::err(e.msg),
        }
    }
}
