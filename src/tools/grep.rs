//! `grep`: a regular-expression search over workspace files, in process.
//!
//! The gate checks the starting path; the walk below it opens every
//! directory and file beneath the descriptor of its parent with no symlink
//! followed (symlinks are not searched at all), so a link planted in the
//! tree cannot lead the search out. What it skips, the security module
//! decides: forbidden paths and latchclaw's own state
//! ([`crate::security::Gate::is_forbidden`]), secret-named files
//! ([`crate::security::Gate::secret_rule`]), files with more than one hard
//! link (as `file_read` refuses them). It also skips `.git`, binary files
//! (a NUL in the first 8 KiB), what `.gitignore` files ignore, files over
//! [`MAX_FILE_BYTES`], and below the start the dependency and build
//! directories of [`DEFAULT_EXCLUDED_DIRS`] (unless `include_ignored`).
//! Matching ignores case unless `case_sensitive`.
//!
//! A pattern without regex syntax is found in process (memmem, linear in
//! the text). A regular expression is matched in a parser child
//! ([`super::isolate`]): regex-lite's time grows with the pattern times the
//! text, once per matching line, so a pattern and a file built for it take
//! hours; the child is killed at the call's deadline, a cancel or the
//! emergency stop, and the search ends with what it found before.

use super::beneath::{self, Kind, Symlinks};
use super::glob::{self, Glob, IgnoreFile, IgnoreStack};
use super::isolate::{self, Child, Failure, Stopped, Watch};
use super::tool::{Tool, ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Grep;

/// Entries (files and directories) looked at before the walk stops.
pub const MAX_ENTRIES: usize = 300_000;
/// Larger files are skipped (and counted).
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
const BINARY_PROBE: usize = 8192;
const MAX_LINE_CHARS: usize = 400;
const DEFAULT_MATCHES: u64 = 100;
const DEFAULT_CONTEXT: u64 = 2;
/// Directories of dependencies and build output: not searched unless the
/// search starts in one, or `include_ignored` is set.
pub const DEFAULT_EXCLUDED_DIRS: &[&str] = &["node_modules", "dist", "build", "target", ".venv"];
pub(super) const MAX_MATCHES: u64 = 10_000;
pub(super) const MAX_CONTEXT: u64 = 10;
const MAX_PATTERN: usize = 1000;
const MAX_DEPTH: usize = 64;
/// A batch of files for the parser child is sent at this many bytes or
/// files.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_FILES: usize = 256;

struct Opts {
    finder: Finder,
    include: Vec<Glob>,
    exclude: Vec<Glob>,
    context: usize,
    max_matches: usize,
    files_only: bool,
    /// `include_ignored`: the directories of [`DEFAULT_EXCLUDED_DIRS`] too.
    include_ignored: bool,
}

enum Finder {
    /// A pattern with no regex syntax: memmem. `fold`: matched without
    /// regard to ASCII case (the pattern lowercased, each text lowercased
    /// byte for byte, so offsets stay the same).
    Literal {
        finder: Box<memchr::memmem::Finder<'static>>,
        fold: bool,
    },
    /// A regular expression (checked here), matched in a parser child.
    Regex { pattern: String, ci: bool },
}

fn regex(pattern: &str, ci: bool) -> Result<regex_lite::Regex, String> {
    regex_lite::RegexBuilder::new(pattern)
        .case_insensitive(ci)
        // `^` and `$` at line ends, as grep users expect.
        .multi_line(true)
        .size_limit(4 * 1024 * 1024)
        .build()
        .map_err(|e| format!("\"pattern\" is not a valid regular expression: {e}"))
}

/// One matching line: where its first match starts, where the line
/// starts, and its number.
struct Hit {
    at: usize,
    line_start: usize,
    line_no: usize,
}

/// The lines of `text` with a match, one hit each, at most `budget`
/// (the first only for `files_only`). `find(from)`: where the first match
/// at or after `from` starts.
fn line_hits(
    text: &str,
    budget: usize,
    files_only: bool,
    mut find: impl FnMut(usize) -> Option<usize>,
) -> Vec<Hit> {
    let mut hits = Vec::new();
    let (mut pos, mut line_no, mut counted_to) = (0usize, 1usize, 0usize);
    while pos <= text.len() && hits.len() < budget {
        let Some(s) = find(pos) else {
            break;
        };
        // An empty match past the last newline is no line.
        if s == text.len() && (text.is_empty() || text.ends_with('\n')) {
            break;
        }
        line_no += memchr::memchr_iter(b'\n', &text.as_bytes()[counted_to..s]).count();
        let line_start = memchr::memrchr(b'\n', &text.as_bytes()[..s]).map_or(0, |i| i + 1);
        let line_end = memchr::memchr(b'\n', &text.as_bytes()[s..]).map_or(text.len(), |i| s + i);
        counted_to = s;
        hits.push(Hit {
            at: s,
            line_start,
            line_no,
        });
        if files_only {
            break;
        }
        // On from the next line: one result per line.
        pos = line_end + 1;
    }
    hits
}

/// The parser child's matcher: the pattern compiled once, then a batch of
/// files a request (their texts one after the other, `lens` long each),
/// answered with where each file's hits start, the budget shared by the
/// batch in order.
#[derive(Default)]
pub(super) struct Matcher {
    compiled: Option<(String, bool, regex_lite::Regex)>,
}

impl super::isolate::Parser for Matcher {
    fn answer(&mut self, req: super::isolate::Request) -> Value {
        let head = &req.head;
        let pattern = head["pattern"].as_str().unwrap_or_default();
        let ci = head["ci"].as_bool().unwrap_or(false);
        let mut budget = head["budget"].as_u64().unwrap_or(0) as usize;
        let files_only = head["files_only"].as_bool().unwrap_or(false);
        if self
            .compiled
            .as_ref()
            .is_none_or(|(p, c, _)| p != pattern || *c != ci)
        {
            match regex(pattern, ci) {
                Ok(re) => self.compiled = Some((pattern.to_string(), ci, re)),
                Err(e) => return json!({ "error": e }),
            }
        }
        let Some((_, _, re)) = &self.compiled else {
            return json!({ "error": "no pattern" });
        };
        let mut per_file = Vec::new();
        let mut rest = req.body.as_slice();
        for len in head["lens"].as_array().into_iter().flatten() {
            let len = len.as_u64().unwrap_or(u64::MAX) as usize;
            let Some((bytes, after)) = rest.split_at_checked(len) else {
                return json!({ "error": "a batch shorter than its lengths" });
            };
            rest = after;
            let text = String::from_utf8_lossy(bytes);
            let hits = line_hits(&text, budget, files_only, |from| {
                re.find_at(&text, from).map(|m| m.start())
            });
            budget -= hits.len();
            per_file.push(hits.iter().map(|h| h.at).collect::<Vec<_>>());
        }
        json!({ "starts": per_file })
    }
}

fn uint(args: &Value, key: &str, default: u64, lo: u64, hi: u64) -> Result<u64, String> {
    match args.get(key) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(format!("\"{key}\" must be an integer from {lo} to {hi}")),
        },
    }
}

