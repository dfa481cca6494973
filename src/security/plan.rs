//! What a shell call will run, exactly: the plan the gate judged and the
//! runner (`tools/shell.rs`) executes. Words are expanded here — variables
//! from the child's own environment, `~`, globs against the file system —
//! so the gate judges final argv strings and the runner runs those same
//! strings, with no shell in between to reinterpret them.

use super::grammar::{Connector, Piece, RawWord};
use super::refusal::Refused;
use std::path::{Path, PathBuf};

/// Glob work limits: directory entries examined and matches returned.
const GLOB_MAX_SCANNED: usize = 100_000;
const GLOB_MAX_MATCHES: usize = 10_000;
/// Longest glob pattern accepted (after expansion).
const GLOB_MAX_PATTERN: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Truncate,
    Append,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redir {
    /// Descriptor `fd` (0–2) opened on a file the gate checked.
    Open {
        fd: u32,
        path: PathBuf,
        mode: OpenMode,
    },
    /// Descriptor `fd` becomes a copy of `to` (both 0–2).
    Dup { fd: u32, to: u32 },
    /// `N>&-`
    Close { fd: u32 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    /// The resolved executable; never looked up again at run time.
    pub program: PathBuf,
    pub argv: Vec<String>,
    /// The whole environment of the child (nothing else is inherited).
    pub env: Vec<(String, String)>,
    pub redirs: Vec<Redir>,
    /// What the sandbox lets this command do to git directories: it is git,
    /// and the gate judged a write (which still may not touch what runs
    /// code: `security::confine::view`).
    pub git: GitAccess,
}

/// See [`Cmd::git`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitAccess {
    /// Not git: `.git` read-only and its config masked.
    None,
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub connector: Connector,
    pub negate: bool,
    /// One command, or a pipeline.
    pub commands: Vec<Cmd>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Working directory of every command (the workspace, or a directory
    /// inside it given by a leading `cd DIR &&`).
    pub cwd: PathBuf,
    pub steps: Vec<Step>,
}

/// Expansion context: the child's environment and where relative globs start.
pub struct Expander<'a> {
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
    /// The path policy for directories a glob would list: a glob never
    /// looks inside a directory the tools may not read (its file names
    /// would reach the model in a denial message).
    pub may_list: &'a dyn Fn(&Path) -> Result<(), Refused>,
}

/// Variables a shell sets for itself; with no shell there is no value to
/// give, and an empty one would change what the command means (`kill $PPID`).
#[rustfmt::skip]
const SHELL_ONLY: &[&str] = &[
    "PPID", "BASHPID", "RANDOM", "SRANDOM", "SECONDS", "LINENO", "UID", "EUID", "GROUPS",
    "SHLVL", "OLDPWD", "BASH", "BASH_VERSION", "BASH_SOURCE", "BASH_COMMAND", "FUNCNAME",
    "PIPESTATUS", "REPLY", "OPTARG", "OPTIND", "HISTCMD", "EPOCHSECONDS", "EPOCHREALTIME",
];

fn check_var(name: &str) -> Result<(), Refused> {
    if SHELL_ONLY.contains(&name) {
        return Err(Refused::command(format!(
            "`${name}` is set by a shell, and latchclaw runs no shell; write the value literally"
        )));
    }
    Ok(())
}

impl Expander<'_> {
    pub fn var(&self, name: &str) -> &str {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Expands a word into zero or more argv strings. Unquoted expansions
    /// that would be split or globbed by a shell are refused instead of
    /// guessed at.
    pub fn word(&self, w: &RawWord) -> Result<Vec<String>, Refused> {
        // (char, quoted) pairs: quoted characters never act as glob syntax.
        let mut chars: Vec<(char, bool)> = Vec::new();
        let mut any_quoted = false;
        for p in &w.pieces {
            match p {
                Piece::Lit { text, quoted } => {
                    any_quoted |= *quoted;
                    chars.extend(text.chars().map(|c| (c, *quoted)));
                }
                Piece::Var { name, quoted } => {
                    check_var(name)?;
                    let v = self.var(name);
                    any_quoted |= *quoted;
                    if !quoted && v.chars().any(|c| c.is_whitespace() || "*?[".contains(c)) {
                        return Err(Refused::command(format!(
                            "`${name}` is unquoted and its value has spaces or glob characters; \
                             write \"${name}\" in double quotes"
                        )));
                    }
                    // Text that came from a variable is never glob syntax.
                    chars.extend(v.chars().map(|c| (c, true)));
                }
                Piece::Tilde => {
                    let home = self.var("HOME");
                    if home.is_empty() {
                        return Err(Refused::command("`~` used but HOME is not set"));
                    }
                    chars.extend(home.chars().map(|c| (c, true)));
                }
            }
        }
        let literal: String = chars.iter().map(|(c, _)| *c).collect();
        if chars.is_empty() && !any_quoted {
            // An unquoted word that expands to nothing disappears, as in sh.
            return Ok(Vec::new());
        }
        if !chars
            .iter()
            .any(|&(c, q)| !q && matches!(c, '*' | '?' | '['))
        {
            return Ok(vec![literal]);
        }
        let matches = glob(&chars, self.cwd, self.may_list)?;
        if matches.is_empty() {
            // No match: the pattern stays as written, as in sh.
            return Ok(vec![literal]);
        }
        Ok(matches)
    }

    /// A word that must stay one string (assignment values, redirection
    /// targets): no globbing, no field removal.
    pub fn single(&self, w: &RawWord) -> Result<String, Refused> {
        let mut out = String::new();
        for p in &w.pieces {
            match p {
                Piece::Lit { text, .. } => out.push_str(text),
                Piece::Var { name, .. } => {
                    check_var(name)?;
                    out.push_str(self.var(name));
                }
                Piece::Tilde => out.push_str(self.var("HOME")),
            }
        }
        Ok(out)
    }
}

