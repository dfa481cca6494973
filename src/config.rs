//! Loading and validating `config.toml`.
//!
//! The file is parsed into a plain TOML table and walked key by key, so that
//! one run reports every error (wrong type, bad enum value, unknown key) with
//! its key path instead of stopping at the first, as serde would.

use crate::error::{Error, Result};
use crate::tools::ToolName;
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
}

/// How an openai-compatible provider passes tools to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolMode {
    /// Native tool calling, switching to text when the server says it has none.
    Auto,
    Native,
    /// Tools described in the system prompt; calls read from `<tool_call>` tags.
    Text,
}

impl ToolMode {
    pub const ALLOWED: &'static [&'static str] = &["auto", "native", "text"];
    fn parse(s: &str) -> Option<ToolMode> {
        match s {
            "auto" => Some(ToolMode::Auto),
            "native" => Some(ToolMode::Native),
            "text" => Some(ToolMode::Text),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        Self::ALLOWED[self as usize]
    }
}

#[derive(Debug, Clone)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    pub model: String,
    pub base_url: Option<String>,
    pub api_key_env: Option<String>,
    /// mock: script file; absent = the built-in script.
    pub fixture: Option<PathBuf>,
    /// mock: append every request it receives to this JSON Lines file.
    pub record_requests: Option<PathBuf>,
    /// reliable: the providers to try, in order.
    pub providers: Vec<String>,
    pub temperature: Option<f64>,
    pub timeout_secs: u64,
    pub max_tokens: Option<u64>,
    /// Extra request headers (never credentials: those come from the env).
    pub headers: Vec<(String, String)>,
    pub tool_mode: ToolMode,
    /// openai-compatible: ask for server-sent events (`agent --no-stream`
    /// turns it off for a run).
    pub stream: bool,
    /// Retries after 408/429/5xx and transport errors.
    pub retries: u32,
    /// router: `--hint NAME` → provider.
    pub hints: Vec<(String, String)>,
    /// router: case-insensitive substring of the message → provider.
    pub routes: Vec<(String, String)>,
    /// router: the provider when no hint or route applies.
    pub default_route: Option<String>,
}

#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this config came from; `None` when no file exists (defaults).
    pub source: Option<PathBuf>,
    pub config_path: PathBuf,
    pub state_dir: PathBuf,
    pub workspace_dir: PathBuf,
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
    pub providers: BTreeMap<String, ProviderConfig>,
    pub cli_enabled: bool,
    pub cli_tools_allow: Vec<ToolName>,
    pub memory_path: PathBuf,
    pub memory_busy_timeout_ms: u64,
    pub memory_context_turns: u32,
    /// Relevant turns from other conversations in the system prompt.
    pub memory_context_hits: u32,
    pub memory_context_bytes: usize,
    pub prompt_base_file: Option<PathBuf>,
    /// `agent --system TEXT`: the base layer for this run (never from a file).
    pub prompt_base_text: Option<String>,
    pub prompt_persona_file: Option<PathBuf>,
    pub prompt_user_file: Option<PathBuf>,
    pub receipts_enabled: bool,
    pub receipts_path: PathBuf,
    pub http_allowed_domains: Vec<String>,
    pub http_allow_private: Vec<String>,
    pub http_max_redirects: u32,
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
}

