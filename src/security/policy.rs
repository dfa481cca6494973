//! Policy rules (`[[policy.rules]]`): the operator's allow / ask / deny,
//! matched on what the gate parsed — the programs of a shell plan, their
//! subcommands and what their options mean by the option tables (never the
//! raw command string), the paths a call reads or writes, the host a URL
//! names, the plugin, and where the call came from.
//!
//! A rule never widens a wall: a call the gate refuses stays refused
//! whatever a rule says (the rules are not even asked), `allow` only lifts
//! an ask, and `deny` and `ask` only narrow. A narrowing rule matches a
//! call when any command, path or host of it matches; an `allow` only when
//! every one does. Among the rules that match, the strictest effect
//! decides, and of those the first written.

use super::decision::{Decision, Verdict};
use super::gate::Gate;
use super::grammar;
use super::options;
use super::paths::{absolute, lexical_normalize};
use super::plan::{Expander, glob_match};
use super::refusal::Refusal;
use crate::config::{Effect, PolicyRule};
use crate::types::ToolName;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a rule is matched against besides the arguments: the call's tool
/// and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// A built-in tool, or `None` for a plugin's.
    pub builtin: Option<ToolName>,
    /// The plugin that provides the tool, for a plugin's.
    pub plugin: Option<&'a str>,
    /// Hosts a plugin's tool declares.
    pub declared_hosts: &'a [String],
    pub args: &'a Value,
    /// `agent`, `sop`, `cli` or `task` (`config::POLICY_ORIGINS`).
    pub origin: &'a str,
}

/// Where a call comes from, by the conversation it is made in.
pub fn origin_of(conversation_id: &str) -> &'static str {
    // A plan's task talks in a conversation named by its path
    // (`CONV/msg-HASH/task-1/task-1.2`).
    if conversation_id.contains("/task-") {
        "task"
    } else if conversation_id.starts_with("sop:") {
        "sop"
    } else if conversation_id.starts_with("cli-") {
        "cli"
    } else {
        "agent"
    }
}

/// One command of a shell plan as rules see it.
struct Command {
    /// The program's name, lowercased, without its directory.
    program: String,
    argv: Vec<String>,
    cwd: PathBuf,
}

/// What the rules match on, read once for a call.
#[derive(Default)]
struct Facts {
    commands: Vec<Command>,
    /// The command line could not be read (the gate refuses it anyway).
    unreadable: bool,
    paths: Vec<String>,
    hosts: Vec<String>,
}

impl Gate {
    /// `d`, the gate's decision on `call`, as the policy rules leave it.
    pub(super) fn apply_rules(&self, call: &Call, d: Decision) -> Decision {
        if self.rules.is_empty() || matches!(d.verdict, Verdict::Deny(_)) {
            return d;
        }
        let facts = self.facts(call);
        let Some(rule) = strictest(self.rules.iter().filter(|r| matches(r, call, &facts, self)))
        else {
            return d;
        };
        let name: Box<str> = rule.name.as_str().into();
        match (rule.effect, d.verdict) {
            (Effect::Deny, _) => Decision {
                verdict: Verdict::Deny(Refusal::Policy),
                reason: format!("policy rule \"{name}\": {}", rule.reason),
                rule: Some(name),
                plan: None,
                path: None,
                ..d
            },
            (Effect::Ask, Verdict::Allow) => Decision {
                verdict: Verdict::Ask,
                reason: format!("policy rule \"{name}\" asks: {}", rule.reason),
                rule: Some(name),
                ..d
            },
            (Effect::Allow, Verdict::Ask) => Decision {
                verdict: Verdict::Allow,
                reason: format!(
                    "policy rule \"{name}\" allows it without asking: {} ({})",
                    rule.reason, d.reason
                ),
                rule: Some(name),
                ..d
            },
            // The rule agrees with the gate: it is still the rule that said so.
            _ => Decision {
                rule: Some(name),
                ..d
            },
        }
    }

    /// Whether `rule` matches the built-in call `tool(args)` from `origin`:
    /// what `config validate` checks an example with.
    pub fn rule_matches(
        &self,
        rule: &PolicyRule,
        tool: ToolName,
        args: &Value,
        origin: &str,
    ) -> bool {
        let call = Call {
            builtin: Some(tool),
            plugin: None,
            declared_hosts: &[],
            args,
            origin,
        };
        matches(rule, &call, &self.facts(&call), self)
    }

