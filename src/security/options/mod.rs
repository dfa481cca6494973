//! Option tables for the programs on the default shell allowlist, and a
//! resolver that reads an argv exactly as the real program would.
//!
//! The shell gate hands us a command's final argv (no shell, variables and
//! globs already expanded). For each program we know every option it accepts
//! (taken from the GNU binaries on Debian 12: coreutils 9.1, grep 3.8, sed
//! 4.9, findutils 4.9, diffutils 3.8, file 5.44; ripgrep 15; git 2.47), how
//! each takes its value, and what the value is: plain text, a path read, a
//! path written, or something we refuse (it runs code, writes where the gate
//! cannot see, sets the clock...). Parsing follows the program's own parser
//! (`getopt_long` with abbreviations and permutation, ripgrep's exact-name
//! parser, find's expression language, git's per-subcommand options, sed's
//! script grammar), because a resolver that reads an argv differently from
//! the program is itself the hole: a word we take for an option's value may
//! be a file to the program.
//!
//! The tables are pure functions of the argv: no file system access, no
//! recursion on input, linear in the argv's length, and no panics. A
//! program's checks of what its parsed argv reaches on disk (`judge_cp`,
//! `judge_diff`, `walk_depth`; git's in `security::git`) sit in the same
//! file as its table, so one program's rules are in one place.

pub(in crate::security) mod coreutils;
pub(in crate::security) mod find;
pub(in crate::security) mod search;
mod sed;
pub(in crate::security) mod table;

use crate::security::refusal::Refused;
pub use table::Parsed;
use table::{Entry, Spec, getopt_end};

/// Reads `args` (the argv without `argv[0]`) the way `program` does.
///
/// `None`: latchclaw has no table for this program. `Some(Err(reason))`:
/// refuse the call; the reason names the program, the option and why, e.g.
/// "`sort` option `--compress-program` runs a program".
pub fn parse(program: &str, args: &[String]) -> Option<Result<Parsed, Refused>> {
    let entry = PROGRAMS.iter().find(|e| e.name == program)?;
    Some((entry.parse)(args))
}

/// Whether latchclaw has an option table for `program` (a bare name).
pub fn has_table(program: &str) -> bool {
    PROGRAMS.iter().any(|e| e.name == program)
}

/// A one-line summary of what latchclaw knows about `program`, for
/// `policy show`, e.g. "ls: 63 options; reads; recursive with -R".
pub fn describe_program(program: &str) -> Option<String> {
    let e = PROGRAMS.iter().find(|e| e.name == program)?;
    let n = e.spec.map(|s| s.opts.len());
    Some(match n {
        Some(n) => format!("{}: {n} options; {}", e.name, e.summary),
        None => format!("{}: {}", e.name, e.summary),
    })
}

const PROGRAMS: &[Entry] = &[
    coreutils::LS,
    coreutils::CAT,
    coreutils::HEAD,
    coreutils::TAIL,
    coreutils::WC,
    search::GREP,
    search::RG,
    find::FIND,
    coreutils::ECHO,
    coreutils::PRINTF,
    coreutils::PWD,
    coreutils::DATE,
    coreutils::EXPR,
    sed::SED,
    coreutils::SORT,
    coreutils::UNIQ,
    coreutils::CUT,
    coreutils::TR,
    search::DIFF,
    coreutils::STAT,
    search::FILE,
    coreutils::DU,
    coreutils::DF,
    coreutils::WHICH,
    coreutils::BASENAME,
    coreutils::DIRNAME,
    coreutils::TRUE,
    coreutils::TEE,
    coreutils::MKDIR,
    coreutils::TOUCH,
    coreutils::CP,
    coreutils::MV,
    crate::security::git::options::GIT,
];

/// Option tables read for policy rules only: programs the gate does not
/// judge by a table, whose options a rule may still name.
const RULE_ONLY: &[&Spec] = &[&coreutils::RM_SPEC];

fn spec_of(program: &str) -> Option<&'static Spec> {
    PROGRAMS
        .iter()
        .find(|e| e.name == program)
        .and_then(|e| e.spec)
        .or_else(|| RULE_ONLY.iter().copied().find(|s| s.prog == program))
}

/// What the bits of an option mean, in the words a policy rule's `flags`
/// use: `-r`, `-R`, `--recursive` and cp's `-a` all mean "recursive".
const MEANINGS: &[(u32, &str)] = &[
    (table::REC, "recursive"),
    (table::FOLLOW, "follow-symlinks"),
    (table::INPLACE, "in-place"),
    (table::TARGET, "target-directory"),
    (table::PARENTS, "parents"),
    (table::WRITES, "writes"),
];

/// The meaning words a rule's `flags` may use.
pub fn meaning_words() -> impl Iterator<Item = &'static str> {
    MEANINGS.iter().map(|(_, w)| *w)
}

/// The options `args` gives `program`, read by its table as the program
/// reads them: each as its canonical name (`--recursive`, or `-r` for an
/// option with no long name), its long name bare (`recursive`), and the
/// meanings of its bits. `None`: no table here (git's and find's grammars
/// are their own); `Some(Err)`: the table cannot read this argv.
pub fn option_words(program: &str, args: &[String]) -> Option<Result<Vec<String>, Refused>> {
    let spec = spec_of(program)?;
    let items = match table::getopt(spec, args) {
        Ok(items) => items,
        Err(e) => return Some(Err(e)),
    };
    let mut out: Vec<String> = Vec::new();
    let mut push = |w: String| {
        if !out.contains(&w) {
            out.push(w);
        }
    };
    for item in items {
        let table::Item::Opt(hit) = item else {
            continue;
        };
        push(hit.o.name());
        if !hit.o.l.is_empty() {
            push(hit.o.l.to_string());
        }
        if hit.o.v == table::V::Write {
            push("writes".into());
        }
        for (bit, word) in MEANINGS {
            if hit.o.k & bit != 0 {
                push((*word).to_string());
            }
        }
    }
    Some(Ok(out))
}

/// The canonical name of the option `written` (`-R`, `--recur`) of
/// `program`, as `option_words` gives it; `None`: no table for `program`.
pub fn canonical_option(program: &str, written: &str) -> Option<Result<String, Refused>> {
    let spec = spec_of(program)?;
    // `--` after it: the value of an option that takes one, else the end
    // of the options.
    let args = [written.to_string(), "--".to_string()];
    Some(
        table::getopt(spec, &args).and_then(|items| match items.first() {
            Some(table::Item::Opt(hit)) if items.len() == 1 => Ok(hit.o.name()),
            _ => Err(Refused::command(format!(
                "`{written}` is not one option of `{program}`"
            ))),
        }),
    )
}

/// Whether `word` is something a rule's `flags` can match for `program`:
/// a meaning, or the long name of one of its options.
pub fn known_flag(program: &str, word: &str) -> Option<bool> {
    let spec = spec_of(program)?;
    Some(meaning_words().any(|w| w == word) || spec.opts.iter().any(|o| o.l == word))
}

/// Where options a program reads as options can still be added to `args`:
/// before the `--` that ends them (or, for a program that stops at its
/// first operand, before that operand), else at the end. `None` for a
/// program without a getopt table here, or an argv it refuses.
pub fn options_end(program: &str, args: &[String]) -> Option<usize> {
    let spec = match program {
        "grep" => &search::GREP_SPEC,
        "rg" => &search::RG_SPEC,
        _ => return None,
    };
    getopt_end(spec, args).ok().map(|(_, end)| end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
