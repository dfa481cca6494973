//! The shape of `src/`, read from the source itself.
//!
//! The layer order (ARCHITECTURE.md: Layers), held by reading every
//! `crate::…` path and every `super::` that climbs to the crate root in
//! every source file: a module may name only modules below it, so an
//! upward edge fails here with its file and line, and a cycle between
//! top-level modules cannot exist.
//!
//! No cycle between files either (ARCHITECTURE.md: Layers): the graph of
//! files is built from every path each file writes, and a cycle fails
//! here as its `file:line` edges.
//!
//! No process-global state but signal handling and caches of constants
//! (ARCHITECTURE.md: Invariants): every `static` in `src/` is one of those
//! listed here, each with why it may be one. State a run or a command
//! works with (the redactor, counters) is passed in instead; a new
//! `static` fails here with its file and line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Bottom first. A module may use only the modules before it.
const LAYERS: &[&str] = &[
    "sys",       // the kernel calls: sandbox mechanism, signals (the one place for `unsafe`)
    "error",     // the one error type and exit outcomes
    "util",      // time, ids, hashing, text helpers
    "control",   // a run's deadline and cancellation
    "types",     // the tool table, each tool's arguments read and checked, token counts
    "features",  // what this build holds (Cargo features) and the refusal of what it lacks
    "transport", // the TCP/TLS connections under the HTTP agents
    "config",    // TOML → Config, with the validation of every value it reads
    "security", // the gate: decisions, shell grammar, plans, option tables, paths, network, sandbox policy, redactor
    "mcp", // the MCP client: servers in the sandbox over stdio, or at a url; JSON-RPC, their tools
    "logging", // log lines (through the redactor)
    "receipts", // the hash-chained receipt log
    "memory", // SQLite: turns, notes, approvals, runs
    "providers", // model providers
    "tools", // the tools, acting on what the gate resolved
    "external", // external tools (plugins', later MCP servers'): the registry, names, descriptions
    "plugins", // plugins: manifests, install, pins, the sandboxed call
    "skills", // SKILL.md files
    "prompt", // the system prompt and the notes a message carries
    "rollup", // summaries across time horizons: a day from its conversations, up to a year
    "runtime", // the agent loop and one tool call's pipeline
    "sop", // SOPs: the file format checked in one pass, runs parked and resumed exactly once
    "channels", // the CLI channel and the REPL's line editor
    "service", // the gateway as a systemd user service
    "gateway", // the HTTP gateway
    "cli", // the command line: parse and dispatch
];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|m| *m == module)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`None` for the
/// crate root files `lib.rs` and `main.rs`), and how deep the file's own
/// module is (`src/a.rs` and `src/a/mod.rs` 1, `src/a/b.rs` 2).
fn module_of(src: &Path, file: &Path) -> (Option<String>, usize) {
    let rel = file.strip_prefix(src).unwrap();
    let parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let first = parts[0].trim_end_matches(".rs").to_string();
    if parts.len() == 1 && (first == "lib" || first == "main") {
        return (None, 0);
    }
    let last = parts.last().unwrap();
    let depth = if last == "mod.rs" {
        parts.len() - 1
    } else {
        parts.len()
    };
    (Some(first), depth)
}