    fn facts(&self, call: &Call) -> Facts {
        let mut f = Facts::default();
        f.hosts.extend(call.declared_hosts.iter().cloned());
        let Some(ws) = self.workspace().ok().map(Path::to_path_buf) else {
            // No workspace to read a command line in (the gate refuses
            // it too); other calls have nothing here to match.
            f.unreadable = matches!(call.builtin, Some(ToolName::Shell | ToolName::Git));
            return f;
        };
        let s = |k: &str| call.args.get(k).and_then(Value::as_str);
        match call.builtin {
            Some(ToolName::Shell) => match s("command") {
                Some(c) => self.shell_facts(c, &ws, &mut f),
                None => f.unreadable = true,
            },
            Some(ToolName::Git) => match super::git::tool_args::argv(call.args, self) {
                Ok(argv) => f.commands.push(Command {
                    program: "git".into(),
                    argv,
                    cwd: ws.clone(),
                }),
                Err(_) => f.unreadable = true,
            },
            Some(ToolName::Http) => {
                if let Some(t) = s("url").and_then(|u| self.net.check_url(u).ok()) {
                    f.hosts.push(t.host);
                }
            }
            Some(ToolName::WebSearch) => {
                if let Some(t) = self
                    .web_search
                    .as_ref()
                    .and_then(|w| self.net.check_url(&w.url).ok())
                {
                    f.hosts.push(t.host);
                }
            }
            _ => {}
        }
        if let Some(p) = s("path") {
            f.paths.push(normal(&ws, p));
        } else if matches!(
            call.builtin,
            Some(ToolName::FileList | ToolName::Grep | ToolName::Git)
        ) {
            f.paths.push(ws.display().to_string());
        }
        let paths: Vec<String> = f.commands.iter().flat_map(command_paths).collect();
        f.paths.extend(paths);
        // Each path also where its links lead, as the gate resolved it: a
        // rule over `private/*` holds `link-to-private/x` too.
        if self.rules.iter().any(|r| !r.paths.is_empty()) {
            let resolved: Vec<String> = f
                .paths
                .iter()
                .filter_map(|p| self.check_path(p).ok())
                .map(|r| r.display().to_string())
                .filter(|r| !f.paths.contains(r))
                .collect();
            f.paths.extend(resolved);
        }
        f
    }

    /// The commands of a shell line as the shell judge reads them: the
    /// same grammar and the same expansion (variables from the child's
    /// environment, globs), without judging them.
    fn shell_facts(&self, command: &str, ws: &Path, f: &mut Facts) {
        let Ok(script) = grammar::parse(command) else {
            f.unreadable = true;
            return;
        };
        let may_list = |d: &Path| self.check_path(&d.to_string_lossy()).map(drop);
        let mut cwd = ws.to_path_buf();
        for (_, pipeline) in &script.items {
            for raw in &pipeline.commands {
                let x = Expander {
                    env: self.child_env(),
                    cwd: &cwd,
                    may_list: &may_list,
                };
                let mut argv = Vec::new();
                for w in &raw.words {
                    match x.word(w) {
                        Ok(words) => argv.extend(words),
                        Err(_) => {
                            f.unreadable = true;
                            return;
                        }
                    }
                }
                for r in &raw.redirs {
                    if let Ok(t) = x.single(&r.target)
                        && !t.is_empty()
                        && !matches!(r.op, grammar::RedirOp::Dup)
                    {
                        f.paths.push(normal(&cwd, &t));
                    }
                }
                let Some(first) = argv.first() else {
                    continue;
                };
                let program = first.rsplit('/').next().unwrap_or(first).to_lowercase();
                // `cd DIR && …`: what follows runs there.
                if program == "cd" {
                    if let Some(dir) = argv.get(1) {
                        cwd = PathBuf::from(normal(&cwd, dir));
                    }
                    continue;
                }
                f.commands.push(Command {
                    program,
                    argv,
                    cwd: cwd.clone(),
                });
            }
        }
    }
}

/// `raw` from `cwd`, absolute and with `.` and `..` folded.
fn normal(cwd: &Path, raw: &str) -> String {
    lexical_normalize(Path::new(&absolute(cwd, raw)))
        .display()
        .to_string()
}

/// The paths one command reads or writes: by its option table where there
/// is one, else every operand that is not an option.
fn command_paths(c: &Command) -> Vec<String> {
    let args = c.argv.get(1..).unwrap_or(&[]);
    let raw: Vec<String> = match options::parse(&c.program, args) {
        Some(Ok(p)) => p.reads.into_iter().chain(p.writes).collect(),
        _ => args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .cloned()
            .collect(),
    };
    raw.iter().map(|p| normal(&c.cwd, p)).collect()
}

/// The rule that decides among those that match: the strictest effect,
/// the first written among equals.
fn strictest<'r>(rules: impl Iterator<Item = &'r PolicyRule>) -> Option<&'r PolicyRule> {
    let mut best: Option<&PolicyRule> = None;
    for r in rules {
        if best.is_none_or(|b| r.effect > b.effect) {
            best = Some(r);
        }
    }
    best
}

