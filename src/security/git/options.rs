//! git 2.47: global options, then an explicit list of subcommands, each with
//! an explicit list of options. Long names must match exactly: git's own
//! parser takes unique abbreviations for many subcommands, and refusing an
//! abbreviation is always safe.
//!
//! Refused everywhere: options that run programs (`-c`, `--config-env`,
//! `--exec-path`, pagers, `--ext-diff`, `--textconv`, gpg), write files
//! (`--output`), read outside the repository (`--no-index`), read pathspecs
//! from files (`--pathspec-from-file`), copy hooks (`--template` for init),
//! open an editor or need a terminal (`-e`, `-p`/`--patch`, `-i`).

use crate::security::options::table::{A, Entry, N, O, P, Parsed, R, V, o};
use crate::security::refusal::Refused;

// Bits for git.
const PAT: u32 = 1;
/// commit: a message source that keeps the editor closed.
const MSG: u32 = 1 << 1;
/// Read-only variants of writing subcommands (`clean -n`, `commit --dry-run`,
/// `apply --stat`).
const DRY: u32 = 1 << 2;
/// branch/tag options that create, delete or change.
const CHANGE: u32 = 1 << 3;
/// branch/tag listing mode.
const LIST: u32 = 1 << 4;
/// commit --amend / --no-edit.
const AMEND: u32 = 1 << 5;
const NO_EDIT: u32 = 1 << 6;
/// merge/cherry-pick/revert `-s`: only the built-in strategies.
const STRATEGY: u32 = 1 << 7;
/// config read actions.
const GET: u32 = 1 << 8;
/// config options that take the operands as a key to read.
const LIST_ALL: u32 = 1 << 9;
/// reset modes that rewrite the work tree.
const TREE: u32 = 1 << 10;
/// apply --apply (forces applying after --stat/--check).
const APPLY: u32 = 1 << 11;
/// tag -a/-s: annotated, needs a message.
const ANNOTATE: u32 = 1 << 12;
/// config --global/--system.
const GLOBAL: u32 = 1 << 13;
const SYSTEM: u32 = 1 << 14;

const fn f(s: char, l: &'static str) -> O {
    o(s, l, N)
}
const fn v(s: char, l: &'static str) -> O {
    o(s, l, R)
}
const fn opt(s: char, l: &'static str) -> O {
    o(s, l, P)
}
/// `--name=VALUE`, the value glued.
const fn eq(l: &'static str) -> O {
    o('\0', l, A::G)
}
/// `--name [VALUE]`: the next word when there is one.
const fn last(l: &'static str) -> O {
    o('\0', l, A::L)
}

const OUT: &str = "writes a file";
const PER_DIRECTORY: &str = "reads the file of that name in every directory, a secret's too \
                             (use --exclude-standard or -X FILE)";
const EXT: &str = "runs the external diff program named in git's configuration";
const TEXTCONV: &str = "runs the textconv programs named in git's configuration";
const GPG: &str = "runs gpg";
const PAGER: &str = "runs a pager program";
const INTERACTIVE: &str = "is interactive (it needs a terminal)";
const EDITOR: &str = "opens an editor";
const FROM_FILE: &str = "reads pathspecs from a file the gate cannot see";
const NO_INDEX: &str = "compares files outside the repository";

/// Diff output options (diff.c), shared by log, show, diff, stash show...
const DIFF: &[O] = &[
    f('p', "patch"),
    f('s', "no-patch"),
    f('u', ""),
    opt('U', "unified"),
    f('W', "function-context"),
    f('\0', "no-function-context"),
    f('\0', "raw"),
    f('\0', "patch-with-raw"),
    f('\0', "patch-with-stat"),
    f('\0', "numstat"),
    f('\0', "shortstat"),
    opt('X', "dirstat"),
    f('\0', "cumulative"),
    opt('\0', "dirstat-by-file"),
    f('\0', "check"),
    f('\0', "summary"),
    f('\0', "name-only"),
    f('\0', "name-status"),
    opt('\0', "stat"),
    v('\0', "stat-width"),
    v('\0', "stat-name-width"),
    v('\0', "stat-graph-width"),
    v('\0', "stat-count"),
    f('\0', "compact-summary"),
    f('\0', "no-compact-summary"),
    f('\0', "binary"),
    f('\0', "full-index"),
    f('\0', "no-full-index"),
    opt('\0', "color"),
    f('\0', "no-color"),
    v('\0', "ws-error-highlight"),
    f('z', ""),
    opt('\0', "abbrev"),
    f('\0', "no-abbrev"),
    v('\0', "src-prefix"),
    v('\0', "dst-prefix"),
    v('\0', "line-prefix"),
    f('\0', "no-prefix"),
    f('\0', "default-prefix"),
    v('\0', "inter-hunk-context"),
    v('\0', "output-indicator-new"),
    v('\0', "output-indicator-old"),
    v('\0', "output-indicator-context"),
    opt('B', "break-rewrites"),
    opt('M', "find-renames"),
    f('D', "irreversible-delete"),
    opt('C', "find-copies"),
    f('\0', "find-copies-harder"),
    f('\0', "no-find-copies-harder"),
    f('\0', "no-renames"),
    f('\0', "rename-empty"),
    f('\0', "no-rename-empty"),
    f('\0', "follow"),
    f('\0', "no-follow"),
    v('l', ""),
    f('\0', "minimal"),
    f('w', "ignore-all-space"),
    f('b', "ignore-space-change"),
    f('\0', "ignore-space-at-eol"),
    f('\0', "ignore-cr-at-eol"),
    f('\0', "ignore-blank-lines"),
    v('I', "ignore-matching-lines"),
    f('\0', "indent-heuristic"),
    f('\0', "no-indent-heuristic"),
    f('\0', "patience"),
    f('\0', "histogram"),
    v('\0', "diff-algorithm"),
    v('\0', "anchored"),
    opt('\0', "word-diff"),
    v('\0', "word-diff-regex"),
    opt('\0', "color-words"),
    opt('\0', "color-moved"),
    f('\0', "no-color-moved"),
    v('\0', "color-moved-ws"),
    f('\0', "no-color-moved-ws"),
    opt('\0', "relative"),
    f('\0', "no-relative"),
    f('a', "text"),
    f('\0', "no-text"),
    f('R', ""),
    f('\0', "exit-code"),
    f('\0', "no-exit-code"),
    f('\0', "quiet"),
    f('\0', "ext-diff").no(EXT),
    f('\0', "no-ext-diff"),
    f('\0', "textconv").no(TEXTCONV),
    f('\0', "no-textconv"),
    opt('\0', "ignore-submodules"),
    opt('\0', "submodule"),
    f('\0', "ita-invisible-in-index"),
    f('\0', "ita-visible-in-index"),
    v('S', ""),
    v('G', ""),
    f('\0', "pickaxe-all"),
    f('\0', "pickaxe-regex"),
    // The order file is read from the file system.
    v('O', "").rd(),
    v('\0', "rotate-to"),
    v('\0', "skip-to"),
    v('\0', "find-object"),
    v('\0', "diff-filter"),
    v('\0', "output").no(OUT),
];

