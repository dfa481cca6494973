//! Help texts, generated from the definitions in `flags`.

use super::flags::{self, ALL, COMMANDS, CommandDef, FLAGS};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  internal error (a bug; please report it)
  2  usage or config error
  3  runtime error: provider failed (after fallbacks), database, file system
  4  refused by policy: a tool call was denied
  5  emergency stop: a tool call was refused because ESTOP is on
  6  limit reached: max_tool_rounds or the run's --timeout
  7  integrity: the receipt chain is broken, damaged or cut short of its anchor
  8  another run holds the --lock";

/// Where a command's help points for the table above.
const EXIT_CODES_POINTER: &str = "Exit codes: see `latchclaw --help`.";

/// `left` padded to `width`, then `right`; wide left columns get a line of
/// their own so the right column stays aligned.
fn row(out: &mut String, left: &str, right: &str, width: usize) {
    if left.chars().count() + 2 > width {
        out.push_str(&format!("  {left}\n  {:width$}{right}\n", ""));
    } else {
        out.push_str(&format!("  {left:width$}{right}\n"));
    }
}

fn synopsis_with_options(c: &CommandDef) -> String {
    let options = c.flags().any(|f| f.commands != ALL);
    format!(
        "{}{}",
        c.synopsis(),
        if options { " [options]" } else { "" }
    )
}

pub fn top() -> String {
    let mut out = format!(
        "latchclaw {} — a small, local-first agent runtime

Usage: latchclaw <command> [options]   (options go anywhere on the line)

Commands:
",
        env!("CARGO_PKG_VERSION")
    );
    let width = 34;
    for c in COMMANDS {
        row(&mut out, &c.synopsis(), &summary(c), width);
    }
    out.push_str("\nGlobal options:\n");
    for f in FLAGS.iter().filter(|f| f.commands == ALL) {
        row(&mut out, &f.spelling(), f.help, 18);
    }
    out.push_str(
        "
`latchclaw help COMMAND` or `latchclaw COMMAND --help` lists a command's options.

Environment:
  LATCHCLAW_HOME        state directory (default ~/.latchclaw)
  LATCHCLAW_LOG=json    logs as JSON lines on stderr
  LATCHCLAW_LOG_LEVEL   error|warn|info|debug|trace (or RUST_LOG); default warn

",
    );
    out.push_str(EXIT_CODES);
    out
}

/// A command's line in a list: its summary, and whether this build has it.
fn summary(c: &CommandDef) -> String {
    match crate::features::command_missing(c.path) {
        Some(_) => format!("{} (not in this build)", c.summary),
        None => c.summary.to_string(),
    }
}

pub fn command(c: &CommandDef) -> String {
    let missing = match crate::features::command_missing(c.path) {
        Some(f) => format!("\n\nNot in this build: {}.", crate::features::how(f)),
        None => String::new(),
    };
    let mut out = format!(
        "Usage: latchclaw {}\n\n{}{missing}\n\nOptions:\n",
        synopsis_with_options(c),
        c.about
    );
    let flags: Vec<_> = c.flags().filter(|f| f.long != "version").collect();
    let width = flags
        .iter()
        .map(|f| f.spelling().chars().count() + 3)
        .max()
        .unwrap_or(0)
        .clamp(14, 26);
    for f in flags {
        row(&mut out, &f.spelling(), f.help, width);
    }
    out.push('\n');
    out.push_str(EXIT_CODES_POINTER);
    out
}

fn group(word: &str, subs: &[&CommandDef]) -> String {
    let mut out = format!("Usage: latchclaw {word} <command> [options]\n\nCommands:\n");
    for c in subs {
        row(&mut out, &synopsis_with_options(c), &summary(c), 34);
    }
    out.push_str(&format!(
        "\n`latchclaw help {word} COMMAND` lists a command's options.\n\n{EXIT_CODES_POINTER}"
    ));
    out
}

/// Help for the command these words name (extra words, such as a
/// command's arguments, are ignored); `None` when they name none.
pub fn for_words(words: &[String]) -> Option<String> {
    let Some(first) = words.first() else {
        return Some(top());
    };
    let two = words.get(1).map(|w| format!("{first} {w}"));
    if let Some(c) = two.as_deref().and_then(flags::command) {
        return Some(command(c));
    }
    if let Some(c) = flags::command(first) {
        return Some(command(c));
    }
    let subs = flags::group(first);
    (!subs.is_empty()).then(|| group(first, &subs))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_help_listing_exactly_its_flags() {
        for c in COMMANDS {
            let words: Vec<String> = c.path.split(' ').map(String::from).collect();
            let h = for_words(&words).unwrap();
            assert!(
                h.starts_with(&format!("Usage: latchclaw {}", c.path)),
                "{h}"
            );
            for f in FLAGS {
                let sp = f.spelling();
                let listed = h.lines().any(|l| {
                    l.strip_prefix("  ")
                        .and_then(|l| l.strip_prefix(sp.as_str()))
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with("  "))
                });
                if f.long != "version" {
                    assert_eq!(listed, f.takes(c.path), "{} --{}:\n{h}", c.path, f.long);
                }
            }
            assert!(!h.contains("8  another run"), "the table is in --help only");
        }
        assert!(for_words(&["bogus".into()]).is_none());
        assert!(
            for_words(&["memory".into()])
                .unwrap()
                .contains("memory search QUERY")
        );
        assert!(top().contains("8  another run holds the --lock"));
    }
}
