//! GNU sed 4.9: options, and the script itself, read with a port of sed's
//! own script compiler (`compile.c`) so that what we take for text or a
//! regex is exactly what sed takes for text or a regex.
//!
//! Refused: `e` and `s///e` (run commands), `w`, `W` and `s///w` (write files
//! the gate would have to judge separately; refusing is simpler and nobody
//! needs them here), `-f FILE` unless `--sandbox` comes before it (sed reads
//! the script from a file the gate cannot see; with `--sandbox`, sed itself
//! rejects e/r/w). `r FILE` and `R FILE` are reads.
//!
//! The analysis is byte-wise, which is exact for UTF-8 and single-byte
//! locales (no ASCII byte is ever part of a multibyte character there).

use super::table::{
    Entry, FOLLOW_LINKS, INPLACE, Item, N, O, Order, P, Parsed, R, SANDBOX, SCRIPT, SCRIPT_FILE,
    Spec, Style, WRITES, apply, getopt, o, push_read,
};
use crate::security::refusal::Refused;

const SED_OPTS: &[O] = &[
    o('b', "binary", N),
    o('r', "regexp-extended", N),
    o('\0', "debug", N),
    o('e', "expression", R).k(SCRIPT),
    o('f', "file", R).k(SCRIPT_FILE),
    o('i', "in-place", P).k(INPLACE | WRITES),
    o('l', "line-length", R),
    o('z', "null-data", N),
    o('z', "zero-terminated", N),
    o('n', "quiet", N),
    o('\0', "posix", N),
    o('n', "silent", N),
    o('\0', "sandbox", N).k(SANDBOX),
    o('s', "separate", N),
    o('u', "unbuffered", N),
    o('\0', "version", N),
    o('\0', "help", N),
    o('\0', "follow-symlinks", N).k(FOLLOW_LINKS),
    o('E', "", N),
];
const SED_SPEC: Spec = Spec {
    prog: "sed",
    opts: SED_OPTS,
    order: Order::Permute,
    style: Style::Gnu,
};
pub(super) const SED: Entry = Entry {
    name: "sed",
    parse: sed,
    spec: Some(&SED_SPEC),
    summary: "script analysed (e, w, W, s///e, s///w refused; r/R read); files read, WRITTEN with -i",
};

fn sed(args: &[String]) -> Result<Parsed, Refused> {
    let items = getopt(&SED_SPEC, args)?;
    let mut p = Parsed::default();
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut sandbox = false;
    let mut in_place: Option<Option<&str>> = None;
    let mut follow = false;
    let mut operands: Vec<&str> = Vec::new();
    for it in &items {
        let h = match it {
            Item::Arg(a, _) => {
                operands.push(a);
                continue;
            }
            Item::Opt(h) => h,
        };
        apply("sed", &mut p, h)?;
        let k = h.o.k;
        // sed acts on its options in order: a script given before
        // --sandbox is compiled without it.
        if k & SANDBOX != 0 {
            sandbox = true;
        }
        if k & SCRIPT != 0 {
            chunks.push(Chunk::Text(h.val.unwrap_or("")));
        }
        if k & SCRIPT_FILE != 0 {
            if !sandbox {
                return Err(super::table::refusal(
                    "sed",
                    h,
                    "reads a script latchclaw cannot check (put --sandbox before it)",
                ));
            }
            let f = h.val.unwrap_or("");
            push_read(&mut p, f);
            chunks.push(Chunk::Unseen);
        }
        if k & INPLACE != 0 {
            in_place = Some(h.val);
        }
        if k & FOLLOW_LINKS != 0 {
            follow = true;
        }
        if k & WRITES != 0 {
            p.writes_anything = true;
        }
    }
    let mut files = &operands[..];
    if chunks.is_empty() {
        match operands.split_first() {
            Some((script, rest)) => {
                chunks.push(Chunk::Text(script));
                files = rest;
            }
            // sed prints its usage and fails.
            None => return Ok(p),
        }
    }
    for r in analyse(&chunks)? {
        p.reads.push(r);
    }
    for f in files {
        push_read(&mut p, f);
    }
    if let Some(suffix) = in_place {
        // sed's in_place_extension: "*" plus the suffix unless it has a
        // '*'; each '*' becomes the file name as given (so a suffix with a
        // '/' puts the backup in another directory).
        let ext = match suffix {
            Some(s) if s.contains('*') => s.to_string(),
            Some(s) => format!("*{s}"),
            None => "*".to_string(),
        };
        for f in files.iter().filter(|f| **f != "-") {
            p.writes.push(f.to_string());
            if ext != "*" {
                if follow {
                    return Err(Refused::command(
                        "`sed` with --follow-symlinks and a backup suffix writes the backup next to \
                         wherever the link points; latchclaw refuses that combination",
                    ));
                }
                // Longer than PATH_MAX fails anyway; the cap keeps this
                // linear in the argv.
                let stars = ext.matches('*').count();
                if ext.len() + stars.saturating_mul(f.len()) > 4096 {
                    return Err(Refused::command(
                        "`sed` backup file name would be longer than a path can be",
                    ));
                }
                p.writes.push(ext.replace('*', f));
            }
        }
    }
    Ok(p)
}

