//! First-run setup shared by `init` and `onboard`: the config template,
//! the questions `onboard` asks, and writing it all out.

use super::parse::Onboard;
use crate::config::{self, Autonomy, Config};
use crate::error::{Error, Result, exit};
use crate::memory::Memory;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A TOML string literal that survives config loading (`$` is expanded there).
fn toml_path_literal(p: &Path) -> String {
    let s = p.display().to_string().replace('$', "$$");
    toml::Value::String(s).to_string()
}

/// What `init` and `onboard` write into a new config.
pub struct Setup {
    /// A TOML literal.
    workspace: String,
    default_provider: &'static str,
    autonomy: String,
    base_url: String,
    model: String,
    api_key_env: Option<String>,
}

impl Setup {
    pub fn defaults(workspace: Option<&Path>) -> Result<Setup> {
        let workspace = match workspace {
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

/// Where the config goes: `--config PATH`, else the state dir's.
pub fn config_path(config: Option<&Path>) -> Result<PathBuf> {
    match config {
        Some(p) => Ok(p.to_path_buf()),
        None => Ok(config::state_dir()?.join("config.toml")),
    }
}

/// Writes the config (checked before it replaces anything), then creates the
/// workspace and the memory database.
pub fn install(config: Option<&Path>, setup: &Setup, replace_existing: bool) -> Result<i32> {
    let state = config::state_dir()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&state)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", state.display())))?;
    let path = config_path(config)?;
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
    println!("next: latchclaw agent \"What files are in this project?\"");
    Ok(exit::OK)
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

/// The setup `onboard` writes: flags answer in advance, a terminal is
/// asked the rest, and with neither the defaults stand.
pub fn wizard(o: &Onboard) -> Result<Setup> {
    use std::io::IsTerminal;
    let interactive = std::io::stdin().is_terminal() && !o.yes;
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
    let kind = pick(&o.provider, "Provider (mock or openai-compatible)", "mock")?;
    let mut setup = Setup::defaults(o.workspace.as_deref())?;
    match kind.as_str() {
        "mock" => {}
        "openai-compatible" => {
            setup.default_provider = "openai_compatible";
            setup.base_url = pick(&o.base_url, "Server URL (…/v1)", "http://localhost:1234/v1")?;
            setup.model = pick(&o.model, "Model", "local-model")?;
            let var = pick(
                &o.api_key_env,
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
        &o.autonomy,
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
    if o.workspace.is_none() && interactive {
        setup.workspace = workspace_literal(&ask("Workspace directory", "~/latchclaw-workspace")?)?;
    }
    Ok(setup)
}

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