fn opts(args: &Value) -> Result<Opts, String> {
    let pattern = args
        .get("pattern")
        .and_then(Value::as_str)
        .ok_or("\"pattern\" (a string) is required")?;
    if pattern.is_empty() {
        return Err("\"pattern\" is empty".into());
    }
    if pattern.len() > MAX_PATTERN {
        return Err(format!(
            "\"pattern\" is {} bytes; the limit is {MAX_PATTERN}",
            pattern.len()
        ));
    }
    let flag = |key: &str| args.get(key).and_then(Value::as_bool);
    // Case-insensitive unless `case_sensitive` says otherwise.
    let ci = !flag("case_sensitive").unwrap_or(false);
    let literal = !pattern.contains([
        '\\', '.', '+', '*', '?', '(', ')', '|', '[', ']', '{', '}', '^', '$',
    ]);
    // Case folded in process only for ASCII: other letters' cases are the
    // regex engine's to know.
    let finder = if literal && !pattern.contains('\n') && (!ci || pattern.is_ascii()) {
        let needle = if ci {
            pattern.to_ascii_lowercase()
        } else {
            pattern.to_string()
        };
        Finder::Literal {
            finder: Box::new(memchr::memmem::Finder::new(needle.as_bytes()).into_owned()),
            fold: ci,
        }
    } else {
        // Compiled here too, for the error before any file is read: the
        // size limit bounds the time it takes.
        regex(pattern, ci)?;
        Finder::Regex {
            pattern: pattern.to_string(),
            ci,
        }
    };
    let list = |key: &str| match args.get(key).and_then(Value::as_str) {
        None => Ok(Vec::new()),
        Some(s) => glob::parse_list(s, key),
    };
    Ok(Opts {
        finder,
        include: list("glob")?,
        exclude: list("exclude")?,
        context: uint(args, "context", DEFAULT_CONTEXT, 0, MAX_CONTEXT)? as usize,
        max_matches: uint(args, "max_matches", DEFAULT_MATCHES, 1, MAX_MATCHES)? as usize,
        files_only: flag("files_only").unwrap_or(false),
        include_ignored: flag("include_ignored").unwrap_or(false),
    })
}

