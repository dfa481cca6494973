//! First-run setup shared by `init` and `onboard`: the config template,
//! the questions `onboard` asks, and writing it all out.

use super::parse::Onboard;
use super::toml_text;
use crate::config::{self, Autonomy, CliChannel, Config, Security};
use crate::error::{Error, Result, exit};
use crate::memory::Memory;
use crate::security::redact::Redactor;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A TOML string literal that survives config loading (`$` is expanded there).
fn toml_path_literal(p: &Path) -> String {
    let s = p.display().to_string().replace('$', "$$");
    toml_text::string(&s)
}

/// A TOML list of strings on one line.
fn toml_list<S: AsRef<str>>(v: impl IntoIterator<Item = S>) -> String {
    let items: Vec<String> = v
        .into_iter()
        .map(|s| toml_text::string(s.as_ref()))
        .collect();
    format!("[{}]", items.join(", "))
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
    /// `--workspace` as given, to say whether an existing config took it.
    requested_workspace: Option<PathBuf>,
}

impl Setup {
    pub fn defaults(workspace: Option<&Path>) -> Result<Setup> {
        let workspace_arg = workspace;
        let workspace = match workspace {
            Some(w) => workspace_literal(&w.display().to_string())?,
            None => toml_text::string(config::DEFAULT_WORKSPACE_DIR),
        };
        Ok(Setup {
            workspace,
            requested_workspace: workspace_arg.map(Path::to_path_buf),
            default_provider: config::BUILTIN_MOCK,
            autonomy: Security::default().autonomy.as_str().into(),
            base_url: "http://localhost:1234/v1".into(),
            model: "local-model".into(),
            // localhost needs no key (see `is_local_url`).
            api_key_env: None,
        })
    }

    fn render(&self) -> String {
        let key = match &self.api_key_env {
            Some(k) => format!(
                "api_key_env = {}     # the variable's name; the key itself stays in the environment",
                toml_text::string(k)
            ),
            None => "# api_key_env = \"OPENAI_API_KEY\"   # for servers that need a key".into(),
        };
        // The defaults it writes out are the config's own.
        let security = Security::default();
        let cli = CliChannel::default();
        INIT_CONFIG
            .replace("{workspace_only}", &security.workspace_only.to_string())
            .replace(
                "{forbidden_paths}",
                &toml_list(config::DEFAULT_FORBIDDEN_PATHS),
            )
            .replace(
                "{forbidden_commands}",
                &toml_list(&security.forbidden_commands),
            )
            .replace("{audit_log}", &security.audit_log.to_string())
            .replace("{cli_enabled}", &cli.enabled.to_string())
            .replace(
                "{tools_allow}",
                &toml_list(cli.tools_allow.iter().map(|t| t.as_str())),
            )
            .replace("{workspace}", &self.workspace)
            .replace("{default_provider}", self.default_provider)
            .replace("{autonomy}", &self.autonomy)
            .replace("{base_url}", &toml_text::string(&self.base_url))
            .replace("{model}", &toml_text::string(&self.model))
            .replace("{api_key_env}", &key)
    }
}

