//! The REPL's line editor: keys edit one line in place (cursor moves, kills,
//! history), drawn on one terminal row that scrolls sideways.
//!
//! The pieces are plain state machines tested without a terminal: `Decoder`
//! (bytes → keys, split escape sequences and UTF-8 kept for the next read),
//! `Editor` (keys → buffer, cursor, history; and the row to draw) and
//! `History` (the `repl_history` file). `LineReader` puts them on the
//! terminal: raw mode only while a line is read, so a running turn sees a
//! cooked terminal (Ctrl-C is SIGINT, approvals read whole lines), and the
//! saved modes are put back on every way out: return, error, panic (the hook
//! in main.rs), `--timeout`, SIGTERM or SIGHUP at the prompt.

use crate::sys;
use crate::sys::term::{Input, RawMode};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Lines kept in the history (in memory and in the file).
pub const HISTORY_CAP: usize = 1000;

/// How long a lone Esc waits for the rest of a sequence.
const ESC_WAIT_MS: i32 = 100;

/// A bracketed paste that goes quiet this long is over, end marker or not
/// (a marker lost on the way must not leave Ctrl-C and Ctrl-D dead).
const PASTE_IDLE_MS: i32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A character to insert: printable, or a tab.
    Char(char),
    Enter,
    Backspace,
    Delete,
    Left,
    Right,
    Home,
    End,
    WordLeft,
    WordRight,
    Up,
    Down,
    /// Ctrl-U: everything before the cursor.
    KillStart,
    /// Ctrl-K: everything from the cursor on.
    KillEnd,
    /// Ctrl-W: back to the previous whitespace.
    KillWordBack,
    /// Alt-Backspace: the word (letters and digits) before the cursor.
    KillAlnumBack,
    /// Alt-D: the word after the cursor.
    KillWordForward,
    /// Ctrl-Y: what the last kill took.
    Yank,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D: end of input on an empty line, else Delete.
    EofOrDelete,
    /// Ctrl-L.
    ClearScreen,
    /// Ctrl-Z.
    Suspend,
}

/// Terminal bytes to keys. Bytes that do not make a whole key yet (an
/// escape sequence or a UTF-8 character cut between two reads) wait for
/// the next `push`; `give_up` drops them when nothing more comes.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    /// Inside a bracketed paste: only text and line ends count.
    paste: bool,
    /// The last key was a `\r`: a `\n` right after it is the same line end.
    after_cr: bool,
}

enum Esc {
    Incomplete,
    Key(Key, usize),
    PasteStart(usize),
    PasteEnd(usize),
    Skip(usize),
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 4096 && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes are waiting that make no key yet.
    pub fn pending(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Inside a bracketed paste.
    pub fn in_paste(&self) -> bool {
        self.paste
    }

    /// Nothing followed: a lone Esc is dropped (it has no binding), and so
    /// is the first byte of a cut UTF-8 character; with nothing waiting, a
    /// paste is over.
    pub fn give_up(&mut self) {
        if self.pending() {
            self.pos += 1;
        } else {
            self.paste = false;
        }
    }

    pub fn next_key(&mut self) -> Option<Key> {
        loop {
            let rest = &self.buf[self.pos..];
            let &b = rest.first()?;
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                self.pos += 1;
                continue;
            }
            let key = match b {
                0x1b => match escape(rest) {
                    Esc::Incomplete => return None,
                    Esc::Key(k, n) => {
                        self.pos += n;
                        if self.paste {
                            continue;
                        }
                        return Some(k);
                    }
                    Esc::PasteStart(n) => {
                        self.pos += n;
                        self.paste = true;
                        continue;
                    }
                    Esc::PasteEnd(n) => {
                        self.pos += n;
                        self.paste = false;
                        continue;
                    }
                    Esc::Skip(n) => {
                        self.pos += n;
                        continue;
                    }
                },
                b'\r' => {
                    self.after_cr = true;
                    Some(Key::Enter)
                }
                b'\n' => Some(Key::Enter),
                b'\t' => Some(Key::Char('\t')),
                // A paste is text: its control bytes are no commands.
                0..0x20 | 0x7f if self.paste => None,
                0x01 => Some(Key::Home),
                0x02 => Some(Key::Left),
                0x03 => Some(Key::Interrupt),
                0x04 => Some(Key::EofOrDelete),
                0x05 => Some(Key::End),
                0x06 => Some(Key::Right),
                0x08 | 0x7f => Some(Key::Backspace),
                0x0b => Some(Key::KillEnd),
                0x0c => Some(Key::ClearScreen),
                0x0e => Some(Key::Down),
                0x10 => Some(Key::Up),
                0x15 => Some(Key::KillStart),
                0x17 => Some(Key::KillWordBack),
                0x19 => Some(Key::Yank),
                0x1a => Some(Key::Suspend),
                0..0x20 => None,
                0x20..0x7f => Some(Key::Char(b as char)),
                _ => match utf8(rest) {
                    Utf8::Incomplete => return None,
                    Utf8::Char(c, n) => {
                        self.pos += n;
                        if insertable(c) {
                            return Some(Key::Char(c));
                        }
                        continue;
                    }
                    Utf8::Invalid => None,
                },
            };
            self.pos += 1;
            if key.is_some() {
                return key;
            }
        }
    }
}

enum Utf8 {
    Incomplete,
    Char(char, usize),
    Invalid,
}

fn utf8(rest: &[u8]) -> Utf8 {
    let need = match rest[0] {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return Utf8::Invalid,
    };
    if rest.len() < need {
        // Wait for the rest only if what came so far can still be valid.
        if rest[1..].iter().all(|b| b & 0xc0 == 0x80) {
            return Utf8::Incomplete;
        }
        return Utf8::Invalid;
    }
    match std::str::from_utf8(&rest[..need]) {
        Ok(s) => Utf8::Char(s.chars().next().unwrap_or('\u{fffd}'), need),
        Err(_) => Utf8::Invalid,
    }
}

