//! The command grammar latchclaw runs itself, without `/bin/sh`.
//!
//! A model's command string is parsed here into a [`Script`]: a list of
//! pipelines joined by `;`, newlines, `&&` and `||`; each pipeline a list of
//! simple commands; each command words, `NAME=value` prefixes and
//! redirections. Nothing else is accepted: every other shell construct is
//! refused with a message that names it and says what to do instead, because
//! a construct latchclaw does not run itself would have to be handed to a
//! shell, and a shell that parses the string differently from the gate is
//! how gates are walked around.
//!
//! Words are kept as pieces (literal text, quoted or not; `$NAME`; a leading
//! `~`) so that expansion (see `plan.rs`) knows exactly which characters
//! came from quotes.

use super::refusal::Refused;

/// How a pipeline is joined to the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// The first pipeline, or after `;` / newline: runs whatever happened.
    Seq,
    /// After `&&`: runs if the previous pipeline succeeded.
    And,
    /// After `||`: runs if the previous pipeline failed.
    Or,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text; `quoted` text is never globbed or split.
    Lit { text: String, quoted: bool },
    /// `$NAME` or `${NAME}`.
    Var { name: String, quoted: bool },
    /// An unquoted `~` at the start of a word (`~` or `~/...`).
    Tilde,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawWord {
    pub pieces: Vec<Piece>,
}