/// Revision walking options (revision.c, diff-merges.c).
const REV: &[O] = &[
    opt('\0', "all"),
    opt('\0', "branches"),
    opt('\0', "tags"),
    opt('\0', "remotes"),
    f('\0', "reflog"),
    f('\0', "not"),
    opt('\0', "no-walk"),
    f('\0', "do-walk"),
    eq("glob"),
    eq("exclude"),
    v('\0', "max-count"),
    v('\0', "skip"),
    v('n', ""),
    v('\0', "max-age"),
    v('\0', "since"),
    v('\0', "since-as-filter"),
    v('\0', "after"),
    v('\0', "min-age"),
    v('\0', "before"),
    v('\0', "until"),
    f('\0', "first-parent"),
    f('\0', "exclude-first-parent-only"),
    opt('\0', "ancestry-path"),
    f('g', "walk-reflogs"),
    f('\0', "merge"),
    f('\0', "topo-order"),
    f('\0', "simplify-merges"),
    f('\0', "simplify-by-decoration"),
    f('\0', "date-order"),
    f('\0', "author-date-order"),
    f('\0', "parents"),
    f('\0', "dense"),
    f('\0', "sparse"),
    f('\0', "in-commit-order"),
    f('\0', "remove-empty"),
    f('\0', "merges"),
    f('\0', "no-merges"),
    eq("min-parents"),
    f('\0', "no-min-parents"),
    eq("max-parents"),
    f('\0', "no-max-parents"),
    f('\0', "boundary"),
    f('\0', "left-right"),
    f('\0', "left-only"),
    f('\0', "right-only"),
    f('\0', "cherry"),
    f('\0', "count"),
    f('\0', "cherry-mark"),
    f('\0', "cherry-pick"),
    f('\0', "objects"),
    f('\0', "objects-edge"),
    f('r', ""),
    f('t', ""),
    f('v', ""),
    opt('\0', "pretty"),
    eq("format"),
    opt('\0', "expand-tabs"),
    f('\0', "no-expand-tabs"),
    opt('\0', "show-notes"),
    opt('\0', "notes"),
    f('\0', "no-notes"),
    f('\0', "standard-notes"),
    f('\0', "no-standard-notes"),
    f('\0', "show-signature").no(GPG),
    f('\0', "no-show-signature"),
    f('\0', "oneline"),
    f('\0', "graph"),
    f('\0', "no-graph"),
    f('\0', "root"),
    f('\0', "no-commit-id"),
    f('\0', "always"),
    f('\0', "abbrev-commit"),
    f('\0', "no-abbrev-commit"),
    f('\0', "full-diff"),
    f('\0', "show-pulls"),
    f('\0', "full-history"),
    f('\0', "relative-date"),
    v('\0', "date"),
    f('\0', "log-size"),
    v('\0', "author"),
    v('\0', "committer"),
    v('\0', "grep-reflog"),
    v('\0', "grep"),
    f('\0', "basic-regexp"),
    f('E', "extended-regexp"),
    f('i', "regexp-ignore-case"),
    f('F', "fixed-strings"),
    f('P', "perl-regexp"),
    f('\0', "all-match"),
    f('\0', "invert-grep"),
    v('\0', "encoding"),
    f('\0', "reverse"),
    f('\0', "children"),
    f('\0', "ignore-missing"),
    f('\0', "end-of-options"),
    f('m', ""),
    f('c', ""),
    f('\0', "cc"),
    f('\0', "dd"),
    f('\0', "remerge-diff"),
    f('\0', "no-diff-merges"),
    f('\0', "combined-all-paths"),
    v('\0', "diff-merges"),
];

/// log/show's own options (builtin/log.c).
const LOG: &[O] = &[
    f('q', "quiet"),
    f('\0', "source"),
    f('\0', "no-source"),
    f('\0', "use-mailmap"),
    f('\0', "no-use-mailmap"),
    f('\0', "mailmap"),
    f('\0', "no-mailmap"),
    f('\0', "clear-decorations"),
    v('\0', "decorate-refs"),
    v('\0', "decorate-refs-exclude"),
    opt('\0', "decorate"),
    f('\0', "no-decorate"),
    v('L', ""),
];

/// How a subcommand parses its argv.
#[derive(Clone, Copy, Default)]
struct Style {
    /// Short options may be bundled (`-sb`); parse-options commands.
    clusters: bool,
    /// `-<n>` is an option (`git log -5`, `git grep -3`).
    numbers: bool,
    /// setup_revisions: the first `--` splits before options are read.
    split_dd: bool,
    /// STOP_AT_NON_OPTION: the first operand ends the options.
    stop_at_operand: bool,
    /// git grep: bare `(` and `)` are options.
    parens: bool,
    /// The first option set is read by parse-options (bundles allowed)
    /// before the rest go to setup_revisions (one option per word).
    bundle_first: bool,
}

const PARSEOPT: Style = Style {
    clusters: true,
    numbers: false,
    split_dd: false,
    stop_at_operand: false,
    parens: false,
    bundle_first: false,
};
const REVSTYLE: Style = Style {
    clusters: false,
    numbers: true,
    split_dd: true,
    stop_at_operand: false,
    parens: false,
    bundle_first: false,
};

/// log, show, shortlog: their own options through parse-options first.
const LOGSTYLE: Style = Style {
    bundle_first: true,
    ..REVSTYLE
};

struct Scan<'a> {
    hits: Vec<(&'static O, Option<&'a str>)>,
    /// Operands before `--`.
    operands: Vec<&'a str>,
    /// Words after `--`.
    paths: Vec<&'a str>,
    bits: u32,
}

/// Where the subcommand runs (`-C`) and what it is called in messages.
struct Cx {
    dir: Option<String>,
    sub: String,
}

impl Cx {
    /// `path` as seen from latchclaw's working directory.
    fn at(&self, path: &str) -> String {
        match &self.dir {
            Some(d) if !path.starts_with('/') => {
                if path == "." {
                    d.clone()
                } else {
                    format!("{}/{path}", d.trim_end_matches('/'))
                }
            }
            _ => path.to_string(),
        }
    }
    fn unknown(&self, word: &str) -> Refused {
        Refused::command(format!(
            "`git {}` option `{word}` is not in latchclaw's list for `git {}` (abbreviations are not accepted)",
            self.sub, self.sub
        ))
    }
    fn refused(&self, o: &O, why: &str) -> Refused {
        Refused::command(format!("`git {}` option `{}` {why}", self.sub, o.name()))
    }
    fn missing(&self, o: &O) -> Refused {
        Refused::command(format!(
            "`git {}` option `{}` needs a value",
            self.sub,
            o.name()
        ))
    }
}

fn find_long(sets: &[&'static [O]], name: &str) -> Option<&'static O> {
    sets.iter()
        .flat_map(|s| s.iter())
        .find(|o| !o.l.is_empty() && o.l == name)
}

fn find_short(sets: &[&'static [O]], c: char) -> Option<&'static O> {
    sets.iter().flat_map(|s| s.iter()).find(|o| o.s == c)
}

/// Splits a subcommand's words into options and operands.
fn scan<'a>(
    cx: &Cx,
    sets: &[&'static [O]],
    style: Style,
    args: &'a [String],
) -> Result<Scan<'a>, Refused> {
    let mut sc = Scan {
        hits: Vec::new(),
        operands: Vec::new(),
        paths: Vec::new(),
        bits: 0,
    };
    // Where options may take their separate values from.
    let end = if style.split_dd {
        args.iter().position(|a| a == "--").unwrap_or(args.len())
    } else {
        args.len()
    };
    let mut i = 0;
    let mut options_over = false;
    while i < end {
        let a = args[i].as_str();
        i += 1;
        if options_over {
            if style.stop_at_operand && a == "--" {
                sc.paths.extend(args[i..].iter().map(String::as_str));
                i = args.len();
                break;
            }
            if style.stop_at_operand && a.starts_with('-') && a.len() > 1 {
                return Err(Refused::command(format!(
                    "`git {}`: `{a}` comes after an operand; options must come first",
                    cx.sub
                )));
            }
            sc.operands.push(a);
            continue;
        }
        if a == "--" {
            sc.paths.extend(args[i..].iter().map(String::as_str));
            i = args.len();
            break;
        }
        if a == "--end-of-options" {
            options_over = true;
            continue;
        }
        if style.parens && (a == "(" || a == ")") {
            continue;
        }
        if a.len() < 2 || !a.starts_with('-') {
            sc.operands.push(a);
            if style.stop_at_operand {
                options_over = true;
            }
            continue;
        }
        if style.numbers && a[1..].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, glued) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let o = find_long(sets, name).ok_or_else(|| cx.unknown(&format!("--{name}")))?;
            let val = match o.a {
                A::N => {
                    if glued.is_some() {
                        return Err(Refused::command(format!(
                            "`git {}` option `{}` takes no value",
                            cx.sub,
                            o.name()
                        )));
                    }
                    None
                }
                A::R => match glued {
                    Some(v) => Some(v),
                    None if i < end => {
                        i += 1;
                        Some(args[i - 1].as_str())
                    }
                    None => return Err(cx.missing(o)),
                },
                A::P => glued,
                A::G => match glued {
                    Some(v) => Some(v),
                    None => return Err(cx.missing(o)),
                },
                A::L => match glued {
                    Some(v) => Some(v),
                    None if i < end => {
                        i += 1;
                        Some(args[i - 1].as_str())
                    }
                    None => None,
                },
            };
            take(cx, &mut sc, o, val)?;
            continue;
        }
        // Short options: one per word unless the subcommand bundles them.
        let body = &a[1..];
        let (sets, clusters) = if style.bundle_first && !style.clusters && body.len() > 1 {
            match body.chars().next().and_then(|c| find_short(&sets[..1], c)) {
                Some(_) => (&sets[..1], true),
                None => (sets, false),
            }
        } else {
            (sets, style.clusters)
        };
        for (pos, c) in body.char_indices() {
            let o = find_short(sets, c).ok_or_else(|| {
                if pos == 0 {
                    cx.unknown(a)
                } else {
                    cx.unknown(&format!("-{c}` (in `{a}`"))
                }
            })?;
            let rest = &body[pos + c.len_utf8()..];
            match o.a {
                A::N => {
                    take(cx, &mut sc, o, None)?;
                    if !clusters && !rest.is_empty() {
                        return Err(cx.unknown(a));
                    }
                }
                A::P => {
                    take(cx, &mut sc, o, (!rest.is_empty()).then_some(rest))?;
                    break;
                }
                _ => {
                    let val = if !rest.is_empty() {
                        rest
                    } else if i < end {
                        i += 1;
                        args[i - 1].as_str()
                    } else if o.a == A::L {
                        take(cx, &mut sc, o, None)?;
                        break;
                    } else {
                        return Err(cx.missing(o));
                    };
                    take(cx, &mut sc, o, Some(val))?;
                    break;
                }
            }
        }
    }
    if i < args.len() && style.split_dd {
        // The words after the splitting `--`.
        sc.paths.extend(args[end + 1..].iter().map(String::as_str));
    }
    Ok(sc)
}

fn take<'a>(
    cx: &Cx,
    sc: &mut Scan<'a>,
    o: &'static O,
    val: Option<&'a str>,
) -> Result<(), Refused> {
    if let V::Refuse(why) = o.v {
        return Err(cx.refused(o, why));
    }
    sc.bits |= o.k;
    sc.hits.push((o, val));
    Ok(())
}