/// The source without comments, string and char literals (blanked with
/// spaces, newlines kept, so line numbers stay right).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) && {
            let prev = if i > 0 { b[i - 1] } else { b' ' };
            !(prev.is_ascii_alphanumeric() || prev == b'_')
        } {
            // Raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j >= b.len() || b[j] != b'"' {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let mut close = vec![b'"'];
            close.extend(std::iter::repeat_n(b'#', hashes));
            let end = b[j + 1..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map(|p| j + 1 + p + close.len())
                .unwrap_or(b.len());
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    out.push(b' ');
                    i += 1;
                }
                out.push(blank(b[i]));
                i += 1;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal ('a', '\n', '\u{..}'); lifetimes are left alone.
            let mut j = i + 1;
            if b[j] == b'\\' {
                j += 1;
            }
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            out.extend(std::iter::repeat_n(b' ', j + 1 - i));
            i = j + 1;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Every top-level module a file names through `crate::`, with its line.
fn crate_edges(code: &str) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let line_at = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..].find("crate::") {
        let at = i + p;
        i = at + "crate::".len();
        if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b'$') {
            continue;
        }
        let rest = &code[i..];
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::X, b, c::{..}}`: the first name of each item at depth 1.
            let mut depth = 1;
            let mut expect = true;
            let base = code.len() - group.len();
            let gb = group.as_bytes();
            let mut k = 0;
            while k < gb.len() && depth > 0 {
                match gb[k] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 1 => expect = true,
                    c if is_ident(c) && expect && depth == 1 => {
                        let s = k;
                        while k < gb.len() && is_ident(gb[k]) {
                            k += 1;
                        }
                        out.push((group[s..k].to_string(), line_at(base + s)));
                        expect = false;
                        continue;
                    }
                    _ => {}
                }
                k += 1;
            }
        } else {
            let n = rest.bytes().take_while(|&c| is_ident(c)).count();
            if n > 0 {
                out.push((rest[..n].to_string(), line_at(code.len() - rest.len())));
            }
        }
    }
    out
}

/// `super::super::…::name` chains that climb out of the file's top-level
/// module to the crate root; `depth` is the file's own module depth, and
/// each inline `mod NAME {` open around a chain adds one.
fn super_edges(code: &str, depth: usize) -> Vec<(String, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    // One entry per open brace: whether it opened an inline module.
    let mut braces: Vec<bool> = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => line += 1,
            b'{' => {
                let before = code[..i].trim_end();
                let name_len = before.bytes().rev().take_while(|&c| is_ident(c)).count();
                let head = before[..before.len() - name_len].trim_end();
                let is_mod = name_len > 0
                    && head.ends_with("mod")
                    && !head[..head.len() - 3].bytes().last().is_some_and(is_ident);
                braces.push(is_mod);
            }
            b'}' => {
                braces.pop();
            }
            b's' if b[i..].starts_with(b"super::")
                && !(i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) =>
            {
                let mut rest = &code[i..];
                let mut supers = 0;
                while let Some(r) = rest.strip_prefix("super::") {
                    supers += 1;
                    rest = r;
                }
                let here = depth + braces.iter().filter(|m| **m).count();
                if supers >= here {
                    let name: String = rest
                        .bytes()
                        .take_while(|&c| is_ident(c))
                        .map(char::from)
                        .collect();
                    out.push((name, line));
                }
                i += supers * "super::".len();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[test]
fn every_module_uses_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 50, "read {} files under src/", files.len());
    let mut problems = Vec::new();
    let mut edges = 0;
    for file in &files {
        let (module, depth) = module_of(&src, file);
        let Some(module) = module else { continue };
        let shown = file.strip_prefix(src.parent().unwrap()).unwrap().display();
        let Some(own) = rank(&module) else {
            problems.push(format!(
                "{shown}: module `{module}` has no place in LAYERS (tests/layers.rs and ARCHITECTURE.md): add it"
            ));
            continue;
        };
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let mut found = crate_edges(&code);
        found.extend(super_edges(&code, depth));
        for (target, line) in found {
            edges += 1;
            if target == module {
                continue;
            }
            match rank(&target) {
                Some(r) if r < own => {}
                Some(_) => problems.push(format!(
                    "{shown}:{line}: `{module}` uses `{target}`, which is not below it (layers, bottom first: {})",
                    LAYERS.join(" → ")
                )),
                // The crate root's own items (`crate::restore_terminal`).
                None if target == "restore_terminal" => {}
                None => problems.push(format!(
                    "{shown}:{line}: `{module}` uses `crate::{target}`, which is not a module in LAYERS"
                )),
            }
        }
    }
    assert!(
        edges > 200,
        "found only {edges} crate:: edges: the reader is broken"
    );
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn the_reader_sees_every_spelling_of_an_edge() {
    let code = code_only(
        "use crate::config::Config;\n\
         use crate::{\n    memory::Memory,\n    tools::{self, ToolName},\n};\n\
         let x = crate::runtime::run();\n\
         // crate::cli in a comment is no edge\n\
         let s = \"crate::gateway in a string is none\";\n\
         let c = '\"'; let d = crate::channels::X;\n",
    );
    let names: Vec<(String, usize)> = crate_edges(&code);
    assert_eq!(
        names,
        vec![
            ("config".to_string(), 1),
            ("memory".to_string(), 3),
            ("tools".to_string(), 4),
            ("runtime".to_string(), 6),
            ("channels".to_string(), 9),
        ]
    );
    // From src/tools/grep.rs (depth 2) `super::super::X` is the crate root.
    let sup = super_edges("use super::super::runtime::Y;\nuse super::Tool;\n", 2);
    assert_eq!(sup, vec![("runtime".to_string(), 1)]);
    assert!(super_edges("use super::super::ToolName;\n", 3).is_empty());
    // Inside `mod tests` of src/tools/grep.rs, two levels stay in `tools`.
    let in_tests =
        "mod tests {\n    use super::super::Tool;\n    use super::super::super::cli::X;\n}\n";
    assert_eq!(super_edges(in_tests, 2), vec![("cli".to_string(), 3)]);
}

#[test]
fn architecture_md_states_the_same_layers() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap();
    let order = LAYERS
        .iter()
        .map(|m| format!("`{m}`"))
        .collect::<Vec<_>>()
        .join(" → ");
    assert!(
        doc.contains(&order),
        "ARCHITECTURE.md must state the layer order as:\n{order}"
    );
}

/// The statics `src/` may declare, by name (so moving one to another file
/// keeps it allowed), each with why it is not state a caller could pass in.
const ALLOWED: &[&str] = &[
    // Signal handling: a handler can reach nothing else.
    "CURRENT",     // control: the run a signal handler reports to
    "EXIT_SIGNAL", // control: the signal main.rs ends the process by
    "CAUGHT",      // tools/shell: a signal caught while a shell call runs
    "SAVED",       // channels/lineedit: the terminal modes a signal or panic puts back
    "RAW",         // channels/lineedit: whether the terminal is in raw mode now
    "STOP",        // channels/lineedit: SIGTERM/SIGHUP that arrived while a line was read
    "WAKE",        // channels/lineedit: the pipe a signal handler wakes the reader through
    "READ",        // channels/lineedit: that pipe's read end, made once
    "PREV",        // channels/lineedit: the earlier handlers, called after ours
    "SLOT",        // sys/signal (test): the slot its unit test shares with itself
    // Caches of constants: computed once, the same for the whole process.
    "TRIGGER",    // security/redact: a constant byte table
    "CLASS",      // security/redact: a constant byte table
    "COMPILED",   // security/secret_files: the compiled rule table
    "PROGRAM",    // security/confine/seccomp: the compiled BPF program
    "AVAILABLE",  // security/confine/seccomp: the kernel probe for it
    "STATUS",     // security/confine: the kernel's Landlock ABI, probed once
    "SHARED",     // security/confine/view: the namespaces every child joins, made once
    "MAKING",     // security/confine/view: one maker of them at a time
    "NO_OPENAT2", // tools/beneath: the kernel has no openat2 (ENOSYS)
    "ROOTS",      // transport: the system's CA bundle, read once
    // Once-only guards of facts about the process itself.
    "DONE",    // tools/shell: PR_SET_CHILD_SUBREAPER set once
    "WARNED",  // security/confine: a missing kernel feature warned of once
    "STARTED", // security/confine: the shared namespaces' thread started once
    "SWEPT",   // tools/shell: the tmp dirs of killed calls swept once
    // Tests only.
    "FORCE_WALK", // tools/beneath (cfg(test)): a thread's opens take the walk
    "BOGUS",      // security/confine (test): a filter the kernel refuses
];

/// The name a line declares a `static` of (`static mut` too), if it does.
fn declared(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(')')?.1,
            None => r,
        }
        .trim_start();
    }
    let rest = rest.strip_prefix("static ")?.trim_start();
    let rest = rest.strip_prefix("mut ").unwrap_or(rest).trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

#[test]
fn declarations_are_read() {
    assert_eq!(declared("static A: u8 = 0;"), Some("A"));
    assert_eq!(
        declared("    pub(crate) static mut B_2: u8 = 0;"),
        Some("B_2")
    );
    assert_eq!(declared("pub static C: [u8; 2] = [0; 2];"), Some("C"));
    assert_eq!(declared("fn f() -> &'static str {"), None);
    assert_eq!(declared("/// static D: a comment"), None);
    assert_eq!(declared("let static_x = 1;"), None);
}

#[test]
fn every_static_is_signal_handling_or_a_cache_of_a_constant() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = 0;
    let mut bad = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let Some(name) = declared(line) else {
                continue;
            };
            found += 1;
            if !ALLOWED.contains(&name) {
                bad.push(format!(
                    "{}:{}: static {name}",
                    file.strip_prefix(&src).unwrap().display(),
                    i + 1
                ));
            }
        }
    }
    assert!(found > 0, "no static found: the reader is broken");
    assert!(
        bad.is_empty(),
        "process-global state (ARCHITECTURE.md: Invariants): pass it in instead; \
         only signal handling and caches of constants may be statics (add those to \
         ALLOWED, with why):\n{}",
        bad.join("\n")
    );
}

// ---------------------------------------------------------------------------
// No cycles between files either.
//
// The layer order keeps top-level modules in a line; inside one module its
// files must not use each other in a circle either (a `mod.rs` calling into
// a child that names `super::Thing` back). Every path is read and resolved
// to the file that defines the module it goes through: `crate::a::b::X`,
// `super::X`, `self::x::Y`, and a bare `x::Y` where `x` is a child module
// or a name a `use` brought in (`use crate::a::b; b::X`). A path into a
// module whose items live in its `mod.rs`/`a.rs` is an edge to that file;
// an inline `mod x { … }` belongs to the file it is written in. A
// `mod x;` declaration is no edge, nor a `use` that only names a module
// (what goes through the name is); a glob `use x::*` is one to `x`.
// `main.rs` is its own crate and is left out. Method calls are not paths:
// a type's `impl` blocks belong beside what they call.

/// A module's path from the crate root (`["security", "judge"]`).
type ModPath = Vec<String>;

/// One `use` or path written in a file, before it is resolved.
struct Written {
    /// The module the path is written in (the file's, plus inline `mod`s).
    scope: ModPath,
    /// Its segments as written (`crate`, `super`, `self` included).
    segments: Vec<String>,
    line: usize,
    /// For a `use`: the name it binds (`None` for a glob `*`).
    binds: Option<Option<String>>,
}

/// What a file says: its paths, and the inline modules and `mod x;`
/// declarations in each scope.
#[derive(Default)]
struct FileText {
    written: Vec<Written>,
    /// (scope, child name, inline) for each `mod NAME` seen.
    mods: Vec<(ModPath, String, bool)>,
    /// `#[path = "F"] mod NAME;`: (scope, NAME, F).
    pathed: Vec<(ModPath, String, String)>,
}