impl RawWord {
    /// The word as typed, for messages.
    pub fn display(&self) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Lit { text, .. } => s.push_str(text),
                Piece::Var { name, .. } => {
                    s.push('$');
                    s.push_str(name);
                }
                Piece::Tilde => s.push('~'),
            }
        }
        s
    }

    fn push_lit(&mut self, c: char, quoted: bool) {
        if let Some(Piece::Lit { text, quoted: q }) = self.pieces.last_mut()
            && *q == quoted
        {
            text.push(c);
            return;
        }
        self.pieces.push(Piece::Lit {
            text: c.to_string(),
            quoted,
        });
    }

    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// True when the word is one unquoted literal equal to `s`.
    fn is_plain(&self, s: &str) -> bool {
        matches!(self.pieces.as_slice(), [Piece::Lit { text, quoted: false }] if text == s)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirOp {
    /// `<`
    Read,
    /// `>` and `>|`
    Write,
    /// `>>`
    Append,
    /// `>&N`, `<&N`: the descriptor becomes a copy of N.
    Dup,
    /// `&>`: stdout and stderr to one file.
    WriteBoth,
    /// `&>>`
    AppendBoth,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRedir {
    pub fd: u32,
    pub op: RedirOp,
    pub target: RawWord,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawCommand {
    pub assigns: Vec<(String, RawWord)>,
    pub words: Vec<RawWord>,
    pub redirs: Vec<RawRedir>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPipeline {
    pub negate: bool,
    pub commands: Vec<RawCommand>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub items: Vec<(Connector, RawPipeline)>,
}

/// Words that start shell syntax latchclaw does not run.
const RESERVED: &[(&str, &str)] = &[
    ("if", "an `if` statement"),
    ("then", "an `if` statement"),
    ("else", "an `if` statement"),
    ("elif", "an `if` statement"),
    ("fi", "an `if` statement"),
    ("case", "a `case` statement"),
    ("esac", "a `case` statement"),
    ("for", "a `for` loop"),
    ("while", "a `while` loop"),
    ("until", "an `until` loop"),
    ("do", "a loop"),
    ("done", "a loop"),
    ("select", "a `select` loop"),
    ("function", "a function definition"),
    ("{", "a `{ …; }` group"),
    ("}", "a `{ …; }` group"),
    ("[[", "a `[[ … ]]` test"),
    ("]]", "a `[[ … ]]` test"),
];

/// Shell builtins that have no program to run, or that run strings.
const BUILTINS: &[(&str, &str)] = &[
    ("eval", "`eval` runs a string as shell code"),
    ("exec", "`exec` replaces the shell"),
    ("source", "`source` runs a file as shell code"),
    (".", "`.` runs a file as shell code"),
    ("alias", "aliases are not supported"),
    ("unalias", "aliases are not supported"),
    (
        "export",
        "`export` has no effect here: put `NAME=value` before the command that needs it",
    ),
    (
        "unset",
        "`unset` has no effect here: each command gets a fresh minimal environment",
    ),
    ("set", "`set` has no effect here"),
    ("local", "`local` has no effect here"),
    ("readonly", "`readonly` has no effect here"),
    ("declare", "`declare` has no effect here"),
    ("typeset", "`typeset` has no effect here"),
    ("trap", "`trap` is not supported"),
    ("shift", "`shift` has no effect here"),
    ("return", "`return` has no effect here"),
    ("exit", "`exit` has no effect here"),
    ("let", "arithmetic is not supported"),
    ("read", "`read` has no input here"),
    ("ulimit", "`ulimit` is not supported"),
    ("umask", "`umask` is not supported"),
    ("wait", "background jobs are not supported"),
    ("jobs", "background jobs are not supported"),
    ("fg", "background jobs are not supported"),
    ("bg", "background jobs are not supported"),
    ("disown", "background jobs are not supported"),
    (
        "pushd",
        "use `cd DIR && COMMAND` or paths relative to the workspace",
    ),
    (
        "popd",
        "use `cd DIR && COMMAND` or paths relative to the workspace",
    ),
    ("hash", "`hash` has no effect here"),
    ("type", "use `which NAME`"),
    ("command", "run the program directly"),
    ("builtin", "run the program directly"),
];

/// A refusal: which construct, and what to do instead.
fn unsupported(what: &str, instead: &str) -> Refused {
    Refused::command(format!(
        "{what} is not supported (latchclaw runs commands itself, without a shell); {instead}"
    ))
}

const WRITE_INSTEAD: &str = "write the text with file_write, then pass the file";
const SPLIT_INSTEAD: &str = "run the commands as separate shell calls and pass values literally";

/// Bytes of command text the parser accepts (a command line, not a program).
pub const MAX_COMMAND_BYTES: usize = 16 * 1024;

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
}

/// Parses a command line. `Err` is a refusal message for the model.
pub fn parse(src: &str) -> Result<Script, Refused> {
    if src.len() > MAX_COMMAND_BYTES {
        return Err(Refused::command(format!(
            "the command is {} bytes; the limit is {MAX_COMMAND_BYTES}: {WRITE_INSTEAD}",
            src.len()
        )));
    }
    if src.contains('\0') {
        return Err(Refused::command("the command contains a NUL byte"));
    }
    let mut p = Parser {
        s: src.as_bytes(),
        src,
        pos: 0,
    };
    let mut items = Vec::new();
    let mut connector = Connector::Seq;
    loop {
        p.skip_blanks_and_newlines();
        if p.at_end() {
            if connector != Connector::Seq {
                return Err(Refused::command("the command ends with `&&` or `||`"));
            }
            break;
        }
        let pipeline = p.pipeline()?;
        items.push((connector, pipeline));
        p.skip_blanks();
        connector = match p.peek() {
            None => break,
            Some(b';') if p.peek_at(1) == Some(b';') => {
                return Err(unsupported("`;;` (a `case` statement)", SPLIT_INSTEAD));
            }
            Some(b';') | Some(b'\n') => {
                p.pos += 1;
                Connector::Seq
            }
            Some(b'&') if p.peek_at(1) == Some(b'&') => {
                p.pos += 2;
                Connector::And
            }
            Some(b'|') if p.peek_at(1) == Some(b'|') => {
                p.pos += 2;
                Connector::Or
            }
            Some(c) => return Err(p.unexpected(c)),
        };
    }
    if items.is_empty() {
        return Err(Refused::command("empty command"));
    }
    Ok(Script { items })
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }
    fn peek_at(&self, n: usize) -> Option<u8> {
        self.s.get(self.pos + n).copied()
    }
    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }

    /// The character at the cursor (the source is UTF-8; positions only ever
    /// stop on ASCII bytes or char boundaries).
    fn next_char(&mut self) -> char {
        let c = self.src[self.pos..].chars().next().unwrap_or('\u{fffd}');
        self.pos += c.len_utf8();
        c
    }

    fn skip_blanks(&mut self) {
        loop {
            match self.peek() {
                Some(b' ' | b'\t') => self.pos += 1,
                Some(b'\\') if self.peek_at(1) == Some(b'\n') => self.pos += 2,
                Some(b'#') => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    fn skip_blanks_and_newlines(&mut self) {
        loop {
            self.skip_blanks();
            if self.peek() == Some(b'\n') {
                self.pos += 1;
            } else {
                return;
            }
        }
    }

    fn unexpected(&self, c: u8) -> Refused {
        match c {
            b'&' => unsupported(
                "`&` (running in the background)",
                "run the command in the foreground",
            ),
            b'(' | b')' => unsupported("a `( … )` subshell", SPLIT_INSTEAD),
            b'|' if self.peek_at(1) == Some(b'&') => {
                unsupported("`|&`", "use `2>&1 |` to pipe stderr too")
            }
            _ => Refused::command(format!("unexpected `{}`", c as char)),
        }
    }

    fn pipeline(&mut self) -> Result<RawPipeline, Refused> {
        self.skip_blanks();
        let mut negate = false;
        if self.peek() == Some(b'!') && matches!(self.peek_at(1), Some(b' ' | b'\t')) {
            negate = true;
            self.pos += 1;
        }
        let mut commands = vec![self.command()?];
        loop {
            self.skip_blanks();
            if self.peek() == Some(b'|') && self.peek_at(1) != Some(b'|') {
                if self.peek_at(1) == Some(b'&') {
                    return Err(self.unexpected(b'|'));
                }
                self.pos += 1;
                self.skip_blanks_and_newlines();
                commands.push(self.command()?);
            } else {
                break;
            }
        }
        Ok(RawPipeline { negate, commands })
    }

    fn command(&mut self) -> Result<RawCommand, Refused> {
        let mut cmd = RawCommand::default();
        loop {
            self.skip_blanks();
            let Some(c) = self.peek() else { break };
            match c {
                b'\n' | b';' => break,
                b'|' => break,
                b'&' if self.peek_at(1) == Some(b'&') => break,
                b'&' if self.peek_at(1) == Some(b'>') => {
                    self.pos += 2;
                    let op = if self.peek() == Some(b'>') {
                        self.pos += 1;
                        RedirOp::AppendBoth
                    } else {
                        RedirOp::WriteBoth
                    };
                    let target = self.redir_target("&>")?;
                    cmd.redirs.push(RawRedir { fd: 1, op, target });
                }
                b'&' | b'(' | b')' => return Err(self.unexpected(c)),
                b'<' | b'>' => cmd.redirs.push(self.redirection(None)?),
                b'0'..=b'9' => {
                    let start = self.pos;
                    let mut end = start;
                    while self.s.get(end).is_some_and(u8::is_ascii_digit) {
                        end += 1;
                    }
                    if matches!(self.s.get(end), Some(b'<' | b'>')) {
                        let fd: u32 = self.src[start..end].parse().unwrap_or(u32::MAX);
                        self.pos = end;
                        cmd.redirs.push(self.redirection(Some(fd))?);
                    } else {
                        self.word_into(&mut cmd)?;
                    }
                }
                _ => self.word_into(&mut cmd)?,
            }
        }
        if cmd.words.is_empty() {
            if !cmd.assigns.is_empty() {
                return Err(unsupported(
                    "a variable assignment on its own",
                    "put `NAME=value` before the command that needs it (`LANG=C sort f`)",
                ));
            }
            if !cmd.redirs.is_empty() {
                return Err(unsupported(
                    "a redirection with no command",
                    "create files with file_write",
                ));
            }
            return Err(Refused::command(match self.peek() {
                Some(c) => format!("missing command before `{}`", c as char),
                None => "missing command".into(),
            }));
        }
        Ok(cmd)
    }

    /// Reads one word and files it as an assignment or an argument.
    fn word_into(&mut self, cmd: &mut RawCommand) -> Result<(), Refused> {
        let start = self.pos;
        let w = self.word()?;
        if cmd.words.is_empty() {
            if let Some((name, value)) = split_assignment(&w) {
                cmd.assigns.push((name, value));
                return Ok(());
            }
            let typed = &self.src[start..self.pos];
            if let Some((_, what)) = RESERVED.iter().find(|(r, _)| w.is_plain(r)) {
                return Err(unsupported(what, SPLIT_INSTEAD));
            }
            if let Some((_, why)) = BUILTINS.iter().find(|(b, _)| w.is_plain(b)) {
                return Err(Refused::command(format!("`{typed}`: {why}")));
            }
            // `name() …` defines a function.
            self.skip_blanks();
            if self.peek() == Some(b'(') {
                return Err(unsupported("a function definition", SPLIT_INSTEAD));
            }
        }
        cmd.words.push(w);
        Ok(())
    }

    fn redirection(&mut self, fd: Option<u32>) -> Result<RawRedir, Refused> {
        let c = self.peek().unwrap_or(b'>');
        self.pos += 1;
        let next = self.peek();
        if next == Some(b'(') {
            return Err(unsupported(
                "process substitution `<( … )` / `>( … )`",
                WRITE_INSTEAD,
            ));
        }
        let (op, shown) = match (c, next) {
            (b'<', Some(b'<')) => {
                let what = if self.peek_at(1) == Some(b'<') {
                    "a here-string `<<<`"
                } else {
                    "a heredoc `<<`"
                };
                return Err(unsupported(what, WRITE_INSTEAD));
            }
            (b'<', Some(b'>')) => {
                return Err(unsupported(
                    "`<>` (open for reading and writing)",
                    WRITE_INSTEAD,
                ));
            }
            (b'<', Some(b'&')) => {
                self.pos += 1;
                (RedirOp::Dup, "<&")
            }
            (b'<', _) => (RedirOp::Read, "<"),
            (_, Some(b'>')) => {
                self.pos += 1;
                (RedirOp::Append, ">>")
            }
            (_, Some(b'&')) => {
                self.pos += 1;
                (RedirOp::Dup, ">&")
            }
            (_, Some(b'|')) => {
                self.pos += 1;
                (RedirOp::Write, ">|")
            }
            _ => (RedirOp::Write, ">"),
        };
        let default_fd = if c == b'<' { 0 } else { 1 };
        let fd = fd.unwrap_or(default_fd);
        let target = self.redir_target(shown)?;
        // `>&file` is bash for `&>file`.
        if op == RedirOp::Dup && !target.is_plain("-") && !is_digits(&target) {
            if c == b'>' && fd == 1 {
                return Ok(RawRedir {
                    fd,
                    op: RedirOp::WriteBoth,
                    target,
                });
            }
            return Err(Refused::command(format!(
                "`{shown}` needs a descriptor number (`2>&1`); found `{}`",
                target.display()
            )));
        }
        Ok(RawRedir { fd, op, target })
    }

    fn redir_target(&mut self, shown: &str) -> Result<RawWord, Refused> {
        self.skip_blanks();
        match self.peek() {
            None | Some(b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')') => Err(
                Refused::command(format!("redirection `{shown}` has no target")),
            ),
            _ => self.word(),
        }
    }

    fn word(&mut self) -> Result<RawWord, Refused> {
        let mut w = RawWord::default();
        let word_start = self.pos;
        // An unquoted `{` followed later by an unquoted `,` or `..` and `}`
        // is brace expansion in bash; refused rather than guessed.
        let mut brace_open = false;
        let mut brace_list = false;
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' => break,
                b'(' | b')' => {
                    if self.pos == word_start {
                        return Err(self.unexpected(c));
                    }
                    return Err(unsupported(
                        "`(` or `)` inside a word (a subshell, function or extended glob)",
                        "quote the text if it is meant literally",
                    ));
                }
                b'\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'\n') => self.pos += 1,
                        Some(_) => {
                            let ch = self.next_char();
                            w.push_lit(ch, true);
                        }
                        None => w.push_lit('\\', false),
                    }
                }
                b'\'' => {
                    self.pos += 1;
                    let start = self.pos;
                    while self.peek().is_some_and(|c| c != b'\'') {
                        self.pos += 1;
                    }
                    if self.at_end() {
                        return Err(Refused::command("unterminated single quote"));
                    }
                    let text = &self.src[start..self.pos];
                    self.pos += 1;
                    for ch in text.chars() {
                        w.push_lit(ch, true);
                    }
                    if text.is_empty() {
                        w.pieces.push(Piece::Lit {
                            text: String::new(),
                            quoted: true,
                        });
                    }
                }
                b'"' => {
                    self.pos += 1;
                    self.double_quoted(&mut w)?;
                }
                b'$' => self.dollar(&mut w, false)?,
                b'`' => {
                    return Err(unsupported(
                        "command substitution (backticks)",
                        "run the inner command first, then use its output literally",
                    ));
                }
                b'~' if self.pos == word_start => {
                    self.pos += 1;
                    match self.peek() {
                        None
                        | Some(b'/' | b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>') => {
                            w.pieces.push(Piece::Tilde)
                        }
                        Some(b':') => w.pieces.push(Piece::Tilde),
                        _ => {
                            return Err(Refused::command(
                                "`~user` paths are not supported; use a path in the workspace",
                            ));
                        }
                    }
                }
                b'{' => {
                    brace_open = true;
                    self.pos += 1;
                    w.push_lit('{', false);
                }
                b',' if brace_open => {
                    brace_list = true;
                    self.pos += 1;
                    w.push_lit(',', false);
                }
                b'.' if brace_open && self.peek_at(1) == Some(b'.') => {
                    brace_list = true;
                    self.pos += 2;
                    w.push_lit('.', false);
                    w.push_lit('.', false);
                }
                b'}' if brace_list => {
                    return Err(unsupported(
                        "brace expansion `{a,b}` / `{1..3}`",
                        "write each word out in full",
                    ));
                }
                _ => {
                    let ch = self.next_char();
                    w.push_lit(ch, false);
                }
            }
        }
        if w.is_empty() && self.pos == word_start {
            return Err(match self.peek() {
                Some(c) => self.unexpected(c),
                None => Refused::command("missing word"),
            });
        }
        Ok(w)
    }

    fn double_quoted(&mut self, w: &mut RawWord) -> Result<(), Refused> {
        let mut any = false;
        loop {
            match self.peek() {
                None => return Err(Refused::command("unterminated double quote")),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'\n') => self.pos += 1,
                        Some(c @ (b'$' | b'`' | b'"' | b'\\')) => {
                            self.pos += 1;
                            w.push_lit(c as char, true);
                        }
                        _ => w.push_lit('\\', true),
                    }
                }
                Some(b'$') => self.dollar(w, true)?,
                Some(b'`') => {
                    return Err(unsupported(
                        "command substitution (backticks)",
                        "run the inner command first, then use its output literally",
                    ));
                }
                Some(_) => {
                    let ch = self.next_char();
                    w.push_lit(ch, true);
                }
            }
            any = true;
        }
        if !any {
            w.pieces.push(Piece::Lit {
                text: String::new(),
                quoted: true,
            });
        }
        Ok(())
    }

    fn dollar(&mut self, w: &mut RawWord, quoted: bool) -> Result<(), Refused> {
        self.pos += 1;
        match self.peek() {
            Some(b'(') if self.peek_at(1) == Some(b'(') => Err(unsupported(
                "arithmetic `$(( … ))`",
                "compute the value and write it literally",
            )),
            Some(b'(') => Err(unsupported(
                "command substitution `$( … )`",
                "run the inner command first, then use its output literally",
            )),
            Some(b'[') => Err(unsupported(
                "arithmetic `$[ … ]`",
                "compute the value and write it literally",
            )),
            Some(b'\'') if !quoted => Err(unsupported("`$'…'` quoting", "use plain single quotes")),
            Some(b'"') if !quoted => Err(unsupported("`$\"…\"` quoting", "use plain quotes")),
            Some(b'{') => {
                self.pos += 1;
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.pos += 1;
                }
                let name = &self.src[start..self.pos];
                if self.peek() != Some(b'}') || !is_name(name) {
                    return Err(unsupported(
                        "`${…}` forms other than `${NAME}` (defaults, lengths, substrings)",
                        "use `$NAME` or write the value literally",
                    ));
                }
                self.pos += 1;
                w.pieces.push(Piece::Var {
                    name: name.to_string(),
                    quoted,
                });
                Ok(())
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.pos += 1;
                }
                w.pieces.push(Piece::Var {
                    name: self.src[start..self.pos].to_string(),
                    quoted,
                });
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || b"@*#?$!-".contains(&c) => Err(unsupported(
                &format!("the special parameter `${}`", c as char),
                "write the value literally",
            )),
            // A lone `$` is literal, as in sh.
            _ => {
                w.push_lit('$', quoted);
                Ok(())
            }
        }
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn is_digits(w: &RawWord) -> bool {
    matches!(w.pieces.as_slice(), [Piece::Lit { text, .. }] if !text.is_empty() && text.bytes().all(|c| c.is_ascii_digit()))
}

