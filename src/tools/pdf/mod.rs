//! `pdf_extract`: the text of a PDF in the workspace, page by page.
//!
//! A small reader of its own (`doc`: objects, cross-reference tables and
//! streams, object streams, Flate; `text`: the text operators and fonts'
//! Unicode maps) rather than `pdftotext` (not installed on most machines,
//! CI included) or a PDF crate (`lopdf`, `pdf-extract`: over 1.3 MiB of
//! binary each). The file is hostile input: its size, what its streams
//! inflate to, its objects, pages, nesting and the time spent are capped.

mod doc;
mod text;

use super::files::{display_rel, open_regular};
use super::isolate::{Child, Failure, Kind, Stopped, Watch};
use super::tool::{Tool, ToolCtx, ToolResult};
use serde_json::{Value, json};
use std::io::Read;
use std::time::{Duration, Instant};

pub struct PdfExtract;

const MAX_FILE: u64 = 32 << 20;
const MAX_STREAM: usize = 16 << 20;
const MAX_INFLATED: usize = 64 << 20;
const MAX_OBJECTS: usize = 1_000_000;
const MAX_PAGES: usize = 50_000;
const DEFAULT_CHARS: u64 = 20_000;
const MAX_CHARS: u64 = 1_000_000;

/// What to extract.
pub struct Want<'a> {
    pub first: usize,
    pub last: Option<usize>,
    pub max_chars: usize,
    /// Output bytes at most (the tool output limit).
    pub max_bytes: usize,
    pub deadline: Instant,
    pub control: Option<&'a crate::control::RunControl>,
}

/// The pages' text with its notes, and the figures for the metadata.
pub fn extract(data: &[u8], want: &Want) -> Result<(String, Value), String> {
    let lim = doc::Limits {
        max_stream: MAX_STREAM,
        max_inflated: MAX_INFLATED,
        max_objects: MAX_OBJECTS,
        max_pages: MAX_PAGES,
        deadline: want.deadline,
        control: want.control,
    };
    if let Some(l) = want.last
        && l < want.first
    {
        return Err(format!(
            "\"last_page\" ({l}) is before \"first_page\" ({})",
            want.first
        ));
    }
    let d = doc::Doc::open(data, &lim)?;
    let pages = d.pages()?;
    let total = pages.len();
    if total == 0 {
        return Err("the PDF has no pages".into());
    }
    if want.first > total {
        return Err(format!(
            "\"first_page\" is {}, past the last page ({total})",
            want.first
        ));
    }
    let last = want.last.unwrap_or(total).min(total);
    let mut ex = text::Extractor::new(&d);
    ex.cap = want.max_bytes.min(want.max_chars.saturating_mul(4));
    let mut out = String::new();
    let mut chars = 0usize;
    let mut shown = 0usize;
    let mut cut = None;
    let mut failed = Vec::new();
    let mut stopped = None;
    for n in want.first..=last {
        if let Err(e) = d.check() {
            stopped = Some((n, e));
            break;
        }
        let mark = out.len();
        out.push_str(&format!("--- page {n} ---\n"));
        let text = match ex.page(&pages[n - 1]) {
            Ok(t) => t,
            Err(e) => {
                if d.stopped.borrow().is_some() {
                    out.truncate(mark);
                    stopped = Some((n, e));
                    break;
                }
                out.push_str(&format!("[unreadable: {e}]\n"));
                failed.push((n, e));
                shown = n;
                continue;
            }
        };
        let text = text.trim_end();
        let room_chars = want.max_chars.saturating_sub(chars);
        let room_bytes = want.max_bytes.saturating_sub(out.len() + 200);
        let mut take = 0;
        let mut taken = 0;
        for (i, c) in text.char_indices() {
            if taken == room_chars || i + c.len_utf8() > room_bytes {
                break;
            }
            take = i + c.len_utf8();
            taken += 1;
        }
        if text.is_empty() {
            out.push_str("[no text on this page]\n");
        } else {
            out.push_str(&text[..take]);
            out.push('\n');
        }
        chars += taken;
        shown = n;
        if take < text.len() {
            cut = Some(n);
            break;
        }
    }
    if let Some((n, e)) = &stopped
        && *n == want.first
    {
        return Err(format!("stopped at page {n}: {e}"));
    }
    if !failed.is_empty() && failed.len() == last + 1 - want.first {
        let (n, e) = &failed[0];
        return Err(format!("page {n} is unreadable: {e}"));
    }
    if let Some(n) = cut {
        let why = if chars >= want.max_chars {
            format!("max_chars={}", want.max_chars)
        } else {
            "the tool output limit (tool_output_max_bytes)".into()
        };
        out.push_str(&format!(
            "…[truncated in page {n} at {why}; {} pages after it; ask with first_page={}]\n",
            total - n,
            n + 1
        ));
    } else if let Some((n, e)) = &stopped {
        out.push_str(&format!(
            "…[stopped at page {n}: {e}; pages {}–{shown} are shown]\n",
            want.first
        ));
    } else if shown < total {
        out.push_str(&format!(
            "…[pages {}–{shown} of {total} shown; {} more; ask with first_page={}]\n",
            want.first,
            total - shown,
            shown + 1
        ));
    }
    if ex.unmapped > 0 {
        out.push_str(&format!(
            "…[{} glyphs have no Unicode mapping in their fonts and are left out]\n",
            ex.unmapped
        ));
    }
    let meta = json!({
        "pages": total,
        "first_page": want.first,
        "last_page_shown": shown,
        "chars": chars,
        "truncated": cut.is_some() || stopped.is_some(),
        "unreadable_pages": failed.iter().map(|f| f.0).collect::<Vec<_>>(),
        "unmapped_glyphs": ex.unmapped,
    });
    Ok((out, meta))
}