fn ident_at(b: &[u8], i: usize) -> usize {
    let mut k = i;
    while k < b.len() && is_ident(b[k]) {
        k += 1;
    }
    k - i
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Reads one use tree / path at `i`: every full path it names (a group
/// `a::{b, c::{d, e as f}, *}` gives several), each with the line of its
/// last segment and the name it binds. Returns where reading stopped.
fn read_tree(
    code: &str,
    mut i: usize,
    prefix: &[String],
    line_at: &dyn Fn(usize) -> usize,
    out: &mut Vec<(Vec<String>, usize, Option<String>)>,
) -> usize {
    let b = code.as_bytes();
    let mut segs = prefix.to_vec();
    loop {
        i = skip_ws(b, i);
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                i = skip_ws(b, i);
                if i >= b.len() {
                    return i;
                }
                match b[i] {
                    b'}' => return i + 1,
                    b',' => i += 1,
                    _ => {
                        let before = i;
                        i = read_tree(code, i, &segs, line_at, out);
                        if i == before {
                            i += 1;
                        }
                    }
                }
            }
        }
        if i < b.len() && b[i] == b'*' {
            out.push((segs, line_at(i), None));
            return i + 1;
        }
        let n = ident_at(b, i);
        if n == 0 {
            return i;
        }
        let at = i;
        let name = code[i..i + n].to_string();
        segs.push(name.clone());
        i += n;
        let j = skip_ws(b, i);
        if b[j..].starts_with(b"::") {
            i = j + 2;
            continue;
        }
        // The end of this path: `as NAME` renames what it binds.
        let mut bound = if name == "self" {
            segs.pop();
            segs.last().cloned().unwrap_or_default()
        } else {
            name
        };
        if b[j..].starts_with(b"as") && !is_ident(*b.get(j + 2).unwrap_or(&b' ')) {
            let k = skip_ws(b, j + 2);
            let m = ident_at(b, k);
            bound = code[k..k + m].to_string();
            i = k + m;
        }
        out.push((segs, line_at(at), Some(bound)));
        return i;
    }
}

