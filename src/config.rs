//! Loading and validating `config.toml`.
//!
//! The file is parsed into a plain TOML table and walked key by key, so that
//! one run reports every error (wrong type, bad enum value, unknown key) with
//! its key path instead of stopping at the first, as serde would.
//!
//! The types follow the file: `Config` holds the top-level keys and one
//! struct per `[section]`, whose `Default` is that section's defaults (the
//! reader falls back to them, and a test holds config.example.toml to
//! them). A provider keeps the keys every kind takes; the rest are its
//! kind's `ProviderSettings`, and a key of another kind is an error.

use crate::error::{Error, Result};
use crate::types::ToolName;
use crate::util::home_dir;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Autonomy {
    ReadOnly,
    Supervised,
    Full,
}

impl Autonomy {
    pub const ALLOWED: &'static [&'static str] = &["readonly", "supervised", "full"];
    pub fn parse(s: &str) -> Option<Autonomy> {
        match s {
            "readonly" => Some(Autonomy::ReadOnly),
            "supervised" => Some(Autonomy::Supervised),
            "full" => Some(Autonomy::Full),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Autonomy::ReadOnly => "readonly",
            Autonomy::Supervised => "supervised",
            Autonomy::Full => "full",
        }
    }
}

/// Kernel confinement (Landlock) of shell commands: `security::confine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confinement {
    /// No Landlock: shell calls are refused.
    Required,
    /// Confined when the kernel has Landlock, else run as before.
    BestEffort,
    Off,
}

impl Confinement {
    pub const ALLOWED: &'static [&'static str] = &["required", "best_effort", "off"];
    pub fn parse(s: &str) -> Option<Confinement> {
        match s {
            "required" => Some(Confinement::Required),
            "best_effort" => Some(Confinement::BestEffort),
            "off" => Some(Confinement::Off),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
}

/// When notes and turns of other conversations go with a message
/// (`[memory] recall`): a one-shot or piped run gives the same request for
/// the same input unless the operator asks for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recall {
    /// In the REPL and the gateway's chats; never in a one-shot run.
    Repl,
    Always,
    Never,
}

impl Recall {
    pub const ALLOWED: &'static [&'static str] = &["repl", "always", "never"];
    pub fn parse(s: &str) -> Option<Recall> {
        match s {
            "repl" => Some(Recall::Repl),
            "always" => Some(Recall::Always),
            "never" => Some(Recall::Never),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
}

/// Where the REPL's and the gateway's running conversation is divided
/// (`[memory] session`): a new conversation begins at the first message
/// after the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// At `session_hour` local time every day.
    Daily,
    /// At `session_hour` local time every Monday.
    Weekly,
    /// Only by hand (`/new`, `--new-session`).
    None,
}

impl Session {
    pub const ALLOWED: &'static [&'static str] = &["daily", "weekly", "none"];
    pub fn parse(s: &str) -> Option<Session> {
        match s {
            "daily" => Some(Session::Daily),
            "weekly" => Some(Session::Weekly),
            "none" => Some(Session::None),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Mock,
    OpenAiCompatible,
    Reliable,
    Router,
}

impl ProviderKind {
    pub const ALLOWED: &'static [&'static str] =
        &["mock", "openai-compatible", "reliable", "router"];
    const ALL: [ProviderKind; 4] = [
        ProviderKind::Mock,
        ProviderKind::OpenAiCompatible,
        ProviderKind::Reliable,
        ProviderKind::Router,
    ];
    fn parse(s: &str) -> Option<ProviderKind> {
        match s {
            "mock" => Some(ProviderKind::Mock),
            "openai-compatible" => Some(ProviderKind::OpenAiCompatible),
            "reliable" => Some(ProviderKind::Reliable),
            "router" => Some(ProviderKind::Router),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
    /// The keys only a provider of this kind takes (besides
    /// `PROVIDER_KEYS`).
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            ProviderKind::Mock => &["fixture", "record_requests", "stream"],
            ProviderKind::OpenAiCompatible => &[
                "base_url",
                "api_key_env",
                "temperature",
                "max_tokens",
                "headers",
                "tool_mode",
                "stream",
                "retries",
            ],
            ProviderKind::Reliable => &["providers"],
            ProviderKind::Router => &["hints", "routes", "default_route"],
        }
    }
}

/// The keys every provider takes, whatever its kind.
pub const PROVIDER_KEYS: &[&str] = &["kind", "model", "timeout_secs", "max_tools"];

/// How an openai-compatible provider passes tools to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMode {
    /// Native tool calling; structured once the model writes its calls as
    /// text (the server's template did not read them), text when the
    /// server has no tools (README: Small local models).
    Auto,
    Native,
    /// Tools described in the system prompt; calls read from fenced JSON
    /// or `<tool_call>` tags.
    Text,
    /// Tools described in the system prompt; every reply constrained by
    /// `response_format` to one JSON object, a call or an answer.
    Structured,
}

impl ToolMode {
    pub const ALLOWED: &'static [&'static str] = &["auto", "native", "text", "structured"];
    pub fn parse(s: &str) -> Option<ToolMode> {
        match s {
            "auto" => Some(ToolMode::Auto),
            "native" => Some(ToolMode::Native),
            "text" => Some(ToolMode::Text),
            "structured" => Some(ToolMode::Structured),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
}

/// `[providers.models.NAME]`: the keys every kind takes here, the rest in
/// `settings`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderConfig {
    pub name: String,
    pub model: String,
    /// Request timeout.
    pub timeout_secs: u64,
    /// Offer only this many tools per turn, those that best match the
    /// message (`runtime::pick_tools`); none: every enabled tool.
    pub max_tools: Option<usize>,
    pub settings: ProviderSettings,
}

/// A provider's kind with the keys only that kind takes.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderSettings {
    Mock(MockSettings),
    OpenAiCompatible(OpenAiSettings),
    Reliable(ReliableSettings),
    Router(RouterSettings),
}

#[derive(Debug, Clone, PartialEq)]
pub struct MockSettings {
    /// Script file; absent = the built-in script.
    pub fixture: Option<PathBuf>,
    /// Append every request it receives to this JSON Lines file.
    pub record_requests: Option<PathBuf>,
    /// Pass the answer to a streaming caller in pieces (`agent --no-stream`
    /// turns it off for a run).
    pub stream: bool,
}

impl Default for MockSettings {
    fn default() -> MockSettings {
        MockSettings {
            fixture: None,
            record_requests: None,
            stream: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiSettings {
    /// Required: requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// The NAME of the variable holding the key, never the key.
    pub api_key_env: Option<String>,
    pub temperature: Option<f64>,
    pub max_tokens: Option<u64>,
    /// Extra request headers (never credentials: those come from the env).
    pub headers: Vec<(String, String)>,
    pub tool_mode: ToolMode,
    /// Ask for server-sent events (`agent --no-stream` turns it off for a
    /// run).
    pub stream: bool,
    /// Retries after 408/429/5xx and transport errors.
    pub retries: u32,
}

impl OpenAiSettings {
    /// Every key at its default but `base_url`, which has none.
    pub fn new(base_url: impl Into<String>) -> OpenAiSettings {
        OpenAiSettings {
            base_url: base_url.into(),
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            headers: Vec::new(),
            tool_mode: ToolMode::Auto,
            stream: true,
            retries: 2,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReliableSettings {
    /// The providers to try, in order (at least one).
    pub providers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RouterSettings {
    /// `--hint NAME` → provider.
    pub hints: Vec<(String, String)>,
    /// Case-insensitive substring of the message → provider.
    pub routes: Vec<(String, String)>,
    /// The provider when no hint or route applies (required).
    pub default_route: String,
}

impl ProviderSettings {
    pub fn kind(&self) -> ProviderKind {
        match self {
            ProviderSettings::Mock(_) => ProviderKind::Mock,
            ProviderSettings::OpenAiCompatible(_) => ProviderKind::OpenAiCompatible,
            ProviderSettings::Reliable(_) => ProviderKind::Reliable,
            ProviderSettings::Router(_) => ProviderKind::Router,
        }
    }
}

impl ProviderConfig {
    pub const DEFAULT_TIMEOUT_SECS: u64 = 60;

    /// A provider with `timeout_secs` at its default.
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        settings: ProviderSettings,
    ) -> ProviderConfig {
        ProviderConfig {
            name: name.into(),
            model: model.into(),
            timeout_secs: Self::DEFAULT_TIMEOUT_SECS,
            max_tools: None,
            settings,
        }
    }

    pub fn kind(&self) -> ProviderKind {
        self.settings.kind()
    }

    /// The sampling temperature the config sets for this provider (only an
    /// openai-compatible one takes it).
    pub fn temperature(&self) -> Option<f64> {
        match &self.settings {
            ProviderSettings::OpenAiCompatible(o) => o.temperature,
            _ => None,
        }
    }

    /// The NAME of the variable holding the key (only an openai-compatible
    /// provider takes one).
    pub fn api_key_env(&self) -> Option<&str> {
        match &self.settings {
            ProviderSettings::OpenAiCompatible(o) => o.api_key_env.as_deref(),
            _ => None,
        }
    }

    /// Turns streaming on or off for the kinds that stream (`agent
    /// --no-stream`).
    pub fn set_stream(&mut self, on: bool) {
        match &mut self.settings {
            ProviderSettings::Mock(m) => m.stream = on,
            ProviderSettings::OpenAiCompatible(o) => o.stream = on,
            ProviderSettings::Reliable(_) | ProviderSettings::Router(_) => {}
        }
    }
}

/// `[security] dotfiles_allow`'s default: dotfiles that configure a
/// project's tools and hold no credentials.
pub const DEFAULT_DOTFILES_ALLOW: &[&str] = &[
    ".gitignore",
    ".gitattributes",
    ".gitmodules",
    ".gitkeep",
    ".mailmap",
    ".editorconfig",
    ".*ignore",
    ".prettierrc*",
    ".eslintrc*",
    ".stylelintrc*",
    ".babelrc*",
    ".browserslistrc",
    ".clang-format",
    ".clang-tidy",
    ".rustfmt.toml",
    ".clippy.toml",
    ".nvmrc",
    ".node-version",
    ".python-version",
    ".ruby-version",
    ".tool-versions",
    ".flake8",
    ".pylintrc",
    ".markdownlint*",
    ".yamllint*",
    ".pre-commit-config.yaml",
    ".travis.yml",
    ".gitlab-ci.yml",
    ".golangci.yml",
    ".golangci.yaml",
    ".coveragerc",
    ".rubocop.yml",
    ".swiftlint.yml",
    ".shellcheckrc",
    ".jshintrc",
    ".ruff.toml",
    ".isort.cfg",
    ".codecov.yml",
    ".readthedocs.yaml",
    ".keep",
];

/// `[security]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Security {
    pub autonomy: Autonomy,
    pub workspace_only: bool,
    pub forbidden_paths: Vec<PathBuf>,
    pub forbidden_commands: Vec<String>,
    pub audit_log: bool,
    pub shell_allowlist: Vec<String>,
    /// Environment variables passed to shell commands besides the minimal set.
    pub shell_env_passthrough: Vec<String>,
    pub confinement: Confinement,
    /// Secret-named files the tools may reach after all (`security::secret_files`).
    pub secret_files_allow: Vec<String>,
    /// Dotfiles the dotfile rule lets through (name globs).
    pub dotfiles_allow: Vec<String>,
    /// Variables whose values are redacted wherever they appear, besides
    /// every provider's `api_key_env` (`security::redact`).
    pub secret_env: Vec<String>,
}

impl Default for Security {
    fn default() -> Security {
        Security {
            autonomy: Autonomy::Supervised,
            workspace_only: true,
            // Without a HOME there is no `~/.ssh` to protect.
            forbidden_paths: DEFAULT_FORBIDDEN_PATHS
                .iter()
                .filter_map(|p| expand(p).ok().map(PathBuf::from))
                .collect(),
            forbidden_commands: strings(DEFAULT_FORBIDDEN_COMMANDS),
            audit_log: true,
            shell_allowlist: strings(DEFAULT_SHELL_ALLOWLIST),
            shell_env_passthrough: Vec::new(),
            confinement: Confinement::BestEffort,
            secret_files_allow: Vec::new(),
            dotfiles_allow: strings(DEFAULT_DOTFILES_ALLOW),
            secret_env: Vec::new(),
        }
    }
}

/// `[channels]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Channels {
    pub cli: CliChannel,
}

/// `[channels.cli]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CliChannel {
    /// `false` refuses `agent`.
    pub enabled: bool,
    /// The tools offered to the model.
    pub tools_allow: Vec<ToolName>,
}

impl Default for CliChannel {
    fn default() -> CliChannel {
        CliChannel {
            enabled: true,
            // The tools that write files or reach the network are opt-in.
            tools_allow: ToolName::ALL
                .into_iter()
                .filter(|t| t.on_by_default())
                .collect(),
        }
    }
}

/// `[tools]`: the http tool's network policy, web_search's endpoint, and
/// per-tool middleware keys (`[tools.NAME]`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tools {
    pub http: HttpTool,
    /// `None`: no search provider, so `web_search` is not offered.
    pub web_search: Option<WebSearch>,
    /// `[tools.code_run]`: its risk, output cap and the secrets a snippet
    /// may name.
    pub code_run: CodeRunConfig,
    /// `[tools.plan]`: a plan's budgets and the skill bar.
    pub plan: PlanConfig,
    /// The tools whose section sets `enabled`, `timeout_secs` or
    /// `rate_limit`.
    pub middleware: BTreeMap<ToolName, Middleware>,
    /// `[tools."NAME"]` of a name no built-in has: an external tool's (a
    /// plugin's). Which exist is known from the state dir only, so the
    /// command line checks these names when it loads the config.
    pub external: BTreeMap<String, Middleware>,
    /// `[tools] rate_limit`: every tool's calls counted together.
    pub rate_limit: RateLimit,
}

impl Tools {
    /// The middleware keys of `tool` (all unset when it has none).
    pub fn of(&self, tool: ToolName) -> Middleware {
        self.middleware.get(&tool).copied().unwrap_or_default()
    }

    /// The middleware keys of a tool by the name models call it.
    pub fn of_name(&self, name: &str) -> Middleware {
        match ToolName::parse(name) {
            Some(t) => self.of(t),
            None => self.external.get(name).copied().unwrap_or_default(),
        }
    }
}

/// The keys every `[tools.NAME]` section takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Middleware {
    /// `false` removes the tool everywhere; `true` turns it on (see
    /// `effective_tools_allow`).
    pub enabled: Option<bool>,
    /// Replaces `tool_timeout_secs` (and `shell_timeout_secs` /
    /// `http_timeout_secs`) for this tool's calls.
    pub timeout_secs: Option<u64>,
    pub rate_limit: RateLimit,
    /// A read-only tool's results kept this long in a run, for the same
    /// judged call again (none: no cache).
    pub cache_ttl_secs: Option<u64>,
}

/// The tools whose results `cache_ttl_secs` may keep: they change nothing
/// and send nothing, and a second call with the same arguments reads the
/// same thing unless a write came between.
pub const CACHEABLE: [ToolName; 8] = [
    ToolName::Time,
    ToolName::FileList,
    ToolName::FileRead,
    ToolName::Grep,
    ToolName::Git,
    ToolName::MemorySearch,
    ToolName::MemoryRecall,
    ToolName::PdfExtract,
];

/// `rate_limit = { per_minute = N, per_hour = M }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimit {
    /// Calls within any 60 s of one run.
    pub per_minute: Option<u32>,
    /// Calls within any hour, across every run sharing the memory database.
    pub per_hour: Option<u32>,
    /// Calls that may go at once; `per_minute` then refills them.
    pub burst: Option<u32>,
}

impl RateLimit {
    pub fn is_set(&self) -> bool {
        self.per_minute.is_some() || self.per_hour.is_some() || self.burst.is_some()
    }
}

/// Who answers `web_search`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchProvider {
    /// A SearXNG instance's JSON API (`GET /search?q=…&format=json`).
    Searxng,
    /// Brave Search's web search API, keyed by `X-Subscription-Token`.
    Brave,
}

impl SearchProvider {
    pub const ALLOWED: &[&str] = &["searxng", "brave"];
    fn parse(s: &str) -> Option<SearchProvider> {
        match s {
            "searxng" => Some(SearchProvider::Searxng),
            "brave" => Some(SearchProvider::Brave),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            SearchProvider::Searxng => "searxng",
            SearchProvider::Brave => "brave",
        }
    }
}

pub const BRAVE_DEFAULT_URL: &str = "https://api.search.brave.com";

/// `[tools.web_search]` with a `provider`.
#[derive(Debug, Clone, PartialEq)]
pub struct WebSearch {
    pub provider: SearchProvider,
    /// The service's base URL: the SearXNG instance, or Brave's API
    /// (`BRAVE_DEFAULT_URL` unless set).
    pub url: String,
    /// brave: the variable holding the key (the key never enters the config).
    pub api_key_env: Option<String>,
}

/// `[tools.code_run]` beyond the middleware keys.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeRunConfig {
    /// The risk of every call (high unless lowered).
    pub risk: DeclaredRisk,
    /// The most a snippet may write on stdout and on stderr, each.
    pub max_output_bytes: usize,
    /// `[tools.code_run.secrets] NAME = { env = "VAR", hosts = [...] }`:
    /// what `secret(NAME)` stands for, and the hosts its value may go to.
    pub secrets: BTreeMap<String, CodeSecret>,
}

