//! Paths as the gate reads them, without a policy: made absolute, folded
//! (`lexical_normalize`), resolved through links as the kernel would
//! (`resolve`), and the workspace's directories no tool writes
//! (`PROTECTED_WORKSPACE_DIRS`). A leaf of `security`.

use super::refusal::Refused;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

/// More symlink hops than this and we treat the path as a loop.
const MAX_SYMLINK_HOPS: u32 = 40;

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

/// Whether `dir` is a git directory by its shape, whatever its name (a
/// gitfile's target such as `git init --separate-git-dir gitdata`, a bare
/// repository): a `HEAD` file, `objects` and `refs` directories. Its
/// config and hooks run code as `.git`'s do.
pub fn git_dir_by_shape(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

/// The protected directory `rel` (a path relative to the workspace) is in,
/// or is.
pub fn protected_workspace_dir(rel: &Path) -> Option<&'static ProtectedDir> {
    rel.components().find_map(|c| {
        PROTECTED_WORKSPACE_DIRS
            .iter()
            .find(|d| c.as_os_str() == d.name)
    })
}

/// Both spellings of a path: as given, and with symlinks resolved.
pub(super) fn both_forms(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
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
pub(super) fn under(p: &Path, f: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, f) = (p.as_os_str().as_bytes(), f.as_os_str().as_bytes());
    p.starts_with(f) && (p.len() == f.len() || f.ends_with(b"/") || p[f.len()] == b'/')
}

/// `raw` made absolute against the command's directory (tools judge paths
/// relative to the workspace; after `cd` the base is different).
pub(super) fn absolute(cwd: &Path, raw: &str) -> String {
    if raw.starts_with('/') || raw.starts_with('~') {
        raw.to_string()
    } else {
        cwd.join(raw).to_string_lossy().into_owned()
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
pub fn resolve(path: &Path) -> Result<PathBuf, Refused> {
    resolve_from(PathBuf::from("/"), path)
}

/// [`resolve`] of `rest` below `base`, a directory already resolved (no
/// link in it), so its components are not looked at again.
pub(super) fn resolve_from(base: PathBuf, rest: &Path) -> Result<PathBuf, Refused> {
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
                    return Err(Refused::path(format!(
                        "more than {MAX_SYMLINK_HOPS} symlinks at {} (a loop?)",
                        candidate.display()
                    )));
                }
                let target = std::fs::read_link(&candidate).map_err(|e| {
                    Refused::path(format!("cannot read link {}: {e}", candidate.display()))
                })?;
                push_front_components(&mut queue, &target, &mut out);
            }
            Ok(_) => out = candidate,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                out = candidate;
                missing = 1;
            }
            Err(e) => return Err(Refused::path(format!("{}: {e}", candidate.display()))),
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