/// Reads one file's code (comments and literals blanked) into what it
/// writes. `scope` is the file's own module.
fn read_file_text(code: &str, scope: &[String]) -> FileText {
    let b = code.as_bytes();
    let starts: Vec<usize> = std::iter::once(0)
        .chain(code.match_indices('\n').map(|(p, _)| p + 1))
        .collect();
    let line_at = |pos: usize| starts.partition_point(|&s| s <= pos);
    let mut text = FileText::default();
    // One entry per open brace: the inline module it opened, if any.
    let mut braces: Vec<Option<String>> = Vec::new();
    let here = |braces: &Vec<Option<String>>| {
        let mut s = scope.to_vec();
        s.extend(braces.iter().flatten().cloned());
        s
    };
    let mut pending_path: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            let before = code[..i].trim_end();
            let n = before.bytes().rev().take_while(|&c| is_ident(c)).count();
            let head = before[..before.len() - n].trim_end();
            let is_mod = n > 0
                && head.ends_with("mod")
                && !head[..head.len() - 3].bytes().last().is_some_and(is_ident);
            braces.push(is_mod.then(|| before[before.len() - n..].to_string()));
            i += 1;
            continue;
        }
        if c == b'}' {
            braces.pop();
            i += 1;
            continue;
        }
        if c == b'#' && b[i..].starts_with(b"#[path") {
            // `#[path = "F"]` on the next `mod`: its literal is blanked
            // here, the caller fills it in from `pathed_attrs`.
            pending_path = Some(String::new());
            i += 1;
            continue;
        }
        let prev = if i > 0 { b[i - 1] } else { b' ' };
        if !is_ident(c) || c.is_ascii_digit() || is_ident(prev) || prev == b'$' {
            i += 1;
            continue;
        }
        let n = ident_at(b, i);
        let word = &code[i..i + n];
        let after = skip_ws(b, i + n);
        if word == "mod" {
            let k = ident_at(b, after);
            if k > 0 {
                let name = code[after..after + k].to_string();
                let next = skip_ws(b, after + k);
                let inline = b.get(next) == Some(&b'{');
                text.mods.push((here(&braces), name.clone(), inline));
                if let Some(f) = pending_path.take() {
                    text.pathed.push((here(&braces), name, f));
                }
            }
            i += n;
            continue;
        }
        if word == "use" {
            let mut found = Vec::new();
            let end = read_tree(code, after, &[], &line_at, &mut found);
            for (segments, line, binds) in found {
                text.written.push(Written {
                    scope: here(&braces),
                    segments,
                    line,
                    binds: Some(binds),
                });
            }
            i = end.max(i + n);
            continue;
        }
        // A path: `a::b…`, not the tail of one (`x::a`), nor a method
        // (`.a::<T>()`), nor a visibility (`pub(in crate::a)`).
        let tail = prev == b':' || prev == b'.';
        let vis = code[..i].trim_end().ends_with("(in");
        if !tail && !vis && b[i + n..].starts_with(b"::") {
            let mut found = Vec::new();
            let end = read_tree(code, i, &[], &line_at, &mut found);
            for (segments, line, _) in found {
                text.written.push(Written {
                    scope: here(&braces),
                    segments,
                    line,
                    binds: None,
                });
            }
            i = end.max(i + n);
            continue;
        }
        i += n;
    }
    text
}