impl Default for CodeRunConfig {
    fn default() -> CodeRunConfig {
        CodeRunConfig {
            risk: DeclaredRisk::High,
            max_output_bytes: 1024 * 1024,
            secrets: BTreeMap::new(),
        }
    }
}

/// `[tools.plan]` beyond the middleware keys: what one tree may spend.
/// A budget hit stops the subtree it was hit in and says which.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlanConfig {
    /// Levels of tasks under a plan call (a plan inside a task counts on).
    pub max_depth: u32,
    /// Tasks in a tree, corrective ones and nested plans' included.
    pub max_tasks: u32,
    /// Tool rounds of one task's sub-conversation.
    pub task_rounds: u32,
    /// Tokens (prompt and completion, as the provider reports them) of one task.
    pub task_tokens: u64,
    /// Tokens of the whole tree, its evaluations included.
    pub tree_tokens: u64,
    /// Seconds from the tree's start.
    pub wall_clock_secs: u64,
    /// The BM25 score a skill's description must reach to be a task's
    /// assistant; below it, the base prompt.
    pub skill_min_score: f64,
}

impl Default for PlanConfig {
    fn default() -> PlanConfig {
        PlanConfig {
            max_depth: 3,
            max_tasks: 20,
            task_rounds: 4,
            task_tokens: 20_000,
            tree_tokens: 100_000,
            wall_clock_secs: 600,
            skill_min_score: 1.0,
        }
    }
}

/// One secret a snippet may use by name, never by value.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeSecret {
    /// The variable in latchclaw's environment that holds the value.
    pub env: String,
    /// The only hosts a request carrying it may go to.
    pub hosts: Vec<String>,
}

/// `[tools.http]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpTool {
    pub allowed_domains: Vec<String>,
    pub allow_private: Vec<String>,
    pub max_redirects: u32,
}

impl Default for HttpTool {
    fn default() -> HttpTool {
        HttpTool {
            allowed_domains: Vec::new(),
            allow_private: Vec::new(),
            max_redirects: 5,
        }
    }
}

/// `[memory]` (`backend` has one allowed value, so it is not kept).
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryConfig {
    /// In a loaded config, absolute; `default()` names a file in the state
    /// directory, where `Config::defaults` puts it.
    pub path: PathBuf,
    pub busy_timeout_ms: u64,
    /// Earlier turns of a resumed conversation sent to the model.
    pub context_turns: u32,
    /// Relevant turns from other conversations sent with a message.
    pub context_hits: u32,
    /// Which runs send them (and the stored notes).
    pub recall: Recall,
    pub context_bytes: usize,
    /// What `memory_store` may file a note under, besides the seed's nine.
    pub categories: Vec<String>,
    /// Where the running conversation divides.
    pub session: Session,
    /// The local hour (0 to 23) a day, a session and a summary's period
    /// begin at.
    pub session_hour: u32,
    /// Write a `conversation-summary` when a conversation ends (one model
    /// call each).
    pub summarize_conversations: bool,
}

impl MemoryConfig {
    /// What `memory_store` accepts: `categories`, then the seed's nine
    /// (`life-goal`, `open-loop`, …) not among them.
    pub fn all_categories(&self) -> Vec<String> {
        crate::types::args::all_categories(&self.categories)
    }
}

impl Default for MemoryConfig {
    fn default() -> MemoryConfig {
        MemoryConfig {
            path: PathBuf::from("memory.sqlite"),
            busy_timeout_ms: 5000,
            context_turns: 20,
            context_hits: 5,
            recall: Recall::Repl,
            context_bytes: 4000,
            categories: strings(&["fact", "preference", "task", "note"]),
            session: Session::None,
            session_hour: 0,
            summarize_conversations: false,
        }
    }
}

/// `[prompt]`: the layers of the system prompt; an absent file is looked
/// for in the state directory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PromptConfig {
    pub base_file: Option<PathBuf>,
    /// `agent --system TEXT`: the base layer for this run (never from a file).
    pub base_text: Option<String>,
    pub persona_file: Option<PathBuf>,
    pub user_file: Option<PathBuf>,
}

/// `[skills]` (`skills.rs`): which skills join the system prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SkillsConfig {
    /// Skill names, in the order their bodies join the prompt.
    pub enabled: Vec<String>,
    /// Also look in `<workspace>/.latchclaw/skills` (off: a repository
    /// could plant prompt text there).
    pub workspace: bool,
}

/// `[receipts]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptsConfig {
    pub enabled: bool,
    /// In a loaded config, absolute; `default()` names a file in the state
    /// directory, where `Config::defaults` puts it.
    pub path: PathBuf,
    /// Where `TIMESTAMP N HASH` is appended after every run that wrote
    /// receipts; outside the state directory.
    pub anchor_file: Option<PathBuf>,
}

impl Default for ReceiptsConfig {
    fn default() -> ReceiptsConfig {
        ReceiptsConfig {
            enabled: true,
            path: PathBuf::from("tool_receipts.log"),
            anchor_file: None,
        }
    }
}

/// `[gateway]` (`latchclaw gateway`): the local HTTP server's bind and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// `ADDR:PORT`; a non-loopback address needs `allow_public_bind`.
    pub bind: std::net::SocketAddr,
    pub allow_public_bind: bool,
    pub workers: u32,
    /// Connections held at once (reading, queued, served, idle); beyond
    /// it the longest-idle one is closed for a newcomer, or 503.
    pub max_connections: u32,
    /// The whole request head must arrive within this (slowloris); an
    /// admitted body within as long again.
    pub header_timeout_ms: u64,
    /// A kept-alive connection with no request is closed after this.
    pub idle_timeout_ms: u64,
    pub max_body_bytes: u64,
    pub rate_limit_per_minute: u32,
    /// Origins answered with CORS headers; none by default.
    pub cors_origins: Vec<String>,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], 7878)),
            allow_public_bind: false,
            workers: 8,
            max_connections: 64,
            header_timeout_ms: 5000,
            idle_timeout_ms: 15_000,
            max_body_bytes: 1 << 20,
            rate_limit_per_minute: 600,
            cors_origins: Vec::new(),
        }
    }
}

/// A risk a config or manifest declares for external tools (the gate's
/// own `security::Risk` sits above `config`; the integration maps one to
/// the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeclaredRisk {
    Low,
    #[default]
    Medium,
    High,
}

impl DeclaredRisk {
    pub const ALLOWED: &'static [&'static str] = &["low", "medium", "high"];
    pub fn parse(s: &str) -> Option<DeclaredRisk> {
        match s {
            "low" => Some(DeclaredRisk::Low),
            "medium" => Some(DeclaredRisk::Medium),
            "high" => Some(DeclaredRisk::High),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            DeclaredRisk::Low => "low",
            DeclaredRisk::Medium => "medium",
            DeclaredRisk::High => "high",
        }
    }
}

/// `[mcp]`: the MCP servers latchclaw may start, by name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpConfig {
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// Longest server name: it is part of every tool name a model sees
/// (`mcp_<server>_<tool>`, at most 64 characters).
pub const MCP_SERVER_NAME_MAX: usize = 24;

/// `[mcp.servers.NAME]`: one MCP server run over stdio, in the sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    pub name: String,
    /// A program name (looked up on `/usr/local/bin:/usr/bin:/bin`) or a path;
    /// empty for a server reached at `url`.
    pub command: String,
    /// A Streamable HTTP server's endpoint (`http://127.0.0.1:8000/mcp`):
    /// spoken to over HTTP instead of started.
    pub url: Option<String>,
    /// The variable whose value is sent as `Authorization: Bearer …` to a
    /// `url` server (a secret: redacted like a provider key).
    pub bearer_token_env: Option<String>,
    pub args: Vec<String>,
    /// Names of variables passed from latchclaw's environment (never values).
    pub env: Vec<String>,
    /// The server's working directory (the workspace when unset).
    pub cwd: Option<PathBuf>,
    /// Hosts the server may reach, through the egress proxy (none: no network).
    pub network: Vec<String>,
    pub timeout_secs: u64,
    /// Only these tools (all when `None`).
    pub tools_allow: Option<Vec<String>>,
    pub tools_deny: Vec<String>,
    pub risk: DeclaredRisk,
    pub read_only_tools: Vec<String>,
    /// Directories outside the workspace the server may read and execute
    /// (its installed runtime: a venv, a `node_modules`).
    pub read_paths: Vec<PathBuf>,
}

pub const MCP_SERVER_KEYS: &[&str] = &[
    "command",
    "url",
    "bearer_token_env",
    "args",
    "env",
    "cwd",
    "network",
    "timeout_secs",
    "tools_allow",
    "tools_deny",
    "risk",
    "read_only_tools",
    "read_paths",
];

impl McpServerConfig {
    /// Whether the server's tool `tool` (its own name) is allowed.
    pub fn tool_allowed(&self, tool: &str) -> bool {
        self.tools_allow
            .as_ref()
            .is_none_or(|a| a.iter().any(|t| t == tool))
            && !self.tools_deny.iter().any(|t| t == tool)
    }
}

/// What a policy rule does to a call it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Effect {
    /// Run without asking, where the gate would ask (never where it refuses).
    Allow,
    /// Ask the operator, where the gate would run it.
    Ask,
    /// Refuse it.
    Deny,
}

impl Effect {
    pub const ALLOWED: &[&str] = &["allow", "ask", "deny"];
    pub fn parse(s: &str) -> Option<Effect> {
        [Effect::Allow, Effect::Ask, Effect::Deny]
            .into_iter()
            .find(|e| e.as_str() == s)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

/// Where a call comes from, as a rule's `origin` names it.
pub const POLICY_ORIGINS: &[&str] = &["agent", "sop", "cli", "task"];

/// `[policy]`: the operator's rules over what the gate parsed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PolicyConfig {
    /// The file the rules came from (`policy = "FILE"`), if not this one.
    pub file: Option<PathBuf>,
    pub rules: Vec<PolicyRule>,
}

/// One `[[policy.rules]]`. Every key set must match (a list: any of its
/// entries); a rule with none of them matches every call.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRule {
    pub name: String,
    /// Built-in tool names.
    pub tools: Vec<String>,
    /// Plugins whose tools it covers.
    pub plugins: Vec<String>,
    /// Programs of a shell (or git tool) plan, by name.
    pub programs: Vec<String>,
    pub subcommands: Vec<String>,
    /// What the options mean (`recursive`): all of them, in any spelling.
    pub flags: Vec<String>,
    /// Options by name (`-f`, `--force`): all of them, in any spelling the
    /// program reads as that option.
    pub options: Vec<String>,
    /// Globs over the paths a call reads or writes (relative ones from the
    /// workspace).
    pub paths: Vec<String>,
    /// Globs over the host a URL names.
    pub hosts: Vec<String>,
    pub origins: Vec<String>,
    pub effect: Effect,
    pub reason: String,
    pub examples: Vec<PolicyExample>,
}

/// A call a rule must (`expect` = its effect) or must not (`pass`) match;
/// `config validate` checks each.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyExample {
    pub tool: String,
    pub args: serde_json::Value,
    /// `None`: "pass", the rule does not match.
    pub expect: Option<Effect>,
}

/// The whole file: the top-level keys here, each `[section]` its own struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this config came from; `None` when no file exists (defaults).
    pub source: Option<PathBuf>,
    pub config_path: PathBuf,
    pub state_dir: PathBuf,
    pub workspace_dir: PathBuf,
    /// `workspace_dir = "."`: the directory latchclaw was started in (then
    /// `workspace_dir` is it), not the config file's.
    pub workspace_here: bool,
    pub default_provider: String,
    pub default_model: String,
    pub max_tool_rounds: u32,
    pub max_response_bytes: u64,
    pub tool_timeout_secs: u64,
    pub shell_timeout_secs: u64,
    pub http_timeout_secs: u64,
    pub tool_output_max_bytes: usize,
    pub file_write_max_bytes: usize,
    /// Largest message (with piped stdin) `agent` accepts.
    pub max_input_bytes: usize,
    pub security: Security,
    /// `[providers.models.NAME]` by name; `mock` is always there.
    pub providers: BTreeMap<String, ProviderConfig>,
    pub channels: Channels,
    pub tools: Tools,
    pub memory: MemoryConfig,
    pub prompt: PromptConfig,
    pub receipts: ReceiptsConfig,
    pub skills: SkillsConfig,
    pub gateway: GatewayConfig,
    /// `[mcp.servers.NAME]`.
    pub mcp: McpConfig,
    /// `[plugins.NAME] network`: the hosts the operator lets plugin NAME
    /// reach (of those its manifest declares), by plugin name.
    pub plugin_network: BTreeMap<String, Vec<String>>,
    /// `[[policy.rules]]`, or the file `policy = "FILE"` names.
    pub policy: PolicyConfig,
    /// Said once on stderr when the config is loaded (`latchclaw: note:`):
    /// what loads but should be written differently, each naming the file
    /// and key.
    pub notes: Vec<String>,
}

/// Every problem found in one pass, each prefixed with its key path.
#[derive(Debug)]
pub struct ConfigErrors {
    pub file: String,
    pub errors: Vec<String>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(
            f,
            "{}: {n} error{}",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.errors {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl From<ConfigErrors> for Error {
    fn from(e: ConfigErrors) -> Error {
        Error::usage(e.to_string())
    }
}

/// `$LATCHCLAW_HOME`, else `~/.latchclaw`.
pub fn state_dir() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LATCHCLAW_HOME").filter(|h| !h.is_empty()) {
        return Ok(absolute(PathBuf::from(h)));
    }
    match home_dir() {
        Some(h) => Ok(h.join(".latchclaw")),
        None => Err(Error::usage(
            "cannot find the state directory: neither LATCHCLAW_HOME nor HOME is set",
        )),
    }
}

/// Makes sure the state directory exists (created 0700 as `init` does)
/// and can be written, before anything else is created: a run that cannot
/// keep its memory and receipts stops here, leaving no workspace or
/// database behind.
pub fn usable_state_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let next = "set LATCHCLAW_HOME to a writable directory";
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Error::runtime(format!(
                "the state directory {} cannot be created: {e}; {next}",
                dir.display()
            ))
        })?;
    crate::sys::fs::writable_dir(dir).map_err(|e| {
        Error::runtime(format!(
            "the state directory {} is not writable: {e}; {next}",
            dir.display()
        ))
    })
}

fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map(|d| d.join(&p)).unwrap_or(p)
    }
}

/// Expands a leading `~` and `$VAR` / `${VAR}` anywhere (`$$` is a literal `$`).
pub fn expand(s: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let rest = if let Some(r) = s.strip_prefix('~') {
        if !(r.is_empty() || r.starts_with('/')) {
            return Err(format!(
                "\"{s}\": only \"~\" and \"~/...\" are expanded, not \"~user\""
            ));
        }
        let home = home_dir().ok_or("\"~\" used but HOME is not set")?;
        out.push_str(&home.to_string_lossy());
        r
    } else {
        s
    };
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let name: String = match chars.peek() {
            Some('$') => {
                chars.next();
                out.push('$');
                continue;
            }
            Some('{') => {
                chars.next();
                let mut n = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(ch) => n.push(ch),
                        None => return Err(format!("\"{s}\": unclosed \"${{\"")),
                    }
                }
                n
            }
            _ => {
                let mut n = String::new();
                while let Some(&ch) = chars.peek() {
                    if ch.is_ascii_alphanumeric() || ch == '_' {
                        n.push(ch);
                        chars.next();
                    } else {
                        break;
                    }
                }
                n
            }
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!(
                "\"{s}\": bad variable name after \"$\" (write $$ for a literal $)"
            ));
        }
        match std::env::var(&name) {
            Ok(v) => out.push_str(&v),
            Err(_) => return Err(format!("\"{s}\": environment variable {name} is not set")),
        }
    }
    Ok(out)
}

/// Byte offset to 1-based line and column.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A table being read: keys are removed as they are read, so whatever is
/// left at the end is unknown.
struct Section {
    t: toml::Table,
    path: String,
    /// The keys read from it: a key left over is unknown, and the nearest
    /// of these is what it may have meant.
    asked: Vec<String>,
}

struct Reader<'a> {
    errors: Vec<String>,
    /// What loads but deserves a word (an old name still accepted).
    notes: Vec<String>,
    base_dir: &'a Path,
}

fn type_name(v: &toml::Value) -> &'static str {
    v.type_str()
}

impl Section {
    fn new(t: toml::Table, path: &str) -> Section {
        Section {
            t,
            path: path.to_string(),
            asked: Vec::new(),
        }
    }
    /// Key `k`'s value, taken out (so what is left at the end is unknown).
    fn take(&mut self, k: &str) -> Option<toml::Value> {
        if !self.asked.iter().any(|a| a == k) {
            self.asked.push(k.to_string());
        }
        self.t.remove(k)
    }
    fn key(&self, k: &str) -> String {
        if self.path.is_empty() {
            k.to_string()
        } else {
            format!("{}.{k}", self.path)
        }
    }
}

