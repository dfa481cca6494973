//! The security gate: the one place that decides whether a tool call runs.
//!
//! Every path that can run a tool (the agent loop, `tool run`) calls
//! [`Gate::decide`] and obeys its verdict; tools never decide for themselves.
//! Paths are judged after resolving symlinks ourselves, so `..`, `~`,
//! absolute paths and links that leave the workspace are all seen for what
//! they point at.

pub mod code;
pub mod confine;
mod decision;
mod gate;
pub mod git;
pub mod grammar;
pub mod judge;
pub mod net;
pub mod options;
mod paths;
pub mod plan;
pub mod policy;
pub mod rate;
pub mod redact;
mod refusal;
pub mod secret_files;

pub use decision::{Decision, External, Risk, Verdict};
pub use gate::{Gate, SAFE_PATH, linked_refusal};
pub use paths::resolve;
pub use refusal::{Refusal, Refused};

use crate::config::{Autonomy, Config};
use crate::types::ToolName;
use serde_json::Value;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

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

impl Gate {
    /// The single decision point: risk, verdict and reason for one call,
    /// as an agent would make it.
    pub fn decide(&self, tool: ToolName, args: &Value) -> Decision {
        self.decide_from(tool, args, "agent")
    }

    /// [`Gate::decide`] for a call from `origin` (`policy::origin_of`):
    /// the built-in walls, then the policy rules within them.
    pub fn decide_from(&self, tool: ToolName, args: &Value, origin: &str) -> Decision {
        let d = self.decide_builtin(tool, args);
        let call = policy::Call {
            builtin: Some(tool),
            plugin: None,
            declared_hosts: &[],
            args,
            origin,
        };
        self.apply_rules(&call, d)
    }

    /// A call made inside a plan's task (`task`, its path), whose tools
    /// are `named`: `d` (the gate's decision on the call), unless the task
    /// does not name the tool. A task never widens what the run allows.
    pub fn within_task(&self, d: Decision, tool: &str, task: &str, named: &[String]) -> Decision {
        if matches!(d.verdict, Verdict::Deny(_)) || named.iter().any(|n| n == tool) {
            return d;
        }
        let names = if named.is_empty() {
            "none".to_string()
        } else {
            named.join(", ")
        };
        Decision::deny(
            d.risk,
            Refusal::NotInTask,
            format!("task {task} does not name tool \"{tool}\"; the tools it names: {names}"),
        )
    }

    /// A `plan` call's tree: well formed, and every built-in tool a task
    /// names enabled on the channel (a task's tools are a subset of the
    /// run's; a name no built-in has may be an external tool's, which the
    /// run offers only if it has it).
    fn judge_plan(&self, args: &Value) -> Result<(), String> {
        let tasks = crate::types::args::plan_tasks(args)?;
        let mut stack: Vec<&crate::types::args::PlanTask> = tasks.iter().collect();
        while let Some(t) = stack.pop() {
            for name in t.tools.iter().flatten() {
                match ToolName::parse(name) {
                    Some(tool) if !self.tools_allow.contains(&tool) => {
                        return Err(format!(
                            "task \"{}\" names tool \"{tool}\", which is not enabled on this \
                             channel; a task's tools are some of: {}",
                            crate::util::printable(&t.title),
                            self.tools_enabled()
                        ));
                    }
                    Some(_) => {}
                    None if !crate::types::valid_tool_name(name) => {
                        return Err(format!(
                            "task \"{}\" names \"{}\", which is not a tool name",
                            crate::util::printable(&t.title),
                            crate::util::printable(name)
                        ));
                    }
                    None => {}
                }
            }
            stack.extend(&t.subtasks);
        }
        Ok(())
    }

