//! What git said of its repositories, kept for a decision: `Repo` (one
//! repository as git reported it) and `Views`, the answers by program and
//! directory with what each rests on. A leaf of `git`: the `Gate` holds the
//! cache, `repo.rs` asks git and fills it.

use crate::security::refusal::Refused;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// What git says of the repository it uses from one directory. (Its
/// common directory, which a linked work tree shares with its main
/// repository, is checked and needed no further.)
#[derive(Debug)]
pub(crate) struct Repo {
    /// The git directory, resolved.
    pub gitdir: PathBuf,
    /// The top of the work tree, resolved.
    pub top: PathBuf,
    /// Objects are named by SHA-256 (`extensions.objectFormat`).
    pub sha256: bool,
    /// Every configuration file git read there, includes too, resolved.
    pub files: Vec<PathBuf>,
    /// The common git directory, resolved.
    pub(super) common: PathBuf,
    /// Every include's target as written there (it may not exist yet).
    pub(super) includes: Vec<PathBuf>,
    pub(super) settings: Vec<Setting>,
}

/// One configuration entry as git names it: section and key as git
/// lowercased them, the subsection's exact bytes.
#[derive(Debug)]
pub(super) struct Setting {
    pub(super) section: String,
    pub(super) sub: Option<Vec<u8>>,
    pub(super) name: String,
}

/// git's answers by (program, directory): `git status && git diff` asks
/// once, and a later decision reuses an answer only while nothing it
/// rests on changed ([`Cached`]).
#[derive(Debug, Default)]
pub(crate) struct Views(pub(super) RefCell<Vec<Cached>>);

pub(super) type Viewed = Result<Option<Rc<Repo>>, Refused>;

/// One answer, and what it rests on: every path git looked at to find the
/// repository and read its settings, with what was there. Within one
/// decision it is reused as is; in a later one only while every path is
/// unchanged (a command may have run between them).
#[derive(Debug)]
pub(super) struct Cached {
    pub(super) program: PathBuf,
    pub(super) start: PathBuf,
    pub(super) viewed: Viewed,
    pub(super) stamps: Vec<(PathBuf, Stamp)>,
    pub(super) fresh: bool,
}

/// What is at a path: its metadata and, through a link, its target's;
/// `None` for nothing. Inode, size, and modification and change times to
/// the nanosecond: a write changes the change time, which no one can set.
pub(super) type Stamp = Option<[i64; 9]>;

pub(super) fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let of = |m: std::fs::Metadata| {
        [
            m.dev() as i64,
            m.ino() as i64,
            m.size() as i64,
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            i64::from(m.mode()),
        ]
    };
    let link = of(std::fs::symlink_metadata(p).ok()?);
    let target = std::fs::metadata(p).ok().map(of).map_or(-1, |t| t[1]);
    let [a, b, c, d, e, f, g, h] = link;
    Some([a, b, c, d, e, f, g, h, target])
}

/// The paths an answer for `start` rests on: a `.git` in every directory
/// from `start` up to the workspace (where git looks for one), and for a
/// repository its git directories (a new file in one changes the
/// directory), every settings file git read and every include's target
/// and the directory it would appear in.
pub(super) fn watched(start: &Path, ws: &Path, viewed: &Viewed) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in start.ancestors().take_while(|d| d.starts_with(ws)) {
        let git = d.join(".git");
        // Where a refusal came from: a `.git` directory's own settings.
        if viewed.is_err() {
            for f in ["config", "config.worktree", "commondir"] {
                out.push(git.join(f));
            }
        }
        out.push(git);
    }
    if let Ok(Some(repo)) = viewed {
        out.push(repo.gitdir.clone());
        out.push(repo.common.clone());
        for f in repo.files.iter().chain(&repo.includes) {
            out.push(f.clone());
            if let Some(d) = f.parent() {
                out.push(d.to_path_buf());
            }
        }
    }
    crate::util::sort::sort(&mut out);
    out.dedup();
    out
}

impl Views {
    /// A decision starts: what was asked before must be checked again.
    pub fn clear(&self) {
        for c in self.0.borrow_mut().iter_mut() {
            c.fresh = false;
        }
    }
}

/// A copy of the gate asks afresh.
impl Clone for Views {
    fn clone(&self) -> Views {
        Views::default()
    }
}
