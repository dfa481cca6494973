//! The security gate: the one place that decides whether a tool call runs.
//!
//! Every path that can run a tool (the agent loop, `tool run`) calls
//! [`Gate::decide`] and obeys its verdict; tools never decide for themselves.
//! Paths are judged after resolving symlinks ourselves, so `..`, `~`,
//! absolute paths and links that leave the workspace are all seen for what
//! they point at.

pub mod confine;
pub mod git;
pub mod grammar;
pub mod judge;
pub mod net;
pub mod options;
pub mod plan;
pub mod rate;
pub mod redact;
pub mod secret_files;

use crate::config::{Autonomy, Config};
use crate::types::ToolName;
use serde_json::Value;
use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// More symlink hops than this and we treat the path as a loop.
const MAX_SYMLINK_HOPS: u32 = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// The gate's answer: run it, ask the operator first, or refuse it, and
/// then of what kind the refusal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny(Refusal),
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny(_) => "deny",
        }
    }
}

/// Why the gate refused a call, by kind (the reason says it in words):
/// what `policy check --json`, tests and scripts match on instead of prose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The emergency stop is engaged.
    Estop,
    /// The tool is disabled or not configured (`tools.NAME.enabled`,
    /// `[tools.web_search]`).
    Unavailable,
    /// The channel does not offer the tool (`channels.cli.tools_allow`).
    NotOnChannel,
    /// The arguments are malformed or over a limit.
    Arguments,
    /// A path the policy refuses: outside the workspace, forbidden,
    /// protected, secret-named, a link out.
    Path,
    /// A URL or address the network policy refuses.
    Network,
    /// A shell command (or the git tool's argv) the judge refuses.
    Command,
    /// `confinement = "required"` and the kernel wall is not there.
    Confinement,
    /// The autonomy level does not run a call of this risk.
    Autonomy,
    /// Over the tool's `rate_limit`.
    RateLimit,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Estop => "estop",
            Refusal::Unavailable => "unavailable",
            Refusal::NotOnChannel => "not_on_channel",
            Refusal::Arguments => "arguments",
            Refusal::Path => "path",
            Refusal::Network => "network",
            Refusal::Command => "command",
            Refusal::Confinement => "confinement",
            Refusal::Autonomy => "autonomy",
            Refusal::RateLimit => "rate_limit",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Decision {
    pub risk: Risk,
    pub verdict: Verdict,
    pub reason: String,
    /// True when the emergency stop caused the denial.
    pub estop: bool,
    /// The resolved path the tool must use (tools that take a path).
    pub path: Option<PathBuf>,
    /// shell: the plan the runner executes, exactly as judged.
    pub plan: Option<plan::Plan>,
}

impl Risk {
    pub fn parse(s: &str) -> Option<Risk> {
        [Risk::Low, Risk::Medium, Risk::High]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

impl serde::Serialize for Risk {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Decision {
    /// A call that waits for the operator (a pending approval decided later).
    pub fn ask(risk: Risk, reason: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Ask,
            ..Decision::deny(risk, Refusal::Arguments, reason)
        }
    }

    /// A refusal of `kind`.
    pub fn deny(risk: Risk, kind: Refusal, reason: impl Into<String>) -> Decision {
        Decision {
            risk,
            verdict: Verdict::Deny(kind),
            reason: reason.into(),
            estop: false,
            path: None,
            plan: None,
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} risk): {}",
            self.verdict.as_str(),
            self.risk.as_str(),
            self.reason
        )
    }
}

/// A directory inside the workspace that no tool writes, at any depth:
/// what it holds runs code or instructs latchclaw later.
#[derive(Debug)]
pub struct ProtectedDir {
    /// Its name: any path component so named, inside the workspace.
    pub name: &'static str,
    /// Why, as a refusal says it.
    pub why: &'static str,
    /// Work-tree writes reach into it (git checks `.latchclaw/` out like
    /// any directory, never `.git/`): a write throughout a directory that
    /// holds the workspace's own is refused too.
    pub tree_writes_reach: bool,
}

/// The workspace's configuration directories, protected in one place: the
/// gate refuses every write into them (`Gate::check_write_path`,
/// `refused_lexically`, `write_refused_beneath`), and a kernel sandbox that
/// makes them read-only in every child takes them from here.
pub const PROTECTED_WORKSPACE_DIRS: &[ProtectedDir] = &[
    ProtectedDir {
        name: ".git",
        why: "where hooks and config run code",
        tree_writes_reach: false,
    },
    ProtectedDir {
        name: ".latchclaw",
        why: "which latchclaw reads as the operator's configuration (its skills)",
        tree_writes_reach: true,
    },
];

/// The protected directory `rel` (a path relative to the workspace) is in,
/// or is.
pub fn protected_workspace_dir(rel: &Path) -> Option<&'static ProtectedDir> {
    rel.components().find_map(|c| {
        PROTECTED_WORKSPACE_DIRS
            .iter()
            .find(|d| c.as_os_str() == d.name)
    })
}

/// What the gate needs to know, resolved once per process.
#[derive(Debug, Clone)]
pub struct Gate {
    autonomy: Autonomy,
    workspace_only: bool,
    /// Resolved on first use: a text-only turn never touches the file system
    /// for the gate.
    workspace: OnceCell<Result<PathBuf, String>>,
    workspace_raw: PathBuf,
    /// Each forbidden path as written and as resolved (on first use).
    forbidden: OnceCell<Vec<PathBuf>>,
    forbidden_raw: Vec<PathBuf>,
    protected: OnceCell<Vec<PathBuf>>,
    protected_raw: Vec<PathBuf>,
    estop_path: PathBuf,
    tools_allow: Vec<ToolName>,
    home: Option<PathBuf>,
    forbidden_commands: Vec<String>,
    shell_allowlist: Vec<String>,
    /// The environment every shell child gets (and `$NAME` expands from).
    child_env: OnceCell<Vec<(String, String)>>,
    /// Programs already looked up on the shell's PATH.
    programs: std::cell::RefCell<Vec<(String, Option<PathBuf>)>>,
    /// What git said of its repositories, for the decision being made.
    git_views: git::repo::Views,
    env_passthrough: Vec<String>,
    secret_envs: Vec<String>,
    file_write_max_bytes: usize,
    confinement: crate::config::Confinement,
    net: net::NetPolicy,
    secret_allow: secret_files::Allow,
    /// `memory.categories`, for `memory_store` and `memory_recall`.
    memory_categories: Vec<String>,
    /// `[tools.NAME] enabled = false`.
    disabled: Vec<ToolName>,
    web_search: Option<crate::config::WebSearch>,
    /// The tools with a `rate_limit`.
    rate_limits: Vec<(ToolName, crate::config::RateLimit)>,
}

