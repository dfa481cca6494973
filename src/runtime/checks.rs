//! What the runtime checks of a model's reply before it is an answer or a
//! call: a call that cannot run as written gets one repair note (the form
//! expected, the tool's schema, the error); an answer that claims an effect
//! no call of the turn had gets one reminder (README: Small local models).

use super::call::CallRecord;
use crate::config::ToolMode;
use crate::providers::textcalls::spaced_json;
use crate::providers::{ToolSpec, structured};
use crate::receipts::Status;
use crate::tools::{self, ToolName};
use serde_json::{Value, json};

/// Why a call cannot run as the model wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    UnknownTool(String),
    /// The tool, and `tools::check_args`'s error.
    BadArguments(ToolName, String),
    /// An external tool (a plugin's): its name, its schema, and
    /// `tools::check_schema`'s error.
    BadExternal(String, Value, String),
}

impl Problem {
    /// The error, as the receipt and the model read it.
    pub fn error(&self, offered: &[&str]) -> String {
        match self {
            Problem::UnknownTool(name) => format!(
                "unknown tool \"{}\"; the tools on this channel: {}",
                crate::util::printable(name),
                offered.join(", ")
            ),
            Problem::BadArguments(_, e) | Problem::BadExternal(_, _, e) => e.clone(),
        }
    }

    /// The one note that corrects it: the error, the call written in the
    /// mode's form with example arguments, and the tool's schema.
    pub fn repair_note(&self, offered: &[&str], mode: Option<ToolMode>) -> String {
        if let Problem::BadExternal(name, schema, _) = self {
            return format!(
                "[latchclaw: the call did not run: {}. Write the call exactly in this form, \
                 with arguments that fit {name}'s schema:\n{}\n{name}'s arguments (JSON \
                 Schema): {}{REPAIR_END}",
                self.error(offered),
                call_form(name, &json!({}), mode),
                spaced_json(schema)
            );
        }
        let tool = match self {
            Problem::BadArguments(t, _) => Some(*t),
            Problem::BadExternal(..) => None,
            Problem::UnknownTool(name) => {
                crate::util::suggest::nearest(name, offered.iter().copied())
                    .and_then(ToolName::parse)
            }
        };
        let mut note = format!("[latchclaw: the call did not run: {}.", self.error(offered));
        match tool {
            Some(t) => {
                if matches!(self, Problem::UnknownTool(_)) {
                    note.push_str(&format!(" Did you mean {t}?"));
                }
                note.push_str(&tool_help(t, mode));
            }
            None => note.push_str(&format!(
                " Call one of them exactly in this form:\n{}",
                call_form("TOOL_NAME", &json!({}), mode)
            )),
        }
        note.push_str(REPAIR_END);
        note
    }
}

const REPAIR_END: &str = "\nIf no tool is needed, answer the user in plain text. This note is \
for you, not for the user.]";

/// How to call `t`: the form with its example arguments, then its schema.
fn tool_help(t: ToolName, mode: Option<ToolMode>) -> String {
    format!(
        " Write the call exactly in this form, with arguments that fit {t}'s schema:\n{}\n\
         {t}'s arguments (JSON Schema): {}",
        call_form(t.as_str(), &tools::example(t), mode),
        spaced_json(&tools::tool(t).parameters())
    )
}

/// A call in the form the model was told to use.
fn call_form(name: &str, args: &Value, mode: Option<ToolMode>) -> String {
    let plain = format!(
        "{{\"name\": {}, \"arguments\": {}}}",
        json!(name),
        spaced_json(args)
    );
    match mode {
        Some(ToolMode::Structured) => structured::example_text(name, args),
        Some(ToolMode::Text) => format!("```json\n{plain}\n```"),
        _ => plain,
    }
}

/// The repair note for a reply that holds call-like text latchclaw could
/// not read as a call: what it named (when it named something), how to
/// write the call, and never to write a result itself.
pub fn text_repair_note(
    text: &str,
    tools: &[ToolSpec],
    offered: &[&str],
    mode: Option<ToolMode>,
) -> String {
    let named = named_in(text);
    let known = named
        .as_deref()
        .filter(|n| tools.iter().any(|t| t.name == *n))
        .and_then(ToolName::parse);
    let mut note = String::from(
        "[latchclaw: your reply looks like a tool call or a tool result, but latchclaw could not \
         read it as a call: nothing ran and the user did not see it.",
    );
    match (&named, known) {
        (_, Some(t)) => note.push_str(&tool_help(t, mode)),
        (Some(n), None) => {
            let problem = Problem::UnknownTool(n.clone());
            note.push_str(&format!(" It names {}.", problem.error(offered)));
            match crate::util::suggest::nearest(n, offered.iter().copied())
                .and_then(ToolName::parse)
            {
                Some(t) => {
                    note.push_str(&format!(" Did you mean {t}?"));
                    note.push_str(&tool_help(t, mode));
                }
                None => note.push_str(&format!(
                    " To call one, write exactly this form:\n{}",
                    call_form("TOOL_NAME", &json!({}), mode)
                )),
            }
        }
        (None, None) => note.push_str(&format!(
            " To call a tool, write exactly this form (the tools: {}):\n{}",
            offered.join(", "),
            call_form("TOOL_NAME", &json!({}), mode)
        )),
    }
    if text.to_ascii_lowercase().contains("<tool_result") {
        note.push_str("\nNever write a tool result yourself: results come from the tools.");
    }
    note.push_str(REPAIR_END);
    note
}

