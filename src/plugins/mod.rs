//! Plugins: `<state>/plugins/NAME/` holding `manifest.toml` and the
//! executables its tools name. Installed by copy (`install`), pinned (the
//! definitions the operator accepted, in `<state>/pins/plugins/NAME.json`,
//! outside the directory the plugin can see), loaded into the runtime's
//! `external::Registry` (`registry`), and called in the sandbox
//! (`run::call`). Above `external`; the gate judges a plugin's tools on
//! what `external::ExternalTool::judged` says, never on a manifest.

pub mod manifest;
pub mod run;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::external::{ExternalTool, Kind, Registry};
use manifest::{Manifest, PluginTool};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub use run::call;

/// Entries copied from a plugin's directory before `install` gives up.
const COPY_MAX_ENTRIES: usize = 10_000;
/// Bytes copied before `install` gives up.
const COPY_MAX_BYTES: u64 = 256 * 1024 * 1024;

pub fn plugins_dir(cfg: &Config) -> PathBuf {
    cfg.state_dir.join("plugins")
}

fn pin_path(cfg: &Config, name: &str) -> PathBuf {
    cfg.state_dir
        .join("pins")
        .join("plugins")
        .join(format!("{name}.json"))
}

/// One installed plugin as found on disk.
#[derive(Debug)]
pub struct Installed {
    pub name: String,
    pub dir: PathBuf,
    /// The manifest, or every problem with it now.
    pub manifest: std::result::Result<Manifest, Vec<String>>,
    /// What is pinned: the accepted definitions (`None`: never approved).
    pub pinned: Option<Value>,
    /// The definitions on disk now (`None` when the manifest is broken).
    pub current: Option<Value>,
}

impl Installed {
    /// `None`: approved as it is. `Some(why)`, the refusal's words.
    pub fn unapproved(&self) -> Option<String> {
        let approve = format!(
            "`latchclaw plugin approve {}` shows the difference and approves it",
            self.name
        );
        match (&self.manifest, &self.pinned, &self.current) {
            (Err(e), _, _) => Some(format!(
                "plugin \"{}\": its manifest no longer reads ({}); not offered",
                self.name,
                e.join("; ")
            )),
            (_, None, _) => Some(format!(
                "plugin \"{}\" was never approved (no pin); {approve}",
                self.name
            )),
            // An executable gone or unreadable: not what was approved.
            (_, Some(_), None) => Some(format!(
                "plugin \"{}\": an executable of its tools cannot be read; {approve}",
                self.name
            )),
            (_, Some(p), Some(c)) if p["hash"] != c["hash"] => Some(format!(
                "plugin \"{}\": its tool definitions changed since they were approved; \
                 its tools are refused until the operator approves them again: {approve}",
                self.name
            )),
            _ => None,
        }
    }
}