impl Scan<'_> {
    /// Option values that are paths.
    fn apply(&self, cx: &Cx, p: &mut Parsed) {
        p.git_operands
            .extend(self.operands.iter().map(|a| a.to_string()));
        p.git_pathspecs.extend(self.paths.iter().map(|a| cx.at(a)));
        for (o, val) in &self.hits {
            let Some(val) = val else { continue };
            match o.v {
                V::Read if *val == "-" => p.dash_reads.push(cx.at(val)),
                V::Read => p.reads.push(cx.at(val)),
                V::Write => {
                    p.writes.push(cx.at(val));
                    p.writes_anything = true;
                }
                _ => {}
            }
        }
    }
    fn all_operands(&self) -> impl Iterator<Item = &str> {
        self.operands.iter().chain(self.paths.iter()).copied()
    }
    fn has(&self, bit: u32) -> bool {
        self.bits & bit != 0
    }
    fn value_of(&self, bit: u32) -> impl Iterator<Item = &str> {
        self.hits
            .iter()
            .filter(move |(o, _)| o.k & bit != 0)
            .filter_map(|(_, v)| *v)
    }
}

pub(in crate::security) const GIT: Entry = Entry {
    name: "git",
    parse: git,
    spec: None,
    summary: "by subcommand: status, log, diff, show, blame, grep, ls-files, ls-tree, rev-parse, \
              rev-list, shortlog, describe, show-ref, cat-file, merge-base, reflog, count-objects, \
              version, config (reading), \
              remote (listing), branch/tag (listing; changes are writes), stash, add, commit, checkout, \
              switch, restore, reset, rm, mv, init, merge, cherry-pick, revert, apply, clean; \
              -c, --config-env, --exec-path, -p refused",
};

/// Why a repository directory other than a `.git` directory is refused:
/// git reads that directory's `config`, which can name programs that even
/// `git status` runs (core.fsmonitor), and a model that can write files can
/// write one there. Writes to `.git` directories are for the gate to refuse.
const NOT_DOT_GIT: &str = "makes git read its configuration (which can name programs to run) \
                           from a directory that is not a .git directory";

/// `--git-dir`/`--work-tree` values, as paths from latchclaw's directory.
fn repo_dir(cx: &Cx, name: &str, d: &str) -> Result<String, Refused> {
    if name == "--git-dir" && d.trim_end_matches('/').rsplit('/').next() != Some(".git") {
        return Err(Refused::command(format!(
            "`git` option `{name}={d}` {NOT_DOT_GIT}"
        )));
    }
    Ok(cx.at(d))
}

