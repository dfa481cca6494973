//! Raw arguments → a checked, typed [`Command`]. lexopt reads the words
//! and flags in any order; the words name a command in `flags::COMMANDS`;
//! each flag is then checked against the commands `flags::FLAGS` says take
//! it, and the command's variant is built with exactly its options.

use super::flags::{self, COMMANDS, CommandDef, FLAGS, Flag};
use crate::config::Autonomy;
use crate::error::{Error, Result};
use std::ffi::OsString;
use std::path::PathBuf;

/// What to do, with the options that apply to it.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// No command words: the help goes to stderr and the exit code is 2.
    Missing,
    /// Help for these command words (none: latchclaw's own).
    Help(Vec<String>),
    Version,
    Completions(Shell),
    Init {
        workspace: Option<PathBuf>,
        force: bool,
    },
    Onboard(Onboard),
    ConfigValidate,
    ConfigShow {
        json: bool,
    },
    ProviderList {
        json: bool,
    },
    ProviderTest {
        /// None: the default provider.
        name: Option<String>,
        json: bool,
    },
    ToolList {
        json: bool,
    },
    ToolStats {
        /// Unix seconds.
        since: Option<i64>,
        json: bool,
    },
    ToolRun {
        tool: String,
        args: Option<String>,
        /// `-w DIR`.
        workspace: Option<PathBuf>,
    },
    PolicyCheck {
        tool: String,
        args: Option<String>,
        autonomy: Option<Autonomy>,
        workspace: Option<PathBuf>,
    },
    PolicyShow {
        json: bool,
    },
    PolicyReplay {
        since: Option<String>,
        json: bool,
    },
    /// Boxed: the largest options by far.
    Agent(Box<Agent>),
    MemoryList {
        limit: Option<u32>,
        json: bool,
    },
    MemorySearch {
        query: String,
        limit: Option<u32>,
        json: bool,
    },
    MemoryShow {
        id: String,
        json: bool,
    },
    MemoryClear {
        yes: bool,
    },
    MemoryNotes {
        category: Option<String>,
        limit: Option<u32>,
        json: bool,
    },
    MemoryForget {
        id: String,
    },
    MemorySummarize {
        period: Option<crate::types::period::Period>,
        key: Option<String>,
        conversation: Option<String>,
        redo: bool,
        json: bool,
    },
    ReceiptList {
        json: bool,
        /// `--jsonl`: one receipt a line.
        jsonl: bool,
    },
    ReceiptVerify {
        json: bool,
        /// `--expect-head`, then `--since`.
        expect: Vec<crate::receipts::Expect>,
    },
    ReceiptHead {
        json: bool,
    },
    ReceiptRepair {
        json: bool,
    },
    ReceiptAnchor {
        json: bool,
        reset: bool,
    },
    Estop {
        clear: bool,
    },
    EstopStatus {
        json: bool,
    },
    Gateway {
        bind: Option<std::net::SocketAddr>,
    },
    GatewayToken {
        rotate: bool,
    },
    ApprovalsList {
        all: bool,
        json: bool,
    },
    Approve {
        id: String,
        yes: bool,
    },
    Deny {
        id: String,
    },
    RunsList {
        limit: Option<u32>,
        json: bool,
    },
    PromptShow {
        message: Option<String>,
        conversation: Option<String>,
        json: bool,
    },
    SkillList {
        json: bool,
    },
    SkillShow {
        name: String,
        json: bool,
    },
    PluginList {
        json: bool,
    },
    PluginShow {
        name: String,
        json: bool,
    },
    PluginInstall {
        path: PathBuf,
        json: bool,
    },
    PluginRemove {
        name: String,
        json: bool,
    },
    PluginApprove {
        name: String,
        json: bool,
    },
    McpList {
        json: bool,
    },
    McpTools {
        name: String,
        json: bool,
    },
    McpTest {
        name: String,
        json: bool,
    },
    McpApprove {
        name: String,
        json: bool,
    },
    SopList {
        json: bool,
    },
    SopValidate {
        name: Option<String>,
        json: bool,
    },
    SopRun {
        name: String,
        json: bool,
        lock: Option<String>,
        timeout: Option<u64>,
        workspace: Option<PathBuf>,
    },
    SopResume {
        run: String,
        json: bool,
        lock: Option<String>,
        timeout: Option<u64>,
        retry_step: Option<String>,
        skip_step: Option<String>,
    },
    SopDecide {
        run: String,
        approve: bool,
        yes: bool,
        json: bool,
    },
    CodeStats {
        json: bool,
    },
    CodeFailures {
        limit: Option<u32>,
        json: bool,
    },
    SopRuns {
        limit: Option<u32>,
        json: bool,
    },
    SopShow {
        run: String,
        json: bool,
    },
    TaskList {
        conversation: Option<String>,
        limit: Option<u32>,
        json: bool,
    },
    TaskShow {
        path: String,
        json: bool,
    },
    ServiceInstall {
        bind: Option<String>,
        print: bool,
        force: bool,
    },
    ServiceStart,
    ServiceStop,
    ServiceStatus,
    ServiceUninstall,
}

