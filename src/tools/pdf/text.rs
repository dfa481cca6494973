//! Text from content streams: the text operators run with enough of the
//! graphics state (matrices, font size, glyph widths) to tell where a word
//! or a line ends, and fonts' codes mapped to Unicode through /ToUnicode,
//! else the font's encoding.

use super::doc::{Dict, Doc, Lexer, Obj, R, Tok, get, is_space};
use std::collections::HashMap;
use std::rc::Rc;

/// Form XObjects inside form XObjects, and `q` without `Q`.
const MAX_FORMS: u32 = 8;
const MAX_SAVES: usize = 64;
/// Entries one /ToUnicode CMap or /W array may hold.
const MAX_MAP: usize = 1 << 17;
/// Operators between deadline checks.
const CHECK_EVERY: u32 = 4096;

type M = [f64; 6];
const ID: M = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0];

fn mul(a: &M, b: &M) -> M {
    [
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
        a[4] * b[0] + a[5] * b[2] + b[4],
        a[4] * b[1] + a[5] * b[3] + b[5],
    ]
}

/// A ToUnicode CMap: codes of 1–4 bytes to text.
#[derive(Default)]
pub struct CMap {
    /// (bytes, low, high) of each code space range.
    space: Vec<(usize, u32, u32)>,
    single: HashMap<u32, String>,
    /// (low, high, first text): the last UTF-16 unit counts up.
    ranges: Vec<(u32, u32, Vec<u16>)>,
    /// (low, high, one text per code).
    lists: Vec<(u32, u32, Vec<String>)>,
    count: usize,
}

fn code_of(b: &[u8]) -> u32 {
    b.iter().take(4).fold(0, |a, &x| a << 8 | x as u32)
}

fn utf16(b: &[u8]) -> Vec<u16> {
    b.chunks(2)
        .map(|c| {
            if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                c[0] as u16
            }
        })
        .collect()
}

impl CMap {
    pub fn parse(data: &[u8]) -> R<CMap> {
        let mut m = CMap::default();
        let mut lx = Lexer::new(data, 0);
        let mut operands: Vec<Obj> = Vec::new();
        loop {
            match lx.token()? {
                Tok::Eof => break,
                Tok::Keyword(k) => {
                    match k {
                        b"endcodespacerange" => {
                            for p in operands.chunks(2) {
                                if let [Obj::Str(lo), Obj::Str(hi)] = p
                                    && (1..=4).contains(&lo.len())
                                {
                                    m.space.push((lo.len(), code_of(lo), code_of(hi)));
                                }
                            }
                        }
                        b"endbfchar" => {
                            for p in operands.chunks(2) {
                                if let [Obj::Str(src), dst] = p {
                                    let text = match dst {
                                        Obj::Str(d) => String::from_utf16_lossy(&utf16(d)),
                                        Obj::Name(n) => {
                                            glyph_char(n).map(String::from).unwrap_or_default()
                                        }
                                        _ => continue,
                                    };
                                    m.add(1)?;
                                    m.single.insert(code_of(src), text);
                                }
                            }
                        }
                        b"endbfrange" => {
                            for p in operands.chunks(3) {
                                let [Obj::Str(lo), Obj::Str(hi), dst] = p else {
                                    continue;
                                };
                                let (lo, hi) = (code_of(lo), code_of(hi));
                                if hi < lo {
                                    continue;
                                }
                                m.add(1)?;
                                match dst {
                                    Obj::Str(d) if !d.is_empty() => {
                                        m.ranges.push((lo, hi, utf16(d)))
                                    }
                                    Obj::Array(a) => {
                                        m.add(a.len())?;
                                        let texts = a
                                            .iter()
                                            .map(|o| match o {
                                                Obj::Str(d) => String::from_utf16_lossy(&utf16(d)),
                                                _ => String::new(),
                                            })
                                            .collect();
                                        m.lists.push((lo, hi, texts));
                                    }
                                    _ => {}
                                }
                            }
                        }
                        _ => {}
                    }
                    operands.clear();
                }
                t => {
                    let o = lx.object_from(t, 0)?;
                    if operands.len() < MAX_MAP {
                        operands.push(o);
                    }
                }
            }
        }
        crate::util::sort::sort_by_key(&mut m.ranges, |r| r.0);
        crate::util::sort::sort_by_key(&mut m.lists, |r| r.0);
        Ok(m)
    }