/// `#[path = "F"]` attributes in the raw text, in order (their literal is
/// blanked in the code `read_file_text` sees).
fn pathed_attrs(raw: &str) -> Vec<String> {
    raw.match_indices("#[path")
        .filter_map(|(p, _)| {
            let rest = &raw[p..];
            let open = rest.find('"')?;
            let close = rest[open + 1..].find('"')?;
            Some(rest[open + 1..open + 1 + close].to_string())
        })
        .collect()
}

/// A file's module from its place under `src/` (`a.rs`, `a/mod.rs`: `a`;
/// `a/b.rs`: `a::b`; `lib.rs`: the root).
fn module_path(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    if last != "mod.rs" && last != "lib.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// One edge of the file graph: from a file, at a line, to a file.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: String,
    line: usize,
    to: String,
}

/// The file graph of a crate given as (path under `src/`, source text).
fn file_graph(files: &[(PathBuf, String)]) -> Vec<Edge> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut texts: Vec<(String, ModPath, FileText)> = Vec::new();
    for (rel, raw) in files {
        let code = code_only(raw);
        let scope = module_path(rel);
        let mut text = read_file_text(&code, &scope);
        let attrs = pathed_attrs(raw);
        for (k, p) in text.pathed.iter_mut().enumerate() {
            p.2 = attrs.get(k).cloned().unwrap_or_default();
        }
        texts.push((rel.display().to_string(), scope, text));
    }
    // Which files define each module (a `#[path]` module is the file it
    // names; two files may be one module in two builds), and which modules
    // exist (inline ones belong to the file they are written in).
    let mut files_of: BTreeMap<ModPath, BTreeSet<String>> = BTreeMap::new();
    let mut renamed: BTreeMap<String, ModPath> = BTreeMap::new();
    for (name, _, text) in &texts {
        let dir = Path::new(name).parent().unwrap();
        for (scope, child, file) in &text.pathed {
            let mut m = scope.clone();
            m.push(child.clone());
            renamed.insert(dir.join(file).display().to_string(), m);
        }
    }
    for (name, scope, text) in texts.iter_mut() {
        if let Some(m) = renamed.get(name.as_str()) {
            *scope = m.clone();
            for w in &mut text.written {
                let tail = w.scope.split_off(w.scope.len().min(scope.len()));
                w.scope = scope.clone();
                w.scope.extend(tail);
            }
        }
        files_of
            .entry(scope.clone())
            .or_default()
            .insert(name.clone());
    }
    for (name, _, text) in &texts {
        for (scope, child, inline) in &text.mods {
            let mut m = scope.clone();
            m.push(child.clone());
            if *inline {
                files_of.entry(m).or_default().insert(name.clone());
            }
        }
    }
    let is_module = |m: &[String]| files_of.contains_key(m);
    // Names each scope binds to a module by `use`, and the modules it
    // glob-imports.
    let mut aliases: BTreeMap<ModPath, BTreeMap<String, ModPath>> = BTreeMap::new();
    let mut globs: BTreeMap<ModPath, Vec<ModPath>> = BTreeMap::new();
    let resolve = |scope: &[String],
                   segs: &[String],
                   aliases: &BTreeMap<ModPath, BTreeMap<String, ModPath>>,
                   globs: &BTreeMap<ModPath, Vec<ModPath>>|
     -> Option<ModPath> {
        let first = segs.first()?;
        let (mut base, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (scope.to_vec(), &segs[1..]),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let base = scope[..scope.len().checked_sub(ups)?].to_vec();
                (base, &segs[ups..])
            }
            name => {
                let mut child = scope.to_vec();
                child.push(name.to_string());
                let found = if is_module(&child) {
                    Some(child)
                } else if let Some(m) = aliases.get(scope).and_then(|a| a.get(name)) {
                    Some(m.clone())
                } else {
                    globs.get(scope).into_iter().flatten().find_map(|g| {
                        let mut child = g.clone();
                        child.push(name.to_string());
                        if is_module(&child) {
                            Some(child)
                        } else {
                            aliases.get(g).and_then(|a| a.get(name)).cloned()
                        }
                    })
                };
                (found?, &segs[1..])
            }
        };
        base.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(base)
    };
    // Aliases may name one another: a few rounds settle them.
    for _ in 0..4 {
        for (_, _, text) in &texts {
            for w in &text.written {
                let Some(binds) = &w.binds else { continue };
                let Some(m) = resolve(&w.scope, &w.segments, &aliases, &globs) else {
                    continue;
                };
                match binds {
                    None if is_module(&m) => {
                        let g = globs.entry(w.scope.clone()).or_default();
                        if !g.contains(&m) {
                            g.push(m);
                        }
                    }
                    Some(name) if is_module(&m) && !name.is_empty() => {
                        aliases
                            .entry(w.scope.clone())
                            .or_default()
                            .insert(name.clone(), m);
                    }
                    _ => {}
                }
            }
        }
    }
    let mut edges = BTreeSet::new();
    for (name, _, text) in &texts {
        for w in &text.written {
            let Some(mut m) = resolve(&w.scope, &w.segments, &aliases, &globs) else {
                continue;
            };
            // `use a::b;` of a module only names it: what goes through the
            // name (`b::f()`, `b::c::T`) is the edge, to the file it reaches.
            if matches!(w.binds, Some(Some(_))) && is_module(&m) {
                continue;
            }
            // The longest prefix that is a module: the file defining it.
            while !m.is_empty() && !is_module(&m) {
                m.pop();
            }
            let Some(targets) = files_of.get(&m) else {
                continue;
            };
            for to in targets {
                if to != name {
                    edges.insert(Edge {
                        from: name.clone(),
                        line: w.line,
                        to: to.clone(),
                    });
                }
            }
        }
    }
    edges.into_iter().collect()
}

