//! GNU coreutils 9.1 (and debianutils `which`): the long and short option
//! lists are those compiled into the binaries.

use crate::security::gate::Gate;
use crate::security::paths::absolute;
use crate::security::refusal::Refused;
use std::path::{Path, PathBuf};

use super::table::{
    Entry, FOLLOW, Item, N, O, Order, P, PARENTS, Parsed, R, REC, Spec, Style, TARGET, getopt, o,
    operands_read, push_read, push_tree, push_tree_named, walk,
};

const fn gnu(prog: &'static str, opts: &'static [O]) -> Spec {
    Spec {
        prog,
        opts,
        order: Order::Permute,
        style: Style::Gnu,
    }
}

const NAMES_HIDDEN: &str = "reads file names from a file the gate cannot see";

// ---------------------------------------------------------------- ls

const LS_OPTS: &[O] = &[
    o('a', "all", N),
    o('b', "escape", N),
    o('d', "directory", N),
    o('D', "dired", N),
    o('\0', "full-time", N),
    o('\0', "group-directories-first", N),
    o('h', "human-readable", N),
    o('i', "inode", N),
    o('k', "kibibytes", N),
    o('n', "numeric-uid-gid", N),
    o('G', "no-group", N),
    o('q', "hide-control-chars", N),
    o('r', "reverse", N),
    o('s', "size", N),
    o('w', "width", R),
    o('A', "almost-all", N),
    o('B', "ignore-backups", N),
    o('\0', "classify", P),
    o('\0', "file-type", N),
    o('\0', "si", N),
    o('H', "dereference-command-line", N),
    o('\0', "dereference-command-line-symlink-to-dir", N),
    o('\0', "hide", R),
    o('I', "ignore", R),
    o('\0', "indicator-style", R),
    o('L', "dereference", N).k(FOLLOW),
    o('N', "literal", N),
    o('Q', "quote-name", N),
    o('\0', "quoting-style", R),
    o('R', "recursive", N).k(REC),
    o('\0', "format", R),
    o('\0', "show-control-chars", N),
    o('\0', "sort", R),
    o('T', "tabsize", R),
    o('\0', "time", R),
    o('\0', "time-style", R),
    o('\0', "zero", N),
    o('\0', "color", P),
    o('\0', "hyperlink", P),
    o('\0', "block-size", R),
    o('Z', "context", N),
    o('\0', "author", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('c', "", N),
    o('f', "", N),
    o('g', "", N),
    o('l', "", N),
    o('m', "", N),
    o('o', "", N),
    o('p', "", N),
    o('t', "", N),
    o('u', "", N),
    o('v', "", N),
    o('x', "", N),
    o('C', "", N),
    o('F', "", N),
    o('S', "", N),
    o('U', "", N),
    o('X', "", N),
    o('1', "", N),
];
const LS_SPEC: Spec = gnu("ls", LS_OPTS);
pub(super) const LS: Entry = Entry {
    name: "ls",
    parse: ls,
    spec: Some(&LS_SPEC),
    summary: "operands read (default .); recursive with -R, following links with -RL",
};

fn ls(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&LS_SPEC, args)?;
    let rec = w.bits & REC != 0;
    // `ls` names "-" as a file, not standard input.
    if rec {
        if w.operands.is_empty() {
            push_tree_named(&mut w.p, ".");
        }
        for a in &w.operands {
            push_tree_named(&mut w.p, a);
        }
    } else {
        if w.operands.is_empty() {
            w.p.reads.push(".".into());
        }
        for a in &w.operands {
            w.p.reads.push(a.to_string());
        }
    }
    w.p.follows_symlinks_recursively = rec && w.bits & FOLLOW != 0;
    Ok(w.p)
}

// ---------------------------------------------------------------- cat

