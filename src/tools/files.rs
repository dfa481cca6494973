//! `file_list`, `file_read` and `file_write`. The gate resolves and checks a
//! path; the tool then opens that resolved path beneath a descriptor of the
//! workspace with no symlink followed anywhere on it ([`beneath`]). The
//! resolved path had none when the gate checked it, so one found now was
//! swapped in since, and the call is refused instead of led elsewhere. What
//! is checked afterwards (type, size, link count) comes from the opened
//! descriptor, not the name.

use super::beneath::{self, Symlinks};
use super::tool::{Tool, ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Listings longer than `limit` (default this) are cut with a marker.
const DEFAULT_LIMIT: u64 = 500;
pub(super) const MAX_LIMIT: u64 = 2000;
/// `file_read`'s lines a call shows unless `max_lines` says otherwise.
const DEFAULT_MAX_LINES: u64 = 500;
pub(super) const MAX_MAX_LINES: u64 = 100_000;

pub struct FileList;
pub struct FileRead;

pub(super) fn display_rel(ctx: &ToolCtx, p: &Path) -> String {
    match ctx
        .gate
        .workspace()
        .ok()
        .and_then(|w| p.strip_prefix(w).ok())
    {
        Some(rel) if rel.as_os_str().is_empty() => "the workspace root".into(),
        Some(rel) => rel.display().to_string(),
        None => p.display().to_string(),
    }
}

/// Where the tool opens a gate-resolved path from: the workspace descriptor
/// and the path relative to it. With `workspace_only = false` the gate may
/// allow a path outside; there is no workspace to hold on to, so the same
/// no-symlink open starts at `/`. The gate's path is canonical, so that
/// still refuses a symlink swapped in on any component, not only the last.
pub(super) fn anchor(ctx: &ToolCtx, path: &Path) -> Result<(OwnedFd, PathBuf), String> {
    let ws = ctx.gate.workspace().map_err(|e| e.to_string())?;
    if !path.is_absolute() {
        return Err(format!("internal: {} is not absolute", path.display()));
    }
    let (base, rel) = beneath::split(ws, path);
    let fd = beneath::open_workspace(base)
        .map_err(|e| format!("cannot open {}: {e}", base.display()))?;
    Ok((fd, rel.to_path_buf()))
}

/// An open error in the tool's words: ELOOP and EXDEV here mean the path
/// changed after the gate checked it.
/// Opens the file the gate resolved for reading, as the file tools must:
/// beneath the workspace with no symlink followed, without blocking on a
/// FIFO, and only a regular file with one link. `dir_hint` says what to do
/// with a directory instead. Errors are whole messages for the model.
pub(super) fn open_regular(
    ctx: &ToolCtx,
    path: &Path,
    dir_hint: &str,
) -> Result<(std::fs::File, std::fs::Metadata), String> {
    let shown = display_rel(ctx, path);
    // O_NONBLOCK keeps a FIFO from hanging the open.
    let file = anchor(ctx, path)
        .and_then(|(root, rel)| {
            beneath::open_beneath(
                root.as_fd(),
                &rel,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                0,
                Symlinks::Refuse,
            )
            .map(std::fs::File::from)
            .map_err(|e| explain(&e))
        })
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let md = file
        .metadata()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if md.is_dir() {
        return Err(format!("{shown} is a directory; {dir_hint}"));
    }
    if !md.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    if md.nlink() > 1 {
        return Err(format!("{shown} has more than one hard link; refused"));
    }
    Ok((file, md))
}

pub(super) fn explain(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => {
            "a symlink is on the path now (there was none when the gate checked it); refused".into()
        }
        Some(libc::EXDEV) => {
            "the path now leads out of the directory it was checked in; refused".into()
        }
        _ => e.to_string(),
    }
}

