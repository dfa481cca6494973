//! How an option table is written (`Entry`, `Spec`, `O` and its flags)
//! and read (`getopt`, `walk`, `apply`), and what reading an argv yields
//! (`Parsed`). A leaf of `options`: each program's table (`coreutils.rs`,
//! `search.rs`, `find.rs`, `sed.rs`, git's `options.rs`) is written with
//! it, and `mod.rs` lists the tables.

/// What an argv does, as far as the gate must judge it.
use crate::security::refusal::Refused;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Paths the program will read (files or directories), as written.
    pub reads: Vec<String>,
    /// Paths it will create, modify, delete or truncate, as written.
    pub writes: Vec<String>,
    /// Trees it walks (`grep -r X dir`, `rg`, `find`, `ls -R`, `du`,
    /// `cp -r src`); "." when it defaults to the working directory. Each is
    /// also in `reads`.
    pub read_dirs_recursive: Vec<String>,
    /// Trees it may change anywhere inside (`cp -r SRC DEST`: DEST; `git
    /// checkout`, `git clean`, `git reset --hard`: the work tree). Each is
    /// also in `writes`.
    pub write_dirs_recursive: Vec<String>,
    /// The program or subcommand changes files (tee, mkdir, touch, cp, mv,
    /// `sed -i`, `sort -o`, `uniq IN OUT`, `git add`...): medium risk.
    pub writes_anything: bool,
    /// It follows symbolic links while walking a tree (`grep -R`, `rg -L`,
    /// `find -L`, `ls -RL`, `du -L`, `cp -rL`, `diff -r` without
    /// `--no-dereference`), so a link inside the workspace can lead it out.
    pub follows_symlinks_recursively: bool,
    /// For git: the index in the full argv (`argv[0]` being `git`) of the
    /// subcommand word, i.e. `args[i - 1]` of the slice given to [`parse`].
    pub git_subcommand: Option<usize>,
    /// For git: the subcommand's operands before `--` (revisions, or paths
    /// git tells apart at run time) and the pathspecs after it, as paths
    /// from latchclaw's directory.
    pub git_operands: Vec<String>,
    pub git_pathspecs: Vec<String>,
    /// Where a `-` given as a file to read would be a file named `-`:
    /// standard input to most programs, a file to some options (`git blame
    /// --ignore-revs-file -`, `sort --random-source=-`, `date -r -`). Judged
    /// as a read whenever such a file is there.
    pub dash_reads: Vec<String>,
}

pub(in crate::security) struct Entry {
    pub(in crate::security) name: &'static str,
    pub(in crate::security) parse: fn(&[String]) -> Result<Parsed, Refused>,
    pub(in crate::security) spec: Option<&'static Spec>,
    pub(in crate::security) summary: &'static str,
}

// ---------------------------------------------------------------------------
// Option tables.

/// How an option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum A {
    /// No value.
    N,
    /// A value: glued (`-oX`, `--out=X`) or the next word.
    R,
    /// An optional value, only when glued (`-i.bak`, `--color=auto`).
    P,
    /// git: a value that must be glued with `=` (`--format=X`).
    G,
    /// git: the next word when there is one, else a default (`--contains`).
    L,
}
pub(crate) use A::{N, P, R};

/// What an option's value (or the option itself) means to the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum V {
    Plain,
    /// The value is a path the program reads.
    Read,
    /// The value is a path the program writes.
    Write,
    /// The option is refused; the text says why.
    Refuse(&'static str),
}

/// One option: its short letter ('\0': none), long name ("": none), how it
/// takes a value, what the value is, and program-specific bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct O {
    pub s: char,
    pub l: &'static str,
    pub a: A,
    pub v: V,
    pub k: u32,
}

pub(crate) const fn o(s: char, l: &'static str, a: A) -> O {
    O {
        s,
        l,
        a,
        v: V::Plain,
        k: 0,
    }
}

