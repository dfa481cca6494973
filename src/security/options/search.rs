//! grep 3.8, ripgrep 15, diffutils 3.8 `diff`, file 5.44.

use crate::security::gate::Gate;
use crate::security::paths::absolute;
use crate::security::refusal::Refused;
use std::path::{Path, PathBuf};

use super::table::{
    COLON, DIRACT, Entry, FOLLOW, Item, N, NODEREF, NOPAT, O, Order, P, PAT, Parsed, R, REC, Spec,
    Style, o, push_read, push_tree, walk,
};

// ---------------------------------------------------------------- grep

const GREP_OPTS: &[O] = &[
    o('G', "basic-regexp", N),
    o('E', "extended-regexp", N),
    o('F', "fixed-regexp", N),
    o('F', "fixed-strings", N),
    o('P', "perl-regexp", N),
    o('A', "after-context", R),
    o('B', "before-context", R),
    o('\0', "binary-files", R),
    o('b', "byte-offset", N),
    o('C', "context", R),
    o('\0', "color", P),
    o('\0', "colour", P),
    o('c', "count", N),
    o('D', "devices", R),
    o('d', "directories", R).k(DIRACT),
    o('\0', "exclude", R),
    o('\0', "exclude-from", R).rd(),
    o('\0', "exclude-dir", R),
    o('f', "file", R).rd().k(PAT),
    o('l', "files-with-matches", N),
    o('L', "files-without-match", N),
    o('\0', "group-separator", R),
    o('\0', "help", N),
    o('\0', "include", R),
    o('i', "ignore-case", N),
    o('\0', "no-ignore-case", N),
    o('T', "initial-tab", N),
    o('\0', "label", R),
    o('\0', "line-buffered", N),
    o('n', "line-number", N),
    o('x', "line-regexp", N),
    o('m', "max-count", R),
    o('h', "no-filename", N),
    o('\0', "no-group-separator", N),
    o('s', "no-messages", N),
    o('Z', "null", N),
    o('z', "null-data", N),
    o('o', "only-matching", N),
    o('q', "quiet", N),
    // -r follows only the symlinks named on the command line (which the
    // gate resolves itself); -R follows every link in the tree.
    o('r', "recursive", N).k(REC),
    o('R', "dereference-recursive", N).k(REC | FOLLOW),
    o('e', "regexp", R).k(PAT),
    o('v', "invert-match", N),
    o('q', "silent", N),
    o('a', "text", N),
    o('U', "binary", N),
    o('u', "unix-byte-offsets", N),
    o('V', "version", N),
    o('H', "with-filename", N),
    o('w', "word-regexp", N),
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
    o('I', "", N),
    o('X', "", R),
    o('y', "", N),
];
pub(super) const GREP_SPEC: Spec = Spec {
    prog: "grep",
    opts: GREP_OPTS,
    order: Order::Permute,
    style: Style::Gnu,
};
pub(super) const GREP: Entry = Entry {
    name: "grep",
    parse: grep,
    spec: Some(&GREP_SPEC),
    summary: "pattern, then files read; trees with -r, following links with -R",
};

fn grep(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&GREP_SPEC, args)?;
    let mut rec = w.bits & REC != 0;
    for it in &w.items {
        // `-d recurse` is -r. argmatch takes abbreviations of the action, so
        // anything but the exact other actions counts as recursive.
        if let Item::Opt(h) = it
            && h.o.k & DIRACT != 0
            && !matches!(h.val, Some("read" | "skip"))
        {
            rec = true;
        }
    }
    let files = if w.bits & PAT != 0 {
        &w.operands[..]
    } else {
        w.operands.get(1..).unwrap_or(&[])
    };
    if rec {
        if files.is_empty() {
            push_tree(&mut w.p, ".");
        }
        for f in files {
            push_tree(&mut w.p, f);
        }
    } else {
        for f in files {
            push_read(&mut w.p, f);
        }
    }
    w.p.follows_symlinks_recursively = rec && w.bits & FOLLOW != 0;
    Ok(w.p)
}

// ---------------------------------------------------------------- rg