fn git(args: &[String]) -> Result<Parsed, Refused> {
    let mut p = Parsed::default();
    let mut cx = Cx {
        dir: None,
        sub: String::new(),
    };
    let mut trees: Vec<String> = Vec::new();
    let mut i = 0;
    // Global options (git.c handle_options).
    while let Some(a) = args.get(i) {
        let a = a.as_str();
        if !a.starts_with('-') || matches!(a, "--help" | "-h" | "--version" | "-v") {
            break;
        }
        let next = args.get(i + 1).map(String::as_str);
        let mut value = |what: &str| {
            next.inspect(|_| i += 1)
                .ok_or_else(|| Refused::command(format!("`git` option `{what}` needs a value")))
        };
        match a {
            "-C" => {
                let d = value("-C")?;
                if !d.is_empty() {
                    let nd = cx.at(d);
                    // chdir fails beyond PATH_MAX; the cap keeps joining
                    // operands to it linear in the argv.
                    if nd.len() > 4096 {
                        return Err(Refused::command(
                            "`git -C` directory is longer than a path can be",
                        ));
                    }
                    cx.dir = Some(nd.clone());
                    p.reads.push(nd);
                }
            }
            "--git-dir" | "--work-tree" => {
                let d = value(a)?;
                let d = repo_dir(&cx, a, d)?;
                p.reads.push(d.clone());
                trees.push(d);
            }
            "--namespace" | "--attr-source" => {
                value(a)?;
            }
            "-P"
            | "--no-pager"
            | "--no-replace-objects"
            | "--literal-pathspecs"
            | "--no-literal-pathspecs"
            | "--glob-pathspecs"
            | "--noglob-pathspecs"
            | "--icase-pathspecs"
            | "--no-optional-locks"
            | "--no-lazy-fetch"
            | "--no-advice"
            | "--html-path"
            | "--man-path"
            | "--info-path" => {}
            "-p" | "--paginate" => {
                return Err(Refused::command(format!("`git` option `{a}` {PAGER}")));
            }
            "--bare" => {
                return Err(Refused::command(format!(
                    "`git` option `--bare` {NOT_DOT_GIT}"
                )));
            }
            "-c" | "--config-env" => {
                return Err(Refused::command(format!(
                    "`git` option `{a}` sets configuration, which can name programs to run"
                )));
            }
            _ => {
                if let Some((name, d)) = a
                    .split_once('=')
                    .filter(|(n, _)| matches!(*n, "--git-dir" | "--work-tree"))
                {
                    let d = repo_dir(&cx, name, d)?;
                    p.reads.push(d.clone());
                    trees.push(d);
                } else if a.starts_with("--namespace=") || a.starts_with("--attr-source=") {
                } else if a.starts_with("--config-env=") {
                    return Err(Refused::command(format!(
                        "`git` option `{a}` sets configuration, which can name programs to run"
                    )));
                } else if a.starts_with("--exec-path") {
                    return Err(Refused::command(format!(
                        "`git` option `{a}` sets or shows where git finds the programs it runs"
                    )));
                } else {
                    return Err(Refused::command(format!(
                        "`git` option `{a}` is not in latchclaw's list of git's global options"
                    )));
                }
            }
        }
        i += 1;
    }
    let Some(sub) = args.get(i) else {
        return Ok(p);
    };
    p.git_subcommand = Some(i + 1);
    let rest = &args[i + 1..];
    let sub = match sub.as_str() {
        "--version" | "-v" => "version",
        "--help" | "-h" => "help",
        s => s,
    };
    cx.sub = sub.to_string();
    let writes = match sub {
        "status" => read_cmd(&cx, &mut p, &[STATUS], PARSEOPT, rest, Ops::Reads)?,
        "log" | "whatchanged" | "show" => {
            read_cmd(&cx, &mut p, &[LOG, REV, DIFF], LOGSTYLE, rest, Ops::Reads)?
        }
        "rev-list" => read_cmd(
            &cx,
            &mut p,
            &[REV_LIST, REV, DIFF],
            REVSTYLE,
            rest,
            Ops::Reads,
        )?,
        "shortlog" => read_cmd(&cx, &mut p, &[SHORTLOG, REV], LOGSTYLE, rest, Ops::Reads)?,
        "diff" => read_cmd(
            &cx,
            &mut p,
            &[DIFF_CMD, DIFF, REV],
            REVSTYLE,
            rest,
            Ops::Trees,
        )?,
        "blame" | "annotate" => read_cmd(&cx, &mut p, &[BLAME], PARSEOPT, rest, Ops::Reads)?,
        "ls-files" => read_cmd(&cx, &mut p, &[LS_FILES], PARSEOPT, rest, Ops::Reads)?,
        "ls-tree" => read_cmd(&cx, &mut p, &[LS_TREE], PARSEOPT, rest, Ops::FirstPlain)?,
        "describe" => read_cmd(&cx, &mut p, &[DESCRIBE], PARSEOPT, rest, Ops::Plain)?,
        "show-ref" => read_cmd(&cx, &mut p, &[SHOW_REF], PARSEOPT, rest, Ops::Plain)?,
        "cat-file" => read_cmd(&cx, &mut p, &[CAT_FILE], PARSEOPT, rest, Ops::Plain)?,
        "merge-base" => read_cmd(&cx, &mut p, &[MERGE_BASE], PARSEOPT, rest, Ops::Plain)?,
        "reflog" => reflog(&cx, &mut p, rest)?,
        "count-objects" => read_cmd(&cx, &mut p, &[COUNT_OBJECTS], PARSEOPT, rest, Ops::None)?,
        "version" => read_cmd(&cx, &mut p, &[VERSION], PARSEOPT, rest, Ops::None)?,
        "rev-parse" => read_cmd(
            &cx,
            &mut p,
            &[REV_PARSE],
            REV_PARSE_STYLE,
            rest,
            Ops::AfterDd,
        )?,
        "grep" => grep(&cx, &mut p, rest)?,
        "config" => config(&cx, &mut p, rest)?,
        "remote" => remote(&cx, rest)?,
        "branch" => branch(&cx, &mut p, rest)?,
        "tag" => tag(&cx, &mut p, rest)?,
        "stash" => stash(&cx, &mut p, rest)?,
        "add" => write_cmd(&cx, &mut p, &[ADD], rest, Tree::No)?,
        "rm" => write_cmd(&cx, &mut p, &[RM], rest, Tree::No)?,
        "mv" => write_cmd(&cx, &mut p, &[MV], rest, Tree::No)?,
        "commit" => commit(&cx, &mut p, rest)?,
        "checkout" => write_cmd(&cx, &mut p, &[CHECKOUT_COMMON, CHECKOUT], rest, Tree::Yes)?,
        "switch" => write_cmd(&cx, &mut p, &[CHECKOUT_COMMON, SWITCH], rest, Tree::Yes)?,
        "restore" => write_cmd(&cx, &mut p, &[CHECKOUT_COMMON, RESTORE], rest, Tree::No)?,
        "reset" => reset(&cx, &mut p, rest)?,
        "init" => init(&cx, &mut p, rest)?,
        "merge" => write_cmd(&cx, &mut p, &[MERGE], rest, Tree::Revs)?,
        "cherry-pick" => write_cmd(&cx, &mut p, &[SEQUENCER, CHERRY_PICK], rest, Tree::Revs)?,
        "revert" => write_cmd(&cx, &mut p, &[SEQUENCER], rest, Tree::Revs)?,
        "apply" => apply(&cx, &mut p, rest)?,
        "clean" => clean(&cx, &mut p, rest)?,
        "help" => {
            return Err(Refused::command(
                "`git help` may start a browser or a pager; it is refused",
            ));
        }
        other => {
            return Err(Refused::command(format!(
                "`git {other}` is not a git subcommand latchclaw allows"
            )));
        }
    };
    if writes {
        p.writes_anything = true;
        // --git-dir/--work-tree: the subcommand changes things there.
        for t in trees {
            p.writes.push(t);
        }
    }
    Ok(p)
}

/// What a read-only subcommand's operands are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ops {
    /// Revisions or paths: reported as reads (a revision name is harmless
    /// as a relative path).
    Reads,
    /// Like Reads, and walked as trees (`git diff` with paths outside the
    /// repository compares them like `diff -r`).
    Trees,
    /// The first is a tree-ish, the rest paths.
    FirstPlain,
    /// Only the words after `--` are paths.
    AfterDd,
    /// Names, patterns, objects: plain.
    Plain,
    /// No operands at all.
    None,
}