impl O {
    pub(crate) const fn rd(self) -> O {
        O { v: V::Read, ..self }
    }
    pub(crate) const fn wr(self) -> O {
        O {
            v: V::Write,
            ..self
        }
    }
    pub(crate) const fn no(self, why: &'static str) -> O {
        O {
            v: V::Refuse(why),
            ..self
        }
    }
    pub(crate) const fn k(self, bits: u32) -> O {
        O {
            k: self.k | bits,
            ..self
        }
    }
    /// How the gate's messages name it.
    pub(crate) fn name(&self) -> String {
        if self.l.is_empty() {
            format!("-{}", self.s)
        } else {
            format!("--{}", self.l)
        }
    }
    /// The same option in the program's eyes (what abbreviation resolution
    /// compares).
    pub(super) fn same_meaning(&self, other: &O) -> bool {
        self.a == other.a && self.v == other.v && self.k == other.k
    }
}

// Program-specific bits (each program reads only its own).
pub(crate) const REC: u32 = 1;
pub(crate) const FOLLOW: u32 = 1 << 1;
/// grep/rg: a pattern came from an option, so no operand is the pattern.
pub(crate) const PAT: u32 = 1 << 2;
/// cp/mv `-t DIR`.
pub(crate) const TARGET: u32 = 1 << 3;
/// cp `--parents`.
pub(crate) const PARENTS: u32 = 1 << 4;
/// diff `--no-dereference`.
pub(crate) const NODEREF: u32 = 1 << 5;
/// grep `-d ACTION`.
pub(crate) const DIRACT: u32 = 1 << 6;
/// rg modes that search nothing or take no pattern (`--files`).
pub(crate) const NOPAT: u32 = 1 << 7;
/// file `-m LIST` (colon-separated magic files).
pub(crate) const COLON: u32 = 1 << 8;
/// sed bits.
pub(crate) const SCRIPT: u32 = 1 << 9;
pub(crate) const SCRIPT_FILE: u32 = 1 << 10;
pub(crate) const INPLACE: u32 = 1 << 11;
pub(crate) const SANDBOX: u32 = 1 << 12;
pub(crate) const FOLLOW_LINKS: u32 = 1 << 13;
/// Makes the call a writing one (writes_anything).
pub(crate) const WRITES: u32 = 1 << 14;

// ---------------------------------------------------------------------------
// The getopt_long / lexopt resolver.

/// How the program treats operands that come before options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// GNU default: options anywhere, operands collected in order.
    Permute,
    /// "+" in the short string: the first operand ends the options.
    RequireOrder,
}

/// How long names are matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// getopt_long: exact name, else a unique prefix among all long names.
    Gnu,
    /// lexopt (ripgrep): exact names only; `-o=V` strips one `=`.
    Lexopt,
}

pub(crate) struct Spec {
    pub prog: &'static str,
    pub opts: &'static [O],
    pub order: Order,
    pub style: Style,
}

