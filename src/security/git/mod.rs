//! Everything the gate knows about git, in one place: `options` (git's
//! per-subcommand option table, read as git 2.47 reads an argv), `repo`
//! (git cannot be a launcher: the hardened environment and `-c` pins, the
//! repository's own configuration vetted as git itself reports it),
//! `ask` (the one place the gate starts git, to ask it), `secrets` (what
//! git shows without naming a file: config and remote views, the index
//! read for tracked secret-named files) and `tool_args` (the `git` tool's
//! arguments → the argv the gate judges).

mod ask;
pub(in crate::security) mod options;
pub mod repo;
pub(in crate::security) mod secrets;
pub mod tool_args;
pub(in crate::security) mod views;

use crate::security::gate::Gate;
use crate::security::options::table::Parsed;
use crate::security::paths::lexical_normalize;
use crate::security::refusal::Refused;
use std::path::Path;

/// git's own checks after its table has read the argv: what it reads
/// beyond its operands, and what it shows of secret-named files.
/// `program` is the git that will run (the one asked about its repository).
pub(in crate::security) fn judge(
    argv: &[String],
    parsed: &Parsed,
    trees: &mut Vec<String>,
    program: &Path,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    reads(&argv[1..], parsed, trees, cwd, gate)?;
    secrets::judge(argv, parsed, program, cwd, gate)
}

/// What git subcommands read beyond their operands: `grep` and `add -A`
/// walk the tree (untracked files too), and `REV:path` reads a file from the
/// object store, which is judged by the path it names.
fn reads(
    args: &[String],
    parsed: &Parsed,
    trees: &mut Vec<String>,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    let Some(sub) = parsed
        .git_subcommand
        .and_then(|i| args.get(i.wrapping_sub(1)))
    else {
        return Ok(());
    };
    let ws = gate.workspace()?;
    for a in args {
        // An option's value may be a revision too (`--blob=HEAD:x`,
        // `-L1,5:x`), and a path may hold a colon: every place the path
        // could start is judged.
        let word = match a.strip_prefix("--") {
            Some(long) => long.split_once('=').map_or("", |(_, v)| v),
            None if a.starts_with('-') => a.get(2..).unwrap_or(""),
            None => a.as_str(),
        };
        for (at, _) in word.match_indices(':') {
            let (rev, path) = (&word[..at], &word[at + 1..]);
            if rev.starts_with('-') || path.is_empty() {
                continue;
            }
            // `HEAD:./x` is relative to the directory; `HEAD:x` to the top.
            let p = if path.starts_with("./") || path.starts_with("../") {
                lexical_normalize(&cwd.join(path))
            } else {
                lexical_normalize(&ws.join(path))
            };
            gate.check_path(&p.to_string_lossy()).map_err(|e| {
                e.map_reason(|r| format!("git `{a}` reads a file from the repository: {r}"))
            })?;
        }
    }
    let pathspecs: Vec<String> = parsed
        .reads
        .iter()
        .chain(&parsed.writes)
        .filter(|p| !p.contains(':'))
        .cloned()
        .collect();
    let whole = args.iter().any(|a| {
        matches!(
            a.as_str(),
            "-A" | "--all" | "-u" | "--update" | "--untracked"
        )
    });
    match sub.as_str() {
        // `git grep` reads tracked files only (already in the repository)
        // unless told to read untracked ones too.
        "grep" if !args.iter().any(|a| a == "--untracked") => {}
        "grep" | "add" => {
            if pathspecs.is_empty() || whole {
                trees.push(".".into());
            }
            trees.extend(pathspecs);
        }
        _ => {}
    }
    Ok(())
}