fn read_cmd(
    cx: &Cx,
    p: &mut Parsed,
    sets: &[&'static [O]],
    style: Style,
    args: &[String],
    ops: Ops,
) -> Result<bool, Refused> {
    let sc = scan(cx, sets, style, args)?;
    sc.apply(cx, p);
    match ops {
        Ops::Reads => {
            let revs = sc.operands.iter().filter(|a| !revision_syntax(a));
            p.reads
                .extend(revs.chain(sc.paths.iter()).map(|a| cx.at(a)));
        }
        Ops::Trees => {
            for a in sc.all_operands() {
                p.reads.push(cx.at(a));
                p.read_dirs_recursive.push(cx.at(a));
            }
        }
        Ops::FirstPlain => p.reads.extend(sc.all_operands().skip(1).map(|a| cx.at(a))),
        Ops::AfterDd => p.reads.extend(sc.paths.iter().map(|a| cx.at(a))),
        Ops::Plain => {}
        Ops::None => {
            if let Some(a) = sc.all_operands().next() {
                return Err(Refused::command(format!(
                    "`git {}` takes no operand (`{a}`)",
                    cx.sub
                )));
            }
        }
    }
    Ok(false)
}

/// Words that can only be revisions (`HEAD:path`, `:/message`, `^rev`,
/// `a..b`, `main@{1}`): not paths, so not reads.
fn revision_syntax(a: &str) -> bool {
    a.contains(':')
        || a.starts_with('^')
        || a.contains("@{")
        || (a.contains("..") && !a.contains('/') && !a.starts_with('.'))
}

/// `git reflog [show] [log options]`; expire and delete change the reflog.
fn reflog(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let rest = match args.first().map(String::as_str) {
        Some("show" | "list") => &args[1..],
        Some("exists") => return Ok(false),
        Some(s @ ("expire" | "delete")) => {
            return Err(Refused::command(format!(
                "`git reflog {s}` changes the reflog; it is refused"
            )));
        }
        _ => args,
    };
    read_cmd(cx, p, &[LOG, REV, DIFF], LOGSTYLE, rest, Ops::Plain)
}

// ---------------------------------------------------------------- read-only

const STATUS: &[O] = &[
    f('v', "verbose"),
    f('s', "short"),
    f('b', "branch"),
    f('\0', "no-branch"),
    f('\0', "show-stash"),
    f('\0', "ahead-behind"),
    f('\0', "no-ahead-behind"),
    opt('\0', "porcelain"),
    f('\0', "long"),
    f('z', "null"),
    opt('u', "untracked-files"),
    opt('\0', "ignored"),
    opt('\0', "ignore-submodules"),
    opt('\0', "column"),
    f('\0', "no-column"),
    f('\0', "renames"),
    f('\0', "no-renames"),
    opt('M', "find-renames"),
];

const REV_LIST: &[O] = &[
    f('\0', "header"),
    f('\0', "timestamp"),
    f('\0', "quiet"),
    f('\0', "disk-usage"),
    f('\0', "stdin"),
];

const SHORTLOG: &[O] = &[
    f('c', "committer"),
    f('n', "numbered"),
    f('s', "summary"),
    f('e', "email"),
    opt('w', ""),
    v('\0', "group"),
];

/// `git diff`'s own words (builtin/diff.c).
const DIFF_CMD: &[O] = &[
    f('\0', "cached"),
    f('\0', "staged"),
    f('\0', "merge-base"),
    f('\0', "base"),
    f('\0', "ours"),
    f('\0', "theirs"),
    f('q', ""),
    f('\0', "no-index").no(NO_INDEX),
];

const BLAME: &[O] = &[
    f('\0', "incremental"),
    f('b', ""),
    f('\0', "root"),
    f('\0', "show-stats"),
    f('\0', "progress"),
    f('\0', "score-debug"),
    f('f', "show-name"),
    f('n', "show-number"),
    f('p', "porcelain"),
    f('\0', "line-porcelain"),
    f('c', ""),
    f('t', ""),
    f('l', ""),
    f('s', ""),
    f('e', "show-email"),
    f('w', ""),
    v('\0', "ignore-rev"),
    v('\0', "ignore-revs-file").rd(),
    f('\0', "color-lines"),
    f('\0', "color-by-age"),
    f('\0', "minimal"),
    v('S', "").rd(),
    v('\0', "contents").rd(),
    opt('C', ""),
    opt('M', ""),
    v('L', ""),
    opt('\0', "abbrev"),
    f('\0', "no-abbrev"),
    f('\0', "textconv").no(TEXTCONV),
    f('\0', "no-textconv"),
    f('\0', "reverse"),
    f('\0', "first-parent"),
    v('\0', "since"),
    v('\0', "date"),
];

const LS_FILES: &[O] = &[
    f('z', ""),
    f('t', ""),
    f('v', ""),
    f('f', ""),
    f('c', "cached"),
    f('d', "deleted"),
    f('m', "modified"),
    f('o', "others"),
    f('i', "ignored"),
    f('s', "stage"),
    f('k', "killed"),
    f('\0', "directory"),
    f('\0', "eol"),
    f('\0', "no-empty-directory"),
    f('u', "unmerged"),
    f('\0', "resolve-undo"),
    v('x', "exclude"),
    v('X', "exclude-from").rd(),
    v('\0', "exclude-per-directory").no(PER_DIRECTORY),
    f('\0', "exclude-standard"),
    f('\0', "full-name"),
    f('\0', "recurse-submodules"),
    f('\0', "error-unmatch"),
    v('\0', "with-tree"),
    opt('\0', "abbrev"),
    f('\0', "debug"),
    f('\0', "deduplicate"),
    f('\0', "sparse"),
    v('\0', "format"),
];

const LS_TREE: &[O] = &[
    f('d', ""),
    f('r', ""),
    f('t', ""),
    f('z', ""),
    f('l', "long"),
    f('\0', "name-only"),
    f('\0', "name-status"),
    f('\0', "object-only"),
    f('\0', "full-name"),
    f('\0', "full-tree"),
    v('\0', "format"),
    opt('\0', "abbrev"),
];

const DESCRIBE: &[O] = &[
    f('\0', "contains"),
    f('\0', "debug"),
    f('\0', "all"),
    f('\0', "tags"),
    f('\0', "long"),
    f('\0', "first-parent"),
    opt('\0', "abbrev"),
    f('\0', "exact-match"),
    v('\0', "candidates"),
    v('\0', "match"),
    v('\0', "exclude"),
    f('\0', "always"),
    opt('\0', "dirty"),
    opt('\0', "broken"),
];

const SHOW_REF: &[O] = &[
    f('\0', "tags"),
    f('\0', "branches"),
    f('\0', "heads"),
    f('\0', "exists"),
    f('\0', "verify"),
    f('\0', "head"),
    f('d', "dereference"),
    opt('s', "hash"),
    opt('\0', "abbrev"),
    f('q', "quiet"),
];

const CAT_FILE: &[O] = &[
    f('e', ""),
    f('p', ""),
    f('t', ""),
    f('s', ""),
    f('\0', "allow-unknown-type"),
    f('\0', "use-mailmap"),
    f('\0', "mailmap"),
    f('\0', "textconv").no(TEXTCONV),
    f('\0', "filters").no("runs the filter programs named in git's configuration"),
];

const MERGE_BASE: &[O] = &[
    f('a', "all"),
    f('\0', "octopus"),
    f('\0', "independent"),
    f('\0', "is-ancestor"),
    f('\0', "fork-point"),
];

const COUNT_OBJECTS: &[O] = &[f('v', "verbose"), f('H', "human-readable")];
const VERSION: &[O] = &[f('\0', "build-options")];

const REV_PARSE: &[O] = &[
    f('\0', "git-dir"),
    f('\0', "git-common-dir"),
    f('\0', "absolute-git-dir"),
    f('\0', "show-toplevel"),
    f('\0', "show-prefix"),
    f('\0', "show-cdup"),
    f('\0', "show-superproject-working-tree"),
    f('\0', "is-inside-git-dir"),
    f('\0', "is-inside-work-tree"),
    f('\0', "is-bare-repository"),
    f('\0', "is-shallow-repository"),
    opt('\0', "show-object-format"),
    f('\0', "show-ref-format"),
    f('\0', "local-env-vars"),
    opt('\0', "abbrev-ref"),
    opt('\0', "short"),
    f('\0', "verify"),
    f('q', "quiet"),
    f('\0', "symbolic"),
    f('\0', "symbolic-full-name"),
    f('\0', "all"),
    opt('\0', "branches"),
    opt('\0', "tags"),
    opt('\0', "remotes"),
    eq("glob"),
    eq("exclude"),
    eq("since"),
    eq("after"),
    eq("until"),
    eq("before"),
    v('\0', "default"),
    v('\0', "prefix"),
    f('\0', "revs-only"),
    f('\0', "no-revs"),
    f('\0', "flags"),
    f('\0', "no-flags"),
    f('\0', "sq"),
    f('\0', "not"),
    eq("path-format"),
    v('\0', "git-path"),
    v('\0', "resolve-git-dir").rd(),
    eq("disambiguate"),
];
const REV_PARSE_STYLE: Style = Style {
    clusters: false,
    numbers: false,
    split_dd: false,
    stop_at_operand: false,
    parens: false,
    bundle_first: false,
};

// ---------------------------------------------------------------- grep

const GREP: &[O] = &[
    f('\0', "cached"),
    f('\0', "no-index").no(NO_INDEX),
    f('\0', "untracked"),
    f('\0', "exclude-standard"),
    f('\0', "no-exclude-standard"),
    f('\0', "recurse-submodules"),
    f('v', "invert-match"),
    f('i', "ignore-case"),
    f('w', "word-regexp"),
    f('a', "text"),
    f('I', ""),
    f('\0', "textconv").no(TEXTCONV),
    f('\0', "no-textconv"),
    f('r', "recursive"),
    f('\0', "no-recursive"),
    v('\0', "max-depth"),
    f('E', "extended-regexp"),
    f('G', "basic-regexp"),
    f('F', "fixed-strings"),
    f('P', "perl-regexp"),
    f('n', "line-number"),
    f('\0', "column"),
    f('h', ""),
    f('H', ""),
    f('\0', "full-name"),
    f('l', "files-with-matches"),
    f('\0', "name-only"),
    f('L', "files-without-match"),
    f('z', "null"),
    f('o', "only-matching"),
    f('c', "count"),
    opt('\0', "color"),
    f('\0', "no-color"),
    f('\0', "break"),
    f('\0', "heading"),
    v('C', "context"),
    v('B', "before-context"),
    v('A', "after-context"),
    v('\0', "threads"),
    f('p', "show-function"),
    f('W', "function-context"),
    v('f', "").rd().k(PAT),
    v('e', "").k(PAT),
    f('\0', "and"),
    f('\0', "or"),
    f('\0', "not"),
    f('q', "quiet"),
    f('\0', "all-match"),
    opt('O', "open-files-in-pager").no(PAGER),
    f('\0', "ext-grep"),
    v('m', "max-count"),
];

fn grep(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let style = Style {
        numbers: true,
        stop_at_operand: true,
        parens: true,
        ..PARSEOPT
    };
    let sc = scan(cx, &[GREP], style, args)?;
    sc.apply(cx, p);
    let skip = usize::from(!sc.has(PAT));
    let revs = sc
        .operands
        .iter()
        .skip(skip)
        .filter(|a| !revision_syntax(a));
    p.reads
        .extend(revs.chain(sc.paths.iter()).map(|a| cx.at(a)));
    Ok(false)
}

// ---------------------------------------------------------------- config

const CONFIG_LOCATION: &[O] = &[
    f('\0', "global").k(GLOBAL),
    f('\0', "system").k(SYSTEM),
    f('\0', "local"),
    f('\0', "worktree"),
    v('f', "file").rd(),
    v('\0', "blob"),
];
const CONFIG_DISPLAY: &[O] = &[
    v('t', "type"),
    f('\0', "no-type"),
    f('\0', "bool"),
    f('\0', "int"),
    f('\0', "bool-or-int"),
    f('\0', "bool-or-str"),
    f('\0', "path"),
    f('\0', "expiry-date"),
    f('z', "null"),
    f('\0', "name-only"),
    f('\0', "show-origin"),
    f('\0', "show-scope"),
    f('\0', "show-names"),
    // With --file or --blob it would print files named by include.path
    // (an INI-style credentials file parses as configuration).
    f('\0', "includes").no("follows include.path to files the gate cannot see"),
    f('\0', "no-includes"),
    v('\0', "default"),
];
const WRITES_CONFIG: &str =
    "changes git's configuration (which can name programs git runs); only reading is allowed";
const CONFIG_LEGACY: &[O] = &[
    f('\0', "get").k(GET),
    f('\0', "get-all").k(GET),
    f('\0', "get-regexp").k(GET),
    f('\0', "get-urlmatch").k(GET),
    f('\0', "get-color").k(GET),
    f('\0', "get-colorbool").k(GET),
    f('l', "list").k(LIST_ALL),
    f('\0', "fixed-value"),
    f('\0', "replace-all").no(WRITES_CONFIG),
    f('\0', "add").no(WRITES_CONFIG),
    f('\0', "unset").no(WRITES_CONFIG),
    f('\0', "unset-all").no(WRITES_CONFIG),
    f('\0', "rename-section").no(WRITES_CONFIG),
    f('\0', "remove-section").no(WRITES_CONFIG),
    f('e', "edit").no(EDITOR),
    v('\0', "comment").no(WRITES_CONFIG),
];
const CONFIG_GET: &[O] = &[
    f('\0', "all"),
    f('\0', "regexp"),
    v('\0', "value"),
    f('\0', "fixed-value"),
    v('\0', "url"),
];

fn config(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let style = Style {
        stop_at_operand: true,
        ..PARSEOPT
    };
    let (sets, rest, form): (&[&'static [O]], &[String], &str) =
        match args.first().map(String::as_str) {
            Some("list") => (&[CONFIG_LOCATION, CONFIG_DISPLAY], &args[1..], "list"),
            Some("get") => (
                &[CONFIG_LOCATION, CONFIG_DISPLAY, CONFIG_GET],
                &args[1..],
                "get",
            ),
            Some(s @ ("set" | "unset" | "rename-section" | "remove-section" | "edit")) => {
                return Err(Refused::command(format!(
                    "`git config {s}` {WRITES_CONFIG}"
                )));
            }
            _ => (
                &[CONFIG_LOCATION, CONFIG_DISPLAY, CONFIG_LEGACY],
                args,
                "legacy",
            ),
        };
    let sc = scan(cx, sets, style, rest)?;
    sc.apply(cx, p);
    let n = sc.operands.len() + sc.paths.len();
    let ok = match form {
        "list" => n == 0,
        "get" => n == 1,
        _ if sc.has(LIST_ALL) => n == 0,
        // --get NAME [VALUE-PATTERN], --get-color SLOT [DEFAULT], ...
        _ if sc.has(GET) => (1..=2).contains(&n),
        // `git config NAME` reads; `git config NAME VALUE` sets.
        _ => n == 1,
    };
    if !ok {
        return Err(Refused::command(
            "`git config` with these operands would change git's configuration (which can \
                    name programs git runs); only reading is allowed (`git config --get NAME`, \
                    `git config --list`)",
        ));
    }
    if sc.has(GLOBAL) {
        p.reads.push("~/.gitconfig".into());
    }
    if sc.has(SYSTEM) {
        p.reads.push("/etc/gitconfig".into());
    }
    Ok(false)
}

// ---------------------------------------------------------------- remote

fn remote(cx: &Cx, args: &[String]) -> Result<bool, Refused> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let ok = match words.as_slice() {
        [] => true,
        [flag] => matches!(*flag, "-v" | "--verbose"),
        ["get-url", rest @ ..] => {
            let names = rest.iter().filter(|w| !matches!(**w, "--push" | "--all"));
            rest.iter()
                .all(|w| !w.starts_with('-') || matches!(*w, "--push" | "--all"))
                && names.count() == 1
        }
        _ => false,
    };
    if ok {
        Ok(false)
    } else {
        Err(Refused::command(format!(
            "`git {}` is allowed only as `git remote`, `git remote -v` or `git remote get-url NAME` \
             (other forms change remotes or contact the network)",
            cx.sub
        )))
    }
}

// ---------------------------------------------------------------- branch / tag

const BRANCH: &[O] = &[
    f('v', "verbose"),
    f('q', "quiet"),
    opt('t', "track").k(CHANGE),
    f('\0', "no-track").k(CHANGE),
    v('u', "set-upstream-to").k(CHANGE),
    f('\0', "unset-upstream").k(CHANGE),
    opt('\0', "color"),
    f('\0', "no-color"),
    f('r', "remotes"),
    last("contains"),
    last("no-contains"),
    opt('\0', "abbrev"),
    f('\0', "no-abbrev"),
    f('a', "all"),
    f('d', "delete").k(CHANGE),
    f('D', "").k(CHANGE),
    f('m', "move").k(CHANGE),
    f('M', "").k(CHANGE),
    f('\0', "omit-empty"),
    f('c', "copy").k(CHANGE),
    f('C', "").k(CHANGE),
    f('l', "list").k(LIST),
    f('\0', "show-current").k(LIST),
    f('\0', "create-reflog").k(CHANGE),
    f('\0', "edit-description").no(EDITOR),
    f('f', "force").k(CHANGE),
    last("merged"),
    last("no-merged"),
    opt('\0', "column"),
    f('\0', "no-column"),
    v('\0', "sort"),
    v('\0', "points-at"),
    f('i', "ignore-case"),
    f('\0', "recurse-submodules"),
    v('\0', "format"),
];

fn branch(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[BRANCH], PARSEOPT, args)?;
    sc.apply(cx, p);
    // Listing: no operands (or patterns with --list), nothing that changes.
    let listing = !sc.has(CHANGE) && (sc.has(LIST) || sc.all_operands().next().is_none());
    Ok(!listing)
}

const TAG: &[O] = &[
    f('l', "list").k(LIST),
    opt('n', ""),
    f('d', "delete").k(CHANGE),
    f('v', "verify").no(GPG),
    f('a', "annotate").k(CHANGE | ANNOTATE),
    v('m', "message").k(CHANGE | MSG),
    v('F', "file").rd().k(CHANGE | MSG),
    v('\0', "trailer").k(CHANGE),
    f('e', "edit").no(EDITOR),
    f('s', "sign").no(GPG),
    v('\0', "cleanup").k(CHANGE),
    v('u', "local-user").no(GPG),
    f('f', "force").k(CHANGE),
    f('\0', "create-reflog").k(CHANGE),
    opt('\0', "column"),
    f('\0', "no-column"),
    last("contains"),
    last("no-contains"),
    last("merged"),
    last("no-merged"),
    f('\0', "omit-empty"),
    v('\0', "sort"),
    last("points-at"),
    v('\0', "format"),
    opt('\0', "color"),
    f('\0', "no-color"),
    f('i', "ignore-case"),
];

fn tag(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[TAG], PARSEOPT, args)?;
    sc.apply(cx, p);
    let listing = !sc.has(CHANGE) && (sc.has(LIST) || sc.all_operands().next().is_none());
    if !listing && sc.has(ANNOTATE) && !sc.has(MSG) {
        return Err(Refused::command(format!(
            "`git {}` -a without -m or -F {EDITOR}; give the message with -m",
            cx.sub
        )));
    }
    Ok(!listing)
}