/// One resolved word (or option inside a cluster).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Item<'a> {
    Opt(Hit<'a>),
    /// An operand; `true` when it came after `--`.
    Arg(&'a str, bool),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Hit<'a> {
    pub o: &'static O,
    pub val: Option<&'a str>,
    /// The long name as written (a prefix of `o.l`), "" for short options.
    pub written: &'a str,
}

impl Hit<'_> {
    /// "`--compress` (read as `--compress-program`)" or "`-o`".
    pub(crate) fn shown(&self) -> String {
        if self.written.is_empty() || self.written == self.o.l {
            format!("`{}`", self.o.name())
        } else {
            format!("`--{}` (read as `{}`)", self.written, self.o.name())
        }
    }
}

pub(crate) fn refusal(prog: &str, hit: &Hit, why: &str) -> Refused {
    Refused::command(format!("`{prog}` option {} {why}", hit.shown()))
}

fn unknown(prog: &str, opt: &str) -> Refused {
    Refused::command(format!(
        "`{prog}` option `{opt}` is not known to latchclaw's table for `{prog}`"
    ))
}

/// Resolves the long name `name` (without `--`) like getopt_long (or exactly
/// for lexopt): an exact match wins; else the unique prefix match; several
/// prefix matches that mean the same thing are one option (glibc takes the
/// first); otherwise it is ambiguous and refused.
fn lookup_long(spec: &Spec, name: &str) -> Result<&'static O, Refused> {
    let shown = format!("--{name}");
    if name.is_empty() {
        return Err(unknown(spec.prog, &shown));
    }
    if let Some(o) = spec.opts.iter().find(|o| o.l == name) {
        return Ok(o);
    }
    if spec.style == Style::Lexopt {
        return Err(unknown(spec.prog, &shown));
    }
    let mut first: Option<&'static O> = None;
    let mut names: Vec<&str> = Vec::new();
    let mut ambiguous = false;
    for o in spec.opts.iter().filter(|o| o.l.starts_with(name)) {
        match first {
            None => first = Some(o),
            Some(f) if !f.same_meaning(o) => ambiguous = true,
            Some(_) => {}
        }
        names.push(o.l);
    }
    match first {
        None => Err(unknown(spec.prog, &shown)),
        Some(_) if ambiguous => Err(Refused::command(format!(
            "`{}` option `{shown}` is ambiguous (--{}); latchclaw refuses ambiguous abbreviations",
            spec.prog,
            names.join(", --")
        ))),
        Some(o) => Ok(o),
    }
}

fn lookup_short(spec: &Spec, c: char) -> Result<&'static O, Refused> {
    spec.opts
        .iter()
        .find(|o| o.s == c && c != '\0')
        .ok_or_else(|| unknown(spec.prog, &format!("-{c}")))
}

fn missing(prog: &str, o: &O) -> Refused {
    Refused::command(format!("`{prog}` option `{}` needs a value", o.name()))
}

/// Splits `args` into options (with their values) and operands exactly as
/// the program's parser does.
pub(crate) fn getopt<'a>(spec: &Spec, args: &'a [String]) -> Result<Vec<Item<'a>>, Refused> {
    getopt_end(spec, args).map(|(items, _)| items)
}

/// [`getopt`], and the index in `args` where the options end.
pub(super) fn getopt_end<'a>(
    spec: &Spec,
    args: &'a [String],
) -> Result<(Vec<Item<'a>>, usize), Refused> {
    let prog = spec.prog;
    let mut items = Vec::with_capacity(args.len());
    let mut ended = false;
    let mut end = args.len();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        i += 1;
        if ended {
            items.push(Item::Arg(a, true));
            continue;
        }
        if a == "--" {
            ended = true;
            end = i - 1;
            continue;
        }
        if a.len() < 2 || !a.starts_with('-') {
            items.push(Item::Arg(a, false));
            if spec.order == Order::RequireOrder {
                // Everything after the first operand is an operand too, but
                // not "after --" for programs that care.
                for rest in &args[i..] {
                    items.push(Item::Arg(rest.as_str(), false));
                }
                return Ok((items, i - 1));
            }
            continue;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, glued) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let o = lookup_long(spec, name)?;
            let val = match o.a {
                A::N => {
                    if glued.is_some() {
                        return Err(Refused::command(format!(
                            "`{prog}` option `{}` takes no value",
                            o.name()
                        )));
                    }
                    None
                }
                A::R => match glued {
                    Some(v) => Some(v),
                    None => {
                        let Some(next) = args.get(i) else {
                            return Err(missing(prog, o));
                        };
                        i += 1;
                        Some(next.as_str())
                    }
                },
                _ => glued,
            };
            items.push(Item::Opt(Hit {
                o,
                val,
                written: name,
            }));
            continue;
        }
        // A cluster of short options.
        let body = &a[1..];
        for (pos, c) in body.char_indices() {
            if spec.style == Style::Lexopt && c == '=' && pos > 0 {
                return Err(Refused::command(format!(
                    "`{prog}` option `{a}`: a flag that takes no value is followed by `=`"
                )));
            }
            let o = lookup_short(spec, c)?;
            let rest = &body[pos + c.len_utf8()..];
            match o.a {
                A::N => {
                    items.push(Item::Opt(Hit {
                        o,
                        val: None,
                        written: "",
                    }));
                }
                A::P => {
                    let val = (!rest.is_empty()).then_some(rest);
                    items.push(Item::Opt(Hit {
                        o,
                        val,
                        written: "",
                    }));
                    break;
                }
                _ => {
                    let val = if !rest.is_empty() {
                        if spec.style == Style::Lexopt {
                            rest.strip_prefix('=').unwrap_or(rest)
                        } else {
                            rest
                        }
                    } else {
                        let Some(next) = args.get(i) else {
                            return Err(missing(prog, o));
                        };
                        i += 1;
                        next.as_str()
                    };
                    items.push(Item::Opt(Hit {
                        o,
                        val: Some(val),
                        written: "",
                    }));
                    break;
                }
            }
        }
    }
    Ok((items, end))
}