    fn add(&mut self, n: usize) -> R<()> {
        self.count += n;
        if self.count > MAX_MAP {
            return Err(format!("a /ToUnicode map has more than {MAX_MAP} entries"));
        }
        Ok(())
    }

    /// The range holding `code` among ranges sorted by their start: a
    /// binary search, so a map of many ranges costs no more per glyph.
    fn find<T>(v: &[(u32, u32, T)], code: u32) -> Option<&(u32, u32, T)> {
        let i = v.partition_point(|r| r.0 <= code);
        v.get(i.checked_sub(1)?).filter(|r| code <= r.1)
    }

    fn lookup(&self, code: u32) -> Option<String> {
        if let Some(s) = self.single.get(&code) {
            return Some(s.clone());
        }
        if let Some((lo, _, base)) = Self::find(&self.ranges, code) {
            let mut units = base.clone();
            if let Some(last) = units.last_mut() {
                *last = last.wrapping_add((code - lo) as u16);
            }
            return Some(String::from_utf16_lossy(&units));
        }
        let (lo, _, list) = Self::find(&self.lists, code)?;
        list.get((code - lo) as usize).cloned()
    }
}

pub struct Font {
    /// Type0: codes of more than one byte, split by `space` (2 by default).
    composite: bool,
    space: Vec<(usize, u32, u32)>,
    to_unicode: Option<CMap>,
    /// A simple font's code → text (its encoding and /Differences).
    table: Vec<Option<char>>,
    /// The codes of a composite font are Unicode (UCS2/UTF16 CMaps).
    unicode_codes: bool,
    widths: HashMap<u32, f64>,
    default_width: f64,
    /// Glyph space to text space (1/1000, or a Type3 font's matrix).
    scale: f64,
}

impl Font {
    pub fn load(doc: &Doc, d: &Dict) -> R<Font> {
        let subtype = get(d, b"Subtype").and_then(Obj::name).unwrap_or(b"");
        let composite = subtype == b"Type0";
        let to_unicode = match doc.get(d, b"ToUnicode")? {
            s @ Obj::Stream(..) => match doc.stream(&s).and_then(|b| CMap::parse(&b)) {
                Ok(m) => Some(m),
                Err(e) if doc.stopped.borrow().is_some() => return Err(e),
                Err(e) => {
                    log::debug!("pdf: a /ToUnicode map is unreadable: {e}");
                    None
                }
            },
            _ => None,
        };
        let mut f = Font {
            composite,
            space: Vec::new(),
            to_unicode,
            table: Vec::new(),
            unicode_codes: false,
            widths: HashMap::new(),
            default_width: 500.0,
            scale: 0.001,
        };
        if let Some(m) = &f.to_unicode {
            f.space = m.space.clone();
        }
        if composite {
            let enc = doc.get(d, b"Encoding")?;
            if let Some(n) = enc.name() {
                f.unicode_codes = [&b"UCS2"[..], b"UTF16"]
                    .iter()
                    .any(|u| memchr::memmem::find(n, u).is_some());
            }
            if let Obj::Stream(..) = enc
                && let Ok(b) = doc.stream(&enc)
                && let Ok(m) = CMap::parse(&b)
                && !m.space.is_empty()
            {
                f.space = m.space;
            }
            let desc = doc.get(d, b"DescendantFonts")?;
            let cid = match desc.array().and_then(|a| a.first()) {
                Some(o) => doc.resolve(o)?,
                None => Obj::Null,
            };
            if let Some(c) = cid.dict() {
                f.default_width = doc.get(c, b"DW")?.num().unwrap_or(1000.0);
                if let Obj::Array(w) = doc.get(c, b"W")? {
                    f.cid_widths(doc, &w)?;
                }
            }
        } else {
            f.table = simple_encoding(doc, d, subtype)?;
            let first = doc.get(d, b"FirstChar")?.int().unwrap_or(0).clamp(0, 255) as u32;
            if let Obj::Array(w) = doc.get(d, b"Widths")? {
                for (i, o) in w.iter().take(256).enumerate() {
                    if let Some(v) = doc.resolve(o)?.num() {
                        f.widths.insert(first + i as u32, v);
                    }
                }
            }
            if let Some(fd) = doc.get(d, b"FontDescriptor")?.dict()
                && let Some(mw) = doc.get(fd, b"MissingWidth")?.num()
                && mw > 0.0
            {
                f.default_width = mw;
            }
            if subtype == b"Type3"
                && let Obj::Array(m) = doc.get(d, b"FontMatrix")?
                && let Some(a) = m.first().and_then(Obj::num)
            {
                f.scale = a;
            }
        }
        Ok(f)
    }