// ---------------------------------------------------------------- stash

const STASH_PUSH: &[O] = &[
    f('k', "keep-index"),
    f('\0', "no-keep-index"),
    f('S', "staged"),
    f('p', "patch").no(INTERACTIVE),
    f('q', "quiet"),
    f('u', "include-untracked"),
    f('\0', "no-include-untracked"),
    f('a', "all"),
    v('m', "message"),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
];
const STASH_APPLY: &[O] = &[f('q', "quiet"), f('\0', "index")];
const STASH_DROP: &[O] = &[f('q', "quiet")];
const STASH_SHOW: &[O] = &[
    f('u', "include-untracked"),
    f('\0', "no-include-untracked"),
    f('\0', "only-untracked"),
];

fn stash(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let (sub, rest) = match args.first().map(String::as_str) {
        Some(s) if !s.starts_with('-') => (s, &args[1..]),
        _ => ("push", args),
    };
    let cx = Cx {
        dir: cx.dir.clone(),
        sub: format!("{} {sub}", cx.sub),
    };
    match sub {
        "list" => read_cmd(&cx, p, &[LOG, REV, DIFF], REVSTYLE, rest, Ops::Plain),
        "show" => read_cmd(&cx, p, &[STASH_SHOW, DIFF], REVSTYLE, rest, Ops::Plain),
        "push" | "save" => {
            let sc = scan(&cx, &[STASH_PUSH], PARSEOPT, rest)?;
            sc.apply(&cx, p);
            if sub == "push" {
                p.writes.extend(sc.all_operands().map(|a| cx.at(a)));
            }
            tree_write(&cx, p);
            Ok(true)
        }
        "pop" | "apply" => {
            scan(&cx, &[STASH_APPLY], PARSEOPT, rest)?;
            tree_write(&cx, p);
            Ok(true)
        }
        "drop" | "clear" => {
            scan(&cx, &[STASH_DROP], PARSEOPT, rest)?;
            Ok(true)
        }
        "branch" => {
            let sc = scan(&cx, &[], PARSEOPT, rest)?;
            if sc.all_operands().next().is_none() {
                return Err(Refused::command("`git stash branch` needs a branch name"));
            }
            tree_write(&cx, p);
            Ok(true)
        }
        other => Err(Refused::command(format!(
            "`git stash {other}` is not a stash subcommand latchclaw allows"
        ))),
    }
}