// ripgrep parses with lexopt: exact long names only (no abbreviations).
const RG_OPTS: &[O] = &[
    o('A', "after-context", R),
    o('\0', "auto-hybrid-regex", N),
    o('\0', "no-auto-hybrid-regex", N),
    o('B', "before-context", R),
    o('\0', "binary", N),
    o('\0', "no-binary", N),
    o('\0', "block-buffered", N),
    o('\0', "no-block-buffered", N),
    o('b', "byte-offset", N),
    o('\0', "no-byte-offset", N),
    o('s', "case-sensitive", N),
    o('\0', "color", R),
    o('\0', "colors", R),
    o('\0', "column", N),
    o('\0', "no-column", N),
    o('C', "context", R),
    o('\0', "context-separator", R),
    o('\0', "no-context-separator", N),
    o('c', "count", N),
    o('\0', "count-matches", N),
    o('\0', "crlf", N),
    o('\0', "no-crlf", N),
    o('\0', "debug", N),
    o('\0', "dfa-size-limit", R),
    o('E', "encoding", R),
    o('\0', "no-encoding", N),
    o('\0', "engine", R),
    o('\0', "field-context-separator", R),
    o('\0', "field-match-separator", R),
    o('f', "file", R).rd().k(PAT),
    o('\0', "files", N).k(NOPAT),
    o('l', "files-with-matches", N),
    o('\0', "files-without-match", N),
    o('F', "fixed-strings", N),
    o('\0', "no-fixed-strings", N),
    o('L', "follow", N).k(FOLLOW),
    o('\0', "no-follow", N),
    o('\0', "generate", R).k(NOPAT),
    o('g', "glob", R),
    o('\0', "glob-case-insensitive", N),
    o('\0', "no-glob-case-insensitive", N),
    o('\0', "heading", N),
    o('\0', "no-heading", N),
    o('h', "help", N).k(NOPAT),
    o('.', "hidden", N),
    o('\0', "no-hidden", N),
    o('\0', "hostname-bin", R).no("runs a program"),
    o('\0', "hyperlink-format", R),
    o('\0', "iglob", R),
    o('i', "ignore-case", N),
    o('\0', "ignore-file", R).rd(),
    o('\0', "ignore-file-case-insensitive", N),
    o('\0', "no-ignore-file-case-insensitive", N),
    o('\0', "include-zero", N),
    o('\0', "no-include-zero", N),
    o('v', "invert-match", N),
    o('\0', "no-invert-match", N),
    o('\0', "json", N),
    o('\0', "no-json", N),
    o('\0', "line-buffered", N),
    o('\0', "no-line-buffered", N),
    o('n', "line-number", N),
    o('N', "no-line-number", N),
    o('x', "line-regexp", N),
    o('M', "max-columns", R),
    o('\0', "max-columns-preview", N),
    o('\0', "no-max-columns-preview", N),
    o('m', "max-count", R),
    o('d', "max-depth", R),
    o('\0', "maxdepth", R),
    o('\0', "max-filesize", R),
    o('\0', "mmap", N),
    o('\0', "no-mmap", N),
    o('U', "multiline", N),
    o('\0', "no-multiline", N),
    o('\0', "multiline-dotall", N),
    o('\0', "no-multiline-dotall", N),
    o('\0', "no-config", N),
    o('\0', "no-ignore", N),
    o('\0', "ignore", N),
    o('\0', "no-ignore-dot", N),
    o('\0', "ignore-dot", N),
    o('\0', "no-ignore-exclude", N),
    o('\0', "ignore-exclude", N),
    o('\0', "no-ignore-files", N),
    o('\0', "ignore-files", N),
    o('\0', "no-ignore-global", N),
    o('\0', "ignore-global", N),
    o('\0', "no-ignore-messages", N),
    o('\0', "ignore-messages", N),
    o('\0', "no-ignore-parent", N),
    o('\0', "ignore-parent", N),
    o('\0', "no-ignore-vcs", N),
    o('\0', "ignore-vcs", N),
    o('\0', "no-messages", N),
    o('\0', "messages", N),
    o('\0', "no-pcre2-unicode", N),
    o('\0', "pcre2-unicode", N),
    o('\0', "no-require-git", N),
    o('\0', "require-git", N),
    o('\0', "no-unicode", N),
    o('\0', "unicode", N),
    o('0', "null", N),
    o('\0', "null-data", N),
    o('\0', "one-file-system", N),
    o('\0', "no-one-file-system", N),
    o('o', "only-matching", N),
    o('\0', "path-separator", R),
    o('\0', "passthru", N),
    o('\0', "passthrough", N),
    o('P', "pcre2", N),
    o('\0', "no-pcre2", N),
    o('\0', "pcre2-version", N).k(NOPAT),
    o('\0', "pre", R).no("runs a program on every file searched"),
    o('\0', "no-pre", N),
    o('\0', "pre-glob", R),
    o('p', "pretty", N),
    o('q', "quiet", N),
    o('\0', "regex-size-limit", R),
    o('e', "regexp", R).k(PAT),
    o('r', "replace", R),
    o('z', "search-zip", N).no("runs decompression programs"),
    o('\0', "no-search-zip", N),
    o('S', "smart-case", N),
    o('\0', "sort-files", N),
    o('\0', "no-sort-files", N),
    o('\0', "sort", R),
    o('\0', "sortr", R),
    o('\0', "stats", N),
    o('\0', "no-stats", N),
    o('\0', "stop-on-nonmatch", N),
    o('a', "text", N),
    o('\0', "no-text", N),
    o('j', "threads", R),
    o('\0', "trace", N),
    o('\0', "trim", N),
    o('\0', "no-trim", N),
    o('t', "type", R),
    o('\0', "type-add", R),
    o('\0', "type-clear", R),
    o('T', "type-not", R),
    o('\0', "type-list", N).k(NOPAT),
    o('u', "unrestricted", N),
    o('V', "version", N).k(NOPAT),
    o('\0', "vimgrep", N),
    o('H', "with-filename", N),
    o('I', "no-filename", N),
    o('w', "word-regexp", N),
];
pub(super) const RG_SPEC: Spec = Spec {
    prog: "rg",
    opts: RG_OPTS,
    order: Order::Permute,
    style: Style::Lexopt,
};
pub(super) const RG: Entry = Entry {
    name: "rg",
    parse: rg,
    spec: Some(&RG_SPEC),
    summary: "pattern, then trees read (default .); -L follows links; --pre, -z, --hostname-bin refused",
};

