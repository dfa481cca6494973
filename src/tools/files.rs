//! `file_list` and `file_read`: workspace files, opened without following a
//! final symlink and refused unless they are plain files with one link, so a
//! link swapped in after the gate decided cannot redirect the read.

use super::{Tool, ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Listings longer than this are cut with a marker.
const MAX_ENTRIES: usize = 2000;

pub struct FileList;
pub struct FileRead;

fn display_rel(ctx: &ToolCtx, p: &Path) -> String {
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

fn human_size(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

impl Tool for FileList {
    fn name(&self) -> &'static str {
        "file_list"
    }
    fn description(&self) -> &'static str {
        "Lists the entries of a directory in the workspace (name, kind, size)."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "directory, relative to the workspace", "default": "."}}
        })
    }
    fn invoke(&self, _args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(dir) = ctx.path else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let shown = display_rel(ctx, dir);
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => return ToolResult::err(format!("cannot list {shown}: {e}")),
        };
        let mut entries = Vec::new();
        let mut hidden = 0;
        for entry in rd.flatten() {
            let path = entry.path();
            if ctx.gate.is_protected(&path) {
                hidden += 1;
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(md) = entry.path().symlink_metadata() else {
                continue;
            };
            let ft = md.file_type();
            let line = if ft.is_dir() {
                (0, format!("dir   {name}/"))
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map(|t| t.display().to_string());
                (
                    2,
                    format!("link  {name} -> {}", target.unwrap_or_else(|_| "?".into())),
                )
            } else if ft.is_file() {
                (1, format!("file  {name}  ({})", human_size(md.len())))
            } else {
                (3, format!("other {name}"))
            };
            entries.push((name, line));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let count = |k| entries.iter().filter(|e| e.1.0 == k).count();
        let (dirs, files, links) = (count(0), count(1), count(2));
        let mut out = format!(
            "{shown}: {} entries ({dirs} directories, {files} files, {links} links)",
            entries.len()
        );
        for (_, (_, line)) in entries.iter().take(MAX_ENTRIES) {
            out.push('\n');
            out.push_str(line);
        }
        if entries.len() > MAX_ENTRIES {
            out.push_str(&format!(
                "\n…[truncated: {} more entries]",
                entries.len() - MAX_ENTRIES
            ));
        }
        if hidden > 0 {
            out.push_str(&format!(
                "\n({hidden} entries of latchclaw's own state hidden)"
            ));
        }
        ToolResult {
            metadata: Some(json!({"entries": entries.len(), "directories": dirs, "files": files})),
            ..ToolResult::ok(crate::util::truncate_middle(
                &out,
                ctx.cfg.tool_output_max_bytes,
            ))
        }
    }
}

impl Tool for FileRead {
    fn name(&self) -> &'static str {
        "file_read"
    }
    fn description(&self) -> &'static str {
        "Reads a UTF-8 text file in the workspace. Long files are cut with a marker."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "file, relative to the workspace"}},
            "required": ["path"]
        })
    }
    fn invoke(&self, _args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(path) = ctx.path else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let shown = display_rel(ctx, path);
        // O_NONBLOCK keeps a FIFO from hanging the open; O_NOFOLLOW refuses a
        // symlink planted after the gate resolved the path.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path);
        let file = match file {
            Ok(f) => f,
            Err(e) => return ToolResult::err(format!("cannot read {shown}: {e}")),
        };
        let md = match file.metadata() {
            Ok(md) => md,
            Err(e) => return ToolResult::err(format!("cannot read {shown}: {e}")),
        };
        if md.is_dir() {
            return ToolResult::err(format!("{shown} is a directory; use file_list"));
        }
        if !md.is_file() {
            return ToolResult::err(format!("{shown} is not a regular file"));
        }
        if md.nlink() > 1 {
            return ToolResult::err(format!("{shown} has more than one hard link; refused"));
        }
        let cap = ctx.cfg.tool_output_max_bytes;
        let mut buf = Vec::with_capacity(md.len().min(cap as u64) as usize);
        if let Err(e) = file.take(cap as u64).read_to_end(&mut buf) {
            return ToolResult::err(format!("cannot read {shown}: {e}"));
        }
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.to_string(),
            // A multi-byte character cut by the cap is fine; anything else is binary.
            Err(e) if e.error_len().is_none() => {
                String::from_utf8_lossy(&buf[..e.valid_up_to()]).into_owned()
            }
            Err(_) => {
                return ToolResult::err(format!(
                    "{shown} is not a UTF-8 text file ({} bytes)",
                    md.len()
                ));
            }
        };
        let mut out = text;
        if md.len() > cap as u64 {
            out.push_str(&format!(
                "\n…[truncated: showing the first {} of {} bytes]",
                out.len(),
                md.len()
            ));
        }
        ToolResult {
            metadata: Some(json!({"path": shown, "bytes": md.len()})),
            ..ToolResult::ok(out)
        }
    }
}