/// Every cycle of the graph, one per strongly connected part (the
/// shortest through its first file), as its edges in order, with every
/// file of that part.
fn cycles(edges: &[Edge]) -> Vec<(Vec<Edge>, Vec<String>)> {
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    let mut next: BTreeMap<&str, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        next.entry(&e.from).or_default().push(e);
    }
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(f) = todo.pop() {
            for e in next.get(f).into_iter().flatten() {
                if seen.insert(e.to.as_str()) {
                    todo.push(&e.to);
                }
            }
        }
        seen
    };
    let nodes: BTreeSet<&str> = edges.iter().map(|e| e.from.as_str()).collect();
    let reach_of: BTreeMap<&str, BTreeSet<&str>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    for &n in &nodes {
        if done.contains(n) || !reach_of[n].contains(n) {
            continue;
        }
        // Its part: the files that reach it and that it reaches.
        let part: BTreeSet<&str> = reach_of[n]
            .iter()
            .copied()
            .filter(|m| reach_of.get(m).is_some_and(|r| r.contains(n)))
            .collect();
        done.extend(part.iter().copied());
        // The shortest way back to `n`, breadth first.
        let mut came: BTreeMap<&str, &Edge> = BTreeMap::new();
        let mut queue = VecDeque::from([n]);
        'search: while let Some(f) = queue.pop_front() {
            for e in next.get(f).into_iter().flatten() {
                if !part.contains(e.to.as_str()) || came.contains_key(e.to.as_str()) {
                    continue;
                }
                came.insert(&e.to, e);
                if e.to == n {
                    break 'search;
                }
                queue.push_back(&e.to);
            }
        }
        let mut cycle = Vec::new();
        let mut at = n;
        while let Some(e) = came.get(at) {
            cycle.push((*e).clone());
            at = &e.from;
            if at == n {
                break;
            }
        }
        cycle.reverse();
        out.push((cycle, part.iter().map(|f| format!("src/{f}")).collect()));
    }
    out
}

