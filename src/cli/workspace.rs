//! Which directory a run works in: `-w DIR`, else the git work tree the
//! command was started in, else `workspace_dir` (`"."`: the current
//! directory). The gate then confines every tool to it exactly as to a
//! configured one.

use crate::config::Config;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Where the run's workspace came from.
#[derive(Debug, PartialEq)]
pub enum From {
    Flag,
    /// The top of the git work tree holding the current directory.
    WorkTree,
    /// `workspace_dir`, and, when the current directory was a work tree
    /// not taken, why.
    Config(Option<String>),
}

/// Sets `cfg.workspace_dir` for this run and says where it came from.
pub fn choose(cfg: &mut Config, flag: Option<&Path>) -> Result<From> {
    if let Some(dir) = flag {
        cfg.workspace_dir = given(cfg, dir)?;
        return Ok(From::Flag);
    }
    if cfg.workspace_here {
        // `"."` is where the operator stands, but not a home, the root or
        // latchclaw's own state: those are never a workspace by themselves.
        let here = std::fs::canonicalize(&cfg.workspace_dir).unwrap_or(cfg.workspace_dir.clone());
        if let Some(why) = unusable(cfg, &here) {
            return Err(Error::usage(format!(
                "workspace_dir = \".\": the current directory {} is not used: {why}; cd into a \
                 project or give -w DIR",
                cfg.workspace_dir.display()
            )));
        }
        return Ok(From::Config(None));
    }
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(From::Config(None));
    };
    let Some(top) = work_tree_top(&cwd) else {
        return Ok(From::Config(None));
    };
    match unusable(cfg, &top).or_else(|| not_owned(&top)) {
        Some(why) => Ok(From::Config(Some(format!(
            "the git work tree {} is not used: {why}",
            top.display()
        )))),
        None => {
            cfg.workspace_dir = top;
            Ok(From::WorkTree)
        }
    }
}

/// What a run says (a log line, `event::workspace_configured`) when it
/// works in the configured workspace from somewhere else: which directory
/// its tools see.
pub fn note(cfg: &Config, from: &From) -> Option<String> {
    let From::Config(why) = from else {
        return None;
    };
    let cwd = std::env::current_dir().ok()?;
    let ws = std::fs::canonicalize(&cfg.workspace_dir).unwrap_or(cfg.workspace_dir.clone());
    if cwd.starts_with(&ws) {
        return None;
    }
    Some(format!(
        "workspace {} (workspace_dir; {}run inside a git work tree to work there, or -w DIR)",
        cfg.workspace_dir.display(),
        why.as_ref().map(|w| format!("{w}; ")).unwrap_or_default()
    ))
}

/// `-w DIR`: it must exist (a typo should not become a new empty
/// workspace) and lie outside the state directory.
fn given(cfg: &Config, dir: &Path) -> Result<PathBuf> {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !abs.is_dir() {
        return Err(Error::usage(format!(
            "--workspace: {} {}; create it first (mkdir -p {0}) or give another directory",
            abs.display(),
            if abs.exists() {
                "is not a directory"
            } else {
                "does not exist"
            }
        )));
    }
    if abs.starts_with(&cfg.state_dir) {
        return Err(Error::usage(format!(
            "--workspace: {} is inside the state directory {}, which tools can never reach",
            abs.display(),
            cfg.state_dir.display()
        )));
    }
    Ok(abs)
}

/// The nearest directory at or above `dir` holding a `.git` (a directory,
/// or a gitfile as in a linked work tree or a submodule): found by looking,
/// without starting git, since every run does it.
pub fn work_tree_top(dir: &Path) -> Option<PathBuf> {
    let dir = std::fs::canonicalize(dir).ok()?;
    dir.ancestors()
        .find(|d| {
            let git = d.join(".git");
            // One `stat` a level: every run walks up from where it starts.
            match std::fs::metadata(&git) {
                Ok(m) if m.is_dir() => true,
                Ok(m) => m.is_file() && is_gitfile(&git),
                Err(_) => false,
            }
        })
        .map(Path::to_path_buf)
}

fn is_gitfile(p: &Path) -> bool {
    let mut head = [0u8; 8];
    use std::io::Read;
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|_| head == *b"gitdir: ")
}

/// Why a work tree may not become the workspace by itself: the whole home
/// (a dotfiles repository) or the root would hand every file there to the
/// tools, and a tree in the state directory or a forbidden path would
/// refuse them all.
fn unusable(cfg: &Config, top: &Path) -> Option<String> {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or(p.to_path_buf());
    if top == Path::new("/") {
        return Some("it is the root directory".into());
    }
    if let Some(home) = crate::util::home_dir()
        && canon(&home).starts_with(top)
    {
        return Some(if canon(&home) == top {
            "it is the home directory (cd into a project, or -w .)".into()
        } else {
            format!("it holds the home directory {}", home.display())
        });
    }
    if top.starts_with(canon(&cfg.state_dir)) || canon(&cfg.state_dir).starts_with(top) {
        return Some(format!(
            "it {} the state directory {}",
            if top.starts_with(canon(&cfg.state_dir)) {
                "is inside"
            } else {
                "holds"
            },
            cfg.state_dir.display()
        ));
    }
    cfg.security
        .forbidden_paths
        .iter()
        .map(|f| canon(f))
        .find(|f| top.starts_with(f))
        .map(|f| format!("it is under the forbidden path {}", f.display()))
}

/// Why a work tree someone else could have made may not be taken: like
/// git's own `safe.directory` rule, its top and its `.git` must belong to
/// the user running latchclaw, and a world-writable top (`/tmp`) is
/// anyone's. A `.git` planted in a shared parent would otherwise hand that
/// whole directory to the tools.
fn not_owned(top: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = crate::sys::process::effective_uid();
    for p in [top.to_path_buf(), top.join(".git")] {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            return Some(format!("{} cannot be read", p.display()));
        };
        if md.uid() != me {
            return Some(format!(
                "{} belongs to another user (uid {})",
                p.display(),
                md.uid()
            ));
        }
    }
    match std::fs::metadata(top) {
        Ok(md) if md.mode() & 0o002 != 0 => {
            Some(format!("{} is writable by every user", top.display()))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_top_is_the_nearest_directory_with_a_git_dir_or_gitfile() {
        let root = std::env::temp_dir().join(format!("lc-wt-{}", std::process::id()));
        let deep = root.join("repo/src/a");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(work_tree_top(&deep), None.or(work_tree_top(&root)));
        std::fs::create_dir_all(root.join("repo/.git")).unwrap();
        let top = std::fs::canonicalize(root.join("repo")).unwrap();
        assert_eq!(work_tree_top(&deep), Some(top.clone()));
        // A linked work tree or submodule: a gitfile.
        std::fs::create_dir_all(root.join("repo/sub/x")).unwrap();
        std::fs::write(root.join("repo/sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        assert_eq!(
            work_tree_top(&root.join("repo/sub/x")),
            Some(top.join("sub"))
        );
        // A file named .git that is not a gitfile is not a work tree.
        std::fs::write(root.join("repo/sub/.git"), "hello").unwrap();
        assert_eq!(work_tree_top(&root.join("repo/sub/x")), Some(top));
        let _ = std::fs::remove_dir_all(&root);
    }
}