#[derive(Default)]
struct Stats {
    entries: usize,
    files_searched: usize,
    files_matched: usize,
    matches: usize,
    binary: usize,
    secret: usize,
    ignored: usize,
    /// Directories of [`DEFAULT_EXCLUDED_DIRS`] left out.
    excluded_dirs: usize,
    forbidden: usize,
    too_large: usize,
    linked: usize,
    symlinks: usize,
    unreadable: usize,
    /// Why the search ended early, if it did.
    stopped: Option<String>,
}

struct Search<'a> {
    ctx: &'a ToolCtx<'a>,
    o: Opts,
    out: String,
    cap: usize,
    s: Stats,
    ignores: IgnoreStack,
    max_entries: usize,
    /// The deadline, the run and the emergency stop.
    watch: Watch<'a>,
    /// The parser child matching a regular expression, once started.
    child: Option<Child>,
    /// Files read and not yet sent to the child: how they are shown, their
    /// text; and its size.
    batch: Vec<(String, String)>,
    batch_bytes: usize,
    /// Why the search ended without an answer: stopped from outside, or
    /// the child failed.
    end: Option<Failure>,
}

impl Tool for Grep {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::Grep
    }
    fn description(&self) -> &'static str {
        "Regex search in workspace files: path:line:text. Skips .git, binary, secret and ignored \
         files."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "regex"},
                "path": {"type": "string"},
                "glob": {"type": "string"},
                "exclude": {"type": "string"},
                "case_sensitive": {"type": "boolean"},
                "context": {"type": "integer"},
                "max_matches": {"type": "integer"},
                "files_only": {"type": "boolean"},
                "include_ignored": {"type": "boolean"}
            },
            "required": ["pattern"]
        })
    }
    fn defaults(&self) -> Value {
        json!({
            "path": ".", "case_sensitive": false,
            "context": DEFAULT_CONTEXT, "max_matches": DEFAULT_MATCHES,
            "files_only": false, "include_ignored": false,
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(start) = ctx.path() else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let o = match opts(args) {
            Ok(o) => o,
            Err(e) => return ToolResult::err(e),
        };
        let mut search = Search {
            ctx,
            o,
            out: String::new(),
            cap: ctx.cfg.tool_output_max_bytes,
            s: Stats::default(),
            ignores: IgnoreStack::default(),
            max_entries: MAX_ENTRIES,
            watch: Watch::of(ctx),
            child: None,
            batch: Vec::new(),
            batch_bytes: 0,
            end: None,
        };
        if let Err(e) = search.run(start) {
            return ToolResult::err(e);
        }
        search.finish()
    }
}

fn rel_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

impl Search<'_> {
    fn run(&mut self, start: &Path) -> Result<(), String> {
        let walked = self.walk_from(start);
        // The last files read for the child.
        self.flush();
        walked
    }

    fn walk_from(&mut self, start: &Path) -> Result<(), String> {
        let ws = self
            .ctx
            .gate
            .workspace()
            .map_err(|e| e.to_string())?
            .to_path_buf();
        let shown = super::files::display_rel(self.ctx, start);
        let (root, rel) = super::files::anchor(self.ctx, start)?;
        let md = beneath::metadata_beneath(root.as_fd(), &rel)
            .map_err(|e| format!("cannot search {shown}: {}", super::files::explain(&e)))?;
        if md.is_file() {
            // One named file: .gitignore and globs do not apply to it.
            let parent = rel.parent().unwrap_or(Path::new(""));
            let dir = beneath::open_dir_beneath(root.as_fd(), parent, Symlinks::Refuse)
                .map_err(|e| format!("cannot search {shown}: {}", super::files::explain(&e)))?;
            let name = rel.file_name().map(OsString::from).unwrap_or_default();
            self.search_file(&dir, &name, &shown);
            return Ok(());
        }
        if !md.is_dir() {
            return Err(format!("{shown} is not a file or a directory"));
        }
        let dir = beneath::open_dir_beneath(root.as_fd(), &rel, Symlinks::Refuse)
            .map_err(|e| format!("cannot search {shown}: {}", super::files::explain(&e)))?;
        let top_rel = start.strip_prefix(&ws).ok();
        // The .gitignore files of the directories above the start, from the
        // workspace root down, apply as git would apply them: every rule
        // file sees paths from the workspace root (`key`), less its base.
        let prefix = match top_rel {
            Some(t) if !t.as_os_str().is_empty() => format!("{}/", rel_str(t)),
            _ => String::new(),
        };
        if let Some(top_rel) = top_rel {
            let ws_fd = beneath::open_workspace(&ws).map_err(|e| e.to_string())?;
            let mut base = PathBuf::new();
            let mut bases = vec![PathBuf::new()];
            for c in top_rel.components() {
                base.push(c);
                bases.push(base.clone());
            }
            bases.pop(); // the start: read by the walk
            for b in bases {
                if let Ok(d) = beneath::open_dir_beneath(ws_fd.as_fd(), &b, Symlinks::Refuse)
                    && let Some(f) = read_gitignore(&d)
                {
                    let key = if b.as_os_str().is_empty() {
                        String::new()
                    } else {
                        format!("{}/", rel_str(&b))
                    };
                    self.ignores.push(key, f);
                }
            }
        }
        let label = if prefix.is_empty() && start == ws {
            String::new()
        } else if prefix.is_empty() {
            format!("{shown}/")
        } else {
            prefix.clone()
        };
        self.walk(dir, start.to_path_buf(), prefix, label, 0);
        Ok(())
    }

    /// Whether the search must end: a cap reached, or stopped from
    /// outside (looked at every entry: a clock read and an atomic load).
    fn over(&mut self) -> bool {
        if self.s.stopped.is_some() || self.end.is_some() {
            return true;
        }
        if let Some(s) = self.watch.stop() {
            self.halt(Failure::Stopped(s));
        }
        self.s.stopped.is_some()
    }

    /// Ends the search: a timeout or a cancel keeps what was found (the
    /// result says it was cut short), an emergency stop or a failed child
    /// makes the call fail.
    fn halt(&mut self, why: Failure) {
        if let Failure::Stopped(s @ (Stopped::Timeout | Stopped::Cancelled)) = why {
            self.s.stopped.get_or_insert_with(|| s.why().into());
        } else {
            self.end = Some(why);
        }
    }

    /// Sends the files read for the parser child (started at the first
    /// batch) and reports each one's hits in order; on a stop, what the
    /// batch would have found is lost and the search ends.
    fn flush(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        // Read before a cap ended the walk: still searched. `ask` looks at
        // the deadline and the stops first.
        if batch.is_empty() || self.end.is_some() {
            return;
        }
        let Finder::Regex { pattern, ci } = &self.o.finder else {
            return;
        };
        let budget = self.o.max_matches - self.s.matches;
        let files_only = self.o.files_only;
        let lens: Vec<usize> = batch.iter().map(|(_, t)| t.len()).collect();
        let head = json!({
            "pattern": pattern, "ci": ci, "budget": budget, "files_only": files_only, "lens": lens,
        });
        if self.child.is_none() {
            match Child::spawn(isolate::Kind::Grep) {
                Ok(c) => self.child = Some(c),
                Err(e) => return self.halt(Failure::Failed(e)),
            }
        }
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let body: Vec<&[u8]> = batch.iter().map(|(_, t)| t.as_bytes()).collect();
        let mut answer = match child.ask(&self.watch, &head, &body, Duration::ZERO) {
            Ok(a) => a,
            Err(f) => {
                self.child = None;
                return self.halt(f);
            }
        };
        if let Some(e) = answer["error"].as_str() {
            return self.halt(Failure::Failed(e.to_string()));
        }
        let per_file = match answer["starts"].take() {
            Value::Array(a) => a,
            _ => Vec::new(),
        };
        for (i, (shown, text)) in batch.iter().enumerate() {
            if self.s.stopped.is_some() {
                break;
            }
            self.s.files_searched += 1;
            // The lines are found here: from the child, only starts in
            // the text, on character boundaries, in order, are taken.
            let starts = per_file.get(i).and_then(Value::as_array);
            let mut next = starts
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_u64().map(|v| v as usize))
                .peekable();
            let budget = self.o.max_matches - self.s.matches;
            let hits = line_hits(text, budget, files_only, |from| {
                while next.next_if(|&s| s < from).is_some() {}
                next.next()
                    .filter(|&s| s <= text.len() && text.is_char_boundary(s))
            });
            self.report(text, shown, &hits);
        }
    }

    /// `abs`: the directory's path (for the gate's checks); `key`: its path
    /// from the workspace root (for `.gitignore`, "" or ending in `/`);
    /// `label`: how results name files in it.
    fn walk(&mut self, dir: OwnedFd, abs: PathBuf, key: String, label: String, depth: usize) {
        let Ok(mut names) = beneath::read_dir_typed(dir.as_fd()) else {
            self.s.unreadable += 1;
            return;
        };
        crate::util::sort::sort_by(&mut names, |a, b| a.0.cmp(&b.0));
        self.ignores.leave_to(&key);
        if names
            .iter()
            .any(|(n, k)| n == ".gitignore" && *k == Kind::File)
            && let Some(f) = read_gitignore(&dir)
        {
            self.ignores.push(key.clone(), f);
        }
        for (name, kind) in names {
            self.s.entries += 1;
            if self.s.entries > self.max_entries {
                self.s.stopped = Some(format!(
                    "more than {} entries under the path; name a smaller directory",
                    self.max_entries
                ));
            }
            if self.over() {
                return;
            }
            let text = name.to_string_lossy();
            let is_dir = kind == Kind::Dir;
            if is_dir && name.as_bytes() == b".git" {
                continue;
            }
            let here = abs.join(&name);
            if self.ctx.gate.is_forbidden(&here) {
                self.s.forbidden += 1;
                continue;
            }
            let rel_key = format!("{key}{text}");
            let watch = &self.watch;
            match self
                .ignores
                .ignored(&rel_key, is_dir, &mut || watch.stop().is_some())
            {
                Ok(false) => {}
                Ok(true) => {
                    self.s.ignored += 1;
                    continue;
                }
                Err(_) => {
                    // Stopped meanwhile: the check says why.
                    self.over();
                    continue;
                }
            }
            let rel_label = format!("{label}{text}");
            let rel_top = rel_label.as_str();
            if self.o.exclude.iter().any(|g| g.matches(rel_top)) {
                continue;
            }
            // Below the start only: a search that starts in one searches it.
            if is_dir
                && !self.o.include_ignored
                && DEFAULT_EXCLUDED_DIRS
                    .iter()
                    .any(|d| name.as_bytes() == d.as_bytes())
            {
                self.s.excluded_dirs += 1;
                continue;
            }
            match kind {
                Kind::Dir => {
                    if depth + 1 >= MAX_DEPTH {
                        self.s.unreadable += 1;
                        continue;
                    }
                    match beneath::open_dir_beneath(dir.as_fd(), Path::new(&name), Symlinks::Refuse)
                    {
                        Ok(sub) => self.walk(
                            sub,
                            here,
                            format!("{rel_key}/"),
                            format!("{rel_label}/"),
                            depth + 1,
                        ),
                        Err(_) => self.s.unreadable += 1,
                    }
                    self.ignores.leave_to(&key);
                }
                Kind::File => {
                    if !self.o.include.is_empty()
                        && !self.o.include.iter().any(|g| g.matches(rel_top))
                    {
                        continue;
                    }
                    if self.ctx.gate.secret_rule(&here).is_some() {
                        self.s.secret += 1;
                        continue;
                    }
                    self.search_file(&dir, &name, &rel_label);
                }
                Kind::Symlink => self.s.symlinks += 1,
                Kind::Other => {}
            }
        }
    }

    fn search_file(&mut self, dir: &OwnedFd, name: &OsString, shown: &str) {
        let file = beneath::open_beneath(
            dir.as_fd(),
            Path::new(name),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
            Symlinks::Refuse,
        );
        let Ok(file) = file.map(std::fs::File::from) else {
            self.s.unreadable += 1;
            return;
        };
        let Ok(md) = file.metadata() else {
            self.s.unreadable += 1;
            return;
        };
        if !md.is_file() {
            return;
        }
        if md.nlink() > 1 {
            self.s.linked += 1;
            return;
        }
        if md.len() > MAX_FILE_BYTES {
            self.s.too_large += 1;
            return;
        }
        let mut buf = Vec::with_capacity(md.len() as usize);
        if file.take(MAX_FILE_BYTES).read_to_end(&mut buf).is_err() {
            self.s.unreadable += 1;
            return;
        }
        if memchr::memchr(0, &buf[..buf.len().min(BINARY_PROBE)]).is_some() {
            self.s.binary += 1;
            return;
        }
        let text = String::from_utf8(buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if let Finder::Literal { finder: f, fold } = &self.o.finder {
            self.s.files_searched += 1;
            let budget = self.o.max_matches - self.s.matches;
            let folded;
            let hay = if *fold {
                folded = text.as_bytes().to_ascii_lowercase();
                &folded[..]
            } else {
                text.as_bytes()
            };
            let hits = line_hits(&text, budget, self.o.files_only, |from| {
                f.find(&hay[from..]).map(|i| from + i)
            });
            return self.report(&text, shown, &hits);
        }
        // A regular expression: matched in the parser child, files sent
        // in batches (one round trip per file would cost more than most
        // searches).
        self.batch_bytes += text.len();
        self.batch.push((shown.to_string(), text));
        if self.batch_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_FILES {
            self.flush();
        }
    }

    /// One file's hits into the output and the counts.
    fn report(&mut self, text: &str, shown: &str, hits: &[Hit]) {
        if hits.is_empty() {
            return;
        }
        let hits: Vec<(usize, usize)> = hits.iter().map(|h| (h.line_start, h.line_no)).collect();
        self.s.files_matched += 1;
        if self.o.files_only {
            self.s.matches += 1;
            self.emit(&format!("{shown}\n"));
        } else {
            self.s.matches += hits.len();
            let mut block = self.format_hits(text, shown, &hits);
            if self.o.context > 0 && !self.out.is_empty() {
                block.insert_str(0, "--\n");
            }
            self.emit(&block);
        }
        if self.s.matches >= self.o.max_matches && self.s.stopped.is_none() {
            self.s.stopped = Some(format!("max_matches = {} reached", self.o.max_matches));
        }
    }

    fn format_hits(&self, text: &str, shown: &str, hits: &[(usize, usize)]) -> String {
        let mut out = String::new();
        let clip = |l: &str| -> String {
            let l = l.strip_suffix('\r').unwrap_or(l);
            match l.char_indices().nth(MAX_LINE_CHARS) {
                Some((i, _)) => format!("{}…[line cut]", &l[..i]),
                None => l.to_string(),
            }
        };
        if self.o.context == 0 {
            for &(start, n) in hits {
                let end = memchr::memchr(b'\n', &text.as_bytes()[start..])
                    .map_or(text.len(), |i| start + i);
                let _ = writeln!(out, "{shown}:{n}:{}", clip(&text[start..end]));
            }
            return out;
        }
        let lines: Vec<&str> = text.split('\n').collect();
        let last = if text.ends_with('\n') {
            lines.len() - 1
        } else {
            lines.len()
        };
        let c = self.o.context;
        let mut shown_to = 0usize; // last line number written
        for (i, &(_, n)) in hits.iter().enumerate() {
            let from = n.saturating_sub(c).max(1).max(shown_to + 1);
            if shown_to > 0 && from > shown_to + 1 {
                out.push_str("--\n");
            }
            let next_hit = hits.get(i + 1).map(|h| h.1);
            let mut to = (n + c).min(last);
            if let Some(nh) = next_hit
                && nh <= to
            {
                to = nh - 1;
            }
            for k in from..=to.max(n) {
                let sep = if k == n { ':' } else { '-' };
                let _ = writeln!(out, "{shown}{sep}{k}{sep}{}", clip(lines[k - 1]));
            }
            shown_to = to.max(n);
        }
        out
    }

    fn emit(&mut self, s: &str) {
        // Room kept for the summary and the truncation line.
        let room = self.cap - (self.cap / 8).min(512);
        if self.out.len() + s.len() > room {
            if self.s.stopped.is_none() {
                self.s.stopped = Some(format!(
                    "the output reached tool_output_max_bytes = {}",
                    self.cap
                ));
            }
            return;
        }
        self.out.push_str(s);
    }

    fn finish(mut self) -> ToolResult {
        match self.end.take() {
            Some(Failure::Stopped(Stopped::Estop)) => {
                return ToolResult {
                    estop: true,
                    ..ToolResult::err(format!("{}; the search was ended", Stopped::Estop.why()))
                };
            }
            Some(Failure::Stopped(s)) => return ToolResult::err(s.why()),
            Some(Failure::Failed(e)) => return ToolResult::err(e),
            None => {}
        }
        let s = &self.s;
        let mut out = self.out;
        let mut skipped = Vec::new();
        for (n, name) in [
            (s.ignored, "ignored by .gitignore"),
            (
                s.excluded_dirs,
                "dependency or build directories (include_ignored: true searches them)",
            ),
            (s.binary, "binary"),
            (s.secret, "secret-named"),
            (s.forbidden, "forbidden or latchclaw's state"),
            (s.too_large, "over 16 MiB"),
            (s.linked, "with more than one hard link"),
            (s.symlinks, "symlinks (not followed)"),
            (s.unreadable, "unreadable"),
        ] {
            if n > 0 {
                skipped.push(format!("{n} {name}"));
            }
        }
        let skipped = if skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped: {}", skipped.join(", "))
        };
        if s.matches == 0 {
            out.push_str("no matches");
        } else if self.o.files_only {
            let _ = write!(out, "{} matching files", s.matches);
        } else {
            let _ = write!(
                out,
                "{} matching lines in {} files",
                s.matches, s.files_matched
            );
        }
        let _ = write!(out, " ({} files searched{skipped})", s.files_searched);
        if let Some(why) = &s.stopped {
            let _ = write!(out, "\n…[truncated: {why}; there may be more]");
        }
        ToolResult {
            metadata: Some(json!({
                "matches": s.matches,
                "files_matched": s.files_matched,
                "files_searched": s.files_searched,
                "truncated": s.stopped.is_some(),
                "skipped": {
                    "ignored": s.ignored, "excluded_dirs": s.excluded_dirs,
                    "binary": s.binary, "secret": s.secret,
                    "forbidden": s.forbidden, "too_large": s.too_large,
                    "hard_linked": s.linked, "symlinks": s.symlinks, "unreadable": s.unreadable
                }
            })),
            ..ToolResult::ok(out)
        }
    }
}