/// The first name a call-like object in `text` gives (`"name"`, `"tool"`
/// or `"function"`, then a string), any spacing.
fn named_in(text: &str) -> Option<String> {
    let squeezed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    ["\"name\":\"", "\"tool\":\"", "\"function\":\""]
        .iter()
        .filter_map(|key| {
            let at = squeezed.find(key)? + key.len();
            let end = squeezed[at..].find('"')?;
            Some((at, squeezed[at..at + end].to_string()))
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, name)| name)
        .filter(|n| !n.is_empty() && n.len() <= 64)
}

/// An effect a final answer says happened (README: Small local models,
/// the documented phrases).
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// "has been written", "I saved", … a file or a note.
    Wrote,
    /// "has been deleted", "I removed", …
    Deleted,
    /// "I ran", "I executed", …
    Ran,
    /// "sent the request", …
    Sent,
    /// "you can call the `file_list` function": a call described to the
    /// user instead of made.
    Told(String),
}

const WROTE: [&str; 6] = [
    "written",
    "saved",
    "created",
    "updated",
    "overwritten",
    "appended",
];
const DELETED: [&str; 2] = ["deleted", "removed"];

/// The effect `answer` claims, if any (`tools`: the turn's, for a call
/// described instead of made). Only phrases that say an action was just
/// done ("has been written", "I ran"), not ones that describe a file ("was
/// written in Python").
pub fn claimed_effect(answer: &str, tools: &[ToolSpec]) -> Option<Claim> {
    let text: String = answer
        .to_lowercase()
        .replace(['\u{2019}', '`'], "'")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let done = |verbs: &[&str], past: &[&str]| {
        verbs.iter().any(|v| {
            ["has been", "have been", "successfully", "i've", "i have"]
                .iter()
                .any(|p| phrase(&text, &format!("{p} {v}")))
        }) || past.iter().any(|v| phrase(&text, &format!("i {v}")))
    };
    if done(
        &WROTE,
        &["wrote", "saved", "created", "updated", "appended"],
    ) {
        return Some(Claim::Wrote);
    }
    if done(&DELETED, &["deleted", "removed"]) {
        return Some(Claim::Deleted);
    }
    if [
        "i ran",
        "i executed",
        "i've run",
        "i have run",
        "i've executed",
        "i have executed",
        "has been executed",
    ]
    .iter()
    .any(|p| phrase(&text, p))
    {
        return Some(Claim::Ran);
    }
    if [
        "sent the request",
        "request has been sent",
        "request was sent",
        "i sent",
    ]
    .iter()
    .any(|p| phrase(&text, p))
    {
        return Some(Claim::Sent);
    }
    // A call described instead of made: "call the `file_list` function
    // with …" (any subject: a model that says it will call and does not
    // did not either), "you can use the shell tool" (only addressed to
    // the user: "ask me to use the time tool" is an answer).
    tools.iter().find_map(|t| {
        let n = t.name.as_str();
        let calls = [
            format!("call the '{n}'"),
            format!("call '{n}'"),
            format!("call the {n} function"),
            format!("call the {n} tool"),
        ];
        let uses = [
            "you can",
            "you could",
            "you should",
            "you need to",
            "you may",
        ]
        .iter()
        .flat_map(|m| {
            [
                format!("{m} use the '{n}'"),
                format!("{m} use '{n}'"),
                format!("{m} use the {n} tool"),
                format!("{m} use the {n} function"),
            ]
        });
        calls
            .into_iter()
            .chain(uses)
            .any(|p| phrase(&text, &p))
            .then(|| Claim::Told(n.to_string()))
    })
}

/// `p` in `text` as whole words.
fn phrase(text: &str, p: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(p).any(|(i, _)| {
        !word(text[..i].chars().next_back()) && !word(text[i + p.len()..].chars().next())
    })
}

impl Claim {
    /// The tools any of whose successful calls makes the claim true.
    pub fn tools(&self) -> Vec<&str> {
        match self {
            Claim::Wrote => vec!["file_write", "shell", "memory_store"],
            Claim::Deleted => vec!["shell", "memory_forget"],
            Claim::Ran => vec!["shell", "git"],
            Claim::Sent => vec!["http", "web_search"],
            Claim::Told(t) => vec![t.as_str()],
        }
    }