    fn decide_builtin(&self, tool: ToolName, args: &Value) -> Decision {
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
            // The tree is judged here, each call of its tasks on its own.
            ToolName::Plan => match self.judge_plan(args) {
                Ok(()) => (base, None, String::new()),
                Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
            },
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
                    Err(r) => return Decision::refused(base, r),
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
                    Err(r) => return Decision::refused(base, r),
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
                    Err(r) => return Decision::refused(Risk::High, r),
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
                    Err(r) => {
                        let r = r.map_reason(|reason| format!("web_search ({}): {reason}", ws.url));
                        return Decision::refused(Risk::High, r);
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
                    Err(r) => return Decision::refused(base, r),
                };
                // Judged as the shell judges `git …`; only the verdict's
                // risk differs: the argv is one of the tool's read-only
                // forms, and a reading the table calls a write is refused.
                let a = judge::analyze_tool_argv(&argv, self);
                plan = a.plan;
                match a.judgement {
                    judge::Judgement::Deny(r) => return Decision::refused(base, r),
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
            ToolName::CodeStatus => match crate::types::args::job_id(args) {
                Ok(_) => (Risk::Low, None, String::new()),
                Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
            },
            ToolName::CodeRun => match self.judge_code(args) {
                Ok(why) => (self.code_risk(), None, why),
                Err(r) => return Decision::refused(self.code_risk(), r),
            },
            ToolName::Shell => {
                let a = match crate::types::args::shell_args(args) {
                    Ok(a) => a,
                    Err(reason) => return Decision::deny(base, Refusal::Arguments, reason),
                };
                // `cwd` is judged as the `cd DIR &&` it stands for: the
                // directory checked like any path, every path of the
                // command resolved from it.
                let with_cd;
                let cmd = match a.cwd {
                    Some(dir) => {
                        with_cd = format!("cd '{dir}' && {}", a.command);
                        with_cd.as_str()
                    }
                    None => a.command,
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
                    judge::Judgement::Deny(r) => return Decision::refused(Risk::High, r),
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
            ToolName::Plan => false,
            // Its own writes stay in its tmp under readonly (the sandbox
            // makes the workspace read-only), and each tool it calls and
            // each request it sends is judged on its own.
            ToolName::CodeRun | ToolName::CodeStatus => true,
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
            rule: None,
        }
    }

    /// The decision for one call of an external tool (a plugin's): the
    /// same autonomy × risk as a built-in, on what the tool declares. A
    /// tool not declared read-only is never low risk (it may change
    /// things: supervised asks), and only a read-only one runs under
    /// readonly.
    pub fn decide_external(&self, ext: &External, args: &Value) -> Decision {
        self.decide_external_from(ext, args, "agent")
    }

    /// [`Gate::decide_external`] for a call from `origin`, the policy
    /// rules applied within the walls.
    pub fn decide_external_from(&self, ext: &External, args: &Value, origin: &str) -> Decision {
        let d = self.decide_external_builtin(ext, args);
        let call = policy::Call {
            builtin: None,
            plugin: Some(ext.plugin),
            declared_hosts: ext.network,
            args,
            origin,
        };
        self.apply_rules(&call, d)
    }

    fn decide_external_builtin(&self, ext: &External, args: &Value) -> Decision {
        let risk = if ext.read_only {
            ext.risk
        } else {
            ext.risk.max(Risk::Medium)
        };
        let name = ext.name;
        if let Some(reason) = estop_engaged(&self.estop_path) {
            return Decision {
                estop: true,
                ..Decision::deny(risk, Refusal::Estop, reason)
            };
        }
        if self.disabled_external.iter().any(|d| d == name) {
            return Decision::deny(
                risk,
                Refusal::Unavailable,
                format!("tool \"{name}\" is disabled (tools.{name}.enabled = false)"),
            );
        }
        if let Some(why) = ext.unapproved {
            return Decision::deny(risk, Refusal::Unapproved, why.to_string());
        }
        // A tool that names hosts runs with the ones granted, through the
        // egress proxy (`confine::egress`); with none granted it would
        // fail for want of them, so it does not run.
        // Hosts are held only by a network namespace of the child's own.
        if !ext.granted.is_empty() && self.confinement == crate::config::Confinement::Off {
            return Decision::deny(
                risk,
                Refusal::Confinement,
                format!(
                    "{} is granted network hosts, which only the namespace sandbox holds it to; \
                     security.confinement = \"off\" would give it the host's whole network \
                     (confinement = \"best_effort\" runs it)",
                    ext.source
                ),
            );
        }
        if !ext.network.is_empty() && ext.granted.is_empty() {
            return Decision::deny(
                risk,
                Refusal::Network,
                format!(
                    "{} declares network hosts ({}) and the config grants none of them \
                     (`[plugins.{}] network = [...]` grants those it names)",
                    ext.source,
                    crate::util::printable(&ext.network.join(", ")),
                    if ext.plugin.is_empty() {
                        "NAME"
                    } else {
                        ext.plugin
                    }
                ),
            );
        }
        if let Some(secret) = ext
            .env
            .iter()
            .find(|n| self.secret_envs.iter().any(|s| s == *n))
        {
            return Decision::deny(
                risk,
                Refusal::Unavailable,
                format!(
                    "{} asks for ${secret}, which holds a key latchclaw uses; it is never \
                     passed to a child",
                    ext.source
                ),
            );
        }
        if !args.is_object() {
            return Decision::deny(
                risk,
                Refusal::Arguments,
                "tool arguments must be a JSON object",
            );
        }
        let (verdict, reason) = verdict_for(self.autonomy, risk, ext.read_only);
        let declared = match (ext.read_only, risk == ext.risk) {
            (true, _) => ", read-only",
            (false, true) => "",
            // Raised: what is not read-only is medium risk at least.
            (false, false) => ", not read-only (so medium)",
        };
        Decision {
            risk,
            verdict,
            reason: format!(
                "{reason}: {} declares {} risk{declared}",
                ext.source,
                ext.risk.as_str()
            ),
            estop: false,
            path: None,
            plan: None,
            rule: None,
        }
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
             dotfiles_allow: {}\n\
             forbidden commands: {}\nshell allowlist:{}\ntools enabled: {}\n\
             state (never reachable): {}\nshell confinement: {confinement}\n\
             policy rules:{}",
            self.autonomy.as_str(),
            match self.workspace_result() {
                Ok(w) => w.display().to_string(),
                Err(e) => e.reason.clone(),
            },
            self.workspace_only,
            list(&cfg.security.forbidden_paths),
            secret_files::rules_shown(),
            if cfg.security.secret_files_allow.is_empty() {
                "(none)".to_string()
            } else {
                cfg.security.secret_files_allow.join(", ")
            },
            cfg.security.dotfiles_allow.join(", "),
            cfg.security.forbidden_commands.join(", "),
            self.describe_allowlist(),
            self.tools_enabled(),
            cfg.state_dir.display(),
            self.describe_rules()
        )
    }

    /// The policy rules, a line each: name, effect, what it matches.
    fn describe_rules(&self) -> String {
        if self.rules.is_empty() {
            return " (none)".into();
        }
        let mut out = String::new();
        for r in &self.rules {
            out.push_str(&format!(
                "\n  {} ({}): {}",
                r.name,
                r.effect.as_str(),
                policy::describe(r)
            ));
        }
        out
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
}

/// The built-in risk of a tool before its arguments are looked at.
/// How risky a tool's calls can be, for `tool list`.
pub fn risk_summary(tool: ToolName) -> &'static str {
    match tool {
        ToolName::Shell => "low / medium (allowlisted) / high",
        ToolName::Http | ToolName::WebSearch => "low (allowed domain), else denied",
        ToolName::CodeRun => "high ([tools.code_run] risk)",
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
        | ToolName::AskUser
        | ToolName::CodeStatus => Risk::Low,
        ToolName::FileWrite | ToolName::MemoryForget => Risk::Medium,
        // Each task's calls would be judged on their own; the tree itself
        // spends model calls and tool rounds.
        ToolName::Plan => Risk::Medium,
        ToolName::Shell | ToolName::Http | ToolName::WebSearch | ToolName::CodeRun => Risk::High,
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::paths::{PROTECTED_WORKSPACE_DIRS, both_forms, lexical_normalize, under};
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
        std::fs::write(root.join("outside/private.txt"), "s").unwrap();
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

    #[test]
    fn a_task_narrows_what_the_gate_allows_and_never_widens_it() {
        let fx = fixture("autonomy = \"full\"\n");
        let named = ["file_read".to_string()];
        let task = "c/msg-1/task-1";
        // Named and allowed: the gate's own decision.
        let d = fx.gate.decide(ToolName::FileRead, &json_args("a.txt"));
        let kept = fx.gate.within_task(d.clone(), "file_read", task, &named);
        assert_eq!(kept.verdict, d.verdict);
        // Allowed by the gate, not named by the task: refused, saying which.
        let d = fx.gate.decide(ToolName::FileList, &serde_json::json!({}));
        assert_eq!(d.verdict, Verdict::Allow);
        let d = fx.gate.within_task(d, "file_list", task, &named);
        assert_eq!(d.verdict, Verdict::Deny(Refusal::NotInTask));
        assert!(d.reason.contains("file_read"), "{}", d.reason);
        // Named, but the gate refuses it: still refused, for its own reason.
        let d = fx
            .gate
            .decide(ToolName::FileRead, &json_args("/etc/passwd"));
        let d = fx.gate.within_task(d, "file_read", task, &named);
        assert_eq!(d.verdict, Verdict::Deny(Refusal::Path));
    }

    fn json_args(path: &str) -> Value {
        serde_json::json!({ "path": path })
    }

    /// `check_path`, whose every refusal is a path refusal.
    fn read(fx: &Fx, p: &str) -> Result<PathBuf, Refused> {
        fx.gate.check_path(p).inspect_err(|e| {
            assert_eq!(e.kind, Refusal::Path, "{p}: {e}");
        })
    }

    fn ext<'a>(risk: Risk, read_only: bool) -> External<'a> {
        External {
            name: "echo",
            plugin: "echo",
            source: "plugin \"echo\" tool \"echo\"",
            risk,
            read_only,
            network: &[],
            granted: &[],
            env: &[],
            unapproved: None,
        }
    }

    #[test]
    fn external_tools_get_the_built_ins_autonomy_matrix() {
        let args = serde_json::json!({});
        let at = |extra: &str, e: External| {
            let d = fixture(extra).gate.decide_external(&e, &args);
            (d.risk, d.verdict)
        };
        // Keys of the fixture's own [security] table.
        let ro = "autonomy = \"readonly\"\n";
        let sup = "";
        let full = "autonomy = \"full\"\n";
        let deny = |k| Verdict::Deny(k);
        assert_eq!(at(ro, ext(Risk::Low, true)), (Risk::Low, Verdict::Allow));
        assert_eq!(at(ro, ext(Risk::Medium, true)).1, deny(Refusal::Autonomy));
        // Not declared read-only: never low risk, never run under readonly.
        assert_eq!(
            at(ro, ext(Risk::Low, false)),
            (Risk::Medium, deny(Refusal::Autonomy))
        );
        assert_eq!(at(sup, ext(Risk::Low, true)), (Risk::Low, Verdict::Allow));
        assert_eq!(at(sup, ext(Risk::Low, false)), (Risk::Medium, Verdict::Ask));
        assert_eq!(at(sup, ext(Risk::High, true)).1, deny(Refusal::Autonomy));
        assert_eq!(at(full, ext(Risk::Medium, false)).1, Verdict::Allow);
        assert_eq!(at(full, ext(Risk::High, false)).1, Verdict::Ask);
        // Refused whatever the autonomy: unapproved, network, a key's name.
        let hosts = ["example.com".to_string()];
        let key = ["OPENAI_API_KEY".to_string()];
        let keyed = "[providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"m\"\napi_key_env = \"OPENAI_API_KEY\"\n";
        for (extra, e, kind) in [
            (
                full,
                External {
                    unapproved: Some("changed"),
                    ..ext(Risk::Low, true)
                },
                Refusal::Unapproved,
            ),
            (
                full,
                External {
                    network: &hosts,
                    ..ext(Risk::Low, true)
                },
                Refusal::Network,
            ),
            (
                full,
                External {
                    network: &hosts,
                    granted: &hosts[..0],
                    ..ext(Risk::Low, true)
                },
                Refusal::Network,
            ),
            (
                keyed,
                External {
                    env: &key,
                    ..ext(Risk::Low, true)
                },
                Refusal::Unavailable,
            ),
        ] {
            let fx = fixture(extra);
            let d = fx.gate.decide_external(&e, &args);
            assert_eq!(d.verdict, deny(kind), "{}", d.reason);
        }
        // The environment it gets: PATH and what it names, never a key.
        let fx = fixture(keyed);
        let env = fx
            .gate
            .external_env(&["OPENAI_API_KEY".into(), "PATH".into()]);
        assert_eq!(env.len(), 1, "{env:?}");
        assert_eq!(env[0].0, "PATH");
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
                why.reason.contains(&format!("inside a {dir} directory")),
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
                .reason
                .contains("the operator's configuration")
        );
        for p in [".latchclaw-notes/a", "latchclaw/a", "sub/x.latchclaw"] {
            assert!(fx.gate.check_write_path(p).is_ok(), "{p}");
        }
        // A dotfile, refused by the dotfile rule, not as latchclaw's own.
        let why = fx.gate.check_write_path(".latchclawx").unwrap_err().reason;
        assert!(why.contains("(rule \".*\")"), "{why}");
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
            "../outside/private.txt",
            "sub/../../outside/private.txt",
            "/etc/passwd",
            "/etc/../etc/passwd",
            "~/.ssh/id_rsa",
            "~",
            "/",
            "missing/../../outside",
        ] {
            assert!(read(&fx, p).is_err(), "{p} should be denied");
        }
        assert!(read(&fx, "~root/x").unwrap_err().reason.contains("~user"));
        assert!(read(&fx, "a\0b").unwrap_err().reason.contains("NUL"));
        assert!(read(&fx, "").is_err());
    }