/// The usual walk over resolved items: option values that are paths go into
/// `reads`/`writes`, refused options refuse, the program bits are OR-ed, and
/// the operands come back in order.
pub(crate) struct Walk<'a> {
    pub p: Parsed,
    pub bits: u32,
    pub operands: Vec<&'a str>,
    pub items: Vec<Item<'a>>,
}

pub(crate) fn walk<'a>(spec: &Spec, args: &'a [String]) -> Result<Walk<'a>, Refused> {
    let items = getopt(spec, args)?;
    let mut w = Walk {
        p: Parsed::default(),
        bits: 0,
        operands: Vec::new(),
        items: Vec::new(),
    };
    for it in &items {
        match it {
            Item::Opt(h) => {
                apply(spec.prog, &mut w.p, h)?;
                w.bits |= h.o.k;
            }
            Item::Arg(a, _) => w.operands.push(a),
        }
    }
    w.items = items;
    if w.bits & WRITES != 0 {
        w.p.writes_anything = true;
    }
    Ok(w)
}

/// The generic meaning of one option: path values and refusals.
pub(crate) fn apply(prog: &str, p: &mut Parsed, h: &Hit) -> Result<(), Refused> {
    match h.o.v {
        V::Plain => {}
        V::Refuse(why) => return Err(refusal(prog, h, why)),
        V::Read => {
            if let Some(v) = h.val {
                if h.o.k & COLON != 0 {
                    for part in v.split(':').filter(|s| !s.is_empty()) {
                        p.reads.push(part.to_string());
                    }
                } else {
                    push_read(p, v);
                }
            }
        }
        V::Write => {
            if let Some(v) = h.val {
                p.writes.push(v.to_string());
                p.writes_anything = true;
            }
        }
    }
    Ok(())
}

/// A read; `-` (standard input, or a file of that name) in `dash_reads`.
pub(crate) fn push_read(p: &mut Parsed, path: &str) {
    if path == "-" {
        p.dash_reads.push(path.to_string());
    } else {
        p.reads.push(path.to_string());
    }
}

/// A tree walked (and read).
pub(crate) fn push_tree(p: &mut Parsed, path: &str) {
    if path == "-" {
        p.dash_reads.push(path.to_string());
    } else {
        p.reads.push(path.to_string());
        p.read_dirs_recursive.push(path.to_string());
    }
}

/// A tree walked (and read) by a program for which `-` is a file named `-`
/// (ls, du, cp, find), so it is judged like any other name.
pub(crate) fn push_tree_named(p: &mut Parsed, path: &str) {
    p.reads.push(path.to_string());
    p.read_dirs_recursive.push(path.to_string());
}

/// Operands are reads; with `recursive`, trees (default "." when none).
pub(crate) fn operands_read(p: &mut Parsed, operands: &[&str], recursive: bool, dflt: bool) {
    if recursive {
        if operands.is_empty() && dflt {
            push_tree(p, ".");
        }
        for a in operands {
            push_tree(p, a);
        }
    } else {
        if operands.is_empty() && dflt {
            push_read(p, ".");
        }
        for a in operands {
            push_read(p, a);
        }
    }
}
