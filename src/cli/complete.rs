//! Shell completion scripts, generated from the definitions in `flags`,
//! and `latchclaw __complete KIND`, which the scripts call back for the
//! names only a config or the state knows (providers, skills, conversation
//! and approval ids): one a line, quietly, creating nothing.

use super::flags::{ALL, COMMANDS, CommandDef, FLAGS, Flag};
use super::parse::Shell;
use std::ffi::OsString;

/// The hidden command the scripts call back (not in `flags::COMMANDS`:
/// no help, no completion, no "did you mean" leads to it).
pub const CALLBACK: &str = "__complete";

/// What `__complete` lists.
pub const KINDS: [&str; 9] = [
    "providers",
    "tools",
    "skills",
    "conversations",
    "approvals",
    "plugins",
    "mcp_servers",
    "sops",
    "sop-runs",
];

/// What a value completes to: names `__complete` lists, then fixed words.
struct Values {
    kind: Option<&'static str>,
    words: &'static str,
}

const fn kind(k: &'static str) -> Values {
    Values {
        kind: Some(k),
        words: "",
    }
}

const fn words(w: &'static str) -> Values {
    Values {
        kind: None,
        words: w,
    }
}

/// The value of a command's flag (command path, flag long name).
const FLAG_VALUES: &[(&str, &str, Values)] = &[
    ("agent", "provider", kind("providers")),
    ("agent", "conversation", kind("conversations")),
    ("agent", "resume", kind("conversations")),
    ("agent", "skill", kind("skills")),
    (
        "agent",
        "option",
        words("temperature= max_tokens= top_p= seed="),
    ),
    ("prompt show", "conversation", kind("conversations")),
    ("onboard", "provider", words("mock openai-compatible")),
    ("onboard", "autonomy", words("readonly supervised full")),
    (
        "policy check",
        "autonomy",
        words("readonly supervised full"),
    ),
];

/// A command's argument.
const ARG_VALUES: &[(&str, Values)] = &[
    ("provider test", kind("providers")),
    ("tool run", kind("tools")),
    ("policy check", kind("tools")),
    ("skill show", kind("skills")),
    ("plugin show", kind("plugins")),
    ("plugin remove", kind("plugins")),
    ("plugin approve", kind("plugins")),
    ("mcp tools", kind("mcp_servers")),
    ("mcp test", kind("mcp_servers")),
    ("mcp approve", kind("mcp_servers")),
    (
        "memory show",
        Values {
            kind: Some("conversations"),
            words: "last",
        },
    ),
    (
        "approve",
        Values {
            kind: Some("approvals"),
            words: "last",
        },
    ),
    (
        "deny",
        Values {
            kind: Some("approvals"),
            words: "last",
        },
    ),
    ("sop run", kind("sops")),
    ("sop validate", kind("sops")),
    ("sop resume", kind("sop-runs")),
    ("sop approve", kind("sop-runs")),
    ("sop deny", kind("sop-runs")),
    ("sop show", kind("sop-runs")),
    ("completions", words("bash zsh fish")),
];

/// Flags whose value is a path.
const PATH_FLAGS: [&str; 4] = ["config", "workspace", "file", "system-file"];

/// `latchclaw [--config PATH] __complete KIND [--config PATH]`: the names,
/// one a line, on stdout. Whatever fails (no config, no database yet)
/// lists nothing: a completion must never print an error into a command
/// line, nor create the state it looks at.
pub fn callback(args: &[OsString]) -> i32 {
    let mut config = None;
    let mut kind = None;
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        match a {
            "--config" => config = it.next().map(std::path::PathBuf::from),
            CALLBACK => {}
            k => kind = Some(k.to_string()),
        }
    }
    let Some(kind) = kind.filter(|k| KINDS.contains(&k.as_str())) else {
        eprintln!(
            "latchclaw: error: {CALLBACK} takes one of: {}",
            KINDS.join(", ")
        );
        return crate::error::exit::USAGE;
    };
    for name in names(&kind, config.as_deref()).unwrap_or_default() {
        println!("{name}");
    }
    crate::error::exit::OK
}