    fn cid_widths(&mut self, doc: &Doc, w: &[Obj]) -> R<()> {
        let mut i = 0;
        while i + 1 < w.len() {
            let Some(first) = w[i].int() else { break };
            match doc.resolve(&w[i + 1])? {
                Obj::Array(list) => {
                    for (k, o) in list.iter().enumerate() {
                        if self.widths.len() >= MAX_MAP {
                            return Ok(());
                        }
                        if let Some(v) = o.num() {
                            self.widths.insert((first as u32).wrapping_add(k as u32), v);
                        }
                    }
                    i += 2;
                }
                last => {
                    let (Some(last), Some(v)) = (last.int(), w.get(i + 2).and_then(Obj::num))
                    else {
                        break;
                    };
                    for c in first.max(0)..=last.min(first.max(0) + MAX_MAP as i64) {
                        if self.widths.len() >= MAX_MAP {
                            return Ok(());
                        }
                        self.widths.insert(c as u32, v);
                    }
                    i += 3;
                }
            }
        }
        Ok(())
    }

    /// The string's codes: (code, bytes it took).
    fn codes(&self, s: &[u8]) -> Vec<(u32, usize)> {
        let mut out = Vec::with_capacity(s.len());
        let mut i = 0;
        while i < s.len() {
            let n = if !self.composite {
                1
            } else if self.space.is_empty() {
                2
            } else {
                (1..=4)
                    .find(|&n| {
                        s.len() >= i + n
                            && self.space.iter().any(|&(len, lo, hi)| {
                                len == n && (lo..=hi).contains(&code_of(&s[i..i + n]))
                            })
                    })
                    .unwrap_or_else(|| self.space.iter().map(|r| r.0).min().unwrap_or(1))
            };
            let n = n.min(s.len() - i);
            out.push((code_of(&s[i..i + n]), n));
            i += n;
        }
        out
    }

    fn text(&self, code: u32) -> Option<String> {
        if let Some(m) = &self.to_unicode
            && let Some(t) = m.lookup(code)
        {
            return Some(t);
        }
        if self.composite {
            return self
                .unicode_codes
                .then(|| char::from_u32(code).map(String::from))
                .flatten();
        }
        self.table
            .get(code as usize)
            .copied()
            .flatten()
            .map(String::from)
    }

    fn width(&self, code: u32) -> f64 {
        self.widths
            .get(&code)
            .copied()
            .unwrap_or(self.default_width)
            * self.scale
    }
}

/// A simple font's code → char: a base encoding (the font's /Encoding, or
/// StandardEncoding; symbolic TrueType fonts keep their codes) with
/// /Differences applied.
fn simple_encoding(doc: &Doc, d: &Dict, subtype: &[u8]) -> R<Vec<Option<char>>> {
    let enc = doc.get(d, b"Encoding")?;
    let (base, diffs) = match &enc {
        Obj::Name(n) => (Some(n.clone()), None),
        Obj::Dict(e) => (
            get(e, b"BaseEncoding")
                .and_then(Obj::name)
                .map(<[u8]>::to_vec),
            Some(doc.get(e, b"Differences")?),
        ),
        _ => (None, None),
    };
    let mut table: Vec<Option<char>> = (0..256u32)
        .map(|c| match base.as_deref() {
            Some(b"WinAnsiEncoding") => win_ansi(c as u8),
            Some(b"MacRomanEncoding") => mac_roman(c as u8),
            Some(b"StandardEncoding") => standard(c as u8),
            // No base: TrueType fonts are usually WinAnsi-like; Type1
            // fonts use StandardEncoding.
            _ if subtype == b"TrueType" => win_ansi(c as u8),
            _ => standard(c as u8),
        })
        .collect();
    if let Some(Obj::Array(list)) = diffs {
        let mut code = 0usize;
        for o in list {
            match o {
                Obj::Int(n) => code = n.clamp(0, 256) as usize,
                Obj::Name(name) => {
                    if code < 256 {
                        table[code] = glyph_char(&name);
                    }
                    code += 1;
                }
                _ => {}
            }
        }
    }
    Ok(table)
}

