//! Command line: lexopt reads the raw arguments into [`Args`], which is then
//! checked against the command it names and dispatched to a plain function.
//! Help texts sit next to the commands they describe.

use crate::channels::{Approver, Channel, CliChannel, TtyApprover};
use crate::config::{self, Autonomy, Config, TOOL_NAMES};
use crate::error::{Error, Result, exit};
use crate::memory::Memory;
use crate::receipts::{ReceiptLog, Verify};
use crate::runtime::Runtime;
use crate::security::Gate;
use serde_json::{Value, json};
use std::ffi::OsString;
use std::path::PathBuf;

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  internal error (a bug; please report it)
  2  usage or config error
  3  runtime error: provider failed (after fallbacks), database, file system
  4  refused by policy: a tool call was denied
  5  emergency stop: a tool call was refused because ESTOP is on
  6  limit reached: max_tool_rounds or the run's --timeout
  7  integrity: the receipt chain is broken or damaged
  8  another run holds the --lock";

fn top_help() -> String {
    format!(
        "latchclaw {} — a small, local-first agent runtime

Usage: latchclaw [--config PATH] <command> [options]

Commands:
  init [--workspace DIR] [--force]   create the state dir, config, memory database and workspace
  onboard [flags]                    interactive first-run setup (provider, key variable, autonomy, workspace)
  config validate                    check the config; every error at once
  config show [--json]               the effective config, secrets redacted
  provider list [--json]             configured providers
  provider test NAME [--json]        one tiny request and one with a tool: latency, text, tool calls
  tool list [--json]                 tools, their risk and whether they are enabled
  tool run NAME --json ARGS          run one tool through the security gate
  policy check TOOL --json ARGS      the gate's decision for a call, without running it
  policy show                        autonomy, workspace boundary, forbidden lists, allowlists
  agent -m MESSAGE [--json]          one turn: the answer on stdout, then exit
  agent                              interactive REPL
  memory list|search QUERY|show ID|clear --yes
  receipt list|verify [--json]       the tool receipt chain
  estop [--clear]                    emergency stop: refuse every tool call until cleared
  approvals list [--all] [--json]    calls waiting for an operator (from runs with no terminal)
  approve ID [--yes] | deny ID       decide a pending call; `agent --resume CONV` continues
  runs list [--json]                 recorded agent runs: start, end, exit code, conversation
  prompt show [-m MESSAGE]           the system prompt a turn with MESSAGE would get

Global options:
  --config PATH   config file (default: $LATCHCLAW_HOME/config.toml, ~/.latchclaw/config.toml)
  -h, --help      help for any command, e.g. `latchclaw memory --help`
  -V, --version   print the version

Environment:
  LATCHCLAW_HOME        state directory (default ~/.latchclaw)
  LATCHCLAW_LOG=json    logs as JSON lines on stderr
  LATCHCLAW_LOG_LEVEL   error|warn|info|debug|trace (or RUST_LOG); default warn

{EXIT_CODES}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Help for a command path; `None` when the path names no command.
fn help_for(words: &[String]) -> Option<String> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let text = match w.as_slice() {
        [] => return Some(top_help()),
        ["init", ..] => {
            "Usage: latchclaw init [--workspace DIR] [--force]

Creates the state directory, a default config (kept if one exists), the
memory database and the workspace. The default config's `local` provider is
the built-in mock, so `latchclaw agent -m ...` works straight away.

  --workspace DIR   workspace to write into the new config (default ~/latchclaw-workspace)
  --force           overwrite an existing config file"
        }
        ["onboard", ..] => {
            "Usage: latchclaw onboard [--provider mock|openai-compatible] [--base-url URL] [--model NAME]
                         [--api-key-env VAR] [--autonomy LEVEL] [--workspace DIR] [--force] [--yes]

Asks, on a terminal, for the provider, its server URL, model and the name
of the environment variable holding its key (never the key), the autonomy
level and the workspace, then writes a checked config and creates the
workspace and memory database. Flags answer questions in advance; with
--yes, or with no terminal, unanswered questions take their defaults.
An existing config is only replaced with --force."
        }
        ["config", "validate", ..] => {
            "Usage: latchclaw config validate

Loads the config and reports every error in one run, each with its key path
(wrong types, values outside the allowed set, unknown keys, malformed TOML
with line and column). Exit 0 when valid, 2 otherwise."
        }
        ["config", "show", ..] => {
            "Usage: latchclaw config show [--json]

Prints the effective config (defaults filled in, paths expanded). API keys
are never printed: only the name of their environment variable and whether
it is set."
        }
        ["config", ..] => "Usage: latchclaw config validate | config show [--json]",
        ["provider", "test", ..] => {
            "Usage: latchclaw provider test NAME [--json]

Sends one tiny text request and one request offering a trivial tool, and
prints the latency of each, whether text works and whether the model made a
native tool call. Exit 3 when a request fails."
        }
        ["provider", ..] => {
            "Usage: latchclaw provider list [--json] | provider test NAME [--json]

Lists configured providers: name, kind, model, base URL and whether the API
key variable is set (never its value)."
        }
        ["tool", "run", ..] => {
            "Usage: latchclaw tool run NAME --json ARGS

Runs one tool through the same security gate as the agent and prints the
result as one JSON object. Every attempt writes a receipt.

  --json ARGS   the tool arguments as a JSON object, e.g. '{\"path\": \".\"}'"
        }
        ["tool", ..] => {
            "Usage: latchclaw tool list [--json] | tool run NAME --json ARGS

`list` shows each tool, its base risk and whether the cli channel enables it."
        }
        ["agent", ..] => {
            "Usage: latchclaw agent [-m MESSAGE] [--conversation ID | -c] [--json]

With -m, runs one turn and prints only the answer on stdout; logs and
approval questions go to stderr and the terminal. Piped stdin is added to
the message as context (`cat log | latchclaw agent -m \"summarise\"`);
`-m -` reads the message itself from stdin; with stdin piped and no -m,
stdin is the message. On a terminal with no -m, starts a REPL (/tools,
/memory QUERY, /policy, /exit). Input over max_input_bytes is an error.

  -m, --message MESSAGE   the user message for a one-shot turn (- = stdin)
  --conversation ID       continue an earlier conversation
  -c, --continue          continue the most recent conversation
  --resume ID             continue a conversation after `latchclaw approve`:
                          approved calls run once when the model repeats them
  --lock NAME             refuse to start (exit 8) while another run holds NAME
  --timeout SECS          bound the whole run, tools and provider calls included (exit 6)
  --hint NAME             routing hint for a router provider (e.g. fast)
  --no-stream             ask for each answer whole instead of streamed
  --json                  print one JSON object: answer, tool calls, rounds, usage

On a terminal the answer appears as it streams in (never the model's
<think> reasoning or tool-call syntax) and each tool call gets a status
line on stderr (`→ shell: git status … 12 ms`); piped output and --json
get only the final answer."
        }
        ["memory", ..] => {
            "Usage: latchclaw memory list [--limit N] [--json]
       latchclaw memory search QUERY [--limit N] [--json]
       latchclaw memory show CONVERSATION_ID [--json]
       latchclaw memory clear --yes

`search` is full-text, ranked by relevance with recent turns boosted; any
text is accepted (operators and quotes are searched as words)."
        }
        ["receipt", ..] => {
            "Usage: latchclaw receipt list [--json] | receipt verify [--json]

A call that runs leaves two receipts: `started` before the tool runs and its
outcome (allowed, approved, failed) after; a denied call leaves one.

`verify` replays the hash chain and prints `ok: N receipts, head HASH`, then
one line per call that started and has no outcome (latchclaw was cut off
while it ran; exit 0, the chain is intact), or the 1-based position of the
first broken receipt and why (exit 7)."
        }
        ["policy", "check", ..] => {
            "Usage: latchclaw policy check TOOL --json ARGS [--autonomy LEVEL]

Evaluates the security gate for one call without running anything and
prints {\"tool\", \"risk\", \"decision\", \"reason\"}; decision is allow, ask
or deny. Exit 0 whenever a decision was made.

  --json ARGS         the tool arguments as a JSON object
  --autonomy LEVEL    judge as readonly, supervised or full instead of the config's level"
        }
        ["policy", ..] => {
            "Usage: latchclaw policy show | policy check TOOL --json ARGS [--autonomy LEVEL]

`show` prints the autonomy level, the workspace boundary, the forbidden paths
and commands, the shell allowlist and the enabled tools."
        }
        ["prompt", ..] => {
            "Usage: latchclaw prompt show [-m MESSAGE] [--conversation ID] [--json]

Prints the system prompt every turn gets, assembled in this order: the
base prompt (built in, or prompt.base_file / <state>/prompt/base.md), the
persona (prompt.persona_file / <state>/prompt/persona.md), the user profile
(prompt.user_file / <state>/prompt/user.md) and the active policy. It is
the same bytes on every turn, so a server's prompt cache keeps working.
Then the memory notes MESSAGE would carry (turns of other conversations
that share a rare word with it, memory.context_hits within
memory.context_bytes; sent with the message, quoted as data), and the size
in bytes of each layer, each tool's schema and the whole first request.
  --json   the same as one JSON object"
        }
        ["runs", ..] => {
            "Usage: latchclaw runs list [--limit N] [--json]

Every `agent` run is recorded: id, start and end time, exit code and
reason, conversation, lock name, pid and command line."
        }
        ["approvals", ..] | ["approve", ..] | ["deny", ..] => {
            "Usage: latchclaw approvals list [--all] [--json]
       latchclaw approve ID [--yes]
       latchclaw deny ID

A call that needs approval in a run with no terminal (cron) is denied and
kept as a pending approval. `approve` asks for confirmation on the terminal,
or takes --yes typed by the operator; nothing a model writes can approve.
Then `latchclaw agent --resume CONVERSATION` continues the conversation: the
approved call runs once, for exactly that tool and those arguments, in that
conversation. `--all` lists decided and used approvals too."
        }
        ["estop", ..] => {
            "Usage: latchclaw estop [--clear]

Creates the ESTOP file: every tool call is refused (with a receipt) until
`latchclaw estop --clear` removes it. The agent can still answer in text."
        }
        _ => return None,
    };
    Some(format!("{text}\n\n{EXIT_CODES}"))
}

/// The raw command line: what was given, before it is checked against the
/// command it names.
#[derive(Debug, Default)]
struct Args {
    words: Vec<String>,
    /// Options seen, by long name, to reject ones the command does not take.
    seen: Vec<&'static str>,
    config: Option<PathBuf>,
    help: bool,
    version: bool,
    json: bool,
    json_args: Option<String>,
    message: Option<String>,
    conversation: Option<String>,
    workspace: Option<PathBuf>,
    autonomy: Option<String>,
    limit: Option<u32>,
    yes: bool,
    provider: Option<String>,
    base_url: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    resume_latest: bool,
    resume: Option<String>,
    all: bool,
    lock: Option<String>,
    timeout: Option<u64>,
    hint: Option<String>,
    no_stream: bool,
    clear: bool,
    force: bool,
}

fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Args> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(argv);
    let mut a = Args::default();
    let bad = |e: lexopt::Error| Error::usage(format!("{e}; see `latchclaw --help`"));
    let text = |p: &mut lexopt::Parser| p.value().and_then(|v| v.string()).map_err(bad);
    while let Some(arg) = p.next().map_err(bad)? {
        let name: &'static str = match arg {
            Short('h') | Long("help") => {
                a.help = true;
                continue;
            }
            Short('V') | Long("version") => {
                a.version = true;
                continue;
            }
            Long("config") => {
                a.config = Some(p.value().map_err(bad)?.into());
                continue;
            }
            // `tool run NAME --json ARGS` and `policy check` take a value;
            // elsewhere it is a switch.
            Long("json")
                if a.words.first().is_some_and(|w| w == "tool")
                    && a.words.get(1).is_some_and(|w| w == "run")
                    || a.words.get(1).is_some_and(|w| w == "check") =>
            {
                a.json_args = Some(text(&mut p)?);
                "json-args"
            }
            Long("json") => {
                a.json = true;
                "json"
            }
            Short('m') | Long("message") => {
                a.message = Some(text(&mut p)?);
                "message"
            }
            Long("conversation") => {
                a.conversation = Some(text(&mut p)?);
                "conversation"
            }
            Short('c') | Long("continue") => {
                a.resume_latest = true;
                "continue"
            }
            Long("resume") => {
                a.resume = Some(text(&mut p)?);
                "resume"
            }
            Long("lock") => {
                let v = text(&mut p)?;
                if v.is_empty()
                    || !v
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                    || v.starts_with('.')
                {
                    return Err(Error::usage(format!(
                        "--lock: \"{v}\" is not a lock name (letters, digits, - _ .)"
                    )));
                }
                a.lock = Some(v);
                "lock"
            }
            Long("timeout") => {
                let v = text(&mut p)?;
                a.timeout = Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::usage(format!(
                        "--timeout: \"{v}\" is not a positive number of seconds"
                    ))
                })?);
                "timeout"
            }
            Long("all") => {
                a.all = true;
                "all"
            }
            Long("hint") => {
                a.hint = Some(text(&mut p)?);
                "hint"
            }
            Long("no-stream") => {
                a.no_stream = true;
                "no-stream"
            }
            Long("autonomy") => {
                a.autonomy = Some(text(&mut p)?);
                "autonomy"
            }
            Long("workspace") => {
                a.workspace = Some(p.value().map_err(bad)?.into());
                "workspace"
            }
            Long("limit") => {
                let v = text(&mut p)?;
                a.limit = Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::usage(format!("--limit: \"{v}\" is not a positive whole number"))
                })?);
                "limit"
            }
            Long("provider") => {
                a.provider = Some(text(&mut p)?);
                "provider"
            }
            Long("base-url") => {
                a.base_url = Some(text(&mut p)?);
                "base-url"
            }
            Long("model") => {
                a.model = Some(text(&mut p)?);
                "model"
            }
            Long("api-key-env") => {
                a.api_key_env = Some(text(&mut p)?);
                "api-key-env"
            }
            Long("yes") => {
                a.yes = true;
                "yes"
            }
            Long("clear") => {
                a.clear = true;
                "clear"
            }
            Long("force") => {
                a.force = true;
                "force"
            }
            Value(v) => {
                a.words.push(v.string().map_err(bad)?);
                continue;
            }
            _ => return Err(bad(arg.unexpected())),
        };
        a.seen.push(name);
    }
    Ok(a)
}

