//! The command line's definitions: every command and every flag, once, with
//! its help. Parsing, help, error messages and shell completions are all
//! derived from these two tables, so a flag cannot be documented for a
//! command that refuses it.

/// One flag. A long name may appear twice when it means different things
/// to different commands (`--json` is a switch for data commands and takes
/// the tool arguments for `tool run` and `policy check`); the two entries'
/// command lists must then be disjoint.
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    /// The value's name in help (`PATH`); `None` for a switch.
    pub value: Option<&'static str>,
    /// The command paths that take it (`"memory list"`); `ALL` for every one.
    pub commands: &'static [&'static str],
    pub help: &'static str,
}

/// Taken by every command.
pub const ALL: &[&str] = &["*"];

impl Flag {
    pub fn takes(&self, command: &str) -> bool {
        self.commands == ALL || self.commands.contains(&command)
    }

    /// `-m, --message MESSAGE` as help shows it.
    pub fn spelling(&self) -> String {
        let mut s = match self.short {
            Some(c) => format!("-{c}, --{}", self.long),
            None => format!("--{}", self.long),
        };
        if let Some(v) = self.value {
            s.push(' ');
            s.push_str(v);
        }
        s
    }
}

/// A positional argument.
pub struct Arg {
    pub name: &'static str,
    /// What it is, for "needs a ...".
    pub what: &'static str,
    pub required: bool,
}

pub struct CommandDef {
    /// Words that name it: `"memory search"`.
    pub path: &'static str,
    pub args: &'static [Arg],
    /// One line for the command list.
    pub summary: &'static str,
    /// The rest of its help, above the generated option list.
    pub about: &'static str,
    /// The group word alone runs this command (`latchclaw runs`).
    pub bare: bool,
}

impl CommandDef {
    pub fn flags(&self) -> impl Iterator<Item = &'static Flag> {
        FLAGS.iter().filter(|f| f.takes(self.path))
    }

    /// `memory search QUERY`, `agent [MESSAGE]`.
    pub fn synopsis(&self) -> String {
        let mut s = self.path.to_string();
        for a in self.args {
            s.push(' ');
            if a.required {
                s.push_str(a.name);
            } else {
                s.push_str(&format!("[{}]", a.name));
            }
        }
        s
    }

    /// The group word of a two-word command (`memory`), if any.
    pub fn group(&self) -> Option<&'static str> {
        self.path.split_once(' ').map(|(g, _)| g)
    }
}

const fn arg(name: &'static str, what: &'static str) -> Arg {
    Arg {
        name,
        what,
        required: true,
    }
}

const DATA: &[&str] = &[
    "config show",
    "provider list",
    "provider test",
    "tool list",
    "tool stats",
    "policy show",
    "policy replay",
    "agent",
    "memory list",
    "memory search",
    "memory show",
    "memory notes",
    "memory summarize",
    "receipt list",
    "receipt verify",
    "receipt head",
    "receipt repair",
    "receipt anchor",
    "approvals list",
    "runs list",
    "prompt show",
    "skill list",
    "skill show",
    "plugin list",
    "plugin show",
    "plugin install",
    "plugin remove",
    "plugin approve",
    "mcp list",
    "mcp tools",
    "mcp test",
    "mcp approve",
    "estop status",
    "sop list",
    "sop validate",
    "sop run",
    "sop resume",
    "sop approve",
    "sop deny",
    "sop runs",
    "code stats",
    "code failures",
    "sop show",
    "task list",
    "task show",
];