/// The subcommand may change anything in the work tree.
fn tree_write(cx: &Cx, p: &mut Parsed) {
    let t = cx.at(".");
    p.writes.push(t.clone());
    p.write_dirs_recursive.push(t);
}

// ---------------------------------------------------------------- writing

const ADD: &[O] = &[
    f('n', "dry-run"),
    f('v', "verbose"),
    f('i', "interactive").no(INTERACTIVE),
    f('p', "patch").no(INTERACTIVE),
    f('e', "edit").no(EDITOR),
    f('f', "force"),
    f('u', "update"),
    f('\0', "renormalize"),
    f('N', "intent-to-add"),
    f('A', "all"),
    f('\0', "no-all"),
    f('\0', "ignore-removal"),
    f('\0', "no-ignore-removal"),
    f('\0', "refresh"),
    f('\0', "ignore-errors"),
    f('\0', "ignore-missing"),
    f('\0', "sparse"),
    v('\0', "chmod"),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
];
const RM: &[O] = &[
    f('n', "dry-run"),
    f('q', "quiet"),
    f('\0', "cached"),
    f('f', "force"),
    f('r', ""),
    f('\0', "ignore-unmatch"),
    f('\0', "sparse"),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
];
const MV: &[O] = &[
    f('v', "verbose"),
    f('n', "dry-run"),
    f('f', "force"),
    f('k', ""),
    f('\0', "sparse"),
];
const CHECKOUT_COMMON: &[O] = &[
    f('q', "quiet"),
    opt('\0', "recurse-submodules"),
    f('\0', "no-recurse-submodules"),
    f('\0', "progress"),
    f('\0', "no-progress"),
    f('m', "merge"),
    v('\0', "conflict"),
    f('\0', "ignore-skip-worktree-bits"),
    f('\0', "ignore-other-worktrees"),
    f('\0', "overwrite-ignore"),
    f('\0', "no-overwrite-ignore"),
    f('p', "patch").no(INTERACTIVE),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
];
const CHECKOUT: &[O] = &[
    f('d', "detach"),
    opt('t', "track"),
    f('\0', "no-track"),
    f('f', "force"),
    v('\0', "orphan"),
    f('2', "ours"),
    f('3', "theirs"),
    v('b', ""),
    v('B', ""),
    f('l', ""),
    f('\0', "guess"),
    f('\0', "no-guess"),
    f('\0', "overlay"),
    f('\0', "no-overlay"),
];
const SWITCH: &[O] = &[
    v('c', "create"),
    v('C', "force-create"),
    f('\0', "guess"),
    f('\0', "no-guess"),
    f('\0', "discard-changes"),
    f('d', "detach"),
    opt('t', "track"),
    f('\0', "no-track"),
    f('f', "force"),
    v('\0', "orphan"),
];
const RESTORE: &[O] = &[
    v('s', "source"),
    f('S', "staged"),
    f('W', "worktree"),
    f('\0', "ignore-unmerged"),
    f('\0', "overlay"),
    f('\0', "no-overlay"),
    f('\0', "ours"),
    f('\0', "theirs"),
];
const RESET: &[O] = &[
    f('q', "quiet"),
    f('\0', "no-refresh"),
    f('\0', "mixed"),
    f('\0', "soft"),
    f('\0', "hard").k(TREE),
    f('\0', "merge").k(TREE),
    f('\0', "keep").k(TREE),
    opt('\0', "recurse-submodules"),
    f('\0', "no-recurse-submodules"),
    f('p', "patch").no(INTERACTIVE),
    f('N', "intent-to-add"),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
];
const STRATEGIES: &[&str] = &["ort", "recursive", "resolve", "octopus", "ours", "subtree"];
const MERGE: &[O] = &[
    f('n', ""),
    f('\0', "stat"),
    f('\0', "no-stat"),
    f('\0', "summary"),
    f('\0', "no-summary"),
    opt('\0', "log"),
    f('\0', "no-log"),
    f('\0', "squash"),
    f('\0', "no-squash"),
    f('\0', "commit"),
    f('\0', "no-commit"),
    f('e', "edit").no(EDITOR),
    f('\0', "no-edit"),
    v('\0', "cleanup"),
    f('\0', "ff"),
    f('\0', "no-ff"),
    f('\0', "ff-only"),
    f('\0', "rerere-autoupdate"),
    f('\0', "no-rerere-autoupdate"),
    f('\0', "verify-signatures").no(GPG),
    f('\0', "no-verify-signatures"),
    v('s', "strategy").k(STRATEGY),
    v('X', "strategy-option"),
    v('m', "message"),
    v('F', "file").rd(),
    v('\0', "into-name"),
    f('v', "verbose"),
    f('q', "quiet"),
    f('\0', "abort"),
    f('\0', "quit"),
    f('\0', "continue").no(EDITOR),
    f('\0', "allow-unrelated-histories"),
    f('\0', "progress"),
    f('\0', "no-progress"),
    opt('S', "gpg-sign").no(GPG),
    f('\0', "no-gpg-sign"),
    f('\0', "autostash"),
    f('\0', "no-autostash"),
    f('\0', "overwrite-ignore"),
    f('\0', "signoff"),
    f('\0', "no-signoff"),
    f('\0', "no-verify"),
];
/// cherry-pick and revert.
const SEQUENCER: &[O] = &[
    f('\0', "quit"),
    f('\0', "continue"),
    f('\0', "abort"),
    f('\0', "skip"),
    v('\0', "cleanup"),
    f('n', "no-commit"),
    f('e', "edit").no(EDITOR),
    f('\0', "no-edit"),
    f('r', ""),
    f('s', "signoff"),
    v('m', "mainline"),
    f('\0', "rerere-autoupdate"),
    f('\0', "no-rerere-autoupdate"),
    v('\0', "strategy").k(STRATEGY),
    v('X', "strategy-option"),
    opt('S', "gpg-sign").no(GPG),
    f('\0', "no-gpg-sign"),
];
const CHERRY_PICK: &[O] = &[
    f('x', ""),
    f('\0', "ff"),
    f('\0', "allow-empty"),
    f('\0', "allow-empty-message"),
    f('\0', "keep-redundant-commits"),
    v('\0', "empty"),
];

