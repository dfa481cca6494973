//! Path globs for `grep` and `file_list`, and `.gitignore` rules.
//!
//! A glob is `/`-separated segments: `*` and `?` never match `/`, `[…]` is a
//! class (`[!…]` or `[^…]` negated, `a-z` ranges), `\` quotes the next
//! character, and a segment that is exactly `**` matches any number of
//! directories (none included). Matching never backtracks more than
//! segments × path components, and within a segment name length × pattern
//! length.
//!
//! `.gitignore`: blank lines and `#` comments are skipped, `!` re-includes,
//! a trailing `/` matches directories only, a pattern with a `/` before its
//! end is anchored to the file's directory, one without matches a name at
//! any depth; the last matching line of the deepest file that has one wins.
//! Not read: `.git/info/exclude`, `core.excludesFile`, and trailing spaces
//! quoted with `\`. A directory that is ignored is not entered, so nothing
//! under it can be re-included (git behaves the same).

use crate::security::plan::{Tok, matches};

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Name(Vec<Tok>),
    AnyDirs,
}

#[derive(Debug, Clone)]
pub struct Glob {
    segs: Vec<Seg>,
    /// Written without a `/`: matched against the last component only.
    pub basename: bool,
}

fn compile_seg(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => match it.next() {
                Some(n) => out.push(Tok::Char(n)),
                None => return Err("ends with a lone \\".into()),
            },
            '*' => {
                // `a**b` within one segment is a plain star.
                if out.last() != Some(&Tok::Star) {
                    out.push(Tok::Star);
                }
            }
            '?' => out.push(Tok::Any),
            '[' => {
                let mut negated = false;
                if matches!(it.peek(), Some('!' | '^')) {
                    negated = true;
                    it.next();
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let Some(c) = it.next() else {
                        return Err("has a [ without its ]".into());
                    };
                    if c == ']' && !first {
                        break;
                    }
                    first = false;
                    let lo = if c == '\\' {
                        it.next().ok_or("ends with a lone \\")?
                    } else {
                        c
                    };
                    if it.peek() == Some(&'-') {
                        it.next();
                        match it.peek() {
                            Some(']') | None => {
                                ranges.push((lo, lo));
                                ranges.push(('-', '-'));
                            }
                            Some(&hi) => {
                                it.next();
                                ranges.push((lo, hi));
                            }
                        }
                    } else {
                        ranges.push((lo, lo));
                    }
                }
                out.push(Tok::Class(ranges, negated));
            }
            c => out.push(Tok::Char(c)),
        }
    }
    Ok(out)
}

/// The shell's wildcard matcher (only the last star is retried on a
/// mismatch: name × pattern at most).
fn seg_matches(pat: &[Tok], name: &str) -> bool {
    matches(pat, &name.chars().collect::<Vec<_>>())
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        let p = pattern.strip_prefix('/').unwrap_or(pattern);
        if p.is_empty() {
            return Err(format!("glob \"{pattern}\" is empty"));
        }
        let basename = !pattern.contains('/');
        let mut segs = Vec::new();
        for s in p.split('/') {
            if s == "**" {
                if segs.last() != Some(&Seg::AnyDirs) {
                    segs.push(Seg::AnyDirs);
                }
            } else {
                let toks = compile_seg(s).map_err(|e| format!("glob \"{pattern}\" {e}"))?;
                segs.push(Seg::Name(toks));
            }
        }
        Ok(Glob { segs, basename })
    }

    /// `rel`: a `/`-separated path relative to where the glob applies.
    /// A basename glob looks at its last component only.
    pub fn matches(&self, rel: &str) -> bool {
        if self.basename {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            return match self.segs.as_slice() {
                [Seg::Name(t)] => seg_matches(t, name),
                _ => true,
            };
        }
        let parts: Vec<&str> = rel.split('/').filter(|s| !s.is_empty()).collect();
        let n = parts.len();
        // Which path positions each prefix of the pattern can end at.
        let mut cur = vec![false; n + 1];
        cur[0] = true;
        for seg in &self.segs {
            let mut next = vec![false; n + 1];
            match seg {
                Seg::AnyDirs => {
                    let mut on = false;
                    for i in 0..=n {
                        on |= cur[i];
                        next[i] = on;
                    }
                }
                Seg::Name(t) => {
                    for i in 0..n {
                        if cur[i] && seg_matches(t, parts[i]) {
                            next[i + 1] = true;
                        }
                    }
                }
            }
            if !next.iter().any(|b| *b) {
                return false;
            }
            cur = next;
        }
        cur[n]
    }
}

