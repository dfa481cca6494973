//! Each tool's arguments, read from a model's JSON and checked once: the
//! gate judges a call with these readers and the tools act on what they
//! return, so the two cannot read a call differently. Errors name the
//! field and what is allowed; the model reads them and tries again.

use super::period::{Span, SummaryType, days_from_civil, days_in_month, parse_key};
use serde_json::{Map, Value};

// ask_user

pub const MAX_QUESTION_BYTES: usize = 1024;

/// The question a call asks, as the gate checks it: a non-empty string of
/// at most `MAX_QUESTION_BYTES`.
pub fn question(args: &Value) -> Result<&str, String> {
    let q = match args.get("question") {
        Some(Value::String(q)) => q.as_str(),
        Some(_) => return Err("\"question\" must be a string".into()),
        None => return Err("\"question\" is required".into()),
    };
    if q.trim().is_empty() {
        return Err("\"question\" is empty".into());
    }
    if q.len() > MAX_QUESTION_BYTES {
        return Err(format!(
            "\"question\" is {} bytes; the limit is {MAX_QUESTION_BYTES}",
            q.len()
        ));
    }
    Ok(q)
}

// plan

/// The deepest a plan's payload may nest, whatever `[plan] max_depth`
/// says (that budget is the run's; this is the reader's bound).
pub const PLAN_MAX_DEPTH: usize = 8;
/// The most tasks one payload may hold.
pub const PLAN_MAX_TASKS: usize = 200;
/// The longest `title`.
pub const PLAN_TITLE_MAX_CHARS: usize = 200;
/// The longest `purpose`, `instructions` or `evaluation`.
pub const PLAN_TEXT_MAX_BYTES: usize = 4096;

/// One task of a `plan` call, checked: a leaf when `subtasks` is empty.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlanTask {
    pub title: String,
    pub purpose: String,
    pub instructions: String,
    /// What a leaf's result must show; for a parent, what its children's
    /// results are checked against.
    pub evaluation: String,
    /// The tools a leaf may call, by name (`None`: none named).
    pub tools: Option<Vec<String>>,
    pub subtasks: Vec<PlanTask>,
}

/// A `plan` call's `tasks`, checked: each task an object with the four
/// texts, `tools` a list of names, `subtasks` a list of tasks; within
/// `PLAN_MAX_DEPTH` and `PLAN_MAX_TASKS`. Which tools exist and may be
/// named is the gate's to say.
pub fn plan_tasks(args: &Value) -> Result<Vec<PlanTask>, String> {
    let tasks = match args.get("tasks") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err("\"tasks\" is empty".into()),
        Some(_) => return Err("\"tasks\" must be an array of tasks".into()),
        None => return Err("\"tasks\" is required".into()),
    };
    let mut count = 0;
    plan_list(tasks, "tasks", 1, &mut count)
}

fn plan_list(
    items: &[Value],
    at: &str,
    depth: usize,
    count: &mut usize,
) -> Result<Vec<PlanTask>, String> {
    if depth > PLAN_MAX_DEPTH {
        return Err(format!(
            "{at}: tasks nest deeper than {PLAN_MAX_DEPTH} levels"
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| plan_task(v, &format!("{at}[{i}]"), depth, count))
        .collect()
}

fn plan_task(v: &Value, at: &str, depth: usize, count: &mut usize) -> Result<PlanTask, String> {
    *count += 1;
    if *count > PLAN_MAX_TASKS {
        return Err(format!("a plan holds at most {PLAN_MAX_TASKS} tasks"));
    }
    let Some(obj) = v.as_object() else {
        return Err(format!(
            "{at} must be an object with title, purpose, instructions, evaluation, and \
             optionally tools and subtasks"
        ));
    };
    const KEYS: [&str; 6] = [
        "title",
        "purpose",
        "instructions",
        "evaluation",
        "tools",
        "subtasks",
    ];
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "{at}: unknown key \"{k}\"; a task has {}",
            KEYS.join(", ")
        ));
    }
    let text = |key: &str, required: bool| -> Result<String, String> {
        match obj.get(key) {
            Some(Value::String(s)) if s.len() > PLAN_TEXT_MAX_BYTES => Err(format!(
                "{at}.{key} is {} bytes; the limit is {PLAN_TEXT_MAX_BYTES}",
                s.len()
            )),
            Some(Value::String(s)) => Ok(s.trim().to_string()),
            Some(_) => Err(format!("{at}.{key} must be a string")),
            None if required => Err(format!("{at}.{key} is required")),
            None => Ok(String::new()),
        }
    };
    let title = text("title", true)?;
    if title.is_empty() {
        return Err(format!("{at}.title is empty"));
    }
    if title.chars().count() > PLAN_TITLE_MAX_CHARS {
        return Err(format!(
            "{at}.title is over {PLAN_TITLE_MAX_CHARS} characters"
        ));
    }
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|t| {
                    t.as_str()
                        .map(String::from)
                        .ok_or_else(|| format!("{at}.tools must be a list of tool names"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err(format!("{at}.tools must be a list of tool names")),
    };
    let subtasks = match obj.get("subtasks") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => plan_list(a, &format!("{at}.subtasks"), depth + 1, count)?,
        Some(_) => return Err(format!("{at}.subtasks must be a list of tasks")),
    };
    Ok(PlanTask {
        title,
        purpose: text("purpose", true)?,
        instructions: text("instructions", true)?,
        evaluation: text("evaluation", true)?,
        tools,
        subtasks,
    })
}