#[derive(Debug, PartialEq, Clone, Copy)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Debug, PartialEq, Default)]
pub struct Onboard {
    pub workspace: Option<PathBuf>,
    pub force: bool,
    pub yes: bool,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub autonomy: Option<String>,
}

/// Which conversation an agent run continues.
#[derive(Debug, PartialEq, Default)]
pub enum Continue {
    #[default]
    New,
    Conversation(String),
    /// `-c`: the most recent one.
    Latest,
    /// `--resume ID`: after `latchclaw approve`.
    Resume(String),
}

#[derive(Debug, PartialEq, Default)]
pub struct Agent {
    pub message: Option<String>,
    pub conversation: Continue,
    pub json: bool,
    pub hint: Option<String>,
    pub lock: Option<String>,
    pub timeout: Option<u64>,
    pub no_stream: bool,
    /// `--provider NAME`, checked against the config when it is loaded.
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `--system TEXT`: replaces the base prompt layer.
    pub system: Option<String>,
    /// `--system-file PATH`: the same, read from a file (never with `--system`).
    pub system_file: Option<PathBuf>,
    /// `--skill NAME`, each: enabled for this run, after `[skills] enabled`.
    pub skills: Vec<String>,
    /// `-f PATH`, each: attached to the message.
    pub files: Vec<PathBuf>,
    /// `-o KEY=VALUE`, checked.
    pub options: crate::providers::ModelOptions,
    pub workspace: Option<PathBuf>,
    pub no_memory: bool,
    /// `--new-session NAME`: a new conversation, its session so named.
    pub new_session: Option<String>,
    pub quiet: bool,
    /// `--partial`: a stopped turn's partial answer goes to stdout.
    pub partial: bool,
}

/// A parsed command line.
#[derive(Debug)]
pub struct Invocation {
    pub config: Option<PathBuf>,
    pub command: Command,
}

/// The arguments as given, before they are checked against a command.
#[derive(Default)]
struct Raw {
    words: Vec<String>,
    flags: Vec<(&'static Flag, Option<String>)>,
    /// The first option no command takes, as written.
    unknown: Option<String>,
}

fn usage(e: lexopt::Error) -> Error {
    Error::usage(format!("{e}; see `latchclaw --help`"))
}

fn utf8(v: OsString, what: impl FnOnce() -> String) -> Result<String> {
    v.into_string().map_err(|v| {
        Error::usage(format!(
            "{}: {:?} is not valid UTF-8; latchclaw takes UTF-8 arguments only",
            what(),
            v
        ))
    })
}

/// The commands the words so far could still name.
fn could_be(words: &[String]) -> impl Iterator<Item = &'static CommandDef> + '_ {
    COMMANDS
        .iter()
        .filter(move |c| c.path.split(' ').zip(words).all(|(p, w)| p == w.as_str()))
}

/// The flag `--name` / `-c` means here. A long name defined twice
/// (`--json`) is settled by the command the words so far can name; when
/// they still allow both, by the value: a JSON object or array is the
/// tool arguments.
fn which_flag(
    p: &mut lexopt::Parser,
    words: &[String],
    matches: Vec<&'static Flag>,
) -> Result<&'static Flag> {
    if matches.len() == 1 {
        return Ok(matches[0]);
    }
    let taken: Vec<&'static Flag> = matches
        .iter()
        .copied()
        .filter(|f| could_be(words).any(|c| f.takes(c.path)))
        .collect();
    match taken.as_slice() {
        [one] => return Ok(one),
        [] => return Ok(matches[0]),
        _ => {}
    }
    let want_value = match p.try_raw_args() {
        // `--json=...`: a value is attached.
        None => true,
        Some(raw) => raw
            .peek()
            .and_then(|v| v.to_str())
            .is_some_and(|v| v.starts_with('{') || v.starts_with('[')),
    };
    Ok(taken
        .iter()
        .copied()
        .find(|f| f.value.is_some() == want_value)
        .unwrap_or(taken[0]))
}