/// Whether the values match the globs: for a rule that narrows, any value
/// matching any glob; for one that widens (`allow`), every value, and
/// there must be one, so a line is let through only if all of it is the
/// rule's.
fn globs_match(patterns: &[String], values: &[String], base: Option<&Path>, all: bool) -> bool {
    let one = |v: &String| {
        patterns.iter().any(|p| match base {
            Some(ws) if !p.starts_with('/') && !p.starts_with('*') => {
                glob_match(&ws.join(p).display().to_string(), v)
            }
            _ => glob_match(p, v),
        })
    };
    if all {
        !values.is_empty() && values.iter().all(one)
    } else {
        values.iter().any(one)
    }
}

fn matches(r: &PolicyRule, call: &Call, f: &Facts, gate: &Gate) -> bool {
    let listed = |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v);
    if !r.tools.is_empty() && !call.builtin.is_some_and(|t| listed(&r.tools, t.as_str())) {
        return false;
    }
    if !r.plugins.is_empty() && !call.plugin.is_some_and(|p| listed(&r.plugins, p)) {
        return false;
    }
    if !listed(&r.origins, call.origin) {
        return false;
    }
    let widens = r.effect == Effect::Allow;
    if !r.hosts.is_empty() && !globs_match(&r.hosts, &f.hosts, None, widens) {
        return false;
    }
    if !r.paths.is_empty() {
        let ws = gate.workspace().ok();
        if !globs_match(&r.paths, &f.paths, ws, widens) {
            return false;
        }
    }
    let by_command = !r.programs.is_empty();
    if !by_command {
        return true;
    }
    // A line the gate cannot read is refused by it; a rule that narrows
    // counts it as matched, one that widens never does.
    if f.unreadable {
        return r.effect != Effect::Allow;
    }
    // An `allow` covers a line only if it covers each of its commands:
    // `cp a b && npm publish` is not a copy.
    if widens {
        !f.commands.is_empty() && f.commands.iter().all(|c| command_matches(r, c))
    } else {
        f.commands.iter().any(|c| command_matches(r, c))
    }
}

fn command_matches(r: &PolicyRule, c: &Command) -> bool {
    if !r
        .programs
        .iter()
        .any(|p| p.eq_ignore_ascii_case(&c.program))
    {
        return false;
    }
    let args = c.argv.get(1..).unwrap_or(&[]);
    if !r.subcommands.is_empty() {
        let sub = if c.program == "git" {
            match options::parse("git", args) {
                Some(Ok(p)) => p.git_subcommand.and_then(|i| c.argv.get(i)).cloned(),
                _ => None,
            }
        } else {
            args.iter().find(|a| !a.starts_with('-')).cloned()
        };
        if !sub.is_some_and(|s| r.subcommands.contains(&s)) {
            return false;
        }
    }
    if r.flags.is_empty() && r.options.is_empty() {
        return true;
    }
    let words = match options::option_words(&c.program, args) {
        Some(Ok(w)) => w,
        // An argv its table cannot read: narrowing rules match it.
        Some(Err(_)) => return r.effect != Effect::Allow,
        None => return false,
    };
    r.flags.iter().all(|f| words.contains(f))
        && r.options.iter().all(|o| {
            matches!(options::canonical_option(&c.program, o), Some(Ok(name)) if words.contains(&name))
        })
}

/// What a rule matches, in one line: `program cp, flags recursive`.
pub fn describe(r: &PolicyRule) -> String {
    let parts: Vec<String> = [
        ("tool", &r.tools),
        ("plugin", &r.plugins),
        ("program", &r.programs),
        ("subcommand", &r.subcommands),
        ("flags", &r.flags),
        ("options", &r.options),
        ("paths", &r.paths),
        ("hosts", &r.hosts),
        ("origin", &r.origins),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| format!("{k} {}", v.join(" ")))
    .collect();
    if parts.is_empty() {
        "every call".into()
    } else {
        parts.join(", ")
    }
}

/// What is wrong with the rules that only the option tables know (a flag
/// or an option the named program does not have), each naming the rule.
pub fn check_rules(rules: &[PolicyRule], at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let key = format!("{at}[{i}] (\"{}\")", r.name);
        if r.flags.is_empty() && r.options.is_empty() {
            continue;
        }
        for p in &r.programs {
            for f in &r.flags {
                match options::known_flag(p, f) {
                    Some(true) => {}
                    Some(false) => errors.push(format!(
                        "{key}.flags: \"{f}\" is neither a meaning ({}) nor an option of `{p}`",
                        options::meaning_words().collect::<Vec<_>>().join(", ")
                    )),
                    None => errors.push(no_table(&key, "flags", p)),
                }
            }
            for o in &r.options {
                match options::canonical_option(p, o) {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => errors.push(format!("{key}.options: {}", e.reason)),
                    None => errors.push(no_table(&key, "options", p)),
                }
            }
        }
    }
    errors
}