impl Args {
    /// Rejects options the command does not take, naming the ones it does.
    fn only(&self, cmd: &str, allowed: &[&str]) -> Result<()> {
        if let Some(bad) = self.seen.iter().find(|s| !allowed.contains(s)) {
            let shown = if *bad == "json-args" { "json" } else { bad };
            let list = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed
                    .iter()
                    .map(|a| format!("--{}", if *a == "json-args" { "json" } else { a }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(Error::usage(format!(
                "`latchclaw {cmd}` does not take --{shown}; its options: {list}"
            )));
        }
        Ok(())
    }

    fn load_config(&self) -> Result<Config> {
        let cfg = Config::load(self.config.as_deref())?;
        log::info!(target: "event::startup", "version={}", env!("CARGO_PKG_VERSION"));
        log::info!(target: "event::config_path", "path={} loaded={}", cfg.config_path.display(), cfg.source.is_some());
        log::info!(target: "event::workspace_path", "path={}", cfg.workspace_dir.display());
        Ok(cfg)
    }
}

/// Entry point: parses, dispatches, and returns the exit code.
pub fn run(argv: impl IntoIterator<Item = OsString>) -> Result<i32> {
    let a = parse(argv)?;
    if a.help {
        return match help_for(&a.words) {
            Some(h) => {
                println!("{h}");
                Ok(exit::OK)
            }
            None => Err(unknown_command(&a.words)),
        };
    }
    if a.version {
        println!("latchclaw {}", env!("CARGO_PKG_VERSION"));
        return Ok(exit::OK);
    }
    let w: Vec<&str> = a.words.iter().map(String::as_str).collect();
    match w.as_slice() {
        [] => {
            eprintln!("{}", top_help());
            Err(Error::usage("no command given"))
        }
        ["init"] => cmd_init(&a),
        ["onboard"] => cmd_onboard(&a),
        ["config", "validate"] => cmd_config_validate(&a),
        ["config", "show"] => cmd_config_show(&a),
        ["provider", "list"] => cmd_provider_list(&a),
        ["provider", "test", name] => cmd_provider_test(&a, name),
        ["tool", "list"] => cmd_tool_list(&a),
        ["tool", "run", name] => cmd_tool_run(&a, name),
        ["tool", "run"] => Err(Error::usage(
            "`latchclaw tool run` needs a tool name: latchclaw tool run NAME --json ARGS",
        )),
        ["agent"] => cmd_agent(&a),
        ["memory", sub @ ..] => cmd_memory(&a, sub),
        ["receipt", "list"] => cmd_receipt_list(&a),
        ["receipt", "verify"] => cmd_receipt_verify(&a),
        ["estop"] => cmd_estop(&a),
        ["policy", "check", tool] => cmd_policy_check(&a, tool),
        ["policy", "check"] => Err(Error::usage(
            "`latchclaw policy check` needs a tool name: latchclaw policy check TOOL --json ARGS",
        )),
        ["policy", "show"] => cmd_policy_show(&a),
        ["approvals", "list"] | ["approvals"] => cmd_approvals_list(&a),
        ["runs", "list"] | ["runs"] => cmd_runs_list(&a),
        ["prompt", "show"] => cmd_prompt_show(&a),
        ["approve", id] => cmd_decide(&a, id, true),
        ["deny", id] => cmd_decide(&a, id, false),
        _ => Err(unknown_command(&a.words)),
    }
}

fn unknown_command(words: &[String]) -> Error {
    Error::usage(format!(
        "unknown command `{}`; commands: init, onboard, config validate|show, provider list, tool list|run, \
         policy check|show, agent, memory list|search|show|clear, receipt list|verify, estop, \
         approvals list, approve, deny, runs list, prompt show \
         (see `latchclaw --help`)",
        words.join(" ")
    ))
}

fn print_json(v: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
    );
}

/// A TOML string literal that survives config loading (`$` is expanded there).
fn toml_path_literal(p: &std::path::Path) -> String {
    let s = p.display().to_string().replace('$', "$$");
    toml::Value::String(s).to_string()
}

/// What `init` and `onboard` write into a new config.
struct Setup {
    /// A TOML literal.
    workspace: String,
    default_provider: &'static str,
    autonomy: String,
    base_url: String,
    model: String,
    api_key_env: Option<String>,
}

impl Setup {
    fn defaults(a: &Args) -> Result<Setup> {
        let workspace = match &a.workspace {
            Some(w) => workspace_literal(&w.display().to_string())?,
            None => "\"~/latchclaw-workspace\"".into(),
        };
        Ok(Setup {
            workspace,
            default_provider: "local",
            autonomy: "supervised".into(),
            base_url: "http://localhost:1234/v1".into(),
            model: "local-model".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
        })
    }