/// `NAME=value` with an unquoted, literal `NAME=`.
fn split_assignment(w: &RawWord) -> Option<(String, RawWord)> {
    let Some(Piece::Lit {
        text,
        quoted: false,
    }) = w.pieces.first()
    else {
        return None;
    };
    let (name, rest) = text.split_once('=')?;
    if !is_name(name) {
        return None;
    }
    let mut value = RawWord::default();
    if !rest.is_empty() {
        value.pieces.push(Piece::Lit {
            text: rest.to_string(),
            quoted: false,
        });
    }
    value.pieces.extend(w.pieces[1..].iter().cloned());
    Some((name.to_string(), value))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        let sc = parse(s).unwrap();
        sc.items[0].1.commands[0]
            .words
            .iter()
            .map(RawWord::display)
            .collect()
    }

    #[test]
    fn plain_commands_and_quotes() {
        assert_eq!(words("ls -la"), ["ls", "-la"]);
        assert_eq!(
            words("echo 'a b' \"c d\" e\\ f"),
            ["echo", "a b", "c d", "e f"]
        );
        assert_eq!(words("echo \"$HOME/x\""), ["echo", "$HOME/x"]);
        assert_eq!(words("grep -n 'x' # comment"), ["grep", "-n", "x"]);
        assert_eq!(words("echo a\\\nb"), ["echo", "ab"]);
    }

    #[test]
    fn sequences_pipes_redirections() {
        let s = parse("a | b && c || d; e\nf").unwrap();
        let conns: Vec<Connector> = s.items.iter().map(|i| i.0).collect();
        use Connector::*;
        assert_eq!(conns, [Seq, And, Or, Seq, Seq]);
        assert_eq!(s.items[0].1.commands.len(), 2);
        let s = parse("sort < in > out 2>&1 2>>log &>both").unwrap();
        let r = &s.items[0].1.commands[0].redirs;
        assert_eq!(r.len(), 5);
        assert_eq!((r[0].fd, r[0].op), (0, RedirOp::Read));
        assert_eq!((r[1].fd, r[1].op), (1, RedirOp::Write));
        assert_eq!((r[2].fd, r[2].op), (2, RedirOp::Dup));
        assert_eq!((r[3].fd, r[3].op), (2, RedirOp::Append));
        assert_eq!((r[4].fd, r[4].op), (1, RedirOp::WriteBoth));
        let s = parse("LANG=C TZ=UTC sort f").unwrap();
        assert_eq!(s.items[0].1.commands[0].assigns.len(), 2);
    }

    #[test]
    fn refuses_everything_outside_the_grammar() {
        for (cmd, needle) in [
            ("cat <<EOF\nx\nEOF", "heredoc"),
            ("cat <<\"$(x)\"\nx\n$(x)", "heredoc"),
            ("cat <<< x", "here-string"),
            ("echo $(id)", "command substitution"),
            ("echo `id`", "backticks"),
            ("echo \"`id`\"", "backticks"),
            ("echo ${x:-'}'}", "${NAME}"),
            ("echo ${#x}", "${NAME}"),
            ("echo $((1+2))", "arithmetic"),
            ("diff <(ls) x", "process substitution"),
            ("(ls)", "subshell"),
            ("{ ls; }", "group"),
            ("f() { ls; }", "function"),
            ("for i in a; do ls; done", "for"),
            ("if true; then ls; fi", "if"),
            ("sleep 1 &", "background"),
            ("ls & pwd", "background"),
            ("echo {a,b}", "brace expansion"),
            ("echo x{1..3}", "brace expansion"),
            ("eval ls", "eval"),
            ("exec ls", "exec"),
            (". ./x", "shell code"),
            ("X=1", "assignment"),
            ("export X=1", "export"),
            ("echo $?", "special parameter"),
            ("echo $1", "special parameter"),
            ("echo $'\\x41'", "quoting"),
            ("ls |& cat", "|&"),
            ("cat ~root/x", "~user"),
            ("ls &&", "ends with"),
            ("> f", "no command"),
            ("echo 'open", "unterminated"),
            ("case x in a) ls;; esac", "case"),
        ] {
            let e = parse(cmd).expect_err(cmd);
            assert!(e.reason.contains(needle), "{cmd}: {e}");
            assert_eq!(e.kind, crate::security::refusal::Refusal::Command, "{cmd}");
        }
    }

    #[test]
    fn no_panic_on_odd_input() {
        let samples = [
            "", "$", "${", "'", "\"", "\\", "|", "&&", "2>", "İ$x", "~", "a=", "=a", ">&", "1>&x",
            "echo ${}", "${a", "\"${a}\"", "ls\t-l", "!", "! ls", "a|b|", "é'ü'",
        ];
        for s in samples {
            let _ = parse(s);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        let alphabet: Vec<char> = "ab $'\"\\|&;<>(){}~*?[]=#\n\t0129İé`".chars().collect();
        for _ in 0..20_000 {
            let n = rng.usize(0..24);
            let s: String = (0..n)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            let _ = parse(&s);
        }
    }
}
