//! The `git` tool's arguments → the argv the gate judges: a fixed
//! `git SUBCOMMAND …` built from the call (never a command string), refs
//! and paths checked for what the tool allows; `Gate::decide` then judges
//! that argv as it judges `git …` typed into the shell tool.

use crate::security::gate::Gate;
use crate::security::refusal::Refused;
use serde_json::{Map, Value};
use std::path::{Component, Path};

/// Commits `log` shows unless `n` says otherwise, and the most it shows.
const LOG_DEFAULT: u64 = 10;
const LOG_MAX: u64 = 200;
/// With `include_diff`, the most commits `log` shows (each with its patch).
const LOG_DIFF_MAX: u64 = 20;
/// Longest `author` or `grep` value accepted.
const MAX_FILTER: usize = 200;
/// Longest ref or `since` value accepted.
const MAX_REF: usize = 256;
const MAX_SINCE: usize = 64;

/// The subcommands and the arguments each takes (besides `command`).
pub const COMMANDS: &[(&str, &[&str])] = &[
    ("status", &[]),
    (
        "log",
        &["n", "path", "since", "author", "grep", "include_diff"],
    ),
    ("diff", &["staged", "refs", "path"]),
    ("show", &["ref", "path"]),
    ("blame", &["path", "start_line", "end_line"]),
    ("branch", &[]),
];