/// How deep a task list goes (1: only leaves).
pub fn plan_depth(tasks: &[PlanTask]) -> usize {
    tasks
        .iter()
        .map(|t| 1 + plan_depth(&t.subtasks))
        .max()
        .unwrap_or(0)
}

/// Every task of a list, its subtasks' included.
pub fn plan_count(tasks: &[PlanTask]) -> usize {
    tasks.iter().map(|t| 1 + plan_count(&t.subtasks)).sum()
}
// code_run

/// The most code one call may carry.
pub const CODE_MAX_BYTES: usize = 256 * 1024;
/// The most stdin one call may hand the snippet.
pub const CODE_STDIN_MAX_BYTES: usize = 1024 * 1024;
pub const CODE_LANGUAGES: &[&str] = &["python", "node"];

/// A `code_run` call, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeArgs<'a> {
    /// `python` or `node`.
    pub language: &'a str,
    pub code: &'a str,
    pub stdin: Option<&'a str>,
    pub timeout_secs: Option<u64>,
    pub background: bool,
}

pub fn code_args(args: &Value) -> Result<CodeArgs<'_>, String> {
    let string = |key: &str, required: bool| match args.get(key) {
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(format!("\"{key}\" must be a string")),
        None if required => Err(format!("\"{key}\" is required")),
        None => Ok(None),
    };
    let language = string("language", true)?.unwrap_or_default();
    if !CODE_LANGUAGES.contains(&language) {
        return Err(format!(
            "\"language\": \"{}\" is not allowed; allowed: {}",
            crate::util::printable(language),
            CODE_LANGUAGES.join(", ")
        ));
    }
    let code = string("code", true)?.unwrap_or_default();
    if code.trim().is_empty() {
        return Err("\"code\" is empty".into());
    }
    if code.len() > CODE_MAX_BYTES {
        return Err(format!(
            "\"code\" is {} bytes; the limit is {CODE_MAX_BYTES}",
            code.len()
        ));
    }
    let stdin = string("stdin", false)?;
    if let Some(s) = stdin
        && s.len() > CODE_STDIN_MAX_BYTES
    {
        return Err(format!(
            "\"stdin\" is {} bytes; the limit is {CODE_STDIN_MAX_BYTES}",
            s.len()
        ));
    }
    let timeout_secs = match args.get("timeout_secs") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=3600).contains(&n) => Some(n),
            _ => return Err("\"timeout_secs\" must be an integer from 1 to 3600".into()),
        },
    };
    let background = match args.get("background") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("\"background\" must be true or false".into()),
    };
    Ok(CodeArgs {
        language,
        code,
        stdin,
        timeout_secs,
        background,
    })
}

/// The job a `code_status` call asks about.
pub fn job_id(args: &Value) -> Result<&str, String> {
    match args.get("job") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 64 => Ok(s),
        Some(_) => {
            Err("\"job\" must be a job id (the string code_run's background run answered)".into())
        }
        None => Err("\"job\" is required".into()),
    }
}

// shell

/// The longest `timeout_ms` and `max_output_chars` a call may ask; the
/// configured limits cap them further.
pub const SHELL_MAX_TIMEOUT_MS: u64 = 3_600_000;
pub const SHELL_MAX_OUTPUT_CHARS: u64 = 10_000_000;