/// The names of `kind`, newest first for ids.
fn names(kind: &str, config: Option<&std::path::Path>) -> crate::error::Result<Vec<String>> {
    use crate::config::Config;
    if kind == "tools" {
        let mut names: Vec<String> = crate::types::ToolName::ALL
            .iter()
            .map(|t| t.as_str().to_string())
            .collect();
        // A plugin's tools too, when a config loads (quietly: completion).
        if let Ok(cfg) = Config::load(config) {
            names.extend(
                crate::plugins::registry(&cfg)
                    .tools
                    .into_iter()
                    .map(|t| t.name),
            );
        }
        return Ok(names);
    }
    let cfg = Config::load(config)?;
    let memory = || {
        crate::memory::Memory::open_existing(
            &cfg.memory.path,
            cfg.memory.busy_timeout_ms,
            Default::default(),
        )
    };
    Ok(match kind {
        "providers" => cfg.providers.keys().cloned().collect(),
        "plugins" if cfg!(feature = "plugins") => crate::plugins::installed(&cfg)?
            .into_iter()
            .map(|p| p.name)
            .collect(),
        "plugins" => Vec::new(),
        "mcp_servers" => cfg.mcp.servers.keys().cloned().collect(),
        "skills" => {
            let mut names: Vec<String> = crate::skills::list(&cfg)?
                .into_iter()
                .map(|l| l.name)
                .collect();
            names.dedup();
            names
        }
        "conversations" => match memory()? {
            Some(m) => m
                .list(100)?
                .into_iter()
                .map(|c| c.conversation_id)
                .collect(),
            None => Vec::new(),
        },
        "approvals" => match memory()? {
            Some(m) => m
                .approvals(false)?
                .into_iter()
                .rev()
                .map(|p| p.id)
                .collect(),
            None => Vec::new(),
        },
        "sops" => crate::sop::found(&cfg)
            .into_iter()
            .map(|f| f.name)
            .collect(),
        "sop-runs" => match memory()? {
            Some(m) => m.sop_runs(100)?.into_iter().map(|r| r.id).collect(),
            None => Vec::new(),
        },
        _ => Vec::new(),
    })
}

pub fn script(shell: Shell) -> String {
    match shell {
        Shell::Bash => bash(),
        // zsh runs the bash function through its bash compatibility layer.
        Shell::Zsh => format!(
            "# zsh completion for latchclaw: eval \"$(latchclaw completions zsh)\" in ~/.zshrc\n\
             autoload -U +X compinit && compinit\n\
             autoload -U +X bashcompinit && bashcompinit\n{}",
            bash()
        ),
        Shell::Fish => fish(),
    }
}

/// Top-level words: single commands and group names, in table order.
fn top_words() -> Vec<&'static str> {
    let mut words = Vec::new();
    for c in COMMANDS {
        let w = c.group().unwrap_or(c.path);
        if !words.contains(&w) {
            words.push(w);
        }
    }
    words
}

fn flag_words(flags: impl Iterator<Item = &'static Flag>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in flags {
        for w in [
            Some(format!("--{}", f.long)),
            f.short.map(|c| format!("-{c}")),
        ]
        .into_iter()
        .flatten()
        {
            if !out.contains(&w) {
                out.push(w);
            }
        }
    }
    out
}

/// Flags whose next word is their value (`--json` is left out: for most
/// commands it is a switch).
fn value_flags(path_like: bool) -> String {
    flag_words(
        FLAGS
            .iter()
            .filter(|f| f.value.is_some() && f.long != "json")
            .filter(|f| PATH_FLAGS.contains(&f.long) == path_like),
    )
    .join("|")
}

/// The subcommand words under `group` (`memory` → list search …).
fn subs(group: &str) -> Vec<&'static str> {
    COMMANDS
        .iter()
        .filter(|c| c.group() == Some(group))
        .filter_map(|c| c.path.split_once(' ').map(|(_, s)| s))
        .collect()
}

/// `kind=K; opts="W"` for a bash case arm.
fn bash_values(v: &Values) -> String {
    let mut out = String::new();
    if let Some(k) = v.kind {
        out.push_str(&format!("kind={k}; "));
    }
    out.push_str(&format!("opts=\"{}\"", v.words));
    out
}