/// The argv (`git SUBCOMMAND …`) the tool runs for `args`, or why the
/// arguments cannot be run. Refs and paths are checked here for what the
/// tool allows (no option injection, no `..`, inside the workspace); the
/// gate then judges the whole argv as it judges a shell `git` command.
pub fn argv(args: &Value, gate: &Gate) -> Result<Vec<String>, Refused> {
    let empty = Map::new();
    let obj = args.as_object().unwrap_or(&empty);
    let command = obj
        .get("command")
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::arguments("\"command\" (a string) is required"))?;
    let names = || {
        COMMANDS
            .iter()
            .map(|(c, _)| *c)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some((sub, takes)) = COMMANDS.iter().find(|(c, _)| *c == command) else {
        return Err(Refused::arguments(format!(
            "git: unknown command \"{}\"; allowed: {}",
            crate::util::printable(command),
            names()
        )));
    };
    for key in obj.keys().filter(|k| *k != "command") {
        if !takes.contains(&key.as_str()) {
            let allowed = if takes.is_empty() {
                "it takes no other argument".to_string()
            } else {
                format!("it takes {}", takes.join(", "))
            };
            return Err(Refused::arguments(format!(
                "git {sub}: argument \"{}\" does not apply; {allowed}",
                crate::util::printable(key)
            )));
        }
    }
    let text = |key: &str| obj.get(key).and_then(Value::as_str);
    let number = |key: &str| -> Result<Option<u64>, Refused> {
        match obj.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().filter(|n| *n >= 1).map(Some).ok_or_else(|| {
                Refused::arguments(format!("git {sub}: \"{key}\" must be a positive integer"))
            }),
        }
    };
    let path = text("path").map(|p| rel_path(p, gate)).transpose()?;
    let mut out: Vec<String> = vec!["git".into(), (*sub).into()];
    let mut push = |s: &str| out.push(s.to_string());
    match *sub {
        "status" => {
            push("--short");
            push("--branch");
        }
        "branch" => {
            push("--list");
            push("--verbose");
        }
        "log" => {
            let n = number("n")?.unwrap_or(LOG_DEFAULT);
            if n > LOG_MAX {
                return Err(Refused::arguments(format!(
                    "git log: \"n\" is {n}; the most is {LOG_MAX}"
                )));
            }
            let diff = match obj.get("include_diff") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| {
                    Refused::arguments("git log: \"include_diff\" must be true or false")
                })?,
            };
            if diff && n > LOG_DIFF_MAX {
                return Err(Refused::arguments(format!(
                    "git log: \"n\" is {n}; with \"include_diff\" the most is {LOG_DIFF_MAX}"
                )));
            }
            push(&format!("--max-count={n}"));
            push("--date=short");
            push("--format=%h %ad %an: %s");
            if let Some(since) = text("since") {
                check_since(since)?;
                push(&format!("--since={since}"));
            }
            // Matched as fixed text, case-insensitively: no regular
            // expression reaches git.
            let mut filtered = false;
            for key in ["author", "grep"] {
                if let Some(v) = obj.get(key) {
                    let v = v.as_str().ok_or_else(|| {
                        Refused::arguments(format!("git log: \"{key}\" must be a string"))
                    })?;
                    check_filter(key, v)?;
                    push(&format!("--{key}={v}"));
                    filtered = true;
                }
            }
            if filtered {
                push("--fixed-strings");
                push("--regexp-ignore-case");
            }
            if diff {
                push("--patch");
            }
        }
        "diff" => {
            let staged = obj.get("staged").and_then(Value::as_bool).unwrap_or(false);
            let refs = match obj.get("refs") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|r| {
                        r.as_str()
                            .ok_or_else(|| Refused::arguments("git diff: \"refs\" must be strings"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                Some(_) => {
                    return Err(Refused::arguments(
                        "git diff: \"refs\" must be an array of strings",
                    ));
                }
            };
            if refs.len() > 2 || (staged && refs.len() > 1) {
                return Err(Refused::arguments(format!(
                    "git diff: {} refs given; at most 2 (1 with \"staged\")",
                    refs.len()
                )));
            }
            if staged {
                push("--cached");
            }
            for r in refs {
                check_ref(r)?;
                push(r);
            }
        }
        "show" => {
            let r = text("ref").unwrap_or("HEAD");
            check_ref(r)?;
            match &path {
                // `./` makes git read the path from the workspace, where the
                // gate judges it, not from the repository's top.
                Some(p) if p != "." => push(&format!("{r}:./{p}")),
                Some(_) => return Err(Refused::arguments("git show: \"path\" must name a file")),
                None => push(r),
            }
            return Ok(out);
        }
        "blame" => {
            if path.is_none() {
                return Err(Refused::arguments(
                    "git blame: \"path\" (the file to annotate) is required",
                ));
            }
            let (start, end) = (number("start_line")?, number("end_line")?);
            if let (Some(s), Some(e)) = (start, end)
                && e < s
            {
                return Err(Refused::arguments(format!(
                    "git blame: end_line {e} is before start_line {s}"
                )));
            }
            match (start, end) {
                (None, None) => {}
                (s, e) => push(&format!(
                    "-L{},{}",
                    s.unwrap_or(1),
                    e.map(|e| e.to_string()).unwrap_or_default()
                )),
            }
        }
        _ => unreachable!("every command in COMMANDS has an arm"),
    }
    if let Some(p) = path {
        push("--");
        push(&p);
    }
    Ok(out)
}

/// A ref: a branch, tag, `HEAD~3`, `main@{1}`, a commit id or a range.
/// A leading `-` would be read as an option; anything outside the charset
/// is refused rather than quoted. After a `:` comes a path in the commit,
/// held to the path rules (the gate judges it as a file too).
fn check_ref(r: &str) -> Result<(), Refused> {
    const ALLOWED: &str = "letters, digits and . _ / @ { } ^ ~ : -";
    if r.is_empty() {
        return Err(Refused::arguments("git: a ref is empty"));
    }
    if r.len() > MAX_REF {
        return Err(Refused::arguments(format!(
            "git: a ref is {} bytes; the most is {MAX_REF}",
            r.len()
        )));
    }
    if r.starts_with('-') {
        return Err(Refused::arguments(format!(
            "git: ref \"{}\" starts with `-` and would be read as an option; name a commit, \
             branch or tag",
            crate::util::printable(r)
        )));
    }
    if let Some(bad) = r
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._/@{}^~:-".contains(*c)))
    {
        return Err(Refused::arguments(format!(
            "git: ref \"{}\" has `{}`; refs may hold {ALLOWED}",
            crate::util::printable(r),
            crate::util::printable(&bad.to_string())
        )));
    }
    if let Some((_, p)) = r.split_once(':')
        && (p.starts_with('-')
            || p.starts_with('/')
            || Path::new(p).components().any(|c| c == Component::ParentDir))
    {
        return Err(Refused::arguments(format!(
            "git: the path in ref \"{r}\" must be relative to the repository, without `..` \
             or a leading `-` or `/`"
        )));
    }
    Ok(())
}