/// A `shell` call's arguments, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShellArgs<'a> {
    pub command: &'a str,
    /// A workspace directory the command runs in, judged as a leading
    /// `cd DIR &&`; `None` for the workspace root.
    pub cwd: Option<&'a str>,
    pub timeout_ms: Option<u64>,
    pub max_output_chars: Option<u64>,
}

/// Reads and checks `shell` arguments.
pub fn shell_args(args: &Value) -> Result<ShellArgs<'_>, String> {
    let obj = object(args)?;
    let command = string(obj, "command")?.ok_or("\"command\" is required")?;
    let cwd = match string(obj, "cwd")? {
        None | Some("" | ".") => None,
        Some(d) if d.contains(['\'', '\0', '\n']) => {
            return Err(format!(
                "\"cwd\" \"{}\" holds a quote, NUL or newline; name a directory in the workspace",
                crate::util::printable(d)
            ));
        }
        Some(d) => Some(d),
    };
    let int = |key: &str, max: u64| match obj.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n @ 1..) if n <= max => Ok(Some(n)),
            _ => Err(format!("\"{key}\" must be an integer from 1 to {max}")),
        },
    };
    Ok(ShellArgs {
        command,
        cwd,
        timeout_ms: int("timeout_ms", SHELL_MAX_TIMEOUT_MS)?,
        max_output_chars: int("max_output_chars", SHELL_MAX_OUTPUT_CHARS)?,
    })
}

// web_search

pub const MAX_RESULTS: u64 = 10;
const DEFAULT_RESULTS: u64 = 5;
pub const MAX_QUERY_BYTES: usize = 400;
/// What to do when no provider is configured, for refusals.
pub const NOT_CONFIGURED: &str = "web_search is not configured: add [tools.web_search] with \
     provider = \"searxng\" and url = \"https://your-instance\", or provider = \"brave\" and \
     api_key_env = \"BRAVE_API_KEY\", and list the service's host in tools.http.allowed_domains";

/// The call's query and result count, checked.
pub fn read_args(args: &Value) -> Result<(&str, u64), String> {
    let query = match args.get("query") {
        Some(Value::String(q)) => q.trim(),
        Some(_) => return Err("\"query\" must be a string".into()),
        None => return Err("\"query\" is required".into()),
    };
    if query.is_empty() {
        return Err("\"query\" is empty".into());
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(format!(
            "\"query\" is {} bytes; the limit is {MAX_QUERY_BYTES}",
            query.len()
        ));
    }
    let limit = match args.get("limit") {
        None => DEFAULT_RESULTS,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=MAX_RESULTS) => n,
            _ => {
                return Err(format!(
                    "\"limit\" must be an integer from 1 to {MAX_RESULTS}"
                ));
            }
        },
    };
    Ok((query, limit))
}

// memory_store, memory_recall, memory_forget; the note rules `memory`
// applies again when it stores one

/// The most notes one recall returns.
pub const RECALL_MAX: u64 = 50;
const RECALL_DEFAULT: u32 = 10;

/// The categories of `user_memory` every install accepts, as written;
/// `memory.categories` adds to them.
pub const SEED_CATEGORIES: [&str; 9] = [
    "fact",
    "preference",
    "life-goal",
    "project",
    "open-loop",
    "relationship",
    "health",
    "work",
    "personal-context",
];

/// The categories whose items carry a `pursuingPriority`.
pub const PRIORITY_CATEGORIES: [&str; 3] = ["life-goal", "project", "open-loop"];

/// The configured categories, then the seed's ones not among them.
pub fn all_categories(configured: &[String]) -> Vec<String> {
    let mut out = configured.to_vec();
    for c in SEED_CATEGORIES {
        if !out.iter().any(|o| o == c) {
            out.push(c.to_string());
        }
    }
    out
}

/// Which store an item lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Store {
    /// Life and work context, filed by category.
    #[default]
    #[serde(rename = "user_memory")]
    UserMemory,
    /// Calendar roll-ups and conversation summaries, keyed by period.
    #[serde(rename = "summaries")]
    Summaries,
}

impl Store {
    pub const ALLOWED: &[&str] = &["user_memory", "summaries"];