/// WinAnsiEncoding's glyph names from 0x20 to 0xFF ("" where undefined);
/// the names map to Unicode through the same table.
const WIN_NAMES: [&str; 224] = [
    "space",
    "exclam",
    "quotedbl",
    "numbersign",
    "dollar",
    "percent",
    "ampersand",
    "quotesingle",
    "parenleft",
    "parenright",
    "asterisk",
    "plus",
    "comma",
    "hyphen",
    "period",
    "slash",
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "colon",
    "semicolon",
    "less",
    "equal",
    "greater",
    "question",
    "at",
    "A",
    "B",
    "C",
    "D",
    "E",
    "F",
    "G",
    "H",
    "I",
    "J",
    "K",
    "L",
    "M",
    "N",
    "O",
    "P",
    "Q",
    "R",
    "S",
    "T",
    "U",
    "V",
    "W",
    "X",
    "Y",
    "Z",
    "bracketleft",
    "backslash",
    "bracketright",
    "asciicircum",
    "underscore",
    "grave",
    "a",
    "b",
    "c",
    "d",
    "e",
    "f",
    "g",
    "h",
    "i",
    "j",
    "k",
    "l",
    "m",
    "n",
    "o",
    "p",
    "q",
    "r",
    "s",
    "t",
    "u",
    "v",
    "w",
    "x",
    "y",
    "z",
    "braceleft",
    "bar",
    "braceright",
    "asciitilde",
    "",
    "Euro",
    "",
    "quotesinglbase",
    "florin",
    "quotedblbase",
    "ellipsis",
    "dagger",
    "daggerdbl",
    "circumflex",
    "perthousand",
    "Scaron",
    "guilsinglleft",
    "OE",
    "",
    "Zcaron",
    "",
    "",
    "quoteleft",
    "quoteright",
    "quotedblleft",
    "quotedblright",
    "bullet",
    "endash",
    "emdash",
    "tilde",
    "trademark",
    "scaron",
    "guilsinglright",
    "oe",
    "",
    "zcaron",
    "Ydieresis",
    "nbspace",
    "exclamdown",
    "cent",
    "sterling",
    "currency",
    "yen",
    "brokenbar",
    "section",
    "dieresis",
    "copyright",
    "ordfeminine",
    "guillemotleft",
    "logicalnot",
    "sfthyphen",
    "registered",
    "macron",
    "degree",
    "plusminus",
    "twosuperior",
    "threesuperior",
    "acute",
    "mu",
    "paragraph",
    "periodcentered",
    "cedilla",
    "onesuperior",
    "ordmasculine",
    "guillemotright",
    "onequarter",
    "onehalf",
    "threequarters",
    "questiondown",
    "Agrave",
    "Aacute",
    "Acircumflex",
    "Atilde",
    "Adieresis",
    "Aring",
    "AE",
    "Ccedilla",
    "Egrave",
    "Eacute",
    "Ecircumflex",
    "Edieresis",
    "Igrave",
    "Iacute",
    "Icircumflex",
    "Idieresis",
    "Eth",
    "Ntilde",
    "Ograve",
    "Oacute",
    "Ocircumflex",
    "Otilde",
    "Odieresis",
    "multiply",
    "Oslash",
    "Ugrave",
    "Uacute",
    "Ucircumflex",
    "Udieresis",
    "Yacute",
    "Thorn",
    "germandbls",
    "agrave",
    "aacute",
    "acircumflex",
    "atilde",
    "adieresis",
    "aring",
    "ae",
    "ccedilla",
    "egrave",
    "eacute",
    "ecircumflex",
    "edieresis",
    "igrave",
    "iacute",
    "icircumflex",
    "idieresis",
    "eth",
    "ntilde",
    "ograve",
    "oacute",
    "ocircumflex",
    "otilde",
    "odieresis",
    "divide",
    "oslash",
    "ugrave",
    "uacute",
    "ucircumflex",
    "udieresis",
    "yacute",
    "thorn",
    "ydieresis",
];

/// WinAnsi 0x80–0x9F (0: undefined).
const WIN_80: [u16; 32] = [
    0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0, 0x017D, 0, 0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC,
    0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
];

/// Names outside WinAnsi.
const MORE_NAMES: [(&str, char); 19] = [
    ("fi", '\u{FB01}'),
    ("fl", '\u{FB02}'),
    ("ff", '\u{FB00}'),
    ("ffi", '\u{FB03}'),
    ("ffl", '\u{FB04}'),
    ("minus", '\u{2212}'),
    ("fraction", '\u{2044}'),
    ("dotlessi", '\u{0131}'),
    ("Lslash", '\u{0141}'),
    ("lslash", '\u{0142}'),
    ("breve", '\u{02D8}'),
    ("dotaccent", '\u{02D9}'),
    ("ring", '\u{02DA}'),
    ("hungarumlaut", '\u{02DD}'),
    ("ogonek", '\u{02DB}'),
    ("caron", '\u{02C7}'),
    ("nonbreakingspace", '\u{00A0}'),
    ("Delta", '\u{2206}'),
    ("Omega", '\u{2126}'),
];