/// Whether the emergency stop is on. Anything but "not found" counts as on,
/// so an unreadable state directory fails closed.
pub fn estop_engaged(path: &Path) -> Option<String> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Some(format!(
            "emergency stop is on ({} exists; `latchclaw estop --clear` lifts it)",
            path.display()
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => Some(format!(
            "emergency stop state cannot be checked ({}: {e}); treating it as on",
            path.display()
        )),
    }
}

/// Turns the emergency stop on: the ESTOP file, saying when and `why`.
pub fn engage_estop(cfg: &crate::config::Config, why: &str) -> crate::error::Result<()> {
    let path = cfg.estop_path();
    crate::util::private_dir(&cfg.state_dir)?;
    let line = format!("engaged {} {why}", crate::util::now_rfc3339());
    std::fs::write(&path, format!("{}\n", line.trim_end())).map_err(|e| {
        crate::error::Error::runtime(format!("cannot write {}: {e}", path.display()))
    })?;
    log::warn!(target: "event::estop_triggered", "path={} {why}", path.display());
    Ok(())
}

/// Turns the emergency stop off; whether it was on.
pub fn clear_estop(cfg: &crate::config::Config) -> crate::error::Result<bool> {
    let path = cfg.estop_path();
    match std::fs::remove_file(&path) {
        Ok(()) => {
            log::warn!(target: "event::estop_cleared", "path={}", path.display());
            Ok(true)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(crate::error::Error::runtime(format!(
            "cannot remove {}: {e}",
            path.display()
        ))),
    }
}

/// Both spellings of a path: as given, and with symlinks resolved.
fn both_forms(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        // Clean (no `.`, `..`, doubled or trailing `/`), as `under` needs.
        let p = lexical_normalize(&p);
        if let Ok(r) = resolve(&p)
            && r != p
        {
            out.push(r);
        }
        out.push(p);
    }
    out
}

/// `p.starts_with(f)` for clean paths, compared as bytes: every path a
/// call names is checked against each forbidden and protected entry in
/// both forms, and walking `Components` for each pair was a sixth of a
/// decision's time.
fn under(p: &Path, f: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, f) = (p.as_os_str().as_bytes(), f.as_os_str().as_bytes());
    p.starts_with(f) && (p.len() == f.len() || f.ends_with(b"/") || p[f.len()] == b'/')
}

impl Gate {
    pub fn new(cfg: &Config, tools_allow: &[ToolName]) -> Gate {
        Gate {
            autonomy: cfg.security.autonomy,
            workspace_only: cfg.security.workspace_only,
            workspace: OnceCell::new(),
            workspace_raw: cfg.workspace_dir.clone(),
            forbidden: OnceCell::new(),
            forbidden_raw: cfg.security.forbidden_paths.clone(),
            protected: OnceCell::new(),
            // /proc too, whatever forbidden_paths says: /proc/PID/environ of
            // this very process holds the provider keys.
            protected_raw: cfg
                .protected_paths()
                .into_iter()
                .chain([PathBuf::from("/proc")])
                .collect(),
            estop_path: cfg.estop_path(),
            tools_allow: tools_allow.to_vec(),
            home: crate::util::home_dir(),
            forbidden_commands: cfg
                .security
                .forbidden_commands
                .iter()
                .map(|c| c.to_lowercase())
                .collect(),
            shell_allowlist: cfg.security.shell_allowlist.clone(),
            child_env: OnceCell::new(),
            programs: Default::default(),
            git_views: Default::default(),
            env_passthrough: cfg.security.shell_env_passthrough.clone(),
            secret_envs: cfg
                .providers
                .values()
                .filter_map(|p| p.api_key_env().map(String::from))
                .chain(
                    cfg.tools
                        .web_search
                        .as_ref()
                        .and_then(|w| w.api_key_env.clone()),
                )
                .collect(),
            file_write_max_bytes: cfg.file_write_max_bytes,
            confinement: cfg.security.confinement,
            net: net::NetPolicy {
                allowed_domains: cfg.tools.http.allowed_domains.clone(),
                allow_private: cfg.tools.http.allow_private.clone(),
            },
            secret_allow: secret_files::Allow::new(&cfg.security.secret_files_allow),
            memory_categories: cfg.memory.categories.clone(),
            disabled: cfg
                .tools
                .middleware
                .iter()
                .filter(|(_, m)| m.enabled == Some(false))
                .map(|(t, _)| *t)
                .collect(),
            web_search: cfg.tools.web_search.clone(),
            rate_limits: cfg
                .tools
                .middleware
                .iter()
                .filter(|(_, m)| m.rate_limit.is_set())
                .map(|(t, m)| (*t, m.rate_limit))
                .collect(),
        }
    }

    /// Whether one more call of `tool` is within its `rate_limit`: `None`
    /// admits it (and, with `record`, counts it), `Some` is the refusal.
    /// A tool without a limit is admitted without counting.
    pub fn rate_limited(
        &self,
        tool: ToolName,
        counter: &dyn rate::CallCounter,
        record: bool,
    ) -> crate::error::Result<Option<String>> {
        let Some((_, limit)) = self.rate_limits.iter().find(|(t, _)| *t == tool) else {
            return Ok(None);
        };
        counter.admit(tool, limit.per_hour.is_some(), record, &mut |c| {
            rate::over_limit(tool, limit, c)
        })
    }

    /// Why `tool` cannot be called at all, whatever the channel offers.
    fn unavailable(&self, tool: ToolName) -> Option<String> {
        if let Some(why) = crate::features::tool_not_built(tool) {
            return Some(why);
        }
        if self.disabled.contains(&tool) {
            return Some(format!(
                "tool \"{tool}\" is disabled (tools.{tool}.enabled = false)"
            ));
        }
        if tool == ToolName::WebSearch && self.web_search.is_none() {
            return Some(crate::types::args::NOT_CONFIGURED.to_string());
        }
        None
    }

    pub fn net_policy(&self) -> &net::NetPolicy {
        &self.net
    }

    /// The same gate under another autonomy level (`policy check --autonomy`).
    pub fn with_autonomy(mut self, autonomy: Autonomy) -> Gate {
        self.autonomy = autonomy;
        self
    }

    pub fn estop_path(&self) -> &Path {
        &self.estop_path
    }

    pub fn autonomy(&self) -> Autonomy {
        self.autonomy
    }