struct Reader<'a> {
    errors: Vec<String>,
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
        }
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
        match s.t.remove(k)? {
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
        match s.t.remove(k) {
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
        match s.t.remove(k) {
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

    fn float(&mut self, s: &mut Section, k: &str) -> Option<f64> {
        match s.t.remove(k)? {
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
        let v = s.t.remove(k)?;
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
        match s.t.remove(k)? {
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

    fn finish(&mut self, s: Section) {
        for k in s.t.keys() {
            self.err(format!("{}: unknown key", s.key(k)));
        }
    }
}

fn default_forbidden_paths() -> Vec<&'static str> {
    vec!["/etc", "/sys", "/boot", "/proc", "/dev", "/root", "~/.ssh"]
}

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
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => None,
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
            base_dir: &base_dir,
        };
        let cfg = read_config(&mut r, Section::new(table, ""), path, state_dir);
        if r.errors.is_empty() {
            Ok(cfg)
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

    /// The runtime's own files: never reachable through a tool.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut v = vec![
            self.state_dir.clone(),
            self.config_path.clone(),
            self.receipts_path.clone(),
            self.estop_path(),
        ];
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = self.memory_path.clone().into_os_string();
            p.push(suffix);
            v.push(PathBuf::from(p));
        }
        v
    }

    pub fn provider(&self, name: &str) -> Result<&ProviderConfig> {
        self.providers.get(name).ok_or_else(|| {
            Error::usage(format!(
                "unknown provider \"{name}\"; configured providers: {}",
                self.providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

fn read_config(r: &mut Reader, mut top: Section, path: &Path, state_dir: PathBuf) -> Config {
    let workspace_dir = r
        .path(&mut top, "workspace_dir")
        .or_else(|| home_dir().map(|h| h.join("latchclaw-workspace")))
        .unwrap_or_else(|| state_dir.with_file_name("latchclaw-workspace"));
    if workspace_dir.starts_with(&state_dir) {
        r.err(format!(
            "workspace_dir: {} is inside the state directory {}, which tools can never reach",
            workspace_dir.display(),
            state_dir.display()
        ));
    }
    let default_provider = r
        .string(&mut top, "default_provider")
        .unwrap_or_else(|| "local".into());
    let default_model = r
        .string(&mut top, "default_model")
        .unwrap_or_else(|| "mock".into());
    let max_tool_rounds = r.int(&mut top, "max_tool_rounds", 5, 1, 100) as u32;
    let max_response_bytes = r.int(&mut top, "max_response_bytes", 1 << 20, 1024, 1 << 30);
    let tool_timeout_secs = r.int(&mut top, "tool_timeout_secs", 30, 1, 3600);
    let shell_timeout_secs = r.int(&mut top, "shell_timeout_secs", 15, 1, 3600);
    let http_timeout_secs = r.int(&mut top, "http_timeout_secs", 20, 1, 3600);
    let tool_output_max_bytes =
        r.int(&mut top, "tool_output_max_bytes", 64 * 1024, 256, 16 << 20) as usize;
    let file_write_max_bytes =
        r.int(&mut top, "file_write_max_bytes", 1 << 20, 1, 1 << 30) as usize;
    let max_input_bytes = r.int(&mut top, "max_input_bytes", 1 << 20, 16, 1 << 30) as usize;

    let mut sec = r
        .table(&mut top, "security")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "security"));
    let autonomy = r
        .enum_str(&mut sec, "autonomy", Autonomy::parse, Autonomy::ALLOWED)
        .unwrap_or(Autonomy::Supervised);
    let workspace_only = r.boolean(&mut sec, "workspace_only", true);
    let forbidden_raw = r
        .list(&mut sec, "forbidden_paths")
        .unwrap_or_else(|| strings(&default_forbidden_paths()));
    let key = sec.key("forbidden_paths");
    let forbidden_paths = forbidden_raw
        .iter()
        .enumerate()
        .filter_map(|(i, p)| r.path_value(&format!("{key}[{i}]"), p))
        .collect();
    let forbidden_commands = r
        .list(&mut sec, "forbidden_commands")
        .unwrap_or_else(|| strings(DEFAULT_FORBIDDEN_COMMANDS));
    let audit_log = r.boolean(&mut sec, "audit_log", true);
    let shell_allowlist = r
        .list(&mut sec, "shell_allowlist")
        .unwrap_or_else(|| strings(DEFAULT_SHELL_ALLOWLIST));
    let shell_env_passthrough = r
        .list(&mut sec, "shell_env_passthrough")
        .unwrap_or_default();
    let confinement = r
        .enum_str(
            &mut sec,
            "confinement",
            Confinement::parse,
            Confinement::ALLOWED,
        )
        .unwrap_or(Confinement::BestEffort);
    r.finish(sec);

    let providers = read_providers(r, &mut top, &default_model);
    if !providers.contains_key(&default_provider) {
        r.err(format!(
            "default_provider: \"{default_provider}\" is not defined; defined providers: {}",
            providers.keys().cloned().collect::<Vec<_>>().join(", ")
        ));
    }

    let (cli_enabled, cli_tools_allow) = read_channels(r, &mut top);

    let mut mem = r
        .table(&mut top, "memory")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "memory"));
    r.enum_str(
        &mut mem,
        "backend",
        |s| (s == "sqlite").then_some(()),
        &["sqlite"],
    );
    let memory_path = r
        .path(&mut mem, "path")
        .unwrap_or_else(|| state_dir.join("memory.sqlite"));
    let memory_busy_timeout_ms = r.int(&mut mem, "busy_timeout_ms", 5000, 0, 600_000);
    let memory_context_turns = r.int(&mut mem, "context_turns", 20, 0, 1000) as u32;
    let memory_context_hits = r.int(&mut mem, "context_hits", 5, 0, 100) as u32;
    let memory_context_bytes = r.int(&mut mem, "context_bytes", 4000, 0, 1 << 20) as usize;
    r.finish(mem);

    let mut rec = r
        .table(&mut top, "receipts")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "receipts"));
    let receipts_enabled = r.boolean(&mut rec, "enabled", true);
    let receipts_path = r
        .path(&mut rec, "path")
        .unwrap_or_else(|| state_dir.join("tool_receipts.log"));
    r.finish(rec);

    let mut prompt = r
        .table(&mut top, "prompt")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "prompt"));
    let prompt_base_file = r.path(&mut prompt, "base_file");
    let prompt_persona_file = r.path(&mut prompt, "persona_file");
    let prompt_user_file = r.path(&mut prompt, "user_file");
    r.finish(prompt);

    let mut tools = r
        .table(&mut top, "tools")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "tools"));
    let mut http = r
        .table(&mut tools, "http")
        .unwrap_or_else(|| Section::new(toml::Table::new(), "tools.http"));
    let http_allowed_domains = r.list(&mut http, "allowed_domains").unwrap_or_default();
    let http_allow_private = r.list(&mut http, "allow_private").unwrap_or_default();
    let http_max_redirects = r.int(&mut http, "max_redirects", 5, 0, 20) as u32;
    r.finish(http);
    r.finish(tools);
    r.finish(top);

    Config {
        source: None,
        config_path: path.to_path_buf(),
        state_dir,
        workspace_dir,
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
        security: Security {
            autonomy,
            workspace_only,
            forbidden_paths,
            forbidden_commands,
            audit_log,
            shell_allowlist,
            shell_env_passthrough,
            confinement,
        },
        providers,
        cli_enabled,
        cli_tools_allow,
        memory_path,
        memory_busy_timeout_ms,
        memory_context_turns,
        memory_context_hits,
        memory_context_bytes,
        prompt_base_file,
        prompt_base_text: None,
        prompt_persona_file,
        prompt_user_file,
        receipts_enabled,
        receipts_path,
        http_allowed_domains,
        http_allow_private,
        http_max_redirects,
    }
}