/// A comma-separated list of globs (`"*.rs,src/**/*.toml"`).
pub fn parse_list(arg: &str, what: &str) -> Result<Vec<Glob>, String> {
    let globs: Result<Vec<Glob>, String> = arg
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(Glob::new)
        .collect();
    match globs {
        Ok(g) if g.is_empty() => Err(format!(
            "\"{what}\" names no glob; give one or more separated by commas, e.g. \"*.rs,*.toml\""
        )),
        Ok(g) => Ok(g),
        Err(e) => Err(format!("\"{what}\": {e}")),
    }
}

#[derive(Debug)]
struct Rule {
    glob: Glob,
    negated: bool,
    dir_only: bool,
    /// The pattern's length: what matching it costs, per path byte.
    cost: usize,
}

/// `.gitignore` lines longer than this are skipped: one rule then costs
/// at most this many steps per byte of the path it is matched against.
const MAX_RULE: usize = 1024;

/// How much matching (pattern bytes times path bytes, what a rule costs
/// at most) is done between two looks at whether the walk must stop.
const CHECK_EVERY: usize = 1 << 20;

/// The walk was stopped while rules were matched.
#[derive(Debug, PartialEq)]
pub struct Halted;

/// The rules of one `.gitignore`, for paths relative to its directory.
#[derive(Debug)]
pub struct IgnoreFile {
    rules: Vec<Rule>,
}

impl IgnoreFile {
    /// Lines that do not compile are skipped, as git skips what it cannot read.
    pub fn parse(text: &str) -> IgnoreFile {
        let mut rules = Vec::new();
        for line in text.lines() {
            let line = line.trim_end_matches([' ', '\t', '\r']);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (negated, rest) = match line.strip_prefix('!') {
                Some(r) => (true, r),
                None => (false, line.strip_prefix('\\').unwrap_or(line)),
            };
            let (dir_only, rest) = match rest.strip_suffix('/') {
                Some(r) => (true, r),
                None => (false, rest),
            };
            if rest.is_empty() || rest.len() > MAX_RULE {
                continue;
            }
            // A `/` anywhere (a leading one included) anchors it; `**/x`
            // is anchored but still matches at any depth.
            let anchored = rest.contains('/');
            let Ok(mut glob) = Glob::new(rest) else {
                continue;
            };
            glob.basename = !anchored;
            rules.push(Rule {
                glob,
                negated,
                dir_only,
                cost: rest.len(),
            });
        }
        IgnoreFile { rules }
    }