    fn render(&self) -> String {
        let key = match &self.api_key_env {
            Some(k) => format!(
                "api_key_env = {}     # the variable's name; the key itself stays in the environment",
                toml::Value::String(k.clone())
            ),
            None => "# api_key_env = \"OPENAI_API_KEY\"   # for servers that need a key".into(),
        };
        INIT_CONFIG
            .replace("{workspace}", &self.workspace)
            .replace("{default_provider}", self.default_provider)
            .replace("{autonomy}", &self.autonomy)
            .replace(
                "{base_url}",
                &toml::Value::String(self.base_url.clone()).to_string(),
            )
            .replace(
                "{model}",
                &toml::Value::String(self.model.clone()).to_string(),
            )
            .replace("{api_key_env}", &key)
    }
}

fn workspace_literal(raw: &str) -> Result<String> {
    if raw.starts_with('~') {
        return Ok(toml::Value::String(raw.replace('$', "$$")).to_string());
    }
    let abs =
        std::path::absolute(raw).map_err(|e| Error::usage(format!("workspace {raw}: {e}")))?;
    Ok(toml_path_literal(&abs))
}

/// Writes the config (checked before it replaces anything), then creates the
/// workspace and the memory database.
fn install(a: &Args, setup: &Setup, replace_existing: bool) -> Result<i32> {
    let state = config::state_dir()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", state.display())))?;
    let path = match &a.config {
        Some(p) => p.clone(),
        None => state.join("config.toml"),
    };
    let exists = path.exists();
    let action = if exists && !replace_existing {
        "kept (use --force to overwrite)"
    } else {
        let tmp = path.with_extension("toml.new");
        std::fs::write(&tmp, setup.render())
            .map_err(|e| Error::runtime(format!("cannot write {}: {e}", tmp.display())))?;
        if let Err(e) = Config::load(Some(&tmp)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &path)
            .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
        if exists { "overwritten" } else { "created" }
    };
    let cfg = Config::load(Some(&path))?;
    std::fs::create_dir_all(&cfg.workspace_dir).map_err(|e| {
        Error::runtime(format!(
            "cannot create workspace {}: {e}",
            cfg.workspace_dir.display()
        ))
    })?;
    Memory::open(&cfg.memory_path, cfg.memory_busy_timeout_ms)?;
    println!("state dir  {}", cfg.state_dir.display());
    println!("config     {} ({action})", path.display());
    println!("memory     {}", cfg.memory_path.display());
    println!("receipts   {}", cfg.receipts_path.display());
    println!("workspace  {}", cfg.workspace_dir.display());
    println!(
        "provider   {} (autonomy {})",
        cfg.default_provider,
        cfg.security.autonomy.as_str()
    );
    if let Some(var) = cfg.provider(&cfg.default_provider)?.api_key_env.as_deref()
        && std::env::var_os(var).is_none()
    {
        println!("key        export {var}=... before running the agent (the key is never stored)");
    }
    println!("next: latchclaw agent -m \"What files are in this project?\"");
    Ok(exit::OK)
}

fn cmd_init(a: &Args) -> Result<i32> {
    a.only("init", &["workspace", "force"])?;
    install(a, &Setup::defaults(a)?, a.force)
}

/// Asks one question on the terminal; an empty answer keeps the default.
fn ask(question: &str, default: &str) -> Result<String> {
    eprint!("{question} [{default}]: ");
    let _ = std::io::Write::flush(&mut std::io::stderr());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let answer = line.trim();
    Ok(if answer.is_empty() {
        default.to_string()
    } else {
        answer.to_string()
    })
}

fn cmd_onboard(a: &Args) -> Result<i32> {
    use std::io::IsTerminal;
    a.only(
        "onboard",
        &[
            "workspace",
            "force",
            "yes",
            "provider",
            "base-url",
            "model",
            "api-key-env",
            "autonomy",
        ],
    )?;
    let path = match &a.config {
        Some(p) => p.clone(),
        None => config::state_dir()?.join("config.toml"),
    };
    if path.exists() && !a.force {
        return Err(Error::usage(format!(
            "{} exists; `latchclaw onboard --force` replaces it (the old one is overwritten)",
            path.display()
        )));
    }
    let interactive = std::io::stdin().is_terminal() && !a.yes;
    let pick = |flag: &Option<String>, question: &str, default: &str| -> Result<String> {
        match flag {
            Some(v) => Ok(v.clone()),
            None if interactive => ask(question, default),
            None => Ok(default.to_string()),
        }
    };
    if interactive {
        eprintln!("LatchClaw setup. Press Enter to keep the value in brackets.");
    }
    let kind = pick(&a.provider, "Provider (mock or openai-compatible)", "mock")?;
    let mut setup = Setup::defaults(a)?;
    match kind.as_str() {
        "mock" => {}
        "openai-compatible" => {
            setup.default_provider = "openai_compatible";
            setup.base_url = pick(&a.base_url, "Server URL (…/v1)", "http://localhost:1234/v1")?;
            setup.model = pick(&a.model, "Model", "local-model")?;
            let var = pick(
                &a.api_key_env,
                "Environment variable with the API key (- for none)",
                "OPENAI_API_KEY",
            )?;
            setup.api_key_env = (var != "-" && !var.is_empty()).then_some(var);
        }
        other => {
            return Err(Error::usage(format!(
                "provider \"{other}\" is not offered here; allowed values: mock, openai-compatible"
            )));
        }
    }
    setup.autonomy = pick(
        &a.autonomy,
        "Autonomy (readonly, supervised, full)",
        "supervised",
    )?;
    if Autonomy::parse(&setup.autonomy).is_none() {
        return Err(Error::usage(format!(
            "autonomy \"{}\" is not allowed; allowed values: {}",
            setup.autonomy,
            Autonomy::ALLOWED.join(", ")
        )));
    }
    if a.workspace.is_none() && interactive {
        setup.workspace = workspace_literal(&ask("Workspace directory", "~/latchclaw-workspace")?)?;
    }
    install(a, &setup, true)
}

use std::os::unix::fs::DirBuilderExt;

const INIT_CONFIG: &str = r#"# LatchClaw configuration, written by `latchclaw init` or `latchclaw onboard`.
# Every key, with its default, is described in config.example.toml.
# Paths may use ~ and $VAR / ${VAR}; relative paths are relative to this file.

workspace_dir = {workspace}
default_provider = "{default_provider}"
default_model = "mock"

[security]
autonomy = "{autonomy}"            # readonly | supervised | full
workspace_only = true
forbidden_paths = ["/etc", "/sys", "/boot", "/proc", "/dev", "/root", "~/.ssh"]
forbidden_commands = ["rm", "shutdown", "reboot", "halt", "poweroff", "mkfs", "dd", "sudo", "su", "doas"]
audit_log = true

# The built-in deterministic provider: no network, no key.
[providers.models.local]
kind = "mock"
model = "mock"

[providers.models.openai_compatible]
kind = "openai-compatible"
base_url = {base_url}
model = {model}
{api_key_env}

[channels.cli]
enabled = true
tools_allow = ["file_read", "file_list", "time", "memory_search", "shell"]

# [memory]
# path = "~/.latchclaw/memory.sqlite"     # default: memory.sqlite in the state dir
# [receipts]
# path = "~/.latchclaw/tool_receipts.log" # default: tool_receipts.log in the state dir
"#;

fn cmd_config_validate(a: &Args) -> Result<i32> {
    a.only("config validate", &[])?;
    let cfg = a.load_config()?;
    match &cfg.source {
        Some(p) => println!(
            "ok: {} ({} providers, default \"{}\", autonomy {})",
            p.display(),
            cfg.providers.len(),
            cfg.default_provider,
            cfg.security.autonomy.as_str()
        ),
        None => println!(
            "ok: no config file at {}; defaults apply",
            cfg.config_path.display()
        ),
    }
    Ok(exit::OK)
}

fn env_is_set(name: &Option<String>) -> Option<bool> {
    name.as_ref()
        .map(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()))
}