fn human_size(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

impl Tool for FileList {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::FileList
    }
    fn description(&self) -> &'static str {
        "Lists a workspace directory."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "glob": {"type": "string"},
                "depth": {"type": "integer"},
                "sort": {"type": "string"},
                "include_hidden": {"type": "boolean"},
                "limit": {"type": "integer"}
            }
        })
    }
    fn defaults(&self) -> Value {
        json!({"path": ".", "depth": 1, "sort": "name", "include_hidden": false,
               "limit": DEFAULT_LIMIT})
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(dir) = ctx.path() else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let shown = display_rel(ctx, dir);
        let depth = match args.get("depth") {
            None => 1,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=MAX_DEPTH) => n as usize,
                _ => {
                    return ToolResult::err(format!(
                        "\"depth\" must be an integer from 1 to {MAX_DEPTH}"
                    ));
                }
            },
        };
        let limit = match args.get("limit") {
            None => DEFAULT_LIMIT as usize,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=MAX_LIMIT) => n as usize,
                _ => {
                    return ToolResult::err(format!(
                        "\"limit\" must be an integer from 1 to {MAX_LIMIT}"
                    ));
                }
            },
        };
        let include_hidden = args
            .get("include_hidden")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let sort = match args.get("sort").and_then(Value::as_str) {
            None | Some("name") => Sort::Name,
            Some("mtime") => Sort::Mtime,
            Some("size") => Sort::Size,
            Some(other) => {
                return ToolResult::err(format!(
                    "\"sort\" is \"{}\"; allowed: name, mtime, size",
                    crate::util::printable(other)
                ));
            }
        };
        let globs = match args.get("glob").and_then(Value::as_str) {
            None => Vec::new(),
            Some(g) => match super::glob::parse_list(g, "glob") {
                Ok(g) => g,
                Err(e) => return ToolResult::err(e),
            },
        };
        let opened = anchor(ctx, dir).and_then(|(root, rel)| {
            beneath::open_dir_beneath(root.as_fd(), &rel, Symlinks::Refuse).map_err(|e| explain(&e))
        });
        let fd = match opened {
            Ok(fd) => fd,
            Err(e) => return ToolResult::err(format!("cannot list {shown}: {e}")),
        };
        let mut l = Listing {
            ctx,
            globs,
            depth,
            include_hidden,
            dotted: 0,
            entries: Vec::new(),
            hidden: 0,
            seen: 0,
            stopped: None,
        };
        if let Err(e) = l.list(fd, dir.to_path_buf(), String::new(), 1) {
            return ToolResult::err(format!("cannot list {shown}: {e}"));
        }
        let mut entries = l.entries;
        match sort {
            Sort::Name => crate::util::sort::sort_by(&mut entries, |a, b| a.name.cmp(&b.name)),
            Sort::Mtime => crate::util::sort::sort_by(&mut entries, |a, b| {
                b.mtime.cmp(&a.mtime).then(a.name.cmp(&b.name))
            }),
            Sort::Size => crate::util::sort::sort_by(&mut entries, |a, b| {
                b.size.cmp(&a.size).then(a.name.cmp(&b.name))
            }),
        }
        let count = |k| entries.iter().filter(|e| e.rank == k).count();
        let (dirs, files, links) = (count(0), count(1), count(2));
        // The names first, the counts after them: a small model handed the
        // counts first answered "which files?" with them.
        let mut out = format!("{shown}:");
        for e in entries.iter().take(limit) {
            out.push('\n');
            out.push_str(&e.line);
        }
        out.push_str(&format!(
            "\n({} entries: {dirs} directories, {files} files, {links} links)",
            entries.len()
        ));
        if entries.len() > limit {
            out.push_str(&format!(
                "\n…[truncated: {} more entries; limit = {limit}]",
                entries.len() - limit
            ));
        }
        if l.dotted > 0 {
            out.push_str(&format!(
                "\n({} hidden entries (names starting with \".\") not shown; include_hidden: true \
                 lists them)",
                l.dotted
            ));
        }
        if let Some(why) = &l.stopped {
            out.push_str(&format!("\n…[truncated: {why}]"));
        }
        if l.hidden > 0 {
            out.push_str(&format!(
                "\n({} entries of latchclaw's own state hidden)",
                l.hidden
            ));
        }
        ToolResult {
            metadata: Some(
                json!({"entries": entries.len(), "directories": dirs, "files": files,
                                  "hidden_not_shown": l.dotted,
                                  "truncated": entries.len() > limit || l.stopped.is_some()}),
            ),
            ..ToolResult::ok(crate::util::truncate_middle(
                &out,
                ctx.cfg.tool_output_max_bytes,
            ))
        }
    }
}

/// The deepest `depth` a listing takes.
pub(super) const MAX_DEPTH: u64 = 10;
/// Entries looked at (shown or not) before a deep listing stops.
const MAX_WALK: usize = 20_000;

enum Sort {
    Name,
    Mtime,
    Size,
}

struct Entry {
    /// From the listed directory: `sub/name`.
    name: String,
    /// 0 directory, 1 file, 2 link, 3 other: for the counts.
    rank: u8,
    line: String,
    mtime: i64,
    size: u64,
}