    fn workspace_result(&self) -> &Result<PathBuf, String> {
        self.workspace.get_or_init(|| {
            std::fs::canonicalize(&self.workspace_raw).map_err(|e| {
                format!(
                    "the workspace {} is not usable ({e}); `latchclaw init` creates it",
                    self.workspace_raw.display()
                )
            })
        })
    }

    fn forbidden(&self) -> &[PathBuf] {
        self.forbidden
            .get_or_init(|| both_forms(self.forbidden_raw.iter().cloned()))
    }

    fn protected(&self) -> &[PathBuf] {
        self.protected
            .get_or_init(|| both_forms(self.protected_raw.iter().cloned()))
    }

    pub fn workspace(&self) -> Result<&Path, String> {
        self.workspace_result().as_deref().map_err(Clone::clone)
    }

    /// The single decision point: risk, verdict and reason for one call.
    pub fn decide(&self, tool: ToolName, args: &Value) -> Decision {
        // git is asked afresh for each decision: a command may have run since.
        self.git_views.clear();
        let base = base_risk(tool);
        if let Some(reason) = estop_engaged(&self.estop_path) {
            return Decision {
                estop: true,
                ..Decision::deny(base, Refusal::Estop, reason)
            };
        }
        if let Some(why) = self.unavailable(tool) {
            return Decision::deny(base, Refusal::Unavailable, why);
        }
        if !self.tools_allow.contains(&tool) {
            return Decision::deny(
                base,
                Refusal::NotOnChannel,
                format!(
                    "tool \"{tool}\" is not enabled on this channel (channels.cli.tools_allow: {})",
                    self.tools_enabled()
                ),
            );
        }
        let Some(obj) = args.as_object() else {
            return Decision::deny(
                base,
                Refusal::Arguments,
                "tool arguments must be a JSON object",
            );
        };
        let string_arg = |key: &str| match obj.get(key) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(_) => Err(Decision::deny(
                base,
                Refusal::Arguments,
                format!("\"{key}\" must be a string"),
            )),
            None => Err(Decision::deny(
                base,
                Refusal::Arguments,
                format!("\"{key}\" is required"),
            )),
        };
        let mut plan = None;
        let (risk, path, why) = match tool {
            ToolName::Time | ToolName::MemorySearch => (Risk::Low, None, String::new()),
            // Asking changes nothing; the question's size is the one limit.
            ToolName::AskUser => match crate::types::args::question(args) {
                Ok(_) => (Risk::Low, None, String::new()),
                Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
            },
            ToolName::FileList | ToolName::FileRead | ToolName::Grep | ToolName::PdfExtract => {
                let raw = match (tool, obj.get("path")) {
                    (ToolName::FileList | ToolName::Grep, None) => ".",
                    _ => match string_arg("path") {
                        Ok(p) => p,
                        Err(d) => return d,
                    },
                };
                match self.check_path(raw) {
                    Ok(p) => (Risk::Low, Some(p), String::new()),
                    Err(reason) => return Decision::deny(base, Refusal::Path, reason),
                }
            }
            ToolName::FileWrite => {
                let (raw, content) = match (string_arg("path"), string_arg("content")) {
                    (Ok(p), Ok(c)) => (p, c),
                    (Err(d), _) | (_, Err(d)) => return d,
                };
                if content.len() > self.file_write_max_bytes {
                    return Decision::deny(
                        base,
                        Refusal::Arguments,
                        format!(
                            "content is {} bytes; the limit is {} (file_write_max_bytes)",
                            content.len(),
                            self.file_write_max_bytes
                        ),
                    );
                }
                match self.check_write_path(raw) {
                    Ok(p) => (Risk::Medium, Some(p), String::new()),
                    Err(reason) => return Decision::deny(base, Refusal::Path, reason),
                }
            }
            ToolName::Http => {
                let url = match string_arg("url") {
                    Ok(u) => u,
                    Err(d) => return d,
                };
                if let Some(m) = obj.get("method").and_then(Value::as_str)
                    && !m.eq_ignore_ascii_case("GET")
                {
                    return Decision::deny(
                        Risk::High,
                        Refusal::Arguments,
                        format!("method {m} is not supported; only GET"),
                    );
                }
                match self.check_http(url) {
                    Ok(()) => (Risk::Low, None, "GET on an allowed domain".to_string()),
                    Err(reason) => return Decision::deny(Risk::High, Refusal::Network, reason),
                }
            }
            // Judged as `http` judges a GET of the request URL: the query
            // leaves the machine only for a host the operator allowed.
            ToolName::WebSearch => {
                let (query, limit) = match crate::types::args::read_args(args) {
                    Ok(a) => a,
                    Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
                };
                let Some(ws) = &self.web_search else {
                    return Decision::deny(
                        base,
                        Refusal::Unavailable,
                        crate::types::args::NOT_CONFIGURED,
                    );
                };
                let url = net::web_search_url(ws, query, limit);
                match self.check_http(&url) {
                    Ok(()) => (
                        Risk::Low,
                        None,
                        format!("{} search on an allowed domain", ws.provider.as_str()),
                    ),
                    Err(reason) => {
                        return Decision::deny(
                            Risk::High,
                            Refusal::Network,
                            format!("web_search ({}): {reason}", ws.url),
                        );
                    }
                }
            }
            ToolName::Git => {
                if self.confinement == crate::config::Confinement::Required
                    && let Some(why) = confine::status().unavailable
                {
                    return Decision::deny(
                        base,
                        Refusal::Confinement,
                        format!(
                            "confinement = \"required\" but this kernel has no Landlock ({why}); \
                             git calls are refused"
                        ),
                    );
                }
                let argv = match git::tool_args::argv(args, self) {
                    Ok(a) => a,
                    Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
                };
                // Judged as the shell judges `git …`; only the verdict's
                // risk differs: the argv is one of the tool's read-only
                // forms, and a reading the table calls a write is refused.
                let a = judge::analyze_tool_argv(&argv, self);
                plan = a.plan;
                match a.judgement {
                    judge::Judgement::Deny(reason) => {
                        return Decision::deny(base, Refusal::Command, reason);
                    }
                    judge::Judgement::Risk(..) => {
                        (Risk::Low, None, format!("read-only `{}`", argv.join(" ")))
                    }
                }
            }
            // Notes stay in latchclaw's own database: storing one is low
            // risk but a write (refused under readonly); forgetting one
            // destroys what the operator may want kept, so it is asked for.
            ToolName::MemoryStore => {
                match crate::types::args::store_args(args, &self.memory_categories) {
                    Ok(_) => (Risk::Low, None, String::new()),
                    Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
                }
            }
            ToolName::MemoryRecall => {
                match crate::types::args::recall_filter(args, &self.memory_categories) {
                    Ok(_) => (Risk::Low, None, String::new()),
                    Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
                }
            }
            ToolName::MemoryForget => match crate::types::args::forget_id(args) {
                Ok(_) => (Risk::Medium, None, String::new()),
                Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
            },
            ToolName::Shell => {
                let cmd = match string_arg("command") {
                    Ok(c) => c,
                    Err(d) => return d,
                };
                if self.confinement == crate::config::Confinement::Required
                    && let Some(why) = confine::status().unavailable
                {
                    return Decision::deny(
                        Risk::High,
                        Refusal::Confinement,
                        format!(
                            "confinement = \"required\" but this kernel has no Landlock ({why}); \
                             shell calls are refused"
                        ),
                    );
                }
                let a = judge::analyze(cmd, self);
                plan = a.plan;
                match a.judgement {
                    judge::Judgement::Deny(reason) => {
                        return Decision::deny(Risk::High, Refusal::Command, reason);
                    }
                    judge::Judgement::Risk(r, why) => (r, None, why),
                }
            }
        };
        let read_only = match tool {
            ToolName::Time
            | ToolName::MemorySearch
            | ToolName::FileList
            | ToolName::FileRead
            | ToolName::Http
            | ToolName::WebSearch
            | ToolName::Git
            | ToolName::Grep
            | ToolName::MemoryRecall
            | ToolName::AskUser
            | ToolName::PdfExtract => true,
            ToolName::Shell => risk == Risk::Low,
            ToolName::FileWrite | ToolName::MemoryStore | ToolName::MemoryForget => false,
        };
        let (verdict, mut reason) = verdict_for(self.autonomy, risk, read_only);
        if !why.is_empty() {
            reason = format!("{reason}: {why}");
        }
        Decision {
            risk,
            verdict,
            reason,
            estop: false,
            path,
            plan,
        }
    }

    /// The URL checks, then where the name points now; the tool checks the
    /// addresses again when it connects.
    fn check_http(&self, url: &str) -> Result<(), String> {
        use std::net::ToSocketAddrs;
        let target = self.net.check_url(url)?;
        if target.ip.is_some() {
            return Ok(());
        }
        let addrs = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", target.host))?;
        for a in addrs {
            self.net.check_ip(&target.host, a.ip())?;
        }
        Ok(())
    }

    /// The read policy plus what writing adds: no symlink as the target, no
    /// directory, nothing inside a protected directory (`.git`, `.latchclaw`:
    /// [`PROTECTED_WORKSPACE_DIRS`]).
    pub fn check_write_path(&self, raw: &str) -> Result<PathBuf, String> {
        self.check_write(raw, false)
    }

    /// [`Gate::check_write_path`] for a program that writes into or
    /// throughout a directory (`cp f dir/`, `mkdir -p`, git in `.`).
    pub(crate) fn check_write_dir_ok(&self, raw: &str) -> Result<PathBuf, String> {
        self.check_write(raw, true)
    }

    fn check_write(&self, raw: &str, dir_ok: bool) -> Result<PathBuf, String> {
        let resolved = self.check_path(raw)?;
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let written = lexical_normalize(&self.absolute(raw)?);
        if std::fs::symlink_metadata(&written).is_ok_and(|m| m.file_type().is_symlink())
            || std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(format!(
                "\"{raw}\" is a symlink; writing through a symlink is refused"
            ));
        }
        if !dir_ok && resolved.is_dir() {
            return Err(format!("\"{raw}\" is a directory"));
        }
        let within = |p: &Path| protected_workspace_dir(p.strip_prefix(workspace).unwrap_or(p));
        if let Some(d) = within(&resolved).or_else(|| within(&written)) {
            return Err(format!(
                "\"{raw}\" is inside a {} directory, {}",
                d.name, d.why
            ));
        }
        Ok(resolved)
    }

    /// A path argument made absolute (`~` expanded, relative to the
    /// workspace), before any symlink is followed.
    fn absolute(&self, raw: &str) -> Result<PathBuf, String> {
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let expanded = if let Some(rest) = raw.strip_prefix('~') {
            if !(rest.is_empty() || rest.starts_with('/')) {
                return Err(format!("\"{raw}\": \"~user\" paths are not allowed"));
            }
            let home = self.home.as_ref().ok_or("\"~\" used but HOME is not set")?;
            home.join(rest.trim_start_matches('/'))
        } else {
            PathBuf::from(raw)
        };
        Ok(workspace.join(expanded))
    }

    /// Resolves a tool's path argument and checks it against the path
    /// policy. Returns the resolved path the tool must use.
    pub fn check_path(&self, raw: &str) -> Result<PathBuf, String> {
        if raw.contains('\0') {
            return Err("path contains a NUL byte".into());
        }
        if raw.is_empty() {
            return Err("path is empty".into());
        }
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let absolute = self.absolute(raw)?;
        let lexical = lexical_normalize(&absolute);
        // The workspace is canonical: resolve only what lies below it.
        let resolved = match absolute.strip_prefix(workspace) {
            Ok(rest) => resolve_from(workspace.clone(), rest),
            Err(_) => resolve(&absolute),
        }
        .map_err(|e| format!("\"{raw}\" cannot be resolved: {e}"))?;
        for p in [&lexical, &resolved] {
            if let Some(hit) = self.protected().iter().find(|s| under(p, s)) {
                return Err(format!(
                    "\"{raw}\" is latchclaw's own state ({}), which tools can never reach",
                    hit.display()
                ));
            }
            if let Some(hit) = self.forbidden().iter().find(|f| under(p, f)) {
                return Err(format!(
                    "\"{raw}\" is under a forbidden path ({}; security.forbidden_paths)",
                    hit.display()
                ));
            }
        }
        if self.workspace_only && !resolved.starts_with(workspace) {
            // Models read "/" as the workspace's root: say how to name it.
            let hint = if raw.starts_with('/') {
                "; paths are relative to the workspace (\".\" is its root)"
            } else {
                ""
            };
            return Err(format!(
                "\"{raw}\" resolves to {}, outside the workspace {} (security.workspace_only = true){hint}",
                resolved.display(),
                workspace.display()
            ));
        }
        if let Some(why) = self.secret_refusal(&lexical, &resolved) {
            return Err(why);
        }
        if let Ok(md) = std::fs::metadata(&resolved)
            && md.is_file()
            && md.nlink() > 1
        {
            return Err(format!(
                "\"{raw}\" has {} hard links; files with more than one link are refused \
                 because the other name may be outside the workspace",
                md.nlink()
            ));
        }
        Ok(resolved)
    }

    /// The policy in force, for `/policy` and the operator.
    pub fn describe(&self, cfg: &Config) -> String {
        let list = |v: &[PathBuf]| -> String {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let confinement = match self.workspace_result() {
            Ok(ws) => confine::describe_for(cfg, ws, self.autonomy),
            Err(_) => format!(
                "{} (nothing to confine: no usable workspace)",
                cfg.security.confinement.as_str()
            ),
        };
        format!(
            "autonomy: {}\nworkspace: {}\nworkspace_only: {}\nforbidden paths: {}\n\
             secret files (refused by name, read or write): {}\n\
             secret_files_allow: {}\n\
             forbidden commands: {}\nshell allowlist:{}\ntools enabled: {}\n\
             state (never reachable): {}\nshell confinement: {confinement}",
            self.autonomy.as_str(),
            match self.workspace_result() {
                Ok(w) => w.display().to_string(),
                Err(e) => e.clone(),
            },
            self.workspace_only,
            list(&cfg.security.forbidden_paths),
            secret_files::rules_shown(),
            if cfg.security.secret_files_allow.is_empty() {
                "(none)".to_string()
            } else {
                cfg.security.secret_files_allow.join(", ")
            },
            cfg.security.forbidden_commands.join(", "),
            self.describe_allowlist(),
            self.tools_enabled(),
            cfg.state_dir.display()
        )
    }

    fn tools_enabled(&self) -> String {
        let names: Vec<&str> = self.tools_allow.iter().map(|t| t.as_str()).collect();
        names.join(", ")
    }

    /// The shell allowlist, a line a program (what its option table knows),
    /// then the programs without a table
    /// (judged by their path arguments only).
    fn describe_allowlist(&self) -> String {
        let (with, without): (Vec<&String>, Vec<&String>) = self
            .shell_allowlist
            .iter()
            .partition(|p| options::has_table(p));
        let mut out = String::new();
        for p in &with {
            if let Some(d) = options::describe_program(p) {
                out.push_str("\n  ");
                out.push_str(&d);
            }
        }
        // Judged by their path arguments only; the kernel sandbox alone
        // holds what they do.
        let (by_path, runners): (Vec<&String>, Vec<&String>) =
            without.into_iter().partition(|p| p.contains('/'));
        let join = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
        if !runners.is_empty() {
            out.push_str(&format!(
                "\n  without an option table: code runners, high risk, judged by their path \
                 arguments only; only the kernel sandbox holds what they do: {}",
                join(&runners)
            ));
        }
        if !by_path.is_empty() {
            out.push_str(&format!(
                "\n  allowlisted by path, without an option table (judged by their path \
                 arguments only; only the kernel sandbox holds what they do): {}",
                join(&by_path)
            ));
        }
        out
    }

    /// True when `p` is (inside) one of the runtime's own state paths; file
    /// listings hide such entries.
    pub fn is_protected(&self, p: &Path) -> bool {
        self.protected().iter().any(|s| p.starts_with(s))
    }

    /// True when `p` (a path with no link in it) is latchclaw's state or
    /// under a forbidden path: walks (`grep`, `file_list` with a depth)
    /// skip it.
    pub fn is_forbidden(&self, p: &Path) -> bool {
        self.is_protected(p) || self.forbidden().iter().any(|f| p.starts_with(f))
    }
}