fn show(cycle: &[Edge]) -> String {
    cycle
        .iter()
        .map(|e| format!("  src/{}:{} uses src/{}", e.from, e.line, e.to))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_file_is_in_an_import_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| p.strip_prefix(&src).unwrap().to_path_buf())
        .filter(|rel| rel != Path::new("main.rs"))
        .map(|rel| {
            let text = std::fs::read_to_string(src.join(&rel)).unwrap();
            (rel, text)
        })
        .collect();
    let edges = file_graph(&files);
    assert!(
        edges.len() > 300,
        "found only {} file edges: the reader is broken",
        edges.len()
    );
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "import cycles between files (ARCHITECTURE.md: Invariants; move what both \
         sides use into a file below both):\n{}\n",
        found
            .iter()
            .map(|(c, part)| format!(
                "{}\n  ({} files in this circle: {})",
                show(c),
                part.len(),
                part.join(" ")
            ))
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

#[test]
fn the_file_reader_finds_a_cycle_through_every_spelling() {
    let crate_of = |files: &[(&str, &str)]| -> Vec<(PathBuf, String)> {
        files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    };
    // mod.rs calls its child by a bare path; the child names `super::` back.
    let two = crate_of(&[
        ("lib.rs", "pub mod gate;\n"),
        (
            "gate/mod.rs",
            "mod judge;\npub struct Risk;\nfn f() { judge::analyze(); }\n",
        ),
        ("gate/judge.rs", "use super::Risk;\npub fn analyze() {}\n"),
    ]);
    let found = cycles(&file_graph(&two));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        show(&found[0].0),
        "  src/gate/judge.rs:1 uses src/gate/mod.rs\n  src/gate/mod.rs:3 uses src/gate/judge.rs"
    );
    // The same through `crate::` in a group, an alias and `self::`; a
    // `mod x;`, a `pub(in crate::…)`, a comment and a string are no edges.
    let three = crate_of(&[
        ("lib.rs", "pub mod a;\npub mod b;\n"),
        (
            "a/mod.rs",
            "pub(in crate::a) mod inner;\n// crate::b::X\nconst S: &str = \"crate::b::X\";\n\
             use crate::{b::{self as bee}, a::inner};\nfn f() { bee::X; self::inner::Y; }\n",
        ),
        ("a/inner.rs", "pub struct Y;\n"),
        (
            "b.rs",
            "pub struct X;\nmod tests {\n    use super::super::a::inner::Y;\n}\n",
        ),
    ]);
    let edges = file_graph(&three);
    let shown: Vec<String> = edges
        .iter()
        .map(|e| format!("{}:{}>{}", e.from, e.line, e.to))
        .collect();
    assert_eq!(
        shown,
        vec![
            "a/mod.rs:5>a/inner.rs",
            "a/mod.rs:5>b.rs",
            "b.rs:3>a/inner.rs"
        ]
    );
    assert!(cycles(&edges).is_empty());
    // `use super::git;` only names the module: a path through it reaches
    // the file it goes into (`git/views.rs`), not `git/mod.rs`.
    let alias = crate_of(&[
        ("lib.rs", "mod gate;\nmod git;\n"),
        (
            "gate.rs",
            "use super::git;\npub struct Gate {\n    v: git::views::Views,\n}\n",
        ),
        ("git/mod.rs", "pub mod views;\nuse crate::gate::Gate;\n"),
        ("git/views.rs", "pub struct Views;\n"),
    ]);
    let edges = file_graph(&alias);
    let shown: Vec<String> = edges
        .iter()
        .map(|e| format!("{}:{}>{}", e.from, e.line, e.to))
        .collect();
    assert_eq!(
        shown,
        vec!["gate.rs:3>git/views.rs", "git/mod.rs:2>gate.rs"]
    );
    assert!(cycles(&edges).is_empty());
    // A `use super::*` glob and a child through it close a circle too, and
    // a `#[path]` file is the module it is declared as.
    let glob = crate_of(&[
        ("lib.rs", "mod m;\n"),
        (
            "m/mod.rs",
            "#[path = \"other.rs\"]\nmod kid;\npub fn g() {}\nmod tests { use super::*; fn t() { kid::h(); } }\n",
        ),
        ("m/other.rs", "pub fn h() { super::g() }\n"),
    ]);
    let found = cycles(&file_graph(&glob));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        show(&found[0].0),
        "  src/m/mod.rs:4 uses src/m/other.rs\n  src/m/other.rs:1 uses src/m/mod.rs"
    );
}