fn builtin_local(default_model: &str) -> ProviderConfig {
    ProviderConfig {
        name: "local".into(),
        kind: ProviderKind::Mock,
        model: default_model.into(),
        base_url: None,
        api_key_env: None,
        fixture: None,
        record_requests: None,
        providers: Vec::new(),
        temperature: None,
        timeout_secs: 60,
        max_tokens: None,
        headers: Vec::new(),
        tool_mode: ToolMode::Auto,
        stream: true,
        retries: 2,
        hints: Vec::new(),
        routes: Vec::new(),
        default_route: None,
    }
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
                let Some(mut p) = r.table(&mut models, &name) else {
                    continue;
                };
                let kind = r.enum_str(&mut p, "kind", ProviderKind::parse, ProviderKind::ALLOWED);
                if kind.is_none() && !r.errors.iter().any(|e| e.starts_with(&p.key("kind"))) {
                    r.err(format!(
                        "{}: missing; allowed values: {}",
                        p.key("kind"),
                        ProviderKind::ALLOWED.join(", ")
                    ));
                }
                let cfg = ProviderConfig {
                    name: name.clone(),
                    kind: kind.unwrap_or(ProviderKind::Mock),
                    model: r
                        .string(&mut p, "model")
                        .unwrap_or_else(|| default_model.into()),
                    base_url: r.string(&mut p, "base_url"),
                    api_key_env: r.string(&mut p, "api_key_env"),
                    fixture: r.path(&mut p, "fixture"),
                    record_requests: r.path(&mut p, "record_requests"),
                    providers: r.list(&mut p, "providers").unwrap_or_default(),
                    temperature: r.float(&mut p, "temperature"),
                    timeout_secs: r.int(&mut p, "timeout_secs", 60, 1, 3600),
                    max_tokens: p
                        .t
                        .contains_key("max_tokens")
                        .then(|| r.int(&mut p, "max_tokens", 1024, 1, 10_000_000)),
                    headers: r.string_map(&mut p, "headers"),
                    tool_mode: r
                        .enum_str(&mut p, "tool_mode", ToolMode::parse, ToolMode::ALLOWED)
                        .unwrap_or(ToolMode::Auto),
                    stream: r.boolean(&mut p, "stream", true),
                    retries: r.int(&mut p, "retries", 2, 0, 10) as u32,
                    hints: r.string_map(&mut p, "hints"),
                    routes: r.string_map(&mut p, "routes"),
                    default_route: r.string(&mut p, "default_route"),
                };
                check_provider(r, &p, &cfg);
                r.finish(p);
                if kind.is_some() {
                    out.insert(name, cfg);
                }
            }
            r.finish(models);
        }
        r.finish(providers);
    }
    out.entry("local".into())
        .or_insert_with(|| builtin_local(default_model));
    // Links between providers are checked once every provider is known.
    let names: Vec<String> = out.keys().cloned().collect();
    for p in out.values() {
        let route_targets = p
            .hints
            .iter()
            .map(|(k, v)| (format!("hints.{k}"), v))
            .chain(p.routes.iter().map(|(k, v)| (format!("routes.\"{k}\""), v)))
            .chain(
                p.default_route
                    .iter()
                    .map(|v| ("default_route".to_string(), v)),
            );
        for (key, target) in route_targets {
            if target == &p.name || !names.contains(target) {
                r.err(format!(
                    "providers.models.{}.{key}: \"{target}\" is not another defined provider; defined providers: {}",
                    p.name,
                    names.join(", ")
                ));
            }
        }
        for (i, target) in p.providers.iter().enumerate() {
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
    out
}

fn check_provider(r: &mut Reader, p: &Section, cfg: &ProviderConfig) {
    match cfg.kind {
        ProviderKind::OpenAiCompatible => match &cfg.base_url {
            None => r.err(format!(
                "{}: missing; an openai-compatible provider needs its server's URL, e.g. \"http://localhost:1234/v1\"",
                p.key("base_url")
            )),
            Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => r.err(format!(
                "{}: \"{u}\" must start with http:// or https://",
                p.key("base_url")
            )),
            _ => {}
        },
        ProviderKind::Reliable if cfg.providers.is_empty() => r.err(format!(
            "{}: missing or empty; a reliable provider needs the providers to try, in order",
            p.key("providers")
        )),
        ProviderKind::Router if cfg.default_route.is_none() => r.err(format!(
            "{}: missing; a router needs the provider to use when no hint or route applies",
            p.key("default_route")
        )),
        _ => {}
    }
    for (name, value) in &cfg.headers {
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
    if let Some(env) = &cfg.api_key_env
        && (env.is_empty() || !env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        r.err(format!(
            "{}: \"{env}\" is not an environment variable name (letters, digits, _); \
             put the key in the environment, never in the config",
            p.key("api_key_env")
        ));
    }
    if let Some(t) = cfg.temperature
        && !(0.0..=2.0).contains(&t)
    {
        r.err(format!(
            "{}: {t} is out of range; allowed: 0.0 to 2.0",
            p.key("temperature")
        ));
    }
}

fn read_channels(r: &mut Reader, top: &mut Section) -> (bool, Vec<ToolName>) {
    let mut enabled = true;
    let mut allow: Vec<ToolName> = ToolName::ALL
        .into_iter()
        .filter(|t| t.on_by_default())
        .collect();
    if let Some(mut ch) = r.table(top, "channels") {
        if let Some(mut cli) = r.table(&mut ch, "cli") {
            enabled = r.boolean(&mut cli, "enabled", true);
            if let Some(list) = r.list(&mut cli, "tools_allow") {
                allow.clear();
                for (i, t) in list.iter().enumerate() {
                    match ToolName::parse(t) {
                        Some(t) if !allow.contains(&t) => allow.push(t),
                        Some(_) => {}
                        None => r.err(format!(
                            "channels.cli.tools_allow[{i}]: unknown tool \"{t}\"; known tools: {}",
                            ToolName::list()
                        )),
                    }
                }
            }
            r.finish(cli);
        }
        r.finish(ch);
    }
    (enabled, allow)
}

#[cfg(test)]
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
        assert_eq!(c.memory_path, PathBuf::from("/state/memory.sqlite"));
        assert_eq!(c.receipts_path, PathBuf::from("/state/tool_receipts.log"));
        assert_eq!(c.providers["local"].kind, ProviderKind::Mock);
        assert!(c.cli_tools_allow.contains(&ToolName::FileList));
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
    fn stream_is_a_boolean_on_by_default() {
        let base =
            "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n";
        assert!(parse(base).unwrap().providers["o"].stream);
        assert!(!parse(&format!("{base}stream = false\n")).unwrap().providers["o"].stream);
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
        assert_eq!(c.memory_path, PathBuf::from("/abs/m.db"));
    }
}
