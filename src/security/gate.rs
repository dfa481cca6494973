//! The gate's knowledge of the policy, resolved once per process: the
//! `Gate` itself and what every judge asks of it — a path checked against
//! the policy (`check_path`, `check_write_path`, secret-named files), what
//! the shell judge asks (the allowlist, the programs on its `PATH`, the
//! child environment), the network policy. Deciding a call is `mod.rs`'s
//! (`Gate::decide`, which calls the judges above this file).

use super::paths::{
    PROTECTED_WORKSPACE_DIRS, both_forms, git_dir_by_shape, lexical_normalize,
    protected_workspace_dir, resolve, resolve_from, under,
};
use super::refusal::Refused;
use super::secret_files::{self, git_dir_name, normal_parts, rule_for};
use super::{git, net, rate};
use crate::config::{Autonomy, Config};
use crate::types::ToolName;
use std::cell::OnceCell;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where programs are looked up, at judgement time only.
pub const SAFE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What the gate needs to know, resolved once per process.
#[derive(Debug, Clone)]
pub struct Gate {
    pub(super) autonomy: Autonomy,
    pub(super) workspace_only: bool,
    /// Resolved on first use: a text-only turn never touches the file system
    /// for the gate.
    pub(super) workspace: OnceCell<Result<PathBuf, Refused>>,
    pub(super) workspace_raw: PathBuf,
    /// Each forbidden path as written and as resolved (on first use).
    pub(super) forbidden: OnceCell<Vec<PathBuf>>,
    pub(super) forbidden_raw: Vec<PathBuf>,
    pub(super) protected: OnceCell<Vec<PathBuf>>,
    pub(super) protected_raw: Vec<PathBuf>,
    pub(super) estop_path: PathBuf,
    pub(super) tools_allow: Vec<ToolName>,
    pub(super) home: Option<PathBuf>,
    pub(super) forbidden_commands: Vec<String>,
    pub(super) shell_allowlist: Vec<String>,
    /// The environment every shell child gets (and `$NAME` expands from).
    pub(super) child_env: OnceCell<Vec<(String, String)>>,
    /// Programs already looked up on the shell's PATH.
    pub(super) programs: std::cell::RefCell<Vec<(String, Option<PathBuf>)>>,
    /// What git said of its repositories, for the decision being made.
    pub(super) git_views: git::views::Views,
    pub(super) env_passthrough: Vec<String>,
    pub(super) secret_envs: Vec<String>,
    pub(super) file_write_max_bytes: usize,
    pub(super) confinement: crate::config::Confinement,
    pub(super) net: net::NetPolicy,
    pub(super) secret_allow: secret_files::Allow,
    /// `memory.categories`, for `memory_store` and `memory_recall`.
    pub(super) memory_categories: Vec<String>,
    /// `[tools.NAME] enabled = false`.
    pub(super) disabled: Vec<ToolName>,
    pub(super) web_search: Option<crate::config::WebSearch>,
    /// External tools with `[tools."NAME"] enabled = false`.
    pub(super) disabled_external: Vec<String>,
    /// The tools with a `rate_limit`, by the name models call them.
    /// The tools whose section sets a `rate_limit` (the rest take the
    /// defaults), by the name models call them.
    pub(super) rate_limits: Vec<(String, crate::config::RateLimit)>,
    /// `[[policy.rules]]` (`security::policy`).
    pub(super) rules: Vec<crate::config::PolicyRule>,
    /// `[tools.code_run]`: its risk and the secrets a snippet may name
    /// (names and variables, never values).
    pub(super) code_run: crate::config::CodeRunConfig,
    /// `[tools] rate_limit`: every tool's calls together.
    pub(super) global_rate_limit: crate::config::RateLimit,
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
                .chain(cfg.tools.code_run.secrets.values().map(|s| s.env.clone()))
                .collect(),
            file_write_max_bytes: cfg.file_write_max_bytes,
            confinement: cfg.security.confinement,
            net: net::NetPolicy {
                allowed_domains: cfg.tools.http.allowed_domains.clone(),
                allow_private: cfg.tools.http.allow_private.clone(),
            },
            secret_allow: secret_files::Allow::new(
                &cfg.security.secret_files_allow,
                &cfg.security.dotfiles_allow,
            ),
            memory_categories: cfg.memory.all_categories(),
            disabled: cfg
                .tools
                .middleware
                .iter()
                .filter(|(_, m)| m.enabled == Some(false))
                .map(|(t, _)| *t)
                .collect(),
            web_search: cfg.tools.web_search.clone(),
            disabled_external: cfg
                .tools
                .external
                .iter()
                .filter(|(_, m)| m.enabled == Some(false))
                .map(|(t, _)| t.clone())
                .collect(),
            rate_limits: cfg
                .tools
                .middleware
                .iter()
                .map(|(t, m)| (t.as_str().to_string(), m))
                .chain(cfg.tools.external.iter().map(|(t, m)| (t.clone(), m)))
                .filter(|(_, m)| m.rate_limit.is_set())
                .map(|(t, m)| (t, m.rate_limit))
                .collect(),
            rules: cfg.policy.rules.clone(),
            code_run: cfg.tools.code_run.clone(),
            global_rate_limit: cfg.tools.rate_limit,
        }
    }

    /// Whether one more call of `tool` is within its `rate_limit`: `None`
    /// admits it (and, with `record`, counts it), `Some` is the refusal.
    /// Every tool has limits: its own, or the defaults
    /// ([`rate::DEFAULT_PER_MINUTE`], [`rate::DEFAULT_PER_HOUR`]).
    pub fn rate_limited(
        &self,
        tool: &str,
        counter: &dyn rate::CallCounter,
        record: bool,
    ) -> crate::error::Result<Option<String>> {
        let own = self
            .rate_limits
            .iter()
            .find(|(t, _)| t == tool)
            .map(|(_, l)| *l)
            .unwrap_or_default();
        let limit = rate::effective(&own);
        let global = self.global_rate_limit;
        counter.admit(tool, true, record, &mut |c| {
            rate::over_limit(tool, &limit, &global, c)
        })
    }

    /// Why `tool` cannot be called at all, whatever the channel offers.
    pub(super) fn unavailable(&self, tool: ToolName) -> Option<String> {
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

    pub(super) fn workspace_result(&self) -> &Result<PathBuf, Refused> {
        self.workspace.get_or_init(|| {
            std::fs::canonicalize(&self.workspace_raw).map_err(|e| {
                Refused::path(format!(
                    "the workspace {} is not usable ({e}); `latchclaw init` creates it",
                    self.workspace_raw.display()
                ))
            })
        })
    }

    pub(super) fn forbidden(&self) -> &[PathBuf] {
        self.forbidden
            .get_or_init(|| both_forms(self.forbidden_raw.iter().cloned()))
    }

    pub(super) fn protected(&self) -> &[PathBuf] {
        self.protected
            .get_or_init(|| both_forms(self.protected_raw.iter().cloned()))
    }

    pub fn workspace(&self) -> Result<&Path, Refused> {
        self.workspace_result().as_deref().map_err(Clone::clone)
    }

    /// The URL checks, then where the name points now; the tool checks the
    /// addresses again when it connects.
    pub(super) fn check_http(&self, url: &str) -> Result<(), Refused> {
        use std::net::ToSocketAddrs;
        let target = self.net.check_url(url)?;
        if target.ip.is_some() {
            return Ok(());
        }
        let addrs = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| Refused::network(format!("cannot resolve {}: {e}", target.host)))?;
        for a in addrs {
            self.net.check_ip(&target.host, a.ip())?;
        }
        Ok(())
    }

    /// The read policy plus what writing adds: no symlink as the target, no
    /// directory, nothing inside a protected directory (`.git`, `.latchclaw`:
    /// [`PROTECTED_WORKSPACE_DIRS`]).
    pub fn check_write_path(&self, raw: &str) -> Result<PathBuf, Refused> {
        self.check_write(raw, false)
    }

    /// [`Gate::check_write_path`] for a program that writes into or
    /// throughout a directory (`cp f dir/`, `mkdir -p`, git in `.`).
    pub(crate) fn check_write_dir_ok(&self, raw: &str) -> Result<PathBuf, Refused> {
        self.check_write(raw, true)
    }

    fn check_write(&self, raw: &str, dir_ok: bool) -> Result<PathBuf, Refused> {
        let resolved = self.check_path(raw)?;
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let written = lexical_normalize(&self.absolute(raw)?);
        if std::fs::symlink_metadata(&written).is_ok_and(|m| m.file_type().is_symlink())
            || std::fs::symlink_metadata(&resolved).is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(Refused::path(format!(
                "\"{raw}\" is a symlink; writing through a symlink is refused"
            )));
        }
        if !dir_ok && resolved.is_dir() {
            return Err(Refused::path(format!("\"{raw}\" is a directory")));
        }
        let within = |p: &Path| protected_workspace_dir(p.strip_prefix(workspace).unwrap_or(p));
        if let Some(d) = within(&resolved).or_else(|| within(&written)) {
            return Err(Refused::path(format!(
                "\"{raw}\" is inside a {} directory, {}",
                d.name, d.why
            )));
        }
        // A git directory by any other name: its config and hooks run code
        // the same way (the sandbox makes them read-only too, but a
        // redirection or a tool's write is latchclaw's own).
        if let Some(git) = resolved
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(workspace))
            .find(|a| git_dir_by_shape(a))
        {
            return Err(Refused::path(format!(
                "\"{raw}\" is inside {}, a git directory (its HEAD, objects and refs), \
                 where hooks and config run code",
                git.display()
            )));
        }
        Ok(resolved)
    }

    /// A path argument made absolute (`~` expanded, relative to the
    /// workspace), before any symlink is followed.
    fn absolute(&self, raw: &str) -> Result<PathBuf, Refused> {
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let expanded = if let Some(rest) = raw.strip_prefix('~') {
            if !(rest.is_empty() || rest.starts_with('/')) {
                return Err(Refused::path(format!(
                    "\"{raw}\": \"~user\" paths are not allowed"
                )));
            }
            let home = self
                .home
                .as_ref()
                .ok_or_else(|| Refused::path("\"~\" used but HOME is not set"))?;
            home.join(rest.trim_start_matches('/'))
        } else {
            PathBuf::from(raw)
        };
        Ok(workspace.join(expanded))
    }

    /// Resolves a tool's path argument and checks it against the path
    /// policy. Returns the resolved path the tool must use.
    pub fn check_path(&self, raw: &str) -> Result<PathBuf, Refused> {
        if raw.contains('\0') {
            return Err(Refused::path("path contains a NUL byte"));
        }
        if raw.is_empty() {
            return Err(Refused::path("path is empty"));
        }
        let workspace = self.workspace_result().as_ref().map_err(Clone::clone)?;
        let absolute = self.absolute(raw)?;
        let lexical = lexical_normalize(&absolute);
        // The workspace is canonical: resolve only what lies below it.
        let resolved = match absolute.strip_prefix(workspace) {
            Ok(rest) => resolve_from(workspace.clone(), rest),
            Err(_) => resolve(&absolute),
        }
        .map_err(|e| e.map_reason(|r| format!("\"{raw}\" cannot be resolved: {r}")))?;
        for p in [&lexical, &resolved] {
            if let Some(hit) = self.protected().iter().find(|s| under(p, s)) {
                return Err(Refused::path(format!(
                    "\"{raw}\" is latchclaw's own state ({}), which tools can never reach",
                    hit.display()
                )));
            }
            if let Some(hit) = self.forbidden().iter().find(|f| under(p, f)) {
                return Err(Refused::path(format!(
                    "\"{raw}\" is under a forbidden path ({}; security.forbidden_paths)",
                    hit.display()
                )));
            }
        }
        if self.workspace_only && !resolved.starts_with(workspace) {
            // Models read "/" as the workspace's root: say how to name it.
            let hint = if raw.starts_with('/') {
                "; paths are relative to the workspace (\".\" is its root)"
            } else {
                ""
            };
            return Err(Refused::path(format!(
                "\"{raw}\" resolves to {}, outside the workspace {} (security.workspace_only = true){hint}",
                resolved.display(),
                workspace.display()
            )));
        }
        if let Some(why) = self.secret_refusal(&lexical, &resolved) {
            return Err(Refused::path(why));
        }
        // A git directory's config by another name than `.git` (a remote's
        // credentials), refused as `.git/config` is by its name (which the
        // rules above judged, `secret_files_allow` included).
        if resolved.file_name().is_some_and(|n| n == "config")
            && rule_for(resolved.strip_prefix(workspace).unwrap_or(&resolved)).is_none()
            && resolved.parent().is_some_and(git_dir_by_shape)
        {
            return Err(Refused::path(format!(
                "\"{raw}\" is a git directory's config (its HEAD, objects and refs are beside \
                 it), a secret-named file like .git/config"
            )));
        }
        if let Ok(md) = std::fs::metadata(&resolved)
            && let Some(why) = linked_refusal(&format!("\"{raw}\""), &md)
        {
            return Err(Refused::path(why));
        }
        Ok(resolved)
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
        let found = SAFE_PATH
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
                ("PATH".to_string(), SAFE_PATH.to_string()),
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

impl Gate {
    /// An external tool's environment: `PATH` (the shell's safe one) and
    /// the variables it declares, from latchclaw's own environment, never
    /// one holding a key latchclaw uses (`decide_external` refuses a tool
    /// that asks for one).
    pub fn external_env(&self, names: &[String]) -> Vec<(String, String)> {
        let mut env = vec![("PATH".to_string(), SAFE_PATH.to_string())];
        for name in names {
            if self.secret_envs.iter().any(|s| s == name) || env.iter().any(|(k, _)| k == name) {
                continue;
            }
            if let Ok(v) = std::env::var(name) {
                env.push((name.clone(), v));
            }
        }
        env
    }
}

/// Entries a walk for secret-named files looks at before it gives up.
const WALK_LIMIT: usize = 20_000;
const DEPTH_LIMIT: usize = 256;

/// What the gate says of secret-named files (`secret_files.rs` holds the
/// rules and the exceptions).
impl Gate {
    /// The rule that refuses `p` (absolute, lexical: no link in it), unless
    /// `secret_files_allow` lists it. Directories are judged by the files in
    /// them, never by their own name (a virtualenv called `.env`).
    pub(crate) fn secret_rule(&self, p: &Path) -> Option<&'static str> {
        let rel = self.workspace().ok().and_then(|w| p.strip_prefix(w).ok());
        let rule = rule_for(rel.unwrap_or(p))?;
        if self.secret_allow.lifts(rule, p, rel) {
            return None;
        }
        Some(rule.shown)
    }

    /// The reason a path is refused as secret-named: as written
    /// (`lexical`) or where it resolves to. `None` when neither is, or
    /// the path is a directory.
    pub(crate) fn secret_refusal(&self, lexical: &Path, resolved: &Path) -> Option<String> {
        if resolved.is_dir() {
            return None;
        }
        let tail = |rule: &str| {
            if rule == secret_files::DOTFILES {
                "; [security] dotfiles_allow lists the dotfiles tools may reach"
            } else {
                "; [security] secret_files_allow lists exceptions"
            }
        };
        let written = self.shown(lexical);
        if let Some(rule) = self.secret_rule(lexical) {
            let tail = tail(rule);
            return Some(format!(
                "\"{written}\" is a secret-named file (rule \"{rule}\"){tail}"
            ));
        }
        let rule = self.secret_rule(resolved)?;
        let tail = tail(rule);
        Some(format!(
            "\"{written}\" leads to \"{}\", a secret-named file (rule \"{rule}\"){tail}",
            self.shown(resolved)
        ))
    }

    /// A path as the workspace names it.
    pub(crate) fn shown(&self, p: &Path) -> String {
        match self.workspace().ok().and_then(|w| p.strip_prefix(w).ok()) {
            Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => p.display().to_string(),
        }
    }

    /// The first secret-named file below `dir` (not following links), with
    /// its rule; `skip_git` leaves `.git` directories out (git never reads
    /// its own directory as work tree files). Fails closed past
    /// [`WALK_LIMIT`] entries.
    pub(crate) fn secret_within(
        &self,
        dir: &Path,
        skip_git: bool,
    ) -> Result<Option<(PathBuf, &'static str)>, Refused> {
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut stack = vec![(dir.to_path_buf(), 0usize)];
        let mut seen = 0usize;
        while let Some((d, depth)) = stack.pop() {
            if depth > DEPTH_LIMIT {
                return Err(Refused::path(format!(
                    "{} is deeper than {DEPTH_LIMIT} levels; latchclaw cannot check it for \
                     secret-named files",
                    self.shown(dir)
                )));
            }
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                seen += 1;
                if seen > WALK_LIMIT {
                    return Err(Refused::path(format!(
                        "{} holds more than {WALK_LIMIT} entries; latchclaw cannot check it \
                         for secret-named files: name a smaller tree",
                        self.shown(dir)
                    )));
                }
                let p = e.path();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir {
                    let git = git_dir_name(&e.file_name().to_string_lossy().to_lowercase());
                    if !(skip_git && git) {
                        stack.push((p, depth + 1));
                    }
                } else if let Some(rule) = self.secret_rule(&p) {
                    return Ok(Some((p, rule)));
                }
            }
        }
        Ok(None)
    }

    /// Whether `p` (resolved) is at or below a git directory.
    pub(crate) fn in_git_dir(&self, p: &Path) -> bool {
        let rel = self
            .workspace()
            .ok()
            .and_then(|w| p.strip_prefix(w).ok())
            .unwrap_or(p);
        normal_parts(rel)
            .iter()
            .any(|c| git_dir_name(&c.to_lowercase()))
    }
}

/// Why a regular file with more than one name is refused (`what`: the
/// file as the message names it): another name may be a secret's or outside the
/// workspace. For a path the gate judges, and again for a file latchclaw
/// itself opened for a call (a redirection), whose path a process of an
/// earlier call may have changed since.
pub fn linked_refusal(what: &str, md: &std::fs::Metadata) -> Option<String> {
    (md.is_file() && md.nlink() > 1).then(|| {
        format!(
            "{what} has {} hard links now; files with more than one link are refused \
             because the other name may be a secret's or outside the workspace",
            md.nlink()
        )
    })
}