/// Whether a writing subcommand changes the whole work tree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tree {
    /// Only its pathspecs (add, rm, mv, restore).
    No,
    /// The work tree, and pathspecs (checkout, switch).
    Yes,
    /// The work tree; operands are revisions (merge, cherry-pick, revert).
    Revs,
}

fn write_cmd(
    cx: &Cx,
    p: &mut Parsed,
    sets: &[&'static [O]],
    args: &[String],
    tree: Tree,
) -> Result<bool, Refused> {
    let sc = scan(cx, sets, PARSEOPT, args)?;
    sc.apply(cx, p);
    check_strategy(cx, &sc)?;
    match tree {
        Tree::No => p.writes.extend(sc.all_operands().map(|a| cx.at(a))),
        Tree::Yes => {
            p.writes.extend(sc.all_operands().map(|a| cx.at(a)));
            tree_write(cx, p);
        }
        Tree::Revs => tree_write(cx, p),
    }
    Ok(true)
}

/// A strategy other than git's own runs a `git-merge-NAME` program.
fn check_strategy(cx: &Cx, sc: &Scan) -> Result<(), Refused> {
    for s in sc.value_of(STRATEGY) {
        if !STRATEGIES.contains(&s) {
            return Err(Refused::command(format!(
                "`git {}` strategy `{s}` would run a `git-merge-{s}` program; allowed: {}",
                cx.sub,
                STRATEGIES.join(", ")
            )));
        }
    }
    Ok(())
}

fn reset(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[RESET], PARSEOPT, args)?;
    sc.apply(cx, p);
    p.writes.extend(sc.all_operands().map(|a| cx.at(a)));
    if sc.has(TREE) {
        tree_write(cx, p);
    } else {
        // The index, under the work tree.
        p.writes.push(cx.at("."));
    }
    Ok(true)
}

const COMMIT: &[O] = &[
    f('q', "quiet"),
    f('v', "verbose"),
    v('F', "file").rd().k(MSG),
    v('\0', "author"),
    v('\0', "date"),
    v('m', "message").k(MSG),
    v('c', "reedit-message").no(EDITOR),
    v('C', "reuse-message").k(MSG),
    v('\0', "fixup").k(MSG),
    v('\0', "squash"),
    f('\0', "reset-author"),
    v('\0', "trailer"),
    f('s', "signoff"),
    f('\0', "no-signoff"),
    v('t', "template").rd(),
    f('e', "edit").no(EDITOR),
    f('\0', "no-edit").k(NO_EDIT),
    v('\0', "cleanup"),
    f('\0', "status"),
    f('\0', "no-status"),
    opt('S', "gpg-sign").no(GPG),
    f('\0', "no-gpg-sign"),
    f('a', "all"),
    f('i', "include"),
    f('\0', "interactive").no(INTERACTIVE),
    f('p', "patch").no(INTERACTIVE),
    f('o', "only"),
    f('n', "no-verify"),
    f('\0', "dry-run").k(DRY),
    f('\0', "short").k(DRY),
    f('\0', "branch"),
    f('\0', "ahead-behind"),
    f('\0', "no-ahead-behind"),
    f('\0', "porcelain").k(DRY),
    f('\0', "long").k(DRY),
    f('z', "null"),
    f('\0', "amend").k(AMEND),
    f('\0', "no-post-rewrite"),
    opt('u', "untracked-files"),
    v('\0', "pathspec-from-file").no(FROM_FILE),
    f('\0', "pathspec-file-nul"),
    f('\0', "allow-empty"),
    f('\0', "allow-empty-message"),
];

fn commit(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[COMMIT], PARSEOPT, args)?;
    sc.apply(cx, p);
    if sc.has(DRY) {
        p.reads.extend(sc.all_operands().map(|a| cx.at(a)));
        return Ok(false);
    }
    let has_message = sc.has(MSG) || (sc.has(AMEND) && sc.has(NO_EDIT));
    if !has_message {
        return Err(Refused::command(format!(
            "`git {}` without -m, -F, -C or --fixup (or --amend --no-edit) {EDITOR}; give the \
             message with -m",
            cx.sub
        )));
    }
    p.writes.extend(sc.all_operands().map(|a| cx.at(a)));
    Ok(true)
}

const INIT: &[O] = &[
    v('\0', "template").no("copies hooks (programs git runs) from a template directory"),
    f('\0', "bare").no(NOT_DOT_GIT),
    opt('\0', "shared"),
    f('q', "quiet"),
    v('\0', "separate-git-dir").no("puts the repository somewhere else, leaving a link to it"),
    v('b', "initial-branch"),
    v('\0', "object-format"),
    v('\0', "ref-format"),
];

fn init(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[INIT], PARSEOPT, args)?;
    let dirs: Vec<&str> = sc.all_operands().collect();
    match dirs.as_slice() {
        [] => p.writes.push(cx.at(".")),
        [d] => p.writes.push(cx.at(d)),
        _ => return Err(Refused::command("`git init` takes at most one directory")),
    }
    Ok(true)
}

const APPLY_OPTS: &[O] = &[
    v('\0', "exclude"),
    v('\0', "include"),
    v('p', ""),
    f('\0', "no-add"),
    f('\0', "stat").k(DRY),
    f('\0', "allow-binary-replacement"),
    f('\0', "binary"),
    f('\0', "numstat").k(DRY),
    f('\0', "summary").k(DRY),
    f('\0', "check").k(DRY),
    f('\0', "index"),
    f('N', "intent-to-add"),
    f('\0', "cached"),
    f('\0', "unsafe-paths").no("writes outside the work tree"),
    f('\0', "apply").k(APPLY),
    f('3', "3way"),
    f('\0', "ours"),
    f('\0', "theirs"),
    f('\0', "union"),
    v('\0', "build-fake-ancestor").no(OUT),
    f('z', ""),
    v('C', ""),
    v('\0', "whitespace"),
    f('\0', "ignore-space-change"),
    f('\0', "ignore-whitespace"),
    f('R', "reverse"),
    f('\0', "unidiff-zero"),
    f('\0', "reject"),
    f('\0', "allow-overlap"),
    f('v', "verbose"),
    f('q', "quiet"),
    f('\0', "inaccurate-eof"),
    f('\0', "recount"),
    v('\0', "directory").no("moves where the patch writes"),
    f('\0', "allow-empty"),
];

fn apply(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[APPLY_OPTS], PARSEOPT, args)?;
    for a in sc.all_operands() {
        if a != "-" {
            p.reads.push(cx.at(a));
        }
    }
    if sc.has(DRY) && !sc.has(APPLY) {
        return Ok(false);
    }
    // The files the patch names are inside the work tree (git apply refuses
    // others without --unsafe-paths).
    tree_write(cx, p);
    Ok(true)
}

const CLEAN: &[O] = &[
    f('q', "quiet"),
    f('n', "dry-run").k(DRY),
    f('f', "force"),
    f('i', "interactive").no(INTERACTIVE),
    f('d', ""),
    v('e', "exclude"),
    f('x', ""),
    f('X', ""),
];

fn clean(cx: &Cx, p: &mut Parsed, args: &[String]) -> Result<bool, Refused> {
    let sc = scan(cx, &[CLEAN], PARSEOPT, args)?;
    let ops: Vec<String> = sc.all_operands().map(|a| cx.at(a)).collect();
    let targets = if ops.is_empty() {
        vec![cx.at(".")]
    } else {
        ops
    };
    if sc.has(DRY) {
        p.reads.extend(targets);
        return Ok(false);
    }
    // Deletes untracked files anywhere below each pathspec.
    p.writes.extend(targets.iter().cloned());
    p.write_dirs_recursive.extend(targets);
    Ok(true)
}