/// One token of a wildcard pattern; `tools::glob` compiles its own path
/// globs into these and matches them with [`matches`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    Char(char),
    Any,
    Star,
    /// `[...]`: ranges, negated with `!` or `^`.
    Class(Vec<(char, char)>, bool),
}

fn compile(component: &[(char, bool)]) -> Vec<Tok> {
    let mut out: Vec<Tok> = Vec::new();
    let mut i = 0;
    while i < component.len() {
        let (c, quoted) = component[i];
        i += 1;
        if quoted {
            out.push(Tok::Char(c));
            continue;
        }
        match c {
            // Runs of stars are one star: `************q` costs what `*q` does.
            '*' if matches!(out.last(), Some(Tok::Star)) => {}
            '*' => out.push(Tok::Star),
            '?' => out.push(Tok::Any),
            '[' => {
                let mut j = i;
                let negate = matches!(component.get(j), Some(('!' | '^', false)));
                if negate {
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                let mut closed = false;
                while j < component.len() {
                    let (d, _) = component[j];
                    if d == ']' && !first {
                        closed = true;
                        j += 1;
                        break;
                    }
                    first = false;
                    if component.get(j + 1).is_some_and(|&(m, _)| m == '-')
                        && component.get(j + 2).is_some_and(|&(e, _)| e != ']')
                    {
                        ranges.push((d, component[j + 2].0));
                        j += 3;
                    } else {
                        ranges.push((d, d));
                        j += 1;
                    }
                }
                if closed {
                    out.push(Tok::Class(ranges, negate));
                    i = j;
                } else {
                    out.push(Tok::Char('['));
                }
            }
            c => out.push(Tok::Char(c)),
        }
    }
    out
}

fn tok_matches(t: &Tok, c: char) -> bool {
    match t {
        Tok::Char(x) => *x == c,
        Tok::Any => true,
        Tok::Class(ranges, negate) => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *negate,
        Tok::Star => true,
    }
}

/// `pattern` (`*`, `?`, `[…]`, nothing quoted) matched against one name.
pub(crate) fn glob_match(pattern: &str, name: &str) -> bool {
    matches(&compile_pattern(pattern), &name.chars().collect::<Vec<_>>())
}

/// `pattern` (`*`, `?`, `[…]`, nothing quoted) compiled once, for a caller
/// that matches it against many names.
pub(crate) fn compile_pattern(pattern: &str) -> Vec<Tok> {
    let chars: Vec<(char, bool)> = pattern.chars().map(|c| (c, false)).collect();
    compile(&chars)
}

/// Wildcard match without recursion: on a mismatch only the last star is
/// retried, so the cost is at most name length × pattern length.
pub(crate) fn matches(pat: &[Tok], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pat.get(p) {
            Some(Tok::Star) => {
                star = Some((p, n));
                p += 1;
            }
            Some(t) if tok_matches(t, name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pat[p..].iter().all(|t| matches!(t, Tok::Star))
}

/// Pathname expansion of one word: every component with glob syntax is
/// matched against a directory listing. Sorted, like sh.
fn glob(
    chars: &[(char, bool)],
    cwd: &Path,
    may_list: &dyn Fn(&Path) -> Result<(), Refused>,
) -> Result<Vec<String>, Refused> {
    let shown: String = chars.iter().map(|(c, _)| *c).collect();
    if chars.len() > GLOB_MAX_PATTERN {
        return Err(Refused::command(format!(
            "the glob pattern is {} characters; the limit is {GLOB_MAX_PATTERN}",
            chars.len()
        )));
    }
    let absolute = chars.first().is_some_and(|&(c, _)| c == '/');
    let components: Vec<&[(char, bool)]> = chars
        .split(|&(c, _)| c == '/')
        .filter(|c| !c.is_empty())
        .collect();
    let trailing_slash = chars.last().is_some_and(|&(c, _)| c == '/');
    let mut prefixes: Vec<String> = vec![if absolute { "/".into() } else { String::new() }];
    let mut scanned = 0usize;
    for (i, comp) in components.iter().enumerate() {
        let last = i + 1 == components.len();
        let has_glob = comp
            .iter()
            .any(|&(c, q)| !q && matches!(c, '*' | '?' | '['));
        let mut next = Vec::new();
        if !has_glob {
            let text: String = comp.iter().map(|(c, _)| *c).collect();
            for p in prefixes {
                next.push(format!("{p}{text}{}", if last { "" } else { "/" }));
            }
        } else {
            let pat = compile(comp);
            let explicit_dot = comp.first().is_some_and(|&(c, _)| c == '.');
            for p in &prefixes {
                let dir = if p.is_empty() {
                    cwd.to_path_buf()
                } else {
                    cwd.join(p)
                };
                may_list(&dir).map_err(|e| e.map_reason(|r| format!("the glob `{shown}`: {r}")))?;
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                for e in rd.flatten() {
                    scanned += 1;
                    if scanned > GLOB_MAX_SCANNED {
                        return Err(Refused::command(format!(
                            "the glob `{shown}` looks at more than {GLOB_MAX_SCANNED} files; \
                             narrow it"
                        )));
                    }
                    let name = e.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if name.starts_with('.') && !explicit_dot {
                        continue;
                    }
                    let name_chars: Vec<char> = name.chars().collect();
                    if !matches(&pat, &name_chars) {
                        continue;
                    }
                    if !last && !e.path().is_dir() {
                        continue;
                    }
                    next.push(format!("{p}{name}{}", if last { "" } else { "/" }));
                    if next.len() > GLOB_MAX_MATCHES {
                        return Err(Refused::command(format!(
                            "the glob `{shown}` matches more than {GLOB_MAX_MATCHES} files; \
                             narrow it"
                        )));
                    }
                }
            }
        }
        prefixes = next;
        if prefixes.is_empty() {
            return Ok(Vec::new());
        }
    }
    let mut out: Vec<String> = prefixes
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(cwd.join(p)).is_ok())
        .map(|p| if trailing_slash { format!("{p}/") } else { p })
        .collect();
    crate::util::sort::sort(&mut out);
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::security::grammar::parse;

    fn m(p: &str, n: &str) -> bool {
        let chars: Vec<(char, bool)> = p.chars().map(|c| (c, false)).collect();
        matches(&compile(&chars), &n.chars().collect::<Vec<_>>())
    }

    #[test]
    fn wildcard_matching() {
        assert!(m("*.rs", "main.rs"));
        assert!(!m("*.rs", "main.rc"));
        assert!(m("a?c", "abc"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[!a-c]x", "bx"));
        assert!(m("*a*b*c", "xxaxxbxxc"));
        assert!(m("[]]", "]"));
        assert!(m("[", "["));
    }

    #[test]
    fn pathological_patterns_are_fast() {
        let t = std::time::Instant::now();
        let pat = format!("{}q", "*".repeat(30_000));
        assert!(!m(&pat, &"a".repeat(255)));
        let pat = "*a".repeat(120) + "b";
        assert!(!m(&pat, &"a".repeat(255)));
        assert!(t.elapsed().as_millis() < 500, "{:?}", t.elapsed());
    }

    #[test]
    fn expands_variables_tilde_and_globs() {
        let dir = std::env::temp_dir().join(format!("lc-plan-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        for f in ["a.txt", "b.txt", ".hidden.txt", "src/x.rs"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let env = vec![
            ("HOME".to_string(), "/home/u".to_string()),
            ("SP".to_string(), "a b".to_string()),
        ];
        let x = Expander {
            env: &env,
            cwd: &dir,
            may_list: &|_| Ok(()),
        };
        let w = |s: &str| {
            let sc = parse(&format!("echo {s}")).unwrap();
            x.word(&sc.items[0].1.commands[0].words[1].clone())
        };
        assert_eq!(w("*.txt").unwrap(), ["a.txt", "b.txt"]);
        assert_eq!(w("'*.txt'").unwrap(), ["*.txt"]);
        assert_eq!(w("src/*.rs").unwrap(), ["src/x.rs"]);
        assert_eq!(w("*/x.rs").unwrap(), ["src/x.rs"]);
        assert_eq!(w("*.none").unwrap(), ["*.none"]);
        assert_eq!(w("$HOME/.ssh").unwrap(), ["/home/u/.ssh"]);
        assert_eq!(w("~/.ssh").unwrap(), ["/home/u/.ssh"]);
        assert_eq!(w("\"$SP\"").unwrap(), ["a b"]);
        assert!(w("$SP").is_err());
        assert!(w("$UNSET").unwrap().is_empty());
        assert_eq!(w("\"$UNSET\"").unwrap(), [""]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