fn win_ansi(c: u8) -> Option<char> {
    match c {
        0x20..=0x7E | 0xA0..=0xFF => Some(c as char),
        0x80..=0x9F => char::from_u32(WIN_80[c as usize - 0x80] as u32).filter(|&c| c != '\0'),
        _ => None,
    }
}

const MAC_HIGH: &str = "ÄÅÇÉÑÖÜáàâäãåçéèêëíìîïñóòôöõúùûü†°¢£§•¶ß®©™´¨≠ÆØ∞±≤≥¥µ∂∑∏π∫ªºΩæø\
¿¡¬√ƒ≈∆«»…\u{A0}ÀÃÕŒœ–—“”‘’÷◊ÿŸ⁄¤‹›ﬁﬂ‡·‚„‰ÂÊÁËÈÍÎÏÌÓÔ\u{F8FF}ÒÚÛÙıˆ˜¯˘˙˚¸˝˛ˇ";

fn mac_roman(c: u8) -> Option<char> {
    match c {
        0x20..=0x7E => Some(c as char),
        0x80..=0xFF => MAC_HIGH.chars().nth(c as usize - 0x80),
        _ => None,
    }
}

/// StandardEncoding's upper half, as glyph names.
const STD_HIGH: [(u8, &str); 60] = [
    (0xA1, "exclamdown"),
    (0xA2, "cent"),
    (0xA3, "sterling"),
    (0xA4, "fraction"),
    (0xA5, "yen"),
    (0xA6, "florin"),
    (0xA7, "section"),
    (0xA8, "currency"),
    (0xA9, "quotesingle"),
    (0xAA, "quotedblleft"),
    (0xAB, "guillemotleft"),
    (0xAC, "guilsinglleft"),
    (0xAD, "guilsinglright"),
    (0xAE, "fi"),
    (0xAF, "fl"),
    (0xB1, "endash"),
    (0xB2, "dagger"),
    (0xB3, "daggerdbl"),
    (0xB4, "periodcentered"),
    (0xB6, "paragraph"),
    (0xB7, "bullet"),
    (0xB8, "quotesinglbase"),
    (0xB9, "quotedblbase"),
    (0xBA, "quotedblright"),
    (0xBB, "guillemotright"),
    (0xBC, "ellipsis"),
    (0xBD, "perthousand"),
    (0xBF, "questiondown"),
    (0xC1, "grave"),
    (0xC2, "acute"),
    (0xC3, "circumflex"),
    (0xC4, "tilde"),
    (0xC5, "macron"),
    (0xC6, "breve"),
    (0xC7, "dotaccent"),
    (0xC8, "dieresis"),
    (0xCA, "ring"),
    (0xCB, "cedilla"),
    (0xCD, "hungarumlaut"),
    (0xCE, "ogonek"),
    (0xCF, "caron"),
    (0xD0, "emdash"),
    (0xE1, "AE"),
    (0xE3, "ordfeminine"),
    (0xE8, "Lslash"),
    (0xE9, "Oslash"),
    (0xEA, "OE"),
    (0xEB, "ordmasculine"),
    (0xF1, "ae"),
    (0xF5, "dotlessi"),
    (0xF8, "lslash"),
    (0xF9, "oslash"),
    (0xFA, "oe"),
    (0xFB, "germandbls"),
    (0x27, "quoteright"),
    (0x60, "quoteleft"),
    (0x20, "space"),
    (0x2D, "hyphen"),
    (0x7E, "asciitilde"),
    (0x5E, "asciicircum"),
];

fn standard(c: u8) -> Option<char> {
    if let Some((_, n)) = STD_HIGH.iter().find(|(k, _)| *k == c) {
        return glyph_char(n.as_bytes());
    }
    match c {
        0x21..=0x7E => Some(c as char),
        _ => None,
    }
}