/// The effective config as JSON; API keys appear only as the variable name
/// and whether it is set.
fn config_value(cfg: &Config) -> Value {
    let providers: serde_json::Map<String, Value> = cfg
        .providers
        .values()
        .map(|p| {
            let mut v =
                json!({"kind": p.kind.as_str(), "model": p.model, "timeout_secs": p.timeout_secs});
            let m = v.as_object_mut().expect("object literal");
            if let Some(u) = &p.base_url {
                m.insert("base_url".into(), u.clone().into());
            }
            if let Some(k) = &p.api_key_env {
                m.insert("api_key_env".into(), k.clone().into());
                m.insert("api_key_set".into(), env_is_set(&p.api_key_env).into());
            }
            if let Some(f) = &p.fixture {
                m.insert("fixture".into(), f.display().to_string().into());
            }
            if let Some(f) = &p.record_requests {
                m.insert("record_requests".into(), f.display().to_string().into());
            }
            if !p.providers.is_empty() {
                m.insert("providers".into(), p.providers.clone().into());
            }
            if let Some(t) = p.temperature {
                m.insert("temperature".into(), t.into());
            }
            if p.kind == crate::config::ProviderKind::OpenAiCompatible {
                m.insert("tool_mode".into(), p.tool_mode.as_str().into());
                m.insert("stream".into(), p.stream.into());
                m.insert("retries".into(), p.retries.into());
                if let Some(n) = p.max_tokens {
                    m.insert("max_tokens".into(), n.into());
                }
                if !p.headers.is_empty() {
                    let h: serde_json::Map<String, Value> = p
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone().into()))
                        .collect();
                    m.insert("headers".into(), h.into());
                }
            }
            if p.kind == crate::config::ProviderKind::Router {
                let table = |v: &[(String, String)]| -> Value {
                    v.iter()
                        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                };
                m.insert("hints".into(), table(&p.hints));
                m.insert("routes".into(), table(&p.routes));
                m.insert("default_route".into(), p.default_route.clone().into());
            }
            (p.name.clone(), v)
        })
        .collect();
    let paths = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    };
    json!({
        "workspace_dir": cfg.workspace_dir.display().to_string(),
        "default_provider": cfg.default_provider,
        "default_model": cfg.default_model,
        "max_tool_rounds": cfg.max_tool_rounds,
        "max_response_bytes": cfg.max_response_bytes,
        "tool_timeout_secs": cfg.tool_timeout_secs,
        "shell_timeout_secs": cfg.shell_timeout_secs,
        "http_timeout_secs": cfg.http_timeout_secs,
        "tool_output_max_bytes": cfg.tool_output_max_bytes,
        "file_write_max_bytes": cfg.file_write_max_bytes,
        "max_input_bytes": cfg.max_input_bytes,
        "security": {
            "autonomy": cfg.security.autonomy.as_str(),
            "workspace_only": cfg.security.workspace_only,
            "forbidden_paths": paths(&cfg.security.forbidden_paths),
            "forbidden_commands": cfg.security.forbidden_commands,
            "audit_log": cfg.security.audit_log,
            "shell_allowlist": cfg.security.shell_allowlist,
            "shell_env_passthrough": cfg.security.shell_env_passthrough,
            "confinement": cfg.security.confinement.as_str(),
        },
        "providers": {"models": providers},
        "channels": {"cli": {"enabled": cfg.cli_enabled, "tools_allow": cfg.cli_tools_allow}},
        "memory": {
            "backend": "sqlite",
            "path": cfg.memory_path.display().to_string(),
            "busy_timeout_ms": cfg.memory_busy_timeout_ms,
            "context_turns": cfg.memory_context_turns,
            "context_hits": cfg.memory_context_hits,
            "context_bytes": cfg.memory_context_bytes,
        },
        "receipts": {"enabled": cfg.receipts_enabled, "path": cfg.receipts_path.display().to_string()},
        "prompt": {
            "base_file": cfg.prompt_base_file.as_ref().map(|p| p.display().to_string()),
            "persona_file": cfg.prompt_persona_file.as_ref().map(|p| p.display().to_string()),
            "user_file": cfg.prompt_user_file.as_ref().map(|p| p.display().to_string()),
        },
        "tools": {"http": {
            "allowed_domains": cfg.http_allowed_domains,
            "allow_private": cfg.http_allow_private,
            "max_redirects": cfg.http_max_redirects,
        }},
    })
}

