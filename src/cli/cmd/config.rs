//! `init`, `onboard`, `config validate`, `config show`.

use crate::cli::ctx::{Ctx, print_json};
use crate::cli::onboard::{self, Setup};
use crate::cli::parse::Onboard;
use crate::config::{Config, ProviderConfig, ProviderSettings};
use crate::error::{Error, Result, exit};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

pub fn init(ctx: &Ctx, workspace: Option<PathBuf>, force: bool) -> Result<i32> {
    onboard::install(
        ctx.config.as_deref(),
        &Setup::defaults(workspace.as_deref())?,
        force,
        &ctx.redactor,
    )
}

pub fn onboard(ctx: &Ctx, o: Onboard) -> Result<i32> {
    let path = onboard::config_path(ctx.config.as_deref())?;
    if path.exists() && !o.force {
        return Err(Error::usage(format!(
            "{} exists; `latchclaw onboard --force` replaces it (the old one is overwritten)",
            path.display()
        )));
    }
    let setup = onboard::wizard(&o)?;
    onboard::install(ctx.config.as_deref(), &setup, true, &ctx.redactor)
}

pub fn validate(ctx: &Ctx) -> Result<i32> {
    let cfg = ctx.load_config()?;
    // The enabled skills are files: each must exist, parse and need only
    // tools the channel enables.
    let skills = crate::skills::enabled(&cfg)?;
    // Each rule's examples, judged as calls in this workspace.
    let at = match &cfg.policy.file {
        Some(f) => format!("{}: rules", f.display()),
        None => "policy.rules".to_string(),
    };
    let gate = crate::security::Gate::new(&cfg, &cfg.channels.cli.tools_allow);
    let failed = crate::security::policy::check_examples(&gate, &cfg.policy.rules, &at);
    if !failed.is_empty() {
        return Err(crate::config::ConfigErrors {
            file: cfg.config_path.display().to_string(),
            errors: failed,
        }
        .into());
    }
    match &cfg.source {
        Some(p) => println!(
            "ok: {} ({}, default \"{}\", autonomy {}{}{})",
            p.display(),
            crate::cli::ctx::count(cfg.providers.len() as u64, "provider"),
            cfg.default_provider,
            cfg.security.autonomy.as_str(),
            if skills.is_empty() {
                String::new()
            } else {
                format!(", {}", crate::cli::ctx::count(skills.len() as u64, "skill"))
            },
            if cfg.policy.rules.is_empty() {
                String::new()
            } else {
                let examples: usize = cfg.policy.rules.iter().map(|r| r.examples.len()).sum();
                format!(
                    ", {} ({} checked)",
                    crate::cli::ctx::count(cfg.policy.rules.len() as u64, "policy rule"),
                    crate::cli::ctx::count(examples as u64, "example")
                )
            }
        ),
        None => println!(
            "ok: no config file at {}; defaults apply",
            cfg.config_path.display()
        ),
    }
    for w in unset_keys(&cfg).into_iter().chain(idle_grants(&cfg)) {
        eprintln!("latchclaw: warning: {w}");
    }
    Ok(exit::OK)
}