struct Listing<'a> {
    ctx: &'a ToolCtx<'a>,
    globs: Vec<super::glob::Glob>,
    depth: usize,
    include_hidden: bool,
    /// Dotted names left out (not entered either).
    dotted: usize,
    entries: Vec<Entry>,
    hidden: usize,
    seen: usize,
    stopped: Option<String>,
}

impl Listing<'_> {
    /// `abs`: the directory's path, for the gate's checks; `prefix`: how
    /// entries in it are named ("" or ending in `/`).
    fn list(
        &mut self,
        fd: OwnedFd,
        abs: PathBuf,
        prefix: String,
        level: usize,
    ) -> Result<(), String> {
        let names = beneath::read_dir(fd.as_fd()).map_err(|e| e.to_string())?;
        let mut subdirs = Vec::new();
        for name in names {
            self.seen += 1;
            if self.seen > MAX_WALK {
                self.stopped = Some(format!(
                    "stopped after {MAX_WALK} entries; list a smaller directory or a lower depth"
                ));
                return Ok(());
            }
            let here = abs.join(&name);
            if self.ctx.gate.is_protected(&here) {
                self.hidden += 1;
                continue;
            }
            if !self.include_hidden && name.as_encoded_bytes().starts_with(b".") {
                self.dotted += 1;
                continue;
            }
            // Gone since the directory was read: not listed.
            let Ok(md) = beneath::metadata_beneath(fd.as_fd(), Path::new(&name)) else {
                continue;
            };
            let ft = md.file_type();
            let name_text = format!("{prefix}{}", name.to_string_lossy());
            if ft.is_dir() && level < self.depth {
                if name == ".git" {
                    // Never entered: hooks, objects and config are no listing's business.
                } else if self.ctx.gate.is_forbidden(&here) {
                    // Named (check_path refuses it), never entered.
                } else {
                    subdirs.push((name.clone(), here.clone(), format!("{name_text}/")));
                }
            }
            if !self.globs.is_empty()
                && !self
                    .globs
                    .iter()
                    .any(|g| g.matches(&name.to_string_lossy()))
            {
                continue;
            }
            // Named, so the model knows not to ask for it; never opened.
            let rule = if ft.is_dir() {
                None
            } else if ft.is_symlink() {
                crate::security::resolve(&here)
                    .ok()
                    .filter(|t| !t.is_dir())
                    .and_then(|t| self.ctx.gate.secret_rule(&t))
                    .or_else(|| self.ctx.gate.secret_rule(&here))
            } else {
                self.ctx.gate.secret_rule(&here)
            };
            let secret = rule.map_or_else(String::new, |rule| {
                format!("  [secret-named (rule \"{rule}\"): refused]")
            });
            let (rank, line) = if ft.is_dir() {
                (0, format!("dir   {name_text}/"))
            } else if ft.is_symlink() {
                let target = beneath::read_link_at(fd.as_fd(), &name);
                (
                    2,
                    format!(
                        "link  {name_text} -> {}{secret}",
                        target.map_or_else(|_| "?".into(), |t| t.display().to_string())
                    ),
                )
            } else if ft.is_file() {
                (
                    1,
                    format!("file  {name_text}  ({}){secret}", human_size(md.len())),
                )
            } else {
                (3, format!("other {name_text}{secret}"))
            };
            self.entries.push(Entry {
                name: name_text,
                rank,
                line,
                mtime: md.mtime(),
                size: md.len(),
            });
        }
        for (name, here, sub_prefix) in subdirs {
            if self.stopped.is_some() {
                break;
            }
            // A directory that cannot be opened (gone, a symlink now,
            // unreadable) is listed but not entered.
            if let Ok(sub) =
                beneath::open_dir_beneath(fd.as_fd(), Path::new(&name), Symlinks::Refuse)
            {
                self.list(sub, here, sub_prefix, level + 1)?;
            }
        }
        Ok(())
    }
}

