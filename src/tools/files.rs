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
        let Some(dir) = ctx.path() else {
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
        let Some(path) = ctx.path() else {
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

pub struct FileWrite;

impl Tool for FileWrite {
    fn name(&self) -> &'static str {
        "file_write"
    }
    fn description(&self) -> &'static str {
        "Writes a UTF-8 text file in the workspace (replacing it atomically), creating missing directories."
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
        match write_atomic(path, content.as_bytes()) {
            Ok(()) => ToolResult {
                metadata: Some(json!({"path": shown, "bytes": content.len()})),
                ..ToolResult::ok(format!("wrote {} bytes to {shown}", content.len()))
            },
            Err(e) => ToolResult::err(format!("cannot write {shown}: {e}")),
        }
    }
}

/// Creates missing parent directories one level at a time (never following
/// a symlink that appeared since the gate decided), writes a temporary file
/// beside the target, syncs it and renames it over the target.
fn write_atomic(path: &Path, data: &[u8]) -> Result<(), String> {
    let parent = path.parent().ok_or("no parent directory")?;
    let mut missing = Vec::new();
    let mut p = parent;
    while std::fs::symlink_metadata(p).is_err() {
        missing.push(p.to_path_buf());
        p = p.parent().ok_or("no existing ancestor")?;
    }
    for dir in missing.iter().rev() {
        std::fs::create_dir(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    // The gate resolved `parent` with every symlink followed; if it no longer
    // resolves to itself, something was swapped in: refuse.
    match std::fs::canonicalize(parent) {
        Ok(c) if c == parent => {}
        _ => return Err("the directory changed while the call ran; refused".into()),
    }
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if md.file_type().is_symlink() {
            return Err("the target became a symlink; refused".into());
        }
        if md.nlink() > 1 {
            return Err("the target has more than one hard link; refused".into());
        }
    }
    let mode = std::fs::metadata(path).map_or(0o644, |m| m.mode() & 0o7777);
    let name = path.file_name().ok_or("no file name")?.to_string_lossy();
    let tmp = parent.join(format!(".{name}.latchclaw-{:08x}.tmp", fastrand::u32(..)));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        std::io::Write::write_all(&mut f, data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(parent)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_creates_dirs_and_refuses_swapped_targets() {
        let root = std::env::temp_dir().join(crate::util::new_id("latchclaw-fw"));
        std::fs::create_dir_all(&root).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let target = root.join("a/b/c.txt");
        write_atomic(&target, b"one").unwrap();
        write_atomic(&target, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "two");
        // A symlink planted after the decision is not written through.
        let outside = root.join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        let link = root.join("a/link.txt");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert!(write_atomic(&link, b"x").unwrap_err().contains("symlink"));
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
        // A directory swapped for a symlink after the decision is refused.
        std::fs::create_dir(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("d")).unwrap();
        assert!(
            write_atomic(&root.join("d/x.txt"), b"x")
                .unwrap_err()
                .contains("changed")
        );
        // A hard-linked target is refused.
        std::fs::hard_link(&outside, root.join("hl")).unwrap();
        assert!(
            write_atomic(&root.join("hl"), b"x")
                .unwrap_err()
                .contains("hard link")
        );
        let leftovers: Vec<_> = std::fs::read_dir(root.join("a/b"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(leftovers.len(), 1, "no temporary files left");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