    /// Whether a call of the turn did it: one of `tools` that ran.
    pub fn made_by(&self, calls: &[CallRecord]) -> bool {
        let tools = self.tools();
        calls.iter().any(|c| {
            tools.contains(&c.tool.as_str())
                && matches!(c.status, Status::Allowed | Status::Approved)
        })
    }

    /// In a few words, for the warning.
    pub fn what(&self) -> String {
        match self {
            Claim::Wrote => "something was written".into(),
            Claim::Deleted => "something was deleted".into(),
            Claim::Ran => "a command was run".into(),
            Claim::Sent => "a request was sent".into(),
            Claim::Told(t) => format!("the user should call {t}"),
        }
    }

    /// The one reminder the model gets.
    pub fn reminder(&self) -> String {
        match self {
            Claim::Told(t) => format!(
                "[latchclaw: the user cannot call {t}; you can. If it is needed, call {t} \
                 yourself now; otherwise answer the user from what you know.]"
            ),
            _ => format!(
                "[latchclaw: your answer says {}, but no {} call succeeded in this turn, so \
                 nothing of the kind happened. If the user asked for it, make the call now; \
                 otherwise answer with what was actually done.]",
                self.what(),
                self.tools().join(" or ")
            ),
        }
    }
}

/// What a message asks that a tool can tell: a file or directory it names
/// that is in the workspace, the time or date, the repository, the
/// workspace's files. An answer given before any call gets one reminder
/// to look (`look_first`).
pub fn asks_about(
    message: &str,
    workspace: &std::path::Path,
) -> Option<(&'static str, &'static str)> {
    // The user's own words: not what was attached or piped after them
    // (`File PATH (N lines, M bytes), quoted as data:`, `Input from stdin (…), quoted as data:`),
    // which the model already has.
    let own = match message.find(", quoted as data:\n<") {
        Some(at) => message[..at]
            .rfind("\n\n")
            .map_or("", |start| &message[..start]),
        None => message,
    };
    let words: Vec<String> = own
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| "\"'`()[]{},;:?!".contains(c))
                .trim_end_matches('.')
                .to_string()
        })
        .collect();
    // A path as the user wrote it, inside the workspace (never `..` or
    // absolute: nothing outside is looked at).
    let named = words.iter().find_map(|w| {
        let inside = (w.contains('.') || w.contains('/'))
            && !w.starts_with('/')
            && !w.split('/').any(|part| part == "..");
        inside
            .then(|| workspace.join(w).symlink_metadata().ok())
            .flatten()
    });
    let has = |list: &[&str]| {
        words
            .iter()
            .any(|w| list.contains(&w.to_lowercase().as_str()))
    };
    match named {
        Some(m) if m.is_dir() => Some(("a directory in the workspace", "file_list")),
        Some(_) => Some(("a file in the workspace", "file_read")),
        None if has(&["time", "date", "year", "today", "month", "weekday", "clock"]) => {
            Some(("the time or the date", "time"))
        }
        None if has(&["git", "commit", "commits", "branch"]) => Some(("the repository", "git")),
        None if has(&[
            "file",
            "files",
            "directory",
            "directories",
            "folder",
            "workspace",
        ]) =>
        {
            Some(("the workspace", "file_list"))
        }
        None => None,
    }
}