fn bash() -> String {
    let mut cases = String::new();
    // The longer paths first: `estop status` before `estop …`.
    let mut by_length: Vec<&CommandDef> = COMMANDS.iter().collect();
    crate::util::sort::sort_by_key(&mut by_length, |c| {
        std::cmp::Reverse(c.path.split(' ').count())
    });
    for c in by_length {
        let mut opts = flag_words(c.flags().filter(|f| f.long != "version"));
        // A command that is also a group word (`estop`, `estop status`).
        opts.extend(subs(c.path).into_iter().map(String::from));
        cases.push_str(&format!(
            "        \"{p}\"|\"{p} \"*) opts=\"{}\" ;;\n",
            opts.join(" "),
            p = c.path
        ));
    }
    for g in top_words() {
        let subs = subs(g);
        if !subs.is_empty() && super::flags::command(g).is_none() {
            cases.push_str(&format!(
                "        \"{g}\"|\"{g} \"*) opts=\"{}\" ;;\n",
                subs.join(" ")
            ));
        }
    }
    let mut flag_values = String::new();
    for (path, long, v) in FLAG_VALUES {
        let Some(f) = FLAGS.iter().find(|f| f.long == *long && f.takes(path)) else {
            continue;
        };
        let arms: Vec<String> = flag_words(std::iter::once(f))
            .iter()
            .map(|w| format!("\"{path}|{w}\""))
            .collect();
        flag_values.push_str(&format!(
            "        {}) {} ;;\n",
            arms.join("|"),
            bash_values(v)
        ));
    }
    let mut arg_values = String::new();
    for (path, v) in ARG_VALUES {
        arg_values.push_str(&format!(
            "                    \"{path}\") {} ;;\n",
            bash_values(v)
        ));
    }
    let global = flag_words(FLAGS.iter().filter(|f| f.commands == ALL)).join(" ");
    format!(
        r#"# bash completion for latchclaw, generated by `latchclaw completions bash`
_latchclaw() {{
    local cur prev words="" w i opts="" kind="" cfg="" self
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    self="${{COMP_WORDS[0]/#\~/$HOME}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        case "$w" in
            --config) cfg="${{COMP_WORDS[i+1]}}"; ((i++)) ;;
            {path_flags}|{value_flags}) ((i++)) ;;
            -*) ;;
            *) words="${{words:+$words }}$w" ;;
        esac
    done
    case "$prev" in
        {path_flags}) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    # A flag's value: names latchclaw knows, or fixed words.
    case "$words|$prev" in
{flag_values}    esac
    if [[ -z "$kind$opts" ]]; then
        case "$prev" in
            {value_flags}) COMPREPLY=(); return ;;
        esac
        # A command's argument, while it is not given yet.
        if [[ "$cur" != -* ]]; then
            case "$words" in
{arg_values}            esac
        fi
    fi
    if [[ -n "$kind$opts" ]]; then
        if [[ -n "$kind" ]]; then
            opts="$opts $("$self" ${{cfg:+--config "$cfg"}} {callback} "$kind" 2>/dev/null)"
        fi
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    case "$words" in
{cases}        *) opts="{top} {global}" ;;
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -F _latchclaw latchclaw
"#,
        path_flags = value_flags(true),
        value_flags = value_flags(false),
        top = top_words().join(" "),
        callback = CALLBACK,
    )
}

fn fish_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn fish_condition(c: &CommandDef) -> String {
    match c.path.split_once(' ') {
        Some((g, s)) => {
            format!("__fish_seen_subcommand_from {g}; and __fish_seen_subcommand_from {s}")
        }
        None => format!("__fish_seen_subcommand_from {}", c.path),
    }
}

/// `-a '(latchclaw __complete KIND) WORDS'`: fish runs the command when
/// it completes.
fn fish_values(v: &Values) -> String {
    let mut a = String::new();
    if let Some(k) = v.kind {
        a.push_str(&format!("(latchclaw {CALLBACK} {k})"));
    }
    if !v.words.is_empty() {
        if !a.is_empty() {
            a.push(' ');
        }
        a.push_str(v.words);
    }
    format!(" -a {}", fish_quote(&a))
}