impl Reader<'_> {
    fn err(&mut self, msg: String) {
        self.errors.push(msg);
    }

    fn string(&mut self, s: &mut Section, k: &str) -> Option<String> {
        match s.take(k)? {
            toml::Value::String(v) => Some(v),
            other => {
                self.err(format!(
                    "{}: expected a string, found {}",
                    s.key(k),
                    type_name(&other)
                ));
                None
            }
        }
    }

    fn boolean(&mut self, s: &mut Section, k: &str, default: bool) -> bool {
        match s.take(k) {
            None => default,
            Some(toml::Value::Boolean(b)) => b,
            Some(other) => {
                self.err(format!(
                    "{}: expected true or false, found {}",
                    s.key(k),
                    type_name(&other)
                ));
                default
            }
        }
    }

    fn int(&mut self, s: &mut Section, k: &str, default: u64, min: u64, max: u64) -> u64 {
        match s.take(k) {
            None => default,
            Some(toml::Value::Integer(i)) if i >= min as i64 && (i as u64) <= max => i as u64,
            Some(toml::Value::Integer(i)) => {
                self.err(format!(
                    "{}: {i} is out of range; allowed: {min} to {max}",
                    s.key(k)
                ));
                default
            }
            Some(other) => {
                self.err(format!(
                    "{}: expected an integer, found {}",
                    s.key(k),
                    type_name(&other)
                ));
                default
            }
        }
    }

    /// An integer that may be absent (no default stands in for it).
    fn opt_int(&mut self, s: &mut Section, k: &str, min: u64, max: u64) -> Option<u64> {
        match s.t.get(k) {
            None => None,
            Some(toml::Value::Integer(_)) => Some(self.int(s, k, min, min, max)),
            Some(_) => {
                self.int(s, k, min, min, max);
                None
            }
        }
    }

    fn float(&mut self, s: &mut Section, k: &str) -> Option<f64> {
        match s.take(k)? {
            toml::Value::Float(f) => Some(f),
            toml::Value::Integer(i) => Some(i as f64),
            other => {
                self.err(format!(
                    "{}: expected a number, found {}",
                    s.key(k),
                    type_name(&other)
                ));
                None
            }
        }
    }

    fn list(&mut self, s: &mut Section, k: &str) -> Option<Vec<String>> {
        let v = s.take(k)?;
        let toml::Value::Array(items) = v else {
            self.err(format!(
                "{}: expected a list of strings, found {}",
                s.key(k),
                type_name(&v)
            ));
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            match item {
                toml::Value::String(v) => out.push(v),
                other => self.err(format!(
                    "{}[{i}]: expected a string, found {}",
                    s.key(k),
                    type_name(&other)
                )),
            }
        }
        Some(out)
    }

    fn enum_str<T>(
        &mut self,
        s: &mut Section,
        k: &str,
        parse: fn(&str) -> Option<T>,
        allowed: &[&str],
    ) -> Option<T> {
        let v = self.string(s, k)?;
        let parsed = parse(&v);
        if parsed.is_none() {
            self.err(format!(
                "{}: \"{v}\" is not allowed; allowed values: {}",
                s.key(k),
                allowed.join(", ")
            ));
        }
        parsed
    }

    /// A table of string values, in key order.
    fn string_map(&mut self, s: &mut Section, k: &str) -> Vec<(String, String)> {
        let Some(t) = self.table(s, k) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, v) in t.t {
            match v {
                toml::Value::String(v) => out.push((key, v)),
                other => self.err(format!(
                    "{}.{key}: expected a string, found {}",
                    t.path,
                    type_name(&other)
                )),
            }
        }
        out
    }

    fn path_value(&mut self, key: &str, raw: &str) -> Option<PathBuf> {
        if raw.is_empty() {
            self.err(format!("{key}: path is empty"));
            return None;
        }
        match expand(raw) {
            Ok(p) => {
                let p = PathBuf::from(p);
                Some(if p.is_absolute() {
                    p
                } else {
                    self.base_dir.join(p)
                })
            }
            Err(e) => {
                self.err(format!("{key}: {e}"));
                None
            }
        }
    }

    fn path(&mut self, s: &mut Section, k: &str) -> Option<PathBuf> {
        let raw = self.string(s, k)?;
        self.path_value(&s.key(k), &raw)
    }

    fn table(&mut self, s: &mut Section, k: &str) -> Option<Section> {
        let key = s.key(k);
        match s.take(k)? {
            toml::Value::Table(t) => Some(Section::new(t, &key)),
            other => {
                self.err(format!(
                    "{key}: expected a table, found {}",
                    type_name(&other)
                ));
                None
            }
        }
    }

    /// A table that may be absent (then empty, its keys all defaults).
    fn section(&mut self, s: &mut Section, k: &str) -> Section {
        let key = s.key(k);
        self.table(s, k)
            .unwrap_or_else(|| Section::new(toml::Table::new(), &key))
    }

    fn finish(&mut self, s: Section) {
        for k in s.t.keys() {
            let hint = unknown_key_hint(k, s.asked.iter().map(String::as_str));
            self.err(format!("{}: unknown key{hint}", s.key(k)));
        }
    }
}

/// What follows "unknown key" for `k`: a key itself is pointed to
/// `api_key_env` (it never goes in a file); else the nearest key the
/// section takes, if one is near.
fn unknown_key_hint<'a>(k: &str, known: impl IntoIterator<Item = &'a str> + Clone) -> String {
    let k_ = k.to_ascii_lowercase().replace('-', "_");
    let takes_env = known.clone().into_iter().any(|n| n == "api_key_env");
    if takes_env
        && matches!(
            k_.as_str(),
            "api_key" | "apikey" | "key" | "token" | "api_token"
        )
    {
        return " (did you mean api_key_env? the key itself never goes in the config: \
                put it in an environment variable and name that variable in api_key_env)"
            .into();
    }
    if matches!(k_.as_str(), "api_key" | "apikey") {
        return " (a key never goes in the config: put it in an environment variable and \
                name that variable in the provider's api_key_env, providers.models.NAME.api_key_env)"
            .into();
    }
    match crate::util::suggest::nearest(k, known) {
        Some(near) => format!(" (did you mean {near}?)"),
        None => String::new(),
    }
}

/// ` (did you mean "NAME"?)` for a mistyped tool name, or nothing.
fn tool_hint(name: &str) -> String {
    crate::util::suggest::nearest(name, ToolName::ALL.iter().map(|t| t.as_str()))
        .map(|t| format!(" (did you mean \"{t}\"?)"))
        .unwrap_or_default()
}

/// Written as in the file: `~` is expanded when the defaults are made.
pub const DEFAULT_WORKSPACE_DIR: &str = "~/latchclaw-workspace";

#[rustfmt::skip]
pub const DEFAULT_FORBIDDEN_PATHS: &[&str] = &[
    "/etc", "/sys", "/boot", "/proc", "/dev", "/root", "~/.ssh",
];

#[rustfmt::skip]
pub const DEFAULT_FORBIDDEN_COMMANDS: &[&str] = &[
    "rm", "shutdown", "reboot", "halt", "poweroff", "mkfs", "dd", "sudo", "su", "doas",
];

#[rustfmt::skip]
pub const DEFAULT_SHELL_ALLOWLIST: &[&str] = &[
    "ls", "cat", "head", "tail", "wc", "grep", "rg", "find", "echo", "printf", "pwd", "date",
    "git", "sed", "sort", "uniq", "cut", "tr", "diff", "stat", "file", "du", "df", "which",
    "basename", "dirname", "true", "expr", "tee", "mkdir", "touch", "cp", "mv",
];

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Config {
    /// Every key at its default: what an empty or absent file gives. The
    /// top-level defaults live here, each section's in its `Default`.
    pub fn defaults(config_path: PathBuf, state_dir: PathBuf) -> Config {
        let workspace_dir = expand(DEFAULT_WORKSPACE_DIR)
            .map(PathBuf::from)
            .unwrap_or_else(|_| state_dir.with_file_name("latchclaw-workspace"));
        let default_model = "mock".to_string();
        let memory = MemoryConfig::default();
        let receipts = ReceiptsConfig::default();
        Config {
            source: None,
            config_path,
            workspace_dir,
            workspace_here: false,
            default_provider: BUILTIN_MOCK.into(),
            providers: BTreeMap::from([(BUILTIN_MOCK.into(), builtin_mock(&default_model))]),
            default_model,
            max_tool_rounds: 5,
            max_response_bytes: 1 << 20,
            tool_timeout_secs: 30,
            shell_timeout_secs: 15,
            http_timeout_secs: 20,
            tool_output_max_bytes: 64 * 1024,
            file_write_max_bytes: 1 << 20,
            max_input_bytes: 1 << 20,
            security: Security::default(),
            channels: Channels::default(),
            tools: Tools::default(),
            memory: MemoryConfig {
                path: state_dir.join(&memory.path),
                ..memory
            },
            prompt: PromptConfig::default(),
            receipts: ReceiptsConfig {
                path: state_dir.join(&receipts.path),
                ..receipts
            },
            skills: SkillsConfig::default(),
            gateway: GatewayConfig::default(),
            mcp: McpConfig::default(),
            plugin_network: BTreeMap::new(),
            policy: PolicyConfig::default(),
            state_dir,
            notes: Vec::new(),
        }
    }

    /// Loads the config: `explicit` (from `--config`) must exist; the default
    /// path may be absent, in which case every key takes its default.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let state_dir = state_dir()?;
        let (path, must_exist) = match explicit {
            Some(p) => (absolute(p.to_path_buf()), true),
            None => (state_dir.join("config.toml"), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            // A state dir under a regular file holds no config either; the
            // command that needs the directory says what to do about it.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) && !must_exist =>
            {
                None
            }
            Err(e) => {
                return Err(Error::usage(format!(
                    "cannot read config file {}: {e}",
                    path.display()
                )));
            }
        };
        let cfg = Config::from_text(text.as_deref().unwrap_or(""), &path, state_dir)?;
        Ok(Config {
            source: text.map(|_| path),
            ..cfg
        })
    }

    /// Parses and validates config text. `path` names the file in errors and
    /// anchors relative paths.
    pub fn from_text(
        text: &str,
        path: &Path,
        state_dir: PathBuf,
    ) -> std::result::Result<Config, ConfigErrors> {
        let file = path.display().to_string();
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let (line, col) = line_col(text, e.span().map_or(0, |s| s.start));
            ConfigErrors {
                file: file.clone(),
                errors: vec![format!(
                    "malformed TOML at line {line}, column {col}: {}",
                    e.message().trim()
                )],
            }
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let mut r = Reader {
            errors: Vec::new(),
            notes: Vec::new(),
            base_dir: &base_dir,
        };
        let defaults = Config::defaults(path.to_path_buf(), state_dir);
        let cfg = read_config(&mut r, Section::new(table, ""), defaults);
        if r.errors.is_empty() {
            Ok(Config {
                notes: r.notes.iter().map(|n| format!("{file}: {n}")).collect(),
                ..cfg
            })
        } else {
            Err(ConfigErrors {
                file,
                errors: r.errors,
            })
        }
    }

    pub fn estop_path(&self) -> PathBuf {
        self.state_dir.join("ESTOP")
    }

    /// The key receipts are HMAC'd with (README: keyed receipts).
    pub fn receipt_key_path(&self) -> PathBuf {
        self.state_dir.join(RECEIPT_KEY_FILE)
    }

    /// The runtime's own files: never reachable through a tool.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut v = vec![
            self.state_dir.clone(),
            self.config_path.clone(),
            self.receipts.path.clone(),
            self.estop_path(),
            // Inside the state directory, and named all the same: a tool
            // that could read it could forge receipts.
            self.receipt_key_path(),
        ];
        v.extend(self.receipts.anchor_file.clone());
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.memory.path.clone().into_os_string();
            p.push(suffix);
            v.push(PathBuf::from(p));
        }
        v
    }

    /// The provider a name given at run time (`--provider`, `provider
    /// test`) means: itself, or `mock` for the built-in mock's old name
    /// (`local`), with the note to print.
    pub fn provider_name<'n>(&self, name: &'n str) -> (&'n str, Option<String>) {
        if name == OLD_MOCK_NAME && old_name_means_mock(&self.providers) {
            (BUILTIN_MOCK, Some(old_mock_text()))
        } else {
            (name, None)
        }
    }

    pub fn provider(&self, name: &str) -> Result<&ProviderConfig> {
        self.providers.get(name).ok_or_else(|| {
            let near =
                crate::util::suggest::nearest(name, self.providers.keys().map(String::as_str))
                    .map(|p| format!(" did you mean \"{p}\"?"))
                    .unwrap_or_default();
            Error::usage(format!(
                "unknown provider \"{name}\";{near} configured providers: {}",
                self.providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

/// Reads the file over `d` (the defaults): every key it sets replaces the
/// default, every problem is an error with its key path.
fn read_config(r: &mut Reader, mut top: Section, d: Config) -> Config {
    let workspace_here = top.t.get("workspace_dir").and_then(|v| v.as_str()) == Some(".");
    let workspace_dir = if workspace_here {
        top.t.remove("workspace_dir");
        match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                r.err(format!(
                    "workspace_dir: \".\" is the current directory, which cannot be read: {e}"
                ));
                d.workspace_dir
            }
        }
    } else {
        r.path(&mut top, "workspace_dir").unwrap_or(d.workspace_dir)
    };
    if workspace_dir.starts_with(&d.state_dir) {
        r.err(format!(
            "workspace_dir: {} is inside the state directory {}, which tools can never reach",
            workspace_dir.display(),
            d.state_dir.display()
        ));
    }
    let mut default_provider = r
        .string(&mut top, "default_provider")
        .unwrap_or(d.default_provider);
    let default_model = r
        .string(&mut top, "default_model")
        .unwrap_or(d.default_model);
    let max_tool_rounds = r.int(
        &mut top,
        "max_tool_rounds",
        d.max_tool_rounds.into(),
        1,
        100,
    ) as u32;
    let max_response_bytes = r.int(
        &mut top,
        "max_response_bytes",
        d.max_response_bytes,
        1024,
        1 << 30,
    );
    let tool_timeout_secs = r.int(&mut top, "tool_timeout_secs", d.tool_timeout_secs, 1, 3600);
    let shell_timeout_secs = r.int(
        &mut top,
        "shell_timeout_secs",
        d.shell_timeout_secs,
        1,
        3600,
    );
    let http_timeout_secs = r.int(&mut top, "http_timeout_secs", d.http_timeout_secs, 1, 3600);
    let tool_output_max_bytes = r.int(
        &mut top,
        "tool_output_max_bytes",
        d.tool_output_max_bytes as u64,
        256,
        16 << 20,
    ) as usize;
    let file_write_max_bytes = r.int(
        &mut top,
        "file_write_max_bytes",
        d.file_write_max_bytes as u64,
        1,
        1 << 30,
    ) as usize;
    let max_input_bytes = r.int(
        &mut top,
        "max_input_bytes",
        d.max_input_bytes as u64,
        16,
        1 << 30,
    ) as usize;

    let security = read_security(r, &mut top, d.security);
    let providers = read_providers(r, &mut top, &default_model);
    if default_provider == OLD_MOCK_NAME && old_name_means_mock(&providers) {
        r.notes.push(old_mock_note("default_provider"));
        default_provider = BUILTIN_MOCK.into();
    }
    if !providers.contains_key(&default_provider) {
        r.err(format!(
            "default_provider: \"{default_provider}\" is not defined; defined providers: {}",
            providers.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    let channels = read_channels(r, &mut top, d.channels);
    let memory = read_memory(r, &mut top, d.memory);
    let receipts = read_receipts(r, &mut top, d.receipts, &d.state_dir);
    let prompt = read_prompt(r, &mut top, d.prompt);
    let tools = read_tools(r, &mut top, d.tools);
    let skills = read_skills(r, &mut top, d.skills);
    let gateway = read_gateway(r, &mut top, d.gateway);
    let mcp = read_mcp(r, &mut top, &providers, d.mcp);
    let plugin_network = read_plugins(r, &mut top, d.plugin_network);
    let policy = read_policy(r, &mut top, d.policy);
    r.finish(top);
    let mut channels = channels;
    channels.cli.tools_allow = effective_tools_allow(channels.cli.tools_allow, &tools);

    Config {
        source: None,
        config_path: d.config_path,
        state_dir: d.state_dir,
        workspace_dir,
        workspace_here,
        default_provider,
        default_model,
        max_tool_rounds,
        max_response_bytes,
        tool_timeout_secs,
        shell_timeout_secs,
        http_timeout_secs,
        tool_output_max_bytes,
        file_write_max_bytes,
        max_input_bytes,
        security,
        providers,
        channels,
        tools,
        memory,
        prompt,
        receipts,
        skills,
        gateway,
        mcp,
        plugin_network,
        policy,
        notes: Vec::new(),
    }
}

/// `[mcp]` and each `[mcp.servers.NAME]`.
fn read_mcp(
    r: &mut Reader,
    top: &mut Section,
    providers: &BTreeMap<String, ProviderConfig>,
    d: McpConfig,
) -> McpConfig {
    let Some(mut mcp) = r.table(top, "mcp") else {
        return d;
    };
    let mut out = McpConfig::default();
    if let Some(mut servers) = r.table(&mut mcp, "servers") {
        let names: Vec<String> = servers.t.keys().cloned().collect();
        for name in names {
            if let Err(e) = check_mcp_server_name(&name) {
                servers.t.remove(&name);
                r.err(format!("{}: {e}", servers.key(&name)));
                continue;
            }
            let mut sec = r.section(&mut servers, &name);
            let server = read_mcp_server(r, &mut sec, &name, providers);
            r.finish(sec);
            if let Some(s) = server {
                out.servers.insert(name, s);
            }
        }
        r.finish(servers);
    }
    r.finish(mcp);
    out
}

/// `url` of an MCP server: http or https, a host, no user part. Which
/// hosts it may name is the client's to check (loopback, or `network`).
fn read_mcp_url(r: &mut Reader, sec: &mut Section) -> Option<String> {
    let url = r.string(sec, "url")?;
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let authority = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
    match authority {
        Some(a) if !a.is_empty() && !a.contains('@') && !url.chars().any(char::is_whitespace) => {
            Some(url)
        }
        _ => {
            r.err(format!(
                "{}: \"{}\" is not an http:// or https:// URL with a host (and no user part)",
                sec.key("url"),
                crate::util::printable(&url)
            ));
            None
        }
    }
}

/// Why an MCP server's `url` cannot be reached as written (the client
/// checks it again, with DNS): plain http beyond loopback, or a host its
/// `network` does not name.
fn unreachable_url(url: &str, network: &[String]) -> Option<String> {
    let https = url.starts_with("https://");
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = split_port(authority).0.to_ascii_lowercase();
    let host = host.trim_matches(['[', ']']);
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return None;
    }
    if !https {
        return Some(format!(
            "plain http only to a loopback address (127.0.0.1, ::1, localhost); use https for \
             {}",
            crate::util::printable(host)
        ));
    }
    let named = network.iter().any(|n| {
        let n = split_port(n).0.to_ascii_lowercase();
        let n = n.trim_matches(['[', ']']);
        match n.strip_prefix("*.") {
            Some(domain) => host
                .strip_suffix(domain)
                .is_some_and(|r| r.ends_with('.') && r.len() > 1),
            None => n == host,
        }
    });
    (!named).then(|| {
        format!(
            "{} is not in this server's network; a url's host other than loopback must be",
            crate::util::printable(host)
        )
    })
}

/// `host[:port]`, `[v6][:port]` or a bare IPv6 address: the host and the
/// port as written.
fn split_port(a: &str) -> (&str, Option<&str>) {
    if let Some(rest) = a.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => (a, None),
        };
    }
    match a.split_once(':') {
        Some((h, p)) if !p.contains(':') => (h, Some(p)),
        _ => (a, None),
    }
}

/// `network = [...]` of `sec`: hosts, `host:port` or `*.domain`.
fn hosts(r: &mut Reader, sec: &mut Section) -> Vec<String> {
    let network = r.list(sec, "network").unwrap_or_default();
    for (i, h) in network.iter().enumerate() {
        let port_ok = split_port(h)
            .1
            .is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0));
        let bad = h.is_empty()
            || !port_ok
            || !h.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '*')
            });
        if bad {
            r.err(format!(
                "{}[{i}]: \"{}\" is not a host name (a host or host:port with a port from 1 to \
                 65535, no scheme or path)",
                sec.key("network"),
                crate::util::printable(h)
            ));
        }
    }
    network
}

