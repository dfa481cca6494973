//! `init`, `onboard`, `config validate`, `config show`.

use crate::cli::onboard::{self, Setup};
use crate::cli::parse::Onboard;
use crate::cli::{Ctx, print_json};
use crate::config::Config;
use crate::error::{Error, Result, exit};
use serde_json::{Value, json};
use std::path::PathBuf;

pub fn init(ctx: &Ctx, workspace: Option<PathBuf>, force: bool) -> Result<i32> {
    onboard::install(
        ctx.config.as_deref(),
        &Setup::defaults(workspace.as_deref())?,
        force,
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
    onboard::install(ctx.config.as_deref(), &setup, true)
}

pub fn validate(ctx: &Ctx) -> Result<i32> {
    let cfg = ctx.load_config()?;
    match &cfg.source {
        Some(p) => println!(
            "ok: {} ({}, default \"{}\", autonomy {})",
            p.display(),
            crate::cli::count(cfg.providers.len() as u64, "provider"),
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

pub(crate) fn env_is_set(name: &Option<String>) -> Option<bool> {
    name.as_ref()
        .map(|n| std::env::var_os(n).is_some_and(|v| !v.is_empty()))
}

/// The effective config as JSON; API keys appear only as the variable name
/// and whether it is set.
pub(crate) fn config_value(cfg: &Config) -> Value {
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

pub fn show(ctx: &Ctx, json: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let v = config_value(&cfg);
    if json {
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