pub const FLAGS: &[Flag] = &[
    Flag {
        long: "config",
        short: None,
        value: Some("PATH"),
        commands: ALL,
        help: "config file (default: $LATCHCLAW_HOME/config.toml, ~/.latchclaw/config.toml)",
    },
    Flag {
        long: "help",
        short: Some('h'),
        value: None,
        commands: ALL,
        help: "this help",
    },
    Flag {
        long: "version",
        short: Some('V'),
        value: None,
        commands: ALL,
        help: "print the version",
    },
    Flag {
        long: "json",
        short: None,
        value: None,
        commands: DATA,
        help: "print JSON instead of text",
    },
    Flag {
        long: "json",
        short: None,
        value: Some("ARGS"),
        commands: &["tool run", "policy check"],
        help: "the tool arguments as a JSON object, e.g. '{\"path\": \".\"}' (default {})",
    },
    Flag {
        long: "jsonl",
        short: None,
        value: None,
        commands: &["receipt list"],
        help: "one receipt a line, as JSON (for grep, jq, tail)",
    },
    Flag {
        long: "expect-head",
        short: None,
        value: Some("HASH"),
        commands: &["receipt verify"],
        help: "a head recorded earlier: exit 7 unless some receipt of the chain still has this hash",
    },
    Flag {
        long: "since",
        short: None,
        value: Some("N:HASH"),
        commands: &["receipt verify"],
        help: "as `receipt head` printed it: exit 7 unless receipt N still has this hash",
    },
    Flag {
        long: "since",
        short: None,
        value: Some("DATE|N"),
        commands: &["policy replay"],
        help: "only calls made on or after DATE (YYYY-MM-DD, RFC 3339) or from receipt N on",
    },
    Flag {
        long: "since",
        short: None,
        value: Some("DATE"),
        commands: &["tool stats"],
        help: "only calls from this day (YYYY-MM-DD, UTC) or time (RFC 3339) on",
    },
    Flag {
        long: "message",
        short: Some('m'),
        value: Some("MESSAGE"),
        commands: &["agent", "prompt show"],
        help: "the user message (for agent, - reads it from stdin)",
    },
    Flag {
        long: "conversation",
        short: None,
        value: Some("ID"),
        commands: &["agent", "prompt show", "memory summarize"],
        help: "continue an earlier conversation (memory summarize: summarise this one)",
    },
    Flag {
        long: "new-session",
        short: None,
        value: Some("NAME"),
        commands: &["agent"],
        help: "start a new conversation, a session named NAME",
    },
    Flag {
        long: "period",
        short: None,
        value: Some("PERIOD"),
        commands: &["memory summarize"],
        help: "day, week, month, quarter or year",
    },
    Flag {
        long: "key",
        short: None,
        value: Some("KEY"),
        commands: &["memory summarize"],
        help: "the period: YYYY-MM-DD, YYYY-Www, YYYY-MM, YYYY-Qn or YYYY (default: the last one ended)",
    },
    Flag {
        long: "redo",
        short: None,
        value: None,
        commands: &["memory summarize"],
        help: "write the summary again though one is stored",
    },
    Flag {
        long: "continue",
        short: Some('c'),
        value: None,
        commands: &["agent"],
        help: "continue the most recent conversation",
    },
    Flag {
        long: "resume",
        short: None,
        value: Some("ID"),
        commands: &["agent"],
        help: "continue a conversation after `latchclaw approve`: approved calls run once when the model repeats them",
    },
    Flag {
        long: "lock",
        short: None,
        value: Some("NAME"),
        commands: &["agent", "sop run", "sop resume"],
        help: "refuse to start (exit 8) while another run holds NAME",
    },
    Flag {
        long: "timeout",
        short: None,
        value: Some("SECS"),
        commands: &["agent", "sop run", "sop resume"],
        help: "bound the whole run, tools and provider calls included (exit 6)",
    },
    Flag {
        long: "partial",
        short: None,
        value: None,
        commands: &["agent"],
        help: "when --timeout or Ctrl-C stops the answer, print the part that arrived (else stdout gets nothing)",
    },
    Flag {
        long: "hint",
        short: None,
        value: Some("NAME"),
        commands: &["agent"],
        help: "routing hint for a router provider (e.g. fast)",
    },
    Flag {
        long: "no-stream",
        short: None,
        value: None,
        commands: &["agent"],
        help: "ask for each answer whole instead of streamed",
    },
    Flag {
        long: "autonomy",
        short: None,
        value: Some("LEVEL"),
        commands: &["onboard", "policy check"],
        help: "readonly, supervised or full (policy check: judge at this level instead of the config's)",
    },
    Flag {
        long: "workspace",
        short: None,
        value: Some("DIR"),
        commands: &["init", "onboard"],
        help: "workspace to write into the new config (default ~/latchclaw-workspace)",
    },
    Flag {
        long: "limit",
        short: None,
        value: Some("N"),
        commands: &[
            "memory list",
            "memory search",
            "memory notes",
            "runs list",
            "sop runs",
            "code failures",
            "task list",
        ],
        help: "show at most N entries",
    },
    Flag {
        long: "category",
        short: None,
        value: Some("CATEGORY"),
        commands: &["memory notes"],
        help: "only items of this category (the seed's nine or memory.categories)",
    },
    Flag {
        long: "provider",
        short: None,
        value: Some("KIND"),
        commands: &["onboard"],
        help: "mock or openai-compatible",
    },
    Flag {
        long: "base-url",
        short: None,
        value: Some("URL"),
        commands: &["onboard"],
        help: "the openai-compatible server's URL (…/v1)",
    },
    Flag {
        long: "model",
        short: None,
        value: Some("NAME"),
        commands: &["onboard", "agent"],
        help: "the model to ask for (agent: for this run, instead of the provider's)",
    },
    Flag {
        long: "provider",
        short: None,
        value: Some("NAME"),
        commands: &["agent"],
        help: "this run's provider, one of those configured (default: default_provider)",
    },
    Flag {
        long: "system",
        short: Some('s'),
        value: Some("TEXT"),
        commands: &["agent"],
        help: "this run's base system prompt, instead of the built-in one or prompt.base_file",
    },
    Flag {
        long: "system-file",
        short: None,
        value: Some("PATH"),
        commands: &["agent"],
        help: "as --system, the text read from this file",
    },
    Flag {
        long: "skill",
        short: None,
        value: Some("NAME"),
        commands: &["agent"],
        help: "enable this skill for this run, after [skills] enabled (repeatable)",
    },
    Flag {
        long: "file",
        short: Some('f'),
        value: Some("PATH"),
        commands: &["agent"],
        help: "attach this file to the message, quoted and fenced as data (repeatable)",
    },
    Flag {
        long: "option",
        short: Some('o'),
        value: Some("KEY=VALUE"),
        commands: &["agent"],
        help: "a model option for this run: temperature, max_tokens, top_p or seed (repeatable)",
    },
    Flag {
        long: "workspace",
        short: Some('w'),
        value: Some("DIR"),
        commands: &["agent", "tool run", "policy check", "sop run"],
        help: "this run's workspace, instead of the git work tree it is started in or \
               workspace_dir (tools are confined to it)",
    },
    Flag {
        long: "no-memory",
        short: None,
        value: None,
        commands: &["agent"],
        help: "do not save this run's turns, nor send memory notes with its messages (receipts and the run record are still written)",
    },
    Flag {
        long: "quiet",
        short: Some('q'),
        value: None,
        commands: &["agent"],
        help: "no status lines and no streamed text: the answer (and errors) only",
    },
    Flag {
        long: "api-key-env",
        short: None,
        value: Some("VAR"),
        commands: &["onboard"],
        help: "the environment variable holding the API key (- for none; the key itself is never stored)",
    },
    Flag {
        long: "yes",
        short: None,
        value: None,
        commands: &["onboard", "memory clear", "approve", "sop approve"],
        help: "confirm without asking",
    },
    Flag {
        long: "all",
        short: None,
        value: None,
        commands: &["approvals list"],
        help: "list decided and used approvals too",
    },
    Flag {
        long: "reset",
        short: None,
        value: None,
        commands: &["receipt anchor"],
        help: "accept a log that no longer holds the last anchored head (restored from an older backup, a new chain)",
    },
    Flag {
        long: "clear",
        short: None,
        value: None,
        commands: &["estop"],
        help: "remove the emergency stop",
    },
    Flag {
        long: "bind",
        short: None,
        value: Some("ADDR:PORT"),
        commands: &["gateway", "service install"],
        help: "the gateway listens here instead of gateway.bind, e.g. 127.0.0.1:8080 (port 0: any free port)",
    },
    Flag {
        long: "rotate",
        short: None,
        value: None,
        commands: &["gateway token"],
        help: "replace the existing token (the old one stops working)",
    },
    Flag {
        long: "force",
        short: None,
        value: None,
        commands: &["init", "onboard", "service install"],
        help: "overwrite an existing config file (service install: a unit file that differs)",
    },
    Flag {
        long: "print",
        short: None,
        value: None,
        commands: &["service install"],
        help: "print the unit and an equivalent crontab @reboot line; write and run nothing",
    },
    Flag {
        long: "retry-step",
        short: None,
        value: Some("ID"),
        commands: &["sop resume"],
        help: "run again the step cut off mid-effect (state unknown): you checked its effect did not happen",
    },
    Flag {
        long: "skip-step",
        short: None,
        value: Some("ID"),
        commands: &["sop resume"],
        help: "mark the step cut off mid-effect (state unknown) skipped: you checked its effect happened",
    },
];