/// A directory's `.gitignore`, if it is a plain file (no symlink) of at
/// most 1 MiB.
fn read_gitignore(dir: &OwnedFd) -> Option<IgnoreFile> {
    let fd = beneath::open_beneath(
        dir.as_fd(),
        Path::new(".gitignore"),
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
        Symlinks::Refuse,
    )
    .ok()?;
    let f = std::fs::File::from(fd);
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    f.take(1 << 20).read_to_end(&mut buf).ok()?;
    let rules = IgnoreFile::parse(&String::from_utf8_lossy(&buf));
    (!rules.is_empty()).then_some(rules)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::memory::Memory;
    use crate::security::Gate;
    use std::time::{Duration, Instant};

    struct Fx {
        top: PathBuf,
        cfg: Config,
        gate: Gate,
        memory: Memory,
    }

    impl Drop for Fx {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.top);
        }
    }

    fn fixture(files: usize) -> Fx {
        let top = std::env::temp_dir().join(crate::util::new_id("latchclaw-grep"));
        std::fs::create_dir_all(top.join("ws/d")).unwrap();
        std::fs::create_dir_all(top.join("state")).unwrap();
        let top = std::fs::canonicalize(&top).unwrap();
        for i in 0..files {
            std::fs::write(top.join(format!("ws/d/f{i:03}.txt")), "hit\n").unwrap();
        }
        let text = format!(
            "workspace_dir = {:?}\n[security]\nautonomy = \"readonly\"\n",
            top.join("ws").display().to_string()
        );
        let cfg =
            Config::from_text(&text, &top.join("state/config.toml"), top.join("state")).unwrap();
        let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        let memory =
            Memory::open(&top.join("state/memory.sqlite"), 1000, Default::default()).unwrap();
        Fx {
            top,
            cfg,
            gate,
            memory,
        }
    }

    fn search(fx: &Fx, deadline: Instant, max_entries: usize) -> ToolResult {
        let args = json!({"pattern": "hit", "max_matches": 10000});
        let decision = fx.gate.decide(crate::types::ToolName::Grep, &args);
        assert_eq!(
            decision.verdict,
            crate::security::Verdict::Allow,
            "{decision}"
        );
        let control = crate::control::RunControl::new(None);
        let ctx = ToolCtx {
            cfg: &fx.cfg,
            gate: &fx.gate,
            memory: &fx.memory,
            decision: &decision,
            control: &control,
            deadline,
            conversation_id: "test",
            user: &crate::tools::tool::Nobody,
            host: &crate::tools::tool::NoHost,
            spare: &[],
        };
        let mut s = Search {
            ctx: &ctx,
            o: opts(&args).unwrap(),
            out: String::new(),
            cap: fx.cfg.tool_output_max_bytes,
            s: Stats::default(),
            ignores: IgnoreStack::default(),
            max_entries,
            watch: Watch::of(&ctx),
            child: None,
            batch: Vec::new(),
            batch_bytes: 0,
            end: None,
        };
        s.run(ctx.path().unwrap()).unwrap();
        s.finish()
    }

    #[test]
    fn the_deadline_and_the_entry_cap_stop_the_walk() {
        let fx = fixture(300);
        let later = Instant::now() + Duration::from_secs(60);
        let r = search(&fx, later, MAX_ENTRIES);
        assert_eq!(r.metadata.as_ref().unwrap()["matches"], 300, "{r:?}");
        assert_eq!(r.metadata.as_ref().unwrap()["truncated"], false);
        // A deadline already past: stopped at the first check.
        let r = search(&fx, Instant::now(), MAX_ENTRIES);
        assert!(
            r.output
                .contains("…[truncated: the call's time limit was reached"),
            "{}",
            r.output
        );
        assert_eq!(r.metadata.as_ref().unwrap()["matches"], 0, "{r:?}");
        let r = search(&fx, later, 100);
        assert!(
            r.output
                .contains("…[truncated: more than 100 entries under the path"),
            "{}",
            r.output
        );
        assert_eq!(r.metadata.as_ref().unwrap()["files_searched"], 99, "{r:?}");
    }
}