    pub const fn as_str(self) -> &'static str {
        match self {
            Store::UserMemory => "user_memory",
            Store::Summaries => "summaries",
        }
    }

    pub fn parse(s: &str) -> Option<Store> {
        [Store::UserMemory, Store::Summaries]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// A `memory_store` call's arguments, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreArgs {
    pub text: String,
    /// A category of `user_memory`, or a summary type.
    pub category: String,
    /// As stored: trimmed, lower-cased, no repeats.
    pub tags: Vec<String>,
    pub store: Store,
    /// 0 to 100, for goals, projects and open loops.
    pub priority: Option<u8>,
    /// A summary's period, its key checked against its type.
    pub period: Option<Span>,
    /// The conversation a `conversation-summary` is of.
    pub chat_id: Option<String>,
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("\"{key}\" must be a string")),
    }
}

fn strings(obj: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    match obj.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| format!("\"{key}\"[{i}] must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("\"{key}\" must be an array of strings")),
    }
}

fn tags(obj: &Map<String, Value>) -> Result<Vec<String>, String> {
    strings(obj, "tags")
}

fn object(args: &Value) -> Result<&Map<String, Value>, String> {
    args.as_object()
        .ok_or_else(|| "tool arguments must be a JSON object".to_string())
}

fn store_of(obj: &Map<String, Value>, key: &str) -> Result<Option<Store>, String> {
    string(obj, key)?
        .map(|s| {
            Store::parse(s).ok_or_else(|| {
                format!(
                    "unknown {key} \"{}\"; allowed: {}",
                    crate::util::printable(s),
                    Store::ALLOWED.join(", ")
                )
            })
        })
        .transpose()
}

fn summary_type(s: &str) -> Result<SummaryType, String> {
    SummaryType::parse(s).ok_or_else(|| {
        format!(
            "unknown summary type \"{}\"; allowed: {}",
            crate::util::printable(s),
            SummaryType::allowed()
        )
    })
}

/// A summary's chat id: a conversation id as latchclaw writes them.
pub fn check_chat_id(id: &str) -> Result<(), String> {
    if id.is_empty()
        || id.len() > 128
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(format!(
            "\"chat_id\" \"{}\" is not a conversation id; allowed: 1 to 128 of a-z, A-Z, 0-9, - _ .",
            crate::util::printable(id)
        ));
    }
    Ok(())
}

/// Reads and checks `memory_store` arguments: the text cap, a category
/// from `categories` (or for `store: "summaries"`, a summary type with its
/// period key), the priority's range, the tag caps.
pub fn store_args(args: &Value, categories: &[String]) -> Result<StoreArgs, String> {
    let obj = object(args)?;
    let text = string(obj, "text")?.ok_or("\"text\" is required")?;
    let store = store_of(obj, "store")?.unwrap_or_default();
    let kind = string(obj, "summary_type")?;
    let key = string(obj, "period_key")?;
    let chat_id = string(obj, "chat_id")?;
    let priority = match obj.get("pursuingPriority") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n <= 100)
                .ok_or("\"pursuingPriority\" must be an integer from 0 to 100")? as u8,
        ),
    };
    if store == Store::Summaries {
        let category = string(obj, "category")?;
        let t = match (kind, category) {
            (Some(k), Some(c)) if k != c => {
                return Err(format!(
                    "\"summary_type\" is \"{}\" but \"category\" is \"{}\"; for store \"summaries\" \
                     give one summary type: {}",
                    crate::util::printable(k),
                    crate::util::printable(c),
                    SummaryType::allowed()
                ));
            }
            (Some(k), _) | (None, Some(k)) => summary_type(k)?,
            (None, None) => {
                return Err(format!(
                    "\"summary_type\" is required for store \"summaries\"; allowed: {}",
                    SummaryType::allowed()
                ));
            }
        };
        if priority.is_some() {
            return Err(format!(
                "\"pursuingPriority\" is for user_memory items of {}",
                PRIORITY_CATEGORIES.join(", ")
            ));
        }
        let period = t.period();
        let key = key.ok_or_else(|| {
            format!(
                "\"period_key\" is required for a {}; allowed: {}",
                t.as_str(),
                period.key_form()
            )
        })?;
        let span = parse_key(period, key).map_err(|e| format!("\"period_key\": {e}"))?;
        match (t, chat_id) {
            (SummaryType::Conversation, None) => {
                return Err("\"chat_id\" is required for a conversation-summary".into());
            }
            (SummaryType::Conversation, Some(id)) => check_chat_id(id)?,
            (_, Some(_)) => {
                return Err("\"chat_id\" is only for a conversation-summary".into());
            }
            _ => {}
        }
        let tags = check_text_and_tags(text, &tags(obj)?)?;
        return Ok(StoreArgs {
            text: text.to_string(),
            category: t.as_str().to_string(),
            tags,
            store,
            priority: None,
            period: Some(span),
            chat_id: chat_id.map(String::from),
        });
    }
    for (k, v) in [
        ("summary_type", kind),
        ("period_key", key),
        ("chat_id", chat_id),
    ] {
        if v.is_some() {
            return Err(format!("\"{k}\" is only for store \"summaries\""));
        }
    }
    let category = string(obj, "category")?.ok_or_else(|| {
        format!(
            "\"category\" is required; allowed: {} (memory.categories)",
            categories.join(", ")
        )
    })?;
    let tags = check_note(text, category, &tags(obj)?, categories)?;
    if priority.is_some() && !PRIORITY_CATEGORIES.contains(&category) {
        return Err(format!(
            "\"pursuingPriority\" is for {} only, not \"{category}\"",
            PRIORITY_CATEGORIES.join(", ")
        ));
    }
    Ok(StoreArgs {
        text: text.to_string(),
        category: category.to_string(),
        tags,
        store,
        priority,
        period: None,
        chat_id: None,
    })
}