    #[test]
    fn symlinks_are_followed_before_deciding() {
        let fx = fixture("");
        let ws = fx.root.join("ws");
        symlink(fx.root.join("outside/private.txt"), ws.join("link")).unwrap();
        symlink(fx.root.join("outside"), ws.join("dirlink")).unwrap();
        symlink(fx.root.join("outside/nothing-yet"), ws.join("dangling")).unwrap();
        symlink("loop2", ws.join("loop1")).unwrap();
        symlink("loop1", ws.join("loop2")).unwrap();
        symlink("a.txt", ws.join("inside")).unwrap();
        symlink("/etc", ws.join("etc")).unwrap();
        assert!(
            read(&fx, "link")
                .unwrap_err()
                .reason
                .contains("outside the workspace")
        );
        assert!(read(&fx, "dirlink/private.txt").is_err());
        assert!(read(&fx, "dangling").is_err());
        assert!(read(&fx, "loop1").unwrap_err().reason.contains("loop"));
        assert!(
            read(&fx, "etc/passwd")
                .unwrap_err()
                .reason
                .contains("forbidden")
        );
        assert_eq!(read(&fx, "inside").unwrap(), ws.join("a.txt"));
    }

    #[test]
    fn forbidden_paths_apply_inside_the_workspace() {
        let fx = fixture("");
        std::fs::create_dir_all(fx.root.join("ws/private")).unwrap();
        std::fs::write(fx.root.join("ws/private/k"), "k").unwrap();
        assert!(
            read(&fx, "private/k")
                .unwrap_err()
                .reason
                .contains("forbidden")
        );
        assert!(
            read(&fx, "sub/../private")
                .unwrap_err()
                .reason
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
                .reason
                .contains("own state")
        );
        assert!(read(&fx, &format!("{s}/memory.sqlite-wal")).is_err());
        assert!(read(&fx, &s).is_err());
        symlink(&state, fx.root.join("ws/st")).unwrap();
        assert!(
            read(&fx, "st/config.toml")
                .unwrap_err()
                .reason
                .contains("own state")
        );
        // workspace_only = false lets other outside paths through.
        assert!(read(&fx, "../outside/private.txt").is_ok());
    }

    #[test]
    fn hard_links_are_refused() {
        let fx = fixture("");
        std::fs::hard_link(fx.root.join("outside/private.txt"), fx.root.join("ws/hl")).unwrap();
        assert!(read(&fx, "hl").unwrap_err().reason.contains("hard links"));
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
        // The kind is the refusal's own: a path met while judging a shell
        // command is a path refusal, said in the same words.
        let d = g.decide(ToolName::Shell, &json!({"command": "cat private/k"}));
        assert_eq!(d.verdict, Verdict::Deny(Refusal::Path), "{d}");
        assert!(d.reason.contains("forbidden path"), "{d}");
        assert_eq!(
            kind(g, ToolName::Shell, json!({"command": "cat $(id)"})),
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