    /// `Some(true)` ignored, `Some(false)` re-included, `None` no rule said.
    /// `stop` is asked every [`CHECK_EVERY`] steps of matching at most (a
    /// file of rules is workspace content, built to be slow or not).
    pub fn decide(
        &self,
        rel: &str,
        is_dir: bool,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<Option<bool>, Halted> {
        let mut spent = 0;
        for r in self.rules.iter().rev() {
            spent += r.cost * rel.len().max(1);
            if spent >= CHECK_EVERY {
                spent = 0;
                if stop() {
                    return Err(Halted);
                }
            }
            if (!r.dir_only || is_dir) && r.glob.matches(rel) {
                return Ok(Some(!r.negated));
            }
        }
        Ok(None)
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// The `.gitignore` files in force on a walk: each with the path of its
/// directory (relative to the walk's top, `""` or ending in `/`).
#[derive(Debug, Default)]
pub struct IgnoreStack {
    files: Vec<(String, IgnoreFile)>,
}

impl IgnoreStack {
    pub fn push(&mut self, base: String, file: IgnoreFile) {
        self.files.push((base, file));
    }

    /// Drops the files of directories the walk has left: those whose base
    /// is not a prefix of `dir` (relative to the top, ending in `/` or "").
    pub fn leave_to(&mut self, dir: &str) {
        while let Some((base, _)) = self.files.last() {
            if dir.starts_with(base.as_str()) {
                break;
            }
            self.files.pop();
        }
    }

    /// Whether `rel` (relative to the top) is ignored: the deepest file
    /// with a matching rule decides. `stop`: see [`IgnoreFile::decide`].
    pub fn ignored(
        &self,
        rel: &str,
        is_dir: bool,
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<bool, Halted> {
        for (base, f) in self.files.iter().rev() {
            let Some(sub) = rel.strip_prefix(base.as_str()) else {
                continue;
            };
            if let Some(v) = f.decide(sub, is_dir, stop)? {
                return Ok(v);
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn g(p: &str, path: &str) -> bool {
        Glob::new(p).unwrap().matches(path)
    }

    #[test]
    fn globs_match_names_paths_and_double_stars() {
        assert!(g("*.rs", "src/a.rs") && g("*.rs", "a.rs") && !g("*.rs", "a.rsx"));
        assert!(g("src/*.rs", "src/a.rs") && !g("src/*.rs", "src/x/a.rs"));
        assert!(g("src/**/*.rs", "src/a.rs") && g("src/**/*.rs", "src/x/y/a.rs"));
        assert!(g("**/b", "a/b") && g("**/b", "b") && !g("**/b", "a/bc"));
        assert!(g("a/**", "a/x/y") && !g("a/**", "b/x"));
        assert!(g("[a-c]?.txt", "b1.txt") && !g("[!a-c]?.txt", "b1.txt"));
        assert!(g("\\*x", "*x") && !g("\\*x", "ax"));
        assert!(g("/top.txt", "top.txt") && !g("/top.txt", "d/top.txt"));
        assert!(Glob::new("[ab").is_err() && Glob::new("").is_err());
        // Many stars against a long name stay fast (no exponential retry).
        let long = "a".repeat(5000);
        assert!(!g(&format!("{}b", "*a".repeat(50)), &long));
        let deep = vec!["a"; 200].join("/");
        assert!(!g("**/a/**/a/**/a/**/a/**/b", &deep));
        let e = parse_list(" , ", "glob").unwrap_err();
        assert!(e.contains("names no glob"), "{e}");
    }

    #[test]
    fn gitignore_rules() {
        let f = IgnoreFile::parse(
            "# comment\n\n*.log\n!keep.log\nbuild/\n/root-only\ndocs/*.tmp\n**/gen/**\n\\#hash\n",
        );
        let d = |p: &str, dir: bool| f.decide(p, dir, &mut || false).unwrap();
        assert_eq!(d("x.log", false), Some(true));
        assert_eq!(d("a/b/x.log", false), Some(true));
        assert_eq!(d("keep.log", false), Some(false));
        assert_eq!(d("build", true), Some(true));
        assert_eq!(d("build", false), None, "dir-only rule, a file");
        assert_eq!(d("a/build", true), Some(true));
        assert_eq!(d("root-only", false), Some(true));
        assert_eq!(d("a/root-only", false), None);
        assert_eq!(d("docs/x.tmp", false), Some(true));
        assert_eq!(d("a/docs/x.tmp", false), None);
        assert_eq!(d("a/gen/x/y.rs", false), Some(true));
        assert_eq!(d("#hash", false), Some(true));
        assert_eq!(d("src/main.rs", false), None);

        let mut s = IgnoreStack::default();
        s.push(String::new(), IgnoreFile::parse("*.out\n"));
        s.push("sub/".into(), IgnoreFile::parse("!*.out\n"));
        let mut go_on = || false;
        assert_eq!(s.ignored("a.out", false, &mut go_on), Ok(true));
        assert_eq!(
            s.ignored("sub/a.out", false, &mut go_on),
            Ok(false),
            "the deeper file wins"
        );
        s.leave_to("other/");
        assert_eq!(s.ignored("sub/a.out", false, &mut go_on), Ok(true));
    }

    #[test]
    fn long_rules_are_skipped_and_many_rules_ask_to_stop() {
        let long = format!("{}x\n*.log\n", "*a".repeat(MAX_RULE));
        let f = IgnoreFile::parse(&long);
        assert_eq!(f.rules.len(), 1);
        // A thousand rules of 100 bytes against a path of 1024: asked
        // about every 11 of them (a MiB of steps), and a yes ends the
        // matching at once.
        let many = format!("{}\n", "a".repeat(100)).repeat(1000);
        let f = IgnoreFile::parse(&many);
        let path = "b".repeat(1024);
        let mut asked = 0;
        let r = f.decide(&path, false, &mut || {
            asked += 1;
            false
        });
        assert_eq!((r, asked), (Ok(None), 1000 / 11));
        assert_eq!(f.decide(&path, false, &mut || true), Err(Halted));
        // A short path: rarely asked.
        let mut asked = 0;
        let _ = f.decide("b", false, &mut || {
            asked += 1;
            false
        });
        assert_eq!(asked, 0);
    }
}