fn lex(argv: Vec<OsString>) -> Result<(Raw, Option<PathBuf>, bool, bool)> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(argv);
    let mut raw = Raw::default();
    let (mut config, mut help, mut version) = (None, false, false);
    while let Some(arg) = p.next().map_err(usage)? {
        let (matches, written): (Vec<&'static Flag>, String) = match arg {
            Value(v) => {
                let w = utf8(v, || "an argument".into())?;
                raw.words.push(w);
                continue;
            }
            Long(name) => (
                FLAGS.iter().filter(|f| f.long == name).collect(),
                format!("--{name}"),
            ),
            Short(c) => (
                FLAGS.iter().filter(|f| f.short == Some(c)).collect(),
                format!("-{c}"),
            ),
        };
        if matches.is_empty() {
            // Reported once the command is known, so the error can say
            // what it takes instead.
            raw.unknown.get_or_insert(written);
            let _ = p.optional_value();
            continue;
        }
        let flag = which_flag(&mut p, &raw.words, matches)?;
        let value = match flag.value {
            Some(_) => {
                let v = p.value().map_err(usage)?;
                Some(utf8(v, || format!("--{}", flag.long))?)
            }
            None => None,
        };
        match flag.long {
            "help" => help = true,
            "version" => version = true,
            "config" => config = value.map(PathBuf::from),
            _ => raw.flags.push((flag, value)),
        }
    }
    Ok((raw, config, help, version))
}

/// The command the words name, and the words left for its arguments.
fn resolve(words: &[String]) -> Result<(&'static CommandDef, &[String])> {
    let found = COMMANDS
        .iter()
        .filter(|c| {
            let n = c.path.split(' ').count();
            words.len() >= n && c.path.split(' ').zip(words).all(|(p, w)| p == w)
        })
        .max_by_key(|c| c.path.len());
    if let Some(c) = found {
        let n = c.path.split(' ').count();
        return Ok((c, &words[n..]));
    }
    let first = words[0].as_str();
    let subs = flags::group(first);
    if subs.is_empty() {
        return Err(unknown_command(words));
    }
    if words.len() == 1 {
        if let Some(c) = subs.iter().find(|c| c.bare) {
            return Ok((c, &words[1..]));
        }
        return Err(Error::usage(format!(
            "`latchclaw {first}` needs a subcommand: {}; see `latchclaw help {first}`",
            sub_names(&subs)
        )));
    }
    let near = nearest_sub(&subs, &words[1])
        .map(|s| format!(" did you mean `{first} {s}`?"))
        .unwrap_or_default();
    Err(Error::usage(format!(
        "unknown command `{}`;{near} `latchclaw {first}` has: {}",
        words.join(" "),
        sub_names(&subs)
    )))
}

/// The subcommand of `subs` nearest to `word`, when it is near.
fn nearest_sub<'a>(subs: &[&'a CommandDef], word: &str) -> Option<&'a str> {
    let names = subs
        .iter()
        .filter_map(|c| c.path.split_once(' ').map(|(_, s)| s));
    crate::util::suggest::nearest(word, names)
}

/// Top-level words: single commands and group names, in table order.
fn top_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = Vec::new();
    for c in COMMANDS {
        let w = c.group().unwrap_or(c.path);
        if !names.contains(&w) {
            names.push(w);
        }
    }
    names
}

/// ` did you mean `WORDS`?` for command words whose first one is a typo
/// of a command, or nothing.
pub fn command_hint(words: &[String]) -> String {
    let Some(first) = words.first() else {
        return String::new();
    };
    match crate::util::suggest::nearest(first, top_names()) {
        Some(near) => {
            let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
            let fixed = [vec![near], rest].concat().join(" ");
            format!(" did you mean `{fixed}`?")
        }
        None => String::new(),
    }
}

fn sub_names(subs: &[&CommandDef]) -> String {
    subs.iter()
        .map(|c| c.path.split_once(' ').map_or(c.path, |(_, s)| s))
        .collect::<Vec<_>>()
        .join(", ")
}

fn unknown_command(words: &[String]) -> Error {
    Error::usage(format!(
        "unknown command `{}`;{} commands: {} (see `latchclaw --help`)",
        words.join(" "),
        command_hint(words),
        top_names().join(", ")
    ))
}

/// ` did you mean --NAME?` for an option written `bad` (`--jsno`), among
/// the long names `flags`, or nothing.
fn flag_hint<'a>(bad: &str, flags: impl Iterator<Item = &'a Flag>) -> String {
    let Some(name) = bad.strip_prefix("--") else {
        return String::new();
    };
    let longs: Vec<&str> = flags.map(|f| f.long).collect();
    crate::util::suggest::nearest(name, longs)
        .map(|n| format!(" did you mean --{n}?"))
        .unwrap_or_default()
}

/// Why an argument is one too many, when it is likely a mistake with a
/// known way out (else empty): a subcommand misspelt after a command that
/// has some (`estop stauts`), the emergency stop's off switch written as a
/// word (`estop off`), tool arguments given without `--json`.
fn extra_hint(c: &CommandDef, extra: &str, args: &[String]) -> String {
    let word = extra.to_ascii_lowercase();
    match c.path {
        "estop"
            if ["off", "clear", "stop", "remove", "disable", "unset", "no"]
                .contains(&word.as_str()) =>
        {
            return ": to remove the emergency stop, `latchclaw estop --clear`".into();
        }
        "estop" if ["on", "set", "start", "enable", "yes"].contains(&word.as_str()) => {
            return ": `latchclaw estop` alone turns it on".into();
        }
        "tool run" | "policy check" if extra.trim_start().starts_with(['{', '[']) => {
            let tool = args.first().map_or("NAME", String::as_str);
            return format!(
                ": tool arguments go after --json: latchclaw {} {tool} --json '{}'",
                c.path,
                extra.replace('\'', "'\\''")
            );
        }
        _ => {}
    }
    match nearest_sub(&flags::group(c.path), extra) {
        Some(s) => format!(": did you mean `{} {s}`?", c.path),
        None => String::new(),
    }
}