pub(super) enum Chunk<'a> {
    /// A script given on the command line.
    Text(&'a str),
    /// A script file (only with --sandbox): its text is unknown.
    Unseen,
}

const EOF: i32 = -1;

/// The state of sed's compiler over one chunk.
struct Sc<'a> {
    b: &'a [u8],
    i: usize,
}

impl Sc<'_> {
    fn inchar(&mut self) -> i32 {
        match self.b.get(self.i) {
            Some(&c) => {
                self.i += 1;
                i32::from(c)
            }
            None => EOF,
        }
    }
    fn savchar(&mut self, ch: i32) {
        if ch != EOF {
            self.i -= 1;
        }
    }
    fn in_nonblank(&mut self) -> i32 {
        loop {
            let ch = self.inchar();
            if !is_blank(ch) {
                return ch;
            }
        }
    }
    fn in_integer(&mut self, mut ch: i32) {
        while is_digit(ch) {
            ch = self.inchar();
        }
        self.savchar(ch);
    }
    fn read_end_of_cmd(&mut self) -> Result<(), Refused> {
        let ch = self.in_nonblank();
        if ch == i32::from(b'}') || ch == i32::from(b'#') {
            self.savchar(ch);
            Ok(())
        } else if ch != EOF && ch != i32::from(b'\n') && ch != i32::from(b';') {
            Err(bad("extra characters after a command"))
        } else {
            Ok(())
        }
    }
    fn read_label(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut ch = self.in_nonblank();
        while ch != EOF
            && ch != i32::from(b'\n')
            && !is_blank(ch)
            && ch != i32::from(b';')
            && ch != i32::from(b'}')
            && ch != i32::from(b'#')
        {
            out.push(ch as u8);
            ch = self.inchar();
        }
        self.savchar(ch);
        out
    }
    fn read_filename(&mut self) -> String {
        let start_ch = self.in_nonblank();
        let mut out = Vec::new();
        let mut ch = start_ch;
        while ch != EOF && ch != i32::from(b'\n') {
            out.push(ch as u8);
            ch = self.inchar();
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    /// `match_slash`: true when the delimiter closed the part.
    fn match_slash(&mut self, slash: i32, regex: bool) -> Result<bool, Refused> {
        if !(0..0x80).contains(&slash) {
            return Err(bad("a delimiter that is not an ASCII character"));
        }
        loop {
            let mut ch = self.inchar();
            if ch == EOF || ch == i32::from(b'\n') {
                self.savchar(ch);
                return Ok(false);
            }
            if ch == slash {
                return Ok(true);
            } else if ch == i32::from(b'\\') {
                ch = self.inchar();
                if ch == EOF {
                    return Ok(false);
                }
            } else if ch == i32::from(b'[') && regex {
                ch = self.snarf_char_class();
                if ch != i32::from(b']') {
                    if ch == i32::from(b'\n') {
                        self.savchar(ch);
                    }
                    return Ok(false);
                }
            }
        }
    }
    /// `snarf_char_class`: a bracket expression, where the delimiter does
    /// not end the regex.
    fn snarf_char_class(&mut self) -> i32 {
        let mut state = 0u8;
        let mut delim = 0i32;
        let mut ch = self.inchar();
        if ch == i32::from(b'^') {
            ch = self.inchar();
        }
        if ch == i32::from(b']') {
            ch = self.inchar();
        }
        loop {
            let c = ch;
            let mut clear = true;
            if c == EOF || c == i32::from(b'\n') {
                return c;
            } else if c == i32::from(b'.') || c == i32::from(b':') || c == i32::from(b'=') {
                if state == 1 {
                    delim = c;
                    state = 2;
                    clear = false;
                } else if state == 2 && c == delim {
                    state = 3;
                    clear = false;
                }
            } else if c == i32::from(b'[') {
                if state == 0 {
                    state = 1;
                }
                clear = false;
            } else if c == i32::from(b']') {
                if state == 0 || state == 1 {
                    return c;
                } else if state == 3 {
                    state = 0;
                }
            }
            if clear {
                state &= !1;
            }
            ch = self.inchar();
        }
    }
    /// `read_text` after `a`, `i`, `c`: true when the text continues into
    /// the next chunk (a trailing backslash, or `a\` at the very end).
    fn read_text(&mut self, leadin: i32) -> bool {
        if leadin == EOF {
            return true;
        }
        let mut ch = self.inchar();
        while ch != EOF && ch != i32::from(b'\n') {
            if ch == i32::from(b'\\') {
                ch = self.inchar();
                if ch == EOF {
                    return true;
                }
            }
            ch = self.inchar();
        }
        false
    }
    /// `compile_address`: consumes an address if `ch` starts one.
    fn address(&mut self, mut ch: i32) -> Result<bool, Refused> {
        if ch == i32::from(b'/') || ch == i32::from(b'\\') {
            if ch == i32::from(b'\\') {
                ch = self.inchar();
            }
            if !self.match_slash(ch, true)? {
                return Err(bad("an unterminated address regex"));
            }
            loop {
                let c = self.in_nonblank();
                if c != i32::from(b'I') && c != i32::from(b'M') {
                    self.savchar(c);
                    return Ok(true);
                }
            }
        } else if is_digit(ch) {
            self.in_integer(ch);
            let c = self.in_nonblank();
            if c == i32::from(b'~') {
                let d = self.in_nonblank();
                self.in_integer(d);
            } else {
                self.savchar(c);
            }
            Ok(true)
        } else if ch == i32::from(b'+') || ch == i32::from(b'~') {
            let d = self.in_nonblank();
            self.in_integer(d);
            Ok(true)
        } else {
            Ok(ch == i32::from(b'$'))
        }
    }
    /// `mark_subst_opts`.
    fn subst_flags(&mut self) -> Result<(), Refused> {
        loop {
            let ch = self.in_nonblank();
            match u8::try_from(ch).ok() {
                Some(b'i' | b'I' | b'm' | b'M' | b'p' | b'g') => {}
                Some(b'e') => {
                    return Err(refuse("the `s///e` flag runs the result as a command"));
                }
                Some(b'w') => {
                    return Err(refuse("the `s///w` flag writes a file"));
                }
                Some(c @ b'0'..=b'9') => self.in_integer(i32::from(c)),
                Some(b'}' | b'#') => {
                    self.savchar(ch);
                    return Ok(());
                }
                None | Some(b'\n' | b';') => return Ok(()),
                Some(b'\r') => {
                    if self.inchar() == i32::from(b'\n') {
                        return Ok(());
                    }
                    return Err(bad("an unknown option to `s`"));
                }
                Some(_) => return Err(bad("an unknown option to `s`")),
            }
        }
    }
}

fn is_blank(ch: i32) -> bool {
    ch == i32::from(b' ') || ch == i32::from(b'\t')
}
fn is_space(ch: i32) -> bool {
    matches!(
        u8::try_from(ch),
        Ok(b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
    )
}
fn is_digit(ch: i32) -> bool {
    (i32::from(b'0')..=i32::from(b'9')).contains(&ch)
}
fn bad(what: &str) -> Refused {
    Refused::command(format!(
        "`sed` script has {what}; latchclaw cannot check it"
    ))
}
fn refuse(what: &str) -> Refused {
    Refused::command(format!("`sed` script: {what}"))
}

/// Reads the script chunks (each `-e`, or the operand script) like sed's
/// compiler and returns the files `r`/`R` read; refuses commands that run
/// programs or write files.
pub(super) fn analyse(chunks: &[Chunk]) -> Result<Vec<String>, Refused> {
    let mut reads = Vec::new();
    let mut pending_text = false;
    let mut blocks: usize = 0;
    for chunk in chunks {
        let text = match chunk {
            Chunk::Text(t) => t,
            Chunk::Unseen => {
                // Whatever the file did, the next chunk is read as commands
                // (the stricter reading), and a `}` may close its blocks.
                pending_text = false;
                blocks = usize::MAX / 2;
                continue;
            }
        };
        let mut sc = Sc {
            b: text.as_bytes(),
            i: 0,
        };
        if pending_text {
            pending_text = sc.read_text(i32::from(b'\n'));
        }
        compile(&mut sc, &mut reads, &mut pending_text, &mut blocks)?;
    }
    Ok(reads)
}

/// `compile_program` over one chunk.
fn compile(
    sc: &mut Sc,
    reads: &mut Vec<String>,
    pending_text: &mut bool,
    blocks: &mut usize,
) -> Result<(), Refused> {
    loop {
        let mut ch = sc.inchar();
        while ch == i32::from(b';') || is_space(ch) {
            ch = sc.inchar();
        }
        if ch == EOF {
            return Ok(());
        }
        let mut has_addr = false;
        if sc.address(ch)? {
            has_addr = true;
            ch = sc.in_nonblank();
            if ch == i32::from(b',') {
                let c = sc.in_nonblank();
                if !sc.address(c)? {
                    return Err(bad("a `,` not followed by an address"));
                }
                ch = sc.in_nonblank();
            }
        }
        if ch == i32::from(b'!') {
            ch = sc.in_nonblank();
            if ch == i32::from(b'!') {
                return Err(bad("multiple `!`"));
            }
        }
        let Ok(cmd) = u8::try_from(ch) else {
            return Err(bad("a missing command"));
        };
        match cmd {
            b'#' => {
                if has_addr {
                    return Err(bad("an address before a comment"));
                }
                let mut c = sc.inchar();
                while c != EOF && c != i32::from(b'\n') {
                    c = sc.inchar();
                }
            }
            b'v' => {
                sc.read_label();
            }
            b'{' => *blocks += 1,
            b'}' => {
                if *blocks == 0 {
                    return Err(bad("an unexpected `}`"));
                }
                sc.read_end_of_cmd()?;
                *blocks -= 1;
            }
            b'e' => return Err(refuse("the `e` command runs a command")),
            b'a' | b'i' | b'c' => {
                let mut c = sc.in_nonblank();
                if c == EOF {
                    return Err(bad("`a`, `i` or `c` without text"));
                }
                if c == i32::from(b'\\') {
                    c = sc.inchar();
                } else {
                    sc.savchar(c);
                    c = i32::from(b'\n');
                }
                *pending_text = sc.read_text(c);
            }
            b':' => {
                if has_addr {
                    return Err(bad("an address before a label"));
                }
                if sc.read_label().is_empty() {
                    return Err(bad("`:` without a label"));
                }
            }
            b'T' | b'b' | b't' => {
                sc.read_label();
            }
            b'Q' | b'q' | b'L' | b'l' => {
                let c = sc.in_nonblank();
                if is_digit(c) {
                    sc.in_integer(c);
                } else {
                    sc.savchar(c);
                }
                sc.read_end_of_cmd()?;
            }
            b'=' | b'd' | b'D' | b'F' | b'g' | b'G' | b'h' | b'H' | b'n' | b'N' | b'p' | b'P'
            | b'z' | b'x' => sc.read_end_of_cmd()?,
            b'r' | b'R' => {
                let f = sc.read_filename();
                if f.is_empty() {
                    return Err(bad("`r` without a file name"));
                }
                reads.push(f);
            }
            b'w' | b'W' => return Err(refuse("the `w` command writes a file")),
            b's' => {
                let slash = sc.inchar();
                if !sc.match_slash(slash, true)? || !sc.match_slash(slash, false)? {
                    return Err(bad("an unterminated `s` command"));
                }
                sc.subst_flags()?;
            }
            b'y' => {
                let slash = sc.inchar();
                if !sc.match_slash(slash, false)? || !sc.match_slash(slash, false)? {
                    return Err(bad("an unterminated `y` command"));
                }
                sc.read_end_of_cmd()?;
            }
            other => {
                return Err(bad(&format!(
                    "an unknown command `{}`",
                    char::from(other).escape_default()
                )));
            }
        }
    }
}
