//! What one call's children may touch (`Spec`), and the system files every
//! child reads. A leaf of `confine`: the walls (`confine.rs`) and the view
//! (`view.rs`) both read it.

use crate::config::{Autonomy, Config, Confinement as Mode};
use std::path::{Path, PathBuf};

/// What one shell call may touch.
#[derive(Debug, Clone)]
pub struct Spec {
    pub workspace: PathBuf,
    /// False under `readonly` autonomy: read and execute only.
    pub workspace_writable: bool,
    /// A directory of this call's own (read and write), if the runner made one.
    pub tmp_dir: Option<PathBuf>,
    pub mode: Mode,
    /// latchclaw's state directory: masked when the workspace holds it
    /// (Landlock rules add up and cannot carve a hole; a mount can).
    pub state_dir: Option<PathBuf>,
    /// `[security] secret_files_allow`: secret-named files left unmasked.
    pub secret_allow: crate::security::secret_files::Allow,
    /// `[security] forbidden_paths`: masked where the workspace holds them.
    pub forbidden: Vec<PathBuf>,
    /// The children's network: `None`, the shared empty namespace; `Some`,
    /// a namespace of their own whose only way out is latchclaw's proxy
    /// (`super::egress`), which holds them to the hosts they were granted.
    pub egress: Option<EgressNet>,
    /// The children's working directory (the workspace when `None`).
    pub cwd: Option<PathBuf>,
    /// Directories given read and execute only (a plugin's own directory),
    /// bound at their own paths: nothing beside them is in view.
    pub read_only_dirs: Vec<PathBuf>,
}

impl Spec {
    /// The spec for a shell call under `cfg` at `autonomy`.
    pub fn new(cfg: &Config, workspace: &Path, autonomy: Autonomy, tmp_dir: Option<&Path>) -> Spec {
        Spec {
            workspace: workspace.to_path_buf(),
            workspace_writable: autonomy != Autonomy::ReadOnly,
            tmp_dir: tmp_dir.map(Path::to_path_buf),
            mode: cfg.security.confinement,
            state_dir: Some(cfg.state_dir.clone()),
            secret_allow: crate::security::secret_files::Allow::new(
                &cfg.security.secret_files_allow,
                &cfg.security.dotfiles_allow,
            ),
            // latchclaw's own files are as forbidden to a child.
            forbidden: cfg
                .security
                .forbidden_paths
                .iter()
                .cloned()
                .chain(cfg.protected_paths())
                .collect(),
            egress: None,
            cwd: None,
            read_only_dirs: Vec::new(),
        }
    }
}

#[cfg(test)]
impl Spec {
    /// A spec of `ws` alone under `mode`: no state, nothing forbidden.
    pub fn bare(ws: &Path, mode: Mode) -> Spec {
        Spec {
            workspace: ws.to_path_buf(),
            workspace_writable: true,
            tmp_dir: None,
            mode,
            state_dir: None,
            secret_allow: Default::default(),
            forbidden: Vec::new(),
            egress: None,
            cwd: None,
            read_only_dirs: Vec::new(),
        }
    }
}

/// What a child granted hosts is given: its own network namespace, where
/// the proxy listens on 127.0.0.1:`port` (Landlock lets it connect there
/// and nowhere else; the socket filter lets it make TCP sockets).
#[derive(Debug, Clone)]
pub struct EgressNet {
    pub port: u16,
    pub netns: std::sync::Arc<std::os::fd::OwnedFd>,
}

/// Program directories: read and execute (only those that exist).
pub(super) const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The files under /etc that ordinary programs read (dynamic loader, time
/// zone, name service switch, libmagic, MIME types); not passwd or shadow.
pub(super) const ETC_FILES: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "magic",
    "mime.types",
];

pub(super) const DEV_READ: &[&str] = &["/dev/zero", "/dev/urandom", "/dev/random"];
