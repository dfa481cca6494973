//! The shape of `src/`, read from the source itself.
//!
//! The layer order (ARCHITECTURE.md: Layers), held by reading every
//! `crate::…` path and every `super::` that climbs to the crate root in
//! every source file: a module may name only modules below it, so an
//! upward edge fails here with its file and line, and a cycle between
//! top-level modules cannot exist.
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
    "config",    // TOML → Config, with the validation of every value it reads
    "security", // the gate: decisions, shell grammar, plans, option tables, paths, network, sandbox policy, redactor
    "logging",  // log lines (through the redactor)
    "receipts", // the hash-chained receipt log
    "memory",   // SQLite: turns, notes, approvals, runs
    "transport", // the TCP/TLS connections under the HTTP agents
    "providers", // model providers
    "tools",    // the tools, acting on what the gate resolved
    "skills",   // SKILL.md files
    "prompt",   // the system prompt and the notes a message carries
    "runtime",  // the agent loop and one tool call's pipeline
    "channels", // the CLI channel and the REPL's line editor
    "service",  // the gateway as a systemd user service
    "gateway",  // the HTTP gateway
    "cli",      // the command line: parse and dispatch
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
    "NO_OPENAT2", // tools/beneath: the kernel has no openat2 (ENOSYS)
    "ROOTS",      // transport: the system's CA bundle, read once
    // Once-only guards of facts about the process itself.
    "DONE",   // tools/shell: PR_SET_CHILD_SUBREAPER set once
    "WARNED", // security/confine: a missing kernel feature warned of once
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