/// Reads and checks `memory_recall` arguments into a filter.
pub fn recall_filter(args: &Value, categories: &[String]) -> Result<NoteFilter, String> {
    let obj = object(args)?;
    let category = string(obj, "category")?;
    if let Some(c) = category {
        check_category(c, categories)?;
    }
    let mut cats = strings(obj, "categories")?;
    for c in &cats {
        check_category(c, categories)?;
    }
    if let Some(c) = category
        && !cats.iter().any(|x| x == c)
    {
        cats.push(c.to_string());
    }
    let kinds = strings(obj, "summary_types")?;
    for k in &kinds {
        summary_type(k)?;
    }
    let tags = normalize_tags(&tags(obj)?)?;
    let date = |key: &str, end: bool| -> Result<Option<i64>, String> {
        string(obj, key)?
            .map(|s| parse_date(s, end).map_err(|e| format!("\"{key}\": {e}")))
            .transpose()
    };
    let (since, until) = (date("since", false)?, date("until", true)?);
    let (from, to) = (date("from", false)?, date("to", true)?);
    // `from`/`to` are the seed's names for `since`/`until`; both narrow.
    let since = since.max(from);
    let until = match (until, to) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        return Err(if from.is_some() || to.is_some() {
            "\"from\" is after \"to\"".into()
        } else {
            "\"since\" is after \"until\"".into()
        });
    }
    let limit = match obj.get("limit") {
        None => RECALL_DEFAULT,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=RECALL_MAX) => n as u32,
            _ => {
                return Err(format!(
                    "\"limit\" must be an integer from 1 to {RECALL_MAX}"
                ));
            }
        },
    };
    let prefix = string(obj, "period_key_prefix")?;
    if let Some(p) = prefix
        && (p.is_empty()
            || p.len() > 10
            || !p
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'W' | b'Q')))
    {
        return Err(format!(
            "\"period_key_prefix\" \"{}\" is not the start of a period key; allowed: the start of \
             YYYY-MM-DD, YYYY-Www, YYYY-MM, YYYY-Qn or YYYY (e.g. \"2026-11\")",
            crate::util::printable(p)
        ));
    }
    Ok(NoteFilter {
        query: string(obj, "query")?.map(String::from),
        category: None,
        categories: cats,
        summary_types: kinds,
        store: store_of(obj, "store_filter")?,
        period_key_prefix: prefix.map(String::from),
        tags,
        since,
        until,
        limit,
    })
}

/// Reads `memory_forget`'s item id.
pub fn forget_id(args: &Value) -> Result<i64, String> {
    Ok(forget_args(args)?.0)
}

/// `memory_forget`'s id, and the store it must be in when given.
pub fn forget_args(args: &Value) -> Result<(i64, Option<Store>), String> {
    let obj = object(args)?;
    let store = store_of(obj, "store")?;
    match obj.get("id") {
        None => Err("\"id\" is required".into()),
        Some(v) => v
            .as_i64()
            .filter(|&n| n >= 1)
            .map(|id| (id, store))
            .ok_or_else(|| "\"id\" must be a note id: an integer from 1".into()),
    }
}

