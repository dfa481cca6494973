//! PDF objects, the cross-reference data and streams: enough of the file
//! format to reach each page's content. Hostile input is expected: every
//! loop is bounded by the input or a cap in [`Limits`], nesting and
//! reference chains by depth counters, and a broken cross-reference table
//! falls back to scanning the file for `N G obj`.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::time::Instant;

pub type R<T> = Result<T, String>;

/// The caps one extraction runs under.
pub struct Limits<'a> {
    /// Bytes one stream may inflate to.
    pub max_stream: usize,
    /// Bytes all streams of the call may decode to together.
    pub max_inflated: usize,
    /// Entries in the cross-reference data.
    pub max_objects: usize,
    /// Pages in the page tree.
    pub max_pages: usize,
    pub deadline: Instant,
    /// The run's Ctrl-C and deadline.
    pub control: Option<&'a crate::control::RunControl>,
}

/// Arrays and dictionaries nested deeper than this are refused (the parser
/// recurses).
const MAX_NEST: u32 = 64;
/// References followed while resolving one value (`1 0 R` → `2 0 R` → …).
const MAX_HOPS: u32 = 32;
/// `/Prev` sections followed.
const MAX_SECTIONS: usize = 64;

#[derive(Clone, Debug, PartialEq)]
pub enum Obj {
    Null,
    Bool(bool),
    Int(i64),
    Real(f64),
    Name(Vec<u8>),
    Str(Vec<u8>),
    Array(Vec<Obj>),
    Dict(Dict),
    /// A stream's dictionary and where its raw bytes lie in the file.
    Stream(Dict, usize, usize),
    Ref(u32, u16),
}

pub type Dict = Vec<(Vec<u8>, Obj)>;

pub fn get<'a>(d: &'a Dict, key: &[u8]) -> Option<&'a Obj> {
    d.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