const CAT_OPTS: &[O] = &[
    o('b', "number-nonblank", N),
    o('n', "number", N),
    o('s', "squeeze-blank", N),
    o('v', "show-nonprinting", N),
    o('E', "show-ends", N),
    o('T', "show-tabs", N),
    o('A', "show-all", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('e', "", N),
    o('t', "", N),
    o('u', "", N),
];
const CAT_SPEC: Spec = gnu("cat", CAT_OPTS);
pub(super) const CAT: Entry = Entry {
    name: "cat",
    parse: |a| reads_only(&CAT_SPEC, a),
    spec: Some(&CAT_SPEC),
    summary: "operands read",
};

/// Programs whose operands are files they read (`-` is standard input).
fn reads_only(spec: &Spec, args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(spec, args)?;
    operands_read(&mut w.p, &w.operands, false, false);
    Ok(w.p)
}

// ---------------------------------------------------------------- head

// Digits are left out: after the first argument they make head fail.
const HEAD_OPTS: &[O] = &[
    o('c', "bytes", R),
    o('n', "lines", R),
    o('\0', "-presume-input-pipe", N),
    o('q', "quiet", N),
    o('q', "silent", N),
    o('v', "verbose", N),
    o('z', "zero-terminated", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
const HEAD_SPEC: Spec = gnu("head", HEAD_OPTS);
pub(super) const HEAD: Entry = Entry {
    name: "head",
    parse: head,
    spec: Some(&HEAD_SPEC),
    summary: "operands read; -NUM[bcklmqvz] as the first argument",
};

fn head(args: &[String]) -> Result<Parsed, Refused> {
    // The obsolete `-NUM[letters]` form is only looked for in the first
    // argument, and the whole word is consumed (`-5c` is 5 bytes, not `-c`
    // taking the next word as its value).
    let rest = match args.first() {
        Some(a) if a.len() > 1 && a.starts_with('-') && a.as_bytes()[1].is_ascii_digit() => {
            let letters = a[1..].trim_start_matches(|c: char| c.is_ascii_digit());
            if let Some(bad) = letters.chars().find(|c| !"bcklmqvz".contains(*c)) {
                return Err(Refused::command(format!(
                    "`head` option `{a}`: `{bad}` is not a valid letter after the count"
                )));
            }
            &args[1..]
        }
        _ => args,
    };
    reads_only(&HEAD_SPEC, rest)
}

// ---------------------------------------------------------------- tail

const FOLLOWS_FOREVER: &str = "follows the file and never ends (the call would only time out)";
const TAIL_OPTS: &[O] = &[
    o('c', "bytes", R),
    o('\0', "follow", P).no(FOLLOWS_FOREVER),
    o('n', "lines", R),
    o('\0', "max-unchanged-stats", R),
    o('\0', "-disable-inotify", N),
    o('\0', "pid", R),
    o('\0', "-presume-input-pipe", N),
    o('q', "quiet", N),
    o('\0', "retry", N),
    o('q', "silent", N),
    o('s', "sleep-interval", R),
    o('v', "verbose", N),
    o('z', "zero-terminated", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('f', "", N).no(FOLLOWS_FOREVER),
    o('F', "", N).no(FOLLOWS_FOREVER),
];
const TAIL_SPEC: Spec = gnu("tail", TAIL_OPTS);
pub(super) const TAIL: Entry = Entry {
    name: "tail",
    parse: tail,
    spec: Some(&TAIL_SPEC),
    summary: "operands read; -NUM / +NUM forms; -f refused (never ends)",
};

/// coreutils' `parse_obsolete_option`: `tail -5 [FILE]`, `tail +3 FILE`,
/// `tail -5c`, with at most one file.
fn tail_obsolete(args: &[String]) -> Option<Result<(), Refused>> {
    let n = args.len();
    let shape = n == 1
        || (n == 2 && !(args[1].starts_with('-') && args[1].len() > 1))
        || ((n == 2 || n == 3) && args[1] == "--");
    if !shape {
        return None;
    }
    let a = args[0].as_str();
    let body = if let Some(b) = a.strip_prefix('+') {
        b
    } else if let Some(b) = a.strip_prefix('-') {
        // "-" is standard input and "-c" needs a value: not this form.
        let skip = usize::from(b.starts_with('c'));
        if b.len() <= skip {
            return None;
        }
        b
    } else {
        return None;
    };
    let rest = body.trim_start_matches(|c: char| c.is_ascii_digit());
    let rest = rest
        .strip_prefix(['b', 'c', 'l'])
        .unwrap_or(rest)
        .to_string();
    match rest.as_str() {
        "" => Some(Ok(())),
        "f" => Some(Err(Refused::command(format!(
            "`tail` option `{a}` {FOLLOWS_FOREVER}"
        )))),
        _ => None,
    }
}

fn tail(args: &[String]) -> Result<Parsed, Refused> {
    let rest = match tail_obsolete(args) {
        Some(r) => {
            r?;
            &args[1..]
        }
        None => args,
    };
    reads_only(&TAIL_SPEC, rest)
}

// ---------------------------------------------------------------- wc

const WC_OPTS: &[O] = &[
    o('c', "bytes", N),
    o('m', "chars", N),
    o('l', "lines", N),
    o('w', "words", N),
    o('\0', "debug", N),
    o('\0', "files0-from", R).no(NAMES_HIDDEN),
    o('L', "max-line-length", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
const WC_SPEC: Spec = gnu("wc", WC_OPTS);
pub(super) const WC: Entry = Entry {
    name: "wc",
    parse: |a| reads_only(&WC_SPEC, a),
    spec: Some(&WC_SPEC),
    summary: "operands read; --files0-from refused",
};

// ---------------------------------------------------------------- text-only

fn plain(_: &[String]) -> Result<Parsed, Refused> {
    Ok(Parsed::default())
}

pub(super) const ECHO: Entry = Entry {
    name: "echo",
    parse: plain,
    spec: None,
    summary: "prints its operands; touches no file",
};
pub(super) const PRINTF: Entry = Entry {
    name: "printf",
    parse: plain,
    spec: None,
    summary: "prints its operands; touches no file",
};
pub(super) const EXPR: Entry = Entry {
    name: "expr",
    parse: plain,
    spec: None,
    summary: "evaluates its operands; touches no file",
};
pub(super) const TRUE: Entry = Entry {
    name: "true",
    parse: plain,
    spec: None,
    summary: "does nothing",
};

const PWD_OPTS: &[O] = &[
    o('L', "logical", N),
    o('P', "physical", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
const PWD_SPEC: Spec = gnu("pwd", PWD_OPTS);
pub(super) const PWD: Entry = Entry {
    name: "pwd",
    parse: |a| walk(&PWD_SPEC, a).map(|w| w.p),
    spec: Some(&PWD_SPEC),
    summary: "prints the working directory",
};

const BASENAME_OPTS: &[O] = &[
    o('a', "multiple", N),
    o('s', "suffix", R),
    o('z', "zero", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
const BASENAME_SPEC: Spec = Spec {
    order: Order::RequireOrder,
    ..gnu("basename", BASENAME_OPTS)
};
pub(super) const BASENAME: Entry = Entry {
    name: "basename",
    parse: |a| walk(&BASENAME_SPEC, a).map(|w| w.p),
    spec: Some(&BASENAME_SPEC),
    summary: "operands are text",
};

const DIRNAME_OPTS: &[O] = &[o('z', "zero", N), o('\0', "help", N), o('\0', "version", N)];
const DIRNAME_SPEC: Spec = gnu("dirname", DIRNAME_OPTS);
pub(super) const DIRNAME: Entry = Entry {
    name: "dirname",
    parse: |a| walk(&DIRNAME_SPEC, a).map(|w| w.p),
    spec: Some(&DIRNAME_SPEC),
    summary: "operands are text",
};

const TR_OPTS: &[O] = &[
    o('c', "complement", N),
    o('d', "delete", N),
    o('s', "squeeze-repeats", N),
    o('t', "truncate-set1", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('A', "", N),
    o('C', "", N),
];
const TR_SPEC: Spec = Spec {
    order: Order::RequireOrder,
    ..gnu("tr", TR_OPTS)
};
pub(super) const TR: Entry = Entry {
    name: "tr",
    parse: |a| walk(&TR_SPEC, a).map(|w| w.p),
    spec: Some(&TR_SPEC),
    summary: "operands are character sets; reads standard input only",
};

// ---------------------------------------------------------------- which

pub(super) const WHICH: Entry = Entry {
    name: "which",
    parse: which,
    spec: None,
    summary: "option -a; names with a / are paths it checks",
};

/// debianutils `which` is a shell script using `getopts a`.
fn which(args: &[String]) -> Result<Parsed, Refused> {
    let mut p = Parsed::default();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "--" {
            i += 1;
            break;
        }
        if a.len() < 2 || !a.starts_with('-') {
            break;
        }
        if let Some(c) = a[1..].chars().find(|&c| c != 'a') {
            return Err(Refused::command(format!(
                "`which` option `-{c}` is not known (only -a is)"
            )));
        }
        i += 1;
    }
    for a in &args[i..] {
        if a.contains('/') {
            p.reads.push(a.clone());
        }
    }
    Ok(p)
}

// ---------------------------------------------------------------- date

const DATE_OPTS: &[O] = &[
    o('d', "date", R),
    o('\0', "debug", N),
    o('f', "file", R).rd(),
    o('I', "iso-8601", P),
    o('r', "reference", R).rd(),
    o('\0', "resolution", N),
    o('R', "rfc-email", N),
    o('R', "rfc-822", N),
    o('R', "rfc-2822", N),
    o('\0', "rfc-3339", R),
    o('s', "set", R).no("sets the system clock"),
    o('u', "uct", N),
    o('u', "utc", N),
    o('u', "universal", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
const DATE_SPEC: Spec = gnu("date", DATE_OPTS);
pub(super) const DATE: Entry = Entry {
    name: "date",
    parse: date,
    spec: Some(&DATE_SPEC),
    summary: "+FORMAT operand; -f/-r read; -s and a date operand (sets the clock) refused",
};

fn date(args: &[String]) -> Result<Parsed, Refused> {
    let w = walk(&DATE_SPEC, args)?;
    if let Some(a) = w.operands.iter().find(|a| !a.starts_with('+')) {
        return Err(Refused::command(format!(
            "`date` operand `{a}` sets the system clock (only a +FORMAT operand is allowed)"
        )));
    }
    Ok(w.p)
}

// ---------------------------------------------------------------- sort

const SORT_OPTS: &[O] = &[
    o('b', "ignore-leading-blanks", N),
    o('\0', "check", P),
    o('\0', "compress-program", R).no("runs a program"),
    o('\0', "debug", N),
    o('d', "dictionary-order", N),
    o('f', "ignore-case", N),
    o('\0', "files0-from", R).no(NAMES_HIDDEN),
    o('g', "general-numeric-sort", N),
    o('i', "ignore-nonprinting", N),
    o('k', "key", R),
    o('m', "merge", N),
    o('M', "month-sort", N),
    o('n', "numeric-sort", N),
    o('h', "human-numeric-sort", N),
    o('V', "version-sort", N),
    o('R', "random-sort", N),
    o('\0', "random-source", R).rd(),
    o('\0', "sort", R),
    o('o', "output", R).wr(),
    o('r', "reverse", N),
    o('s', "stable", N),
    o('\0', "batch-size", R),
    o('S', "buffer-size", R),
    o('t', "field-separator", R),
    // Temporary files are created (and removed) there.
    o('T', "temporary-directory", R).wr(),
    o('u', "unique", N),
    o('z', "zero-terminated", N),
    o('\0', "parallel", R),
    o('\0', "help", N),
    o('\0', "version", N),
    o('c', "", N),
    o('C', "", N),
    o('y', "", R),
];
// sort's short string starts with '-' (operands come back in order), which
// for judging is the same as permuting.
const SORT_SPEC: Spec = gnu("sort", SORT_OPTS);
pub(super) const SORT: Entry = Entry {
    name: "sort",
    parse: |a| reads_only(&SORT_SPEC, a),
    spec: Some(&SORT_SPEC),
    summary: "operands read; -o/-T write; --compress-program and --files0-from refused",
};

// ---------------------------------------------------------------- uniq

const UNIQ_OPTS: &[O] = &[
    o('c', "count", N),
    o('d', "repeated", N),
    o('\0', "all-repeated", P),
    o('\0', "group", P),
    o('i', "ignore-case", N),
    o('u', "unique", N),
    o('f', "skip-fields", R),
    o('s', "skip-chars", R),
    o('w', "check-chars", R),
    o('z', "zero-terminated", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('0', "", N),
    o('1', "", N),
    o('2', "", N),
    o('3', "", N),
    o('4', "", N),
    o('5', "", N),
    o('6', "", N),
    o('7', "", N),
    o('8', "", N),
    o('9', "", N),
    o('D', "", N),
];
const UNIQ_SPEC: Spec = gnu("uniq", UNIQ_OPTS);
pub(super) const UNIQ: Entry = Entry {
    name: "uniq",
    parse: uniq,
    spec: Some(&UNIQ_SPEC),
    summary: "first operand read, second operand WRITTEN; +N skips characters",
};

fn uniq(args: &[String]) -> Result<Parsed, Refused> {
    let items = getopt(&UNIQ_SPEC, args)?;
    let mut p = Parsed::default();
    let mut files: Vec<&str> = Vec::new();
    for it in &items {
        match it {
            Item::Opt(h) => super::table::apply("uniq", &mut p, h)?,
            // `+N` before `--` is the obsolete skip-characters option (when
            // it is a number uniq can hold), not a file.
            Item::Arg(a, false) if plus_number(a) => {}
            Item::Arg(a, _) => files.push(a),
        }
    }
    if files.len() > 2 {
        return Err(Refused::command(format!(
            "`uniq` takes at most two operands (input, output); `{}` is extra",
            files[2]
        )));
    }
    if let Some(input) = files.first() {
        push_read(&mut p, input);
    }
    if let Some(&out) = files.get(1)
        && out != "-"
    {
        p.writes.push(out.to_string());
        p.writes_anything = true;
    }
    Ok(p)
}

fn plus_number(a: &str) -> bool {
    a.strip_prefix('+').is_some_and(|d| {
        !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && d.parse::<u64>().is_ok()
    })
}

// ---------------------------------------------------------------- cut

const CUT_OPTS: &[O] = &[
    o('b', "bytes", R),
    o('c', "characters", R),
    o('f', "fields", R),
    o('d', "delimiter", R),
    o('s', "only-delimited", N),
    o('\0', "output-delimiter", R),
    o('\0', "complement", N),
    o('z', "zero-terminated", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('n', "", N),
];
const CUT_SPEC: Spec = gnu("cut", CUT_OPTS);
pub(super) const CUT: Entry = Entry {
    name: "cut",
    parse: |a| reads_only(&CUT_SPEC, a),
    spec: Some(&CUT_SPEC),
    summary: "operands read",
};

// ---------------------------------------------------------------- stat

const STAT_OPTS: &[O] = &[
    o('L', "dereference", N),
    o('f', "file-system", N),
    o('c', "format", R),
    o('\0', "printf", R),
    o('t', "terse", N),
    o('\0', "cached", R),
    o('\0', "help", N),
    o('\0', "version", N),
];
const STAT_SPEC: Spec = gnu("stat", STAT_OPTS);
pub(super) const STAT: Entry = Entry {
    name: "stat",
    parse: |a| reads_only(&STAT_SPEC, a),
    spec: Some(&STAT_SPEC),
    summary: "operands read",
};

// ---------------------------------------------------------------- du

const DU_OPTS: &[O] = &[
    o('a', "all", N),
    o('\0', "apparent-size", N),
    o('B', "block-size", R),
    o('b', "bytes", N),
    o('l', "count-links", N),
    o('L', "dereference", N).k(FOLLOW),
    o('D', "dereference-args", N),
    o('\0', "exclude", R),
    o('X', "exclude-from", R).rd(),
    o('\0', "files0-from", R).no(NAMES_HIDDEN),
    o('h', "human-readable", N),
    o('\0', "inodes", N),
    o('\0', "si", N),
    o('d', "max-depth", R),
    o('0', "null", N),
    o('P', "no-dereference", N),
    o('x', "one-file-system", N),
    o('S', "separate-dirs", N),
    o('s', "summarize", N),
    o('c', "total", N),
    o('t', "threshold", R),
    o('\0', "time", P),
    o('\0', "time-style", R),
    o('\0', "help", N),
    o('\0', "version", N),
    o('H', "", N),
    o('k', "", N),
    o('m', "", N),
];
const DU_SPEC: Spec = gnu("du", DU_OPTS);
pub(super) const DU: Entry = Entry {
    name: "du",
    parse: du,
    spec: Some(&DU_SPEC),
    summary: "operands are trees (default .); -L follows links; --files0-from refused",
};

fn du(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&DU_SPEC, args)?;
    if w.operands.is_empty() {
        push_tree(&mut w.p, ".");
    }
    for a in &w.operands {
        push_tree_named(&mut w.p, a);
    }
    w.p.follows_symlinks_recursively = w.bits & FOLLOW != 0;
    Ok(w.p)
}

// ---------------------------------------------------------------- df

const DF_OPTS: &[O] = &[
    o('a', "all", N),
    o('B', "block-size", R),
    o('i', "inodes", N),
    o('h', "human-readable", N),
    o('H', "si", N),
    o('l', "local", N),
    o('\0', "output", P),
    o('P', "portability", N),
    o('T', "print-type", N),
    o('\0', "sync", N),
    o('\0', "no-sync", N),
    o('\0', "total", N),
    o('t', "type", R),
    o('x', "exclude-type", R),
    o('\0', "help", N),
    o('\0', "version", N),
    o('F', "", R),
    o('k', "", N),
    o('m', "", N),
    o('v', "", N),
];
const DF_SPEC: Spec = gnu("df", DF_OPTS);
pub(super) const DF: Entry = Entry {
    name: "df",
    parse: |a| {
        let w = walk(&DF_SPEC, a)?;
        let mut p = w.p;
        p.reads.extend(w.operands.iter().map(|s| s.to_string()));
        Ok(p)
    },
    spec: Some(&DF_SPEC),
    summary: "operands read (their file systems)",
};

// ---------------------------------------------------------------- tee / mkdir / touch

const TEE_OPTS: &[O] = &[
    o('a', "append", N),
    o('i', "ignore-interrupts", N),
    o('\0', "output-error", P),
    o('\0', "help", N),
    o('\0', "version", N),
    o('p', "", N),
];
const TEE_SPEC: Spec = gnu("tee", TEE_OPTS);
pub(super) const TEE: Entry = Entry {
    name: "tee",
    parse: |a| writes_all(&TEE_SPEC, a),
    spec: Some(&TEE_SPEC),
    summary: "operands WRITTEN",
};

/// Programs whose operands are all files they create or change.
fn writes_all(spec: &Spec, args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(spec, args)?;
    w.p.writes.extend(w.operands.iter().map(|s| s.to_string()));
    w.p.writes_anything = true;
    Ok(w.p)
}

const MKDIR_OPTS: &[O] = &[
    o('\0', "context", P),
    o('m', "mode", R),
    o('p', "parents", N),
    o('v', "verbose", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('Z', "", N),
];
const MKDIR_SPEC: Spec = gnu("mkdir", MKDIR_OPTS);
pub(super) const MKDIR: Entry = Entry {
    name: "mkdir",
    parse: |a| writes_all(&MKDIR_SPEC, a),
    spec: Some(&MKDIR_SPEC),
    summary: "operands WRITTEN",
};

const TOUCH_OPTS: &[O] = &[
    o('\0', "time", R),
    o('c', "no-create", N),
    o('d', "date", R),
    o('r', "reference", R).rd(),
    o('h', "no-dereference", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('a', "", N),
    o('f', "", N),
    o('m', "", N),
    o('t', "", R),
];
const TOUCH_SPEC: Spec = gnu("touch", TOUCH_OPTS);
pub(super) const TOUCH: Entry = Entry {
    name: "touch",
    parse: touch,
    spec: Some(&TOUCH_SPEC),
    summary: "operands WRITTEN; -r read",
};

fn touch(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&TOUCH_SPEC, args)?;
    // `touch -` changes the times of standard output, not a file named "-".
    w.p.writes.extend(
        w.operands
            .iter()
            .filter(|a| **a != "-")
            .map(|s| s.to_string()),
    );
    w.p.writes_anything = true;
    Ok(w.p)
}

// ---------------------------------------------------------------- cp / mv

const LINKS_OUT: &str = "makes links, which can point anywhere";
const CP_OPTS: &[O] = &[
    o('a', "archive", N).k(REC),
    o('\0', "attributes-only", N),
    o('\0', "backup", P),
    o('\0', "copy-contents", N),
    o('L', "dereference", N).k(FOLLOW),
    o('f', "force", N),
    o('i', "interactive", N),
    o('l', "link", N).no(LINKS_OUT),
    o('n', "no-clobber", N),
    o('P', "no-dereference", N),
    o('\0', "no-preserve", R),
    o('T', "no-target-directory", N),
    o('x', "one-file-system", N),
    o('\0', "parents", N).k(PARENTS),
    o('\0', "path", N).k(PARENTS),
    o('\0', "preserve", P),
    o('R', "recursive", N).k(REC),
    o('\0', "remove-destination", N),
    o('\0', "sparse", R),
    o('\0', "reflink", P),
    o('\0', "strip-trailing-slashes", N),
    o('S', "suffix", R),
    o('s', "symbolic-link", N).no(LINKS_OUT),
    o('t', "target-directory", R).wr().k(TARGET),
    o('u', "update", N),
    o('v', "verbose", N),
    o('\0', "context", P),
    o('\0', "help", N),
    o('\0', "version", N),
    o('b', "", N),
    o('d', "", N),
    o('H', "", N),
    o('p', "", N),
    o('r', "", N).k(REC),
    o('Z', "", N),
];
const CP_SPEC: Spec = gnu("cp", CP_OPTS);
pub(super) const CP: Entry = Entry {
    name: "cp",
    parse: |a| copy_move(&CP_SPEC, a),
    spec: Some(&CP_SPEC),
    summary: "sources read (trees with -r/-a), destination (and its backup) WRITTEN; -l/-s refused",
};

const MV_OPTS: &[O] = &[
    o('\0', "backup", P),
    o('Z', "context", N),
    o('f', "force", N),
    o('i', "interactive", N),
    o('n', "no-clobber", N),
    o('T', "no-target-directory", N),
    o('\0', "strip-trailing-slashes", N),
    o('S', "suffix", R),
    o('t', "target-directory", R).wr().k(TARGET),
    o('u', "update", N),
    o('v', "verbose", N),
    o('\0', "help", N),
    o('\0', "version", N),
    o('b', "", N),
];
const MV_SPEC: Spec = gnu("mv", MV_OPTS);
pub(super) const MV: Entry = Entry {
    name: "mv",
    parse: |a| copy_move(&MV_SPEC, a),
    spec: Some(&MV_SPEC),
    summary: "sources and destination (and its backup) WRITTEN",
};

fn copy_move(spec: &Spec, args: &[String]) -> Result<Parsed, Refused> {
    let prog = spec.prog;
    let is_mv = prog == "mv";
    let mut w = walk(spec, args)?;
    let rec = w.bits & REC != 0;
    let target = w.bits & TARGET != 0;
    let (sources, dest): (&[&str], Option<&str>) = if target {
        (&w.operands, None)
    } else {
        match w.operands.split_last() {
            Some((d, s)) if !s.is_empty() => (s, Some(*d)),
            _ => {
                return Err(Refused::command(format!(
                    "`{prog}` needs a source and a destination (or -t DIR)"
                )));
            }
        }
    };
    if sources.is_empty() {
        return Err(Refused::command(format!(
            "`{prog}` needs at least one source"
        )));
    }
    // The destination directory: `-t DIR` (already in writes) or the last
    // operand. Two -t options make cp and mv fail.
    let dests: Vec<String> = match dest {
        Some(d) => {
            w.p.writes.push(d.to_string());
            vec![d.to_string()]
        }
        None if w.p.writes.len() == 1 => w.p.writes.clone(),
        None => {
            return Err(Refused::command(format!(
                "`{prog}` takes one target directory"
            )));
        }
    };
    for s in sources {
        if is_mv {
            // Moving reads the source and deletes it.
            w.p.reads.push(s.to_string());
            w.p.writes.push(s.to_string());
        } else if rec {
            push_tree_named(&mut w.p, s);
        } else {
            w.p.reads.push(s.to_string());
        }
        // What lands in a destination directory: DIR/NAME, or DIR/SOURCE
        // with --parents. The gate resolves these, so a link already at
        // DIR/NAME that points out of the workspace is seen.
        for d in &dests {
            let name = if w.bits & PARENTS != 0 {
                s.trim_end_matches('/').to_string()
            } else {
                base_name(s).to_string()
            };
            if !name.is_empty() {
                w.p.writes
                    .push(format!("{}/{}", d.trim_end_matches('/'), name));
            }
        }
    }
    // A backup renames an existing destination to DEST + SUFFIX first (a
    // file named `server` backed up with `-S .key` replaces `server.key`):
    // each is judged as a write too.
    let suffixes = backup_suffixes(prog, &w.items)?;
    let backups: Vec<String> =
        w.p.writes
            .iter()
            .flat_map(|p| {
                suffixes
                    .iter()
                    .map(move |s| format!("{}{s}", p.trim_end_matches('/')))
            })
            .collect();
    w.p.writes.extend(backups);
    if rec {
        w.p.write_dirs_recursive.extend(dests);
    }
    w.p.follows_symlinks_recursively = rec && w.bits & FOLLOW != 0;
    w.p.writes_anything = true;
    Ok(w.p)
}

/// The suffixes of the backups `cp`/`mv` would make, when any: `-b`,
/// `--backup[=CONTROL]` and `-S`/`--suffix` (which turns backups on) all
/// count, `--backup=none` included (a later option may turn them on again).
/// A simple backup is DEST+SUFFIX; a numbered one DEST.~N~ (judged as that
/// name: no rule looks at the number), made by `numbered`/`t`, and by
/// `existing`/`nil`, the default, where numbered ones are there already.
/// A suffix with a `/` would put the backup in another directory (GNU falls
/// back to `~`, others may not): refused.
fn backup_suffixes(prog: &str, items: &[Item]) -> Result<Vec<String>, Refused> {
    let mut on = false;
    let mut simple_only = false;
    let mut suffix = "~";
    for it in items {
        let Item::Opt(h) = it else { continue };
        match (h.o.s, h.o.l) {
            (_, "backup") => {
                on = true;
                simple_only = matches!(h.val, Some("simple" | "never"));
            }
            ('b', _) => on = true,
            (_, "suffix") => {
                on = true;
                suffix = h.val.unwrap_or("~");
                if suffix.contains('/') {
                    return Err(Refused::command(format!(
                        "`{prog}` with a backup suffix containing '/' ({suffix:?}) would put \
                         the backup in another directory; use a suffix without '/'"
                    )));
                }
            }
            _ => {}
        }
    }
    Ok(match (on, simple_only) {
        (false, _) => Vec::new(),
        (true, true) => vec![suffix.to_string()],
        (true, false) => vec![suffix.to_string(), ".~N~".to_string()],
    })
}

fn base_name(s: &str) -> &str {
    let t = s.trim_end_matches('/');
    match t.rfind('/') {
        Some(i) => &t[i + 1..],
        None => t,
    }
}

// cp's own checks, given the gate: what a copy would write and where the
// links it copies would point.

/// Judges what `cp` reaches on disk once its table has read the argv.
pub(in crate::security) fn judge_cp(
    parsed: &Parsed,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    // A recursive copy writes every file of its sources below the
    // destination, following links already there (`x1/c -> .git/config`):
    // each of those destination paths is judged like a write of its own.
    // A relative link copied as a link points somewhere else from its new
    // place (`cp -P sub/l .` turns `l -> private/key` into the forbidden
    // file): judge where it will point from each place it may land.
    {
        for r in &parsed.reads {
            let src = PathBuf::from(absolute(cwd, r));
            if !std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_symlink()) {
                continue;
            }
            for w in &parsed.writes {
                let w = PathBuf::from(absolute(cwd, w));
                for at in [w.clone(), w.join(src.file_name().unwrap_or_default())] {
                    check_link_copy(&src, &at, gate)?;
                }
            }
        }
    }
    if !parsed.write_dirs_recursive.is_empty() {
        for dest in &parsed.write_dirs_recursive {
            let dest = absolute(cwd, dest);
            for src in &parsed.read_dirs_recursive {
                copy_targets(&absolute(cwd, src), Path::new(&dest), gate)?;
            }
        }
    }
    Ok(())
}

/// Entries a recursive copy may look at in one source before it is refused.
const COPY_WALK_LIMIT: usize = 20_000;
/// Directory levels below a recursive copy's source.
const COPY_DEPTH_LIMIT: usize = 256;

/// Judges, as writes, the destination path of every entry below `src` for
/// both ways `cp -r` may place it (`dest/rel`, and `dest/name/rel` when
/// `dest` is a directory already).
fn copy_targets(src: &str, dest: &Path, gate: &Gate) -> Result<(), Refused> {
    let src = Path::new(src);
    let name = src.file_name().map(PathBuf::from).unwrap_or_default();
    // Both places the tree may land, resolved once. Below them the walk
    // looks at each component as it descends (one lstat an entry), so a
    // deep tree costs what a wide one does.
    let mut bases = Vec::new();
    for b in [dest.to_path_buf(), dest.join(&name)] {
        bases.push(
            gate.check_write_dir_ok(&b.to_string_lossy())
                .map_err(|why| {
                    why.map_reason(|r| format!("`cp` would write {}: {r}", b.display()))
                })?,
        );
    }
    let mut stack = vec![(PathBuf::new(), 0usize)];
    let mut seen = 0usize;
    while let Some((rel, depth)) = stack.pop() {
        if depth > COPY_DEPTH_LIMIT {
            return Err(Refused::command(format!(
                "`cp` would copy a tree deeper than {COPY_DEPTH_LIMIT} levels from {}",
                src.display()
            )));
        }
        let Ok(rd) = std::fs::read_dir(src.join(&rel)) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > COPY_WALK_LIMIT {
                return Err(Refused::command(format!(
                    "`cp` would copy more than {COPY_WALK_LIMIT} entries from {}; copy a \
                     smaller tree",
                    src.display()
                )));
            }
            let r = rel.join(e.file_name());
            let is_link = e.file_type().is_ok_and(|t| t.is_symlink());
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            // The copy would be the secret under the same name or, below a
            // directory that is no longer `.git`, under a plain one.
            if !is_dir && let Some(rule) = gate.secret_rule(&src.join(&r)) {
                return Err(Refused::path(format!(
                    "`cp` would copy {}, a secret-named file (rule \"{rule}\"); \
                     [security] secret_files_allow lists exceptions",
                    gate.shown(&src.join(&r))
                )));
            }
            for base in &bases {
                let target = base.join(&r);
                if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_symlink()) {
                    return Err(Refused::path(format!(
                        "`cp` would write {}, a link it would write through",
                        target.display()
                    )));
                }
                if let Some(why) = gate.refused_lexically(&target) {
                    return Err(Refused::path(format!(
                        "`cp` would write {}: {why}",
                        target.display()
                    )));
                }
                if is_link {
                    check_link_copy(&src.join(&r), &target, gate)?;
                }
            }
            if is_dir {
                stack.push((r, depth + 1));
            }
        }
    }
    Ok(())
}

/// A link at `link`, copied as a link to `at`: what it will point to
/// from there must pass the read policy.
fn check_link_copy(link: &Path, at: &Path, gate: &Gate) -> Result<(), Refused> {
    let Ok(target) = std::fs::read_link(link) else {
        return Ok(());
    };
    let lands = if target.is_absolute() {
        target
    } else {
        at.parent().unwrap_or(at).join(target)
    };
    gate.check_path(&lands.to_string_lossy())
        .map(drop)
        .map_err(|why| {
            why.map_reason(|r| {
                format!(
                    "`cp` would copy the link {} to {}, where it points to {}: {r}",
                    link.display(),
                    at.display(),
                    lands.display()
                )
            })
        })
}

// ---------------------------------------------------------------- rm

// Read for policy rules only (`security::policy`): rm has no entry in
// `PROGRAMS`, so an allowlisted rm stays a program the gate judges by its
// path arguments alone.
const RM_OPTS: &[O] = &[
    o('f', "force", N),
    o('i', "", N),
    o('I', "", N),
    o('\0', "interactive", P),
    o('\0', "one-file-system", N),
    o('\0', "no-preserve-root", N),
    o('\0', "preserve-root", P),
    o('r', "recursive", N).k(REC),
    o('R', "", N).k(REC),
    o('d', "dir", N),
    o('v', "verbose", N),
    o('\0', "help", N),
    o('\0', "version", N),
];
pub(super) const RM_SPEC: Spec = gnu("rm", RM_OPTS);
