//! No process-global state but signal handling and caches of constants
//! (ARCHITECTURE.md: Invariants): every `static` in `src/` is one of those
//! listed here, each with why it may be one. State a run or a command
//! works with (the redactor, counters) is passed in instead; a new
//! `static` fails here with its file and line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

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
    "NO_OPENAT2", // tools/beneath: the kernel has no openat2 (ENOSYS)
    "ROOTS",      // transport: the system's CA bundle, read once
    // Once-only guards of facts about the process itself.
    "DONE",   // tools/shell: PR_SET_CHILD_SUBREAPER set once
    "WARNED", // security/confine: a missing kernel feature warned of once
    // Tests only.
    "FORCE_WALK", // tools/beneath (cfg(test)): a thread's opens take the walk
    "BOGUS",      // security/confine (test): a filter the kernel refuses
];

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