/// A note's text, in bytes.
pub const NOTE_MAX_BYTES: usize = 4096;
pub const NOTE_MAX_TAGS: usize = 10;
pub const NOTE_TAG_MAX_CHARS: usize = 32;
/// What `memory_recall` and `memory notes` ask for; every part narrows.
#[derive(Debug, Clone, Default)]
pub struct NoteFilter {
    pub query: Option<String>,
    pub category: Option<String>,
    /// Any of these `user_memory` categories.
    pub categories: Vec<String>,
    /// Any of these summary types.
    pub summary_types: Vec<String>,
    /// One store only.
    pub store: Option<Store>,
    /// Summaries whose period key starts so.
    pub period_key_prefix: Option<String>,
    /// A note must carry all of them.
    pub tags: Vec<String>,
    /// Unix seconds, inclusive.
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub limit: u32,
}

/// Checks a note against the caps and the configured categories; returns
/// its tags as stored (trimmed, lower-cased, repeats dropped). Each error
/// names the limit or what is allowed.
pub fn check_note(
    text: &str,
    category: &str,
    tags: &[String],
    categories: &[String],
) -> std::result::Result<Vec<String>, String> {
    if text.trim().is_empty() {
        return Err("\"text\" is empty; a note needs some text".into());
    }
    if text.len() > NOTE_MAX_BYTES {
        return Err(format!(
            "\"text\" is {} bytes; the limit is {NOTE_MAX_BYTES} bytes (4 KiB)",
            text.len()
        ));
    }
    check_category(category, categories)?;
    check_text_and_tags(text, tags)
}

/// The text and tag caps every stored item meets.
fn check_text_and_tags(text: &str, tags: &[String]) -> std::result::Result<Vec<String>, String> {
    if text.trim().is_empty() {
        return Err("\"text\" is empty; a note needs some text".into());
    }
    if text.len() > NOTE_MAX_BYTES {
        return Err(format!(
            "\"text\" is {} bytes; the limit is {NOTE_MAX_BYTES} bytes (4 KiB)",
            text.len()
        ));
    }
    if tags.len() > NOTE_MAX_TAGS {
        return Err(format!("{} tags; the limit is {NOTE_MAX_TAGS}", tags.len()));
    }
    normalize_tags(tags)
}

/// A category must be one of `memory.categories`.
pub fn check_category(category: &str, categories: &[String]) -> std::result::Result<(), String> {
    if categories.iter().any(|c| c == category) {
        return Ok(());
    }
    Err(format!(
        "unknown category \"{}\"; allowed: {} (memory.categories)",
        crate::util::printable(category),
        categories.join(", ")
    ))
}

/// Tags as stored and matched: trimmed, lower-cased, 1 to 32 characters
/// with no control characters, repeats dropped.
pub fn normalize_tags(tags: &[String]) -> std::result::Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        let tag = t.trim().to_lowercase();
        let n = tag.chars().count();
        // No quotes or backslashes: a tag is matched as `"tag"` inside the
        // stored JSON array, which then cannot match across two tags.
        if n == 0
            || n > NOTE_TAG_MAX_CHARS
            || tag.chars().any(|c| c.is_control() || c == '"' || c == '\\')
        {
            return Err(format!(
                "tag \"{}\" is not allowed; a tag is 1 to {NOTE_TAG_MAX_CHARS} characters, no control characters, quotes or backslashes",
                crate::util::printable(t)
            ));
        }
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    Ok(out)
}