fn no_table(key: &str, what: &str, program: &str) -> String {
    format!(
        "{key}.{what}: latchclaw has no option table for `{program}` to read its options with \
         (match git by `subcommand`; programs with a table: see `latchclaw policy show`)"
    )
}

/// Every example of every rule that does not come out as written, in
/// words; the gate's view of the files is the one the examples run in.
pub fn check_examples(gate: &Gate, rules: &[PolicyRule], at: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        for (j, e) in r.examples.iter().enumerate() {
            let Some(tool) = ToolName::parse(&e.tool) else {
                continue;
            };
            let matched = gate.rule_matches(r, tool, &e.args, "agent");
            let shown = match e.args.get("command").and_then(Value::as_str) {
                Some(c) if tool == ToolName::Shell => format!("`{c}`"),
                _ => format!("{} {}", e.tool, e.args),
            };
            match (e.expect, matched) {
                (Some(_), true) | (None, false) => {}
                (Some(x), false) => errors.push(format!(
                    "{at}[{i}].examples[{j}] (rule \"{}\"): {shown} is expected to {} but the \
                     rule does not match it",
                    r.name,
                    x.as_str()
                )),
                (None, true) => errors.push(format!(
                    "{at}[{i}].examples[{j}] (rule \"{}\"): {shown} is expected to pass but the \
                     rule matches it ({})",
                    r.name,
                    r.effect.as_str()
                )),
            }
        }
    }
    errors
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn words(program: &str, argv: &[&str]) -> Vec<String> {
        let args: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        options::option_words(program, &args).unwrap().unwrap()
    }

    #[test]
    fn every_spelling_of_recursion_means_recursive() {
        for argv in [
            &["-r", "-f", "x"][..],
            &["-fr", "x"],
            &["-Rf", "x"],
            &["--recursive", "x"],
            &["--recur", "x"],
            &["x", "-r"],
        ] {
            assert!(words("rm", argv).contains(&"recursive".into()), "{argv:?}");
        }
        for argv in [&["-f", "x"][..], &["--", "-r"], &["-v", "--", "x", "-r"]] {
            assert!(!words("rm", argv).contains(&"recursive".into()), "{argv:?}");
        }
        // cp's archive is recursive; its long name is a word too.
        let cp = words("cp", &["-a", "s", "d"]);
        assert!(cp.contains(&"recursive".into()) && cp.contains(&"archive".into()));
        // An option the table does not know: the argv is unreadable.
        let bogus = ["--bogus".to_string()];
        assert!(matches!(options::option_words("rm", &bogus), Some(Err(_))));
        assert!(options::option_words("npm", &bogus).is_none());
    }

    #[test]
    fn an_option_is_one_option_in_any_spelling() {
        let canon = |p: &str, o: &str| options::canonical_option(p, o).unwrap().unwrap();
        assert_eq!(canon("rm", "-f"), canon("rm", "--force"));
        assert_eq!(canon("rm", "--recur"), "--recursive");
        assert_eq!(canon("cp", "-t"), "--target-directory");
        assert!(options::canonical_option("rm", "-rf").unwrap().is_err());
        assert!(options::canonical_option("rm", "--nope").unwrap().is_err());
    }

    fn rule(name: &str, effect: Effect) -> PolicyRule {
        PolicyRule {
            name: name.into(),
            tools: Vec::new(),
            plugins: Vec::new(),
            programs: Vec::new(),
            subcommands: Vec::new(),
            flags: Vec::new(),
            options: Vec::new(),
            paths: Vec::new(),
            hosts: Vec::new(),
            origins: Vec::new(),
            effect,
            reason: "r".into(),
            examples: Vec::new(),
        }
    }

    #[test]
    fn the_strictest_rule_decides_and_the_first_among_equals() {
        let rules = [
            rule("allow", Effect::Allow),
            rule("ask-1", Effect::Ask),
            rule("ask-2", Effect::Ask),
        ];
        assert_eq!(strictest(rules.iter()).unwrap().name, "ask-1");
        let rules = [rule("ask", Effect::Ask), rule("deny", Effect::Deny)];
        assert_eq!(strictest(rules.iter()).unwrap().name, "deny");
        assert!(strictest([].iter()).is_none());
    }

    #[test]
    fn origins_by_conversation() {
        assert_eq!(origin_of("sop:daily:0123456789abcdef:run:step"), "sop");
        assert_eq!(origin_of("cli-tool-run"), "cli");
        assert_eq!(origin_of("conv-20261126-abc"), "agent");
        assert_eq!(
            origin_of("conv-20261126-abc/msg-0123/task-1/task-1.2"),
            "task"
        );
        assert_eq!(origin_of("cli-tool-run/msg-0123/task-1"), "task");
    }
}