/// `[plugins.NAME]`: `network`, the hosts plugin NAME may reach (its
/// manifest declares what it wants; it gets what both name).
fn read_plugins(
    r: &mut Reader,
    top: &mut Section,
    d: BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    let Some(mut plugins) = r.table(top, "plugins") else {
        return d;
    };
    let mut out = BTreeMap::new();
    let names: Vec<String> = plugins.t.keys().cloned().collect();
    for name in names {
        let mut sec = r.section(&mut plugins, &name);
        let network = hosts(r, &mut sec);
        r.finish(sec);
        out.insert(name, network);
    }
    r.finish(plugins);
    out
}

/// `[[policy.rules]]`, or `policy = "FILE"`: a TOML file of `[[rules]]`
/// (relative to the config file).
fn read_policy(r: &mut Reader, top: &mut Section, d: PolicyConfig) -> PolicyConfig {
    let Some(v) = top.take("policy") else {
        return d;
    };
    match v {
        toml::Value::String(name) => {
            let Some(path) = r.path_value("policy", &name) else {
                return d;
            };
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    r.err(format!("policy: cannot read {}: {e}", path.display()));
                    return d;
                }
            };
            let table = match toml::from_str::<toml::Table>(&text) {
                Ok(t) => t,
                Err(e) => {
                    r.err(format!(
                        "policy: {}: {}",
                        path.display(),
                        e.message().trim_end()
                    ));
                    return d;
                }
            };
            let mut sec = Section::new(table, &path.display().to_string());
            let rules = read_rules(r, &mut sec);
            r.finish(sec);
            PolicyConfig {
                file: Some(path),
                rules,
            }
        }
        toml::Value::Table(t) => {
            let mut sec = Section::new(t, "policy");
            let rules = read_rules(r, &mut sec);
            r.finish(sec);
            PolicyConfig { file: None, rules }
        }
        other => {
            r.err(format!(
                "policy: expected a table of [[policy.rules]] or the name of a policy file, \
                 found {}",
                type_name(&other)
            ));
            d
        }
    }
}

fn read_rules(r: &mut Reader, sec: &mut Section) -> Vec<PolicyRule> {
    let key = sec.key("rules");
    let Some(v) = sec.take("rules") else {
        return Vec::new();
    };
    let toml::Value::Array(items) = v else {
        r.err(format!(
            "{key}: expected [[rules]] tables, found {}",
            type_name(&v)
        ));
        return Vec::new();
    };
    let mut out: Vec<PolicyRule> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        let toml::Value::Table(t) = item else {
            r.err(format!(
                "{at}: expected a table, found {}",
                type_name(&item)
            ));
            continue;
        };
        let mut s = Section::new(t, &at);
        if let Some(rule) = read_rule(r, &mut s) {
            if out.iter().any(|o| o.name == rule.name) {
                r.err(format!(
                    "{at}.name: \"{}\" names an earlier rule too; names must be unique",
                    rule.name
                ));
            }
            out.push(rule);
        }
        r.finish(s);
    }
    out
}

/// A key that takes one string or a list of them.
fn one_or_list(r: &mut Reader, s: &mut Section, k: &str) -> Vec<String> {
    match s.t.get(k) {
        None => Vec::new(),
        Some(toml::Value::String(_)) => r.string(s, k).into_iter().collect(),
        Some(_) => r.list(s, k).unwrap_or_default(),
    }
}

fn read_rule(r: &mut Reader, s: &mut Section) -> Option<PolicyRule> {
    let name = r.string(s, "name");
    if name.is_none() {
        r.err(format!(
            "{}: is required (a name for the rule)",
            s.key("name")
        ));
    }
    let tools = one_or_list(r, s, "tool");
    for t in &tools {
        if ToolName::parse(t).is_none() {
            r.err(format!(
                "{}: \"{t}\" is not a built-in tool ({}); a plugin's tools are matched \
                 with `plugin = \"NAME\"`",
                s.key("tool"),
                ToolName::list()
            ));
        }
    }
    let plugins = one_or_list(r, s, "plugin");
    let programs = one_or_list(r, s, "program");
    let subcommands = one_or_list(r, s, "subcommand");
    let flags = one_or_list(r, s, "flags");
    let options = one_or_list(r, s, "options");
    for o in &options {
        if !o.starts_with('-') || o == "-" || o == "--" {
            r.err(format!(
                "{}: \"{o}\" is not an option; write it as the program takes it (-f, --force)",
                s.key("options")
            ));
        }
    }
    if (!flags.is_empty() || !options.is_empty() || !subcommands.is_empty()) && programs.is_empty()
    {
        r.err(format!(
            "{}: flags, options and subcommand are read by a program's option table: \
             name the program too (program = \"cp\")",
            s.key("program")
        ));
    }
    let paths = one_or_list(r, s, "paths");
    let hosts = one_or_list(r, s, "hosts");
    let origins = one_or_list(r, s, "origin");
    for o in &origins {
        if !POLICY_ORIGINS.contains(&o.as_str()) {
            r.err(format!(
                "{}: \"{o}\" is not allowed; allowed values: {}",
                s.key("origin"),
                POLICY_ORIGINS.join(", ")
            ));
        }
    }
    let effect = r.enum_str(s, "effect", Effect::parse, Effect::ALLOWED);
    if effect.is_none() && !r.errors.iter().any(|e| e.starts_with(&s.key("effect"))) {
        r.err(format!(
            "{}: is required; allowed values: {}",
            s.key("effect"),
            Effect::ALLOWED.join(", ")
        ));
    }
    let reason = r.string(s, "reason").unwrap_or_default();
    if reason.trim().is_empty() {
        r.err(format!(
            "{}: is required: the words the model and the operator read when the rule decides",
            s.key("reason")
        ));
    }
    let examples = read_examples(r, s, effect);
    Some(PolicyRule {
        name: name?,
        tools,
        plugins,
        programs,
        subcommands,
        flags,
        options,
        paths,
        hosts,
        origins,
        effect: effect?,
        reason,
        examples,
    })
}

fn read_examples(r: &mut Reader, s: &mut Section, effect: Option<Effect>) -> Vec<PolicyExample> {
    let key = s.key("examples");
    let Some(v) = s.take("examples") else {
        return Vec::new();
    };
    let toml::Value::Array(items) = v else {
        r.err(format!(
            "{key}: expected a list of {{ command = \"…\", expect = \"…\" }}, found {}",
            type_name(&v)
        ));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("{key}[{i}]");
        let toml::Value::Table(t) = item else {
            r.err(format!(
                "{at}: expected a table, found {}",
                type_name(&item)
            ));
            continue;
        };
        let mut e = Section::new(t, &at);
        let command = r.string(&mut e, "command");
        let call = r.table(&mut e, "call");
        let (tool, args) = match (command, call) {
            (Some(c), None) => ("shell".to_string(), serde_json::json!({ "command": c })),
            (None, Some(mut call)) => {
                let tool = r.string(&mut call, "tool").unwrap_or_default();
                if ToolName::parse(&tool).is_none() {
                    r.err(format!(
                        "{}: \"{tool}\" is not a built-in tool ({})",
                        call.key("tool"),
                        ToolName::list()
                    ));
                }
                let args = match call.take("args") {
                    None => serde_json::json!({}),
                    Some(toml::Value::Table(a)) => {
                        serde_json::to_value(a).unwrap_or(serde_json::Value::Null)
                    }
                    Some(other) => {
                        r.err(format!(
                            "{}: expected a table of arguments, found {}",
                            call.key("args"),
                            type_name(&other)
                        ));
                        serde_json::Value::Null
                    }
                };
                r.finish(call);
                (tool, args)
            }
            _ => {
                r.err(format!(
                    "{at}: give exactly one of `command` (a shell command) or \
                     `call = {{ tool = \"…\", args = {{…}} }}`"
                ));
                (String::new(), serde_json::Value::Null)
            }
        };
        let allowed = ["allow", "ask", "deny", "pass"];
        let expect = r.string(&mut e, "expect");
        let expect = match expect.as_deref() {
            Some("pass") => Some(None),
            Some(x) => match Effect::parse(x) {
                Some(got) if Some(got) != effect && effect.is_some() => {
                    r.err(format!(
                        "{}: \"{x}\" is not this rule's effect; an example expects the rule's \
                         effect (it matches) or \"pass\" (it does not)",
                        e.key("expect")
                    ));
                    None
                }
                Some(got) => Some(Some(got)),
                None => {
                    r.err(format!(
                        "{}: \"{x}\" is not allowed; allowed values: {}",
                        e.key("expect"),
                        allowed.join(", ")
                    ));
                    None
                }
            },
            None => {
                r.err(format!(
                    "{}: is required; allowed values: {}",
                    e.key("expect"),
                    allowed.join(", ")
                ));
                None
            }
        };
        r.finish(e);
        if let Some(expect) = expect {
            out.push(PolicyExample { tool, args, expect });
        }
    }
    out
}

/// A server name: it becomes part of the names a model sees.
pub fn check_mcp_server_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty()
        || name.chars().count() > MCP_SERVER_NAME_MAX
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "\"{}\" is not a server name: 1 to {MCP_SERVER_NAME_MAX} of a-z, A-Z, 0-9, _ and -",
            crate::util::printable(name)
        ));
    }
    Ok(())
}

fn read_mcp_server(
    r: &mut Reader,
    sec: &mut Section,
    name: &str,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Option<McpServerConfig> {
    let has_command = sec.t.contains_key("command");
    let has_url = sec.t.contains_key("url");
    let url = read_mcp_url(r, sec);
    let command = match r.string(sec, "command") {
        _ if url.is_some() && has_command => {
            r.err(format!(
                "{}: a server has a command (started over stdio) or a url (Streamable HTTP), \
                 not both",
                sec.key("url")
            ));
            None
        }
        None if url.is_some() => Some(String::new()),
        Some(c) if c.trim().is_empty() => {
            r.err(format!("{}: empty", sec.key("command")));
            None
        }
        Some(c) if c.contains('/') => r
            .path_value(&sec.key("command"), &c)
            .map(|p| p.display().to_string()),
        Some(c) => Some(c),
        None => {
            if !has_command && !has_url {
                r.err(format!(
                    "{}: missing; give the program that starts the server (e.g. \
                     \"/opt/venv/bin/mcp-server-time\") or the url of a Streamable HTTP server",
                    sec.key("command")
                ));
            }
            None
        }
    };
    if url.is_some() {
        for k in ["args", "env", "cwd", "read_paths"] {
            if sec.t.contains_key(k) {
                r.err(format!(
                    "{}: only for a server started by command (this one is reached at its url)",
                    sec.key(k)
                ));
            }
        }
    }
    let bearer_token_env = r.string(sec, "bearer_token_env");
    if let Some(v) = &bearer_token_env {
        if !is_env_name(v) {
            r.err(format!(
                "{}: \"{}\" is not a variable name (the config names variables, never holds \
                 their values)",
                sec.key("bearer_token_env"),
                crate::util::printable(v)
            ));
        } else if url.is_none() {
            r.err(format!(
                "{}: only for a server reached at a url",
                sec.key("bearer_token_env")
            ));
        } else if let Some(p) = providers.values().find(|p| p.api_key_env() == Some(v)) {
            r.err(format!(
                "{}: {v} is provider {}'s api_key_env; a provider key is never sent to an MCP \
                 server",
                sec.key("bearer_token_env"),
                p.name
            ));
        }
    }
    let args = r.list(sec, "args").unwrap_or_default();
    let env = r.list(sec, "env").unwrap_or_default();
    for (i, v) in env.iter().enumerate() {
        if !is_env_name(v) {
            r.err(format!(
                "{}[{i}]: \"{}\" is not a variable name (the config names variables, never \
                 holds their values)",
                sec.key("env"),
                crate::util::printable(v)
            ));
        } else if let Some(p) = providers.values().find(|p| p.api_key_env() == Some(v)) {
            r.err(format!(
                "{}[{i}]: {v} is provider {}'s api_key_env; a provider key never reaches a child",
                sec.key("env"),
                p.name
            ));
        }
    }
    let cwd = r.path(sec, "cwd");
    let network = hosts(r, sec);
    if let Some(why) = url.as_deref().and_then(|u| unreachable_url(u, &network)) {
        r.err(format!("{}: {why}", sec.key("url")));
    }
    let timeout_secs = r.int(sec, "timeout_secs", 30, 1, 3600);
    let tools_allow = r.list(sec, "tools_allow");
    let tools_deny = r.list(sec, "tools_deny").unwrap_or_default();
    for t in &tools_deny {
        if tools_allow.as_ref().is_some_and(|a| a.contains(t)) {
            r.err(format!(
                "{}: \"{}\" is also in tools_allow; name a tool in one of them",
                sec.key("tools_deny"),
                crate::util::printable(t)
            ));
        }
    }
    let risk = r
        .enum_str(sec, "risk", DeclaredRisk::parse, DeclaredRisk::ALLOWED)
        .unwrap_or_default();
    let read_only_tools = r.list(sec, "read_only_tools").unwrap_or_default();
    let lists = [
        ("tools_allow", tools_allow.as_deref().unwrap_or_default()),
        ("tools_deny", &tools_deny[..]),
        ("read_only_tools", &read_only_tools[..]),
    ];
    for (key, list) in lists {
        for (i, t) in list.iter().enumerate() {
            if t.is_empty() {
                r.err(format!("{}[{i}]: empty tool name", sec.key(key)));
            }
        }
    }
    let mut read_paths = Vec::new();
    for (i, p) in r
        .list(sec, "read_paths")
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if let Some(p) = r.path_value(&format!("{}[{i}]", sec.key("read_paths")), p) {
            read_paths.push(p);
        }
    }
    Some(McpServerConfig {
        name: name.to_string(),
        command: command?,
        url,
        bearer_token_env,
        args,
        env,
        cwd,
        network,
        timeout_secs,
        tools_allow,
        tools_deny,
        risk,
        read_only_tools,
        read_paths,
    })
}