impl Tool for FileRead {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::FileRead
    }
    fn description(&self) -> &'static str {
        "Reads a UTF-8 text file."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
                "max_lines": {"type": "integer"},
                "line_numbers": {"type": "boolean"}
            },
            "required": ["path"]
        })
    }
    fn defaults(&self) -> Value {
        json!({"start_line": 1, "max_lines": DEFAULT_MAX_LINES, "line_numbers": false})
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(path) = ctx.path() else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let line_arg = |key: &str| match args.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(format!(
                    "\"{key}\" must be an integer of 1 or more (lines count from 1)"
                )),
            },
        };
        let (start, end) = match (line_arg("start_line"), line_arg("end_line")) {
            (Ok(s), Ok(e)) => (s, e),
            (Err(e), _) | (_, Err(e)) => return ToolResult::err(e),
        };
        if let (Some(s), Some(e)) = (start, end)
            && e < s
        {
            return ToolResult::err(format!("\"end_line\" ({e}) is before \"start_line\" ({s})"));
        }
        let max_lines = match args.get("max_lines") {
            None => DEFAULT_MAX_LINES,
            Some(v) => match v.as_u64() {
                Some(n @ 1..=MAX_MAX_LINES) => n,
                _ => {
                    return ToolResult::err(format!(
                        "\"max_lines\" must be an integer from 1 to {MAX_MAX_LINES}"
                    ));
                }
            },
        };
        let cap_end = start.unwrap_or(1).saturating_add(max_lines - 1);
        // Stopped by max_lines rather than by end_line.
        let by_max = end.is_none_or(|e| e > cap_end);
        let numbers = args
            .get("line_numbers")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let shown = display_rel(ctx, path);
        let (file, md) = match open_regular(ctx, path, "use file_list") {
            Ok(opened) => opened,
            Err(e) => return ToolResult::err(e),
        };
        let cap = ctx.cfg.tool_output_max_bytes;
        let last = Some(end.map_or(cap_end, |e| e.min(cap_end)));
        let r = match read_lines(file, start.unwrap_or(1), last, numbers, cap) {
            Ok(r) => r,
            Err(ReadError::NotText) => {
                return ToolResult::err(format!(
                    "{shown} is not a UTF-8 text file ({} bytes)",
                    md.len()
                ));
            }
            Err(ReadError::Io(e)) => return ToolResult::err(format!("cannot read {shown}: {e}")),
        };
        let first = start.unwrap_or(1);
        if let Some(t) = r.total
            && first > t.max(1)
        {
            return ToolResult::err(format!(
                "\"start_line\" is {first}, past the end of {shown} ({t} lines)"
            ));
        }
        let mut out = r.text;
        let remaining = match r.total {
            Some(t) => format!("{} more lines", t.saturating_sub(r.last_shown)),
            None => format!("more lines (not counted past {} MiB)", COUNT_LIMIT >> 20),
        };
        let more = r.total.is_none_or(|t| t > r.last_shown);
        let ask = format!("ask with start_line={}", r.last_shown + 1);
        let ranged = start.is_some() || end.is_some() || numbers;
        let nl = if out.ends_with('\n') { "" } else { "\n" };
        if r.cut {
            let lines = if r.last_shown >= first {
                format!("lines {first}–{}", r.last_shown)
            } else {
                format!("part of line {first}, longer than the limit")
            };
            out.push_str(&format!(
                "{nl}…[truncated: showing the first {} of {} bytes ({lines}); {remaining}; {ask}]",
                if ranged { out.len() } else { r.shown_bytes },
                md.len()
            ));
        } else if more && (ranged || by_max) {
            let why = if by_max && r.last_shown == cap_end {
                format!(" (max_lines = {max_lines})")
            } else {
                String::new()
            };
            out.push_str(&format!(
                "{nl}…[{remaining} after line {}{why}; {ask}]",
                r.last_shown
            ));
        }
        ToolResult {
            metadata: Some(json!({"path": shown, "bytes": md.len(), "lines": r.total,
                                  "last_line_shown": r.last_shown,
                                  "truncated": r.cut || (more && by_max && r.last_shown == cap_end)})),
            ..ToolResult::ok(out)
        }
    }
}

/// Lines are counted (for "N more lines") up to this far into a file.
const COUNT_LIMIT: u64 = 256 * 1024 * 1024;

enum ReadError {
    NotText,
    Io(std::io::Error),
}

struct Lines {
    text: String,
    /// Bytes of the file in `text` (without line numbers).
    shown_bytes: usize,
    /// The last line shown whole (0: none).
    last_shown: u64,
    /// Stopped by the output limit before `end`.
    cut: bool,
    /// Lines in the file, when counted to its end.
    total: Option<u64>,
}