/// An escape sequence at the start of `rest` (which starts with ESC).
fn escape(rest: &[u8]) -> Esc {
    let Some(&second) = rest.get(1) else {
        return Esc::Incomplete;
    };
    match second {
        b'[' => csi(rest),
        b'O' => match rest.get(2) {
            None => Esc::Incomplete,
            Some(&c) => match arrow(c) {
                Some(k) => Esc::Key(k, 3),
                None => Esc::Skip(3),
            },
        },
        b'b' | b'B' => Esc::Key(Key::WordLeft, 2),
        b'f' | b'F' => Esc::Key(Key::WordRight, 2),
        b'd' | b'D' => Esc::Key(Key::KillWordForward, 2),
        0x7f | 0x08 => Esc::Key(Key::KillAlnumBack, 2),
        // Alt with another ASCII key has no binding; anything else (a
        // second Esc, a UTF-8 lead byte) starts a key of its own.
        0x20..0x7f => Esc::Skip(2),
        _ => Esc::Skip(1),
    }
}

fn arrow(c: u8) -> Option<Key> {
    Some(match c {
        b'A' => Key::Up,
        b'B' => Key::Down,
        b'C' => Key::Right,
        b'D' => Key::Left,
        b'H' => Key::Home,
        b'F' => Key::End,
        _ => return None,
    })
}

/// `ESC [ params final`: arrows (with Ctrl or Alt, a word), Home/End in
/// both spellings, Delete, and the bracketed-paste markers.
fn csi(rest: &[u8]) -> Esc {
    let mut i = 2;
    loop {
        let Some(&b) = rest.get(i) else {
            // A sequence this long is no key: drop it rather than wait.
            return if i > 32 {
                Esc::Skip(i)
            } else {
                Esc::Incomplete
            };
        };
        match b {
            0x20..=0x3f => i += 1,
            0x40..=0x7e => break,
            _ => return Esc::Skip(i),
        }
    }
    let n = i + 1;
    let params = std::str::from_utf8(&rest[2..i]).unwrap_or("");
    let mut nums = params.split(';');
    let first = nums.next().unwrap_or("");
    let modifier = nums.next().unwrap_or("");
    let key = match rest[i] {
        b'~' => match first {
            "1" | "7" => Key::Home,
            "4" | "8" => Key::End,
            "3" => Key::Delete,
            "200" => return Esc::PasteStart(n),
            "201" => return Esc::PasteEnd(n),
            _ => return Esc::Skip(n),
        },
        c => match (arrow(c), modifier) {
            // 5: Ctrl, 3: Alt.
            (Some(Key::Left), "5" | "3") => Key::WordLeft,
            (Some(Key::Right), "5" | "3") => Key::WordRight,
            (Some(k), _) => k,
            (None, _) => return Esc::Skip(n),
        },
    };
    Esc::Key(key, n)
}