/// A glyph name's character: WinAnsi's names, a few more, `uniXXXX`,
/// `uXXXX[XX]`, and `name.suffix` variants.
pub fn glyph_char(name: &[u8]) -> Option<char> {
    let name = std::str::from_utf8(name).ok()?;
    let base = name.split(['.', '_']).next().unwrap_or(name);
    if let Some(i) = WIN_NAMES.iter().position(|n| *n == base && !n.is_empty()) {
        return match i + 0x20 {
            0xA0 => Some('\u{A0}'),
            0xAD => Some('-'),
            c => win_ansi(c as u8),
        };
    }
    if let Some((_, c)) = MORE_NAMES.iter().find(|(n, _)| *n == base) {
        return Some(*c);
    }
    let hex = base
        .strip_prefix("uni")
        .filter(|h| h.len() >= 4)
        .map(|h| &h[..4])
        .or_else(|| {
            base.strip_prefix('u')
                .filter(|h| (4..=6).contains(&h.len()))
        })?;
    u32::from_str_radix(hex, 16).ok().and_then(char::from_u32)
}

#[derive(Clone)]
struct GState {
    ctm: M,
    font: Option<Rc<Font>>,
    size: f64,
    char_space: f64,
    word_space: f64,
    scale: f64,
    leading: f64,
    rise: f64,
}

/// Runs a page's content and collects its text.
pub struct Extractor<'d, 'a> {
    doc: &'d Doc<'a>,
    /// Fonts by object number: a document's pages share them.
    fonts: HashMap<u32, Rc<Font>>,
    pub out: String,
    /// Where the last shown text ended (device space), and its size.
    last: Option<(f64, f64, f64)>,
    /// Glyphs with no Unicode mapping.
    pub unmapped: usize,
    /// Bytes of a page's text kept at most (more could not be shown).
    pub cap: usize,
    ops: u32,
}

impl<'d, 'a> Extractor<'d, 'a> {
    pub fn new(doc: &'d Doc<'a>) -> Self {
        Extractor {
            doc,
            fonts: HashMap::new(),
            out: String::new(),
            last: None,
            unmapped: 0,
            cap: usize::MAX,
            ops: 0,
        }
    }

    /// The text of one page (an error only for what makes it unreadable).
    pub fn page(&mut self, page: &super::doc::Page) -> R<String> {
        self.out.clear();
        self.last = None;
        let contents = self.doc.get(&page.dict, b"Contents")?;
        let mut data = Vec::new();
        match &contents {
            Obj::Stream(..) => data = self.doc.stream(&contents)?,
            Obj::Array(parts) => {
                for p in parts {
                    let s = self.doc.resolve(p)?;
                    if let Obj::Stream(..) = s {
                        data.extend_from_slice(&self.doc.stream(&s)?);
                        data.push(b'\n');
                    }
                }
            }
            _ => {}
        }
        let resources = self.doc.resolve(&page.resources)?;
        let mut gs = GState {
            ctm: ID,
            font: None,
            size: 0.0,
            char_space: 0.0,
            word_space: 0.0,
            scale: 1.0,
            leading: 0.0,
            rise: 0.0,
        };
        self.run(&data, resources.dict(), &mut gs, 0)?;
        Ok(std::mem::take(&mut self.out))
    }