/// The plugins in `<state>/plugins`, by name.
pub fn installed(cfg: &Config) -> Result<Vec<Installed>> {
    let dir = plugins_dir(cfg);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::runtime(format!("{}: {e}", dir.display()))),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Half-done installs (`.NAME.tmp-…`) and anything not a directory.
        if !manifest::valid_plugin_name(&name) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        out.push(load_one(cfg, &name, entry.path()));
    }
    crate::util::sort::sort_by(&mut out, |a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn load_one(cfg: &Config, name: &str, dir: PathBuf) -> Installed {
    let manifest = manifest::read(&dir).and_then(|m| {
        if m.name == name {
            Ok(m)
        } else {
            Err(vec![format!(
                "name: \"{}\" is not its directory's name \"{name}\"",
                m.name
            )])
        }
    });
    let current = manifest
        .as_ref()
        .ok()
        .and_then(|m| definitions(&dir, m).ok());
    let pinned = std::fs::read(pin_path(cfg, name))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    Installed {
        name: name.to_string(),
        dir,
        manifest,
        pinned,
        current,
    }
}

/// What is pinned of a plugin: each tool as declared, with the SHA-256 of
/// the executable it runs, and the hash of it all. A change to any of it
/// (a description, the schema, risk, read_only, network, env, command or
/// the executable's bytes) is a change the operator must approve.
pub fn definitions(dir: &Path, m: &Manifest) -> std::result::Result<Value, String> {
    let mut tools = Vec::new();
    for t in &m.tools {
        let exe = dir.join(&t.command);
        let bytes = std::fs::read(&exe).map_err(|e| format!("{}: {e}", t.command.display()))?;
        let mut v = t.value();
        v["command_sha256"] = json!(crate::util::sha256_hex(&bytes));
        tools.push(v);
    }
    let tools = Value::Array(tools);
    let hash = crate::util::sha256_hex(tools.to_string().as_bytes());
    Ok(json!({"plugin": m.name, "version": m.version, "hash": hash, "tools": tools}))
}

/// Every external tool: the configured MCP servers' (`external::mcp_tools`),
/// then every installed plugin's: approved ones as they are, the others
/// refused by name (`unapproved`); a broken manifest's tools by their
/// pinned names, so a call of one is refused, not unknown. A name taken
/// (an MCP tool's, another plugin's) is the first one's.
pub fn registry(cfg: &Config) -> Registry {
    // A build without a feature knows none of its tools: nothing to offer,
    // and the loaders are left out of the binary.
    let mut reg = Registry {
        tools: if cfg!(feature = "mcp") {
            crate::external::mcp_tools(cfg)
        } else {
            Vec::new()
        },
    };
    if !cfg!(feature = "plugins") {
        return reg;
    }
    let all = match installed(cfg) {
        Ok(a) => a,
        Err(e) => {
            log::warn!(target: "event::plugins_unreadable", "{e}");
            return reg;
        }
    };
    for p in &all {
        let unapproved = p.unapproved();
        if let Some(why) = &unapproved {
            log::info!(target: "event::plugin_unapproved", "{why}");
        }
        let mut add = |t: &PluginTool| {
            // A name a model calls is one tool's only: the first wins.
            if reg.find(&t.name).is_some() || manifest::shadows_builtin(&t.name).is_some() {
                return;
            }
            reg.tools.push(ExternalTool {
                name: t.name.clone(),
                provider: p.name.clone(),
                tool: t.name.clone(),
                description: crate::external::sanitize(&t.description),
                schema: t.schema.clone(),
                risk: t.risk,
                read_only: t.read_only,
                network: t.network.clone(),
                granted: crate::security::net::granted(
                    &t.network,
                    cfg.plugin_network
                        .get(&p.name)
                        .map_or(&[][..], Vec::as_slice),
                ),
                env: t.env.clone(),
                timeout_secs: t.timeout_secs,
                kind: Kind::Plugin {
                    dir: p.dir.clone(),
                    command: p.dir.join(&t.command),
                },
                unapproved: unapproved.clone(),
                source: format!("plugin \"{}\" tool \"{}\"", p.name, t.name),
            });
        };
        match &p.manifest {
            Ok(m) => m.tools.iter().for_each(&mut add),
            Err(_) => {
                let pinned = p.pinned.as_ref().and_then(|v| v["tools"].as_array());
                for t in pinned.into_iter().flatten() {
                    if let Some(name) = t["name"]
                        .as_str()
                        .filter(|n| crate::types::valid_tool_name(n))
                    {
                        add(&PluginTool {
                            name: name.to_string(),
                            description: String::new(),
                            command: PathBuf::new(),
                            schema: json!({"type": "object"}),
                            risk: crate::security::Risk::High,
                            read_only: false,
                            network: Vec::new(),
                            timeout_secs: None,
                            env: Vec::new(),
                        });
                    }
                }
            }
        }
    }
    reg
}

/// Every reason `source` cannot be installed as it is: its manifest's
/// problems, then its files' (links that leave it, commands that are not
/// executables inside it), then names taken by other plugins.
fn check_source(cfg: &Config, src: &Path) -> std::result::Result<Manifest, Vec<String>> {
    let m = manifest::read(src)?;
    let mut errors = Vec::new();
    let root = std::fs::canonicalize(src).map_err(|e| vec![format!("{}: {e}", src.display())])?;
    walk_source(&root, &root, &mut 0, &mut errors);
    for (i, t) in m.tools.iter().enumerate() {
        let exe = root.join(&t.command);
        match std::fs::canonicalize(&exe) {
            Ok(real) if !real.starts_with(&root) => errors.push(format!(
                "tools[{i}].command: {} leads outside the plugin's directory",
                t.command.display()
            )),
            Ok(real) => match std::fs::metadata(&real) {
                Ok(md) if !md.is_file() => errors.push(format!(
                    "tools[{i}].command: {} is not a regular file",
                    t.command.display()
                )),
                Ok(md) if md.permissions().mode() & 0o111 == 0 => errors.push(format!(
                    "tools[{i}].command: {} is not executable (chmod +x)",
                    t.command.display()
                )),
                Ok(_) => {}
                Err(e) => errors.push(format!("tools[{i}].command: {e}")),
            },
            Err(e) => errors.push(format!("tools[{i}].command: {}: {e}", t.command.display())),
        }
    }
    if let Ok(others) = installed(cfg) {
        for o in others.iter().filter(|o| o.name != m.name) {
            let Ok(om) = &o.manifest else { continue };
            for (i, t) in m.tools.iter().enumerate() {
                if om
                    .tools
                    .iter()
                    .any(|ot| ot.name.eq_ignore_ascii_case(&t.name))
                {
                    errors.push(format!(
                        "tools[{i}].name: \"{}\" is already a tool of plugin \"{}\"",
                        t.name, o.name
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(m)
    } else {
        Err(errors)
    }
}

/// Every entry under `dir`: a link whose target leaves `root` and anything
/// but files, directories and links are refused.
fn walk_source(root: &Path, dir: &Path, seen: &mut usize, errors: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        errors.push(format!("{}: cannot be read", dir.display()));
        return;
    };
    for e in entries.flatten() {
        *seen += 1;
        if *seen > COPY_MAX_ENTRIES {
            errors.push(format!("over {COPY_MAX_ENTRIES} entries"));
            return;
        }
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            match std::fs::canonicalize(&path) {
                Ok(t) if t.starts_with(root) => {}
                Ok(t) => errors.push(format!(
                    "{rel}: a link that leaves the plugin's directory (to {})",
                    t.display()
                )),
                Err(_) => errors.push(format!("{rel}: a link to nothing")),
            }
        } else if ft.is_dir() {
            walk_source(root, &path, seen, errors);
        } else if !ft.is_file() {
            errors.push(format!("{rel}: not a file, directory or link"));
        }
    }
}

/// Copies `src` into `dst` (new): files with their mode, directories,
/// links as they are (each was checked to stay inside).
fn copy_tree(src: &Path, dst: &Path, bytes: &mut u64) -> std::io::Result<()> {
    std::fs::create_dir(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let ft = e.file_type()?;
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if ft.is_dir() {
            copy_tree(&from, &to, bytes)?;
        } else if ft.is_file() {
            *bytes += std::fs::copy(&from, &to)?;
            if *bytes > COPY_MAX_BYTES {
                return Err(std::io::Error::other(format!(
                    "over {COPY_MAX_BYTES} bytes"
                )));
            }
        }
    }
    Ok(())
}

/// What `plugin install` did.
pub struct InstallReport {
    pub name: String,
    pub dir: PathBuf,
    pub tools: Vec<String>,
}

/// Installs the plugin in `src`: checked whole (every problem in one
/// error), copied into `<state>/plugins/NAME` (by a rename, so a half copy
/// is never a plugin), then pinned as it was copied.
pub fn install(cfg: &Config, src: &Path) -> Result<InstallReport> {
    let m = check_source(cfg, src).map_err(|errors| {
        Error::usage(format!(
            "{}: cannot install: {} problem{}\n  - {}",
            src.display(),
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            errors.join("\n  - ")
        ))
    })?;
    let dir = plugins_dir(cfg);
    crate::util::private_dir(&cfg.state_dir)?;
    crate::util::private_dir(&dir)?;
    let dst = dir.join(&m.name);
    if dst.symlink_metadata().is_ok() {
        return Err(Error::usage(format!(
            "plugin \"{}\" is already installed ({}); `latchclaw plugin remove {}` first",
            m.name,
            dst.display(),
            m.name
        )));
    }
    let tmp = dir.join(format!(".{}.tmp-{}", m.name, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let copied = copy_tree(&std::fs::canonicalize(src)?, &tmp, &mut 0)
        .and_then(|()| std::fs::rename(&tmp, &dst));
    if let Err(e) = copied {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(Error::runtime(format!(
            "cannot copy {} to {}: {e}",
            src.display(),
            dst.display()
        )));
    }
    // Pinned as copied: what the operator installed is what is approved.
    let pinned = manifest::read(&dst)
        .map_err(|e| e.join("; "))
        .and_then(|m| definitions(&dst, &m))
        .and_then(|d| write_pin(cfg, &m.name, &d));
    if let Err(e) = pinned {
        let _ = std::fs::remove_dir_all(&dst);
        return Err(Error::runtime(format!(
            "cannot pin plugin \"{}\": {e}",
            m.name
        )));
    }
    log::info!(target: "event::plugin_installed", "plugin={} dir={}", m.name, dst.display());
    Ok(InstallReport {
        name: m.name.clone(),
        dir: dst,
        tools: m.tools.iter().map(|t| t.name.clone()).collect(),
    })
}

fn write_pin(cfg: &Config, name: &str, d: &Value) -> std::result::Result<(), String> {
    let path = pin_path(cfg, name);
    for dir in [
        cfg.state_dir.join("pins"),
        cfg.state_dir.join("pins/plugins"),
    ] {
        crate::util::private_dir(&dir).map_err(|e| e.to_string())?;
    }
    let text = serde_json::to_string_pretty(d).map_err(|e| e.to_string())?;
    crate::util::write_file_atomic(&path, text.as_bytes(), 0o600, true).map_err(|e| e.to_string())
}

/// One installed plugin by name, or a usage error naming those there are.
pub fn find(cfg: &Config, name: &str) -> Result<Installed> {
    let all = installed(cfg)?;
    let names: Vec<String> = all.iter().map(|p| p.name.clone()).collect();
    all.into_iter().find(|p| p.name == name).ok_or_else(|| {
        let near = crate::util::suggest::nearest(name, names.iter().map(String::as_str))
            .map(|n| format!(" did you mean \"{n}\"?"))
            .unwrap_or_default();
        Error::usage(format!(
            "no plugin \"{}\";{near} installed: {}",
            crate::util::printable(name),
            if names.is_empty() {
                "none (`latchclaw plugin install PATH`)".to_string()
            } else {
                names.join(", ")
            }
        ))
    })
}

/// Removes a plugin's directory and its pin.
pub fn remove(cfg: &Config, name: &str) -> Result<PathBuf> {
    let p = find(cfg, name)?;
    std::fs::remove_dir_all(&p.dir)
        .map_err(|e| Error::runtime(format!("cannot remove {}: {e}", p.dir.display())))?;
    let _ = std::fs::remove_file(pin_path(cfg, name));
    log::info!(target: "event::plugin_removed", "plugin={name}");
    Ok(p.dir)
}

pub use crate::external::differences;

/// What `plugin approve` found and recorded.
pub struct Approval {
    pub changes: Vec<String>,
    pub hash: String,
}

/// Records the definitions on disk now as approved; the differences from
/// the ones approved before. Refused while the manifest has problems.
pub fn approve(cfg: &Config, name: &str) -> Result<Approval> {
    let p = find(cfg, name)?;
    let m = p.manifest.as_ref().map_err(|e| {
        Error::usage(format!(
            "plugin \"{name}\": its manifest has problems; fix them first:\n  - {}",
            e.join("\n  - ")
        ))
    })?;
    let current = p.current.clone().ok_or_else(|| {
        Error::usage(format!("plugin \"{name}\": its executables cannot be read"))
    })?;
    // What install refuses, approve refuses too: a name now taken.
    let reg = registry(cfg);
    for t in &m.tools {
        if let Some(o) = reg.find(&t.name).filter(|o| o.provider != name) {
            return Err(Error::usage(format!(
                "plugin \"{name}\": tool \"{}\" is already plugin \"{}\"'s",
                t.name, o.provider
            )));
        }
    }
    let changes = differences(p.pinned.as_ref(), &current);
    write_pin(cfg, name, &current).map_err(Error::runtime)?;
    log::info!(target: "event::plugin_approved", "plugin={name} changes={}", changes.len());
    Ok(Approval {
        changes,
        hash: current["hash"].as_str().unwrap_or("").to_string(),
    })
}

/// `[tools."NAME"]` sections that name no tool of an installed plugin:
/// the config's own check cannot know (it does not read the state dir).
pub fn unknown_config_tools(cfg: &Config) -> Vec<String> {
    // Without plugins no name can be checked: the config loads as in a
    // full build.
    if cfg.tools.external.is_empty() || !cfg!(feature = "plugins") {
        return Vec::new();
    }
    let reg = registry(cfg);
    let mut known: Vec<String> = crate::types::ToolName::ALL
        .iter()
        .map(|t| t.as_str().to_string())
        .collect();
    known.extend(reg.tools.iter().map(|t| t.name.clone()));
    cfg.tools
        .external
        .keys()
        .filter(|n| reg.find(n).is_none())
        .map(|n| {
            format!(
                "tools.{n}: unknown tool \"{n}\"; [tools.NAME] takes one of: {} (or a tool of \
                 an installed plugin)",
                known.join(", ")
            )
        })
        .collect()
}