pub const COMMANDS: &[CommandDef] = &[
    CommandDef {
        path: "init",
        args: &[],
        summary: "create the state dir, config, memory database and workspace",
        about: "Creates the state directory, a default config (kept if one exists), the
memory database and the workspace. The default config's provider is `mock`,
the built-in one, so `latchclaw agent -m ...` works straight away;
`latchclaw onboard` sets up a real model.",
        bare: false,
    },
    CommandDef {
        path: "onboard",
        args: &[],
        summary: "interactive first-run setup (provider, key variable, autonomy, workspace)",
        about: "Asks, on a terminal, for the provider, its server URL, model and the name
of the environment variable holding its key (never the key), the autonomy
level and the workspace, then writes a checked config and creates the
workspace and memory database. Flags answer questions in advance; with
--yes, or with no terminal, unanswered questions take their defaults.
An existing config is only replaced with --force.",
        bare: false,
    },
    CommandDef {
        path: "config validate",
        args: &[],
        summary: "check the config; every error at once",
        about: "Loads the config and reports every error in one run, each with its key path
(wrong types, values outside the allowed set, unknown keys, malformed TOML
with line and column). Exit 0 when valid, 2 otherwise.",
        bare: false,
    },
    CommandDef {
        path: "config show",
        args: &[],
        summary: "the effective config, secrets redacted",
        about: "Prints the effective config (defaults filled in, paths expanded). API keys
are never printed: only the name of their environment variable and whether
it is set.",
        bare: false,
    },
    CommandDef {
        path: "provider list",
        args: &[],
        summary: "configured providers",
        about: "Lists configured providers: name, kind, model, base URL and whether the API
key variable is set (never its value).",
        bare: false,
    },
    CommandDef {
        path: "provider test",
        args: &[Arg {
            name: "NAME",
            what: "provider name",
            required: false,
        }],
        summary: "one tiny request and one with a tool: latency, text, tool calls",
        about: "Sends one tiny text request and one request offering a trivial tool to
the provider NAME (default: default_provider), and prints the latency of
each, whether text works and whether the model made a native tool call.
Exit 3 when a request fails.",
        bare: false,
    },
    CommandDef {
        path: "tool list",
        args: &[],
        summary: "tools, their risk and whether they are enabled",
        about: "Shows each tool, its base risk and whether the cli channel enables it.",
        bare: false,
    },
    CommandDef {
        path: "tool stats",
        args: &[],
        summary: "each tool's calls, success rate, average and p95 time",
        about: "Reads the tool calls of stored agent rounds from the memory database and
prints, per tool, the calls, how many succeeded (in percent), and the
average and 95th-percentile time of those that ran. --since DATE counts
only calls from then on.",
        bare: false,
    },
    CommandDef {
        path: "tool run",
        args: &[arg("NAME", "tool name")],
        summary: "run one tool through the security gate",
        about: "Runs one tool through the same security gate as the agent and prints the
result as one JSON object. Every attempt writes a receipt.",
        bare: false,
    },
    CommandDef {
        path: "policy check",
        args: &[arg("TOOL", "tool name")],
        summary: "the gate's decision for a call, without running it",
        about: "Evaluates the security gate for one call without running anything and
prints {\"tool\", \"risk\", \"decision\", \"reason\"}; decision is allow, ask
or deny. Exit 0 whenever a decision was made.",
        bare: false,
    },
    CommandDef {
        path: "policy replay",
        args: &[],
        summary: "judge every recorded call again and print what would change",
        about: "Judges every tool call stored in memory again, running nothing, and prints
the calls whose decision would change (allow, ask, deny) with the rule that
decided and counts per rule. With --config FILE, the calls are judged under
FILE against the config in force; without it, under the config in force
against what was recorded (allowed, approved: asked, denied).",
        bare: false,
    },
    CommandDef {
        path: "policy show",
        args: &[],
        summary: "autonomy, workspace boundary, forbidden lists, allowlists",
        about: "Prints the autonomy level, the workspace boundary, the forbidden paths
and commands, the shell allowlist, the enabled tools and the kernel sandbox
shell commands run in. With --json, one object: autonomy, workspace,
workspace_only, forbidden_paths, forbidden_commands, shell_allowlist,
tools_enabled, state_dir, confinement, estop.",
        bare: false,
    },
    CommandDef {
        path: "agent",
        args: &[Arg {
            name: "MESSAGE",
            what: "message",
            required: false,
        }],
        summary: "one turn with MESSAGE (or -m), or a REPL on a terminal",
        about: "With a MESSAGE (as an argument or -m), runs one turn and prints only the
answer on stdout; logs and approval questions go to stderr and the terminal.
Piped stdin is added to the message as context
(`cat log | latchclaw agent \"summarise\"`); `-m -` reads the message itself
from stdin; with stdin piped and no message, stdin is the message. On a
terminal with no message, starts a REPL (/tools, /memory QUERY, /policy,
/exit; lines are edited in place, /help lists the keys, Up/Down recall
earlier lines from <state>/repl_history). Input over max_input_bytes is an
error.

On a terminal the answer appears as it streams in (never the model's
<think> reasoning or tool-call syntax) and each tool call gets a status
line on stderr (`→ shell: git status … 12 ms`); piped output and --json
get only the final answer. --json prints one JSON object: answer, tool
calls, rounds, usage.

Per run: -s/--system or --system-file replace the base system prompt,
--skill NAME adds a skill, -f PATH attaches a file (fenced, quoted as
data; piped stdin is quoted the same way), -o KEY=VALUE sets temperature,
max_tokens, top_p or seed for every request (openai-compatible providers;
over the config's), --model picks the model.

From llm or aichat: here -m is the message (theirs picks the model: use
--model); -s is the system prompt, as in llm (aichat's -s names a session:
use --conversation ID, or -c for the latest); -o takes KEY=VALUE as one
word (llm's -o takes KEY VALUE as two).",
        bare: false,
    },
    CommandDef {
        path: "memory list",
        args: &[],
        summary: "conversations, most recent first",
        about: "Lists conversations: id, turns, last activity and the first message.",
        bare: false,
    },
    CommandDef {
        path: "memory search",
        args: &[arg("QUERY", "QUERY (quote it if it has spaces)")],
        summary: "full-text search of every turn",
        about: "Full-text search, ranked by relevance with recent turns boosted; any text
is accepted (operators and quotes are searched as words).",
        bare: false,
    },
    CommandDef {
        path: "memory show",
        args: &[arg("CONVERSATION_ID", "conversation id (or last)")],
        summary: "the turns of one conversation (last: the last answer only)",
        about: "Prints every turn of one conversation, with its tool calls. `memory show
last` prints only the last answer of the most recent conversation (with
--json, that turn).",
        bare: false,
    },
    CommandDef {
        path: "memory clear",
        args: &[],
        summary: "delete every conversation (needs --yes)",
        about: "Deletes every conversation. Needs --yes. Stored notes stay (`memory forget`).",
        bare: false,
    },
    CommandDef {
        path: "memory notes",
        args: &[],
        summary: "items of both stores (memory_store, memory summarize), newest first",
        about: "Lists stored items, newest first: user_memory notes (id, date, category,
priority, tags, text) and summaries (id, type, period key, text). The model
keeps notes with the memory_store tool, `memory summarize` writes
summaries; they are sent with a message that shares a rare word with them
(open loops and goals of priority 50 or more always), before turns of
other conversations.",
        bare: false,
    },
    CommandDef {
        path: "memory forget",
        args: &[arg("ID", "note id (from memory notes)")],
        summary: "delete one stored note",
        about: "Deletes one stored note. The operator's own act: no approval is asked
(the memory_forget tool asks under supervised).",
        bare: false,
    },
    CommandDef {
        path: "memory summarize",
        args: &[],
        summary: "write the summary of a day, week, month, quarter or year",
        about: "Writes the summary of a period that has ended (default: the last one) into
the summaries store: a day from its conversations, a week from its days, a
month from the ISO weeks inside it and its other days, a quarter from its
months, a year from its quarters. Missing finer summaries are written
first; one model call per summary. A summary already stored is kept
(--redo writes the top one again), so a second run changes nothing and a
run cut short is finished by the next. For cron:
  latchclaw memory summarize --period day
With --conversation ID: that conversation's summary instead.",
        bare: false,
    },
    CommandDef {
        path: "receipt list",
        args: &[],
        summary: "the receipts log, one line per receipt",
        about: "A call that runs leaves two receipts: `started` before the tool runs and its
outcome (allowed, approved, failed) after; a denied call leaves one.",
        bare: false,
    },
    CommandDef {
        path: "receipt verify",
        args: &[],
        summary: "replay the receipt hash chain",
        about: "Replays the hash chain and checks each receipt's hmac under the receipt key
(<state>/receipt.key), then prints `ok: N receipts, head HASH`, which
receipts are keyed (those written before the key existed are not
authenticated), and one line per call that started and has no outcome
(latchclaw was cut off while it ran; exit 0, the chain is intact). Else the
1-based position of the first broken receipt and why (exit 7): a bad hash,
a broken link, a bad or stripped hmac. A torn last line (a crash
mid-append) is broken too; `latchclaw receipt repair` drops it. Keyed
receipts with the key missing cannot be authenticated (exit 7).
--expect-head and --since check a head recorded earlier (`receipt head`):
a log rewritten since then fails (exit 7). When receipts.anchor_file is
set, the log is checked against its last line the same way: a log cut
short of the anchored receipt, or with another hash there, fails (exit 7).",
        bare: false,
    },
    CommandDef {
        path: "receipt head",
        args: &[],
        summary: "`N HASH`: the chain's length and head, to record elsewhere",
        about: "Verifies the chain as `receipt verify` does, then prints `N HASH`: the number
of receipts and the last one's hash. Copy it somewhere the log's writers
cannot reach (a ticket, another machine, a cron log); later,
`latchclaw receipt verify --since N:HASH` fails (exit 7) if receipt N no
longer has that hash, so the receipts up to it were not rewritten. A chain
that does not verify prints no head (exit 7).",
        bare: false,
    },
    CommandDef {
        path: "receipt repair",
        args: &[],
        summary: "drop a torn last line (kept in a backup) so receipts append again",
        about: "Under the receipts lock: when the chain verifies up to a torn last line (a
crash mid-append: no newline, the start of a receipt), copies the log to
a new backup beside it (`tool_receipts.log.bak-YYYYMMDDTHHMMSSZ`, 0600),
cuts the torn line off and appends a `repaired` receipt recording the
bytes dropped (length and SHA-256) and the backup. A whole valid last
receipt missing only its newline gets the newline. A log that verifies is
left alone (exit 0). Any other damage (a bad hash, a broken link, a
deleted, reordered or altered line) is refused with exit 7 and nothing is
written: a repair never rewrites or removes a receipt.",
        bare: false,
    },
    CommandDef {
        path: "receipt anchor",
        args: &[],
        summary: "append the chain's head to receipts.anchor_file, as each run does",
        about: "Verifies the chain as `receipt verify` does, then appends `TIMESTAMP N HASH`
to receipts.anchor_file. Runs do this after writing receipts; `receipt
verify` and every run check the log against the file's last line, and a
log that no longer holds it (cut short or rewritten) fails verify and
takes no receipt (exit 7). --reset accepts such a log as it is: the log
you keep (restored from an older backup, or a new chain after the old log
was moved aside) must verify, and its head is appended after the line it
no longer holds, which stays in the file.",
        bare: false,
    },
    CommandDef {
        path: "estop",
        args: &[],
        summary: "emergency stop: refuse every tool call until cleared",
        about: "Creates the ESTOP file: every tool call is refused (with a receipt) until
`latchclaw estop --clear` removes it. The agent can still answer in text.
`latchclaw estop status` says whether it is on.",
        bare: false,
    },
    CommandDef {
        path: "estop status",
        args: &[],
        summary: "whether the emergency stop is on, since when and why",
        about: "Prints `off`, or `on:` and the ESTOP file's first line (when it was engaged,
and by what: the CLI, or the gateway with its reason). Exit 0 either way.",
        bare: false,
    },
    CommandDef {
        path: "gateway",
        args: &[],
        summary: "a local HTTP server: chat, status, tools, memory, receipts, estop, metrics",
        about: "Serves the HTTP API on gateway.bind (127.0.0.1:7878 by default) until SIGTERM
or Ctrl-C, and prints `listening on ADDR:PORT` on stdout once it is. Every
endpoint but /health needs `Authorization: Bearer TOKEN` (`latchclaw gateway
token` makes it; the gateway does not start without one). A non-loopback
address needs gateway.allow_public_bind = true and a token. POST /chat runs a
turn through the same gate and receipts as `agent`; a call that needs
approval waits as a pending approval (`latchclaw approve ID`).",
        bare: false,
    },
    CommandDef {
        path: "gateway token",
        args: &[],
        summary: "create the gateway's bearer token (printed once; only its hash is kept)",
        about: "Makes a 32-byte random token, prints it once on stdout and keeps only its
SHA-256 in <state>/gateway.token (0600). Refused when a token exists:
--rotate replaces it, and the old one stops working at once, in a running
gateway too.",
        bare: false,
    },
    CommandDef {
        path: "approvals list",
        args: &[],
        summary: "calls waiting for an operator (from runs with no terminal)",
        about: "A call that needs approval in a run with no terminal (cron) is denied and
kept as a pending approval; this lists them (`latchclaw approvals` alone
does the same). Decide them with `latchclaw approve ID` or `deny ID`.",
        bare: true,
    },
    CommandDef {
        path: "approve",
        args: &[arg("ID", "approval id (or last)")],
        summary: "approve a pending call (last: the newest); `agent --resume CONV` continues",
        about: "Asks for confirmation on the terminal, or takes --yes typed by the
operator; nothing a model writes can approve. `approve last` takes the
newest pending approval (the call is printed in full first). Then
`latchclaw agent --resume CONVERSATION` continues the conversation: the
approved call runs once, for exactly that tool and those arguments, in that
conversation.",
        bare: false,
    },
    CommandDef {
        path: "deny",
        args: &[arg("ID", "approval id (or last)")],
        summary: "deny a pending call (last: the newest)",
        about: "Marks a pending approval denied (`deny last`: the newest pending one).",
        bare: false,
    },
    CommandDef {
        path: "runs list",
        args: &[],
        summary: "recorded agent runs: start, end, exit code, conversation",
        about: "Every `agent` run is recorded: id, start and end time, exit code and
reason, conversation, lock name, pid and command line (`latchclaw runs`
alone does the same).",
        bare: true,
    },
    CommandDef {
        path: "sop list",
        args: &[],
        summary: "SOPs: name, steps, description, where, valid or not",
        about: "Lists the SOPs in <workspace>/sops/NAME/SOP.toml and <state>/sops/NAME/SOP.toml
(a state-dir SOP hides a workspace one of the same name): name, number of
steps, description, file, and whether it is valid (`latchclaw sop` alone
does the same).",
        bare: true,
    },
    CommandDef {
        path: "sop validate",
        args: &[Arg {
            name: "NAME",
            what: "SOP name",
            required: false,
        }],
        summary: "check every SOP (or NAME); all errors at once",
        about: "Reads every SOP (or only NAME) and reports every error in one pass, each
naming the file, the step and the key: unique step ids, tools that exist and
are enabled, content_from and {{steps.ID.output}} naming earlier steps,
unknown keys, wrong types, an approval step's prompt. Exit 2 on any error.",
        bare: false,
    },
    CommandDef {
        path: "sop run",
        args: &[arg("NAME", "SOP name")],
        summary: "run a SOP; parks at approvals (exit 4) when nobody can answer",
        about: "Runs the SOP's steps in order, its state written to the memory database
before each step's effect. Tool steps go through the same gate, approvals
and receipts as `tool run`; an agent step is one agent turn; an approval
step asks on the terminal, or (cron, no terminal) parks the run with exit 4
and a pending approval bound to the run, the step and the SOP's hash:
`latchclaw sop approve RUN`, then `latchclaw sop resume RUN`.",
        bare: false,
    },
    CommandDef {
        path: "sop resume",
        args: &[arg("RUN", "SOP run id")],
        summary: "continue a parked, stopped or interrupted SOP run; done steps never re-run",
        about: "Continues run RUN from its first step not done. A done step never runs again.
A step found started without an outcome (latchclaw was killed mid-step) is
marked unknown and the run waits for the operator (--retry-step ID or
--skip-step ID), unless the step is read-only or idempotent = true. A SOP
file changed since the run started is refused. Two resumes of one run: one
proceeds, the other exits 8.",
        bare: false,
    },
    CommandDef {
        path: "sop approve",
        args: &[arg("RUN", "SOP run id")],
        summary: "approve the step RUN is parked at (then `sop resume RUN`)",
        about: "Approves the pending approval the run waits on, after a confirmation on the
terminal or --yes typed by the operator. Refused (exit 4) when the SOP's
file changed since the run started: the approval is bound to its hash.",
        bare: false,
    },
    CommandDef {
        path: "sop deny",
        args: &[arg("RUN", "SOP run id")],
        summary: "deny the step RUN is parked at; the run ends denied",
        about: "Denies the pending approval the run waits on; the run ends as denied (exit 4).",
        bare: false,
    },
    CommandDef {
        path: "sop runs",
        args: &[],
        summary: "SOP runs, newest first: id, SOP, status, updated",
        about: "Lists SOP runs, newest first: id, SOP, status, when it last moved.",
        bare: false,
    },
    CommandDef {
        path: "code stats",
        args: &[],
        summary: "code_run's record: runs, failure rate by error category and language",
        about: "Reads the record every code_run call leaves: how many snippets ran, how many
failed and the failure rate, failures by error category (syntax, runtime,
denied, timeout, killed, output_limit, cancelled, estop,
interpreter_missing, not_started) and runs, failures and mean duration by
language.",
        bare: false,
    },
    CommandDef {
        path: "code failures",
        args: &[],
        summary: "the latest code_run snippets that failed, with their errors",
        about: "The latest failed code_run snippets, newest first: when, language, error
category, exit code, duration, the error, the tool calls and requests it
made (with their receipts) and the code (secrets redacted).",
        bare: false,
    },
    CommandDef {
        path: "sop show",
        args: &[arg("RUN", "SOP run id")],
        summary: "one SOP run: its hash, status and every step's state and output",
        about: "Prints one SOP run: the SOP, its hash, the workspace, the status, and each
step's state (pending, started, done, failed, skipped, waiting_approval,
unknown), attempts, approval and output.",
        bare: false,
    },
    CommandDef {
        path: "task list",
        args: &[Arg {
            name: "CONV",
            what: "conversation id",
            required: false,
        }],
        summary: "plan trees, newest first: root path, state, tasks, tokens",
        about: "Lists the trees of plan calls, newest first (those of conversation CONV when
given): each root's path (CONV/msg-HASH), state, how many tasks it holds,
the tool rounds and tokens it spent, and the budget that stopped it.",
        bare: false,
    },
    CommandDef {
        path: "task show",
        args: &[arg("PATH", "task path")],
        summary: "one plan tree or task: every task's state, budgets spent and result",
        about: "Prints the task at PATH (a root CONV/msg-HASH, or a task under it such as
CONV/msg-HASH/task-1/task-1.2) and every task under it, depth first: its
state (pending, running, done, failed, stopped), the budget that stopped it,
the skill it ran as, the task it corrects, its tools, tool rounds, tokens and
result. A root shows the budgets the tree ran under.",
        bare: false,
    },
    CommandDef {
        path: "prompt show",
        args: &[],
        summary: "the system prompt a turn with MESSAGE would get",
        about: "Prints the system prompt every turn gets, assembled in this order: the
base prompt (built in, or prompt.base_file / <state>/prompt/base.md), the
persona (prompt.persona_file / <state>/prompt/persona.md), the user profile
(prompt.user_file / <state>/prompt/user.md), the enabled skills ([skills]
enabled, in its order) and the active policy. It is
the same bytes on every turn, so a server's prompt cache keeps working.
Then the memory notes MESSAGE would carry (stored notes, then turns of
other conversations, that share a rare word with it, memory.context_hits within
memory.context_bytes; sent with the message, quoted as data), and the size
in bytes of each layer, each tool's schema and the whole first request.",
        bare: false,
    },
    CommandDef {
        path: "skill list",
        args: &[],
        summary: "skills: name, enabled, source, tools, description",
        about: "Lists the skills in <state>/skills/NAME/SKILL.md and, with [skills]
workspace = true, in <workspace>/.latchclaw/skills (a state-dir skill of
the same name wins): name, whether [skills] enabled names it (and where in
its order), where it comes from, the tools it needs and its description,
or why it cannot be used.",
        bare: false,
    },
    CommandDef {
        path: "skill show",
        args: &[arg("NAME", "skill name")],
        summary: "one skill's front matter and body",
        about: "Prints one skill: its name, description, the tools it needs, where it
comes from, whether it is enabled, then the body that joins the system
prompt when it is.",
        bare: false,
    },
    CommandDef {
        path: "plugin list",
        args: &[],
        summary: "plugins: name, version, tools, approved or why not",
        about: "Lists the plugins in <state>/plugins/NAME (README: plugins): name,
version, their tools and whether their definitions are the approved ones
(a plugin whose manifest, schemas, descriptions or executables changed
after it was approved is refused until `latchclaw plugin approve NAME`).",
        bare: true,
    },
    CommandDef {
        path: "plugin show",
        args: &[arg("NAME", "plugin name")],
        summary: "one plugin's manifest, tools and pin",
        about: "Prints one plugin: its directory, version, each tool (name, risk,
read_only, network, env, timeout, command, description), whether it is
approved, and what changed since it was if it was.",
        bare: false,
    },
    CommandDef {
        path: "plugin install",
        args: &[arg("PATH", "plugin directory")],
        summary: "check and copy a plugin directory into <state>/plugins, pinned",
        about: "Checks the directory PATH (its manifest.toml: every problem in one
pass, each with its key path; links that leave it; each tool's command: an
executable inside it; schemas that are objects; tool names that shadow a
built-in or another plugin's), copies it to <state>/plugins/NAME and pins
its tool definitions as approved. Its tools are offered from the next run.",
        bare: false,
    },
    CommandDef {
        path: "plugin remove",
        args: &[arg("NAME", "plugin name")],
        summary: "delete an installed plugin and its pin",
        about: "Deletes <state>/plugins/NAME and its pin.",
        bare: false,
    },
    CommandDef {
        path: "plugin approve",
        args: &[arg("NAME", "plugin name")],
        summary: "show what changed in a plugin and approve it as it is",
        about: "Shows each difference between the plugin's approved tool definitions
and the ones on disk now (names, descriptions, schemas, risk, read_only,
network, env, commands and the executables' SHA-256), then records the ones
on disk as approved: its tools are offered and run again. Refused while its
manifest has problems.",
        bare: false,
    },
    CommandDef {
        path: "mcp list",
        args: &[],
        summary: "MCP servers: name, command, allowed tools, approval (nothing is started)",
        about: "Lists the servers in [mcp.servers.NAME]: the command and its arguments,
the variables passed by name, the read paths, timeout, risk, and which of
their tools tools_allow / tools_deny let through, and whether their tools
are approved (offered to the model) or changed since. Starts nothing.",
        bare: true,
    },
    CommandDef {
        path: "mcp tools",
        args: &[arg("NAME", "server name (from mcp list)")],
        summary: "start a server in the sandbox and list its tools",
        about: "Starts server NAME in the sandbox, initialises it and lists its tools with
the names a model would see (mcp_<server>_<tool>), their sanitised
descriptions and argument schemas, and the listed tools left out (by
tools_allow / tools_deny, or unusable), then stops it. Exit 3 when the
server cannot be started or listed.",
        bare: false,
    },
    CommandDef {
        path: "mcp test",
        args: &[arg("NAME", "server name (from mcp list)")],
        summary: "start, initialise, list and ping a server, with timings",
        about: "Starts server NAME in the sandbox and times each step in milliseconds:
start, initialize (with the protocol version agreed), tools/list, ping;
then stops it, and says whether it left anything running. Exit 0 when
every step worked, 3 when one failed (which one, and why).",
        bare: false,
    },
    CommandDef {
        path: "mcp approve",
        args: &[arg("NAME", "server name (from mcp list)")],
        summary: "start a server, show what changed in its tools and approve them",
        about: "Starts server NAME in the sandbox, lists its tools, shows each difference
from the tool definitions approved before (names, descriptions, argument
schemas), then records these as approved and stops it. Only approved
tools are offered to the model, as mcp_<server>_<tool>; a server that
later lists other definitions has its tools refused until approved again.
Exit 3 when the server cannot be started or listed (nothing recorded).",
        bare: false,
    },
    CommandDef {
        path: "service install",
        args: &[],
        summary: "run the gateway as a systemd user service (or --print a crontab line)",
        about: "Writes the systemd user unit latchclaw-gateway.service into
$XDG_CONFIG_HOME/systemd/user (default ~/.config/systemd/user), 0644, by an
atomic rename, then runs `systemctl --user daemon-reload` and `enable`. The
unit runs `latchclaw gateway` (with this --config and --bind) hardened:
the file system read-only but for the state directory and the workspace,
a private /tmp, no new privileges, IPv4/IPv6/UNIX sockets only. A unit
that differs from the one this would write is kept unless --force.
Where systemd is not running for the user (containers), says so (exit 3)
and writes nothing; --print prints the unit and an equivalent crontab
@reboot line and touches nothing.",
        bare: false,
    },
    CommandDef {
        path: "service start",
        args: &[],
        summary: "start the installed gateway service now",
        about: "Runs `systemctl --user start latchclaw-gateway.service`.",
        bare: false,
    },
    CommandDef {
        path: "service stop",
        args: &[],
        summary: "stop the gateway service",
        about: "Runs `systemctl --user stop latchclaw-gateway.service`.",
        bare: false,
    },
    CommandDef {
        path: "service status",
        args: &[],
        summary: "whether the gateway service is installed, enabled and running",
        about: "Prints the unit file's path, whether it is enabled, its state, main pid,
start time and restarts, from `systemctl --user show`. Exit 0 when it is
running, 3 when it is not.",
        bare: false,
    },
    CommandDef {
        path: "service uninstall",
        args: &[],
        summary: "stop and disable the gateway service and remove its unit",
        about: "Runs `systemctl --user disable --now latchclaw-gateway.service`, removes
the unit file and runs `systemctl --user daemon-reload`.",
        bare: false,
    },
    CommandDef {
        path: "completions",
        args: &[arg("SHELL", "shell (bash, zsh or fish)")],
        summary: "shell completions for bash, zsh or fish",
        about: "Prints a completion script, generated from the same definitions as this
help. For example:
  latchclaw completions bash > ~/.local/share/bash-completion/completions/latchclaw
  eval \"$(latchclaw completions zsh)\"    (in ~/.zshrc; zsh runs the bash one)
  latchclaw completions fish > ~/.config/fish/completions/latchclaw.fish",
        bare: false,
    },
    CommandDef {
        path: "help",
        args: &[Arg {
            name: "COMMAND",
            what: "command",
            required: false,
        }],
        summary: "help for latchclaw or one command",
        about: "Prints the help of a command (`latchclaw help memory search`), or of
latchclaw itself.",
        bare: false,
    },
];

/// The definition named by exactly these words.
pub fn command(path: &str) -> Option<&'static CommandDef> {
    COMMANDS.iter().find(|c| c.path == path)
}

/// The commands under a group word (`memory` → list, search, show, clear).
pub fn group(word: &str) -> Vec<&'static CommandDef> {
    COMMANDS
        .iter()
        .filter(|c| c.group() == Some(word))
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_flag_names_real_commands_and_shared_names_do_not_overlap() {
        for f in FLAGS {
            if f.commands != ALL {
                for c in f.commands {
                    assert!(command(c).is_some(), "--{} names unknown {c}", f.long);
                }
            }
            for g in FLAGS
                .iter()
                .filter(|g| g.long == f.long && !std::ptr::eq(*g, f))
            {
                assert!(
                    f.commands.iter().all(|c| !g.takes(c)),
                    "--{} is defined twice for one command",
                    f.long
                );
            }
        }
    }

    #[test]
    fn command_paths_are_unique() {
        for c in COMMANDS {
            assert_eq!(COMMANDS.iter().filter(|d| d.path == c.path).count(), 1);
        }
    }
}