/// What the shell judge asks of the policy.
impl Gate {
    pub(crate) fn forbidden_command(&self, lower_basename: &str) -> bool {
        self.forbidden_commands.iter().any(|c| c == lower_basename)
    }

    pub(crate) fn allowlisted(&self, name: &str) -> bool {
        !name.contains('/') && self.shell_allowlist.iter().any(|c| c == name)
    }

    /// An allowlist entry written as a path (`./tools/check.sh`) trusts that
    /// one file, resolved against the workspace.
    pub(crate) fn allowlisted_path(&self, program: &Path) -> bool {
        let Ok(ws) = self.workspace() else {
            return false;
        };
        self.shell_allowlist
            .iter()
            .filter(|e| e.contains('/'))
            .filter_map(|e| resolve(&ws.join(e)).ok())
            .any(|p| p == program)
    }

    /// A forbidden or protected path inside `dir` (a tree a program walks).
    pub(crate) fn forbidden_beneath(&self, dir: &Path) -> Option<String> {
        self.forbidden_within(dir, usize::MAX)
    }

    /// [`Gate::forbidden_beneath`] for a walk that lists at most `depth`
    /// levels: a forbidden directory at the last level is only named, never
    /// opened (`find . -maxdepth 1` shows `./private`, not what is in it).
    pub(crate) fn forbidden_within(&self, dir: &Path, depth: usize) -> Option<String> {
        self.forbidden()
            .iter()
            .chain(self.protected())
            .find(|p| {
                p.strip_prefix(dir).is_ok_and(|rel| {
                    let n = rel.components().count();
                    n > 0 && n < depth
                })
            })
            .map(|p| p.display().to_string())
    }