fn rg(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&RG_SPEC, args)?;
    // The first positional is the pattern only in a search given no -e/-f.
    let paths = if w.bits & (PAT | NOPAT) != 0 {
        &w.operands[..]
    } else {
        w.operands.get(1..).unwrap_or(&[])
    };
    if paths.is_empty() {
        push_tree(&mut w.p, ".");
    }
    for f in paths {
        push_tree(&mut w.p, f);
    }
    w.p.follows_symlinks_recursively = w.bits & FOLLOW != 0;
    Ok(w.p)
}

// ---------------------------------------------------------------- diff

const DIFF_OPTS: &[O] = &[
    o('\0', "binary", N),
    o('q', "brief", N),
    o('\0', "changed-group-format", R),
    o('\0', "color", P),
    o('\0', "context", P),
    o('e', "ed", N),
    o('x', "exclude", R),
    o('X', "exclude-from", R).rd(),
    o('t', "expand-tabs", N),
    o('f', "forward-ed", N),
    o('\0', "from-file", R).rd(),
    o('\0', "help", N),
    o('\0', "horizon-lines", R),
    o('D', "ifdef", R),
    o('w', "ignore-all-space", N),
    o('B', "ignore-blank-lines", N),
    o('i', "ignore-case", N),
    o('\0', "ignore-file-name-case", N),
    o('I', "ignore-matching-lines", R),
    o('b', "ignore-space-change", N),
    o('E', "ignore-tab-expansion", N),
    o('Z', "ignore-trailing-space", N),
    o('\0', "inhibit-hunk-merge", N),
    o('T', "initial-tab", N),
    o('L', "label", R),
    o('\0', "left-column", N),
    o('\0', "line-format", R),
    o('d', "minimal", N),
    o('N', "new-file", N),
    o('\0', "new-group-format", R),
    o('\0', "new-line-format", R),
    o('\0', "no-dereference", N).k(NODEREF),
    o('\0', "no-ignore-file-name-case", N),
    o('\0', "normal", N),
    o('\0', "old-group-format", R),
    o('\0', "old-line-format", R),
    o('l', "paginate", N).no("runs `pr`"),
    o('\0', "palette", R),
    o('n', "rcs", N),
    o('r', "recursive", N).k(REC),
    o('s', "report-identical-files", N),
    o('\0', "sdiff-merge-assist", N),
    o('p', "show-c-function", N),
    o('F', "show-function-line", R),
    o('y', "side-by-side", N),
    o('H', "speed-large-files", N),
    o('S', "starting-file", R),
    o('\0', "strip-trailing-cr", N),
    o('\0', "suppress-blank-empty", N),
    o('\0', "suppress-common-lines", N),
    o('\0', "tabsize", R),
    o('a', "text", N),
    o('\0', "to-file", R).rd(),
    o('\0', "unchanged-group-format", R),
    o('\0', "unchanged-line-format", R),
    o('P', "unidirectional-new-file", N),
    o('\0', "unified", P),
    o('v', "version", N),
    o('W', "width", R),
    o('\0', "-presume-output-tty", N),
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
    o('c', "", N),
    o('C', "", R),
    o('h', "", N),
    o('u', "", N),
    o('U', "", R),
];
const DIFF_SPEC: Spec = Spec {
    prog: "diff",
    opts: DIFF_OPTS,
    order: Order::Permute,
    style: Style::Gnu,
};
pub(super) const DIFF: Entry = Entry {
    name: "diff",
    parse: diff,
    spec: Some(&DIFF_SPEC),
    summary: "operands read; trees with -r (following links unless --no-dereference); -l refused",
};

