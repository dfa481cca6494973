//! `grep -r`, `rg` and `diff` of trees, kept out of secret-named files:
//! options that skip them added to the argv, which is read again. For the
//! shell judge (`judge.rs`); the rules are `secret_files.rs`'s.

use super::walk_exclusions;
use crate::security::gate::Gate;
use crate::security::options::{self, table::Parsed};
use crate::security::paths::absolute;
use crate::security::refusal::Refused;
use std::path::Path;

/// `grep -r`, `rg` and `diff` of directories read every file of the trees
/// they walk. They get options that skip secret-named files and git
/// directories, placed after the caller's own (the last pattern that
/// matches decides, so an `--include` or `-g` cannot bring one back), and
/// the argv is read again: the options added must change nothing else the
/// gate judged. `diff FILE DIR` reads `DIR/FILE`, judged here by its path.
pub(crate) fn guard_walk(
    lower: &str,
    argv: &mut Vec<String>,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    if !matches!(lower, "grep" | "rg" | "diff") {
        return Ok(());
    }
    let before = read_argv(lower, argv)?;
    let mut roots = Vec::new();
    let mut files = Vec::new();
    for r in before.reads.iter().chain(&before.read_dirs_recursive) {
        let p = gate.check_path(&absolute(cwd, r))?;
        if p.is_dir() || (lower != "diff" && before.read_dirs_recursive.contains(r)) {
            roots.push(p);
        } else {
            files.push(p);
        }
    }
    if lower == "diff" {
        for d in &roots {
            for f in &files {
                if let Some(name) = f.file_name() {
                    gate.check_path(&d.join(name).to_string_lossy())
                        .map_err(|e| {
                            e.map_reason(|r| {
                                format!("`diff` would read {}: {r}", gate.shown(&d.join(name)))
                            })
                        })?;
                }
            }
        }
    }
    if roots.is_empty() {
        return Ok(());
    }
    let in_git = roots.iter().any(|p| gate.in_git_dir(p));
    add_exclusions(lower, argv, in_git)
}

/// The exclusions spliced into `argv` where `lower` still reads options,
/// and the argv read again to make sure nothing else changed.
fn add_exclusions(lower: &str, argv: &mut Vec<String>, in_git: bool) -> Result<(), Refused> {
    let before = read_argv(lower, argv)?;
    let at = match lower {
        "diff" => 1,
        _ => {
            1 + options::options_end(lower, &argv[1..]).ok_or_else(|| {
                Refused::command(format!("`{lower}`: cannot tell where its options end"))
            })?
        }
    };
    argv.splice(at..at, walk_exclusions(lower, in_git));
    let after = read_argv(lower, argv)?;
    let same = |a: &Parsed, b: &Parsed| {
        (
            &a.reads,
            &a.writes,
            &a.read_dirs_recursive,
            &a.write_dirs_recursive,
            a.writes_anything,
            a.follows_symlinks_recursively,
        ) == (
            &b.reads,
            &b.writes,
            &b.read_dirs_recursive,
            &b.write_dirs_recursive,
            b.writes_anything,
            b.follows_symlinks_recursively,
        )
    };
    if !same(&before, &after) {
        return Err(Refused::command(format!(
            "`{lower}`: the options that keep it out of secret-named files would change what \
             it reads; name the files instead"
        )));
    }
    Ok(())
}

fn read_argv(lower: &str, argv: &[String]) -> Result<Parsed, Refused> {
    options::parse(lower, &argv[1..])
        .unwrap_or_else(|| Err(Refused::command(format!("`{lower}` has no option table"))))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// The exclusions land where each program still reads options: before
    /// the `--` that ends them (not one taken as `-e`'s value), else last,
    /// so they come after every `--include`/`-g` of the caller's.
    #[test]
    fn exclusions_go_where_options_are_still_read() {
        for (prog, cmd, at) in [
            ("grep", "grep -r KEY .", 4),
            ("grep", "grep -r --include=* KEY .", 5),
            ("grep", "grep -r -e -- KEY -- .", 5),
            ("grep", "grep -rl KEY -- -odd", 3),
            ("rg", "rg KEY", 2),
            ("rg", "rg -g * --hidden KEY src", 6),
            ("rg", "rg -e -- -- .", 3),
            ("diff", "diff -r a b", 1),
        ] {
            let mut argv = words(cmd);
            let n = argv.len();
            add_exclusions(prog, &mut argv, false).unwrap_or_else(|e| panic!("{cmd}: {e}"));
            let ex = walk_exclusions(prog, false);
            assert_eq!(argv.len(), n + ex.len(), "{cmd}");
            assert_eq!(argv[at..at + ex.len()], ex[..], "{cmd}: {argv:?}");
        }
    }
}