    fn run(&mut self, data: &[u8], res: Option<&Dict>, gs: &mut GState, depth: u32) -> R<()> {
        let mut lx = Lexer::new(data, 0);
        let mut args: Vec<Obj> = Vec::new();
        let mut saved: Vec<GState> = Vec::new();
        let (mut tm, mut tlm) = (ID, ID);
        loop {
            let t = lx.token()?;
            let op = match t {
                Tok::Eof => return Ok(()),
                Tok::Keyword(k) => k,
                t => {
                    // A malformed operand is skipped, not fatal: readers
                    // are lenient with content streams.
                    match lx.object_from(t, 0) {
                        Ok(o) if args.len() < 64 => args.push(o),
                        Ok(_) => {}
                        Err(_) => args.clear(),
                    }
                    continue;
                }
            };
            self.ops += 1;
            if self.ops.is_multiple_of(CHECK_EVERY) {
                self.doc.check()?;
            }
            let n = |i: usize| args.get(i).and_then(Obj::num).unwrap_or(0.0);
            match op {
                b"q" if saved.len() < MAX_SAVES => saved.push(gs.clone()),
                b"Q" => {
                    if let Some(s) = saved.pop() {
                        *gs = s;
                    }
                }
                b"cm" if args.len() == 6 => {
                    gs.ctm = mul(&[n(0), n(1), n(2), n(3), n(4), n(5)], &gs.ctm);
                }
                b"BT" => {
                    tm = ID;
                    tlm = ID;
                }
                b"Tc" => gs.char_space = n(0),
                b"Tw" => gs.word_space = n(0),
                b"Tz" => gs.scale = n(0) / 100.0,
                b"TL" => gs.leading = n(0),
                b"Ts" => gs.rise = n(0),
                b"Tf" => {
                    gs.size = n(1);
                    gs.font = match args.first().and_then(Obj::name) {
                        Some(name) => self.font(res, name)?,
                        None => None,
                    };
                }
                b"Td" | b"TD" => {
                    if op == b"TD" {
                        gs.leading = -n(1);
                    }
                    tlm = mul(&[1.0, 0.0, 0.0, 1.0, n(0), n(1)], &tlm);
                    tm = tlm;
                }
                b"Tm" if args.len() == 6 => {
                    tlm = [n(0), n(1), n(2), n(3), n(4), n(5)];
                    tm = tlm;
                }
                b"T*" => {
                    tlm = mul(&[1.0, 0.0, 0.0, 1.0, 0.0, -gs.leading], &tlm);
                    tm = tlm;
                }
                b"Tj" | b"'" | b"\"" => {
                    if op != b"Tj" {
                        if op == b"\"" {
                            gs.word_space = n(0);
                            gs.char_space = n(1);
                        }
                        tlm = mul(&[1.0, 0.0, 0.0, 1.0, 0.0, -gs.leading], &tlm);
                        tm = tlm;
                    }
                    if let Some(Obj::Str(s)) = args.last() {
                        self.show(s, gs, &mut tm);
                    }
                }
                b"TJ" => {
                    if let Some(Obj::Array(items)) = args.first() {
                        for it in items {
                            match it {
                                Obj::Str(s) => self.show(s, gs, &mut tm),
                                o => {
                                    let adj = o.num().unwrap_or(0.0);
                                    let tx = -adj / 1000.0 * gs.size * gs.scale;
                                    tm = mul(&[1.0, 0.0, 0.0, 1.0, tx, 0.0], &tm);
                                }
                            }
                        }
                    }
                }
                b"Do" if depth < MAX_FORMS => {
                    if let Some(name) = args.first().and_then(Obj::name) {
                        self.form(res, name, gs, depth)?;
                    }
                }
                b"BI" => skip_inline_image(&mut lx),
                _ => {}
            }
            args.clear();
        }
    }

    fn font(&mut self, res: Option<&Dict>, name: &[u8]) -> R<Option<Rc<Font>>> {
        let Some(res) = res else { return Ok(None) };
        let fonts = self.doc.get(res, b"Font")?;
        let Some(entry) = fonts.dict().and_then(|f| get(f, name)) else {
            return Ok(None);
        };
        if let Obj::Ref(n, _) = entry
            && let Some(f) = self.fonts.get(n)
        {
            return Ok(Some(f.clone()));
        }
        let d = self.doc.resolve(entry)?;
        let Some(dict) = d.dict() else {
            return Ok(None);
        };
        let f = Rc::new(Font::load(self.doc, dict)?);
        if let Obj::Ref(n, _) = entry {
            self.fonts.insert(*n, f.clone());
        }
        Ok(Some(f))
    }

    fn form(&mut self, res: Option<&Dict>, name: &[u8], gs: &GState, depth: u32) -> R<()> {
        let Some(res) = res else { return Ok(()) };
        let xobjects = self.doc.get(res, b"XObject")?;
        let Some(entry) = xobjects.dict().and_then(|x| get(x, name)) else {
            return Ok(());
        };
        let x = self.doc.resolve(entry)?;
        let Obj::Stream(d, ..) = &x else {
            return Ok(());
        };
        if get(d, b"Subtype").and_then(Obj::name) != Some(b"Form") {
            return Ok(());
        }
        let data = self.doc.stream(&x)?;
        let own = self.doc.get(d, b"Resources")?;
        let mut inner = gs.clone();
        if let Obj::Array(m) = self.doc.get(d, b"Matrix")?
            && m.len() == 6
        {
            let v: Vec<f64> = m.iter().map(|o| o.num().unwrap_or(0.0)).collect();
            inner.ctm = mul(&[v[0], v[1], v[2], v[3], v[4], v[5]], &gs.ctm);
        }
        self.run(&data, own.dict().or(Some(res)), &mut inner, depth + 1)
    }