/// `--json, --limit` (what a command takes, for error messages).
fn options_of(c: &CommandDef) -> String {
    let list: Vec<String> = c
        .flags()
        .filter(|f| f.commands != flags::ALL)
        .map(|f| match f.value {
            Some(v) => format!("--{} {v}", f.long),
            None => format!("--{}", f.long),
        })
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// Every flag given is one `c` takes; positional arguments are as many as
/// it takes.
fn check(c: &CommandDef, raw: &Raw, args: &[String]) -> Result<()> {
    if let Some(bad) = &raw.unknown {
        return Err(Error::usage(format!(
            "invalid option '{bad}' for `latchclaw {}`;{} its options: {}",
            c.path,
            flag_hint(bad, c.flags()),
            options_of(c)
        )));
    }
    for (f, _) in &raw.flags {
        if f.takes(c.path) {
            continue;
        }
        // The same name, used the other way (`--json` without its ARGS).
        if let Some(other) = FLAGS.iter().find(|g| g.long == f.long && g.takes(c.path)) {
            // Given before the command word, the other definition of the
            // same shape was guessed: the value is the same.
            if other.value.is_some() == f.value.is_some() {
                continue;
            }
            return Err(Error::usage(format!(
                "`latchclaw {}` takes {} ({})",
                c.path,
                other.spelling(),
                other.help
            )));
        }
        return Err(Error::usage(format!(
            "`latchclaw {}` does not take --{}; its options: {}",
            c.path,
            f.long,
            options_of(c)
        )));
    }
    if let Some(missing) = c.args.get(args.len()).filter(|a| a.required) {
        return Err(Error::usage(format!(
            "`latchclaw {}` needs a {}: latchclaw {} [options]",
            c.path,
            missing.what,
            c.synopsis()
        )));
    }
    if args.len() > c.args.len() {
        let extra = &args[c.args.len()];
        let what = match c.args {
            [] => "no arguments".to_string(),
            [one] => format!("one {}", one.what),
            _ => format!("{} arguments", c.args.len()),
        };
        let hint = extra_hint(c, extra, args);
        let hint = if hint.is_empty() {
            " (quote an argument that has spaces)".to_string()
        } else {
            hint
        };
        return Err(Error::usage(format!(
            "`latchclaw {}` takes {what}; \"{extra}\" is one too many{hint}",
            c.path
        )));
    }
    Ok(())
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(
    flag: &str,
    v: &str,
    what: &str,
) -> Result<T> {
    v.parse()
        .ok()
        .filter(|n| *n > T::default())
        .ok_or_else(|| Error::usage(format!("--{flag}: \"{v}\" is not {what}")))
}

/// The options given to one command, by long name.
struct Given<'a>(&'a [(&'static Flag, Option<String>)]);

impl Given<'_> {
    fn on(&self, long: &str) -> bool {
        self.0.iter().any(|(f, _)| f.long == long)
    }
    /// The last value given (a later flag overrides an earlier one).
    fn value(&self, long: &str) -> Option<String> {
        self.0
            .iter()
            .rev()
            .find(|(f, _)| f.long == long)
            .and_then(|(_, v)| v.clone())
    }
    /// Every value given, in order (a repeatable flag).
    fn values(&self, long: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(f, _)| f.long == long)
            .filter_map(|(_, v)| v.clone())
            .collect()
    }
    fn timeout(&self) -> Result<Option<u64>> {
        self.value("timeout")
            .map(|v| positive("timeout", &v, "a positive number of seconds"))
            .transpose()
    }
    fn limit(&self) -> Result<Option<u32>> {
        self.value("limit")
            .map(|v| positive("limit", &v, "a positive whole number"))
            .transpose()
    }
}

fn agent(o: &Given, positional: Option<&String>) -> Result<Agent> {
    let message = match (o.value("message"), positional) {
        (Some(_), Some(_)) => {
            return Err(Error::usage(
                "give the message once: as an argument or with -m, not both",
            ));
        }
        (m, p) => m.or_else(|| p.cloned()),
    };
    let given = [
        o.on("continue"),
        o.on("conversation"),
        o.on("resume"),
        o.on("new-session"),
    ];
    if given.iter().filter(|x| **x).count() > 1 {
        return Err(Error::usage(
            "give one of --conversation ID, --continue, --resume ID or --new-session NAME",
        ));
    }
    let new_session = o.value("new-session");
    if let Some(n) = &new_session {
        crate::memory::summaries::check_session_name(n)
            .map_err(|e| Error::usage(format!("--new-session: {e}")))?;
    }
    let conversation = match (o.value("conversation"), o.value("resume")) {
        (Some(id), _) => Continue::Conversation(id),
        (_, Some(id)) => Continue::Resume(id),
        _ if o.on("continue") => Continue::Latest,
        _ => Continue::New,
    };
    let lock = o.value("lock");
    if let Some(v) = &lock
        && (v.is_empty()
            || v.starts_with('.')
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
    {
        return Err(Error::usage(format!(
            "--lock: \"{v}\" is not a lock name (letters, digits, - _ .)"
        )));
    }
    let timeout = o
        .value("timeout")
        .map(|v| positive("timeout", &v, "a positive number of seconds"))
        .transpose()?;
    let text = |flag: &str, what: &str| -> Result<Option<String>> {
        match o.value(flag) {
            Some(v) if v.trim().is_empty() => {
                Err(Error::usage(format!("--{flag}: empty; give {what}")))
            }
            v => Ok(v),
        }
    };
    let system = text("system", "the prompt text")?;
    let system_file = text("system-file", "a file holding the prompt text")?.map(PathBuf::from);
    if system.is_some() && system_file.is_some() {
        return Err(Error::usage(
            "give the system prompt once: --system TEXT or --system-file PATH, not both",
        ));
    }
    let skills = o.values("skill");
    for name in &skills {
        crate::config::check_skill_name(name).map_err(|e| Error::usage(format!("--skill: {e}")))?;
    }
    let mut files = Vec::new();
    for f in o.values("file") {
        if f.is_empty() {
            return Err(Error::usage(
                "-f/--file: empty; give the path of a file to attach",
            ));
        }
        files.push(PathBuf::from(f));
    }
    let mut options = crate::providers::ModelOptions::default();
    for kv in o.values("option") {
        options
            .set(&kv)
            .map_err(|e| Error::usage(format!("-o/--option: {e}")))?;
    }
    Ok(Agent {
        message,
        conversation,
        json: o.on("json"),
        hint: o.value("hint"),
        lock,
        timeout,
        no_stream: o.on("no-stream"),
        provider: text("provider", "a configured provider's name")?,
        model: text("model", "a model name")?,
        system,
        system_file,
        skills,
        files,
        options,
        workspace: text("workspace", "a directory")?.map(PathBuf::from),
        no_memory: o.on("no-memory"),
        new_session,
        quiet: o.on("quiet"),
        partial: o.on("partial"),
    })
}

/// `--expect-head HASH` and `--since N:HASH` (or `N HASH`, as `receipt
/// head` prints it).
fn expected_heads(o: &Given) -> Result<Vec<crate::receipts::Expect>> {
    use crate::receipts::Expect;
    let hash = |flag: &str, v: &str| -> Result<String> {
        let h = v.trim().to_ascii_lowercase();
        if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(h)
        } else {
            Err(Error::usage(format!(
                "--{flag}: \"{v}\" is not a receipt hash (64 hex digits, as `latchclaw receipt head` prints)"
            )))
        }
    };
    let mut out = Vec::new();
    if let Some(v) = o.value("expect-head") {
        out.push(Expect {
            position: None,
            hash: hash("expect-head", &v)?,
            anchor: None,
        });
    }
    if let Some(v) = o.value("since") {
        let Some((n, h)) = v.trim().split_once([':', ' ']) else {
            return Err(Error::usage(format!(
                "--since: \"{v}\" is not N:HASH (a receipt number and its hash, as `latchclaw receipt head` prints them)"
            )));
        };
        out.push(Expect {
            position: Some(positive("since", n.trim(), "a receipt number (1 or more)")?),
            hash: hash("since", h)?,
            anchor: None,
        });
    }
    Ok(out)
}

fn build(c: &CommandDef, args: &[String], o: &Given) -> Result<Command> {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let json = o.on("json");
    Ok(match c.path {
        "init" => Command::Init {
            workspace: o.value("workspace").map(PathBuf::from),
            force: o.on("force"),
        },
        "onboard" => Command::Onboard(Onboard {
            workspace: o.value("workspace").map(PathBuf::from),
            force: o.on("force"),
            yes: o.on("yes"),
            provider: o.value("provider"),
            base_url: o.value("base-url"),
            model: o.value("model"),
            api_key_env: o.value("api-key-env"),
            autonomy: o.value("autonomy"),
        }),
        "config validate" => Command::ConfigValidate,
        "config show" => Command::ConfigShow { json },
        "provider list" => Command::ProviderList { json },
        "provider test" => Command::ProviderTest {
            name: args.first().cloned(),
            json,
        },
        "tool list" => Command::ToolList { json },
        "tool stats" => Command::ToolStats {
            since: o
                .value("since")
                .map(|v| {
                    crate::types::args::parse_date(&v, false)
                        .map_err(|e| Error::usage(format!("--since: {e}")))
                })
                .transpose()?,
            json,
        },
        "tool run" => Command::ToolRun {
            tool: arg(0),
            args: o.value("json"),
            workspace: o.value("workspace").map(PathBuf::from),
        },
        "policy check" => Command::PolicyCheck {
            tool: arg(0),
            args: o.value("json"),
            workspace: o.value("workspace").map(PathBuf::from),
            autonomy: o
                .value("autonomy")
                .map(|level| {
                    Autonomy::parse(&level).ok_or_else(|| {
                        Error::usage(format!(
                            "--autonomy: \"{level}\" is not allowed; allowed values: {}",
                            Autonomy::ALLOWED.join(", ")
                        ))
                    })
                })
                .transpose()?,
        },
        "policy show" => Command::PolicyShow { json },
        "policy replay" => Command::PolicyReplay {
            since: o.value("since"),
            json,
        },
        "agent" => Command::Agent(Box::new(agent(o, args.first())?)),
        "memory list" => Command::MemoryList {
            limit: o.limit()?,
            json,
        },
        "memory search" => Command::MemorySearch {
            query: arg(0),
            limit: o.limit()?,
            json,
        },
        "memory show" => Command::MemoryShow { id: arg(0), json },
        "memory clear" => Command::MemoryClear { yes: o.on("yes") },
        "memory notes" => Command::MemoryNotes {
            category: o.value("category"),
            limit: o.limit()?,
            json,
        },
        "memory forget" => Command::MemoryForget { id: arg(0) },
        "memory summarize" => {
            use crate::types::period::Period;
            let period = o
                .value("period")
                .map(|p| {
                    Period::parse(&p).ok_or_else(|| {
                        Error::usage(format!(
                            "--period: \"{}\" is not a period; allowed: {}",
                            crate::util::printable(&p),
                            Period::ALLOWED.join(", ")
                        ))
                    })
                })
                .transpose()?;
            let conversation = o.value("conversation");
            match (&period, &conversation) {
                (Some(_), Some(_)) => {
                    return Err(Error::usage(
                        "give --period (a period's summary) or --conversation ID (a conversation's), not both",
                    ));
                }
                (None, None) => {
                    return Err(Error::usage(format!(
                        "memory summarize needs --period PERIOD ({}) or --conversation ID",
                        Period::ALLOWED.join(", ")
                    )));
                }
                _ => {}
            }
            if conversation.is_some() && o.on("key") {
                return Err(Error::usage(
                    "--key names a period; a conversation's summary is keyed by its last day",
                ));
            }
            Command::MemorySummarize {
                period,
                key: o.value("key"),
                conversation,
                redo: o.on("redo"),
                json,
            }
        }
        "receipt list" => {
            if json && o.on("jsonl") {
                return Err(Error::usage(
                    "give --json (one array) or --jsonl (a receipt a line), not both",
                ));
            }
            Command::ReceiptList {
                json,
                jsonl: o.on("jsonl"),
            }
        }
        "receipt verify" => Command::ReceiptVerify {
            json,
            expect: expected_heads(o)?,
        },
        "receipt head" => Command::ReceiptHead { json },
        "receipt repair" => Command::ReceiptRepair { json },
        "receipt anchor" => Command::ReceiptAnchor {
            json,
            reset: o.on("reset"),
        },
        "estop" => Command::Estop {
            clear: o.on("clear"),
        },
        "estop status" => Command::EstopStatus { json },
        "gateway" => Command::Gateway {
            bind: match o.value("bind") {
                None => None,
                Some(v) => Some(v.parse().map_err(|_| {
                    Error::usage(format!(
                        "--bind: \"{}\" is not ADDR:PORT (e.g. 127.0.0.1:7878, [::1]:0)",
                        crate::util::printable(&v)
                    ))
                })?),
            },
        },
        "gateway token" => Command::GatewayToken {
            rotate: o.on("rotate"),
        },
        "approvals list" => Command::ApprovalsList {
            all: o.on("all"),
            json,
        },
        "approve" => Command::Approve {
            id: arg(0),
            yes: o.on("yes"),
        },
        "deny" => Command::Deny { id: arg(0) },
        "runs list" => Command::RunsList {
            limit: o.limit()?,
            json,
        },
        "prompt show" => Command::PromptShow {
            message: o.value("message"),
            conversation: o.value("conversation"),
            json,
        },
        "skill list" => Command::SkillList { json },
        "skill show" => Command::SkillShow { name: arg(0), json },
        "plugin list" => Command::PluginList { json },
        "plugin show" => Command::PluginShow { name: arg(0), json },
        "plugin install" => Command::PluginInstall {
            path: PathBuf::from(arg(0)),
            json,
        },
        "plugin remove" => Command::PluginRemove { name: arg(0), json },
        "plugin approve" => Command::PluginApprove { name: arg(0), json },
        "mcp list" => Command::McpList { json },
        "mcp tools" => Command::McpTools { name: arg(0), json },
        "mcp test" => Command::McpTest { name: arg(0), json },
        "mcp approve" => Command::McpApprove { name: arg(0), json },
        "sop list" => Command::SopList { json },
        "sop validate" => Command::SopValidate {
            name: args.first().cloned(),
            json,
        },
        "sop run" => Command::SopRun {
            name: arg(0),
            json,
            lock: o.value("lock"),
            timeout: o.timeout()?,
            workspace: o.value("workspace").map(PathBuf::from),
        },
        "sop resume" => {
            let (retry_step, skip_step) = (o.value("retry-step"), o.value("skip-step"));
            if retry_step.is_some() && skip_step.is_some() {
                return Err(Error::usage(
                    "give --retry-step ID or --skip-step ID, not both",
                ));
            }
            Command::SopResume {
                run: arg(0),
                json,
                lock: o.value("lock"),
                timeout: o.timeout()?,
                retry_step,
                skip_step,
            }
        }
        "sop approve" => Command::SopDecide {
            run: arg(0),
            approve: true,
            yes: o.on("yes"),
            json,
        },
        "sop deny" => Command::SopDecide {
            run: arg(0),
            approve: false,
            yes: false,
            json,
        },
        "code stats" => Command::CodeStats { json },
        "code failures" => Command::CodeFailures {
            limit: o.limit()?,
            json,
        },
        "sop runs" => Command::SopRuns {
            limit: o.limit()?,
            json,
        },
        "sop show" => Command::SopShow { run: arg(0), json },
        "task list" => Command::TaskList {
            conversation: args.first().cloned(),
            limit: o.limit()?,
            json,
        },
        "task show" => Command::TaskShow { path: arg(0), json },
        "service install" => Command::ServiceInstall {
            bind: o
                .value("bind")
                .map(|v| match v.parse::<std::net::SocketAddr>() {
                    Ok(_) => Ok(v),
                    Err(_) => Err(Error::usage(format!(
                        "--bind: \"{v}\" is not ADDR:PORT (an IP address and a port, e.g. 127.0.0.1:8080 or [::1]:8080)"
                    ))),
                })
                .transpose()?,
            print: o.on("print"),
            force: o.on("force"),
        },
        "service start" => Command::ServiceStart,
        "service stop" => Command::ServiceStop,
        "service status" => Command::ServiceStatus,
        "service uninstall" => Command::ServiceUninstall,
        "completions" => Command::Completions(match arg(0).as_str() {
            "bash" => Shell::Bash,
            "zsh" => Shell::Zsh,
            "fish" => Shell::Fish,
            other => {
                return Err(Error::usage(format!(
                    "completions: \"{other}\" is not a shell this can write for; allowed values: bash, zsh, fish"
                )));
            }
        }),
        other => {
            return Err(Error::new(
                crate::error::Kind::Internal,
                format!("command `{other}` is defined but not built"),
            ));
        }
    })
}

/// Parses a whole command line (without the program name).
pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Invocation> {
    let (raw, config, help, version) = lex(argv.into_iter().collect())?;
    let done = |command| {
        Ok(Invocation {
            config: config.clone(),
            command,
        })
    };
    // `help WORDS` and `WORDS --help` are the same request.
    if raw.words.first().is_some_and(|w| w == "help") {
        return done(Command::Help(raw.words[1..].to_vec()));
    }
    if help {
        return done(Command::Help(raw.words));
    }
    if version {
        return done(Command::Version);
    }
    if raw.words.is_empty() {
        if let Some(bad) = &raw.unknown {
            let global = FLAGS.iter().filter(|f| f.commands == flags::ALL);
            return Err(Error::usage(format!(
                "invalid option '{bad}';{} see `latchclaw --help`",
                flag_hint(bad, global)
            )));
        }
        return done(Command::Missing);
    }
    let (c, args) = resolve(&raw.words)?;
    check(c, &raw, args)?;
    let command = build(c, args, &Given(&raw.flags))?;
    // Known, parsed and checked like any command, then refused.
    if let Some(feature) = crate::features::command_missing(c.path) {
        return Err(crate::features::command_not_built(c.path, feature));
    }
    done(command)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse_str(s: &[&str]) -> Result<Command> {
        parse(s.iter().map(OsString::from)).map(|i| i.command)
    }

    #[test]
    fn json_is_a_value_for_tool_run_and_a_switch_elsewhere_in_any_position() {
        let want = Command::ToolRun {
            tool: "time".into(),
            args: Some("{}".into()),
            workspace: None,
        };
        assert_eq!(
            parse_str(&["tool", "run", "time", "--json", "{}"]).unwrap(),
            want
        );
        assert_eq!(
            parse_str(&["--json", "{}", "tool", "run", "time"]).unwrap(),
            want
        );
        assert_eq!(
            parse_str(&["tool", "--json={}", "run", "time"]).unwrap(),
            want
        );
        for argv in [
            &["tool", "list", "--json"][..],
            &["--json", "tool", "list"],
            &["tool", "--json", "list"],
        ] {
            assert_eq!(
                parse_str(argv).unwrap(),
                Command::ToolList { json: true },
                "{argv:?}"
            );
        }
        assert_eq!(
            parse_str(&["policy", "show", "--json"]).unwrap(),
            Command::PolicyShow { json: true }
        );
    }

    #[test]
    fn options_a_command_does_not_take_are_rejected_naming_what_it_takes() {
        let e = parse_str(&["memory", "list", "--yes"]).unwrap_err();
        assert!(
            e.msg
                .contains("`latchclaw memory list` does not take --yes")
                && e.msg.contains("--json, --limit N"),
            "{e}"
        );
        let e = parse_str(&["--bogus", "agent"]).unwrap_err();
        assert!(
            e.msg
                .contains("invalid option '--bogus' for `latchclaw agent`")
                && e.msg.contains("--message MESSAGE"),
            "{e}"
        );
        let e = parse_str(&["--json", "tool", "run", "time"]).unwrap_err();
        assert!(e.msg.contains("takes --json ARGS"), "{e}");
        assert!(parse_str(&["memory", "list", "--limit", "zero"]).is_err());
        assert!(parse_str(&["--bogus"]).is_err());
    }

    #[test]
    fn positional_message_and_its_conflicts() {
        let Command::Agent(a) = parse_str(&["agent", "what changed?"]).unwrap() else {
            panic!()
        };
        assert_eq!(a.message.as_deref(), Some("what changed?"));
        assert!(parse_str(&["agent", "a", "-m", "b"]).is_err());
        let e = parse_str(&["agent", "two", "words"]).unwrap_err();
        assert!(e.msg.contains("one too many"), "{e}");
        let e = parse_str(&["agent", "-c", "--resume", "x"]).unwrap_err();
        assert!(e.msg.contains("give one of"), "{e}");
    }

    #[test]
    fn groups_and_bare_words() {
        assert_eq!(
            parse_str(&["runs"]).unwrap(),
            Command::RunsList {
                limit: None,
                json: false
            }
        );
        let e = parse_str(&["memory"]).unwrap_err();
        assert!(
            e.msg
                .contains("needs a subcommand: list, search, show, clear"),
            "{e}"
        );
        let e = parse_str(&["memory", "bogus"]).unwrap_err();
        assert!(e.msg.contains("unknown command `memory bogus`"), "{e}");
        assert_eq!(
            parse_str(&["help", "memory", "list"]).unwrap(),
            Command::Help(vec!["memory".into(), "list".into()])
        );
    }

    #[test]
    fn typos_get_the_nearest_name_and_known_mistakes_a_way_out() {
        let e = parse_str(&["agnet", "hi"]).unwrap_err();
        assert!(e.msg.contains("did you mean `agent hi`?"), "{e}");
        let e = parse_str(&["memory", "serach", "x"]).unwrap_err();
        assert!(e.msg.contains("did you mean `memory search`?"), "{e}");
        let e = parse_str(&["memory", "list", "--limt", "3"]).unwrap_err();
        assert!(e.msg.contains("did you mean --limit?"), "{e}");
        let e = parse_str(&["estop", "clear"]).unwrap_err();
        assert!(e.msg.contains("`latchclaw estop --clear`"), "{e}");
        let e = parse_str(&["tool", "run", "time", "{}"]).unwrap_err();
        assert!(e.msg.contains("latchclaw tool run time --json '{}'"), "{e}");
        let e = parse_str(&["tool", "run", "shell", "{\"command\": \"echo 'hi'\"}"]).unwrap_err();
        assert!(
            e.msg
                .contains("--json '{\"command\": \"echo '\\''hi'\\''\"}'"),
            "quoted for a shell: {e}"
        );
        for far in [
            &["zzzz"][..],
            &["memory", "list", "--qqqqqq"],
            &["estop", "maybe"],
        ] {
            let e = parse_str(far).unwrap_err();
            assert!(!e.msg.contains("did you mean"), "{far:?}: {e}");
        }
    }

    #[test]
    fn non_utf8_is_a_usage_error() {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"/tmp/\xff.toml").to_os_string();
        let e = parse(vec![
            "--config".into(),
            bad.clone(),
            "config".into(),
            "validate".into(),
        ])
        .unwrap_err();
        assert!(e.msg.contains("--config") && e.msg.contains("UTF-8"), "{e}");
        let e = parse(vec!["agent".into(), bad]).unwrap_err();
        assert!(e.msg.contains("UTF-8"), "{e}");
    }
}