/// TOML has no null: unset keys are left out of the TOML view.
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

fn cmd_config_show(a: &Args) -> Result<i32> {
    a.only("config show", &["json"])?;
    let cfg = a.load_config()?;
    let v = config_value(&cfg);
    if a.json {
        print_json(&v);
    } else {
        let source = match &cfg.source {
            Some(p) => p.display().to_string(),
            None => format!("{} (absent: defaults)", cfg.config_path.display()),
        };
        let t: toml::Table = serde_json::from_value(strip_nulls(v))
            .map_err(|e| Error::new(crate::error::Kind::Internal, e.to_string()))?;
        print!("# effective config from {source}\n{t}");
    }
    Ok(exit::OK)
}

fn cmd_provider_list(a: &Args) -> Result<i32> {
    a.only("provider list", &["json"])?;
    let cfg = a.load_config()?;
    let rows: Vec<Value> = cfg
        .providers
        .values()
        .map(|p| {
            json!({
                "name": p.name, "kind": p.kind.as_str(), "model": p.model,
                "base_url": p.base_url, "api_key_env": p.api_key_env,
                "api_key_set": env_is_set(&p.api_key_env),
                "default": p.name == cfg.default_provider,
                "providers": p.providers,
            })
        })
        .collect();
    if a.json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    println!(
        "{:20} {:18} {:14} {:28} KEY",
        "NAME", "KIND", "MODEL", "BASE URL"
    );
    for p in cfg.providers.values() {
        let key = match (&p.api_key_env, env_is_set(&p.api_key_env)) {
            (Some(k), Some(true)) => format!("{k} (set)"),
            (Some(k), _) => format!("{k} (not set)"),
            (None, _) => "-".into(),
        };
        let mut name = p.name.clone();
        if p.name == cfg.default_provider {
            name.push_str(" *");
        }
        let url = match p.kind {
            crate::config::ProviderKind::Reliable => p.providers.join(" -> "),
            _ => p.base_url.clone().unwrap_or_else(|| "-".into()),
        };
        println!(
            "{name:20} {:18} {:14} {url:28} {key}",
            p.kind.as_str(),
            p.model
        );
    }
    println!("(* = default_provider)");
    Ok(exit::OK)
}