/// Lines `start..=end` of `file` (numbered if asked) within `cap` bytes.
/// A line that does not fit is left out, unless it is the first, which is
/// cut at a character boundary: a one-line file bigger than the cap still
/// shows its start.
fn read_lines(
    file: std::fs::File,
    start: u64,
    end: Option<u64>,
    numbers: bool,
    cap: usize,
) -> Result<Lines, ReadError> {
    use std::io::BufRead;
    let mut rd = std::io::BufReader::with_capacity(64 * 1024, file.take(COUNT_LIMIT));
    let mut r = Lines {
        text: String::new(),
        shown_bytes: 0,
        last_shown: 0,
        cut: false,
        total: None,
    };
    let mut line = Vec::new();
    let mut n = 0u64;
    let mut read = 0u64;
    loop {
        line.clear();
        let got = rd.read_until(b'\n', &mut line).map_err(ReadError::Io)?;
        if got == 0 {
            r.total = (read < COUNT_LIMIT).then_some(n);
            return Ok(r);
        }
        read += got as u64;
        n += 1;
        if n < start || end.is_some_and(|e| n > e) || r.cut {
            continue;
        }
        let prefix = if numbers {
            format!("{n:>6}\t")
        } else {
            String::new()
        };
        if r.text.len() + prefix.len() + line.len() > cap {
            r.cut = true;
            if r.text.is_empty() {
                let room = cap.saturating_sub(prefix.len()).min(line.len());
                let part = match std::str::from_utf8(&line[..room]) {
                    Ok(t) => t,
                    Err(e) if e.error_len().is_none() => {
                        std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or_default()
                    }
                    Err(_) => return Err(ReadError::NotText),
                };
                r.text.push_str(&prefix);
                r.text.push_str(part);
                r.shown_bytes = part.len();
                // Shown in part: it counts as not yet shown.
                r.last_shown = n - 1;
            }
            continue;
        }
        let t = std::str::from_utf8(&line).map_err(|_| ReadError::NotText)?;
        r.text.push_str(&prefix);
        r.text.push_str(t);
        r.shown_bytes += t.len();
        r.last_shown = n;
    }
}

pub struct FileWrite;

impl Tool for FileWrite {
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::FileWrite
    }
    fn description(&self) -> &'static str {
        "Writes a UTF-8 text file in the workspace (whole content, replacing it), creating missing directories."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "file, relative to the workspace"},
                "content": {"type": "string", "description": "the whole new content"}
            },
            "required": ["path", "content"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(path) = ctx.path() else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let Some(content) = args.get("content").and_then(Value::as_str) else {
            return ToolResult::err("\"content\" (a string) is required");
        };
        let shown = display_rel(ctx, path);
        let written = anchor(ctx, path)
            .and_then(|(root, rel)| write_atomic(root.as_fd(), &rel, content.as_bytes()));
        match written {
            Ok(()) => ToolResult {
                metadata: Some(json!({"path": shown, "bytes": content.len()})),
                ..ToolResult::ok(format!("wrote {} bytes to {shown}", content.len()))
            },
            Err(e) => ToolResult::err(format!("cannot write {shown}: {e}")),
        }
    }
}

/// Creates missing parent directories one level at a time and replaces the
/// target through a temporary file renamed over it, all relative to the
/// parent directory's descriptor opened beneath `root`: the file lands in the
/// directory that was checked, or nowhere.
fn write_atomic(root: BorrowedFd, rel: &Path, data: &[u8]) -> Result<(), String> {
    let name = rel.file_name().ok_or("no file name")?;
    let parent = rel.parent().unwrap_or(Path::new(""));
    let dir = beneath::create_dirs_beneath(root, parent).map_err(|e| explain(&e))?;
    let mode = match beneath::metadata_beneath(dir.as_fd(), Path::new(name)) {
        Ok(md) if md.file_type().is_symlink() => {
            return Err("the target became a symlink; refused".into());
        }
        Ok(md) if md.is_dir() => return Err("the target became a directory; refused".into()),
        Ok(md) if md.nlink() > 1 => {
            return Err("the target has more than one hard link; refused".into());
        }
        Ok(md) => md.mode() & 0o777,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0o644,
        Err(e) => return Err(explain(&e)),
    };
    beneath::replace_file(dir.as_fd(), name, data, mode).map_err(|e| e.to_string())
}

/// The largest current file a write's preview compares against.
const PREVIEW_MAX_BYTES: u64 = 1 << 20;