impl Obj {
    pub fn int(&self) -> Option<i64> {
        match *self {
            Obj::Int(i) => Some(i),
            Obj::Real(f) if f.is_finite() => Some(f as i64),
            _ => None,
        }
    }
    pub fn num(&self) -> Option<f64> {
        match *self {
            Obj::Int(i) => Some(i as f64),
            Obj::Real(f) if f.is_finite() => Some(f),
            _ => None,
        }
    }
    pub fn name(&self) -> Option<&[u8]> {
        match self {
            Obj::Name(n) => Some(n),
            _ => None,
        }
    }
    pub fn dict(&self) -> Option<&Dict> {
        match self {
            Obj::Dict(d) | Obj::Stream(d, ..) => Some(d),
            _ => None,
        }
    }
    pub fn array(&self) -> Option<&[Obj]> {
        match self {
            Obj::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A token of the PDF syntax (also of content streams and CMaps).
#[derive(Debug, PartialEq)]
pub enum Tok<'a> {
    Obj(Obj),
    ArrOpen,
    ArrClose,
    DictOpen,
    DictClose,
    Keyword(&'a [u8]),
    Eof,
}

pub fn is_space(b: u8) -> bool {
    matches!(b, 0 | 9 | 10 | 12 | 13 | 32)
}

fn is_delim(b: u8) -> bool {
    matches!(
        b,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

fn is_regular(b: u8) -> bool {
    !is_space(b) && !is_delim(b)
}

pub struct Lexer<'a> {
    pub s: &'a [u8],
    pub pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(s: &'a [u8], pos: usize) -> Lexer<'a> {
        Lexer { s, pos }
    }

    pub fn skip_space(&mut self) {
        while let Some(&b) = self.s.get(self.pos) {
            if is_space(b) {
                self.pos += 1;
            } else if b == b'%' {
                while let Some(&b) = self.s.get(self.pos) {
                    if b == b'\n' || b == b'\r' {
                        break;
                    }
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    fn run(&mut self) -> &'a [u8] {
        let start = self.pos;
        while self.s.get(self.pos).is_some_and(|&b| is_regular(b)) {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    pub fn token(&mut self) -> R<Tok<'a>> {
        self.skip_space();
        let Some(&b) = self.s.get(self.pos) else {
            return Ok(Tok::Eof);
        };
        match b {
            b'[' => {
                self.pos += 1;
                Ok(Tok::ArrOpen)
            }
            b']' => {
                self.pos += 1;
                Ok(Tok::ArrClose)
            }
            b'<' if self.s.get(self.pos + 1) == Some(&b'<') => {
                self.pos += 2;
                Ok(Tok::DictOpen)
            }
            b'>' if self.s.get(self.pos + 1) == Some(&b'>') => {
                self.pos += 2;
                Ok(Tok::DictClose)
            }
            b'<' => {
                self.pos += 1;
                Ok(Tok::Obj(Obj::Str(self.hex_string())))
            }
            b'(' => {
                self.pos += 1;
                Ok(Tok::Obj(Obj::Str(self.literal_string())))
            }
            b'/' => {
                self.pos += 1;
                Ok(Tok::Obj(Obj::Name(unescape_name(self.run()))))
            }
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                let word = self.run();
                Ok(Tok::Obj(number(word)))
            }
            b')' | b'>' | b'{' | b'}' => {
                // Stray delimiters (PostScript calculator braces, broken
                // files): a keyword of one byte that callers ignore.
                self.pos += 1;
                Ok(Tok::Keyword(&self.s[self.pos - 1..self.pos]))
            }
            _ => {
                let word = self.run();
                Ok(match word {
                    b"true" => Tok::Obj(Obj::Bool(true)),
                    b"false" => Tok::Obj(Obj::Bool(false)),
                    b"null" => Tok::Obj(Obj::Null),
                    _ => Tok::Keyword(word),
                })
            }
        }
    }

    fn hex_string(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut hi: Option<u8> = None;
        while let Some(&b) = self.s.get(self.pos) {
            self.pos += 1;
            if b == b'>' {
                break;
            }
            let Some(v) = (b as char).to_digit(16) else {
                continue;
            };
            match hi.take() {
                Some(h) => out.push(h << 4 | v as u8),
                None => hi = Some(v as u8),
            }
        }
        if let Some(h) = hi {
            out.push(h << 4);
        }
        out
    }

    fn literal_string(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut depth = 1usize;
        while let Some(&b) = self.s.get(self.pos) {
            self.pos += 1;
            match b {
                b'(' => {
                    depth += 1;
                    out.push(b);
                }
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    out.push(b);
                }
                b'\\' => {
                    let Some(&e) = self.s.get(self.pos) else {
                        break;
                    };
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'0'..=b'7' => {
                            let mut v = (e - b'0') as u32;
                            for _ in 0..2 {
                                match self.s.get(self.pos) {
                                    Some(&d @ b'0'..=b'7') => {
                                        v = v * 8 + (d - b'0') as u32;
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push(v as u8);
                        }
                        b'\r' => {
                            if self.s.get(self.pos) == Some(&b'\n') {
                                self.pos += 1;
                            }
                        }
                        b'\n' => {}
                        other => out.push(other),
                    }
                }
                _ => out.push(b),
            }
        }
        out
    }

    /// One object; `N G R` is read as a reference.
    pub fn object(&mut self, depth: u32) -> R<Obj> {
        let t = self.token()?;
        self.object_from(t, depth)
    }

    pub fn object_from(&mut self, t: Tok<'a>, depth: u32) -> R<Obj> {
        if depth > MAX_NEST {
            return Err(format!("objects nested more than {MAX_NEST} deep"));
        }
        match t {
            Tok::Obj(Obj::Int(n)) => {
                let save = self.pos;
                if let Ok(Tok::Obj(Obj::Int(g))) = self.token()
                    && let Ok(Tok::Keyword(b"R")) = self.token()
                    && let (Ok(n), Ok(g)) = (u32::try_from(n), u16::try_from(g))
                {
                    return Ok(Obj::Ref(n, g));
                }
                self.pos = save;
                Ok(Obj::Int(n))
            }
            Tok::Obj(o) => Ok(o),
            Tok::ArrOpen => {
                let mut items = Vec::new();
                loop {
                    match self.token()? {
                        Tok::ArrClose => return Ok(Obj::Array(items)),
                        Tok::Eof => return Err("an array runs to the end of the data".into()),
                        Tok::Keyword(k) if k != b"R" => {
                            // A stray keyword inside an array (broken
                            // writers): skipped like other readers do.
                            if k == b"endobj" || k == b"stream" {
                                return Err("an array is not closed".into());
                            }
                        }
                        t => items.push(self.object_from(t, depth + 1)?),
                    }
                }
            }
            Tok::DictOpen => {
                let mut d = Dict::new();
                loop {
                    match self.token()? {
                        Tok::DictClose => return Ok(Obj::Dict(d)),
                        Tok::Obj(Obj::Name(k)) => {
                            let t = self.token()?;
                            if t == Tok::DictClose {
                                return Ok(Obj::Dict(d));
                            }
                            let v = self.object_from(t, depth + 1)?;
                            d.push((k, v));
                        }
                        Tok::Eof => return Err("a dictionary runs to the end of the data".into()),
                        Tok::Keyword(b"endobj" | b"stream") => {
                            return Err("a dictionary is not closed".into());
                        }
                        _ => {}
                    }
                }
            }
            Tok::ArrClose | Tok::DictClose => Err("unexpected ] or >>".into()),
            Tok::Keyword(k) => Err(format!(
                "unexpected \"{}\" where an object should be",
                String::from_utf8_lossy(&k[..k.len().min(20)])
            )),
            Tok::Eof => Err("the data ends where an object should be".into()),
        }
    }
}

fn number(word: &[u8]) -> Obj {
    let s = std::str::from_utf8(word).unwrap_or("0");
    if !s.contains('.')
        && let Ok(i) = s.parse::<i64>()
    {
        return Obj::Int(i);
    }
    // Lenient like other readers: "--5", "5-", "1.2.3" keep what parses.
    let cleaned: String = s
        .trim_start_matches(['+', '-'])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = cleaned.splitn(3, '.');
    let whole = parts.next().unwrap_or("");
    let frac = parts.next().unwrap_or("");
    let v = format!("{}.{}", if whole.is_empty() { "0" } else { whole }, frac)
        .trim_end_matches('.')
        .parse::<f64>()
        .unwrap_or(0.0);
    Obj::Real(if s.starts_with('-') { -v } else { v })
}

fn unescape_name(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'#'
            && let Some(h) = raw.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(h).unwrap_or("x"), 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Entry {
    At(usize),
    /// In the object stream `.0`, at index `.1`.
    In(u32, u32),
}

/// A decoded object stream: its bytes and (number, offset) per object.
struct ObjStm {
    data: Vec<u8>,
    first: usize,
    index: Vec<(u32, usize)>,
}

pub struct Doc<'a> {
    pub data: &'a [u8],
    pub lim: &'a Limits<'a>,
    xref: HashMap<u32, Entry>,
    pub trailer: Dict,
    inflated: Cell<usize>,
    /// Set when a call-wide cap is reached: the deadline or the inflate
    /// total. Every later step fails with it.
    pub stopped: RefCell<Option<String>>,
    /// How deep `object` calls are nested now.
    hops: Cell<u32>,
    objstms: RefCell<HashMap<u32, Rc<ObjStm>>>,
    scanned: OnceCell<HashMap<u32, usize>>,
}

impl<'a> Doc<'a> {
    pub fn open(file: &'a [u8], lim: &'a Limits<'a>) -> R<Doc<'a>> {
        let head = &file[..file.len().min(1024)];
        let Some(at) = memchr::memmem::find(head, b"%PDF-") else {
            return Err("not a PDF file (no %PDF- header at its start)".into());
        };
        // Offsets count from the header when junk precedes it.
        let data = &file[at..];
        let mut doc = Doc {
            data,
            lim,
            xref: HashMap::new(),
            trailer: Dict::new(),
            inflated: Cell::new(0),
            stopped: RefCell::new(None),
            hops: Cell::new(0),
            objstms: RefCell::new(HashMap::new()),
            scanned: OnceCell::new(),
        };
        let read = doc.read_xref();
        if let Err(e) = &read {
            log::debug!("pdf: cross-reference data unreadable ({e}); scanning the file");
        }
        if read.is_err() || get(&doc.trailer, b"Root").is_none() {
            doc.rebuild()?;
        }
        if get(&doc.trailer, b"Encrypt").is_some_and(|e| *e != Obj::Null) {
            return Err("encrypted PDFs are not supported".into());
        }
        Ok(doc)
    }

    /// Deadline and the call-wide caps: checked at every step that can
    /// take long.
    pub fn check(&self) -> R<()> {
        if let Some(why) = self.stopped.borrow().as_ref() {
            return Err(why.clone());
        }
        if self.lim.control.is_some_and(|c| c.stop().is_some()) {
            return Err(self.stop("the run was stopped".into()));
        }
        if Instant::now() >= self.lim.deadline {
            return Err(self.stop("the call's time limit was reached (tool_timeout_secs)".into()));
        }
        Ok(())
    }

    fn stop(&self, why: String) -> String {
        *self.stopped.borrow_mut() = Some(why.clone());
        why
    }

    fn read_xref(&mut self) -> R<()> {
        let tail_from = self.data.len().saturating_sub(2048);
        let Some(at) = memchr::memmem::rfind(&self.data[tail_from..], b"startxref") else {
            return Err("no startxref".into());
        };
        let mut lx = Lexer::new(self.data, tail_from + at + 9);
        let Tok::Obj(Obj::Int(mut off)) = lx.token()? else {
            return Err("startxref has no offset".into());
        };
        let mut seen = HashSet::new();
        let mut first = true;
        loop {
            if off < 0 || off as usize >= self.data.len() || !seen.insert(off) {
                return Err(format!("a cross-reference offset ({off}) is bad"));
            }
            if seen.len() > MAX_SECTIONS {
                return Err("too many cross-reference sections".into());
            }
            let trailer = self.read_section(off as usize)?;
            // Hybrid files: the table's own stream of compressed entries.
            if let Some(s) = get(&trailer, b"XRefStm").and_then(Obj::int)
                && s >= 0
                && (s as usize) < self.data.len()
            {
                let _ = self.read_section(s as usize);
            }
            if first {
                self.trailer = trailer.clone();
                first = false;
            }
            match get(&trailer, b"Prev").and_then(Obj::int) {
                Some(p) => off = p,
                None => return Ok(()),
            }
        }
    }

    /// One section at `off` (a table or a stream); its entries fill what
    /// newer sections left unset. Returns its trailer.
    fn read_section(&mut self, off: usize) -> R<Dict> {
        let mut lx = Lexer::new(self.data, off);
        lx.skip_space();
        if self.data[lx.pos..].starts_with(b"xref") {
            lx.pos += 4;
            loop {
                self.check()?;
                match lx.token()? {
                    Tok::Keyword(b"trailer") => {
                        return match lx.object(0)? {
                            Obj::Dict(d) => Ok(d),
                            _ => Err("the trailer is not a dictionary".into()),
                        };
                    }
                    Tok::Obj(Obj::Int(start)) => {
                        let Tok::Obj(Obj::Int(count)) = lx.token()? else {
                            return Err("a cross-reference subsection has no count".into());
                        };
                        // 18 bytes at least per entry: a count beyond what
                        // the file holds is a lie.
                        let left = (self.data.len() - lx.pos) / 18;
                        if start < 0 || count < 0 || count as usize > left {
                            return Err(format!(
                                "a cross-reference subsection claims {count} entries"
                            ));
                        }
                        self.room(count as usize)?;
                        for i in 0..count as u64 {
                            let (Tok::Obj(Obj::Int(o)), Tok::Obj(Obj::Int(_)), Tok::Keyword(k)) =
                                (lx.token()?, lx.token()?, lx.token()?)
                            else {
                                return Err("a cross-reference entry is malformed".into());
                            };
                            let num = start as u64 + i;
                            if num > u32::MAX as u64 {
                                break;
                            }
                            if k == b"n" && o > 0 {
                                self.xref.entry(num as u32).or_insert(Entry::At(o as usize));
                            } else {
                                // A free entry hides older ones too.
                                self.xref.entry(num as u32).or_insert(Entry::At(0));
                            }
                        }
                    }
                    _ => return Err("a cross-reference table is malformed".into()),
                }
            }
        }
        let (_, obj) = self.parse_at(off, None)?;
        let Obj::Stream(d, s, e) = obj else {
            return Err("startxref points at neither a table nor a stream".into());
        };
        if get(&d, b"Type").and_then(Obj::name) != Some(b"XRef") {
            return Err("startxref points at a stream that is not /Type /XRef".into());
        }
        let raw = self.decode(&d, s, e)?;
        let w: Vec<usize> = get(&d, b"W")
            .and_then(Obj::array)
            .unwrap_or(&[])
            .iter()
            .map(|o| o.int().unwrap_or(-1).clamp(-1, 8) as usize)
            .collect();
        if w.len() != 3 || w.iter().any(|&x| x > 8) {
            return Err("a cross-reference stream has a bad /W".into());
        }
        let size = get(&d, b"Size").and_then(Obj::int).unwrap_or(0).max(0);
        let index: Vec<i64> = match get(&d, b"Index").and_then(Obj::array) {
            Some(a) => a.iter().map(|o| o.int().unwrap_or(0)).collect(),
            None => vec![0, size],
        };
        let row = w[0] + w[1] + w[2];
        if row == 0 {
            return Err("a cross-reference stream has empty rows".into());
        }
        let mut rows = raw.chunks_exact(row);
        let field = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | x as u64);
        for pair in index.chunks(2) {
            let [start, count] = *pair else { break };
            if start < 0 || count < 0 {
                return Err("a cross-reference stream has a bad /Index".into());
            }
            // The rows present bound the work, whatever /Size claims.
            let count = (count as usize).min(rows.len());
            self.room(count)?;
            for i in 0..count {
                let Some(r) = rows.next() else { break };
                let kind = if w[0] == 0 { 1 } else { field(&r[..w[0]]) };
                let a = field(&r[w[0]..w[0] + w[1]]);
                let b = field(&r[w[0] + w[1]..]);
                let Ok(num) = u32::try_from(start as u64 + i as u64) else {
                    break;
                };
                let entry = match kind {
                    1 if a > 0 => Entry::At(a as usize),
                    2 => match (u32::try_from(a), u32::try_from(b)) {
                        (Ok(a), Ok(b)) => Entry::In(a, b),
                        _ => Entry::At(0),
                    },
                    _ => Entry::At(0),
                };
                self.xref.entry(num).or_insert(entry);
            }
        }
        Ok(d)
    }

    fn room(&self, more: usize) -> R<()> {
        if self.xref.len() + more > self.lim.max_objects {
            return Err(format!(
                "more than {} objects in the cross-reference data",
                self.lim.max_objects
            ));
        }
        Ok(())
    }

    /// Where `N G obj` headers are, scanned once, for a table that points
    /// wrong or is missing.
    fn scan(&self) -> &HashMap<u32, usize> {
        self.scanned.get_or_init(|| {
            let mut found = HashMap::new();
            for at in memchr::memmem::find_iter(self.data, b"obj") {
                if found.len() >= self.lim.max_objects {
                    break;
                }
                if self.data.get(at + 3).is_some_and(|&b| is_regular(b)) {
                    continue;
                }
                if let Some((num, start)) = header_before(self.data, at) {
                    found.insert(num, start);
                }
            }
            found
        })
    }

    /// No usable cross-reference data: objects found by scanning, and a
    /// trailer from a `trailer` dictionary, an xref stream's dictionary
    /// or the catalog itself.
    fn rebuild(&mut self) -> R<()> {
        self.check()?;
        let found = self.scan().clone();
        if found.is_empty() {
            return Err("no objects found: the file is not a readable PDF".into());
        }
        self.xref = found.iter().map(|(&n, &o)| (n, Entry::At(o))).collect();
        let mut trailer = None;
        for at in memchr::memmem::find_iter(self.data, b"trailer") {
            // Each may read to the end of the file: quadratic in a file
            // of `trailer`s.
            self.check()?;
            let mut lx = Lexer::new(self.data, at + 7);
            if let Ok(Obj::Dict(d)) = lx.object(0)
                && get(&d, b"Root").is_some()
            {
                trailer = Some(d);
            }
        }
        let mut nums: Vec<u32> = found.keys().copied().collect();
        crate::util::sort::sort(&mut nums);
        for &n in &nums {
            self.check()?;
            let Ok(o) = self.object(n) else { continue };
            let Some(d) = o.dict() else { continue };
            match get(d, b"Type").and_then(Obj::name) {
                Some(b"ObjStm") => {
                    if let Ok(stm) = self.objstm(n) {
                        for (i, &(m, _)) in stm.index.iter().enumerate() {
                            self.xref.entry(m).or_insert(Entry::In(n, i as u32));
                        }
                    }
                }
                Some(b"XRef") if trailer.is_none() && get(d, b"Root").is_some() => {
                    trailer = Some(d.clone());
                }
                _ => {}
            }
        }
        if trailer.is_none() {
            for (&n, e) in &self.xref.clone() {
                let _ = e;
                if let Ok(o) = self.object(n)
                    && o.dict().and_then(|d| get(d, b"Type")).and_then(Obj::name)
                        == Some(b"Catalog")
                {
                    trailer = Some(vec![(b"Root".to_vec(), Obj::Ref(n, 0))]);
                    break;
                }
            }
        }
        self.trailer = trailer.ok_or("no document catalog (/Root) found")?;
        Ok(())
    }

    /// The object at `off`: `N G obj` then the object (and its stream).
    /// `want`: the number the header must carry.
    fn parse_at(&self, off: usize, want: Option<u32>) -> R<(u32, Obj)> {
        let mut lx = Lexer::new(self.data, off);
        let (Tok::Obj(Obj::Int(n)), Tok::Obj(Obj::Int(_)), Tok::Keyword(b"obj")) =
            (lx.token()?, lx.token()?, lx.token()?)
        else {
            return Err(format!("no object header at offset {off}"));
        };
        if want.is_some_and(|w| w as i64 != n) {
            return Err(format!(
                "object {n} found where {} should be",
                want.unwrap_or(0)
            ));
        }
        let obj = lx.object(0)?;
        if let (Obj::Dict(d), Ok(Tok::Keyword(b"stream"))) = (&obj, lx.token()) {
            let mut start = lx.pos;
            if self.data.get(start) == Some(&b'\r') {
                start += 1;
            }
            if self.data.get(start) == Some(&b'\n') {
                start += 1;
            }
            let end = self.stream_end(d, start)?;
            return Ok((
                n.clamp(0, u32::MAX as i64) as u32,
                Obj::Stream(d.clone(), start, end),
            ));
        }
        Ok((n.clamp(0, u32::MAX as i64) as u32, obj))
    }

    /// Where a stream's bytes end: its /Length when `endstream` follows
    /// there; else the next `endstream` (a wrong or huge /Length).
    fn stream_end(&self, d: &Dict, start: usize) -> R<usize> {
        let len = match get(d, b"Length") {
            Some(Obj::Ref(n, _)) => self.object(*n).ok().and_then(|o| o.int()),
            Some(o) => o.int(),
            None => None,
        };
        if let Some(len) = len
            && len >= 0
            && let Some(end) = start.checked_add(len as usize)
            && end <= self.data.len()
        {
            let mut lx = Lexer::new(self.data, end);
            lx.skip_space();
            if self.data[lx.pos..].starts_with(b"endstream") {
                return Ok(end);
            }
        }
        match memchr::memmem::find(&self.data[start..], b"endstream") {
            Some(at) => {
                let mut end = start + at;
                if end > start && self.data[end - 1] == b'\n' {
                    end -= 1;
                }
                if end > start && self.data[end - 1] == b'\r' {
                    end -= 1;
                }
                Ok(end)
            }
            None => Err("a stream has no end (no endstream)".into()),
        }
    }

    /// Object `num` (Null when it does not exist, as the format says).
    pub fn object(&self, num: u32) -> R<Obj> {
        self.check()?;
        // Reading an object can read others (a stream's /Length, an object
        // stream, its /Filter): a file whose objects need each other
        // would recurse without end.
        let depth = self.hops.get();
        if depth > MAX_HOPS {
            return Err("objects refer to each other too deeply (a cycle?)".into());
        }
        self.hops.set(depth + 1);
        let r = self.object_inner(num);
        self.hops.set(depth);
        r
    }

    fn object_inner(&self, num: u32) -> R<Obj> {
        match self.xref.get(&num).copied() {
            None | Some(Entry::At(0)) => match self.scanned.get().and_then(|s| s.get(&num)) {
                Some(&off) => Ok(self.parse_at(off, Some(num))?.1),
                None => Ok(Obj::Null),
            },
            Some(Entry::At(off)) => match self.parse_at(off, Some(num)) {
                Ok((_, o)) => Ok(o),
                Err(first) => match self.scan().get(&num) {
                    Some(&off) => Ok(self.parse_at(off, Some(num))?.1),
                    None => Err(format!("object {num}: {first}")),
                },
            },
            Some(Entry::In(stm, idx)) => {
                let s = self.objstm(stm)?;
                let at = match s.index.get(idx as usize) {
                    Some(&(n, at)) if n == num => at,
                    _ => match s.index.iter().find(|(n, _)| *n == num) {
                        Some(&(_, at)) => at,
                        None => return Ok(Obj::Null),
                    },
                };
                let pos = s.first.saturating_add(at);
                if pos > s.data.len() {
                    return Err(format!("object {num} lies outside its object stream"));
                }
                Lexer::new(&s.data, pos).object(0)
            }
        }
    }

    fn objstm(&self, num: u32) -> R<Rc<ObjStm>> {
        if let Some(s) = self.objstms.borrow().get(&num) {
            return Ok(s.clone());
        }
        // An object stream is never itself inside one: read it from its
        // offset only, so a stream that names itself cannot recurse.
        let off = match self.xref.get(&num) {
            Some(Entry::At(o)) if *o > 0 => *o,
            _ => match self.scan().get(&num) {
                Some(&o) => o,
                None => return Err(format!("object stream {num} not found")),
            },
        };
        let (_, obj) = self.parse_at(off, Some(num))?;
        let Obj::Stream(d, s, e) = obj else {
            return Err(format!("object {num} is not an object stream"));
        };
        let data = self.decode(&d, s, e)?;
        let n = get(&d, b"N").and_then(Obj::int).unwrap_or(0);
        let first = get(&d, b"First").and_then(Obj::int).unwrap_or(-1);
        if n < 0 || first < 0 || first as usize > data.len() || n as usize > data.len() / 2 {
            return Err(format!("object stream {num} has a bad /N or /First"));
        }
        let mut lx = Lexer::new(&data[..first as usize], 0);
        let mut index = Vec::with_capacity(n as usize);
        for _ in 0..n {
            match (lx.token()?, lx.token()?) {
                (Tok::Obj(Obj::Int(m)), Tok::Obj(Obj::Int(o))) if m >= 0 && o >= 0 => {
                    index.push((m.min(u32::MAX as i64) as u32, o as usize))
                }
                _ => break,
            }
        }
        let s = Rc::new(ObjStm {
            data,
            first: first as usize,
            index,
        });
        self.objstms.borrow_mut().insert(num, s.clone());
        Ok(s)
    }

    /// A value with references followed.
    pub fn resolve(&self, o: &Obj) -> R<Obj> {
        let mut cur = o.clone();
        let mut hops = 0;
        while let Obj::Ref(n, _) = cur {
            hops += 1;
            if hops > MAX_HOPS {
                return Err("a chain of references is too long (a cycle?)".into());
            }
            cur = self.object(n)?;
        }
        Ok(cur)
    }

    /// `d[key]` resolved; Null when absent.
    pub fn get(&self, d: &Dict, key: &[u8]) -> R<Obj> {
        match get(d, key) {
            Some(o) => self.resolve(o),
            None => Ok(Obj::Null),
        }
    }

    /// A stream's decoded bytes; Err when a filter is unsupported or a cap
    /// is reached.
    pub fn stream(&self, o: &Obj) -> R<Vec<u8>> {
        match o {
            Obj::Stream(d, s, e) => self.decode(d, *s, *e),
            _ => Err("expected a stream".into()),
        }
    }

    fn decode(&self, d: &Dict, start: usize, end: usize) -> R<Vec<u8>> {
        self.check()?;
        let raw = self
            .data
            .get(start..end)
            .ok_or("a stream lies outside the file")?;
        let filters = match self.get(d, b"Filter")? {
            Obj::Null => vec![],
            Obj::Name(n) => vec![n],
            Obj::Array(a) => a
                .into_iter()
                .filter_map(|f| f.name().map(<[u8]>::to_vec))
                .collect(),
            _ => return Err("a stream has a bad /Filter".into()),
        };
        let parms = match self.get(d, b"DecodeParms")? {
            Obj::Array(a) => a,
            o => vec![o],
        };
        let mut data = raw.to_vec();
        for (i, f) in filters.iter().enumerate() {
            let p = match parms.get(i) {
                Some(o) => self.resolve(o)?,
                None => Obj::Null,
            };
            data = match f.as_slice() {
                b"FlateDecode" | b"Fl" => {
                    let out = self.inflate(&data)?;
                    predict(out, p.dict())?
                }
                b"ASCIIHexDecode" | b"AHx" => {
                    let mut v = Vec::with_capacity(data.len() / 2 + 2);
                    v.push(b'<');
                    v.extend_from_slice(&data);
                    v.push(b'>');
                    Lexer::new(&v, 1).hex_string()
                }
                b"ASCII85Decode" | b"A85" => ascii85(&data)?,
                other => {
                    return Err(format!(
                        "the {} filter is not supported (FlateDecode, ASCIIHexDecode, ASCII85Decode are)",
                        String::from_utf8_lossy(other)
                    ));
                }
            };
        }
        // Every stream decoded counts, compressed or not: a page can name
        // one large stream many times.
        let used = self.inflated.get() + data.len();
        if used > self.lim.max_inflated {
            return Err(self.over_total());
        }
        self.inflated.set(used);
        Ok(data)
    }

    fn inflate(&self, input: &[u8]) -> R<Vec<u8>> {
        use miniz_oxide::inflate::{self, TINFLStatus};
        let used = self.inflated.get();
        let left = self.lim.max_inflated.saturating_sub(used);
        let room = self.lim.max_stream.min(left);
        let mut r = inflate::decompress_to_vec_zlib_with_limit(input, room);
        if let Err(e) = &r
            && e.status == TINFLStatus::Failed
            && e.output.is_empty()
        {
            // Some writers leave out the zlib header.
            r = inflate::decompress_to_vec_with_limit(input, room);
        }
        let out = match r {
            Ok(v) => v,
            Err(e) if e.status == TINFLStatus::HasMoreOutput => {
                return Err(if room < self.lim.max_stream {
                    self.over_total()
                } else {
                    format!(
                        "a stream inflates to more than {} MiB; refused",
                        self.lim.max_stream >> 20
                    )
                });
            }
            // A truncated stream or a bad checksum: what came out is kept,
            // as other readers do.
            Err(e) if !e.output.is_empty() => e.output,
            Err(e) => return Err(format!("a compressed stream is corrupt ({e})")),
        };
        Ok(out)
    }

    fn over_total(&self) -> String {
        self.stop(format!(
            "the streams decode to more than {} MiB in all; stopped",
            self.lim.max_inflated >> 20
        ))
    }
}

/// `N G obj` ending just before `at` (where "obj" starts): the number and
/// where the header begins.
fn header_before(data: &[u8], at: usize) -> Option<(u32, usize)> {
    let mut i = at;
    let back_digits = |i: &mut usize| {
        let end = *i;
        while *i > 0 && data[*i - 1].is_ascii_digit() && end - *i < 10 {
            *i -= 1;
        }
        (*i < end).then(|| {
            std::str::from_utf8(&data[*i..end])
                .ok()?
                .parse::<u64>()
                .ok()
        })?
    };
    let back_space = |i: &mut usize| {
        let end = *i;
        while *i > 0 && is_space(data[*i - 1]) && end - *i < 4 {
            *i -= 1;
        }
        *i < end
    };
    back_space(&mut i);
    back_digits(&mut i)?;
    if !back_space(&mut i) {
        return None;
    }
    let num = back_digits(&mut i)?;
    if i > 0 && is_regular(data[i - 1]) {
        return None;
    }
    Some((u32::try_from(num).ok()?, i))
}

/// PNG (10–15) and TIFF (2) predictors after Flate.
fn predict(data: Vec<u8>, parms: Option<&Dict>) -> R<Vec<u8>> {
    let Some(p) = parms else { return Ok(data) };
    let int = |k: &[u8], d: i64| get(p, k).and_then(Obj::int).unwrap_or(d);
    let predictor = int(b"Predictor", 1);
    if predictor < 2 {
        return Ok(data);
    }
    let colors = int(b"Colors", 1).clamp(1, 32) as usize;
    let bpc = int(b"BitsPerComponent", 8).clamp(1, 16) as usize;
    let columns = int(b"Columns", 1).clamp(1, 1 << 24) as usize;
    let bpp = (colors * bpc).div_ceil(8).max(1);
    // A row longer than the data is one partial row: never allocate more.
    let row = (colors * bpc * columns).div_ceil(8).min(data.len().max(1));
    if predictor == 2 {
        if bpc != 8 {
            return Err("TIFF predictor with other than 8 bits per component".into());
        }
        let mut data = data;
        for r in data.chunks_mut(row) {
            for i in bpp..r.len() {
                r[i] = r[i].wrapping_add(r[i - bpp]);
            }
        }
        return Ok(data);
    }
    let mut out = Vec::with_capacity(data.len());
    let mut prev = vec![0u8; row];
    for chunk in data.chunks(row + 1) {
        let (&kind, src) = chunk.split_first().unwrap_or((&0, &[]));
        let mut cur = vec![0u8; row];
        cur[..src.len()].copy_from_slice(src);
        for i in 0..row {
            let a = if i >= bpp { cur[i - bpp] } else { 0 };
            let b = prev[i];
            let c = if i >= bpp { prev[i - bpp] } else { 0 };
            cur[i] = cur[i].wrapping_add(match kind {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((a as u16 + b as u16) / 2) as u8,
                4 => {
                    let p = a as i16 + b as i16 - c as i16;
                    let (pa, pb, pc) = (
                        (p - a as i16).abs(),
                        (p - b as i16).abs(),
                        (p - c as i16).abs(),
                    );
                    if pa <= pb && pa <= pc {
                        a
                    } else if pb <= pc {
                        b
                    } else {
                        c
                    }
                }
                _ => return Err(format!("unknown PNG predictor row type {kind}")),
            });
        }
        out.extend_from_slice(&cur[..src.len()]);
        prev = cur;
    }
    Ok(out)
}

fn ascii85(data: &[u8]) -> R<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 4 / 5 + 4);
    let mut group = [0u8; 5];
    let mut n = 0;
    let flush = |group: &[u8; 5], n: usize, out: &mut Vec<u8>| -> R<()> {
        let mut v: u64 = 0;
        for (i, &g) in group.iter().enumerate() {
            v = v * 85 + if i < n { g as u64 } else { 84 };
        }
        if v > u32::MAX as u64 {
            return Err("bad ASCII85 data".into());
        }
        out.extend_from_slice(&(v as u32).to_be_bytes()[..n - 1]);
        Ok(())
    };
    for &b in data {
        match b {
            b'~' => break,
            b'z' if n == 0 => out.extend_from_slice(&[0; 4]),
            b'!'..=b'u' => {
                group[n] = b - b'!';
                n += 1;
                if n == 5 {
                    flush(&group, 5, &mut out)?;
                    n = 0;
                }
            }
            _ if is_space(b) => {}
            _ => return Err("bad ASCII85 data".into()),
        }
    }
    if n > 1 {
        flush(&group, n, &mut out)?;
    }
    Ok(out)
}

/// A page: its dictionary and the resources it has or inherits.
pub struct Page {
    pub dict: Dict,
    pub resources: Obj,
}

impl Doc<'_> {
    /// The pages in order, walking /Kids (cycles and depth refused).
    pub fn pages(&self) -> R<Vec<Page>> {
        let root = self.get(&self.trailer, b"Root")?;
        let root = root
            .dict()
            .ok_or("the document catalog is not a dictionary")?;
        let top = get(root, b"Pages")
            .cloned()
            .ok_or("the catalog has no /Pages")?;
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        self.walk(&top, &Obj::Null, 0, &mut seen, &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        node: &Obj,
        inherited: &Obj,
        depth: u32,
        seen: &mut HashSet<u32>,
        out: &mut Vec<Page>,
    ) -> R<()> {
        if depth > MAX_NEST {
            return Err(format!("the page tree is more than {MAX_NEST} levels deep"));
        }
        if let Obj::Ref(n, _) = node
            && !seen.insert(*n)
        {
            return Err(format!("the page tree refers back to object {n} (a cycle)"));
        }
        let obj = self.resolve(node)?;
        let Some(d) = obj.dict() else {
            return Err("a page tree node is not a dictionary".into());
        };
        let resources = match get(d, b"Resources") {
            Some(r) => r.clone(),
            None => inherited.clone(),
        };
        let kids = self.get(d, b"Kids")?;
        let is_pages = get(d, b"Type").and_then(Obj::name) == Some(b"Pages");
        match kids.array() {
            Some(kids) if is_pages || get(d, b"Type").is_none() => {
                for k in kids {
                    self.check()?;
                    self.walk(k, &resources, depth + 1, seen, out)?;
                }
            }
            _ if is_pages => {}
            _ => {
                if out.len() >= self.lim.max_pages {
                    return Err(format!("more than {} pages", self.lim.max_pages));
                }
                out.push(Page {
                    dict: d.clone(),
                    resources,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_objects() {
        let src =
            b"<< /A 1 /B [2 0 R (x\\(y\\)\\101) <48 65 6c> /N#20a -3.5 .5] /C << >> /D true >>";
        let o = Lexer::new(src, 0).object(0).unwrap();
        let d = o.dict().unwrap();
        assert_eq!(get(d, b"A"), Some(&Obj::Int(1)));
        assert_eq!(
            get(d, b"B"),
            Some(&Obj::Array(vec![
                Obj::Ref(2, 0),
                Obj::Str(b"x(y)A".to_vec()),
                Obj::Str(b"Hel".to_vec()),
                Obj::Name(b"N a".to_vec()),
                Obj::Real(-3.5),
                Obj::Real(0.5),
            ]))
        );
        assert_eq!(get(d, b"D"), Some(&Obj::Bool(true)));
        let deep = "[".repeat(200);
        let e = Lexer::new(deep.as_bytes(), 0).object(0).unwrap_err();
        assert!(e.contains("nested more than"), "{e}");
    }

    #[test]
    fn predictors_and_ascii85() {
        // Up (2) on two rows of 2 columns.
        let data = vec![2, 1, 2, 2, 1, 1];
        let p = vec![
            (b"Predictor".to_vec(), Obj::Int(12)),
            (b"Columns".to_vec(), Obj::Int(2)),
        ];
        assert_eq!(predict(data, Some(&p)).unwrap(), vec![1, 2, 2, 3]);
        assert_eq!(ascii85(b"87cURD]i,\"Ebo80~>").unwrap(), b"Hello World!");
    }
}