/// What may go into the line: no control characters (a tab is shown as a
/// space), and no bidirectional overrides, which would reorder the row
/// on the screen.
fn insertable(c: char) -> bool {
    c == '\t' || !(c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
}

/// Columns `c` takes on a terminal: 0 for combining marks and joiners, 2
/// for East Asian wide characters and most emoji, else 1.
pub fn char_width(c: char) -> usize {
    let u = c as u32;
    if u < 0x300 {
        return 1;
    }
    let within = |table: &[(u32, u32)]| {
        table
            .binary_search_by(|&(lo, hi)| {
                if hi < u {
                    std::cmp::Ordering::Less
                } else if lo > u {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    };
    if within(ZERO) {
        0
    } else if within(WIDE) {
        2
    } else {
        1
    }
}

const ZERO: &[(u32, u32)] = &[
    (0x0300, 0x036f),
    (0x0483, 0x0489),
    (0x0591, 0x05bd),
    (0x0610, 0x061a),
    (0x064b, 0x065f),
    (0x0e31, 0x0e31),
    (0x0e34, 0x0e3a),
    (0x0e47, 0x0e4e),
    (0x1160, 0x11ff),
    (0x1ab0, 0x1aff),
    (0x1dc0, 0x1dff),
    (0x200b, 0x200f),
    (0x20d0, 0x20ff),
    (0xfe00, 0xfe0f),
    (0xfe20, 0xfe2f),
    (0x1f3fb, 0x1f3ff),
    (0xe0100, 0xe01ef),
];

const WIDE: &[(u32, u32)] = &[
    (0x1100, 0x115f),
    (0x231a, 0x231b),
    (0x2329, 0x232a),
    (0x23e9, 0x23ec),
    (0x23f0, 0x23f0),
    (0x23f3, 0x23f3),
    (0x25fd, 0x25fe),
    (0x2614, 0x2615),
    (0x2648, 0x2653),
    (0x267f, 0x267f),
    (0x2693, 0x2693),
    (0x26a1, 0x26a1),
    (0x26aa, 0x26ab),
    (0x26bd, 0x26be),
    (0x26c4, 0x26c5),
    (0x26ce, 0x26ce),
    (0x26d4, 0x26d4),
    (0x26ea, 0x26ea),
    (0x26f2, 0x26f3),
    (0x26f5, 0x26f5),
    (0x26fa, 0x26fa),
    (0x26fd, 0x26fd),
    (0x2705, 0x2705),
    (0x270a, 0x270b),
    (0x2728, 0x2728),
    (0x274c, 0x274c),
    (0x274e, 0x274e),
    (0x2753, 0x2755),
    (0x2757, 0x2757),
    (0x2795, 0x2797),
    (0x27b0, 0x27b0),
    (0x27bf, 0x27bf),
    (0x2b1b, 0x2b1c),
    (0x2b50, 0x2b50),
    (0x2b55, 0x2b55),
    (0x2e80, 0x303e),
    (0x3041, 0x33ff),
    (0x3400, 0x4dbf),
    (0x4e00, 0x9fff),
    (0xa000, 0xa4cf),
    (0xa960, 0xa97f),
    (0xac00, 0xd7a3),
    (0xf900, 0xfaff),
    (0xfe10, 0xfe19),
    (0xfe30, 0xfe6f),
    (0xff00, 0xff60),
    (0xffe0, 0xffe6),
    (0x16fe0, 0x16fe4),
    (0x17000, 0x18aff),
    (0x1b000, 0x1b2ff),
    (0x1f004, 0x1f004),
    (0x1f0cf, 0x1f0cf),
    (0x1f18e, 0x1f18e),
    (0x1f191, 0x1f19a),
    (0x1f200, 0x1f202),
    (0x1f210, 0x1f23b),
    (0x1f240, 0x1f248),
    (0x1f250, 0x1f251),
    (0x1f260, 0x1f265),
    (0x1f300, 0x1f320),
    (0x1f32d, 0x1f335),
    (0x1f337, 0x1f37c),
    (0x1f37e, 0x1f393),
    (0x1f3a0, 0x1f3ca),
    (0x1f3cf, 0x1f3d3),
    (0x1f3e0, 0x1f3f0),
    (0x1f3f4, 0x1f3f4),
    (0x1f3f8, 0x1f3fa),
    (0x1f400, 0x1f43e),
    (0x1f440, 0x1f440),
    (0x1f442, 0x1f4fc),
    (0x1f4ff, 0x1f53d),
    (0x1f54b, 0x1f54e),
    (0x1f550, 0x1f567),
    (0x1f57a, 0x1f57a),
    (0x1f595, 0x1f596),
    (0x1f5a4, 0x1f5a4),
    (0x1f5fb, 0x1f64f),
    (0x1f680, 0x1f6c5),
    (0x1f6cc, 0x1f6cc),
    (0x1f6d0, 0x1f6d2),
    (0x1f6d5, 0x1f6d7),
    (0x1f6dc, 0x1f6df),
    (0x1f6eb, 0x1f6ec),
    (0x1f6f4, 0x1f6fc),
    (0x1f7e0, 0x1f7eb),
    (0x1f7f0, 0x1f7f0),
    (0x1f90c, 0x1f93a),
    (0x1f93c, 0x1f945),
    (0x1f947, 0x1f9ff),
    (0x1fa70, 0x1faff),
    (0x20000, 0x2fffd),
    (0x30000, 0x3fffd),
];

/// Where the character cluster at byte `i` ends: a character, the
/// zero-width marks after it, and whatever a zero-width joiner ties on.
fn next_boundary(s: &str, i: usize) -> usize {
    let mut chars = s[i..].char_indices();
    let mut joined = chars.next().is_some_and(|(_, c)| c == ZWJ);
    for (j, c) in chars {
        if !joined && char_width(c) != 0 {
            return i + j;
        }
        joined = c == ZWJ;
    }
    s.len()
}

/// Where the cluster that ends at byte `i` starts.
fn prev_boundary(s: &str, i: usize) -> usize {
    let mut j = i;
    while let Some(c) = s[..j].chars().next_back() {
        j -= c.len_utf8();
        let joined = s[..j].ends_with(ZWJ);
        if j == 0 || (char_width(c) != 0 && !joined) {
            break;
        }
    }
    j
}

const ZWJ: char = '\u{200d}';

/// Columns a cluster takes: its widest character's (marks and joined
/// characters draw over one another).
fn cluster_width(cluster: &str) -> usize {
    cluster.chars().map(char_width).max().unwrap_or(0)
}

pub fn str_width(s: &str) -> usize {
    let mut i = 0;
    let mut w = 0;
    while i < s.len() {
        let j = next_boundary(s, i);
        w += cluster_width(&s[i..j]);
        i = j;
    }
    w
}

/// What a key did, for the terminal to act on.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// The line may have changed: draw it again.
    Edited,
    /// Enter: the line, taken out of the editor.
    Accept(String),
    /// Ctrl-D on an empty line.
    Eof,
    /// Ctrl-C: the line given up.
    Interrupt(String),
    ClearScreen,
    Suspend,
}

/// The line being edited: its text, the cursor (a byte offset on a
/// character boundary), the history it can walk through and the draft
/// kept while it does.
pub struct Editor {
    buf: String,
    cursor: usize,
    pub history: History,
    /// Which history entry is shown; `None`: the draft.
    pos: Option<usize>,
    draft: String,
    kill: String,
    /// The first byte of the line on the screen (the row scrolls sideways).
    offset: usize,
}

impl Editor {
    pub fn new(history: History) -> Editor {
        Editor {
            buf: String::new(),
            cursor: 0,
            history,
            pos: None,
            draft: String::new(),
            kill: String::new(),
            offset: 0,
        }
    }

    #[cfg(test)]
    pub fn line(&self) -> &str {
        &self.buf
    }

    #[cfg(test)]
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Clears the line and goes back to the draft (after Enter or Ctrl-C).
    fn reset(&mut self) -> String {
        self.cursor = 0;
        self.offset = 0;
        self.pos = None;
        self.draft.clear();
        std::mem::take(&mut self.buf)
    }

    fn set_line(&mut self, text: String) {
        self.buf = text;
        self.cursor = self.buf.len();
        self.offset = 0;
    }

    /// Removes `from..to` and returns it.
    fn cut(&mut self, from: usize, to: usize) -> String {
        let taken: String = self.buf.drain(from..to).collect();
        self.cursor = from;
        taken
    }

    fn kill_range(&mut self, from: usize, to: usize) {
        if from < to {
            self.kill = self.cut(from, to);
        }
    }

    /// The start of the word before the cursor: `word` tells word
    /// characters from separators.
    fn word_start(&self, word: impl Fn(char) -> bool) -> usize {
        let before = &self.buf[..self.cursor];
        let end = before.trim_end_matches(|c: char| !word(c)).len();
        before[..end].trim_end_matches(&word).len()
    }

    fn word_end(&self, word: impl Fn(char) -> bool) -> usize {
        let after = &self.buf[self.cursor..];
        let skip = after.len() - after.trim_start_matches(|c: char| !word(c)).len();
        let rest = &after[skip..];
        self.cursor + skip + (rest.len() - rest.trim_start_matches(&word).len())
    }

    pub fn apply(&mut self, key: Key) -> Action {
        let alnum = |c: char| c.is_alphanumeric() || c == '_';
        match key {
            Key::Char(c) => {
                self.buf.insert(self.cursor, c);
                self.cursor += c.len_utf8();
            }
            Key::Enter => return Action::Accept(self.reset()),
            Key::Interrupt => return Action::Interrupt(self.reset()),
            Key::EofOrDelete if self.buf.is_empty() => return Action::Eof,
            Key::Delete | Key::EofOrDelete => {
                if self.cursor < self.buf.len() {
                    let end = next_boundary(&self.buf, self.cursor);
                    self.cut(self.cursor, end);
                }
            }
            Key::Backspace => {
                if self.cursor > 0 {
                    let start = prev_boundary(&self.buf, self.cursor);
                    self.cut(start, self.cursor);
                }
            }
            Key::Left => {
                if self.cursor > 0 {
                    self.cursor = prev_boundary(&self.buf, self.cursor);
                }
            }
            Key::Right => {
                if self.cursor < self.buf.len() {
                    self.cursor = next_boundary(&self.buf, self.cursor);
                }
            }
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.buf.len(),
            Key::WordLeft => self.cursor = self.word_start(alnum),
            Key::WordRight => self.cursor = self.word_end(alnum),
            Key::KillStart => self.kill_range(0, self.cursor),
            Key::KillEnd => self.kill_range(self.cursor, self.buf.len()),
            Key::KillWordBack => {
                let start = self.word_start(|c| !c.is_whitespace());
                self.kill_range(start, self.cursor);
            }
            Key::KillAlnumBack => self.kill_range(self.word_start(alnum), self.cursor),
            Key::KillWordForward => self.kill_range(self.cursor, self.word_end(alnum)),
            Key::Yank => {
                self.buf.insert_str(self.cursor, &self.kill);
                self.cursor += self.kill.len();
            }
            Key::Up => {
                let len = self.history.entries.len();
                let to = match self.pos {
                    None if len > 0 => {
                        self.draft = std::mem::take(&mut self.buf);
                        len - 1
                    }
                    Some(i) if i > 0 => i - 1,
                    _ => return Action::Edited,
                };
                self.pos = Some(to);
                self.set_line(self.history.entries[to].clone());
            }
            Key::Down => match self.pos {
                Some(i) if i + 1 < self.history.entries.len() => {
                    self.pos = Some(i + 1);
                    self.set_line(self.history.entries[i + 1].clone());
                }
                Some(_) => {
                    self.pos = None;
                    let draft = std::mem::take(&mut self.draft);
                    self.set_line(draft);
                }
                None => {}
            },
            Key::ClearScreen => return Action::ClearScreen,
            Key::Suspend => return Action::Suspend,
        }
        Action::Edited
    }

    /// The row as it should be on a terminal `cols` wide: `\r`, the prompt,
    /// the part of the line that fits, erase to the end, and the cursor put
    /// back. One column stays free so the cursor never wraps the row.
    pub fn render(&mut self, prompt: &str, cols: usize) -> String {
        let mut pw = str_width(prompt);
        let mut room = cols.saturating_sub(1 + pw);
        if room < 8 {
            // Too narrow for the prompt and some text: the text wins.
            pw = 0;
            room = cols.saturating_sub(1);
        }
        let s = self.buf.as_str();
        // Keep the cursor in the window, moving it as little as possible.
        if self.offset > s.len() || !s.is_char_boundary(self.offset) {
            self.offset = 0;
        }
        if self.cursor < self.offset {
            self.offset = self.cursor;
        }
        let mut w = str_width(&s[self.offset..self.cursor]);
        while w > room {
            let next = next_boundary(s, self.offset).min(self.cursor);
            w = w.saturating_sub(cluster_width(&s[self.offset..next]));
            self.offset = next;
        }
        // Show as much as fits when the end of the line is in view.
        let mut tail = w + str_width(&s[self.cursor..]);
        while self.offset > 0 {
            let prev = prev_boundary(s, self.offset);
            let cw = cluster_width(&s[prev..self.offset]);
            if tail + cw > room {
                break;
            }
            tail += cw;
            w += cw;
            self.offset = prev;
        }
        let mut out = String::with_capacity(prompt.len() + room * 2 + 16);
        out.push('\r');
        if pw > 0 {
            out.push_str(prompt);
        }
        let mut shown = 0;
        let mut i = self.offset;
        while i < s.len() {
            let j = next_boundary(s, i);
            let cw = cluster_width(&s[i..j]);
            if shown + cw > room {
                break;
            }
            shown += cw;
            out.push_str(&s[i..j].replace('\t', " "));
            i = j;
        }
        out.push_str("\x1b[K\r");
        let col = pw + w;
        if col > 0 {
            out.push_str(&format!("\x1b[{col}C"));
        }
        out
    }
}

/// The lines typed before, oldest first, and the file they are kept in
/// (one a line, plain text, 0600).
pub struct History {
    entries: Vec<String>,
    cap: usize,
    file: Option<PathBuf>,
    /// Lines in the file (it is trimmed to `cap` when it grows past it).
    file_lines: usize,
}

impl History {
    /// A history kept in memory only.
    pub fn new(cap: usize) -> History {
        History {
            entries: Vec::new(),
            cap: cap.max(1),
            file: None,
            file_lines: 0,
        }
    }

    #[cfg(test)]
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Loads the history at `path`; a missing file is an empty history.
    /// On an error the history stays in memory only, with the error.
    pub fn load(path: &Path, cap: usize) -> (History, Option<std::io::Error>) {
        let mut h = History::new(cap);
        match read_history(path) {
            Ok(lines) => {
                h.file_lines = lines.len();
                for line in lines {
                    h.remember(&line);
                }
                h.file = Some(path.to_path_buf());
                if h.file_lines > h.cap {
                    let err = h.trim_file().err();
                    return (h, err);
                }
                (h, None)
            }
            Err(e) => (h, Some(e)),
        }
    }

    /// Keeps `line` unless it is blank, starts with a space (kept out on
    /// purpose) or repeats the entry before it. True when kept.
    pub fn remember(&mut self, line: &str) -> bool {
        let line: String = line.chars().filter(|&c| insertable(c)).collect();
        if line.trim().is_empty()
            || line.starts_with(' ')
            || self.entries.last().is_some_and(|l| *l == line)
        {
            return false;
        }
        self.entries.push(line);
        if self.entries.len() > self.cap {
            let extra = self.entries.len() - self.cap;
            self.entries.drain(..extra);
        }
        true
    }

    /// `remember`, and append it to the file. A write error stops writing
    /// (the history stays in memory) and is returned once.
    pub fn add(&mut self, line: &str) -> std::io::Result<()> {
        if !self.remember(line) {
            return Ok(());
        }
        let Some(path) = self.file.clone() else {
            return Ok(());
        };
        let mut entry = self.entries.last().cloned().unwrap_or_default();
        entry.push('\n');
        let result = open_private(path.as_path(), libc::O_APPEND)
            .and_then(|mut f| f.write_all(entry.as_bytes()))
            .and_then(|_| {
                self.file_lines += 1;
                if self.file_lines > self.cap {
                    self.trim_file()
                } else {
                    Ok(())
                }
            });
        if result.is_err() {
            self.file = None;
        }
        result
    }

    /// Rewrites the file with its last `cap` entries. It is read again, so
    /// lines another REPL appended meanwhile are kept.
    fn trim_file(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let mut lines = read_history(path)?;
        if lines.len() > self.cap {
            lines.drain(..lines.len() - self.cap);
        }
        let tmp = path.with_file_name(format!(".repl_history.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let written = open_private(&tmp, libc::O_EXCL).and_then(|mut f| {
            let mut text = lines.join("\n");
            text.push('\n');
            f.write_all(text.as_bytes())
        });
        if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.file_lines = lines.len();
        Ok(())
    }
}

/// Opens `path` for writing, created 0600, never through a symlink; an
/// existing file readable by others is made 0600.
fn open_private(path: &Path, flags: libc::c_int) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .append(flags & libc::O_APPEND != 0)
        .create_new(flags & libc::O_EXCL != 0)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    if meta.permissions().mode() & 0o077 != 0 {
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// The file's non-empty lines; none when it does not exist.
fn read_history(path: &Path) -> std::io::Result<Vec<String>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = Vec::new();
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(mut f) => f.read_to_end(&mut bytes)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

// ---- the terminal ----

/// Puts the terminal back as it was if the line editor has it in raw mode
/// (ending a line on the screen): for the panic hook and any path that
/// exits the process. Async-signal-safe.
pub fn restore_terminal() {
    sys::term::restore_terminal();
}

/// The terminating signal that ended the REPL at its prompt, if one did:
/// the caller ends the run by it.
pub fn stop_signal() -> Option<i32> {
    sys::term::stop_signal()
}

fn write_err(bytes: &[u8]) -> std::io::Result<()> {
    let mut err = std::io::stderr().lock();
    err.write_all(bytes)?;
    err.flush()
}

/// The terminal's width in columns; 80 when it cannot be told.
fn columns() -> usize {
    sys::term::stderr_width()
        .or_else(sys::term::stdin_width)
        .unwrap_or(80)
}

/// Where the REPL's lines come from: the editor on a terminal, else plain
/// lines from stdin as they are (pipes, `TERM=dumb`).
pub struct LineReader {
    edit: Option<(Editor, Decoder)>,
    /// Why the history file is not (or no longer) used, to say once.
    warning: Option<String>,
}

impl LineReader {
    /// The editor when stdin and stderr are terminals and `TERM` is not
    /// `dumb`, its history kept at `history` (with `None`, in memory only).
    pub fn new(history: Option<&Path>) -> LineReader {
        use std::io::IsTerminal;
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        if dumb || !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
            return LineReader {
                edit: None,
                warning: None,
            };
        }
        let (h, err) = match history {
            Some(p) => History::load(p, HISTORY_CAP),
            None => (History::new(HISTORY_CAP), None),
        };
        let warning = err.map(|e| {
            let path = history.map(|p| p.display().to_string()).unwrap_or_default();
            format!("the REPL history {path} is not used: {e}")
        });
        LineReader {
            edit: Some((Editor::new(h), Decoder::default())),
            warning,
        }
    }

    /// Whether lines are edited (else read plain).
    pub fn editing(&self) -> bool {
        self.edit.is_some()
    }

    /// A problem with the history file, once.
    pub fn take_warning(&mut self) -> Option<String> {
        self.warning.take()
    }

    /// The next line without its line end; `None` at the end of input
    /// (Ctrl-D on an empty line, or a closed terminal).
    pub fn read_line(&mut self, prompt: &str) -> std::io::Result<Option<String>> {
        let Some((editor, decoder)) = &mut self.edit else {
            use std::io::BufRead;
            write_err(prompt.as_bytes())?;
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let end = line.trim_end_matches(['\n', '\r']).len();
            line.truncate(end);
            return Ok(Some(line));
        };
        let line = edit_line(editor, decoder, prompt)?;
        if let Some(l) = &line
            && let Err(e) = editor.history.add(l)
        {
            self.warning = Some(format!("the REPL history is no longer saved: {e}"));
        }
        Ok(line)
    }
}

/// Reads one line in raw mode. The guard puts the terminal back on every
/// way out of here, `?` included.
fn edit_line(
    editor: &mut Editor,
    decoder: &mut Decoder,
    prompt: &str,
) -> std::io::Result<Option<String>> {
    let mut raw = Some(RawMode::enter()?);
    let mut dirty = true;
    let mut buf = [0u8; 4096];
    loop {
        if sys::term::stop_signal().is_some() {
            return Ok(None);
        }
        while let Some(key) = decoder.next_key() {
            match editor.apply(key) {
                Action::Edited => dirty = true,
                Action::Accept(line) => {
                    // The whole line stays in the scrollback, wrapped by
                    // the terminal: it will not be edited again.
                    let shown = line.replace('\t', " ");
                    write_err(format!("\r\x1b[K{prompt}{shown}\r\n").as_bytes())?;
                    drop(raw);
                    return Ok(Some(line));
                }
                Action::Interrupt(line) => {
                    let shown = line.replace('\t', " ");
                    write_err(format!("\r\x1b[K{prompt}{shown}^C\r\n").as_bytes())?;
                    dirty = true;
                }
                Action::Eof => {
                    drop(raw);
                    return Ok(None);
                }
                Action::ClearScreen => {
                    write_err(b"\x1b[H\x1b[2J")?;
                    dirty = true;
                }
                Action::Suspend => {
                    // Stopped like any program on Ctrl-Z, in cooked mode;
                    // raw again once continued.
                    drop(raw.take());
                    write_err(b"\r\n")?;
                    sys::signal::raise(libc::SIGTSTP);
                    raw = Some(RawMode::enter()?);
                    dirty = true;
                }
            }
        }
        if dirty {
            write_err(editor.render(prompt, columns()).as_bytes())?;
            dirty = false;
        }
        // Bytes of a key still to come (a lone Esc?) are waited for briefly.
        let wait = if decoder.pending() {
            ESC_WAIT_MS
        } else if decoder.in_paste() {
            PASTE_IDLE_MS
        } else {
            -1
        };
        match sys::term::wait_input(wait) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
            Ok(Input::TimedOut) => {
                decoder.give_up();
                continue;
            }
            Ok(Input::Woken) => continue,
            Ok(Input::Ready) => {}
        }
        let n = match sys::term::read_input(&mut buf) {
            Ok(n) => n,
            Err(e) => match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                // The terminal went away: the end of input.
                _ if e.raw_os_error() == Some(libc::EIO) => return Ok(None),
                _ => return Err(e),
            },
        };
        if n == 0 {
            return Ok(None);
        }
        decoder.push(&buf[..n]);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut d = Decoder::default();
        d.push(bytes);
        std::iter::from_fn(|| d.next_key()).collect()
    }

    /// Types `bytes` into a fresh editor with `history`; the line and the
    /// actions that were not plain edits.
    fn typed(history: &[&str], bytes: &[u8]) -> (Editor, Vec<Action>) {
        let mut h = History::new(100);
        for l in history {
            h.remember(l);
        }
        let mut e = Editor::new(h);
        let mut d = Decoder::default();
        d.push(bytes);
        let mut actions = Vec::new();
        while let Some(k) = d.next_key() {
            match e.apply(k) {
                Action::Edited => {}
                a => actions.push(a),
            }
        }
        (e, actions)
    }

    fn line(bytes: &[u8]) -> String {
        typed(&[], bytes).0.line().to_string()
    }

    fn accepted(history: &[&str], bytes: &[u8]) -> Vec<String> {
        typed(history, bytes)
            .1
            .into_iter()
            .filter_map(|a| match a {
                Action::Accept(l) => Some(l),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn keys_decode_from_their_usual_spellings() {
        use Key::*;
        assert_eq!(
            keys(b"a\x1b[D\x1b[C\x1b[A\x1b[B\x1bOD\x1bOC\x1bOA\x1bOB"),
            [Char('a'), Left, Right, Up, Down, Left, Right, Up, Down]
        );
        assert_eq!(
            keys(b"\x1b[H\x1b[F\x1bOH\x1bOF\x1b[1~\x1b[4~\x1b[7~\x1b[8~\x1b[3~"),
            [Home, End, Home, End, Home, End, Home, End, Delete]
        );
        assert_eq!(
            keys(b"\x01\x05\x02\x06\x15\x0b\x17\x19\x03\x04\x0c\x1a\x7f\x08\x10\x0e"),
            [
                Home,
                End,
                Left,
                Right,
                KillStart,
                KillEnd,
                KillWordBack,
                Yank,
                Interrupt,
                EofOrDelete,
                ClearScreen,
                Suspend,
                Backspace,
                Backspace,
                Up,
                Down
            ]
        );
        assert_eq!(
            keys(b"\x1b[1;5D\x1b[1;5C\x1b[1;3D\x1bb\x1bf\x1bd\x1b\x7f"),
            [
                WordLeft,
                WordRight,
                WordLeft,
                WordLeft,
                WordRight,
                KillWordForward,
                KillAlnumBack
            ]
        );
        // Unbound sequences and control bytes are dropped whole.
        assert_eq!(
            keys(b"\x1b[15~x\x1b[1;2Px\x1bOPx\x1bxy\x00\x1f"),
            [Char('x'), Char('x'), Char('x'), Char('y')]
        );
        // \r, \n and \r\n are one Enter each; a tab is text.
        assert_eq!(keys(b"\r\n\n\r\t"), [Enter, Enter, Enter, Char('\t')]);
    }

    #[test]
    fn utf8_and_sequences_split_between_reads_wait_for_the_rest() {
        let mut d = Decoder::default();
        let bytes = "é日🙂\x1b[D".as_bytes();
        let mut got = Vec::new();
        for b in bytes {
            d.push(&[*b]);
            got.extend(std::iter::from_fn(|| d.next_key()));
        }
        assert_eq!(
            got,
            [Key::Char('é'), Key::Char('日'), Key::Char('🙂'), Key::Left]
        );
        assert!(!d.pending());
        // Invalid UTF-8 is dropped, the valid text around it kept.
        assert_eq!(
            keys(b"a\xffb\xc3(c\xe6\x97"),
            [
                Key::Char('a'),
                Key::Char('b'),
                Key::Char('('),
                Key::Char('c')
            ]
        );
        // C1 controls and bidi overrides never reach the line.
        assert_eq!(
            keys("x\u{85}\u{202e}y".as_bytes()),
            [Key::Char('x'), Key::Char('y')]
        );
    }

    #[test]
    fn a_lone_esc_is_given_up_when_nothing_follows() {
        let mut d = Decoder::default();
        d.push(b"\x1b");
        assert_eq!(d.next_key(), None);
        assert!(d.pending());
        d.give_up();
        assert!(!d.pending());
        d.push(b"x");
        assert_eq!(d.next_key(), Some(Key::Char('x')));
        // A cut character is given up byte by byte, then typing goes on.
        let mut d = Decoder::default();
        d.push(&"日".as_bytes()[..2]);
        assert_eq!(d.next_key(), None);
        d.give_up();
        assert_eq!(d.next_key(), None);
        d.give_up();
        d.push(b"ok");
        assert_eq!(d.next_key(), Some(Key::Char('o')));
    }

    #[test]
    fn a_paste_is_text_and_its_line_ends_accept() {
        let got = accepted(
            &[],
            b"\x1b[200~one\x01\x03\x1b[D two\r\nsecond\x1b[201~\x01>\r",
        );
        // Inside the paste Ctrl-A, Ctrl-C and an arrow are no commands;
        // after it Ctrl-A is again.
        assert_eq!(got, ["one two", ">second"]);
        // A paste whose end marker never comes ends when it goes quiet.
        let mut d = Decoder::default();
        d.push(b"\x1b[200~text\x01");
        assert_eq!(std::iter::from_fn(|| d.next_key()).count(), 4);
        assert!(d.in_paste());
        d.give_up();
        assert!(!d.in_paste());
        d.push(b"\x01");
        assert_eq!(d.next_key(), Some(Key::Home));
        // A long paste in one read.
        let long = "x".repeat(10_000);
        assert_eq!(line(long.as_bytes()), long);
    }

    #[test]
    fn moving_and_inserting() {
        assert_eq!(line(b"wrld\x1b[D\x1b[D\x02o"), "world");
        assert_eq!(line(b"world\x01hello \x05!"), "hello world!");
        assert_eq!(line(b"bc\x1b[Ha\x1b[Fd"), "abcd");
        assert_eq!(line(b"ac\x1b[1~\x1b[Cb\x1b[4~d"), "abcd");
        // Past either end the cursor stays put.
        assert_eq!(line(b"b\x1b[D\x1b[Da\x1b[C\x1b[Cc"), "abc");
        assert_eq!(line(b"one two\x1b[1;5Dx\x1b[1;5C\x1b[1;5Cy"), "one xtwoy");
        let (e, _) = typed(&[], b"abc\x1b[D");
        assert_eq!(e.cursor(), 2);
    }

    #[test]
    fn deleting_and_killing() {
        assert_eq!(line(b"abcd\x7f\x7f"), "ab");
        assert_eq!(line(b"abcd\x01\x1b[3~\x1b[3~"), "cd");
        assert_eq!(line(b"abcd\x01\x04"), "bcd");
        assert_eq!(line(b"\x7f\x1b[3~x"), "x");
        assert_eq!(line(b"junk text\x15kept"), "kept");
        assert_eq!(line(b"keep cut\x1b[D\x1b[D\x1b[D\x0b"), "keep ");
        assert_eq!(line(b"keep this\x01\x1b[C\x1b[C\x15"), "ep this");
        assert_eq!(line(b"one two  three\x17\x17four"), "one four");
        assert_eq!(line(b"path/to/file\x1b\x7f"), "path/to/");
        assert_eq!(line(b"path/to/file\x17"), "");
        assert_eq!(line(b"one two\x01\x1bd"), " two");
        // Ctrl-Y puts back what the last kill took.
        assert_eq!(line(b"hello world\x17\x01\x19 "), "world hello ");
    }

    #[test]
    fn multibyte_characters_move_and_delete_as_one() {
        assert_eq!(line("naïve\x1b[D\x1b[D\x7f".as_bytes()), "nave");
        assert_eq!(line("日本語\x1b[D\x7f".as_bytes()), "日語");
        assert_eq!(line("a🙂b\x1b[D\x1b[D\x1b[3~".as_bytes()), "ab");
        // A letter with a combining accent is one cluster.
        assert_eq!(line("xe\u{301}\x7f".as_bytes()), "x");
        assert_eq!(line("e\u{301}y\x01\x1b[Cz".as_bytes()), "e\u{301}zy");
        // An emoji sequence joined by ZWJ.
        let family = "👩\u{200d}👧";
        assert_eq!(line(format!("a{family}\x7f").as_bytes()), "a");
        assert_eq!(
            line(format!("{family}b\x01\x1b[Cx").as_bytes()),
            format!("{family}xb")
        );
        assert_eq!(line("über größe\x17".as_bytes()), "über ");
        assert_eq!(str_width("日本"), 4);
        assert_eq!(str_width("e\u{301}"), 1);
        assert_eq!(str_width("🙂x"), 3);
        assert_eq!(str_width(family), 2);
    }

    #[test]
    fn enter_interrupt_and_end_of_input() {
        let (e, actions) = typed(&[], b"first\rsecond\x03third\x01\x04\x04\x04\x04\x04\x04");
        assert_eq!(
            actions,
            [
                Action::Accept("first".into()),
                Action::Interrupt("second".into()),
                Action::Eof
            ]
        );
        assert_eq!(e.line(), "");
        // Ctrl-L and Ctrl-Z leave the line alone.
        let (e, actions) = typed(&[], b"ab\x0c\x1a");
        assert_eq!(actions, [Action::ClearScreen, Action::Suspend]);
        assert_eq!(e.line(), "ab");
    }

    #[test]
    fn history_browsing_keeps_the_draft() {
        let h = ["one", "two", "three"];
        assert_eq!(accepted(&h, b"\x1b[A\r"), ["three"]);
        assert_eq!(accepted(&h, b"\x1b[A\x1b[A\x1b[A\x1b[A\r"), ["one"]);
        // Up, then down again: the draft is back, cursor at its end.
        assert_eq!(accepted(&h, b"dra\x1b[A\x1b[A\x1b[B\x1b[Bft\r"), ["draft"]);
        // Down at the draft does nothing.
        assert_eq!(accepted(&h, b"x\x1b[B\x1b[By\r"), ["xy"]);
        // A recalled line can be edited before it is sent.
        assert_eq!(accepted(&h, b"\x1b[A\x10\x7fo!\r"), ["two!"]);
        // After Enter or Ctrl-C the walk starts at the newest again.
        assert_eq!(accepted(&h, b"\x1b[A\x1b[A\x03\x1b[A\r"), ["three"]);
        // Lines added between reads (as the REPL does after Enter) are
        // where the next walk starts.
        let (mut e, _) = typed(&h, b"");
        e.apply(Key::Char('x'));
        assert_eq!(e.apply(Key::Enter), Action::Accept("x".into()));
        e.history.remember("x");
        for k in [Key::Char('d'), Key::Up, Key::Up, Key::Down, Key::Down] {
            e.apply(k);
        }
        assert_eq!(e.line(), "d");
        e.apply(Key::Up);
        assert_eq!(e.line(), "x");
        // Without history, Up keeps the line.
        assert_eq!(accepted(&[], b"abc\x1b[A\r"), ["abc"]);
    }

    #[test]
    fn history_skips_blank_repeated_and_space_led_lines_and_is_capped() {
        let mut h = History::new(3);
        for l in ["a", "a", "", "   ", " secret", "b", "a", "c\x1b[2J", "d"] {
            h.remember(l);
        }
        assert_eq!(h.entries(), ["a", "c[2J", "d"]);
    }

    fn temp_dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("latchclaw-lineedit-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_history_file_is_0600_appended_trimmed_and_reloaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("file");
        let path = dir.join("repl_history");
        let (mut h, err) = History::load(&path, 3);
        assert!(err.is_none() && h.entries().is_empty());
        for l in ["one", "two", "two", " hidden", "three"] {
            h.add(l).unwrap();
        }
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\ntwo\nthree\n");
        // Past the cap the file keeps the newest lines.
        h.add("four").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "two\nthree\nfour\n"
        );
        // Another session appended meanwhile: its line is kept on a trim.
        std::fs::write(&path, "two\nthree\nfour\nelsewhere\n").unwrap();
        h.file_lines = 4;
        h.add("five").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "four\nelsewhere\nfive\n"
        );
        // Loading trims an oversized file and drops blank lines; a file
        // others could read is made 0600 on the next write.
        std::fs::write(&path, "a\n\nb\nc\nd\ne\n").unwrap();
        let (mut h, err) = History::load(&path, 3);
        assert!(err.is_none());
        assert_eq!(h.entries(), ["c", "d", "e"]);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "c\nd\ne\n");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        h.add("f").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_history_symlink_is_refused_and_a_write_error_reported_once() {
        let dir = temp_dir("link");
        let target = dir.join("elsewhere");
        std::fs::write(&target, "x\n").unwrap();
        let path = dir.join("repl_history");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let (mut h, err) = History::load(&path, 10);
        assert!(err.is_some());
        assert!(h.entries().is_empty());
        // In memory only: nothing is written through the link.
        h.add("typed").unwrap();
        assert_eq!(h.entries(), ["typed"]);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
        // A file that cannot be written: one error, then memory only.
        let path = dir.join("sub").join("repl_history");
        let (mut h, err) = History::load(&path, 10);
        assert!(err.is_none());
        assert!(h.add("one").is_err());
        assert!(h.add("two").is_ok());
        assert_eq!(h.entries(), ["one", "two"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The row a render draws: the visible text (between the prompt and
    /// the erase) and the cursor's column.
    fn row(e: &mut Editor, prompt: &str, cols: usize) -> (String, usize) {
        let out = e.render(prompt, cols);
        let body = out.strip_prefix('\r').unwrap();
        let (text, cursor) = body.split_once("\x1b[K\r").unwrap();
        let col = cursor
            .strip_prefix("\x1b[")
            .and_then(|c| c.strip_suffix('C'))
            .map_or(0, |c| c.parse().unwrap());
        (text.to_string(), col)
    }

    #[test]
    fn a_short_line_is_drawn_whole_with_the_cursor_in_place() {
        let (mut e, _) = typed(&[], "日本 ok\x1b[D".as_bytes());
        assert_eq!(row(&mut e, "> ", 80), ("> 日本 ok".to_string(), 2 + 6));
        let (mut e, _) = typed(&[], b"a\tb\x01");
        assert_eq!(row(&mut e, "> ", 80), ("> a b".to_string(), 2));
    }

    #[test]
    fn a_long_line_scrolls_sideways_and_never_fills_the_row() {
        let text: String = "start-".to_string() + &"x".repeat(80) + "-end";
        let (mut e, _) = typed(&[], text.as_bytes());
        let (shown, col) = row(&mut e, "p> ", 30);
        assert!(
            shown.starts_with("p> ") && shown.ends_with("-end"),
            "{shown}"
        );
        assert_eq!(str_width(&shown), 29);
        assert_eq!(col, 29);
        // Home shows the start; the row still fits.
        e.apply(Key::Home);
        let (shown, col) = row(&mut e, "p> ", 30);
        assert!(
            shown.starts_with("p> start-") && !shown.contains("end"),
            "{shown}"
        );
        assert!(str_width(&shown) <= 29);
        assert_eq!(col, 3);
        // Moving right past the edge scrolls by as little as needed.
        for _ in 0..30 {
            e.apply(Key::Right);
        }
        let (shown, col) = row(&mut e, "p> ", 30);
        assert!(str_width(&shown) <= 29 && col <= 29, "{shown} {col}");
        assert!(shown.starts_with("p> ") && !shown.contains("start"));
        // Wide characters never straddle the edge.
        let wide = "日".repeat(40);
        let (mut e, _) = typed(&[], wide.as_bytes());
        for cols in [10, 11, 30, 31] {
            let (shown, col) = row(&mut e, "> ", cols);
            assert!(str_width(&shown) < cols, "{cols}: {shown}");
            assert!(col < cols);
            e.apply(Key::Left);
        }
        // Deleting at the end pulls the window back so the row stays full.
        let (mut e, _) = typed(&[], text.as_bytes());
        row(&mut e, "p> ", 30);
        for _ in 0..10 {
            e.apply(Key::Backspace);
        }
        let (shown, _) = row(&mut e, "p> ", 30);
        assert_eq!(str_width(&shown), 29, "{shown}");
    }

    #[test]
    fn a_terminal_too_narrow_for_the_prompt_shows_the_text() {
        let (mut e, _) = typed(&[], b"abcdefghijklmnop");
        let (shown, col) = row(&mut e, "latchclaw> ", 12);
        assert_eq!((shown.as_str(), col), ("fghijklmnop", 11));
        let (shown, col) = row(&mut e, "latchclaw> ", 1);
        assert_eq!((shown.as_str(), col), ("", 0));
    }
}