/// What a `file_write` of `content` to `path` (as the gate resolved it)
/// would change, for the operator: a unified diff against the file there
/// now, opened beneath the workspace with no symlink followed (a new file:
/// its content, every line added), capped and escaped ([`super::diff`]).
/// A secret-named file's content is never shown.
pub fn write_preview(gate: &crate::security::Gate, path: &Path, content: &str) -> String {
    let shown = gate.shown(path);
    if let Some(rule) = gate.secret_rule(path) {
        return format!("[{shown} is secret-named (rule \"{rule}\"): no preview]\n");
    }
    let Ok(ws) = gate.workspace() else {
        return "[no workspace: no preview]\n".into();
    };
    let (base, rel) = beneath::split(ws, path);
    let opened = beneath::open_workspace(base).and_then(|root| {
        beneath::open_beneath(
            root.as_fd(),
            rel,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
            Symlinks::Refuse,
        )
    });
    let file = match opened {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return super::diff::unified(&shown, None, content);
        }
        Err(e) => return format!("[{shown} cannot be read to compare: {}]\n", explain(&e)),
    };
    let md = match file.metadata() {
        Ok(md) if md.is_file() && md.nlink() == 1 => md,
        Ok(_) => return format!("[{shown} is not a plain file: no preview]\n"),
        Err(e) => return format!("[{shown} cannot be read to compare: {e}]\n"),
    };
    if md.len() > PREVIEW_MAX_BYTES {
        return format!(
            "[{shown} is {} now: too large to compare; it is replaced whole]\n",
            human_size(md.len())
        );
    }
    let mut old = Vec::new();
    if file.take(PREVIEW_MAX_BYTES).read_to_end(&mut old).is_err() {
        return format!("[{shown} cannot be read to compare]\n");
    }
    match String::from_utf8(old) {
        Ok(old) if old == content => format!("[{shown}: no change]\n"),
        Ok(old) => super::diff::unified(&shown, Some(&old), content),
        Err(_) => format!(
            "[{shown} is not UTF-8 text now ({}): it is replaced whole]\n",
            human_size(md.len())
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::memory::Memory;
    use crate::security::{Decision, Gate, Verdict};
    use crate::tools::beneath::WalkOnly;
    use std::os::unix::fs::symlink;

    const CANARY: &str = "CANARY-outside-the-workspace";
    const MARKER: &str = "zz-only-outside";

    struct Fx {
        top: PathBuf,
        ws: PathBuf,
        outside: PathBuf,
        cfg: Config,
        gate: Gate,
        memory: Memory,
    }

    impl Drop for Fx {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.top);
        }
    }

    /// ws/d/canary.txt says "inside"; outside/ holds a canary of the same
    /// name and a marker file only a listing that escaped would show.
    fn fixture(security: &str) -> Fx {
        let top = std::env::temp_dir().join(crate::util::new_id("latchclaw-files"));
        std::fs::create_dir_all(top.join("ws/d")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        std::fs::create_dir_all(top.join("state")).unwrap();
        let top = std::fs::canonicalize(&top).unwrap();
        let (ws, outside) = (top.join("ws"), top.join("outside"));
        std::fs::write(ws.join("d/canary.txt"), "inside").unwrap();
        std::fs::write(outside.join("canary.txt"), CANARY).unwrap();
        std::fs::write(outside.join(MARKER), CANARY).unwrap();
        let text = format!(
            "workspace_dir = {:?}\n[security]\nautonomy = \"full\"\n{security}\n[channels.cli]\n\
             tools_allow = [\"file_list\", \"file_read\", \"file_write\"]\n",
            ws.display().to_string()
        );
        let cfg =
            Config::from_text(&text, &top.join("state/config.toml"), top.join("state")).unwrap();
        let gate = Gate::new(&cfg, &cfg.channels.cli.tools_allow);
        let memory =
            Memory::open(&top.join("state/memory.sqlite"), 1000, Default::default()).unwrap();
        Fx {
            top,
            ws,
            outside,
            cfg,
            gate,
            memory,
        }
    }

    fn invoke(fx: &Fx, tool: &str, args: &Value, d: &Decision) -> ToolResult {
        let control = crate::control::RunControl::new(None);
        let ctx = ToolCtx {
            cfg: &fx.cfg,
            gate: &fx.gate,
            memory: &fx.memory,
            conversation_id: "test",
            decision: d,
            control: &control,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(60),
            user: &crate::tools::tool::Nobody,
            host: &crate::tools::tool::NoHost,
            spare: &[],
        };
        let tool: &dyn Tool = match tool {
            "file_list" => &FileList,
            "file_read" => &FileRead,
            "file_write" => &FileWrite,
            _ => panic!("not a file tool: {tool}"),
        };
        tool.invoke(args, &ctx)
    }

    fn leaked(r: &ToolResult) -> bool {
        let all = format!("{} {:?}", r.output, r.error);
        all.contains(CANARY) || all.contains(MARKER)
    }

    fn calls() -> [(&'static str, Value); 3] {
        [
            ("file_read", json!({"path": "d/canary.txt"})),
            ("file_write", json!({"path": "d/out.txt", "content": "w"})),
            ("file_list", json!({"path": "d"})),
        ]
    }

    fn assert_outside_untouched(fx: &Fx) {
        let mut names: Vec<_> = std::fs::read_dir(&fx.outside)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["canary.txt", MARKER]);
        assert_eq!(
            std::fs::read_to_string(fx.outside.join("canary.txt")).unwrap(),
            CANARY
        );
    }

    /// The race made to happen every time: the gate decides while `d` is a
    /// directory, then `d` becomes a symlink to outside before the tool runs.
    #[test]
    fn a_directory_swapped_after_the_decision_is_refused() {
        let fx = fixture("");
        let d = fx.ws.join("d");
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            for (tool, args) in calls() {
                let decision = fx
                    .gate
                    .decide(crate::types::ToolName::parse(tool).unwrap(), &args);
                assert_eq!(decision.verdict, Verdict::Allow, "{decision}");
                std::fs::rename(&d, fx.ws.join("d.real")).unwrap();
                symlink(&fx.outside, &d).unwrap();
                let r = invoke(&fx, tool, &args, &decision);
                std::fs::remove_file(&d).unwrap();
                std::fs::rename(fx.ws.join("d.real"), &d).unwrap();
                assert!(!r.success && !leaked(&r), "{tool} (walk: {walk}): {r:?}");
                assert!(
                    r.error.as_deref().unwrap().contains("symlink"),
                    "{tool}: {r:?}"
                );
                // Unswapped, the same decision runs.
                let r = invoke(&fx, tool, &args, &decision);
                assert!(r.success, "{tool} (walk: {walk}): {r:?}");
            }
        }
        assert_outside_untouched(&fx);
        assert_eq!(std::fs::read_to_string(d.join("out.txt")).unwrap(), "w");
    }

    /// A symlink swapped in as the file itself, or a hard link, is refused
    /// from the opened descriptor.
    #[test]
    fn a_file_swapped_after_the_decision_is_refused() {
        let fx = fixture("");
        let target = fx.ws.join("d/canary.txt");
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            for tool in ["file_read", "file_write"] {
                let args = json!({"path": "d/canary.txt", "content": "new"});
                let decision = fx
                    .gate
                    .decide(crate::types::ToolName::parse(tool).unwrap(), &args);
                assert_eq!(decision.verdict, Verdict::Allow, "{decision}");
                std::fs::rename(&target, fx.ws.join("saved")).unwrap();
                symlink(fx.outside.join("canary.txt"), &target).unwrap();
                let r = invoke(&fx, tool, &args, &decision);
                assert!(!r.success && !leaked(&r), "{tool}: {r:?}");
                assert!(r.error.as_deref().unwrap().contains("symlink"), "{r:?}");
                std::fs::remove_file(&target).unwrap();
                std::fs::hard_link(fx.outside.join("canary.txt"), &target).unwrap();
                let r = invoke(&fx, tool, &args, &decision);
                assert!(!r.success && !leaked(&r), "{tool}: {r:?}");
                assert!(r.error.as_deref().unwrap().contains("hard link"), "{r:?}");
                std::fs::remove_file(&target).unwrap();
                std::fs::rename(fx.ws.join("saved"), &target).unwrap();
            }
        }
        assert_outside_untouched(&fx);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "inside");
    }

    /// With workspace_only = false an outside path opens from `/`, and a
    /// symlink swapped in on its way is refused there too.
    #[test]
    fn outside_paths_also_refuse_a_swapped_in_symlink() {
        let fx = fixture("workspace_only = false");
        std::fs::create_dir(fx.top.join("other")).unwrap();
        std::fs::write(fx.top.join("other/canary.txt"), "other").unwrap();
        let args = json!({"path": fx.top.join("other/canary.txt")});
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            let decision = fx.gate.decide(crate::types::ToolName::FileRead, &args);
            assert_eq!(decision.verdict, Verdict::Allow, "{decision}");
            let r = invoke(&fx, "file_read", &args, &decision);
            assert_eq!(r.output, "other", "{r:?}");
            std::fs::rename(fx.top.join("other"), fx.top.join("other.real")).unwrap();
            symlink(&fx.outside, fx.top.join("other")).unwrap();
            let r = invoke(&fx, "file_read", &args, &decision);
            std::fs::remove_file(fx.top.join("other")).unwrap();
            std::fs::rename(fx.top.join("other.real"), fx.top.join("other")).unwrap();
            assert!(!r.success && !leaked(&r), "{r:?}");
        }
    }

    /// Exchanges two names atomically, so `d` is always there as one or
    /// the other.
    fn exchange(a: &Path, b: &Path) {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).unwrap();
    }

    /// Keeps each state a random few microseconds, about as long as a
    /// decision takes: with back-to-back swaps the gate nearly always saw the
    /// symlink, so few calls got as far as the tool.
    fn hold() {
        let until =
            std::time::Instant::now() + std::time::Duration::from_micros(fastrand::u64(0..40));
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    /// The same race left to chance, in process and so thousands of times:
    /// a thread exchanges `d` with a symlink to outside while the tools run.
    #[test]
    fn tools_under_a_swapping_thread_never_leave_the_workspace() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let fx = fixture("");
        let (d, swap) = (fx.ws.join("d"), fx.ws.join("d.swap"));
        symlink(&fx.outside, &swap).unwrap();
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            let stop = AtomicBool::new(false);
            let swaps = AtomicUsize::new(0);
            let (mut ok, mut refused) = (0, 0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    while !(stop.load(Ordering::Relaxed) && swaps.load(Ordering::Relaxed) >= 1000) {
                        for _ in 0..2 {
                            exchange(&d, &swap);
                            hold();
                        }
                        swaps.fetch_add(2, Ordering::Relaxed);
                    }
                });
                // Set on the way out, a failed assertion included, or the
                // scope would wait for the swapper forever.
                struct Stop<'a>(&'a AtomicBool);
                impl Drop for Stop<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::Relaxed);
                    }
                }
                let _stop = Stop(&stop);
                // Until both outcomes were seen often enough, within bounds:
                // how often a swap lands between check and use depends on load.
                let started = std::time::Instant::now();
                for round in 0.. {
                    let enough = round >= 300 && ok >= 50 && refused >= 50;
                    if enough || round >= 20_000 || started.elapsed().as_secs() >= 8 {
                        break;
                    }
                    for (tool, args) in calls() {
                        let decision = fx
                            .gate
                            .decide(crate::types::ToolName::parse(tool).unwrap(), &args);
                        if matches!(decision.verdict, Verdict::Deny(_)) {
                            continue;
                        }
                        let r = invoke(&fx, tool, &args, &decision);
                        assert!(!leaked(&r), "{tool} (walk: {walk}): {r:?}");
                        if !r.success {
                            let e = r.error.as_deref().unwrap_or("");
                            assert!(e.contains("symlink"), "{tool}: {r:?}");
                        }
                        if r.success {
                            if tool == "file_read" {
                                assert_eq!(r.output, "inside");
                            }
                            ok += 1;
                        } else {
                            refused += 1;
                        }
                    }
                }
            });
            let swaps = swaps.load(Ordering::Relaxed);
            eprintln!("walk: {walk}: {ok} ran, {refused} refused, {swaps} swaps");
            assert!(ok > 0 && refused > 0, "the calls overlapped the swaps");
            assert!(std::fs::symlink_metadata(&d).unwrap().is_dir());
        }
        assert_outside_untouched(&fx);
    }

    #[test]
    fn atomic_write_creates_dirs_and_replaces_in_place() {
        let fx = fixture("");
        let root = beneath::open_workspace(&fx.ws).unwrap();
        for walk in [false, true] {
            let _g = WalkOnly::set(walk);
            let rel = Path::new("a/b/c.txt");
            write_atomic(root.as_fd(), rel, b"one").unwrap();
            write_atomic(root.as_fd(), rel, b"two").unwrap();
            assert_eq!(std::fs::read_to_string(fx.ws.join(rel)).unwrap(), "two");
            std::fs::remove_dir_all(fx.ws.join("a")).unwrap();
        }
        // The mode of a replaced file is kept.
        let f = fx.ws.join("d/canary.txt");
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        write_atomic(root.as_fd(), Path::new("d/canary.txt"), b"x").unwrap();
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        std::fs::create_dir(fx.ws.join("d/sub")).unwrap();
        let e = write_atomic(root.as_fd(), Path::new("d/sub"), b"x").unwrap_err();
        assert!(e.contains("directory"), "{e}");
        let names: Vec<_> = std::fs::read_dir(fx.ws.join("d"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(names.len(), 2, "no temporary files left: {names:?}");
    }
}