fn diff(args: &[String]) -> Result<Parsed, Refused> {
    let mut w = walk(&DIFF_SPEC, args)?;
    let rec = w.bits & REC != 0;
    for a in &w.operands {
        push_read(&mut w.p, a);
    }
    if rec {
        // The operands and --from-file/--to-file directories are walked;
        // an --exclude-from pattern file is only read.
        let from_to = w.items.iter().filter_map(|i| match i {
            Item::Opt(h) if matches!(h.o.l, "from-file" | "to-file") => h.val,
            _ => None,
        });
        let trees: Vec<String> = w
            .operands
            .iter()
            .copied()
            .chain(from_to)
            .filter(|r| *r != "-")
            .map(String::from)
            .collect();
        w.p.read_dirs_recursive.extend(trees);
    }
    // diff follows symbolic links in the trees it compares unless told not to.
    w.p.follows_symlinks_recursively = rec && w.bits & NODEREF == 0;
    Ok(w.p)
}

// ---------------------------------------------------------------- file

const FILE_OPTS: &[O] = &[
    o('\0', "help", N),
    o('v', "version", N),
    // A colon-separated list of magic files.
    o('m', "magic-file", R).rd().k(COLON),
    o('z', "uncompress", N).no("runs decompression programs"),
    o('Z', "uncompress-noreport", N).no("runs decompression programs"),
    o('b', "brief", N),
    o('c', "checking-printout", N),
    o('e', "exclude", R),
    o('\0', "exclude-quiet", R),
    o('f', "files-from", R).no("reads file names from a file the gate cannot see"),
    o('F', "separator", R),
    o('i', "mime", N),
    o('\0', "apple", N),
    o('\0', "extension", N),
    o('\0', "mime-type", N),
    o('\0', "mime-encoding", N),
    o('k', "keep-going", N),
    o('l', "list", N),
    o('L', "dereference", N),
    o('h', "no-dereference", N),
    o('n', "no-buffer", N),
    o('N', "no-pad", N),
    o('0', "print0", N),
    o('p', "preserve-date", N).no("changes the files' access times"),
    o('P', "parameter", R),
    o('r', "raw", N),
    o('s', "special-files", N),
    o('S', "no-sandbox", N).no("turns off file's own sandbox"),
    o('C', "compile", N).no("writes a compiled magic file"),
    o('d', "debug", N),
    o('E', "", N),
];
const FILE_SPEC: Spec = Spec {
    prog: "file",
    opts: FILE_OPTS,
    order: Order::Permute,
    style: Style::Gnu,
};
pub(super) const FILE: Entry = Entry {
    name: "file",
    parse: |a| {
        let mut w = walk(&FILE_SPEC, a)?;
        for f in &w.operands {
            push_read(&mut w.p, f);
        }
        Ok(w.p)
    },
    spec: Some(&FILE_SPEC),
    summary: "operands read; -m read; -z/-Z/-C/-p/-S/-f refused",
};

/// diff's own check, given the gate: it compares the files one level inside
/// a directory operand (and `diff FILE DIR` reads DIR/FILE), so none of
/// those may be forbidden. Links among them are not followed
/// (`--no-dereference` is added to its argv).
pub(in crate::security) fn judge_diff(
    parsed: &Parsed,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    for r in &parsed.reads {
        let p = PathBuf::from(absolute(cwd, r));
        if p.is_dir()
            && let Some(hit) = gate.forbidden_within(&gate.check_path(&absolute(cwd, r))?, 2)
        {
            return Err(Refused::path(format!(
                "`diff` would read the files in {}, among them the forbidden path {hit}",
                p.display()
            )));
        }
    }
    Ok(())
}