impl Tool for PdfExtract {
    fn takes_effect(&self) -> bool {
        false
    }
    fn name(&self) -> crate::types::ToolName {
        crate::types::ToolName::PdfExtract
    }
    fn description(&self) -> &'static str {
        "Text of a PDF file in the workspace, page by page."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "first_page": {"type": "integer"},
                "last_page": {"type": "integer"},
                "max_chars": {"type": "integer"}
            },
            "required": ["path"]
        })
    }
    fn invoke(&self, args: &Value, ctx: &ToolCtx) -> ToolResult {
        let Some(path) = ctx.path() else {
            return ToolResult::err("internal: no resolved path from the gate");
        };
        let num = |key: &str, max: u64| match args.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if (1..=max).contains(&n) => Ok(Some(n as usize)),
                _ => Err(format!("\"{key}\" must be an integer from 1 to {max}")),
            },
        };
        let parsed = (|| {
            let first = num("first_page", MAX_PAGES as u64)?.unwrap_or(1);
            let last = num("last_page", MAX_PAGES as u64)?;
            if let Some(l) = last
                && l < first
            {
                return Err(format!(
                    "\"last_page\" ({l}) is before \"first_page\" ({first})"
                ));
            }
            let max_chars = num("max_chars", MAX_CHARS)?.unwrap_or(DEFAULT_CHARS as usize);
            Ok((first, last, max_chars))
        })();
        let (first, last, max_chars) = match parsed {
            Ok(p) => p,
            Err(e) => return ToolResult::err(e),
        };
        let shown = display_rel(ctx, path);
        let (file, md) = match open_regular(ctx, path, "pdf_extract reads PDF files") {
            Ok(opened) => opened,
            Err(e) => return ToolResult::err(e),
        };
        if md.len() > MAX_FILE {
            return ToolResult::err(format!(
                "{shown} is {:.1} MiB; pdf_extract reads PDFs of up to {} MiB",
                md.len() as f64 / 1_048_576.0,
                MAX_FILE >> 20
            ));
        }
        let mut data = Vec::with_capacity(md.len() as usize);
        if let Err(e) = file.take(MAX_FILE + 1).read_to_end(&mut data) {
            return ToolResult::err(format!("cannot read {shown}: {e}"));
        }
        if data.len() as u64 > MAX_FILE {
            return ToolResult::err(format!(
                "{shown} grew past {} MiB while read",
                MAX_FILE >> 20
            ));
        }
        // The reader runs in a parser child, killed when the call must stop;
        // it watches the deadline itself too, to answer with the pages it
        // has read, so its kill waits `GRACE` past the deadline.
        let head = json!({
            "first": first,
            "last": last,
            "max_chars": max_chars,
            "max_bytes": ctx.cfg.tool_output_max_bytes,
            "ms": ctx.deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
        });
        let watch = Watch::of(ctx);
        let answer = Child::spawn(Kind::Pdf)
            .map_err(Failure::Failed)
            .and_then(|mut c| c.ask(&watch, &head, &[&data], GRACE));
        match answer {
            Ok(a) => match (a["text"].as_str(), a["error"].as_str()) {
                (Some(out), _) => {
                    let mut meta = a["meta"].clone();
                    meta["path"] = json!(shown);
                    ToolResult {
                        metadata: Some(meta),
                        ..ToolResult::ok(out.to_string())
                    }
                }
                (None, Some(e)) => ToolResult::err(format!("{shown}: {e}")),
                (None, None) => {
                    ToolResult::err(format!("{shown}: the PDF reader answered nothing"))
                }
            },
            Err(Failure::Stopped(s)) => ToolResult {
                estop: s == Stopped::Estop,
                ..ToolResult::err(format!("{shown}: {}; the PDF reader was stopped", s.why()))
            },
            Err(Failure::Failed(e)) => ToolResult::err(format!("{shown}: {e}")),
        }
    }
}

/// How long past the deadline the child may take to answer with the pages
/// it read before it is killed.
const GRACE: Duration = Duration::from_millis(50);

/// The parser child's reader: one PDF a request, its text or why not.
pub(super) struct Reader;

impl super::isolate::Parser for Reader {
    fn answer(&mut self, req: super::isolate::Request) -> Value {
        let h = &req.head;
        let num = |k: &str| h[k].as_u64().map(|n| n as usize);
        let want = Want {
            first: num("first").unwrap_or(1),
            last: num("last"),
            max_chars: num("max_chars").unwrap_or(DEFAULT_CHARS as usize),
            max_bytes: num("max_bytes").unwrap_or(0),
            deadline: Instant::now() + Duration::from_millis(h["ms"].as_u64().unwrap_or(0)),
            control: None,
        };
        match extract(&req.body, &want) {
            Ok((text, meta)) => json!({"text": text, "meta": meta}),
            Err(e) => json!({ "error": e }),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