    /// What the write policy says of a path that has no link in it (the
    /// caller made sure): state, forbidden, outside, or inside a protected
    /// directory.
    pub(crate) fn refused_lexically(&self, p: &Path) -> Option<String> {
        if let Some(hit) = self.protected().iter().find(|s| p.starts_with(s)) {
            return Some(format!("latchclaw's own state ({})", hit.display()));
        }
        if let Some(hit) = self.forbidden().iter().find(|f| p.starts_with(f)) {
            return Some(format!("under a forbidden path ({})", hit.display()));
        }
        let ws = self.workspace().ok()?;
        match p.strip_prefix(ws) {
            Ok(rel) => protected_workspace_dir(rel)
                .map(|d| format!("inside a {} directory, {}", d.name, d.why)),
            Err(_) if self.workspace_only => Some("outside the workspace".into()),
            Err(_) => None,
        }
    }

    /// What a program that writes throughout `dir` (`git checkout`, `git
    /// clean`, `find -delete`) would reach that no write may: a forbidden or
    /// state path, or the workspace's own protected directory that
    /// work-tree writes reach.
    pub(crate) fn write_refused_beneath(&self, dir: &Path) -> Option<String> {
        if let Some(hit) = self.forbidden_beneath(dir) {
            return Some(format!("the forbidden path {hit}"));
        }
        let ws = self.workspace().ok()?;
        PROTECTED_WORKSPACE_DIRS
            .iter()
            .filter(|d| d.tree_writes_reach)
            .find_map(|d| {
                let p = ws.join(d.name);
                (p.starts_with(dir) && std::fs::symlink_metadata(&p).is_ok())
                    .then(|| format!("{}: a {} directory, {}", p.display(), d.name, d.why))
            })
    }