fn workspace_literal(raw: &str) -> Result<String> {
    if raw.starts_with('~') {
        return Ok(toml_text::string(&raw.replace('$', "$$")));
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
/// workspace and the memory database. `redactor`: the process's, which
/// learns the secrets the written config names.
pub fn install(
    config: Option<&Path>,
    setup: &Setup,
    replace_existing: bool,
    redactor: &Arc<Redactor>,
) -> Result<i32> {
    config::usable_state_dir(&config::state_dir()?)?;
    let path = config_path(config)?;
    let exists = path.exists();
    let action = if exists && !replace_existing {
        "kept (use --force to overwrite)"
    } else {
        let tmp = path.with_extension("toml.new");
        // 0600 like the rest of the state: the config names the key's
        // variable and the workspace, nobody else's business.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| std::io::Write::write_all(&mut f, setup.render().as_bytes()));
        written.map_err(|e| Error::runtime(format!("cannot write {}: {e}", tmp.display())))?;
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
    redactor.learn_config(&cfg);
    Memory::open(
        &cfg.memory.path,
        cfg.memory.busy_timeout_ms,
        Arc::clone(redactor),
    )?;
    // The setup stands without it; the problem is named, and the first
    // run meets it again.
    let key = crate::receipts::ensure_key(
        &cfg.receipt_key_path(),
        &cfg.receipts.path,
        cfg.receipts.anchor_file.as_deref(),
    );
    println!("state dir  {}", cfg.state_dir.display());
    println!("config     {} ({action})", path.display());
    println!("memory     {}", cfg.memory.path.display());
    println!("receipts   {}", cfg.receipts.path.display());
    let key_note = match key.as_ref().map(|k| (k.created, k.unkeyed)) {
        Err(e) => format!("not created: {}", e.msg),
        Ok((false, _)) => "kept".to_string(),
        Ok((true, 0)) => "created, 0600; every receipt carries an hmac under it".to_string(),
        Ok((true, n)) => format!(
            "created, 0600; {} before it {} not authenticated, a `keyed` receipt marks where \
             keyed receipts begin",
            crate::receipts::span(1, n),
            if n == 1 { "is" } else { "are" }
        ),
    };
    println!(
        "receipt key {} ({key_note})",
        cfg.receipt_key_path().display()
    );
    let kept = exists && !replace_existing;
    let ws_note = match &setup.requested_workspace {
        // The existing config was kept, so --workspace was not written.
        Some(asked) if kept => {
            let asked = std::path::absolute(asked).unwrap_or_else(|_| asked.clone());
            if asked == cfg.workspace_dir {
                " (unchanged: already the config's workspace)".to_string()
            } else {
                format!(
                    " (unchanged: the existing config's; --workspace {} was not applied: \
                     `latchclaw init --force --workspace DIR` writes a new config, or edit workspace_dir)",
                    asked.display()
                )
            }
        }
        _ => String::new(),
    };
    println!("workspace  {}{ws_note}", cfg.workspace_dir.display());
    println!(
        "provider   {} (autonomy {})",
        cfg.default_provider,
        cfg.security.autonomy.as_str()
    );
    if let Some(var) = cfg.provider(&cfg.default_provider)?.api_key_env()
        && std::env::var_os(var).is_none_or(|v| v.is_empty())
    {
        println!("key        export {var}=... before running the agent (the key is never stored)");
    }
    // A first request tells whether the provider answers at all; asking the
    // agent about a workspace just made would only list an empty directory.
    let provider = cfg.provider(&cfg.default_provider)?;
    let target = match &provider.settings {
        config::ProviderSettings::OpenAiCompatible(o) => format!(" at {}", o.base_url),
        _ => String::new(),
    };
    println!(
        "next: latchclaw provider test   (one request to {}{target}, model {})",
        cfg.default_provider, provider.model
    );
    if provider.kind() == config::ProviderKind::Mock {
        println!(
            "      a real model: latchclaw onboard --force --provider openai-compatible \
             --base-url URL --model NAME (README: Quick Start)"
        );
    }
    Ok(exit::OK)
}

/// Asks on the terminal until `check` accepts the answer (an empty answer
/// is the default): a typo is asked again, not the end of the setup. End
/// of input gives up.
fn ask(
    question: &str,
    default: &str,
    check: &dyn Fn(&str) -> std::result::Result<(), String>,
) -> Result<String> {
    loop {
        eprint!("{question} [{default}]: ");
        let _ = std::io::Write::flush(&mut std::io::stderr());
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line)? == 0 {
            eprintln!();
            return Err(Error::usage("setup cancelled: no answer (end of input)"));
        }
        let answer = match line.trim() {
            "" => default,
            a => a,
        };
        match check(answer) {
            Ok(()) => return Ok(answer.to_string()),
            Err(why) => eprintln!("  {}; try again", crate::util::printable(&why)),
        }
    }
}

/// True for a server on this machine, which needs no API key.
pub fn is_local_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or("");
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    matches!(
        host.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    )
}

fn check_provider(kind: &str) -> std::result::Result<(), String> {
    match kind {
        "mock" | "openai-compatible" => Ok(()),
        other => Err(format!(
            "provider \"{other}\" is not offered here; allowed values: mock, openai-compatible"
        )),
    }
}

fn check_url(url: &str) -> std::result::Result<(), String> {
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match host {
        Some(h) if !h.is_empty() && !h.starts_with('/') => Ok(()),
        _ => Err(format!(
            "base_url \"{url}\" must start with http:// or https:// and name a server, e.g. http://localhost:1234/v1"
        )),
    }
}

fn check_autonomy(a: &str) -> std::result::Result<(), String> {
    match Autonomy::parse(a) {
        Some(_) => Ok(()),
        None => Err(format!(
            "autonomy \"{a}\" is not allowed; allowed values: {}",
            Autonomy::ALLOWED.join(", ")
        )),
    }
}

fn check_var(v: &str) -> std::result::Result<(), String> {
    let name_ok = v
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if v == "-" || name_ok {
        Ok(())
    } else {
        Err(format!(
            "\"{v}\" is not an environment variable name (letters, digits, _); - for none"
        ))
    }
}

fn check_workspace(w: &str) -> std::result::Result<(), String> {
    workspace_literal(w).map(|_| ()).map_err(|e| e.to_string())
}

/// The setup `onboard` writes: flags answer in advance, a terminal is
/// asked the rest, and with neither the defaults stand. A bad flag is an
/// error; a bad answer on the terminal is asked again.
pub fn wizard(o: &Onboard) -> Result<Setup> {
    use std::io::IsTerminal;
    let interactive = std::io::stdin().is_terminal() && !o.yes;
    type Check = dyn Fn(&str) -> std::result::Result<(), String>;
    let pick = |flag: &Option<String>, question: &str, default: &str, check: &Check| match flag {
        Some(v) => check(v).map(|()| v.clone()).map_err(Error::usage),
        None if interactive => ask(question, default, check),
        None => Ok(default.to_string()),
    };
    if interactive {
        eprintln!("LatchClaw setup. Press Enter to keep the value in brackets.");
    }
    let kind = pick(
        &o.provider,
        "Provider (mock or openai-compatible)",
        "mock",
        &check_provider,
    )?;
    let mut setup = Setup::defaults(o.workspace.as_deref())?;
    if kind == "openai-compatible" {
        setup.default_provider = "openai_compatible";
        setup.base_url = pick(
            &o.base_url,
            "Server URL (…/v1)",
            "http://localhost:1234/v1",
            &check_url,
        )?;
        setup.model = pick(&o.model, "Model", "local-model", &|_| Ok(()))?;
        // A server on this machine needs no key: none unless one is named.
        let default_var = if is_local_url(&setup.base_url) {
            "-"
        } else {
            "OPENAI_API_KEY"
        };
        let var = pick(
            &o.api_key_env,
            "Environment variable with the API key (- for none)",
            default_var,
            &check_var,
        )?;
        setup.api_key_env = (var != "-").then_some(var);
    }
    setup.autonomy = pick(
        &o.autonomy,
        "Autonomy (readonly, supervised, full)",
        Security::default().autonomy.as_str(),
        &check_autonomy,
    )?;
    if o.workspace.is_none() && interactive {
        let w = ask(
            "Workspace directory",
            config::DEFAULT_WORKSPACE_DIR,
            &check_workspace,
        )?;
        setup.workspace = workspace_literal(&w)?;
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
workspace_only = {workspace_only}
forbidden_paths = {forbidden_paths}
forbidden_commands = {forbidden_commands}
audit_log = {audit_log}

# The built-in deterministic provider: no network, no key.
[providers.models.mock]
kind = "mock"
model = "mock"

[providers.models.openai_compatible]
kind = "openai-compatible"
base_url = {base_url}
model = {model}
{api_key_env}

[channels.cli]
enabled = {cli_enabled}
tools_allow = {tools_allow}

# [memory]
# path = "~/.latchclaw/memory.sqlite"     # default: memory.sqlite in the state dir
# [receipts]
# path = "~/.latchclaw/tool_receipts.log" # default: tool_receipts.log in the state dir
"#;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::{OpenAiSettings, ProviderConfig, ProviderSettings};

    /// What `init` writes sets every key it names to its default; besides
    /// them it only offers the openai-compatible provider.
    #[test]
    fn the_template_writes_the_defaults() {
        let home = crate::util::home_dir().expect("HOME is set");
        let state = home.join(".latchclaw");
        let path = state.join("config.toml");
        let text = Setup::defaults(None).unwrap().render();
        let mut c = Config::from_text(&text, &path, state.clone())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let offered = ProviderConfig::new(
            "openai_compatible",
            "local-model",
            ProviderSettings::OpenAiCompatible(OpenAiSettings::new("http://localhost:1234/v1")),
        );
        assert_eq!(c.providers.remove("openai_compatible"), Some(offered));
        assert_eq!(c, Config::defaults(path, state));
    }
}