/// `[plugins.NAME] network` entries that grant nothing: no such plugin is
/// installed, or its manifest does not declare the host (a plugin gets the
/// hosts both name).
fn idle_grants(cfg: &Config) -> Vec<String> {
    if cfg.plugin_network.is_empty() || !cfg!(feature = "plugins") {
        return Vec::new();
    }
    let installed = crate::plugins::installed(cfg).unwrap_or_default();
    let mut out = Vec::new();
    for (name, hosts) in &cfg.plugin_network {
        let Some(p) = installed.iter().find(|p| &p.name == name) else {
            out.push(format!(
                "plugins.{name}: no plugin \"{name}\" is installed (installed: {}), so its \
                 network grants nothing",
                if installed.is_empty() {
                    "none".to_string()
                } else {
                    installed
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
            continue;
        };
        let declared: Vec<String> = match &p.manifest {
            Ok(m) => m.tools.iter().flat_map(|t| t.network.clone()).collect(),
            Err(_) => continue,
        };
        for h in hosts {
            if crate::security::net::granted(&declared, std::slice::from_ref(h)).is_empty() {
                out.push(format!(
                    "plugins.{name}.network: \"{}\" is not a host its manifest declares \
                     (declared: {}), so it grants nothing; entries must be spelled alike",
                    crate::util::printable(h),
                    if declared.is_empty() {
                        "none".to_string()
                    } else {
                        declared.join(", ")
                    }
                ));
            }
        }
    }
    out
}

/// A key variable the config names but this environment lacks: valid, but
/// every request that needs it fails, and the place it is most often
/// missing is a job's environment rather than the shell where this runs.
fn unset_keys(cfg: &Config) -> Vec<String> {
    let mut named: Vec<(String, &str, String)> = cfg
        .providers
        .values()
        .filter_map(|p| {
            let var = p.api_key_env()?;
            Some((
                format!("providers.models.{}.api_key_env", p.name),
                var,
                format!("requests to provider \"{}\" fail", p.name),
            ))
        })
        .collect();
    if let Some(w) = &cfg.tools.web_search
        && let Some(var) = &w.api_key_env
    {
        named.push((
            "tools.web_search.api_key_env".into(),
            var,
            "web_search calls fail".into(),
        ));
    }
    for s in cfg.mcp.servers.values() {
        if let Some(var) = &s.bearer_token_env {
            named.push((
                format!("mcp.servers.{}.bearer_token_env", s.name),
                var,
                format!("MCP server \"{}\" is not started", s.name),
            ));
        }
    }
    named
        .into_iter()
        .filter(|(_, var, _)| env_is_set(Some(var)) == Some(false))
        .map(|(key, var, what)| {
            format!(
                "{key}: {var} is not set in this environment, so {what} until it is; \
                 cron jobs and services do not see your login shell's environment: \
                 set it in the crontab or the unit too"
            )
        })
        .collect()
}

pub(crate) fn env_is_set(name: Option<&str>) -> Option<bool> {
    name.map(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()))
}

/// How a path is written: as it is (JSON), or as a config file must spell
/// it (TOML).
type PathText<'a> = &'a dyn Fn(&Path) -> String;

/// One provider: the keys every kind takes, then its kind's own.
fn provider_value(p: &ProviderConfig, path: PathText) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("kind".into(), p.kind().as_str().into());
    m.insert("model".into(), p.model.clone().into());
    m.insert("timeout_secs".into(), p.timeout_secs.into());
    if let Some(n) = p.max_tools {
        m.insert("max_tools".into(), n.into());
    }
    let table = |v: &[(String, String)]| -> Value {
        v.iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    match &p.settings {
        ProviderSettings::Mock(s) => {
            if let Some(f) = &s.fixture {
                m.insert("fixture".into(), path(f).into());
            }
            if let Some(f) = &s.record_requests {
                m.insert("record_requests".into(), path(f).into());
            }
            m.insert("stream".into(), s.stream.into());
        }
        ProviderSettings::OpenAiCompatible(o) => {
            m.insert("base_url".into(), o.base_url.clone().into());
            if let Some(k) = &o.api_key_env {
                m.insert("api_key_env".into(), k.clone().into());
                m.insert("api_key_set".into(), env_is_set(Some(k)).into());
            }
            if let Some(t) = o.temperature {
                m.insert("temperature".into(), t.into());
            }
            if let Some(n) = o.max_tokens {
                m.insert("max_tokens".into(), n.into());
            }
            if !o.headers.is_empty() {
                m.insert("headers".into(), table(&o.headers));
            }
            m.insert("tool_mode".into(), o.tool_mode.as_str().into());
            m.insert("stream".into(), o.stream.into());
            m.insert("retries".into(), o.retries.into());
        }
        ProviderSettings::Reliable(r) => {
            m.insert("providers".into(), r.providers.clone().into());
        }
        ProviderSettings::Router(r) => {
            m.insert("hints".into(), table(&r.hints));
            m.insert("routes".into(), table(&r.routes));
            m.insert("default_route".into(), r.default_route.clone().into());
        }
    }
    m.into()
}

/// The effective config as JSON; API keys appear only as the variable name
/// and whether it is set.
pub(crate) fn config_value(cfg: &Config) -> Value {
    config_value_with(cfg, &|p| p.display().to_string())
}

fn config_value_with(cfg: &Config, path: PathText) -> Value {
    let providers: serde_json::Map<String, Value> = cfg
        .providers
        .values()
        .map(|p| (p.name.clone(), provider_value(p, path)))
        .collect();
    let paths = |v: &[PathBuf]| v.iter().map(|p| path(p)).collect::<Vec<_>>();
    let mut v = json!({
        "workspace_dir": path(&cfg.workspace_dir),
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
            "secret_files_allow": cfg.security.secret_files_allow,
            "dotfiles_allow": cfg.security.dotfiles_allow,
            "secret_env": cfg.security.secret_env,
        },
        "providers": {"models": providers},
        "channels": {"cli": {
            "enabled": cfg.channels.cli.enabled,
            "tools_allow": cfg.channels.cli.tools_allow,
        }},
        "memory": {
            "backend": "sqlite",
            "path": path(&cfg.memory.path),
            "busy_timeout_ms": cfg.memory.busy_timeout_ms,
            "context_turns": cfg.memory.context_turns,
            "context_hits": cfg.memory.context_hits,
            "context_bytes": cfg.memory.context_bytes,
            "recall": cfg.memory.recall.as_str(),
            "categories": cfg.memory.categories,
            "session": cfg.memory.session.as_str(),
            "session_hour": cfg.memory.session_hour,
            "summarize_conversations": cfg.memory.summarize_conversations,
        },
        "receipts": {
            "enabled": cfg.receipts.enabled,
            "path": path(&cfg.receipts.path),
            "anchor_file": cfg.receipts.anchor_file.as_deref().map(path),
        },
        "prompt": {
            "base_file": cfg.prompt.base_file.as_deref().map(path),
            "persona_file": cfg.prompt.persona_file.as_deref().map(path),
            "user_file": cfg.prompt.user_file.as_deref().map(path),
        },
        "skills": {
            "enabled": cfg.skills.enabled,
            "workspace": cfg.skills.workspace,
        },
        "tools": tools_value(cfg),
        "gateway": {
            "bind": cfg.gateway.bind.to_string(),
            "allow_public_bind": cfg.gateway.allow_public_bind,
            "workers": cfg.gateway.workers,
            "max_connections": cfg.gateway.max_connections,
            "header_timeout_ms": cfg.gateway.header_timeout_ms,
            "idle_timeout_ms": cfg.gateway.idle_timeout_ms,
            "max_body_bytes": cfg.gateway.max_body_bytes,
            "rate_limit_per_minute": cfg.gateway.rate_limit_per_minute,
            "cors_origins": cfg.gateway.cors_origins,
        },
    });
    if !cfg.mcp.servers.is_empty() {
        let servers: serde_json::Map<String, Value> = cfg
            .mcp
            .servers
            .values()
            .map(|s| {
                let command = if s.command.contains('/') {
                    path(Path::new(&s.command))
                } else {
                    s.command.clone()
                };
                let mut server = json!({
                    "network": s.network,
                    "timeout_secs": s.timeout_secs,
                    "tools_allow": s.tools_allow,
                    "tools_deny": s.tools_deny,
                    "risk": s.risk.as_str(),
                    "read_only_tools": s.read_only_tools,
                });
                match &s.url {
                    // Reached at its url: none of a started server's keys.
                    Some(url) => {
                        server["url"] = json!(url);
                        if let Some(b) = &s.bearer_token_env {
                            server["bearer_token_env"] = json!(b);
                        }
                    }
                    None => {
                        server["command"] = json!(command);
                        server["args"] = json!(s.args);
                        server["env"] = json!(s.env);
                        server["cwd"] = json!(s.cwd.as_deref().map(path));
                        server["read_paths"] = json!(paths(&s.read_paths));
                    }
                }
                (s.name.clone(), server)
            })
            .collect();
        v["mcp"] = json!({ "servers": servers });
    }
    if !cfg.plugin_network.is_empty() {
        let plugins: serde_json::Map<String, Value> = cfg
            .plugin_network
            .iter()
            .map(|(name, hosts)| (name.clone(), json!({ "network": hosts })))
            .collect();
        v["plugins"] = Value::Object(plugins);
    }
    // A policy file's rules are shown here as the config's own.
    if !cfg.policy.rules.is_empty() {
        let rules: Vec<Value> = cfg
            .policy
            .rules
            .iter()
            .map(|r| {
                let examples: Vec<Value> = r
                    .examples
                    .iter()
                    .map(|e| {
                        json!({
                            "call": {"tool": e.tool, "args": e.args},
                            "expect": e.expect.map_or("pass", |x| x.as_str()),
                        })
                    })
                    .collect();
                json!({
                    "name": r.name,
                    "tool": r.tools,
                    "plugin": r.plugins,
                    "program": r.programs,
                    "subcommand": r.subcommands,
                    "flags": r.flags,
                    "options": r.options,
                    "paths": r.paths,
                    "hosts": r.hosts,
                    "origin": r.origins,
                    "effect": r.effect.as_str(),
                    "reason": r.reason,
                    "examples": examples,
                })
            })
            .collect();
        v["policy"] = json!({ "rules": rules });
    }
    v
}

/// `[tools]`: http's policy, web_search's service, and every tool's
/// middleware keys that are set.
fn tools_value(cfg: &Config) -> Value {
    let mut tools = serde_json::Map::new();
    tools.insert(
        "http".into(),
        json!({
            "allowed_domains": cfg.tools.http.allowed_domains,
            "allow_private": cfg.tools.http.allow_private,
            "max_redirects": cfg.tools.http.max_redirects,
        }),
    );
    let code = &cfg.tools.code_run;
    let secrets: serde_json::Map<String, Value> = code
        .secrets
        .iter()
        .map(|(name, s)| (name.clone(), json!({"env": s.env, "hosts": s.hosts})))
        .collect();
    let mut c = json!({
        "risk": code.risk.as_str(),
        "max_output_bytes": code.max_output_bytes,
    });
    if !secrets.is_empty() {
        c["secrets"] = secrets.into();
    }
    tools.insert("code_run".into(), c);
    let plan = &cfg.tools.plan;
    tools.insert(
        "plan".into(),
        json!({
            "max_depth": plan.max_depth,
            "max_tasks": plan.max_tasks,
            "task_rounds": plan.task_rounds,
            "task_tokens": plan.task_tokens,
            "tree_tokens": plan.tree_tokens,
            "wall_clock_secs": plan.wall_clock_secs,
            "skill_min_score": plan.skill_min_score,
        }),
    );
    if let Some(w) = &cfg.tools.web_search {
        let mut m = serde_json::Map::new();
        m.insert("provider".into(), w.provider.as_str().into());
        m.insert("url".into(), w.url.clone().into());
        if let Some(k) = &w.api_key_env {
            m.insert("api_key_env".into(), k.clone().into());
        }
        tools.insert("web_search".into(), m.into());
    }
    for (tool, m) in &cfg.tools.middleware {
        let entry = tools
            .entry(tool.as_str())
            .or_insert_with(|| Value::Object(Default::default()));
        let Some(e) = entry.as_object_mut() else {
            continue;
        };
        if let Some(on) = m.enabled {
            e.insert("enabled".into(), on.into());
        }
        if let Some(t) = m.timeout_secs {
            e.insert("timeout_secs".into(), t.into());
        }
        if m.rate_limit.is_set() {
            e.insert("rate_limit".into(), rate_limit_value(&m.rate_limit));
        }
        if let Some(t) = m.cache_ttl_secs {
            e.insert("cache_ttl_secs".into(), t.into());
        }
    }
    if cfg.tools.rate_limit.is_set() {
        tools.insert("rate_limit".into(), rate_limit_value(&cfg.tools.rate_limit));
    }
    tools.into()
}

fn rate_limit_value(l: &crate::config::RateLimit) -> Value {
    json!({"per_minute": l.per_minute, "per_hour": l.per_hour, "burst": l.burst})
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

pub fn show(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    if json {
        print_json(&config_value(&cfg));
    } else {
        let source = match &cfg.source {
            Some(p) => p.display().to_string(),
            None => format!("{} (absent: defaults)", cfg.config_path.display()),
        };
        print!("# effective config from {source}\n{}", config_toml(&cfg)?);
    }
    Ok(exit::OK)
}

/// The effective config as a file that `config validate` accepts and that
/// loads to the same values.
fn config_toml(cfg: &Config) -> Result<String> {
    // Loading expands `$VAR` in paths, so a literal `$` is written `$$`.
    let mut v = strip_nulls(config_value_with(cfg, &|p| {
        p.display().to_string().replace('$', "$$")
    }));
    // `api_key_set` is a fact about the environment, not a config key: it
    // becomes a comment.
    let mut keys = String::new();
    if let Some(models) = v["providers"]["models"].as_object_mut() {
        for (name, p) in models.iter_mut() {
            if let Some(set) = p.as_object_mut().and_then(|m| m.remove("api_key_set")) {
                let var = p["api_key_env"].as_str().unwrap_or("");
                let state = if set == true { "set" } else { "not set" };
                keys.push_str(&format!("# {name}: {var} is {state}\n"));
            }
        }
    }
    let t = crate::cli::toml_text::document(&v)
        .map_err(|e| Error::new(crate::error::Kind::Internal, e))?;
    Ok(format!("{keys}{t}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The TOML view of a config with every kind of provider and paths
    /// holding `$`, `${` and spaces loads back to the same config.
    #[test]
    fn the_toml_view_loads_to_the_same_config() {
        let path = Path::new("/cfg/config.toml");
        let text = "workspace_dir = \"/w/a $$HOME b\"\n\
             [security]\nsecret_files_allow = [\".env.example\", \"fixtures/**\"]\n\
             secret_env = [\"LC_SECRET_A\", \"LC_SECRET_B\"]\n\
             [providers.models.m]\nkind = \"mock\"\nfixture = \"/f/$${x.toml\"\nstream = false\n\
             record_requests = \"rec $$1.jsonl\"\n\
             [providers.models.o]\nkind = \"openai-compatible\"\nbase_url = \"http://h/v1\"\n\
             api_key_env = \"LC_SURELY_UNSET_KEY\"\ntemperature = 0.5\nmax_tokens = 9\n\
             tool_mode = \"structured\"\nretries = 0\ntimeout_secs = 3\nmax_tools = 4\n\
             [providers.models.o.headers]\nX-Title = \"t\"\n\
             [providers.models.r]\nkind = \"reliable\"\nproviders = [\"o\", \"m\"]\n\
             [providers.models.t]\nkind = \"router\"\ndefault_route = \"m\"\n\
             [providers.models.t.routes]\n\"stack trace\" = \"o\"\n\
             [prompt]\nuser_file = \"/p/$$u.md\"\n\
             [memory]\npath = \"/m/$$$$.db\"\n\
             [receipts]\nanchor_file = \"/a/$$x anchor\"\n\
             [skills]\nenabled = [\"b\", \"a-1\"]\nworkspace = true\n\
             [gateway]\nbind = \"[::1]:9000\"\nworkers = 3\nmax_connections = 9\n\
             cors_origins = [\"http://localhost:3000\"]\nrate_limit_per_minute = 5\n\
             [channels.cli]\ntools_allow = [\"time\", \"shell\", \"file_read\"]\n\
             [tools.shell]\ntimeout_secs = 7\nrate_limit = { per_minute = 3 }\n\
             [tools.file_read]\nenabled = false\n\
             [tools.http]\nenabled = true\nallowed_domains = [\"example.org\"]\n\
             [tools.http.rate_limit]\nper_minute = 2\nper_hour = 20\n\
             [tools.web_search]\nprovider = \"brave\"\napi_key_env = \"LC_BRAVE\"\n\
             rate_limit = { per_hour = 50 }\n\
             [tools.code_run]\nrisk = \"medium\"\nmax_output_bytes = 4096\n\
             [tools.code_run.secrets]\nGH = { env = \"GH_T\", hosts = [\"api.github.com\"] }\n\
             [mcp.servers.time]\ncommand = \"/opt/mcp $$x/bin/mcp-server-time\"\n\
             args = [\"--local-timezone\", \"$HOME\"]\nenv = [\"TZ\"]\n\
             read_paths = [\"/opt/mcp $$x\"]\ntools_deny = [\"convert_time\"]\n\
             [mcp.servers.git-2]\ncommand = \"uvx\"\ncwd = \"/w\"\nnetwork = [\"pypi.org\"]\n\
             timeout_secs = 9\ntools_allow = [\"git_log\"]\nrisk = \"high\"\n\
             read_only_tools = [\"git_log\"]\n\
             [mcp.servers.remote]\nurl = \"https://mcp.example.org/mcp\"\n\
             bearer_token_env = \"LC_MCP_T\"\nnetwork = [\"mcp.example.org\"]\n\
             [plugins.echo]\nnetwork = [\"api.example.org:8443\"]\n\
             [[policy.rules]]\nname = \"no-rm-r\"\nprogram = \"rm\"\nflags = [\"recursive\"]\n\
             origin = \"sop\"\neffect = \"deny\"\nreason = \"people only\"\n\
             examples = [{ command = \"rm -fr x\", expect = \"deny\" }, \
             { call = { tool = \"time\" }, expect = \"pass\" }]\n\
             [[policy.rules]]\nname = \"notes\"\ntool = \"file_write\"\npaths = [\"notes/*\"]\n\
             effect = \"allow\"\nreason = \"scratch\"\n";
        let cfg = Config::from_text(text, path, PathBuf::from("/state"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.workspace_dir, PathBuf::from("/w/a $HOME b"));
        assert_eq!(cfg.memory.path, PathBuf::from("/m/$$.db"));
        assert_eq!(
            cfg.security.secret_files_allow,
            [".env.example", "fixtures/**"]
        );
        assert_eq!(
            cfg.receipts.anchor_file.as_deref(),
            Some(Path::new("/a/$x anchor"))
        );
        assert_eq!(cfg.security.secret_env, ["LC_SECRET_A", "LC_SECRET_B"]);
        assert_eq!(cfg.skills.enabled, ["b", "a-1"]);
        assert_eq!(cfg.gateway.bind.to_string(), "[::1]:9000");
        assert_eq!(
            (cfg.gateway.workers, cfg.gateway.rate_limit_per_minute),
            (3, 5)
        );
        use crate::tools::ToolName;
        assert_eq!(
            cfg.channels.cli.tools_allow,
            [
                ToolName::Time,
                ToolName::Shell,
                ToolName::Http,
                ToolName::WebSearch
            ]
        );
        assert_eq!(cfg.tools.of(ToolName::Shell).timeout_secs, Some(7));
        assert_eq!(
            cfg.tools.of(ToolName::WebSearch).rate_limit.per_hour,
            Some(50)
        );
        assert_eq!(
            cfg.tools.web_search.as_ref().map(|w| w.url.as_str()),
            Some(crate::config::BRAVE_DEFAULT_URL)
        );
        assert_eq!(
            cfg.mcp.servers["time"].command,
            "/opt/mcp $x/bin/mcp-server-time"
        );
        assert_eq!(cfg.mcp.servers["time"].args[1], "$HOME");
        assert_eq!(
            cfg.mcp.servers["git-2"].risk,
            crate::config::DeclaredRisk::High
        );
        assert_eq!(cfg.policy.rules.len(), 2);
        assert_eq!(cfg.policy.rules[0].examples.len(), 2);
        let shown = config_toml(&cfg).unwrap();
        assert!(
            shown.starts_with("# o: LC_SURELY_UNSET_KEY is not set\n"),
            "{shown}"
        );
        let again = Config::from_text(&shown, path, PathBuf::from("/state"))
            .unwrap_or_else(|e| panic!("{e}\n{shown}"));
        assert_eq!(again, cfg);
    }
}