/// An `author` or `grep` filter: printable text of at most
/// [`MAX_FILTER`] bytes, not empty.
fn check_filter(key: &str, s: &str) -> Result<(), Refused> {
    if s.trim().is_empty() || s.len() > MAX_FILTER || s.chars().any(char::is_control) {
        return Err(Refused::arguments(format!(
            "git log: \"{key}\" must be 1 to {MAX_FILTER} bytes of text with no control \
             characters (matched as fixed text, any case)"
        )));
    }
    Ok(())
}

fn check_since(s: &str) -> Result<(), Refused> {
    if s.is_empty()
        || s.len() > MAX_SINCE
        || s.starts_with('-')
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " .:,+/_-".contains(c))
    {
        return Err(Refused::arguments(format!(
            "git log: \"since\" must be a date such as \"2024-05-01\" or \"2 weeks ago\" (at \
             most {MAX_SINCE} letters, digits, spaces and . : , + / _ -, not starting with `-`)"
        )));
    }
    Ok(())
}

/// A path argument as git will get it: relative to the workspace (where
/// git runs), after the gate's path policy accepted it. No `..`, no
/// leading `-` or `~`.
fn rel_path(raw: &str, gate: &Gate) -> Result<String, Refused> {
    let shown = crate::util::printable(raw);
    if raw.starts_with('-') {
        return Err(Refused::arguments(format!(
            "git: path \"{shown}\" starts with `-` and would be read as an option"
        )));
    }
    if raw.starts_with('~') {
        return Err(Refused::arguments(format!(
            "git: path \"{shown}\": paths are relative to the workspace (\".\" is its root)"
        )));
    }
    if Path::new(raw)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(Refused::arguments(format!(
            "git: path \"{shown}\" has a `..` component; name it from the workspace root"
        )));
    }
    gate.check_path(raw)?;
    let ws = gate.workspace()?;
    let lexical = crate::security::paths::lexical_normalize(&ws.join(raw));
    let rel = lexical.strip_prefix(ws).map_err(|_| {
        Refused::path(format!(
            "git: path \"{shown}\" is outside the workspace {}",
            ws.display()
        ))
    })?;
    if rel.as_os_str().is_empty() {
        return Ok(".".into());
    }
    rel.to_str()
        .map(str::to_string)
        .ok_or_else(|| Refused::arguments(format!("git: path \"{shown}\" is not valid UTF-8")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn refs_outside_the_charset_or_looking_like_options_are_refused() {
        for ok in [
            "HEAD",
            "HEAD~3",
            "main",
            "v1.2",
            "a1b2c3d",
            "main..feature",
            "HEAD^",
            "main@{1}",
            "origin/main",
            "HEAD:src/a.rs",
        ] {
            assert_eq!(check_ref(ok), Ok(()), "{ok}");
        }
        for bad in [
            "-p",
            "--exec=touch /tmp/x",
            "--output=/tmp/x",
            "",
            "a b",
            "HEAD;id",
            "$(id)",
            "HEAD:../x",
            "HEAD:-x",
            "HEAD:/etc/passwd",
            "a\nb",
        ] {
            assert!(check_ref(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(check_ref(&"a".repeat(MAX_REF + 1)).is_err());
        assert!(check_ref("-p").unwrap_err().reason.contains("option"));
    }

    #[test]
    fn since_is_a_date_not_an_option() {
        assert!(check_since("2024-05-01").is_ok());
        assert!(check_since("2 weeks ago").is_ok());
        assert!(check_since("--output=/tmp/x").is_err());
        assert!(check_since("x;y").is_err());
        assert!(check_since("").is_err());
    }
}