    /// The first executable file named `name` on the shell's fixed PATH.
    pub(crate) fn lookup_program(&self, name: &str) -> Option<PathBuf> {
        if let Some((_, p)) = self.programs.borrow().iter().find(|(n, _)| n == name) {
            return p.clone();
        }
        use std::os::unix::fs::PermissionsExt;
        let found = judge::SAFE_PATH
            .split(':')
            .map(|dir| Path::new(dir).join(name))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|md| md.is_file() && md.permissions().mode() & 0o111 != 0)
            });
        self.programs
            .borrow_mut()
            .push((name.to_string(), found.clone()));
        found
    }

    /// PATH, TERM and a few variables from latchclaw's own environment
    /// (never a provider key), plus the configured pass-through names.
    pub fn child_env(&self) -> &[(String, String)] {
        self.child_env.get_or_init(|| {
            let mut env = vec![
                ("PATH".to_string(), judge::SAFE_PATH.to_string()),
                ("TERM".to_string(), "dumb".to_string()),
            ];
            const BASE: &[&str] = &[
                "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
            ];
            for name in BASE
                .iter()
                .copied()
                .chain(self.env_passthrough.iter().map(String::as_str))
            {
                if self.secret_envs.iter().any(|s| s == name) || env.iter().any(|(k, _)| k == name)
                {
                    continue;
                }
                if let Ok(v) = std::env::var(name) {
                    env.push((name.to_string(), v));
                }
            }
            env
        })
    }
}

/// The built-in risk of a tool before its arguments are looked at.
/// How risky a tool's calls can be, for `tool list`.
pub fn risk_summary(tool: ToolName) -> &'static str {
    match tool {
        ToolName::Shell => "low / medium (allowlisted) / high",
        ToolName::Http | ToolName::WebSearch => "low (allowed domain), else denied",
        _ => base_risk(tool).as_str(),
    }
}

fn base_risk(tool: ToolName) -> Risk {
    match tool {
        ToolName::Time
        | ToolName::MemorySearch
        | ToolName::FileList
        | ToolName::FileRead
        | ToolName::Git
        | ToolName::Grep
        | ToolName::PdfExtract
        | ToolName::MemoryStore
        | ToolName::MemoryRecall
        | ToolName::AskUser => Risk::Low,
        ToolName::FileWrite | ToolName::MemoryForget => Risk::Medium,
        ToolName::Shell | ToolName::Http | ToolName::WebSearch => Risk::High,
    }
}

/// Autonomy × risk. `full` still asks for high risk and never lifts the
/// forbidden lists or the workspace boundary (those deny before this).
fn verdict_for(autonomy: Autonomy, risk: Risk, read_only: bool) -> (Verdict, String) {
    let a = autonomy.as_str();
    match (autonomy, risk) {
        (Autonomy::ReadOnly, Risk::Low) if read_only => (
            Verdict::Allow,
            "low-risk read-only call under readonly".into(),
        ),
        (Autonomy::ReadOnly, _) => (
            Verdict::Deny(Refusal::Autonomy),
            format!(
                "{} risk: readonly autonomy runs low-risk read-only tools only",
                risk.as_str()
            ),
        ),
        (_, Risk::Low) => (Verdict::Allow, format!("low risk under {a}")),
        (Autonomy::Supervised, Risk::Medium) => (
            Verdict::Ask,
            "medium risk under supervised needs the operator's approval".into(),
        ),
        (Autonomy::Full, Risk::Medium) => (Verdict::Allow, "medium risk under full".into()),
        (Autonomy::Supervised, Risk::High) => (
            Verdict::Deny(Refusal::Autonomy),
            "high risk is blocked under supervised autonomy".into(),
        ),
        (Autonomy::Full, Risk::High) => (
            Verdict::Ask,
            "high risk under full needs the operator's approval".into(),
        ),
    }
}

/// Removes `.` and folds `..` without touching the file system.
pub fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Resolves an absolute path like `realpath`, following symlinks (at most
/// [`MAX_SYMLINK_HOPS`]) through every existing component. Components that do
/// not exist yet are appended as written (`..` among them folds lexically,
/// which is what the kernel would do once they are created as directories).
/// Errors other than "not found" fail closed.
pub fn resolve(path: &Path) -> Result<PathBuf, String> {
    resolve_from(PathBuf::from("/"), path)
}

/// [`resolve`] of `rest` below `base`, a directory already resolved (no
/// link in it), so its components are not looked at again.
fn resolve_from(base: PathBuf, rest: &Path) -> Result<PathBuf, String> {
    let mut queue: VecDeque<OsString> = VecDeque::new();
    let mut out = base;
    let mut hops = 0;
    let mut missing = 0usize;
    push_front_components(&mut queue, rest, &mut out);
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            missing = missing.saturating_sub(1);
            out.pop();
            continue;
        }
        let candidate = out.join(&name);
        if missing > 0 {
            out = candidate;
            missing += 1;
            continue;
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(md) if md.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return Err(format!(
                        "more than {MAX_SYMLINK_HOPS} symlinks at {} (a loop?)",
                        candidate.display()
                    ));
                }
                let target = std::fs::read_link(&candidate)
                    .map_err(|e| format!("cannot read link {}: {e}", candidate.display()))?;
                push_front_components(&mut queue, &target, &mut out);
            }
            Ok(_) => out = candidate,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                out = candidate;
                missing = 1;
            }
            Err(e) => return Err(format!("{}: {e}", candidate.display())),
        }
    }
    Ok(out)
}

