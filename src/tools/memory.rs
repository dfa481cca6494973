//! `memory_store`, `memory_recall`, `memory_forget`: what the model keeps
//! on purpose, in two stores (see `memory::notes`): `user_memory` and
//! `summaries`. The argument readers here are shared by the gate, which
//! judges a call with them, and the tools, which act on what they return.

use super::tool::{Tool, ToolCtx, ToolResult};
use crate::memory::notes::{NewNote, Note};
use crate::memory::{NOTE_MAX_BYTES, Store};
use crate::types::ToolName;
use crate::types::period::SummaryType;
use serde_json::{Value, json};

pub use crate::types::args::{
    RECALL_MAX, StoreArgs, forget_args, forget_id, recall_filter, store_args,
};

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
    if n.store == Store::Summaries {
        let of = n
            .chat_id
            .as_deref()
            .map(|c| format!(" of {c}"))
            .unwrap_or_default();
        return format!(
            "summary {} ({}, {}{of}){tags}: {}",
            n.id,
            n.category,
            n.period_key.as_deref().unwrap_or("?"),
            text.trim()
        );
    }
    let priority = n
        .priority
        .map(|p| format!(", priority {p}"))
        .unwrap_or_default();
    format!(
        "note {} ({day}, {}{priority}){tags}: {}",
        n.id,
        n.category,
        text.trim()
    )
}

/// One item in the seed's shape: `id`, `store`, `type`, `content`, `tags`,
/// `period_key`, `chat_id`, `created_at`, `relevance` (null unless found by
/// a query), and `pursuingPriority` when it has one.
pub fn item_json(n: &Note) -> Value {
    let mut v = json!({
        "id": n.id,
        "store": n.store.as_str(),
        "type": n.category,
        "content": n.text,
        "tags": n.tags,
        "period_key": n.period_key,
        "chat_id": n.chat_id,
        "created_at": n.created_at,
        "relevance": n.score,
    });
    if let (Some(p), Some(o)) = (n.priority, v.as_object_mut()) {
        o.insert("pursuingPriority".into(), json!(p));
    }
    v
}

pub struct MemoryStore;

impl Tool for MemoryStore {
    fn name(&self) -> ToolName {
        ToolName::MemoryStore
    }
    fn description(&self) -> &'static str {
        "Keeps an item across conversations: in user_memory (a fact, a preference, a goal, \
         a project, an open loop…) or in summaries (of a conversation or a period). \
         Never store secrets: they are redacted."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": format!("what to remember, at most {NOTE_MAX_BYTES} bytes")},
                "category": {"type": "string", "description": "user_memory: fact, preference, life-goal, project, open-loop, relationship, health, work, personal-context (and memory.categories); summaries: a summary type"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "up to 10 short labels"},
                "store": {"type": "string", "description": "user_memory (default) or summaries"},
                "pursuingPriority": {"type": "integer", "description": "0 to 100: life-goal, project, open-loop only"},
                "summary_type": {"type": "string", "description": format!("store summaries: {}", SummaryType::allowed())},
                "period_key": {"type": "string", "description": "store summaries: YYYY-MM-DD (daily, conversation), YYYY-Www, YYYY-MM, YYYY-Qn, YYYY"},
                "chat_id": {"type": "string", "description": "conversation-summary: its conversation id"}
            },
            "required": ["text", "category"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let a = match store_args(args, &ctx.cfg.memory.all_categories()) {
            Ok(a) => a,
            Err(e) => return ToolResult::err(e),
        };
        let hour = ctx.cfg.memory.session_hour;
        let period = a.period.as_ref().map(|s| {
            (
                s.key.as_str(),
                crate::memory::local_day_start(s.start, hour),
                crate::memory::local_day_start(s.end, hour),
            )
        });
        let covers: Vec<String> = a.chat_id.iter().cloned().collect();
        let stored = ctx.memory.add_note(&NewNote {
            text: &a.text,
            category: &a.category,
            tags: &a.tags,
            conversation_id: Some(ctx.conversation_id),
            source: ToolName::MemoryStore.as_str(),
            store: a.store,
            priority: a.priority,
            period,
            chat_id: a.chat_id.as_deref(),
            covers: &covers,
        });
        match stored {
            Ok(n) => {
                let mut meta = item_json(&n);
                if let Some(o) = meta.as_object_mut() {
                    o.insert("category".into(), json!(n.category));
                }
                let what = if n.store == Store::Summaries {
                    "summary"
                } else {
                    "note"
                };
                ToolResult {
                    metadata: Some(meta),
                    ..ToolResult::ok(format!("stored {what} {} ({})", n.id, n.category))
                }
            }
            Err(e) => ToolResult::err(e.msg),
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
        "Finds stored items (user_memory and summaries) by words, store, categories, summary \
         types, time range or period key, best match first."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to look for"},
                "store_filter": {"type": "string", "description": "user_memory or summaries (default: both)"},
                "categories": {"type": "array", "items": {"type": "string"}, "description": "user_memory items of any of these"},
                "summary_types": {"type": "array", "items": {"type": "string"}, "description": "summaries of any of these types"},
                "period_key_prefix": {"type": "string", "description": "summaries whose period key starts so, e.g. 2026-11"},
                "from": {"type": "string", "description": "YYYY-MM-DD or RFC 3339"},
                "to": {"type": "string", "description": "YYYY-MM-DD or RFC 3339"},
                "category": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "items with all of these"},
                "since": {"type": "string", "description": "as from"},
                "until": {"type": "string", "description": "as to"},
                "limit": {"type": "integer", "description": "1 to 50, default 10"}
            }
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let f = match recall_filter(args, &ctx.cfg.memory.all_categories()) {
            Ok(f) => f,
            Err(e) => return ToolResult::err(e),
        };
        match ctx.memory.notes(&f) {
            Ok(notes) if notes.is_empty() => ToolResult::ok("no notes match".into()),
            Ok(notes) => {
                let ids: Vec<i64> = notes.iter().map(|n| n.id).collect();
                let results: Vec<Value> = notes.iter().map(item_json).collect();
                let text = notes.iter().map(note_line).collect::<Vec<_>>().join("\n");
                ToolResult {
                    metadata: Some(json!({"ids": ids, "results": results})),
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
        "Deletes a stored item by its id (from memory_recall)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "integer", "description": "the item's id"},
                "store": {"type": "string", "description": "user_memory or summaries: the store it must be in"}
            },
            "required": ["id"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let (id, store) = match forget_args(args) {
            Ok(a) => a,
            Err(e) => return ToolResult::err(e),
        };
        if let Some(want) = store {
            match ctx.memory.note(id) {
                Ok(Some(n)) if n.store != want => {
                    return ToolResult::err(format!(
                        "item {id} is in {}, not {}",
                        n.store.as_str(),
                        want.as_str()
                    ));
                }
                Err(e) => return ToolResult::err(e.msg),
                _ => {}
            }
        }
        match ctx.memory.forget_note(id) {
            Ok(n) => ToolResult {
                metadata: Some(json!({"id": id, "store": n.store.as_str()})),
                ..ToolResult::ok(format!("forgot {}", note_line(&n)))
            },
            Err(e) => ToolResult::err(e.msg),
        }
    }
}