fn read_security(r: &mut Reader, top: &mut Section, d: Security) -> Security {
    let mut sec = r.section(top, "security");
    let autonomy = r
        .enum_str(&mut sec, "autonomy", Autonomy::parse, Autonomy::ALLOWED)
        .unwrap_or(d.autonomy);
    let workspace_only = r.boolean(&mut sec, "workspace_only", d.workspace_only);
    let forbidden_paths = match r.list(&mut sec, "forbidden_paths") {
        Some(raw) => {
            let key = sec.key("forbidden_paths");
            raw.iter()
                .enumerate()
                .filter_map(|(i, p)| r.path_value(&format!("{key}[{i}]"), p))
                .collect()
        }
        None => d.forbidden_paths,
    };
    let forbidden_commands = r
        .list(&mut sec, "forbidden_commands")
        .unwrap_or(d.forbidden_commands);
    let audit_log = r.boolean(&mut sec, "audit_log", d.audit_log);
    let shell_allowlist = r
        .list(&mut sec, "shell_allowlist")
        .unwrap_or(d.shell_allowlist);
    let shell_env_passthrough = r
        .list(&mut sec, "shell_env_passthrough")
        .unwrap_or(d.shell_env_passthrough);
    let confinement = r
        .enum_str(
            &mut sec,
            "confinement",
            Confinement::parse,
            Confinement::ALLOWED,
        )
        .unwrap_or(d.confinement);
    // Each entry checked, every bad one named by its index.
    let mut checked = |name: &str, check: fn(&str) -> Result<(), String>| {
        let list = r.list(&mut sec, name)?;
        let key = sec.key(name);
        for (i, e) in list.iter().enumerate() {
            if let Err(why) = check(e) {
                r.err(format!("{key}[{i}]: {why}"));
            }
        }
        Some(list)
    };
    let secret_files_allow =
        checked("secret_files_allow", check_secret_allow_entry).unwrap_or(d.secret_files_allow);
    let dotfiles_allow =
        checked("dotfiles_allow", check_dotfile_allow_entry).unwrap_or(d.dotfiles_allow);
    let secret_env = match r.list(&mut sec, "secret_env") {
        Some(names) => {
            let key = sec.key("secret_env");
            for (i, name) in names.iter().enumerate() {
                if !is_env_name(name) {
                    r.err(format!(
                        "{key}[{i}]: \"{name}\" is not an environment variable name \
                         (letters, digits and _, not starting with a digit)"
                    ));
                }
            }
            names
        }
        None => d.secret_env,
    };
    r.finish(sec);
    Security {
        autonomy,
        workspace_only,
        forbidden_paths,
        forbidden_commands,
        audit_log,
        shell_allowlist,
        shell_env_passthrough,
        confinement,
        secret_files_allow,
        dotfiles_allow,
        secret_env,
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn read_channels(r: &mut Reader, top: &mut Section, d: Channels) -> Channels {
    let mut ch = r.section(top, "channels");
    let mut cli = r.section(&mut ch, "cli");
    let enabled = r.boolean(&mut cli, "enabled", d.cli.enabled);
    let tools_allow = match r.list(&mut cli, "tools_allow") {
        Some(list) => {
            let mut allow = Vec::new();
            for (i, t) in list.iter().enumerate() {
                match ToolName::parse(t) {
                    Some(t) if !allow.contains(&t) => allow.push(t),
                    Some(_) => {}
                    None => r.err(format!(
                        "{}[{i}]: unknown tool \"{t}\"{}; known tools: {}",
                        cli.key("tools_allow"),
                        tool_hint(t),
                        ToolName::list()
                    )),
                }
            }
            allow
        }
        None => d.cli.tools_allow,
    };
    r.finish(cli);
    r.finish(ch);
    Channels {
        cli: CliChannel {
            enabled,
            tools_allow,
        },
    }
}

fn read_memory(r: &mut Reader, top: &mut Section, d: MemoryConfig) -> MemoryConfig {
    let mut mem = r.section(top, "memory");
    r.enum_str(
        &mut mem,
        "backend",
        |s| (s == "sqlite").then_some(()),
        &["sqlite"],
    );
    let m = MemoryConfig {
        path: r.path(&mut mem, "path").unwrap_or(d.path),
        busy_timeout_ms: r.int(&mut mem, "busy_timeout_ms", d.busy_timeout_ms, 0, 600_000),
        context_turns: r.int(&mut mem, "context_turns", d.context_turns.into(), 0, 1000) as u32,
        context_hits: r.int(&mut mem, "context_hits", d.context_hits.into(), 0, 100) as u32,
        recall: r
            .enum_str(&mut mem, "recall", Recall::parse, Recall::ALLOWED)
            .unwrap_or(d.recall),
        context_bytes: r.int(
            &mut mem,
            "context_bytes",
            d.context_bytes as u64,
            0,
            1 << 20,
        ) as usize,
        categories: match r.list(&mut mem, "categories") {
            Some(list) => {
                check_categories(r, &mem.key("categories"), &list);
                list
            }
            None => d.categories,
        },
        session: r
            .enum_str(&mut mem, "session", Session::parse, Session::ALLOWED)
            .unwrap_or(d.session),
        session_hour: r.int(&mut mem, "session_hour", d.session_hour.into(), 0, 23) as u32,
        summarize_conversations: r.boolean(
            &mut mem,
            "summarize_conversations",
            d.summarize_conversations,
        ),
    };
    r.finish(mem);
    m
}

/// Note categories: 1 to 20 distinct names of `a-z` and `_`.
fn check_categories(r: &mut Reader, key: &str, list: &[String]) {
    if list.is_empty() || list.len() > 20 {
        r.err(format!(
            "{key}: {} categories; allowed: 1 to 20",
            list.len()
        ));
    }
    for (i, c) in list.iter().enumerate() {
        if c.is_empty() || !c.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            r.err(format!(
                "{key}[{i}]: \"{}\" is not allowed; a category is made of a-z and _",
                crate::util::printable(c)
            ));
        } else if list[..i].contains(c) {
            r.err(format!("{key}[{i}]: \"{c}\" is listed twice"));
        }
    }
}

/// `p` with `.` and `..` folded away, without asking the file system.
fn lexical(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn read_gateway(r: &mut Reader, top: &mut Section, d: GatewayConfig) -> GatewayConfig {
    let mut g = r.section(top, "gateway");
    let bind = match r.string(&mut g, "bind") {
        Some(text) => match text.parse::<std::net::SocketAddr>() {
            Ok(a) => a,
            Err(_) => {
                r.err(format!(
                    "{}: \"{}\" is not ADDR:PORT (e.g. \"127.0.0.1:7878\", \"[::1]:7878\")",
                    g.key("bind"),
                    crate::util::printable(&text)
                ));
                d.bind
            }
        },
        None => d.bind,
    };
    let out = GatewayConfig {
        bind,
        allow_public_bind: r.boolean(&mut g, "allow_public_bind", d.allow_public_bind),
        workers: r.int(&mut g, "workers", d.workers.into(), 1, 256) as u32,
        max_connections: r.int(
            &mut g,
            "max_connections",
            d.max_connections.into(),
            1,
            65_536,
        ) as u32,
        header_timeout_ms: r.int(
            &mut g,
            "header_timeout_ms",
            d.header_timeout_ms,
            100,
            600_000,
        ),
        idle_timeout_ms: r.int(&mut g, "idle_timeout_ms", d.idle_timeout_ms, 100, 3_600_000),
        max_body_bytes: r.int(&mut g, "max_body_bytes", d.max_body_bytes, 1, 1 << 30),
        rate_limit_per_minute: r.int(
            &mut g,
            "rate_limit_per_minute",
            d.rate_limit_per_minute.into(),
            1,
            1_000_000,
        ) as u32,
        cors_origins: r.list(&mut g, "cors_origins").unwrap_or(d.cors_origins),
    };
    if out.max_connections < out.workers {
        r.err(format!(
            "gateway.max_connections: {} is fewer than gateway.workers ({}); allowed: at least \
             as many connections as workers",
            out.max_connections, out.workers
        ));
    }
    for (i, o) in out.cors_origins.iter().enumerate() {
        // An origin is scheme://host[:port], nothing else: no `*`, no path.
        let ok = (o.starts_with("http://") || o.starts_with("https://"))
            && !o.contains('*')
            && o.split_once("://").is_some_and(|(_, rest)| {
                !rest.is_empty()
                    && !rest.contains('/')
                    && rest.bytes().all(|b| b.is_ascii_graphic())
            });
        if !ok {
            r.err(format!(
                "{}[{i}]: \"{}\" is not an origin; allowed: scheme://host[:port] \
                 (e.g. \"http://localhost:3000\"), never \"*\"",
                g.key("cors_origins"),
                crate::util::printable(o)
            ));
        }
    }
    r.finish(g);
    out
}

fn read_receipts(
    r: &mut Reader,
    top: &mut Section,
    d: ReceiptsConfig,
    state_dir: &Path,
) -> ReceiptsConfig {
    let mut rec = r.section(top, "receipts");
    let out = ReceiptsConfig {
        enabled: r.boolean(&mut rec, "enabled", d.enabled),
        path: r.path(&mut rec, "path").unwrap_or(d.path),
        anchor_file: r.path(&mut rec, "anchor_file").or(d.anchor_file),
    };
    if let Some(anchor) = &out.anchor_file {
        // An anchor proves something only where whoever rewrites the log
        // cannot rewrite it too.
        if lexical(anchor).starts_with(lexical(state_dir)) {
            r.err(format!(
                "receipts.anchor_file: {} is inside the state directory {}; put it outside \
                 (another disk, a directory only the operator writes, a synced folder)",
                anchor.display(),
                state_dir.display()
            ));
        } else if lexical(anchor) == lexical(&out.path) {
            r.err(format!(
                "receipts.anchor_file: {} is the receipts log itself (receipts.path)",
                anchor.display()
            ));
        }
    }
    r.finish(rec);
    out
}

fn read_prompt(r: &mut Reader, top: &mut Section, d: PromptConfig) -> PromptConfig {
    let mut prompt = r.section(top, "prompt");
    let out = PromptConfig {
        base_file: r.path(&mut prompt, "base_file").or(d.base_file),
        base_text: d.base_text,
        persona_file: r.path(&mut prompt, "persona_file").or(d.persona_file),
        user_file: r.path(&mut prompt, "user_file").or(d.user_file),
    };
    r.finish(prompt);
    out
}

/// Names only: whether each skill exists and is well formed is
/// `skills::enabled`'s to say (it reads files; `config validate` calls it).
fn read_skills(r: &mut Reader, top: &mut Section, d: SkillsConfig) -> SkillsConfig {
    let mut sec = r.section(top, "skills");
    let enabled = match r.list(&mut sec, "enabled") {
        Some(list) => {
            let key = sec.key("enabled");
            for (i, name) in list.iter().enumerate() {
                if let Err(why) = check_skill_name(name) {
                    r.err(format!("{key}[{i}]: {why}"));
                } else if list[..i].contains(name) {
                    r.err(format!("{key}[{i}]: \"{name}\" is listed twice"));
                }
            }
            list
        }
        None => d.enabled,
    };
    let workspace = r.boolean(&mut sec, "workspace", d.workspace);
    r.finish(sec);
    SkillsConfig { enabled, workspace }
}

fn read_tools(r: &mut Reader, top: &mut Section, d: Tools) -> Tools {
    let mut tools = r.section(top, "tools");
    let mut out = Tools {
        middleware: BTreeMap::new(),
        external: BTreeMap::new(),
        ..d
    };
    if tools.t.get("rate_limit").is_some_and(|v| {
        // `[tools.rate_limit]` with per_minute/per_hour/burst keys, not
        // a tool's section (a tool's would hold enabled, timeout_secs…).
        v.as_table().is_some_and(|t| {
            t.keys()
                .all(|k| matches!(k.as_str(), "per_minute" | "per_hour" | "burst"))
        })
    }) {
        out.rate_limit = read_rate_limit(r, &mut tools);
    }
    let names: Vec<String> = tools.t.keys().cloned().collect();
    for name in names {
        // Not near a built-in's name (a typo stays an error here) and a
        // name a model can call: an external tool's middleware.
        if ToolName::parse(&name).is_none()
            && tool_hint(&name).is_empty()
            && crate::types::valid_tool_name(&name)
        {
            let mut sec = r.section(&mut tools, &name);
            let m = read_middleware(r, &mut sec);
            if m.cache_ttl_secs.is_some() {
                r.err(format!(
                    "{}.cache_ttl_secs: a plugin's tool is not cached (latchclaw cannot know it \
                     reads only)",
                    sec.path
                ));
            }
            r.finish(sec);
            out.external.insert(name, m);
            continue;
        }
        let Some(tool) = ToolName::parse(&name) else {
            tools.t.remove(&name);
            r.err(format!(
                "{}: unknown tool \"{name}\"{}; [tools.NAME] takes one of: {}",
                tools.key(&name),
                tool_hint(&name),
                ToolName::list()
            ));
            continue;
        };
        let mut sec = r.section(&mut tools, &name);
        let m = read_middleware(r, &mut sec);
        if m.cache_ttl_secs.is_some() && !CACHEABLE.contains(&tool) {
            r.err(format!(
                "{}: \"{name}\" is not a read-only tool; a result cache is for {}",
                sec.path,
                CACHEABLE.map(ToolName::as_str).join(", ")
            ));
        }
        if m != Middleware::default() {
            out.middleware.insert(tool, m);
        }
        match tool {
            ToolName::Http => out.http = read_http(r, &mut sec, out.http),
            ToolName::CodeRun => out.code_run = read_code_run(r, &mut sec, out.code_run),
            ToolName::Plan => out.plan = read_plan(r, &mut sec, out.plan),
            ToolName::WebSearch => {
                out.web_search = read_web_search(r, &mut sec);
                if m.enabled == Some(true) && out.web_search.is_none() {
                    r.err(format!(
                        "{}: true, but no search provider is set; add provider = \"searxng\" \
                         with url = \"https://…\", or provider = \"brave\" with api_key_env",
                        sec.key("enabled")
                    ));
                }
            }
            _ => {}
        }
        r.finish(sec);
    }
    r.finish(tools);
    out
}

/// `enabled`, `timeout_secs` and `rate_limit`, which every tool takes.
fn read_middleware(r: &mut Reader, sec: &mut Section) -> Middleware {
    let enabled = match sec.t.contains_key("enabled") {
        true => Some(r.boolean(sec, "enabled", true)),
        false => None,
    };
    let timeout_secs = r.opt_int(sec, "timeout_secs", 1, 3600);
    let rate_limit = read_rate_limit(r, sec);
    let cache_ttl_secs = r.opt_int(sec, "cache_ttl_secs", 1, 86_400);
    Middleware {
        enabled,
        timeout_secs,
        rate_limit,
        cache_ttl_secs,
    }
}

/// `rate_limit = { per_minute, per_hour, burst }` in `sec`, if there.
fn read_rate_limit(r: &mut Reader, sec: &mut Section) -> RateLimit {
    let mut rate_limit = RateLimit::default();
    if let Some(mut rl) = r.table(sec, "rate_limit") {
        rate_limit.per_minute = r
            .opt_int(&mut rl, "per_minute", 1, 10_000)
            .map(|n| n as u32);
        rate_limit.per_hour = r
            .opt_int(&mut rl, "per_hour", 1, 1_000_000)
            .map(|n| n as u32);
        rate_limit.burst = r.opt_int(&mut rl, "burst", 1, 10_000).map(|n| n as u32);
        if rl.t.is_empty() && !rate_limit.is_set() {
            r.err(format!(
                "{}: empty; give per_minute, per_hour, burst or some of them",
                rl.path
            ));
        }
        r.finish(rl);
    }
    rate_limit
}

fn read_http(r: &mut Reader, http: &mut Section, d: HttpTool) -> HttpTool {
    HttpTool {
        allowed_domains: r.list(http, "allowed_domains").unwrap_or(d.allowed_domains),
        allow_private: r.list(http, "allow_private").unwrap_or(d.allow_private),
        max_redirects: r.int(http, "max_redirects", d.max_redirects.into(), 0, 20) as u32,
    }
}

/// A plan's budgets, each within bounds that keep a tree finite.
fn read_plan(r: &mut Reader, s: &mut Section, d: PlanConfig) -> PlanConfig {
    let max_depth = r.int(
        s,
        "max_depth",
        d.max_depth.into(),
        1,
        crate::types::args::PLAN_MAX_DEPTH as u64,
    ) as u32;
    let max_tasks = r.int(
        s,
        "max_tasks",
        d.max_tasks.into(),
        1,
        crate::types::args::PLAN_MAX_TASKS as u64,
    ) as u32;
    let task_rounds = r.int(s, "task_rounds", d.task_rounds.into(), 1, 100) as u32;
    let task_tokens = r.int(s, "task_tokens", d.task_tokens, 100, 100_000_000);
    let tree_tokens = r.int(s, "tree_tokens", d.tree_tokens, 100, 1_000_000_000);
    let wall_clock_secs = r.int(s, "wall_clock_secs", d.wall_clock_secs, 1, 86_400);
    let skill_min_score = match r.float(s, "skill_min_score") {
        Some(f) if f.is_finite() && f >= 0.0 => f,
        Some(f) => {
            r.err(format!(
                "{}: {f} is not allowed; a score of 0 or more",
                s.key("skill_min_score")
            ));
            d.skill_min_score
        }
        None => d.skill_min_score,
    };
    PlanConfig {
        max_depth,
        max_tasks,
        task_rounds,
        task_tokens,
        tree_tokens,
        wall_clock_secs,
        skill_min_score,
    }
}

/// `risk`, `max_output_bytes` and the `secrets` table.
fn read_code_run(r: &mut Reader, s: &mut Section, d: CodeRunConfig) -> CodeRunConfig {
    let risk = r
        .enum_str(s, "risk", DeclaredRisk::parse, DeclaredRisk::ALLOWED)
        .unwrap_or(d.risk);
    let max_output_bytes = r.int(
        s,
        "max_output_bytes",
        d.max_output_bytes as u64,
        1024,
        64 << 20,
    ) as usize;
    let mut secrets = BTreeMap::new();
    if let Some(mut sec) = r.table(s, "secrets") {
        let names: Vec<String> = sec.t.keys().cloned().collect();
        for name in names {
            let key = sec.key(&name);
            if !is_env_name(&name) {
                r.err(format!(
                    "{key}: \"{}\" is not a secret name (letters, digits and _, \
                     not starting with a digit)",
                    crate::util::printable(&name)
                ));
                sec.t.remove(&name);
                continue;
            }
            let Some(mut one) = r.table(&mut sec, &name) else {
                continue;
            };
            let env = r.string(&mut one, "env");
            let hosts = r.list(&mut one, "hosts").unwrap_or_default();
            match &env {
                None => r.err(format!(
                    "{}: missing; the variable in latchclaw's environment that holds the value",
                    one.key("env")
                )),
                Some(v) if !is_env_name(v) => r.err(format!(
                    "{}: \"{}\" is not an environment variable name",
                    one.key("env"),
                    crate::util::printable(v)
                )),
                _ => {}
            }
            if hosts.is_empty() {
                r.err(format!(
                    "{}: missing or empty; the hosts a request carrying the secret may go to \
                     (e.g. [\"api.github.com\"])",
                    one.key("hosts")
                ));
            }
            for (i, h) in hosts.iter().enumerate() {
                if h.is_empty() || h.contains(['/', ':', '@', ' ', '*']) {
                    r.err(format!(
                        "{}[{i}]: \"{}\" is not a host name (no scheme, port, path or wildcard)",
                        one.key("hosts"),
                        crate::util::printable(h)
                    ));
                }
            }
            r.finish(one);
            if let Some(env) = env {
                let hosts = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
                secrets.insert(name, CodeSecret { env, hosts });
            }
        }
        r.finish(sec);
    }
    CodeRunConfig {
        risk,
        max_output_bytes,
        secrets,
    }
}

/// `provider`, `url`, `api_key_env`; `None` when no provider is set.
fn read_web_search(r: &mut Reader, s: &mut Section) -> Option<WebSearch> {
    let has_provider = s.t.contains_key("provider");
    let provider = r.enum_str(
        s,
        "provider",
        SearchProvider::parse,
        SearchProvider::ALLOWED,
    );
    let url = r.string(s, "url");
    let api_key_env = r.string(s, "api_key_env");
    let provider = match provider {
        Some(p) => p,
        None => {
            if !has_provider && (url.is_some() || api_key_env.is_some()) {
                r.err(format!(
                    "{}: missing; allowed values: {}",
                    s.key("provider"),
                    SearchProvider::ALLOWED.join(", ")
                ));
            }
            return None;
        }
    };
    if let Some(name) = &api_key_env
        && !is_env_name(name)
    {
        r.err(format!(
            "{}: \"{name}\" is not an environment variable name \
             (letters, digits and _, not starting with a digit)",
            s.key("api_key_env")
        ));
    }
    let url = match (provider, url) {
        (SearchProvider::Searxng, None) => {
            r.err(format!(
                "{}: missing; provider = \"searxng\" needs the instance's base URL \
                 (e.g. \"https://searx.example.org\")",
                s.key("url")
            ));
            return None;
        }
        (SearchProvider::Brave, None) => BRAVE_DEFAULT_URL.to_string(),
        (_, Some(u)) => {
            let lower = u.to_ascii_lowercase();
            if !(lower.starts_with("http://") || lower.starts_with("https://"))
                || u.contains(['?', '#', '@'])
                || u.chars().any(|c| c.is_whitespace() || c.is_control())
                || u.split_once("://").is_none_or(|(_, rest)| rest.is_empty())
            {
                r.err(format!(
                    "{}: \"{}\" is not a base URL; write http(s)://host[:port][/path], \
                     without credentials, query or fragment",
                    s.key("url"),
                    crate::util::printable(&u)
                ));
            }
            u.trim_end_matches('/').to_string()
        }
    };
    match (provider, &api_key_env) {
        (SearchProvider::Brave, None) => r.err(format!(
            "{}: missing; provider = \"brave\" needs the name of the variable holding the key \
             (e.g. \"BRAVE_API_KEY\")",
            s.key("api_key_env")
        )),
        (SearchProvider::Searxng, Some(_)) => r.err(format!(
            "{}: only provider = \"brave\" takes a key",
            s.key("api_key_env")
        )),
        _ => {}
    }
    Some(WebSearch {
        provider,
        url,
        api_key_env,
    })
}

/// What the CLI offers: `tools_allow` (or the on-by-default tools), plus
/// every tool whose section says `enabled = true` and `web_search` once a
/// provider is set, less every `enabled = false`, an unconfigured
/// `web_search` and a tool this build lacks (`crate::features`).
fn effective_tools_allow(mut allow: Vec<ToolName>, tools: &Tools) -> Vec<ToolName> {
    let add = |t: ToolName, allow: &mut Vec<ToolName>| {
        if !allow.contains(&t) {
            allow.push(t);
        }
    };
    for (t, m) in &tools.middleware {
        if m.enabled == Some(true) {
            add(*t, &mut allow);
        }
    }
    if tools.web_search.is_some() {
        add(ToolName::WebSearch, &mut allow);
    }
    // A background run is followed with `code_status`: it comes with code_run.
    if allow.contains(&ToolName::CodeRun) {
        add(ToolName::CodeStatus, &mut allow);
    }
    allow.retain(|t| {
        tools.of(*t).enabled != Some(false)
            && (*t != ToolName::WebSearch || tools.web_search.is_some())
            && crate::features::tool_missing(*t).is_none()
    });
    allow
}

/// The built-in deterministic provider, there unless the config defines a
/// provider of the same name.
pub const BUILTIN_MOCK: &str = "mock";

/// What the built-in mock was called before it was `mock`. Configs written
/// then still name it (`default_provider = "local"`, a `reliable` list), so
/// where no provider of that name is defined and `mock` is a mock, the old
/// name means `mock`, with a note saying to write that.
pub const OLD_MOCK_NAME: &str = "local";

fn old_name_means_mock(providers: &BTreeMap<String, ProviderConfig>) -> bool {
    !providers.contains_key(OLD_MOCK_NAME)
        && providers
            .get(BUILTIN_MOCK)
            .is_some_and(|p| p.kind() == ProviderKind::Mock)
}

fn old_mock_text() -> String {
    format!(
        "\"{OLD_MOCK_NAME}\" is the old name of the built-in mock provider, \
         now \"{BUILTIN_MOCK}\"; it still works, write \"{BUILTIN_MOCK}\" instead"
    )
}

fn old_mock_note(at: &str) -> String {
    format!("{at}: {}", old_mock_text())
}

fn builtin_mock(default_model: &str) -> ProviderConfig {
    ProviderConfig::new(
        BUILTIN_MOCK,
        default_model,
        ProviderSettings::Mock(MockSettings::default()),
    )
}

fn read_providers(
    r: &mut Reader,
    top: &mut Section,
    default_model: &str,
) -> BTreeMap<String, ProviderConfig> {
    let mut out = BTreeMap::new();
    if let Some(mut providers) = r.table(top, "providers") {
        if let Some(mut models) = r.table(&mut providers, "models") {
            let names: Vec<String> = models.t.keys().cloned().collect();
            for name in names {
                let Some(p) = r.table(&mut models, &name) else {
                    continue;
                };
                if let Some(cfg) = read_provider(r, &name, p, default_model) {
                    out.insert(name, cfg);
                }
            }
            r.finish(models);
        }
        r.finish(providers);
    }
    out.entry(BUILTIN_MOCK.into())
        .or_insert_with(|| builtin_mock(default_model));
    if old_name_means_mock(&out) {
        for p in out.values_mut() {
            for (key, target) in provider_links(p) {
                if target == OLD_MOCK_NAME {
                    r.notes.push(old_mock_note(&key));
                    *target = BUILTIN_MOCK.into();
                }
            }
        }
    }
    check_provider_links(r, &out);
    out
}

/// One `[providers.models.NAME]` table: the common keys, then its kind's.
/// `None` when the kind is missing or unknown.
fn read_provider(
    r: &mut Reader,
    name: &str,
    mut p: Section,
    default_model: &str,
) -> Option<ProviderConfig> {
    let kind_given = p.t.contains_key("kind");
    let kind = r.enum_str(&mut p, "kind", ProviderKind::parse, ProviderKind::ALLOWED);
    if !kind_given {
        r.err(format!(
            "{}: missing; allowed values: {}",
            p.key("kind"),
            ProviderKind::ALLOWED.join(", ")
        ));
    }
    let model = r
        .string(&mut p, "model")
        .unwrap_or_else(|| default_model.into());
    let timeout_secs = r.int(
        &mut p,
        "timeout_secs",
        ProviderConfig::DEFAULT_TIMEOUT_SECS,
        1,
        3600,
    );
    let max_tools = r
        .opt_int(&mut p, "max_tools", 1, ToolName::ALL.len() as u64)
        .map(|n| n as usize);
    let Some(kind) = kind else {
        // Which keys belong cannot be told without the kind: only names
        // that no kind takes are reported.
        for k in p.t.keys() {
            if !ProviderKind::ALL
                .iter()
                .any(|o| o.keys().contains(&k.as_str()))
            {
                let known = ProviderKind::ALL
                    .iter()
                    .flat_map(|o| o.keys())
                    .chain(PROVIDER_KEYS)
                    .copied();
                r.err(format!(
                    "{}: unknown key{}",
                    p.key(k),
                    unknown_key_hint(k, known)
                ));
            }
        }
        return None;
    };
    let settings = match kind {
        ProviderKind::Mock => ProviderSettings::Mock(read_mock(r, &mut p)),
        ProviderKind::OpenAiCompatible => {
            ProviderSettings::OpenAiCompatible(read_openai(r, &mut p))
        }
        ProviderKind::Reliable => ProviderSettings::Reliable(read_reliable(r, &mut p)),
        ProviderKind::Router => ProviderSettings::Router(read_router(r, &mut p)),
    };
    finish_provider(r, p, kind);
    Some(ProviderConfig {
        name: name.to_string(),
        model,
        timeout_secs,
        max_tools,
        settings,
    })
}

/// Keys left over in a provider's table: another kind's, named as such,
/// or unknown; either way the error lists what this kind takes.
fn finish_provider(r: &mut Reader, p: Section, kind: ProviderKind) {
    let takes = || {
        PROVIDER_KEYS
            .iter()
            .chain(kind.keys())
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    };
    for k in p.t.keys() {
        let owners: Vec<&str> = ProviderKind::ALL
            .iter()
            .filter(|o| o.keys().contains(&k.as_str()))
            .map(|o| o.as_str())
            .collect();
        let what = if owners.is_empty() {
            let known = PROVIDER_KEYS.iter().chain(kind.keys()).copied();
            format!("unknown key{}", unknown_key_hint(k, known))
        } else {
            format!(
                "a key of {} providers, not of {} ones",
                owners.join(" and "),
                kind.as_str()
            )
        };
        r.err(format!(
            "{}: {what}; {} providers take: {}",
            p.key(k),
            kind.as_str(),
            takes()
        ));
    }
}

fn read_mock(r: &mut Reader, p: &mut Section) -> MockSettings {
    let d = MockSettings::default();
    MockSettings {
        fixture: r.path(p, "fixture").or(d.fixture),
        record_requests: r.path(p, "record_requests").or(d.record_requests),
        stream: r.boolean(p, "stream", d.stream),
    }
}

fn read_reliable(r: &mut Reader, p: &mut Section) -> ReliableSettings {
    let given = p.t.contains_key("providers");
    let providers = r.list(p, "providers");
    // A list of the wrong type is reported as such, not as missing too.
    if !given || providers.as_ref().is_some_and(Vec::is_empty) {
        r.err(format!(
            "{}: missing or empty; a reliable provider needs the providers to try, in order",
            p.key("providers")
        ));
    }
    ReliableSettings {
        providers: providers.unwrap_or_default(),
    }
}

fn read_router(r: &mut Reader, p: &mut Section) -> RouterSettings {
    let hints = r.string_map(p, "hints");
    let routes = r.string_map(p, "routes");
    let given = p.t.contains_key("default_route");
    let default_route = r.string(p, "default_route");
    if !given {
        r.err(format!(
            "{}: missing; a router needs the provider to use when no hint or route applies",
            p.key("default_route")
        ));
    }
    RouterSettings {
        hints,
        routes,
        default_route: default_route.unwrap_or_default(),
    }
}

fn read_openai(r: &mut Reader, p: &mut Section) -> OpenAiSettings {
    let d = OpenAiSettings::new("");
    let given = p.t.contains_key("base_url");
    let base_url = r.string(p, "base_url");
    match &base_url {
        None if given => {}
        None => r.err(format!(
            "{}: missing; an openai-compatible provider needs its server's URL, e.g. \"http://localhost:1234/v1\"",
            p.key("base_url")
        )),
        Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => r.err(format!(
            "{}: \"{u}\" must start with http:// or https://",
            p.key("base_url")
        )),
        _ => {}
    }
    let api_key_env = r.string(p, "api_key_env");
    if let Some(env) = &api_key_env
        && (env.is_empty() || !env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        r.err(format!(
            "{}: \"{env}\" is not an environment variable name (letters, digits, _); \
             put the key in the environment, never in the config",
            p.key("api_key_env")
        ));
    }
    let temperature = r.float(p, "temperature");
    if let Some(t) = temperature
        && !(0.0..=2.0).contains(&t)
    {
        r.err(format!(
            "{}: {t} is out of range; allowed: 0.0 to 2.0",
            p.key("temperature")
        ));
    }
    let max_tokens =
        p.t.contains_key("max_tokens")
            .then(|| r.int(p, "max_tokens", 1024, 1, 10_000_000));
    let headers = r.string_map(p, "headers");
    for (name, value) in &headers {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "authorization" | "api-key" | "x-api-key" | "proxy-authorization"
        ) {
            r.err(format!(
                "{}.{name}: credentials do not belong in the config; name their environment variable in api_key_env",
                p.key("headers")
            ));
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            || value.contains(['\r', '\n'])
        {
            r.err(format!("{}.{name}: not a valid header", p.key("headers")));
        }
    }
    OpenAiSettings {
        base_url: base_url.unwrap_or(d.base_url),
        api_key_env,
        temperature,
        max_tokens,
        headers,
        tool_mode: r
            .enum_str(p, "tool_mode", ToolMode::parse, ToolMode::ALLOWED)
            .unwrap_or(d.tool_mode),
        stream: r.boolean(p, "stream", d.stream),
        retries: r.int(p, "retries", d.retries.into(), 0, 10) as u32,
    }
}

/// The names a `reliable` or `router` provider gives of other providers,
/// each with its key path.
fn provider_links(p: &mut ProviderConfig) -> Vec<(String, &mut String)> {
    let at = format!("providers.models.{}", p.name);
    match &mut p.settings {
        ProviderSettings::Reliable(rel) => rel
            .providers
            .iter_mut()
            .enumerate()
            .map(|(i, t)| (format!("{at}.providers[{i}]"), t))
            .collect(),
        ProviderSettings::Router(rt) => rt
            .hints
            .iter_mut()
            .map(|(k, t)| (format!("{at}.hints.{k}"), t))
            .chain(
                rt.routes
                    .iter_mut()
                    .map(|(k, t)| (format!("{at}.routes.\"{k}\""), t)),
            )
            .chain([(format!("{at}.default_route"), &mut rt.default_route)])
            .collect(),
        _ => Vec::new(),
    }
}

/// Links between providers, checked once every provider is known.
fn check_provider_links(r: &mut Reader, providers: &BTreeMap<String, ProviderConfig>) {
    let names: Vec<String> = providers.keys().cloned().collect();
    for p in providers.values() {
        match &p.settings {
            ProviderSettings::Router(rt) => {
                let targets = rt
                    .hints
                    .iter()
                    .map(|(k, v)| (format!("hints.{k}"), v))
                    .chain(
                        rt.routes
                            .iter()
                            .map(|(k, v)| (format!("routes.\"{k}\""), v)),
                    )
                    // A missing default_route is reported where it is read.
                    .chain(
                        Some(("default_route".to_string(), &rt.default_route))
                            .filter(|(_, v)| !v.is_empty()),
                    );
                for (key, target) in targets {
                    if target == &p.name || !names.contains(target) {
                        r.err(format!(
                            "providers.models.{}.{key}: \"{target}\" is not another defined provider; defined providers: {}",
                            p.name,
                            names.join(", ")
                        ));
                    }
                }
            }
            ProviderSettings::Reliable(rel) => {
                for (i, target) in rel.providers.iter().enumerate() {
                    if target == &p.name {
                        r.err(format!(
                            "providers.models.{}.providers[{i}]: a provider cannot list itself",
                            p.name
                        ));
                    } else if !names.contains(target) {
                        r.err(format!(
                            "providers.models.{}.providers[{i}]: \"{target}\" is not defined; defined providers: {}",
                            p.name,
                            names.join(", ")
                        ));
                    }
                }
            }
            ProviderSettings::Mock(_) | ProviderSettings::OpenAiCompatible(_) => {}
        }
    }
}

// Validation hooks: each checks one kind of value this file reads, and the
// module that uses the value (skills, the secret-file rules) calls the same
// function, so a config check and its use cannot disagree.

/// The receipt key's file name in the state directory.
pub const RECEIPT_KEY_FILE: &str = "receipt.key";

pub const SKILL_NAME_MAX_CHARS: usize = 64;

/// A skill name: `a-z`, `0-9`, `_` and `-`, 1 to 64 of them.
pub fn check_skill_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() || name.chars().count() > SKILL_NAME_MAX_CHARS {
        return Err(format!(
            "\"{}\" is not a skill name: 1 to {SKILL_NAME_MAX_CHARS} characters of a-z, 0-9, _ and -",
            crate::util::printable(name)
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    {
        return Err(format!(
            "\"{}\" is not a skill name: only a-z, 0-9, _ and - are allowed",
            crate::util::printable(name)
        ));
    }
    Ok(())
}

/// Why a `secret_files_allow` entry is unusable, or `Ok`.
pub fn check_secret_allow_entry(e: &str) -> Result<(), String> {
    let why = if e.is_empty() {
        "is empty"
    } else if e.contains('\0') {
        "contains a NUL byte"
    } else if e.starts_with('/') || e.starts_with('~') {
        "is not relative to the workspace (entries are workspace paths such as \
         \"config/.env.example\" or names such as \".env.example\"; secret files outside \
         the workspace cannot be allowed)"
    } else if e.ends_with('/') {
        "ends with \"/\"; name files (\"fixtures/**\" for everything below a directory)"
    } else if strip_dot(e)
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        "has an empty, \".\" or \"..\" component"
    } else {
        return Ok(());
    };
    Err(format!("\"{e}\" {why}"))
}

/// Why a `dotfiles_allow` entry is unusable, or `Ok`: a name glob starting
/// with `.`, no `/`.
pub fn check_dotfile_allow_entry(e: &str) -> Result<(), String> {
    let why = if !e.starts_with('.') || e.len() < 2 {
        "is not a dotfile name (entries are names or globs such as \".gitignore\" or \".eslintrc*\")"
    } else if e.contains('/') || e.contains('\0') {
        "holds a \"/\" or a NUL byte; entries are file names, matched in any directory"
    } else {
        return Ok(());
    };
    Err(format!("\"{}\" {why}", crate::util::printable(e)))
}

pub(crate) fn strip_dot(e: &str) -> &str {
    let mut e = e;
    while let Some(rest) = e.strip_prefix("./") {
        e = rest;
    }
    e
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Config, ConfigErrors> {
        Config::from_text(text, Path::new("/cfg/config.toml"), PathBuf::from("/state"))
    }

    /// Property: the example config cut anywhere, or with any value swapped
    /// for an odd one, is a config or a list of errors, never a panic.
    #[test]
    fn cut_or_mangled_configs_never_panic() {
        let example = include_str!("../config.example.toml");
        for (i, cut) in crate::util::arbitrary::prefixes(example).enumerate() {
            if i % 7 == 0 {
                let _ = parse(cut);
            }
        }
        const ODD: [&str; 16] = [
            "\"\"",
            "-1",
            "1e309",
            "[]",
            "{}",
            "\"İ\"",
            "true",
            "99999999999999999999",
            "0",
            "\"~/../..\"",
            "\"$LC_UNSET_VAR\"",
            "[1, \"a\"]",
            "{ a = 1 }",
            "\"\\u0000\"",
            "\"a\\nb\"",
            "nan",
        ];
        let lines: Vec<&str> = example.lines().collect();
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..3_000 {
            let mut text = String::new();
            for line in &lines {
                match line.split_once(" = ") {
                    Some((key, _)) if !key.starts_with('#') && rng.u8(..4) == 0 => {
                        text.push_str(&format!("{key} = {}\n", ODD[rng.usize(..ODD.len())]));
                    }
                    _ => {
                        text.push_str(line);
                        text.push('\n');
                    }
                }
            }
            let _ = parse(&text);
        }
    }

    fn errors(text: &str) -> Vec<String> {
        parse(text).err().map(|e| e.errors).unwrap_or_default()
    }

    #[test]
    fn note_categories_are_checked() {
        let c = parse("[memory]\ncategories = [\"fact\", \"to_do\"]").unwrap();
        assert_eq!(c.memory.categories, ["fact", "to_do"]);
        assert_eq!(
            parse("").unwrap().memory.categories,
            ["fact", "preference", "task", "note"]
        );
        assert_eq!(
            errors("[memory]\ncategories = []"),
            ["memory.categories: 0 categories; allowed: 1 to 20"]
        );
        let many: Vec<String> = (0..21)
            .map(|i| format!("\"c{}\"", "a".repeat(i + 1)))
            .collect();
        let e = errors(&format!("[memory]\ncategories = [{}]", many.join(",")));
        assert!(e[0].contains("21 categories; allowed: 1 to 20"), "{e:?}");
        assert_eq!(
            errors("[memory]\ncategories = [\"Fact\", \"a b\", \"\", \"x\", \"x\"]"),
            [
                "memory.categories[0]: \"Fact\" is not allowed; a category is made of a-z and _",
                "memory.categories[1]: \"a b\" is not allowed; a category is made of a-z and _",
                "memory.categories[2]: \"\" is not allowed; a category is made of a-z and _",
                "memory.categories[4]: \"x\" is listed twice",
            ]
        );
    }

    #[test]
    fn anchor_file_is_a_path_outside_the_state_dir_and_protected() {
        assert_eq!(parse("").unwrap().receipts.anchor_file, None);
        let c = parse("[receipts]\nanchor_file = \"heads/anchor.log\"\n").unwrap();
        let anchor = PathBuf::from("/cfg/heads/anchor.log");
        assert_eq!(c.receipts.anchor_file.as_ref(), Some(&anchor));
        let protected = c.protected_paths();
        assert!(protected.contains(&anchor), "{protected:?}");
        assert!(protected.contains(&PathBuf::from("/state/receipt.key")));
        for (text, want) in [
            (
                "anchor_file = \"/state/heads.log\"",
                "inside the state directory /state",
            ),
            (
                "anchor_file = \"/tmp/../state/x\"",
                "inside the state directory",
            ),
            (
                "path = \"/var/r.log\"\nanchor_file = \"/var/./r.log\"",
                "is the receipts log itself",
            ),
            ("anchor_file = \"\"", "receipts.anchor_file: path is empty"),
            ("anchor_file = 3", "receipts.anchor_file"),
        ] {
            let e = errors(&format!("[receipts]\n{text}\n"));
            assert!(
                e.len() == 1 && e[0].contains(want) && e[0].starts_with("receipts.anchor_file"),
                "{text}: {e:?}"
            );
        }
    }

    #[test]
    fn empty_config_takes_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c.security.autonomy, Autonomy::Supervised);
        assert!(c.security.workspace_only);
        assert_eq!(c.security.confinement, Confinement::BestEffort);
        assert_eq!(c.max_tool_rounds, 5);
        assert_eq!(c.max_response_bytes, 1 << 20);
        assert_eq!(
            (
                c.tool_timeout_secs,
                c.shell_timeout_secs,
                c.http_timeout_secs
            ),
            (30, 15, 20)
        );
        assert_eq!(c.memory.path, PathBuf::from("/state/memory.sqlite"));
        assert_eq!(c.receipts.path, PathBuf::from("/state/tool_receipts.log"));
        assert_eq!(c.providers["mock"].kind(), ProviderKind::Mock);
        assert_eq!(c.default_provider, "mock");
        assert!(c.channels.cli.tools_allow.contains(&ToolName::FileList));
    }

    #[test]
    fn code_run_secrets_name_a_variable_and_hosts() {
        let c = parse(
            "[tools.code_run]\nrisk = \"low\"\n[tools.code_run.secrets]\n\
             GH = { env = \"GH_T\", hosts = [\"API.github.com\"] }\n",
        )
        .unwrap();
        assert_eq!(c.tools.code_run.risk, DeclaredRisk::Low);
        assert_eq!(c.tools.code_run.secrets["GH"].env, "GH_T");
        assert_eq!(c.tools.code_run.secrets["GH"].hosts, ["api.github.com"]);
        assert_eq!(CodeRunConfig::default().risk, DeclaredRisk::High);
        let e = errors(
            "[tools.code_run.secrets]\nA = { hosts = [\"h\"] }\nB = { env = \"1X\", hosts = [] }\n\
             C = { env = \"C\", hosts = [\"https://h/\"] }\n\"not-a-name\" = { env = \"D\", hosts = [\"h\"] }\n\
             E = { env = \"E\", hosts = [\"h\"], port = 1 }\n",
        );
        let want = [
            "tools.code_run.secrets.A.env: missing",
            "tools.code_run.secrets.B.env: \"1X\" is not an environment variable name",
            "tools.code_run.secrets.B.hosts: missing or empty",
            "tools.code_run.secrets.C.hosts[0]: \"https://h/\" is not a host name",
            "tools.code_run.secrets.not-a-name: \"not-a-name\" is not a secret name",
            "tools.code_run.secrets.E.port",
        ];
        for w in want {
            assert!(e.iter().any(|x| x.starts_with(w)), "{w}: {e:?}");
        }
    }

    #[test]
    fn secret_env_takes_variable_names_only() {
        let c = parse("[security]\nsecret_env = [\"DB_PASSWORD\", \"_X1\"]\n").unwrap();
        assert_eq!(c.security.secret_env, ["DB_PASSWORD", "_X1"]);
        assert!(Security::default().secret_env.is_empty());
        let e = errors("[security]\nsecret_env = [\"OK\", \"bad-name\", \"9X\", \"\"]\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e[0].starts_with(
                "security.secret_env[1]: \"bad-name\" is not an environment variable name"
            ),
            "{e:?}"
        );
        assert!(e[1].starts_with("security.secret_env[2]:"), "{e:?}");
        assert!(e[2].starts_with("security.secret_env[3]:"), "{e:?}");
        let e = errors("[security]\nsecret_env = \"DB_PASSWORD\"\n");
        assert!(e[0].starts_with("security.secret_env:"), "{e:?}");
    }

    #[test]
    fn bad_enum_names_allowed_values() {
        let e = errors("[security]\nautonomy = \"godmode\"\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("security.autonomy:"), "{e:?}");
        assert!(e[0].contains("readonly, supervised, full"), "{e:?}");
        let e = errors("[security]\nconfinement = \"strict\"\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("security.confinement:"), "{e:?}");
        assert!(e[0].contains("required, best_effort, off"), "{e:?}");
        assert_eq!(
            parse("[security]\nconfinement = \"required\"\n")
                .unwrap()
                .security
                .confinement,
            Confinement::Required
        );
    }

    #[test]
    fn mcp_server_errors_in_one_pass_with_key_paths() {
        let e = errors(
            r#"
[providers.models.o]
kind = "openai-compatible"
base_url = "http://h/v1"
api_key_env = "LC_KEY"
[mcp]
colour = 1
[mcp.servers."bad name"]
command = "x"
[mcp.servers.a]
args = "x"
env = ["LC_KEY", "1BAD", "OK_NAME"]
network = ["https://x.org/"]
timeout_secs = 0
tools_allow = ["t"]
tools_deny = ["t"]
risk = "extreme"
read_only_tools = [""]
comand = "y"
"#,
        );
        let want = [
            "mcp.colour: unknown key",
            "mcp.servers.bad name: \"bad name\" is not a server name",
            "mcp.servers.a.command: missing",
            "mcp.servers.a.args: expected a list of strings",
            "mcp.servers.a.env[0]: LC_KEY is provider o's api_key_env",
            "mcp.servers.a.env[1]: \"1BAD\" is not a variable name",
            "mcp.servers.a.network[0]:",
            "mcp.servers.a.timeout_secs: 0 is out of range",
            "mcp.servers.a.tools_deny: \"t\" is also in tools_allow",
            "mcp.servers.a.risk: \"extreme\" is not allowed",
            "mcp.servers.a.read_only_tools[0]: empty tool name",
            "mcp.servers.a.comand: unknown key (did you mean command?)",
        ];
        for w in want {
            assert!(
                e.iter().any(|x| x.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
        let cfg = parse("[mcp.servers.t]\ncommand = \"mcp-server-time\"\n").unwrap();
        let t = &cfg.mcp.servers["t"];
        assert_eq!((t.timeout_secs, t.risk), (30, DeclaredRisk::Medium));
        assert!(t.tool_allowed("anything"));
    }

    #[test]
    fn every_error_reported_in_one_pass() {
        let e = errors(
            r#"
max_tool_rounds = "five"
colour = "blue"
[security]
autonomy = "godmode"
workspace_only = "yes"
forbidden_paths = ["/etc", 3]
[memory]
backend = "redis"
[providers.models.x]
kind = "carrier-pigeon"
[providers.models.y]
kind = "openai-compatible"
api_key_env = "sk-live-abc"
[channels.cli]
tools_allow = ["file_read", "teleport"]
"#,
        );
        let want = [
            "max_tool_rounds: expected an integer",
            "colour: unknown key",
            "security.autonomy:",
            "security.workspace_only: expected true or false",
            "security.forbidden_paths[1]: expected a string",
            "memory.backend: \"redis\" is not allowed; allowed values: sqlite",
            "providers.models.x.kind: \"carrier-pigeon\"",
            "providers.models.y.base_url: missing",
            "providers.models.y.api_key_env:",
            "channels.cli.tools_allow[1]: unknown tool \"teleport\"",
        ];
        for w in want {
            assert!(
                e.iter().any(|x| x.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");
    }

    #[test]
    fn tool_sections_are_checked_in_one_pass() {
        let e = errors(
            r#"
[tools."tele port"]
enabled = true
[tools.teleport]
enabled = true
colour = 3
[tools.shell]
enabled = "no"
timeout_secs = 0
allowed_domains = ["x"]
rate_limit = { per_minute = 0, per_hour = "many", burst = 0, bursts = 3 }
[tools.file_read]
rate_limit = {}
[tools.grep]
timeout_secs = 9999
[tools.web_search]
url = "https://s.example"
"#,
        );
        let want = [
            "tools.tele port: unknown tool \"tele port\"; [tools.NAME] takes one of: time, ",
            // Not a built-in's, not near one: a plugin's tool, whose keys
            // are checked here and whose name where plugins are known.
            "tools.teleport.colour: unknown key",
            "tools.shell.enabled: expected true or false",
            "tools.shell.timeout_secs: 0 is out of range; allowed: 1 to 3600",
            "tools.shell.allowed_domains: unknown key",
            "tools.shell.rate_limit.per_minute: 0 is out of range; allowed: 1 to 10000",
            "tools.shell.rate_limit.per_hour: expected an integer",
            "tools.shell.rate_limit.burst: 0 is out of range; allowed: 1 to 10000",
            "tools.shell.rate_limit.bursts: unknown key",
            "tools.file_read.rate_limit: empty; give per_minute, per_hour, burst or some of them",
            "tools.grep.timeout_secs: 9999 is out of range",
            "tools.web_search.provider: missing; allowed values: searxng, brave",
        ];
        for w in want {
            assert!(
                e.iter().any(|x| x.starts_with(w)),
                "missing {w:?} in {e:#?}"
            );
        }
        assert_eq!(e.len(), want.len(), "{e:#?}");

        let e = errors(
            "[tools.web_search]\nprovider = \"bing\"\n\
             [tools.time]\nenabled = true\n",
        );
        assert_eq!(e.len(), 1, "{e:#?}");
        assert!(e[0].contains("\"bing\" is not allowed; allowed values: searxng, brave"));
        for (text, want) in [
            ("provider = \"searxng\"", "tools.web_search.url: missing"),
            (
                "provider = \"brave\"",
                "tools.web_search.api_key_env: missing",
            ),
            (
                "provider = \"searxng\"\nurl = \"http://s\"\napi_key_env = \"K\"",
                "only provider = \"brave\" takes a key",
            ),
            (
                "provider = \"brave\"\napi_key_env = \"1-KEY\"",
                "not an environment variable name",
            ),
            (
                "provider = \"searxng\"\nurl = \"ftp://s\"",
                "is not a base URL",
            ),
            (
                "provider = \"searxng\"\nurl = \"https://u:p@s/?q=\"",
                "is not a base URL",
            ),
            ("enabled = true", "true, but no search provider is set"),
        ] {
            let e = errors(&format!("[tools.web_search]\n{text}\n"));
            assert!(
                e.len() == 1 && e[0].contains(want),
                "{text}: wanted {want:?} in {e:#?}"
            );
        }
    }

    /// `enabled = true` turns a tool on, `false` off whatever
    /// `tools_allow` says; web_search is on once a provider is set.
    #[test]
    fn enabled_and_the_search_provider_shape_the_offered_tools() {
        let c = parse(
            "[tools.http]\nenabled = true\n[tools.shell]\nenabled = false\n\
             [tools.web_search]\nprovider = \"searxng\"\nurl = \"http://s/\"\n",
        )
        .unwrap();
        let allow = &c.channels.cli.tools_allow;
        assert!(allow.contains(&ToolName::Http) && allow.contains(&ToolName::WebSearch));
        assert!(!allow.contains(&ToolName::Shell));
        assert_eq!(c.tools.web_search.unwrap().url, "http://s");
        let c = parse(
            "[channels.cli]\ntools_allow = [\"time\", \"web_search\"]\n\
             [tools.web_search]\nenabled = false\nprovider = \"brave\"\napi_key_env = \"K\"\n",
        )
        .unwrap();
        assert_eq!(c.channels.cli.tools_allow, [ToolName::Time]);
        // Listed but with no provider: not offered.
        let c = parse("[channels.cli]\ntools_allow = [\"web_search\", \"time\"]\n").unwrap();
        assert_eq!(c.channels.cli.tools_allow, [ToolName::Time]);
    }

    #[test]
    fn stream_is_a_boolean_on_by_default() {
        let base =
            "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n";
        let stream = |text: &str| match &parse(text).unwrap().providers["o"].settings {
            ProviderSettings::OpenAiCompatible(o) => o.stream,
            other => panic!("{other:?}"),
        };
        assert!(stream(base));
        assert!(!stream(&format!("{base}stream = false\n")));
        let e = errors(&format!("{base}stream = \"no\"\n"));
        assert_eq!(
            e,
            ["providers.models.o.stream: expected true or false, found string"]
        );
    }

    #[test]
    fn malformed_toml_reports_line_and_column() {
        let e = errors("a = 1\nb = = 2\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("line 2, column"), "{e:?}");
    }

    #[test]
    fn out_of_range_and_wrong_table_type() {
        let e = errors("max_tool_rounds = 0\nsecurity = 3\n");
        assert!(e[0].contains("out of range; allowed: 1 to 100"), "{e:?}");
        assert!(e[1].starts_with("security: expected a table"), "{e:?}");
    }

    #[test]
    fn unknown_default_provider_and_reliable_links() {
        let e = errors(
            "default_provider = \"nope\"\n[providers.models.r]\nkind = \"reliable\"\nproviders = [\"r\", \"ghost\"]\n",
        );
        assert!(
            e.iter()
                .any(|x| x.starts_with("default_provider: \"nope\"")),
            "{e:?}"
        );
        assert!(e.iter().any(|x| x.contains("cannot list itself")), "{e:?}");
        assert!(
            e.iter().any(|x| x.contains("\"ghost\" is not defined")),
            "{e:?}"
        );
    }

    #[test]
    fn expansion_of_home_and_variables() {
        // SAFETY-free: tests in this module only read variables they set here.
        let home = home_dir()
            .map(|h| h.display().to_string())
            .unwrap_or_default();
        if !home.is_empty() {
            assert_eq!(expand("~/x").unwrap(), format!("{home}/x"));
            assert_eq!(expand("${HOME}/y").unwrap(), format!("{home}/y"));
            assert_eq!(expand("$HOME/z").unwrap(), format!("{home}/z"));
        }
        assert_eq!(expand("a$$b").unwrap(), "a$b");
        assert!(expand("~root/x").unwrap_err().contains("~user"));
        assert!(
            expand("$LATCHCLAW_SURELY_UNSET_VAR/x")
                .unwrap_err()
                .contains("is not set")
        );
        assert!(expand("${UNCLOSED").unwrap_err().contains("unclosed"));
    }

    #[test]
    fn relative_paths_anchor_at_config_dir() {
        let c = parse("workspace_dir = \"ws\"\n[memory]\npath = \"/abs/m.db\"\n").unwrap();
        assert_eq!(c.workspace_dir, PathBuf::from("/cfg/ws"));
        assert_eq!(c.memory.path, PathBuf::from("/abs/m.db"));
    }
    /// `local`, the built-in mock's old name, still means it where the
    /// config defines no `local`; a config that defines one keeps its own.
    #[test]
    fn the_old_mock_name_still_means_the_mock() {
        let c = parse(
            "default_provider = \"local\"\n\
             [providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
             [providers.models.r]\nkind = \"reliable\"\nproviders = [\"o\", \"local\"]\n\
             [providers.models.t]\nkind = \"router\"\ndefault_route = \"local\"\n\
             [providers.models.t.hints]\nfast = \"local\"\n",
        )
        .unwrap();
        assert_eq!(c.default_provider, "mock");
        assert!(!c.providers.contains_key("local"));
        let ProviderSettings::Reliable(r) = &c.providers["r"].settings else {
            panic!("reliable")
        };
        assert_eq!(r.providers, ["o", "mock"]);
        let ProviderSettings::Router(t) = &c.providers["t"].settings else {
            panic!("router")
        };
        assert_eq!(
            (t.default_route.as_str(), t.hints[0].1.as_str()),
            ("mock", "mock")
        );
        assert_eq!(c.notes.len(), 4, "{:?}", c.notes);
        assert!(
            c.notes[0].starts_with("/cfg/config.toml: providers.models.r.providers[1]: \"local\""),
            "{:?}",
            c.notes
        );
        assert!(
            c.notes
                .iter()
                .any(|n| n.contains("providers.models.t.default_route: "))
        );
        assert!(
            c.notes.iter().any(
                |n| n.contains(": default_provider: ") && n.ends_with("write \"mock\" instead")
            )
        );
        assert_eq!(c.provider_name("local").0, "mock");
        assert!(c.provider_name("local").1.is_some());
        assert_eq!(c.provider_name("o"), ("o", None));

        // Its own `local`: no alias, no note.
        let c = parse(
            "default_provider = \"local\"\n[providers.models.local]\n\
             kind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n",
        )
        .unwrap();
        assert_eq!(c.default_provider, "local");
        assert_eq!(c.providers["local"].kind(), ProviderKind::OpenAiCompatible);
        assert_eq!(c.providers["mock"].kind(), ProviderKind::Mock);
        assert!(c.notes.is_empty());
        assert_eq!(c.provider_name("local"), ("local", None));

        // A `mock` that is not a mock: `local` is just undefined.
        let e = parse(
            "default_provider = \"local\"\n[providers.models.mock]\n\
             kind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("default_provider: \"local\" is not defined"),
            "{e}"
        );
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        let c = parse("").unwrap();
        let d = Config::defaults(PathBuf::from("/cfg/config.toml"), PathBuf::from("/state"));
        assert_eq!(c, d);
        assert_eq!(c.security, Security::default());
        assert_eq!(c.channels.cli, CliChannel::default());
        assert_eq!(c.tools.http, HttpTool::default());
        assert_eq!(c.prompt, PromptConfig::default());
        assert_eq!((c.memory.busy_timeout_ms, c.memory.context_hits), (5000, 5));
        assert_eq!(
            c.providers["mock"].settings,
            ProviderSettings::Mock(MockSettings::default())
        );
    }

    /// config.example.toml documents every default: loaded, it is the
    /// defaults (its commented-out default values too), so neither can
    /// change without the other.
    #[test]
    fn example_config_holds_the_defaults() {
        let Some(home) = home_dir() else {
            panic!("HOME must be set: the example's paths start with ~");
        };
        let mut text = include_str!("../config.example.toml").to_string();
        for (commented, times) in [
            ("# timeout_secs = 60 ", 2),
            ("# tool_mode = \"auto\" ", 1),
            ("# stream = true ", 2),
            ("# retries = 2 ", 1),
        ] {
            assert_eq!(text.matches(commented).count(), times, "{commented}");
            text = text.replace(commented, &commented[2..]);
        }
        let state = home.join(".latchclaw");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
        let mut c =
            Config::from_text(&text, &path, state.clone()).unwrap_or_else(|e| panic!("{e}"));
        // Its one addition to the defaults: a second provider, whose own
        // keys are examples and the rest defaults.
        let extra = c.providers.remove("openai_compatible");
        let want = ProviderConfig::new(
            "openai_compatible",
            "local-model",
            ProviderSettings::OpenAiCompatible(OpenAiSettings {
                api_key_env: Some("OPENAI_API_KEY".into()),
                ..OpenAiSettings::new("http://localhost:1234/v1")
            }),
        );
        assert_eq!(extra, Some(want));
        assert_eq!(c, Config::defaults(path, state));
    }

    #[test]
    fn a_key_of_another_kind_names_the_kind_and_its_keys() {
        let e = errors(
            "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
             fixture = \"f.toml\"\n\
             [providers.models.m]\nkind = \"mock\"\nbase_url = \"http://h/v1\"\nretries = 3\n\
             [providers.models.m.headers]\nX-Title = \"t\"\n\
             [providers.models.r]\nkind = \"reliable\"\nproviders = [\"m\"]\nstream = false\n\
             [providers.models.t]\nkind = \"router\"\ndefault_route = \"m\"\ncolour = \"blue\"\n",
        );
        let mock_takes = "mock providers take: kind, model, timeout_secs, max_tools, fixture, \
                          record_requests, stream";
        assert_eq!(
            e,
            [
                format!(
                    "providers.models.m.base_url: a key of openai-compatible providers, \
                     not of mock ones; {mock_takes}"
                ),
                format!(
                    "providers.models.m.headers: a key of openai-compatible providers, \
                     not of mock ones; {mock_takes}"
                ),
                format!(
                    "providers.models.m.retries: a key of openai-compatible providers, \
                     not of mock ones; {mock_takes}"
                ),
                "providers.models.o.fixture: a key of mock providers, not of openai-compatible \
                 ones; openai-compatible providers take: kind, model, timeout_secs, max_tools, base_url, \
                 api_key_env, temperature, max_tokens, headers, tool_mode, stream, retries"
                    .into(),
                "providers.models.r.stream: a key of mock and openai-compatible providers, not \
                 of reliable ones; reliable providers take: kind, model, timeout_secs, max_tools, providers"
                    .into(),
                "providers.models.t.colour: unknown key; router providers take: kind, model, \
                 timeout_secs, max_tools, hints, routes, default_route"
                    .to_string(),
            ]
        );
        // Without a kind, only keys no kind takes are reported besides it.
        let e = errors("[providers.models.x]\nfixture = \"f\"\nbase_url = 3\ncolour = 1\n");
        assert_eq!(
            e,
            [
                "providers.models.x.kind: missing; allowed values: mock, openai-compatible, \
                 reliable, router",
                "providers.models.x.colour: unknown key",
            ]
        );
    }

    #[test]
    fn each_kind_keeps_its_own_settings() {
        let c = parse(
            "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
             temperature = 1\nmax_tokens = 9\ntool_mode = \"text\"\nretries = 0\ntimeout_secs = 7\n\
             [providers.models.o.headers]\nX-Title = \"t\"\n\
             [providers.models.m]\nkind = \"mock\"\nfixture = \"f.toml\"\nstream = false\n\
             [providers.models.r]\nkind = \"reliable\"\nproviders = [\"o\", \"m\"]\n\
             [providers.models.t]\nkind = \"router\"\ndefault_route = \"m\"\n\
             [providers.models.t.hints]\nfast = \"o\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let o = &c.providers["o"];
        assert_eq!((o.timeout_secs, o.temperature()), (7, Some(1.0)));
        assert_eq!(
            o.settings,
            ProviderSettings::OpenAiCompatible(OpenAiSettings {
                temperature: Some(1.0),
                max_tokens: Some(9),
                headers: vec![("X-Title".into(), "t".into())],
                tool_mode: ToolMode::Text,
                retries: 0,
                ..OpenAiSettings::new("http://h/v1")
            })
        );
        assert_eq!(
            c.providers["m"].settings,
            ProviderSettings::Mock(MockSettings {
                fixture: Some(PathBuf::from("/cfg/f.toml")),
                record_requests: None,
                stream: false,
            })
        );
        assert_eq!(
            c.providers["r"].settings,
            ProviderSettings::Reliable(ReliableSettings {
                providers: vec!["o".into(), "m".into()]
            })
        );
        assert_eq!(
            c.providers["t"].settings,
            ProviderSettings::Router(RouterSettings {
                hints: vec![("fast".into(), "o".into())],
                routes: Vec::new(),
                default_route: "m".into(),
            })
        );
        let mut m = c.providers["m"].clone();
        m.set_stream(true);
        assert_eq!(m.kind(), ProviderKind::Mock);
        assert_eq!(
            m.settings,
            ProviderSettings::Mock(MockSettings {
                fixture: Some(PathBuf::from("/cfg/f.toml")),
                record_requests: None,
                stream: true,
            })
        );
    }

    #[test]
    fn a_required_key_of_the_wrong_type_is_one_error() {
        let e = errors(
            "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = 1\n\
             [providers.models.r]\nkind = \"reliable\"\nproviders = \"o\"\n\
             [providers.models.t]\nkind = \"router\"\ndefault_route = []\n",
        );
        assert_eq!(
            e,
            [
                "providers.models.o.base_url: expected a string, found integer",
                "providers.models.r.providers: expected a list of strings, found string",
                "providers.models.t.default_route: expected a string, found array",
            ]
        );
        let e = errors("[providers.models.r]\nkind = \"reliable\"\nproviders = []\n");
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("providers.models.r.providers: missing or empty"),
            "{e:?}"
        );
    }

    const RULES: &str = r#"
[[policy.rules]]
name = "no-recursive-copy"
tool = "shell"
program = "cp"
flags = ["recursive"]
options = ["--force"]
paths = ["src/*"]
hosts = "*.example.com"
origin = ["agent", "sop"]
effect = "deny"
reason = "recursive copies need a person"
examples = [{ command = "cp -a src dst", expect = "deny" }, { call = { tool = "file_read", args = { path = "x" } }, expect = "pass" }]
"#;

    #[test]
    fn policy_rules_are_read_with_their_examples() {
        let c = parse(RULES).unwrap();
        let r = &c.policy.rules[0];
        assert_eq!(r.effect, Effect::Deny);
        assert_eq!(r.hosts, ["*.example.com"]);
        assert_eq!(r.origins, ["agent", "sop"]);
        assert_eq!(r.examples.len(), 2);
        assert_eq!(r.examples[0].tool, "shell");
        assert_eq!(r.examples[0].expect, Some(Effect::Deny));
        assert_eq!(r.examples[1].tool, "file_read");
        assert_eq!(r.examples[1].args, serde_json::json!({"path": "x"}));
        assert_eq!(r.examples[1].expect, None);
    }

    #[test]
    fn bad_policy_rules_are_named_by_key_path() {
        let e = parse(
            "[[policy.rules]]\nname = \"a\"\neffect = \"deny\"\nreason = \"r\"\n\
             examples = [{ command = \"x\", expect = \"allow\" }, { expect = \"deny\" }]\n\
             flags = [\"recursive\"]\nbogus = 1\n\
             [[policy.rules]]\nname = \"a\"\neffect = \"ask\"\nreason = \"r\"\n",
        )
        .unwrap_err()
        .errors;
        for want in [
            "policy.rules[0].examples[0].expect: \"allow\" is not this rule's effect",
            "policy.rules[0].examples[1]: give exactly one of `command`",
            "policy.rules[0].program: flags, options and subcommand",
            "policy.rules[0].bogus: unknown key",
            "policy.rules[1].name: \"a\" names an earlier rule too",
        ] {
            assert!(e.iter().any(|x| x.starts_with(want)), "{want}: {e:?}");
        }
        let e = parse("policy = 3\n").unwrap_err().errors;
        assert!(e[0].starts_with("policy: expected a table"), "{e:?}");
        let e = parse("policy = \"/nonexistent/policy.toml\"\n")
            .unwrap_err()
            .errors;
        assert!(
            e[0].starts_with("policy: cannot read /nonexistent/policy.toml"),
            "{e:?}"
        );
    }

    /// Odd values anywhere in a rule are errors, never a panic.
    #[test]
    fn mangled_policy_rules_never_panic() {
        const ODD: [&str; 8] = [
            "\"\"",
            "-1",
            "[]",
            "{}",
            "true",
            "[1, \"a\"]",
            "{ a = 1 }",
            "nan",
        ];
        let lines: Vec<&str> = RULES.lines().collect();
        let mut rng = fastrand::Rng::with_seed(29);
        for _ in 0..500 {
            let mut text = String::new();
            for line in &lines {
                match line.split_once(" = ") {
                    Some((key, _)) if rng.u8(..3) == 0 => {
                        text.push_str(&format!("{key} = {}\n", ODD[rng.usize(..ODD.len())]));
                    }
                    _ => {
                        text.push_str(line);
                        text.push('\n');
                    }
                }
            }
            let _ = parse(&text);
        }
    }
}