/// A date for `since`/`until`: RFC 3339 (`2026-11-23T10:00:00Z`, an
/// offset, a fraction) or a day (`2026-11-23`, UTC), which for `until`
/// means the end of that day. Unix seconds.
pub fn parse_date(s: &str, end_of_day: bool) -> std::result::Result<i64, String> {
    let bad = || {
        format!(
            "\"{}\" is not a date; allowed: YYYY-MM-DD or RFC 3339 such as 2026-11-23T10:00:00Z",
            crate::util::printable(s)
        )
    };
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        (!part.is_empty() && part.bytes().all(|c| c.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (y, m, d) = (
        num(0..4).ok_or_else(bad)?,
        num(5..7).ok_or_else(bad)?,
        num(8..10).ok_or_else(bad)?,
    );
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(bad());
    }
    let day = days_from_civil(y, m, d) * 86_400;
    if b.len() == 10 {
        return Ok(if end_of_day { day + 86_399 } else { day });
    }
    if b.len() < 20 || !matches!(b[10], b'T' | b't') || b[13] != b':' || b[16] != b':' {
        return Err(bad());
    }
    let (hh, mm, ss) = (
        num(11..13).ok_or_else(bad)?,
        num(14..16).ok_or_else(bad)?,
        num(17..19).ok_or_else(bad)?,
    );
    if hh > 23 || mm > 59 || ss > 60 {
        return Err(bad());
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let rb = rest.as_bytes();
            if rb.len() != 6 || !matches!(rb[0], b'+' | b'-') || rb[3] != b':' {
                return Err(bad());
            }
            let (oh, om) = (
                rest[1..3].parse::<i64>().map_err(|_| bad())?,
                rest[4..6].parse::<i64>().map_err(|_| bad())?,
            );
            if oh > 23 || om > 59 {
                return Err(bad());
            }
            let sign = if rb[0] == b'-' { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
    };
    Ok(day + hh * 3600 + mm * 60 + ss.min(59) - offset)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cats() -> Vec<String> {
        ["fact", "preference", "task", "note"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn a_plan_payload_is_read_whole_and_its_bounds_are_named() {
        let task = |subtasks: Value| {
            json!({"title": " t ", "purpose": "p", "instructions": "i", "evaluation": "",
                   "tools": ["shell"], "subtasks": subtasks})
        };
        let tasks = plan_tasks(&json!({"tasks": [task(json!([task(json!([]))]))]})).unwrap();
        assert_eq!(tasks[0].title, "t");
        assert_eq!(tasks[0].tools.as_deref(), Some(&["shell".to_string()][..]));
        assert_eq!((plan_depth(&tasks), plan_count(&tasks)), (2, 2));
        let mut deep = task(json!([]));
        for _ in 0..PLAN_MAX_DEPTH {
            deep = task(json!([deep]));
        }
        let e = plan_tasks(&json!({"tasks": [deep]})).unwrap_err();
        assert!(e.contains("deeper than 8"), "{e}");
        let many: Vec<Value> = (0..=PLAN_MAX_TASKS).map(|_| task(json!([]))).collect();
        let e = plan_tasks(&json!({"tasks": many})).unwrap_err();
        assert!(e.contains("at most 200"), "{e}");
        for (bad, says) in [
            (json!({}), "\"tasks\" is required"),
            (json!({"tasks": []}), "empty"),
            (json!({"tasks": [1]}), "tasks[0] must be an object"),
            (
                json!({"tasks": [{"title": "t"}]}),
                "tasks[0].purpose is required",
            ),
            (
                json!({"tasks": [{"title": "", "purpose": "", "instructions": "", "evaluation": ""}]}),
                "title is empty",
            ),
            (
                json!({"tasks": [task(json!("x"))]}),
                "subtasks must be a list",
            ),
            (
                json!({"tasks": [{"title": "t", "purpose": "", "instructions": "", "evaluation": "",
                               "tools": [1]}]}),
                "tools must be a list of tool names",
            ),
            (
                json!({"tasks": [{"title": "t", "purpose": "", "instructions": "", "evaluation": "",
                               "agent": "x"}]}),
                "unknown key \"agent\"",
            ),
        ] {
            let e = plan_tasks(&bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn caps_and_categories_name_what_is_allowed() {
        let c = cats();
        let e = check_note(&"x".repeat(4097), "fact", &[], &c).unwrap_err();
        assert!(
            e.contains("4097 bytes") && e.contains("limit is 4096"),
            "{e}"
        );
        assert!(check_note(&"x".repeat(4096), "fact", &[], &c).is_ok());
        let e = check_note("t", "secrets", &[], &c).unwrap_err();
        assert_eq!(
            e,
            "unknown category \"secrets\"; allowed: fact, preference, task, note (memory.categories)"
        );
        let many: Vec<String> = (0..11).map(|i| format!("t{i}")).collect();
        let e = check_note("t", "fact", &many, &c).unwrap_err();
        assert!(e.contains("11 tags; the limit is 10"), "{e}");
        assert!(check_note("t", "fact", &many[..10], &c).is_ok());
        let e = check_note("t", "fact", &["x".repeat(33)], &c).unwrap_err();
        assert!(e.contains("1 to 32 characters"), "{e}");
        assert!(check_note("t", "fact", &["é".repeat(32)], &c).is_ok());
        assert!(check_note("t", "fact", &[" ".into()], &c).is_err());
        assert!(check_note("t", "fact", &["a\u{1b}b".into()], &c).is_err());
        assert!(check_note("t", "fact", &["a\",\"b".into()], &c).is_err());
        assert!(check_note("t", "fact", &["a\\b".into()], &c).is_err());
        assert!(
            check_note("  ", "fact", &[], &c)
                .unwrap_err()
                .contains("empty")
        );
    }

    #[test]
    fn dates_are_days_or_rfc3339() {
        assert_eq!(parse_date("1970-01-01", false), Ok(0));
        assert_eq!(parse_date("1970-01-01", true), Ok(86_399));
        assert_eq!(parse_date("2026-11-23", false), Ok(1_795_392_000));
        assert_eq!(parse_date("2026-11-23T10:00:00Z", false), Ok(1_795_428_000));
        assert_eq!(
            parse_date("2026-11-23T12:00:00+02:00", true),
            Ok(1_795_428_000)
        );
        assert_eq!(
            parse_date("2026-11-23T10:00:00.123Z", false),
            Ok(1_795_428_000)
        );
        assert_eq!(parse_date("2024-02-29", false), Ok(1_709_164_800));
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2023-02-29",
            "2026-11-23T10:00",
            "2026-11-23T10:00:00",
            "2026-11-23T25:00:00Z",
            "2026-11-23 10:00:00Z",
            "2026-1-1",
            "+026-11-23",
        ] {
            let e = parse_date(bad, false).unwrap_err();
            assert!(e.contains("YYYY-MM-DD or RFC 3339"), "{bad}: {e}");
        }
    }

    #[test]
    fn store_arguments_are_checked_with_what_is_allowed() {
        let a = store_args(
            &json!({"text": "t", "category": "fact", "tags": ["A", "a", "b"]}),
            &cats(),
        )
        .unwrap();
        assert_eq!(a.tags, ["a", "b"]);
        let e = store_args(&json!({"text": "t"}), &cats()).unwrap_err();
        assert!(
            e.contains("\"category\" is required; allowed: fact, preference"),
            "{e}"
        );
        let e = store_args(&json!({"text": "t", "category": "x"}), &cats()).unwrap_err();
        assert!(e.contains("unknown category \"x\"; allowed: fact"), "{e}");
        let e = store_args(
            &json!({"text": "t", "category": "fact", "tags": [1]}),
            &cats(),
        )
        .unwrap_err();
        assert_eq!(e, "\"tags\"[0] must be a string");
        let e = store_args(
            &json!({"text": "t", "category": "fact", "tags": "a"}),
            &cats(),
        )
        .unwrap_err();
        assert_eq!(e, "\"tags\" must be an array of strings");
    }

    #[test]
    fn recall_and_forget_arguments_are_checked() {
        let f = recall_filter(
            &json!({"query": "q", "since": "2026-01-01", "until": "2026-01-01", "tags": ["X"]}),
            &cats(),
        )
        .unwrap();
        assert_eq!(
            (f.since, f.until),
            (Some(1_767_225_600), Some(1_767_311_999))
        );
        assert_eq!((f.limit, f.tags.as_slice()), (10, &["x".to_string()][..]));
        let e = recall_filter(
            &json!({"since": "2026-02-01", "until": "2026-01-01"}),
            &cats(),
        )
        .unwrap_err();
        assert_eq!(e, "\"since\" is after \"until\"");
        let e = recall_filter(&json!({"since": "last week"}), &cats()).unwrap_err();
        assert!(
            e.starts_with("\"since\": \"last week\" is not a date; allowed: YYYY-MM-DD"),
            "{e}"
        );
        let e = recall_filter(&json!({"limit": 51}), &cats()).unwrap_err();
        assert_eq!(e, "\"limit\" must be an integer from 1 to 50");
        assert!(recall_filter(&json!({"limit": 0}), &cats()).is_err());
        assert!(recall_filter(&json!({"category": "nope"}), &cats()).is_err());
        assert_eq!(forget_id(&json!({"id": 3})), Ok(3));
        for bad in [
            json!({"id": 0}),
            json!({"id": -1}),
            json!({"id": "3"}),
            json!({}),
        ] {
            assert!(forget_id(&bad).is_err(), "{bad}");
        }
    }
}