/// The lines of `text` before its test module, comments and strings
/// blanked (`code_only`), numbered from 1. A test-only item elsewhere is
/// still included.
fn lines_before_tests(text: &str) -> Vec<(usize, String)> {
    let code = code_only(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let test_mod = line.trim() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .take(3)
                .any(|l| l.trim_start().starts_with("mod "));
        if test_mod {
            break;
        }
        out.push((i + 1, line.to_string()));
    }
    out
}

/// A slice sort written at a call site outside the tests, as `file:line`.
/// `util::sort` is the one place that may.
fn direct_sorts(rel: &str, text: &str) -> Vec<String> {
    if rel == "util/sort.rs" {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (n, line) in lines_before_tests(text) {
        let b = line.as_bytes();
        for (at, _) in line.match_indices(".sort") {
            let rest = &line[at + ".sort".len()..];
            let name_end = rest
                .bytes()
                .position(|c| !is_ident(c))
                .unwrap_or(rest.len());
            let (name, after) = rest.split_at(name_end);
            let method = matches!(
                name,
                "" | "_by"
                    | "_by_key"
                    | "_by_cached_key"
                    | "_unstable"
                    | "_unstable_by"
                    | "_unstable_by_key"
            );
            if method && after.trim_start().starts_with('(') && at > 0 && b[at - 1] != b':' {
                out.push(format!("{rel}:{n}: {}", line.trim()));
            }
        }
    }
    out
}

/// What `find` reports in each file under `src/` (given its path relative
/// to `src/` and its text).
fn each_src_file(find: fn(&str, &str) -> Vec<String>) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap().to_string_lossy();
        found.extend(find(&rel, &std::fs::read_to_string(file).unwrap()));
    }
    found
}

/// `thread::spawn(` outside the tests, as `file:line`: it panics when the
/// system cannot make a thread (a call that filled the process table
/// would then take latchclaw down); `util::thread` and
/// `std::thread::Builder` return the error instead.
fn panicking_spawns(rel: &str, text: &str) -> Vec<String> {
    lines_before_tests(text)
        .into_iter()
        .filter(|(_, line)| line.contains("thread::spawn("))
        .map(|(n, line)| format!("{rel}:{n}: {}", line.trim()))
        .collect()
}

#[test]
fn threads_are_made_only_where_failing_to_make_one_is_handled() {
    let bad = each_src_file(panicking_spawns);
    assert!(
        bad.is_empty(),
        "make threads with crate::util::thread (or std::thread::Builder) and handle the error:\n{}",
        bad.join("\n")
    );
    let sample = "fn f() {\n    std::thread::spawn(|| {});\n    // thread::spawn(x)\n    \
                  crate::util::thread(\"t\", || {});\n}\n#[cfg(test)]\nmod t { fn g() { std::thread::spawn(|| {}); } }\n";
    assert_eq!(
        panicking_spawns("x.rs", sample),
        ["x.rs:2: std::thread::spawn(|| {});"]
    );
}

/// Each `sort_by` on a new type or closure compiles its own copy of the
/// standard merge sort (3–4 KB); `util::sort` funnels them into one.
#[test]
fn slices_are_sorted_only_through_util_sort() {
    let bad = each_src_file(direct_sorts);
    assert!(
        bad.is_empty(),
        "sort through crate::util::sort (sort, sort_by, sort_by_key):\n{}",
        bad.join("\n")
    );
    // The reader sees each spelling, and not the helpers' own calls.
    let sample = "fn f() {\n    v.sort();\n    a.b.sort_by(|x, y| x.cmp(y));\n    \
                  w.sort_unstable_by_key(|x| x.0);\n    util::sort::sort(&mut v);\n    \
                  let s = x.sorted();\n    // v.sort();\n}\n#[cfg(test)]\nfn h() {}\nfn i() { v.sort(); }\n\
                  #[cfg(test)]\n#[allow(x)]\nmod t { fn g() { v.sort(); } }\n";
    let found = direct_sorts("x.rs", sample);
    assert_eq!(found.len(), 4, "{found:?}");
}