fn cmd_provider_test(a: &Args, name: &str) -> Result<i32> {
    use crate::providers::{ChatRequest, Message, Role, ToolSpec};
    a.only("provider test", &["json"])?;
    let cfg = a.load_config()?;
    let pc = cfg.provider(name)?;
    let provider = crate::providers::build(&cfg, name)?;
    let request = |text: &str, tools: Vec<ToolSpec>| ChatRequest {
        system_prompt: "You are being tested. Follow the instruction exactly.".into(),
        messages: vec![Message::new(Role::User, text)],
        tools,
        model: pc.model.clone(),
        temperature: Some(0.0),
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
    let called = tools.as_ref().is_ok_and(|r| !r.tool_calls.is_empty());
    let ok = text.is_ok() && tools.is_ok();
    if a.json {
        print_json(&json!({
            "provider": name, "kind": pc.kind.as_str(), "model": pc.model, "ok": ok,
            "text": {"ok": text.is_ok(), "latency_ms": text_ms,
                     "reply": text.as_ref().ok().map(|r| r.final_text.clone()),
                     "error": text.as_ref().err().map(|e| e.to_string())},
            "tools": {"ok": tools.is_ok(), "latency_ms": tools_ms, "tool_call": called,
                      "native": called && native,
                      "error": tools.as_ref().err().map(|e| e.to_string())},
        }));
    } else {
        println!("provider {name} ({}, model {})", pc.kind.as_str(), pc.model);
        match &text {
            Ok(r) => println!(
                "text:        ok in {text_ms} ms: {}",
                one_line(&r.final_text, 60)
            ),
            Err(e) => println!("text:        FAILED in {text_ms} ms: {e}"),
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
            Err(e) => println!("tool calls:  FAILED in {tools_ms} ms: {e}"),
        }
    }
    Ok(if ok { exit::OK } else { exit::RUNTIME })
}

fn cmd_tool_list(a: &Args) -> Result<i32> {
    a.only("tool list", &["json"])?;
    let cfg = a.load_config()?;
    let rows: Vec<Value> = TOOL_NAMES
        .iter()
        .map(|name| {
            let tool = crate::tools::find(name);
            json!({
                "name": name,
                "implemented": tool.is_some(),
                "enabled": cfg.cli_tools_allow.iter().any(|t| t == name),
                "risk": crate::security::risk_summary(name),
                "description": tool.map_or("not implemented in this version", |t| t.description()),
            })
        })
        .collect();
    if a.json {
        print_json(&rows);
        return Ok(exit::OK);
    }
    println!("{:14} {:8} {:28} DESCRIPTION", "TOOL", "ENABLED", "RISK");
    for r in &rows {
        println!(
            "{:14} {:8} {:28} {}",
            r["name"].as_str().unwrap_or(""),
            if r["enabled"] == true { "yes" } else { "no" },
            r["risk"].as_str().unwrap_or(""),
            r["description"].as_str().unwrap_or("")
        );
    }
    Ok(exit::OK)
}

fn cmd_tool_run(a: &Args, name: &str) -> Result<i32> {
    a.only("tool run", &["json-args"])?;
    let args = parse_tool_args(a, name)?;
    let cfg = a.load_config()?;
    let approver = TtyApprover;
    let rt = Runtime::new(&cfg, &approver)?;
    let (record, result) = rt.execute_tool("cli-tool-run", name, &args)?;
    print_json(&json!({
        "tool": name,
        "status": record.status,
        "risk": record.risk,
        "reason": record.reason,
        "receipt_id": record.receipt_id,
        "started_receipt_id": record.started_receipt_id,
        "success": result.success,
        "output": result.output,
        "error": result.error,
        "metadata": result.metadata,
    }));
    Ok(match record.status {
        "denied" if record.estop => exit::ESTOP,
        "denied" => exit::POLICY,
        "failed" => exit::RUNTIME,
        _ => exit::OK,
    })
}

fn parse_tool_args(a: &Args, name: &str) -> Result<Value> {
    if !TOOL_NAMES.contains(&name) {
        return Err(Error::usage(format!(
            "unknown tool \"{name}\"; known tools: {}",
            TOOL_NAMES.join(", ")
        )));
    }
    let raw = a.json_args.as_deref().unwrap_or("{}");
    let args: Value = serde_json::from_str(raw).map_err(|e| {
        Error::usage(format!(
            "--json: invalid JSON ({e}); give the arguments as a JSON object, e.g. '{{\"path\": \".\"}}'"
        ))
    })?;
    if !args.is_object() {
        return Err(Error::usage(
            "--json: the arguments must be a JSON object, e.g. '{\"path\": \".\"}'",
        ));
    }
    Ok(args)
}

fn cmd_policy_check(a: &Args, name: &str) -> Result<i32> {
    use crate::security::plan::{OpenMode, Redir};
    a.only("policy check", &["json-args", "autonomy"])?;
    let args = parse_tool_args(a, name)?;
    let cfg = a.load_config()?;
    let mut gate = Gate::new(&cfg, &cfg.cli_tools_allow);
    if let Some(level) = &a.autonomy {
        let autonomy = Autonomy::parse(level).ok_or_else(|| {
            Error::usage(format!(
                "--autonomy: \"{level}\" is not allowed; allowed values: {}",
                Autonomy::ALLOWED.join(", ")
            ))
        })?;
        gate = gate.with_autonomy(autonomy);
    }
    let d = gate.decide(name, &args);
    let mut out = json!({"tool": name, "risk": d.risk.as_str(), "decision": d.verdict.as_str(), "reason": d.reason});
    // What would run, exactly: one argv per command, in order.
    if let Some(plan) = &d.plan {
        out["plan"] = plan
            .steps
            .iter()
            .flat_map(|s| &s.commands)
            .map(|c| {
                let redirs: Vec<String> = c
                    .redirs
                    .iter()
                    .map(|r| match r {
                        Redir::Open { fd, path, mode } => {
                            let op = match mode {
                                OpenMode::Read => "<",
                                OpenMode::Truncate => ">",
                                OpenMode::Append => ">>",
                            };
                            format!("{fd}{op}{}", path.display())
                        }
                        Redir::Dup { fd, to } => format!("{fd}>&{to}"),
                        Redir::Close { fd } => format!("{fd}>&-"),
                    })
                    .collect();
                json!({"program": c.program, "argv": c.argv, "redirections": redirs})
            })
            .collect();
    }
    println!("{out}");
    Ok(exit::OK)
}

fn cmd_approvals_list(a: &Args) -> Result<i32> {
    a.only("approvals list", &["json", "all"])?;
    let list = open_memory(a)?.approvals(a.all)?;
    if a.json {
        print_json(&list);
    } else if list.is_empty() {
        eprintln!("no {}approvals", if a.all { "" } else { "pending " });
    } else {
        for p in list {
            println!(
                "{}  {:8}  {:6}  {}  {}  {} {}",
                p.id,
                p.status,
                p.risk,
                p.created_at,
                p.conversation_id,
                p.tool,
                one_line(&p.arguments.to_string(), 80)
            );
        }
    }
    Ok(exit::OK)
}

fn cmd_decide(a: &Args, id: &str, approve: bool) -> Result<i32> {
    let verb = if approve { "approve" } else { "deny" };
    a.only(verb, if approve { &["yes"] } else { &[] })?;
    let memory = open_memory(a)?;
    let Some(p) = memory.approval(id)? else {
        return Err(Error::usage(format!(
            "no approval \"{id}\"; `latchclaw approvals list` shows them"
        )));
    };
    if approve && !a.yes {
        // A person at a terminal, or --yes typed by the operator.
        let approver = TtyApprover;
        let risk = crate::security::Risk::parse(&p.risk).unwrap_or(crate::security::Risk::High);
        let d = crate::security::Decision::ask(
            risk,
            format!(
                "pending approval {id} in conversation {}: {}",
                p.conversation_id, p.reason
            ),
        );
        match approver.ask(&p.tool, &d, &p.arguments) {
            crate::channels::Approval::Approved => {}
            crate::channels::Approval::Unavailable(_) => {
                return Err(Error::usage(
                    "approving needs a terminal to confirm on, or --yes typed by the operator",
                ));
            }
            crate::channels::Approval::Denied(why) => {
                return Err(Error::usage(format!("not approved: {why}")));
            }
        }
    }
    memory.decide_approval(id, approve)?;
    println!(
        "{} {id}: {} {} in {}{}",
        if approve { "approved" } else { "denied" },
        p.tool,
        one_line(&p.arguments.to_string(), 80),
        p.conversation_id,
        if approve {
            format!("; run `latchclaw agent --resume {}`", p.conversation_id)
        } else {
            String::new()
        }
    );
    Ok(exit::OK)
}

fn cmd_policy_show(a: &Args) -> Result<i32> {
    a.only("policy show", &[])?;
    let cfg = a.load_config()?;
    println!("{}", Gate::new(&cfg, &cfg.cli_tools_allow).describe(&cfg));
    Ok(exit::OK)
}

fn cmd_agent(a: &Args) -> Result<i32> {
    a.only(
        "agent",
        &[
            "message",
            "conversation",
            "continue",
            "json",
            "hint",
            "resume",
            "lock",
            "timeout",
            "no-stream",
        ],
    )?;
    if [
        a.resume_latest,
        a.conversation.is_some(),
        a.resume.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count()
        > 1
    {
        return Err(Error::usage(
            "give one of --conversation ID, --continue or --resume ID",
        ));
    }
    let mut cfg = a.load_config()?;
    if !cfg.cli_enabled {
        return Err(Error::usage(
            "the cli channel is disabled (channels.cli.enabled = false)",
        ));
    }
    if a.no_stream {
        for p in cfg.providers.values_mut() {
            p.stream = false;
        }
    }
    let message = match (&a.resume, a.message.as_deref()) {
        // Resuming: the operator's decisions are the new turn.
        (Some(_), None) => Some(
            "The operator has decided on the pending tool calls of this conversation. \
             Continue the task: repeat a call that was approved and it will run."
                .to_string(),
        ),
        (_, m) => crate::channels::one_shot_input(m, cfg.max_input_bytes)?,
    };
    let provider = crate::providers::build(&cfg, &cfg.default_provider)?;
    let approver = TtyApprover;
    let mut rt = Runtime::new(&cfg, &approver)?;
    rt.hint = a.hint.clone();
    let conversation = match a.resume_latest {
        true => Some(
            rt.memory
                .latest_conversation()?
                .ok_or_else(|| Error::usage("--continue: there is no earlier conversation"))?,
        ),
        false => a.conversation.clone().or_else(|| a.resume.clone()),
    };
    let _lock = match &a.lock {
        Some(name) => Some(acquire_lock(&cfg, name)?),
        None => None,
    };
    let command = std::env::args().skip(1).collect::<Vec<_>>().join(" ");
    let run_id = rt.memory.run_started(&command, a.lock.as_deref())?;
    if let Some(secs) = a.timeout {
        rt.deadline = Some(std::time::Instant::now() + std::time::Duration::from_secs(secs));
        watchdog(&cfg, &run_id, secs);
    }
    let mut channel = CliChannel {
        message,
        conversation,
        json: a.json,
    };
    let result = channel.start(&rt, provider.as_ref());
    let (code, reason) = match &result {
        Ok(c) => (*c, "finished".to_string()),
        Err(e) => (e.exit_code(), e.msg.clone()),
    };
    // The run's own outcome matters more than failing to record it.
    let usage = rt.run_usage.borrow().clone();
    let _ = rt.memory.run_finished(
        &run_id,
        code,
        &reason,
        channel.conversation.as_deref(),
        Some(&usage),
    );
    result
}

/// Holds `<state>/locks/NAME.lock` for the life of the process; a second
/// run with the same name is refused at once (exit 8), never queued.
fn acquire_lock(cfg: &Config, name: &str) -> Result<std::fs::File> {
    let dir = cfg.state_dir.join("locks");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::runtime(format!("cannot open {}: {e}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::new(
            crate::error::Kind::Locked,
            format!(
                "another run holds the lock \"{name}\" ({}); not starting",
                path.display()
            ),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::runtime(format!(
            "cannot lock {}: {e}",
            path.display()
        ))),
    }
}

/// The hard stop for `--timeout`: if the run is still going a second after
/// its deadline (stuck in a provider call), kill the running shell command,
/// record the run and exit 6.
fn watchdog(cfg: &Config, run_id: &str, secs: u64) {
    let (path, busy, run_id) = (
        cfg.memory_path.clone(),
        cfg.memory_busy_timeout_ms,
        run_id.to_string(),
    );
    std::thread::spawn(move || {
        std::thread::sleep(
            std::time::Duration::from_secs(secs) + std::time::Duration::from_secs(1),
        );
        crate::tools::shell::kill_current();
        if let Ok(m) = Memory::open(&path, busy) {
            let _ = m.run_finished(&run_id, exit::LIMIT, "timeout (--timeout)", None, None);
        }
        eprintln!("latchclaw: error: the run's --timeout of {secs} s was reached; stopping");
        std::process::exit(exit::LIMIT);
    });
}

fn cmd_prompt_show(a: &Args) -> Result<i32> {
    use crate::config::ToolMode;
    use crate::providers::{ChatRequest, Message, Role, openai};
    a.only("prompt show", &["message", "conversation", "json"])?;
    let cfg = a.load_config()?;
    let approver = TtyApprover;
    let rt = Runtime::new(&cfg, &approver)?;
    let message = a.message.as_deref().unwrap_or("");
    let notes = if message.is_empty() {
        None
    } else {
        rt.memory_notes(message, a.conversation.as_deref())?
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
    if a.json {
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

fn cmd_runs_list(a: &Args) -> Result<i32> {
    a.only("runs list", &["json", "limit"])?;
    let runs = open_memory(a)?.runs(a.limit.unwrap_or(50))?;
    if a.json {
        print_json(&runs);
    } else if runs.is_empty() {
        eprintln!("no runs yet");
    } else {
        println!(
            "{:28} {:24} {:>4}  {:>17}  {:12} {:32} COMMAND",
            "RUN", "STARTED", "EXIT", "TOKENS IN/CACHED", "LOCK", "CONVERSATION"
        );
        for r in runs {
            let tokens = match (r.prompt_tokens, r.cached_tokens) {
                (Some(p), c) => format!("{p}/{}", c.unwrap_or(0)),
                _ => "-".to_string(),
            };
            println!(
                "{:28} {:24} {:>4}  {tokens:>17}  {:12} {:32} {}",
                r.id,
                r.started_at,
                r.exit_code.map_or("-".to_string(), |c| c.to_string()),
                r.lock_name.as_deref().unwrap_or("-"),
                r.conversation_id.as_deref().unwrap_or("-"),
                one_line(&r.command, 50)
            );
        }
    }
    Ok(exit::OK)
}

fn open_memory(a: &Args) -> Result<Memory> {
    let cfg = a.load_config()?;
    Memory::open(&cfg.memory_path, cfg.memory_busy_timeout_ms)
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

fn cmd_memory(a: &Args, sub: &[&str]) -> Result<i32> {
    match sub {
        ["list"] => {
            a.only("memory list", &["json", "limit"])?;
            let list = open_memory(a)?.list(a.limit.unwrap_or(50))?;
            if a.json {
                print_json(&list);
            } else if list.is_empty() {
                eprintln!("no conversations yet");
            } else {
                println!(
                    "{:32} {:>5}  {:24}  FIRST MESSAGE",
                    "CONVERSATION", "TURNS", "LAST ACTIVITY"
                );
                for c in list {
                    println!(
                        "{:32} {:>5}  {:24}  {}",
                        c.conversation_id,
                        c.turns,
                        c.last_activity,
                        one_line(&c.first_message, 60)
                    );
                }
            }
        }
        ["search", query] => {
            a.only("memory search", &["json", "limit"])?;
            let hits = open_memory(a)?.search(query, a.limit.unwrap_or(20))?;
            if a.json {
                print_json(&hits);
            } else if hits.is_empty() {
                eprintln!("no matches for \"{query}\"");
            } else {
                for h in hits {
                    println!(
                        "{}  {}  {:9}  {}",
                        h.conversation_id,
                        h.timestamp,
                        h.role,
                        one_line(&h.snippet, 100)
                    );
                }
            }
        }
        ["search"] | ["search", _, _, ..] => {
            return Err(Error::usage(
                "memory search takes one QUERY (quote it if it has spaces)",
            ));
        }
        ["show", id] => {
            a.only("memory show", &["json"])?;
            let turns = open_memory(a)?.turns(id, None)?;
            if turns.is_empty() {
                return Err(Error::usage(format!(
                    "no conversation \"{id}\"; `latchclaw memory list` shows them"
                )));
            }
            if a.json {
                print_json(&turns);
            } else {
                for t in turns {
                    println!("[{}] {}: {}", t.timestamp, t.role, t.content);
                    if let Some(calls) = t.tool_calls {
                        println!("    tool calls: {calls}");
                    }
                }
            }
        }
        ["clear"] => {
            a.only("memory clear", &["yes"])?;
            if !a.yes {
                return Err(Error::usage(
                    "memory clear deletes every conversation; add --yes to confirm",
                ));
            }
            let n = open_memory(a)?.clear()?;
            println!("deleted {n} turns");
        }
        _ => {
            return Err(Error::usage(
                "usage: latchclaw memory list | search QUERY | show CONVERSATION_ID | clear --yes",
            ));
        }
    }
    Ok(exit::OK)
}

fn cmd_receipt_list(a: &Args) -> Result<i32> {
    a.only("receipt list", &["json"])?;
    let cfg = a.load_config()?;
    let rows = ReceiptLog::new(&cfg.receipts_path).list()?;
    if a.json {
        let v: Vec<Value> = rows
            .into_iter()
            .map(|r| r.unwrap_or_else(|raw| json!({"unparsable": raw})))
            .collect();
        print_json(&v);
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        eprintln!("no receipts in {}", cfg.receipts_path.display());
    }
    for (i, r) in rows.iter().enumerate() {
        match r {
            Ok(v) => println!(
                "{:>5}  {}  {}  {:14} {:9} {:7} {}",
                i + 1,
                v["id"].as_str().unwrap_or("?"),
                v["timestamp"].as_str().unwrap_or("?"),
                v["tool"].as_str().unwrap_or("?"),
                v["status"].as_str().unwrap_or("?"),
                v["risk"].as_str().unwrap_or("?"),
                one_line(v["reason"].as_str().unwrap_or(""), 70)
            ),
            Err(raw) => println!("{:>5}  <unparsable: {}>", i + 1, one_line(raw, 60)),
        }
    }
    Ok(exit::OK)
}

fn cmd_receipt_verify(a: &Args) -> Result<i32> {
    a.only("receipt verify", &["json"])?;
    let cfg = a.load_config()?;
    let report = ReceiptLog::new(&cfg.receipts_path).verify()?;
    match report {
        Verify::Ok {
            count,
            head,
            unfinished,
        } => {
            // A call cut off mid-run is a fact the chain records, not damage.
            if a.json {
                let calls: Vec<Value> = unfinished
                    .iter()
                    .map(|c| {
                        json!({"position": c.position, "id": c.id, "tool": c.tool,
                               "conversation_id": c.conversation_id, "timestamp": c.timestamp,
                               "status": UNFINISHED})
                    })
                    .collect();
                print_json(
                    &json!({"ok": true, "receipts": count, "head": head, "unfinished": calls}),
                );
            } else {
                println!("ok: {count} receipts, head {head}");
                for c in &unfinished {
                    println!(
                        "{UNFINISHED}: receipt {} of {count}, tool {}, id {}, conversation {}, at {}",
                        c.position, c.tool, c.id, c.conversation_id, c.timestamp
                    );
                }
            }
            Ok(exit::OK)
        }
        Verify::Broken {
            position,
            count,
            why,
        } => {
            if a.json {
                print_json(
                    &json!({"ok": false, "receipts": count, "broken_at": position, "reason": why}),
                );
            } else {
                println!("broken: receipt {position} of {count}: {why}");
            }
            Ok(exit::INTEGRITY)
        }
    }
}

const UNFINISHED: &str = "started, no outcome (the process was cut off)";

fn cmd_estop(a: &Args) -> Result<i32> {
    a.only("estop", &["clear"])?;
    let cfg = a.load_config()?;
    let path = cfg.estop_path();
    if a.clear {
        match std::fs::remove_file(&path) {
            Ok(()) => println!("emergency stop cleared ({} removed)", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("emergency stop was not on")
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot remove {}: {e}",
                    path.display()
                )));
            }
        }
        return Ok(exit::OK);
    }
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", cfg.state_dir.display())))?;
    std::fs::write(&path, format!("engaged {}\n", crate::util::now_rfc3339()))
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))?;
    log::warn!(target: "event::estop_triggered", "path={}", path.display());
    println!(
        "emergency stop on: every tool call is refused until `latchclaw estop --clear` ({})",
        path.display()
    );
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Result<Args> {
        parse(s.iter().map(OsString::from))
    }

    #[test]
    fn json_is_a_value_for_tool_run_and_a_switch_elsewhere() {
        let a = args(&["tool", "run", "time", "--json", "{}"]).unwrap();
        assert_eq!(a.json_args.as_deref(), Some("{}"));
        let a = args(&["receipt", "list", "--json"]).unwrap();
        assert!(a.json && a.words == ["receipt", "list"]);
    }

    #[test]
    fn options_a_command_does_not_take_are_rejected() {
        let a = args(&["memory", "list", "--yes"]).unwrap();
        let e = a.only("memory list", &["json", "limit"]).unwrap_err();
        assert!(
            e.msg.contains("--yes") && e.msg.contains("--json, --limit"),
            "{e}"
        );
        assert!(args(&["--limit", "zero"]).is_err());
        assert!(args(&["--bogus"]).is_err());
    }

    #[test]
    fn every_command_has_help() {
        for c in [
            "init",
            "onboard",
            "config validate",
            "config show",
            "provider list",
            "tool list",
            "tool run",
            "agent",
            "provider test",
            "memory list",
            "receipt verify",
            "policy check",
            "policy show",
            "approvals list",
            "approve",
            "runs list",
            "prompt show",
            "estop",
        ] {
            let words: Vec<String> = c.split(' ').map(String::from).collect();
            assert!(help_for(&words).is_some_and(|h| h.contains("Usage")), "{c}");
        }
        assert!(help_for(&["bogus".into()]).is_none());
    }
}