/// Queues the components of `p` ahead of what is left; an absolute `p`
/// restarts from the root.
fn push_front_components(queue: &mut VecDeque<OsString>, p: &Path, out: &mut PathBuf) {
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                *out = PathBuf::from("/");
                parts.clear();
            }
            Component::CurDir => {}
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::Normal(n) => parts.push(n.to_os_string()),
        }
    }
    for part in parts.into_iter().rev() {
        queue.push_front(part);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fx {
        _dir: TempDir,
        root: PathBuf,
        gate: Gate,
    }

    struct TempDir(PathBuf);
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn fixture(extra: &str) -> Fx {
        let root = std::env::temp_dir().join(crate::util::new_id("latchclaw-sec"));
        std::fs::create_dir_all(root.join("ws/sub")).unwrap();
        std::fs::create_dir_all(root.join("state")).unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::fs::write(root.join("outside/secret.txt"), "s").unwrap();
        std::fs::write(root.join("ws/a.txt"), "a").unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let text = format!(
            "workspace_dir = \"{ws}\"\n[security]\nforbidden_paths = [\"/etc\", \"{ws}/private\"]\n{extra}",
            ws = root.join("ws").display()
        );
        let cfg =
            Config::from_text(&text, &root.join("state/config.toml"), root.join("state")).unwrap();
        let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        Fx {
            _dir: TempDir(root.clone()),
            root,
            gate,
        }
    }

    fn read(fx: &Fx, p: &str) -> Result<PathBuf, String> {
        fx.gate.check_path(p)
    }

    #[test]
    fn plain_workspace_paths_resolve() {
        let fx = fixture("");
        assert_eq!(read(&fx, "a.txt").unwrap(), fx.root.join("ws/a.txt"));
        assert_eq!(
            read(&fx, "./sub/../a.txt").unwrap(),
            fx.root.join("ws/a.txt")
        );
        assert_eq!(read(&fx, ".").unwrap(), fx.root.join("ws"));
        assert_eq!(
            read(&fx, "new/file.txt").unwrap(),
            fx.root.join("ws/new/file.txt")
        );
    }

    /// `.git` and `.latchclaw` at any depth: no write reaches into them, as
    /// named, through a link, lexically (what `cp -r` lands) or, for the
    /// workspace's `.latchclaw`, throughout a directory that holds it.
    /// Reading them, and names that only look alike, are fine.
    #[test]
    fn protected_workspace_dirs_are_never_written() {
        let fx = fixture("");
        let ws = fx.root.join("ws");
        std::fs::create_dir_all(ws.join(".latchclaw/skills/demo")).unwrap();
        std::fs::write(ws.join(".latchclaw/skills/demo/SKILL.md"), "x").unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        symlink(ws.join(".latchclaw/skills"), ws.join("skills-link")).unwrap();
        symlink(".latchclaw", ws.join("conf")).unwrap();
        for (p, dir) in [
            (".latchclaw", ".latchclaw"),
            (".latchclaw/skills/demo/SKILL.md", ".latchclaw"),
            (".latchclaw/skills/new/SKILL.md", ".latchclaw"),
            ("./sub/../.latchclaw/config.toml", ".latchclaw"),
            ("sub/.latchclaw/skills/x/SKILL.md", ".latchclaw"),
            ("skills-link/demo/SKILL.md", ".latchclaw"),
            ("conf/skills/x/SKILL.md", ".latchclaw"),
            (".git/hooks/pre-commit", ".git"),
            ("sub/.git/info/attributes", ".git"),
        ] {
            let why = fx.gate.check_write_dir_ok(p).unwrap_err();
            assert!(
                why.contains(&format!("inside a {dir} directory")),
                "{p}: {why}"
            );
            let lexical = lexical_normalize(&ws.join(p));
            if !p.contains("link") && !p.starts_with("conf") {
                assert!(fx.gate.refused_lexically(&lexical).is_some(), "{p}");
            }
        }
        assert!(
            fx.gate
                .check_write_path(".latchclaw/x")
                .unwrap_err()
                .contains("the operator's configuration")
        );
        for p in [
            ".latchclaw-notes/a",
            "latchclaw/a",
            "sub/x.latchclaw",
            ".latchclawx",
        ] {
            assert!(fx.gate.check_write_path(p).is_ok(), "{p}");
        }
        assert!(read(&fx, ".latchclaw/skills/demo/SKILL.md").is_ok());
        // Throughout a directory: the workspace's own `.latchclaw`, not
        // `.git` (a gate without the fixture's forbidden path inside).
        let text = format!("workspace_dir = \"{}\"\n", ws.display());
        let cfg =
            Config::from_text(&text, &fx.root.join("state/c.toml"), fx.root.join("state")).unwrap();
        let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        let hit = gate.write_refused_beneath(&ws).unwrap();
        assert!(hit.contains(".latchclaw: a .latchclaw directory"), "{hit}");
        assert!(gate.write_refused_beneath(&ws.join("sub")).is_none());
        std::fs::remove_dir_all(ws.join(".latchclaw")).unwrap();
        assert!(gate.write_refused_beneath(&ws).is_none());
        assert_eq!(
            PROTECTED_WORKSPACE_DIRS
                .iter()
                .map(|d| d.name)
                .collect::<Vec<_>>(),
            [".git", ".latchclaw"]
        );
    }

    #[test]
    fn escapes_are_denied() {
        let fx = fixture("");
        for p in [
            "../outside/secret.txt",
            "sub/../../outside/secret.txt",
            "/etc/passwd",
            "/etc/../etc/passwd",
            "~/.ssh/id_rsa",
            "~",
            "/",
            "missing/../../outside",
        ] {
            assert!(read(&fx, p).is_err(), "{p} should be denied");
        }
        assert!(read(&fx, "~root/x").unwrap_err().contains("~user"));
        assert!(read(&fx, "a\0b").unwrap_err().contains("NUL"));
        assert!(read(&fx, "").is_err());
    }

    #[test]
    fn symlinks_are_followed_before_deciding() {
        let fx = fixture("");
        let ws = fx.root.join("ws");
        symlink(fx.root.join("outside/secret.txt"), ws.join("link")).unwrap();
        symlink(fx.root.join("outside"), ws.join("dirlink")).unwrap();
        symlink(fx.root.join("outside/nothing-yet"), ws.join("dangling")).unwrap();
        symlink("loop2", ws.join("loop1")).unwrap();
        symlink("loop1", ws.join("loop2")).unwrap();
        symlink("a.txt", ws.join("inside")).unwrap();
        symlink("/etc", ws.join("etc")).unwrap();
        assert!(
            read(&fx, "link")
                .unwrap_err()
                .contains("outside the workspace")
        );
        assert!(read(&fx, "dirlink/secret.txt").is_err());
        assert!(read(&fx, "dangling").is_err());
        assert!(read(&fx, "loop1").unwrap_err().contains("loop"));
        assert!(read(&fx, "etc/passwd").unwrap_err().contains("forbidden"));
        assert_eq!(read(&fx, "inside").unwrap(), ws.join("a.txt"));
    }

    #[test]
    fn forbidden_paths_apply_inside_the_workspace() {
        let fx = fixture("");
        std::fs::create_dir_all(fx.root.join("ws/private")).unwrap();
        std::fs::write(fx.root.join("ws/private/k"), "k").unwrap();
        assert!(read(&fx, "private/k").unwrap_err().contains("forbidden"));
        assert!(
            read(&fx, "sub/../private")
                .unwrap_err()
                .contains("forbidden")
        );
    }

    #[test]
    fn state_files_are_unreachable_even_with_workspace_only_off() {
        let fx = fixture("workspace_only = false\n");
        let state = fx.root.join("state");
        std::fs::write(state.join("tool_receipts.log"), "").unwrap();
        let s = state.display().to_string();
        assert!(
            read(&fx, &format!("{s}/tool_receipts.log"))
                .unwrap_err()
                .contains("own state")
        );
        assert!(read(&fx, &format!("{s}/memory.sqlite-wal")).is_err());
        assert!(read(&fx, &s).is_err());
        symlink(&state, fx.root.join("ws/st")).unwrap();
        assert!(
            read(&fx, "st/config.toml")
                .unwrap_err()
                .contains("own state")
        );
        // workspace_only = false lets other outside paths through.
        assert!(read(&fx, "../outside/secret.txt").is_ok());
    }

    #[test]
    fn hard_links_are_refused() {
        let fx = fixture("");
        std::fs::hard_link(fx.root.join("outside/secret.txt"), fx.root.join("ws/hl")).unwrap();
        assert!(read(&fx, "hl").unwrap_err().contains("hard links"));
    }

    #[test]
    fn verdicts_follow_autonomy_and_risk() {
        use Autonomy::*;
        use Risk::*;
        let table = [
            (ReadOnly, Low, true, Verdict::Allow),
            (ReadOnly, Low, false, Verdict::Deny(Refusal::Autonomy)),
            (ReadOnly, Medium, false, Verdict::Deny(Refusal::Autonomy)),
            (ReadOnly, High, false, Verdict::Deny(Refusal::Autonomy)),
            (Supervised, Low, true, Verdict::Allow),
            (Supervised, Medium, false, Verdict::Ask),
            (Supervised, High, false, Verdict::Deny(Refusal::Autonomy)),
            (Full, Low, true, Verdict::Allow),
            (Full, Medium, false, Verdict::Allow),
            (Full, High, false, Verdict::Ask),
        ];
        for (a, r, ro, want) in table {
            assert_eq!(verdict_for(a, r, ro).0, want, "{a:?} {r:?}");
        }
    }

    #[test]
    fn under_is_starts_with_for_clean_paths() {
        let paths = [
            "/",
            "/etc",
            "/etc/passwd",
            "/etcx",
            "/etc/x/y",
            "/e",
            "/home/u/.ssh",
            "/home/u/.ssh2",
            "/home/u/.ssh/id_rsa",
            "/home/u",
            "/home",
            "/proc/1/environ",
        ];
        for p in paths {
            for f in paths {
                let (p, f) = (Path::new(p), Path::new(f));
                assert_eq!(
                    under(p, f),
                    p.starts_with(f),
                    "{} under {}",
                    p.display(),
                    f.display()
                );
            }
        }
        // Entries are cleaned before they are compared.
        let forms = both_forms([PathBuf::from("/nonexistent-lc/a/./b/../c/")]);
        assert_eq!(forms, [PathBuf::from("/nonexistent-lc/a/c")]);
        assert!(under(Path::new("/nonexistent-lc/a/c/d"), &forms[0]));
    }

    #[test]
    fn decide_denies_bad_args_and_estop() {
        let fx = fixture("");
        let d = fx.gate.decide(
            ToolName::FileRead,
            &serde_json::json!({"path": "/etc/passwd"}),
        );
        assert_eq!(d.verdict, Verdict::Deny(Refusal::Path));
        let d = fx
            .gate
            .decide(ToolName::FileRead, &serde_json::json!("a.txt"));
        assert!(d.reason.contains("JSON object"));
        let d = fx
            .gate
            .decide(ToolName::Time, &serde_json::json!({"approved": true}));
        assert_eq!(d.verdict, Verdict::Allow);
        std::fs::write(fx.root.join("state/ESTOP"), "").unwrap();
        let d = fx.gate.decide(ToolName::Time, &serde_json::json!({}));
        assert!(d.estop && d.verdict == Verdict::Deny(Refusal::Estop), "{d}");
    }

    #[test]
    fn each_refusal_says_its_kind() {
        use serde_json::json;
        let fx = fixture(
            "[channels.cli]\ntools_allow = [\"time\", \"file_read\", \"file_write\", \"shell\", \"http\"]\n",
        );
        let kind = |gate: &Gate, tool, args| {
            let d = gate.decide(tool, &args);
            match d.verdict {
                Verdict::Deny(kind) => Some(kind),
                _ => None,
            }
        };
        let g = &fx.gate;
        assert_eq!(kind(g, ToolName::Time, json!({})), None);
        assert_eq!(
            kind(g, ToolName::FileRead, json!({"path": "/etc/passwd"})),
            Some(Refusal::Path)
        );
        assert_eq!(
            kind(g, ToolName::FileRead, json!({"path": "private/k"})),
            Some(Refusal::Path)
        );
        assert_eq!(
            kind(g, ToolName::FileRead, json!({"path": 3})),
            Some(Refusal::Arguments)
        );
        assert_eq!(
            kind(g, ToolName::FileRead, json!("a.txt")),
            Some(Refusal::Arguments)
        );
        assert_eq!(
            kind(g, ToolName::Shell, json!({"command": "rm -rf /"})),
            Some(Refusal::Command)
        );
        assert_eq!(
            kind(g, ToolName::Shell, json!({"command": "bash -c id"})),
            Some(Refusal::Command)
        );
        assert_eq!(
            kind(g, ToolName::Http, json!({"url": "http://127.0.0.1/"})),
            Some(Refusal::Network)
        );
        assert_eq!(
            kind(g, ToolName::WebSearch, json!({"query": "q"})),
            Some(Refusal::Unavailable)
        );
        let ro = fx.gate.clone().with_autonomy(Autonomy::ReadOnly);
        assert_eq!(
            kind(
                &ro,
                ToolName::FileWrite,
                json!({"path": "b.txt", "content": "x"})
            ),
            Some(Refusal::Autonomy)
        );
        let narrow = fixture("[channels.cli]\ntools_allow = [\"time\"]\n");
        assert_eq!(
            kind(&narrow.gate, ToolName::FileRead, json!({"path": "a.txt"})),
            Some(Refusal::NotOnChannel)
        );
        std::fs::write(fx.root.join("state/ESTOP"), "").unwrap();
        assert_eq!(kind(g, ToolName::Time, json!({})), Some(Refusal::Estop));
    }
}