/// `command`: the command whose flag this is (`None`: a global one).
fn fish_flag(cond: Option<&str>, command: Option<&str>, f: &Flag) -> String {
    let mut line = "complete -c latchclaw".to_string();
    if let Some(cond) = cond {
        line.push_str(&format!(" -n {}", fish_quote(cond)));
    }
    line.push_str(&format!(" -l {}", f.long));
    if let Some(s) = f.short {
        line.push_str(&format!(" -s {s}"));
    }
    let values = command.and_then(|c| {
        FLAG_VALUES
            .iter()
            .find(|(p, l, _)| *p == c && *l == f.long)
            .map(|(_, _, v)| v)
    });
    match (f.value, values) {
        (Some(_), Some(v)) => line.push_str(&format!(" -r -f{}", fish_values(v))),
        (Some(_), None) if PATH_FLAGS.contains(&f.long) => line.push_str(" -r -F"),
        (Some(_), None) => line.push_str(" -r"),
        (None, _) => {}
    }
    line.push_str(&format!(" -d {}\n", fish_quote(f.help)));
    line
}

fn fish() -> String {
    let mut out = String::from(
        "# fish completion for latchclaw, generated by `latchclaw completions fish`\n\
         complete -c latchclaw -f\n",
    );
    for w in top_words() {
        let summary = match COMMANDS.iter().find(|c| c.path == w) {
            Some(c) => c.summary.to_string(),
            None => format!("{w} commands"),
        };
        out.push_str(&format!(
            "complete -c latchclaw -n __fish_use_subcommand -a {w} -d {}\n",
            fish_quote(&summary)
        ));
    }
    for c in COMMANDS {
        if let Some((g, s)) = c.path.split_once(' ') {
            let subs: Vec<&str> = COMMANDS
                .iter()
                .filter(|d| d.group() == Some(g))
                .filter_map(|d| d.path.split_once(' ').map(|(_, s)| s))
                .collect();
            let cond = format!(
                "__fish_seen_subcommand_from {g}; and not __fish_seen_subcommand_from {}",
                subs.join(" ")
            );
            out.push_str(&format!(
                "complete -c latchclaw -n {} -a {s} -d {}\n",
                fish_quote(&cond),
                fish_quote(c.summary)
            ));
        }
    }
    for f in FLAGS.iter().filter(|f| f.commands == ALL) {
        out.push_str(&fish_flag(None, None, f));
    }
    for c in COMMANDS {
        let cond = fish_condition(c);
        for f in c.flags().filter(|f| f.commands != ALL) {
            out.push_str(&fish_flag(Some(&cond), Some(c.path), f));
        }
    }
    for (path, v) in ARG_VALUES {
        if let Some(c) = super::flags::command(path) {
            out.push_str(&format!(
                "complete -c latchclaw -n {}{}\n",
                fish_quote(&fish_condition(c)),
                fish_values(v)
            ));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The tables name real commands, flags that take a value, and
    /// arguments that exist; every kind is one `__complete` lists.
    #[test]
    fn completion_tables_match_the_definitions() {
        for (path, long, v) in FLAG_VALUES {
            let f = FLAGS.iter().find(|f| f.long == *long && f.takes(path));
            assert!(
                f.is_some_and(|f| f.value.is_some()),
                "{path} --{long} takes no value"
            );
            assert!(v.kind.is_none_or(|k| KINDS.contains(&k)), "{path} --{long}");
        }
        for (path, v) in ARG_VALUES {
            let c = super::super::flags::command(path).expect(path);
            assert!(!c.args.is_empty(), "{path} takes no argument");
            assert!(v.kind.is_none_or(|k| KINDS.contains(&k)), "{path}");
        }
        for f in PATH_FLAGS {
            assert!(
                FLAGS.iter().any(|g| g.long == f && g.value.is_some()),
                "{f}"
            );
        }
        assert!(super::super::flags::command(CALLBACK).is_none());
    }
}