/// The one reminder to look before answering; `tool`, the one that tells,
/// when it is offered.
pub fn look_first(what: &str, tool: Option<&str>) -> String {
    let call = match tool {
        Some(t) => format!("Call {t} now"),
        None => "Call the right tool now".into(),
    };
    format!(
        "[latchclaw: you answered without calling a tool, but the question is about {what}, \
         which a tool can tell you. {call} and answer from its result; answer without one only \
         if no tool can tell.]"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::security::Risk;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {}}),
            example: Value::Null,
            bounds: serde_json::Value::Null,
        }
    }

    fn call(tool: &str, status: Status) -> CallRecord {
        CallRecord {
            tool: tool.into(),
            arguments: json!({}),
            status,
            risk: Risk::Low,
            reason: String::new(),
            receipt_id: None,
            started_receipt_id: None,
            pending_approval: None,
            budget: None,
            estop: false,
        }
    }

    #[test]
    fn claimed_effects_are_found_and_descriptions_are_not() {
        let tools = [spec("file_list"), spec("shell")];
        for (answer, claim) in [
            ("DONE has been written into status.txt.", Claim::Wrote),
            ("I've created greeting.txt for you.", Claim::Wrote),
            ("The file was successfully saved.", Claim::Wrote),
            ("I wrote the file.", Claim::Wrote),
            ("old.log has been removed", Claim::Deleted),
            ("I ran `wc -l notes.txt`: 23 lines.", Claim::Ran),
            ("I executed the tests.", Claim::Ran),
            ("I sent the request to the API.", Claim::Sent),
            (
                "You can call the `file_list` function with {\"path\": \".\"}.",
                Claim::Told("file_list".into()),
            ),
            (
                "You can use the shell tool to count them.",
                Claim::Told("shell".into()),
            ),
        ] {
            assert_eq!(claimed_effect(answer, &tools), Some(claim), "{answer}");
        }
        for answer in [
            "The script was written in Python and counts words.",
            "greeting.txt has not been written yet: it waits for approval.",
            "It will be created once you approve.",
            "notes.txt has 23 lines.",
            "I ranked them by size.",
            "The file_list tool shows three files.",
            "I have not looked at a clock; ask me to use the time tool.",
            "",
        ] {
            assert_eq!(claimed_effect(answer, &tools), None, "{answer}");
        }
    }

    #[test]
    fn questions_a_tool_answers_are_told_from_others() {
        let ws = std::env::temp_dir().join(format!("lc-asks-{}", std::process::id()));
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/calc.py"), "").unwrap();
        let about = |m: &str| asks_about(m, &ws);
        assert_eq!(
            about("Which function in src/calc.py adds two numbers?"),
            Some(("a file in the workspace", "file_read"))
        );
        assert_eq!(
            about("What is in src/?"),
            Some(("a directory in the workspace", "file_list"))
        );
        assert_eq!(
            about("What year is it?"),
            Some(("the time or the date", "time"))
        );
        assert_eq!(
            about("What is the last git commit?"),
            Some(("the repository", "git"))
        );
        assert_eq!(
            about("How many files are in src?"),
            Some(("the workspace", "file_list"))
        );
        // Attached or piped data is not the question.
        assert_eq!(
            about(
                "explain these\n\nFile /x/notes.md, quoted as data:\n<attachment path=\"x\">\nfiles\n</attachment>"
            ),
            None
        );
        for m in [
            "Hello, I am Ada. Say hello back.",
            "What is 2 + 2?",
            "Explain ../etc/passwd.",
            "Does /etc/hostname exist?",
            "Is gone.txt there?",
        ] {
            assert_eq!(about(m), None, "{m}");
        }
        std::fs::remove_dir_all(&ws).unwrap();
    }

    #[test]
    fn a_claim_holds_only_with_a_call_that_ran() {
        let wrote = Claim::Wrote;
        assert!(!wrote.made_by(&[]));
        assert!(!wrote.made_by(&[call("file_write", Status::Denied)]));
        assert!(!wrote.made_by(&[call("file_write", Status::Failed)]));
        assert!(!wrote.made_by(&[call("file_read", Status::Allowed)]));
        assert!(wrote.made_by(&[call("file_write", Status::Approved)]));
        assert!(wrote.made_by(&[call("shell", Status::Allowed)]));
        assert!(Claim::Told("time".into()).made_by(&[call("time", Status::Allowed)]));
        assert!(
            wrote
                .reminder()
                .contains("no file_write or shell or memory_store call")
        );
    }

    #[test]
    fn a_repair_note_says_what_failed_how_to_write_it_and_the_schema() {
        let offered = ["time", "file_list", "file_read"];
        let bad = Problem::BadArguments(
            ToolName::Time,
            "invalid arguments: time: unknown argument \"format\"; it takes no arguments".into(),
        );
        let note = bad.repair_note(&offered, Some(ToolMode::Structured));
        assert!(note.contains("unknown argument \"format\""), "{note}");
        assert!(
            note.contains("{\"action\": \"call\", \"tool\": \"time\", \"arguments\": {}}"),
            "{note}"
        );
        assert!(note.contains("time's arguments (JSON Schema): {"), "{note}");
        let unknown = Problem::UnknownTool("file_lst".into());
        let note = unknown.repair_note(&offered, Some(ToolMode::Text));
        assert!(note.contains("unknown tool \"file_lst\""), "{note}");
        assert!(note.contains("Did you mean file_list?"), "{note}");
        assert!(note.contains("```json\n{\"name\": \"file_list\""), "{note}");
        let far = Problem::UnknownTool("launch_missiles".into()).repair_note(&offered, None);
        assert!(far.contains("{\"name\": \"TOOL_NAME\""), "{far}");
        let text = text_repair_note(
            "{{\"name\": \"add\", \"arguments\": {\"num1\": \"10\"}}}",
            &[spec("time")],
            &offered,
            Some(ToolMode::Text),
        );
        assert!(text.contains("unknown tool \"add\""), "{text}");
        assert!(text.contains("plain text"), "{text}");
        assert_eq!(named_in("x { \"tool\" : \"time\" }"), Some("time".into()));
        assert_eq!(named_in("nothing here"), None);
    }
}