    /// Shows a string: its text, a space or line break before it when it
    /// starts away from where the last text ended, and the text matrix
    /// moved past its glyphs.
    fn show(&mut self, s: &[u8], gs: &GState, tm: &mut M) {
        let Some(font) = gs.font.clone() else { return };
        if self.out.len() > self.cap {
            return;
        }
        let trm = mul(&[1.0, 0.0, 0.0, 1.0, 0.0, gs.rise], &mul(tm, &gs.ctm));
        let size = (gs.size * (trm[2] * trm[2] + trm[3] * trm[3]).sqrt())
            .abs()
            .max(0.1);
        let (x, y) = (trm[4], trm[5]);
        let mut text = String::new();
        for (code, len) in font.codes(s) {
            match font.text(code) {
                Some(t) => text.push_str(&t),
                None => self.unmapped += 1,
            }
            let space = if len == 1 && code == 32 {
                gs.word_space
            } else {
                0.0
            };
            let tx = (font.width(code) * gs.size + gs.char_space + space) * gs.scale;
            *tm = mul(&[1.0, 0.0, 0.0, 1.0, tx, 0.0], tm);
        }
        let text: String = text
            .chars()
            .filter(|c| !c.is_control() || *c == '\t')
            .collect();
        if text.is_empty() {
            return;
        }
        if let Some((lx, ly, lsize)) = self.last {
            let line = size.max(lsize);
            let starts_blank = text.starts_with(char::is_whitespace);
            let ends_blank = self.out.is_empty() || self.out.ends_with(char::is_whitespace);
            if (y - ly).abs() > 0.5 * line {
                if !self.out.ends_with('\n') {
                    self.out.push('\n');
                }
            } else if ((x - lx) > 0.15 * line || (lx - x) > line) && !starts_blank && !ends_blank {
                self.out.push(' ');
            }
        }
        self.out.push_str(&text);
        let end = mul(&[1.0, 0.0, 0.0, 1.0, 0.0, gs.rise], &mul(tm, &gs.ctm));
        self.last = Some((end[4], end[5], size));
    }
}

/// Past an inline image's data: from `ID` to an `EI` standing alone.
fn skip_inline_image(lx: &mut Lexer) {
    while let Ok(t) = lx.token() {
        match t {
            Tok::Eof => return,
            Tok::Keyword(b"ID") => break,
            _ => {}
        }
    }
    let s = lx.s;
    let mut i = lx.pos + 1;
    while let Some(at) = memchr::memmem::find(&s[i.min(s.len())..], b"EI") {
        let p = i + at;
        let before = p == 0 || is_space(s[p - 1]);
        let after = s.get(p + 2).is_none_or(|&b| is_space(b));
        if before && after {
            lx.pos = p + 2;
            return;
        }
        i = p + 2;
    }
    lx.pos = s.len();
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn glyph_names_and_encodings() {
        assert_eq!(glyph_char(b"A"), Some('A'));
        assert_eq!(glyph_char(b"quoteright"), Some('\u{2019}'));
        assert_eq!(glyph_char(b"fi"), Some('\u{FB01}'));
        assert_eq!(glyph_char(b"uni00E9"), Some('é'));
        assert_eq!(glyph_char(b"u1F600"), Some('😀'));
        assert_eq!(glyph_char(b"a.sc"), Some('a'));
        assert_eq!(glyph_char(b"eacute"), Some('é'));
        assert_eq!(glyph_char(b"nosuchglyph"), None);
        assert_eq!(win_ansi(0x93), Some('“'));
        assert_eq!(win_ansi(0x81), None);
        assert_eq!(standard(0x27), Some('’'));
        assert_eq!(standard(0xAE), Some('\u{FB01}'));
        assert_eq!(mac_roman(0x8E), Some('é'));
        assert_eq!(mac_roman(0xFF), Some('ˇ'));
        assert_eq!(MAC_HIGH.chars().count(), 128);
    }

    #[test]
    fn cmap_bfchar_bfrange_and_arrays() {
        let m = CMap::parse(
            b"1 begincodespacerange <0000> <FFFF> endcodespacerange\n\
              2 beginbfchar <0003> <0020> <0010> <00660069> endbfchar\n\
              2 beginbfrange <0020> <0022> <0041> <0030> <0031> [<0078> <D83DDE00>] endbfrange",
        )
        .unwrap();
        assert_eq!(m.space, vec![(2, 0, 0xFFFF)]);
        assert_eq!(m.lookup(3).as_deref(), Some(" "));
        assert_eq!(m.lookup(0x10).as_deref(), Some("fi"));
        assert_eq!(m.lookup(0x22).as_deref(), Some("C"));
        assert_eq!(m.lookup(0x31).as_deref(), Some("😀"));
        assert_eq!(m.lookup(0x40), None);
    }
}
