//! The shell gate: judges the plan a command line becomes.
//!
//! `parse.rs` turns the string into pipelines of words (refusing every
//! construct latchclaw does not run itself), `plan.rs` expands the words,
//! and this module judges each final argv: the program (resolved to a file
//! once, here), its options through the tables in `options/`, every path it
//! reads or writes, every redirection, every `NAME=value` prefix. The plan
//! it returns is what `tools/shell.rs` runs — the same strings, with no
//! shell in between.

use super::decision::Risk;
use super::gate::{Gate, SAFE_PATH};
use super::grammar::{self, Connector, RawCommand, RedirOp};
use super::options;
use super::paths::absolute;
use super::plan::{Cmd, Expander, OpenMode, Plan, Redir, Step};
use super::refusal::Refused;
use std::path::{Path, PathBuf};

/// Programs that are always refused, whatever the config says.
#[rustfmt::skip]
const ALWAYS_DENY: &[&str] = &[
    "sudo", "su", "doas", "pkexec", "runuser", "eval", "exec", "source", ".",
];

/// Destructive programs refused even if removed from `forbidden_commands`.
#[rustfmt::skip]
const DESTRUCTIVE: &[&str] = &[
    "mkfs", "mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "parted", "shred", "dd",
    "shutdown", "reboot", "halt", "poweroff", "telinit",
];

#[rustfmt::skip]
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash", "busybox",
    "rbash", "pwsh", "powershell",
];

/// Programs whose job is to run another program: refused, because the
/// program they run (and its arguments) is decided at run time.
#[rustfmt::skip]
const WRAPPERS: &[&str] = &[
    "env", "xargs", "nice", "nohup", "timeout", "stdbuf", "setsid", "ionice", "taskset", "chrt",
    "flock", "watch", "strace", "ltrace", "script", "parallel", "chroot", "unshare", "nsenter",
    "firejail", "systemd-run", "time", "unbuffer", "caffeinate", "doas", "run-parts", "tmux",
    "screen", "expect", "setpriv", "prlimit", "cgexec", "sg", "newgrp",
];

#[rustfmt::skip]
const INTERPRETERS: &[&str] = &[
    "python", "python2", "python3", "perl", "ruby", "node", "nodejs", "deno", "bun", "php",
    "lua", "luajit", "tclsh", "wish", "rscript", "awk", "gawk", "mawk", "nawk", "osascript",
    "irb", "jshell", "groovy", "julia", "guile", "racket", "sbcl", "ghci", "vim", "vi", "nvim",
    "emacs", "ed", "ex", "less", "more", "man", "gdb", "make", "m4", "bc", "dc",
];

/// Commands with no effect beyond printing: low risk, allowed under readonly.
#[rustfmt::skip]
const HARMLESS: &[&str] = &[
    "pwd", "echo", "printf", "true", "false", "date", "whoami", "id", "uname", "which",
    "basename", "dirname", "expr", "sleep", "printenv",
];

/// `NAME=value` prefixes that only change formatting or language.
#[rustfmt::skip]
const BENIGN_VARS: &[&str] = &[
    "LANG", "LANGUAGE", "LC_ALL", "LC_COLLATE", "LC_CTYPE", "LC_MESSAGES", "LC_NUMERIC",
    "LC_TIME", "LC_MONETARY", "TZ", "NO_COLOR", "TERM", "COLUMNS", "LINES", "CLICOLOR",
    "CLICOLOR_FORCE", "FORCE_COLOR", "GREP_COLOR", "GREP_COLORS", "LS_COLORS", "TIME_STYLE",
    "QUOTING_STYLE", "BLOCK_SIZE", "DU_BLOCK_SIZE", "DF_BLOCK_SIZE", "LS_BLOCK_SIZE",
    "SOURCE_DATE_EPOCH",
];

/// Programs whose writes can create or move symbolic links (`git apply` of
/// a patch that adds `up -> ..`, `cp -a` of a tree holding links, `mv` of a
/// link into place). Every later command is judged before any of them runs,
/// so such a write must be the only command on the line.
#[rustfmt::skip]
const LINK_MAKERS: &[&str] = &[
    "git", "cp", "mv", "ln", "tar", "bsdtar", "cpio", "patch", "rsync", "unzip", "7z", "ar",
    "install", "pax",
];

/// What the gate concluded about one command string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Deny(Refused),
    Risk(Risk, String),
}

impl Judgement {
    fn low(reason: impl Into<String>) -> Judgement {
        Judgement::Risk(Risk::Low, reason.into())
    }
    fn high(reason: impl Into<String>) -> Judgement {
        Judgement::Risk(Risk::High, reason.into())
    }
    fn medium(reason: impl Into<String>) -> Judgement {
        Judgement::Risk(Risk::Medium, reason.into())
    }
    fn rank(&self) -> u8 {
        match self {
            Judgement::Deny(_) => 4,
            Judgement::Risk(r, _) => *r as u8 + 1,
        }
    }
    /// The riskier of two; the first wins ties, but for the starting
    /// [`HARMLESS_START`] or an empty reason (a redirection's), which say
    /// nothing of what a command does.
    fn max(self, other: Judgement) -> Judgement {
        let placeholder =
            matches!(&self, Judgement::Risk(Risk::Low, r) if r == HARMLESS_START || r.is_empty());
        if other.rank() > self.rank() || (placeholder && other.rank() == self.rank()) {
            other
        } else {
            self
        }
    }
}

/// What a line or command is judged before any of its parts is.
const HARMLESS_START: &str = "harmless command";

/// The verdict and, unless denied, the plan that runs.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub judgement: Judgement,
    pub plan: Option<Plan>,
}

type Judged<T> = Result<T, Refused>;

pub fn analyze(command: &str, gate: &Gate) -> Analysis {
    Analysis::from(analyze_inner(command, gate))
}

impl From<Judged<(Judgement, Plan)>> for Analysis {
    fn from(judged: Judged<(Judgement, Plan)>) -> Analysis {
        match judged {
            Ok((judgement, plan)) => Analysis {
                judgement,
                plan: Some(plan),
            },
            Err(why) => Analysis {
                judgement: Judgement::Deny(why),
                plan: None,
            },
        }
    }
}

fn analyze_inner(command: &str, gate: &Gate) -> Judged<(Judgement, Plan)> {
    if command.trim().is_empty() {
        return Err(Refused::command("empty command"));
    }
    if let Some(p) = destructive_text(command) {
        return Err(Refused::command(format!(
            "matches the destructive pattern `{p}`"
        )));
    }
    let script = grammar::parse(command)?;
    let ws = gate.workspace()?.to_path_buf();
    let mut cwd = ws.clone();
    let mut items = script.items.as_slice();
    // `cd DIR && …` as the first step: every later command runs (and is
    // judged) in DIR. Anywhere else a directory change would make relative
    // paths mean something other than what was judged.
    if let Some((_, first)) = items.first()
        && first.commands.len() == 1
        && !first.negate
        && first.commands[0]
            .words
            .first()
            .is_some_and(|w| w.display() == "cd")
    {
        let c = &first.commands[0];
        let may_list = |d: &Path| gate.check_path(&d.to_string_lossy()).map(drop);
        let x = Expander {
            env: gate.child_env(),
            cwd: &cwd,
            may_list: &may_list,
        };
        let mut args = Vec::new();
        for w in &c.words[1..] {
            args.extend(x.word(w)?);
        }
        let [dir] = args.as_slice() else {
            return Err(Refused::command(
                "`cd` needs exactly one directory inside the workspace",
            ));
        };
        if !c.redirs.is_empty() || !c.assigns.is_empty() {
            return Err(Refused::command("`cd` takes no redirections or variables"));
        }
        let resolved = gate.check_path(&absolute(&cwd, dir))?;
        if !resolved.is_dir() {
            return Err(Refused::command(format!("`cd {dir}`: not a directory")));
        }
        match items.get(1) {
            None => {}
            Some((Connector::And, _)) => {}
            Some(_) => {
                return Err(Refused::command(
                    "`cd DIR` must be followed by `&&` (`cd src && ls`), so nothing runs in \
                     the wrong directory",
                ));
            }
        }
        cwd = resolved;
        items = &items[1..];
        if items.is_empty() {
            return Ok((
                Judgement::low("`cd` alone changes nothing"),
                Plan {
                    cwd,
                    steps: Vec::new(),
                },
            ));
        }
    }
    let mut verdict = Judgement::low(HARMLESS_START);
    let mut steps = Vec::new();
    let total: usize = items.iter().map(|(_, p)| p.commands.len()).sum();
    // git runs with its drivers pinned off as the gate read its config; a
    // command before it on the line that may change files (a code runner, a
    // script, a write) could change that config or swap the repository
    // first. (Positions on the line of the writers and of the gits.)
    let (mut writers, mut gits): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut at = 0usize;
    for (connector, pipeline) in items {
        let mut commands = Vec::new();
        for (i, raw) in pipeline.commands.iter().enumerate() {
            let (j, cmd, writes) = judge_command(raw, i > 0, &cwd, gate, false)?;
            let redirects_a_write = cmd.redirs.iter().any(|r| {
                matches!(
                    r,
                    super::plan::Redir::Open {
                        mode: super::plan::OpenMode::Truncate | super::plan::OpenMode::Append,
                        ..
                    }
                )
            });
            if (writes.any && cmd.git == super::plan::GitAccess::None) || redirects_a_write {
                writers.push(at);
            }
            if cmd.git != super::plan::GitAccess::None {
                gits.push(at);
            }
            at += 1;
            // One command may be both (`git log > out.txt`).
            if writers.iter().any(|w| gits.iter().any(|g| g != w)) {
                return Err(Refused::command(format!(
                    "git reads its repository's configuration as the gate saw it, and another \
                     command on this line may change files first (`{}`); run git in a \
                     separate call",
                    raw.words
                        .iter()
                        .take(2)
                        .map(|w| w.display())
                        .collect::<Vec<_>>()
                        .join(" ")
                )));
            }
            if writes.links && total > 1 {
                return Err(Refused::command(format!(
                    "`{}` changes files and may create or move links, and the other commands \
                     on this line were judged against the files as they are now; run them in \
                     a separate call",
                    raw.words
                        .iter()
                        .take(2)
                        .map(|w| w.display())
                        .collect::<Vec<_>>()
                        .join(" ")
                )));
            }
            verdict = verdict.max(j);
            commands.push(cmd);
        }
        steps.push(Step {
            connector: *connector,
            negate: pipeline.negate,
            commands,
        });
    }
    Ok((verdict, Plan { cwd, steps }))
}

/// Judges one argv a tool built (the `git` tool's `git …`) exactly as the
/// shell tool judges that command typed in the workspace: the same option
/// table, path and secret checks, and git hardening; the plan is what runs.
/// Each word is a quoted literal, so nothing in it is expanded or globbed.
/// A command the table reads as writing is refused: these tools only read.
pub(crate) fn analyze_tool_argv(argv: &[String], gate: &Gate) -> Analysis {
    Analysis::from(tool_argv(argv, gate))
}

fn tool_argv(argv: &[String], gate: &Gate) -> Judged<(Judgement, Plan)> {
    if let Some(p) = destructive_text(&argv.join(" ")) {
        return Err(Refused::command(format!(
            "matches the destructive pattern `{p}`"
        )));
    }
    let raw = RawCommand {
        assigns: Vec::new(),
        words: argv
            .iter()
            .map(|a| grammar::RawWord {
                pieces: vec![grammar::Piece::Lit {
                    text: a.clone(),
                    quoted: true,
                }],
            })
            .collect(),
        redirs: Vec::new(),
    };
    let cwd = gate.workspace()?.to_path_buf();
    let (j, cmd, writes) = judge_command(&raw, false, &cwd, gate, true)?;
    if writes.any {
        return Err(Refused::command(format!(
            "`{}` would change files; this tool only reads",
            argv.join(" ")
        )));
    }
    let plan = Plan {
        cwd,
        steps: vec![Step {
            connector: Connector::Seq,
            negate: false,
            commands: vec![cmd],
        }],
    };
    Ok((j, plan))
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// What a judged command may change.
struct Writes {
    /// Any file, by the program's option table.
    any: bool,
    /// It may also create or move links.
    links: bool,
}

/// `own_tool`: the argv was built by a latchclaw tool the channel enabled
/// (the `git` tool), so the shell allowlist does not apply to its program;
/// every other rule does.
fn judge_command(
    raw: &RawCommand,
    piped_into: bool,
    cwd: &Path,
    gate: &Gate,
    own_tool: bool,
) -> Judged<(Judgement, Cmd, Writes)> {
    let may_list = |d: &Path| gate.check_path(&d.to_string_lossy()).map(drop);
    let mut base: Vec<(String, String)> = gate.child_env().to_vec();
    set_var(&mut base, "PWD", &cwd.to_string_lossy());
    // Words expand before the command's own `NAME=value` prefixes apply, as in sh.
    let x = Expander {
        env: &base,
        cwd,
        may_list: &may_list,
    };
    let mut verdict = Judgement::low(HARMLESS_START);
    let mut env = base.clone();
    for (name, value) in &raw.assigns {
        let value = x.single(value)?;
        check_assignment(name, &value)?;
        set_var(&mut env, name, &value);
    }
    let mut argv = Vec::new();
    for w in &raw.words {
        argv.extend(x.word(w)?);
    }
    if argv.is_empty() {
        return Err(Refused::command("the command expands to nothing"));
    }
    let mut redirs = Vec::new();
    for r in &raw.redirs {
        let (j, redir) = judge_redir(r, &x, cwd, gate)?;
        verdict = verdict.max(j);
        redirs.extend(redir);
    }
    // `/bin/ls` is `ls`: a system program by its full name.
    let name = match argv[0].rsplit_once('/') {
        Some((dir, base)) if !base.is_empty() && SAFE_PATH.split(':').any(|d| d == dir) => {
            base.to_string()
        }
        _ => argv[0].clone(),
    };
    if name.is_empty() {
        return Err(Refused::command("empty command name"));
    }
    let program = resolve_program(&name, cwd, gate)?;
    let lower = basename(&name).to_lowercase();
    let target = program
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    for l in [lower.as_str(), target.as_str()] {
        forbidden(l, &name, gate)?;
    }
    destructive_argv(&lower, &argv[1..])?;
    let (j, writes) = judge_program(
        &name, &lower, &program, &argv, piped_into, cwd, gate, own_tool,
    )?;
    verdict = verdict.max(j);
    let makes_links = writes
        && match lower.as_str() {
            // A plain copy of files makes no link; recursion or keeping
            // links (`-a`, `-d`, `-P`, `--no-dereference`) can.
            "cp" => argv[1..].iter().any(|a| {
                a.starts_with("--")
                    && !matches!(
                        a.as_str(),
                        "--force" | "--verbose" | "--interactive" | "--no-clobber" | "--"
                    )
                    || a.starts_with('-')
                        && !a.starts_with("--")
                        && a.contains(['a', 'd', 'P', 'r', 'R', 'l', 's', 'H', 'L', 't', 'S'])
            }),
            // Moving a plain file makes no link; moving a link or a tree can.
            "mv" => argv[1..].iter().any(|a| {
                let p = cwd.join(a);
                std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_symlink() || m.is_dir())
            }),
            l => LINK_MAKERS.contains(&l),
        };
    super::secret_files::walk::guard_walk(&lower, &mut argv, cwd, gate)?;
    if lower == "diff" {
        argv.insert(1, "--no-dereference".to_string());
    }
    let is_git = lower == "git" || target == "git";
    if is_git {
        super::git::repo::harden(&mut argv, &mut env, &program, cwd, gate)?;
    }
    let git = match (is_git, writes) {
        (false, _) => super::plan::GitAccess::None,
        (true, false) => super::plan::GitAccess::Read,
        (true, true) => super::plan::GitAccess::Write,
    };
    Ok((
        verdict,
        Cmd {
            program,
            argv,
            env,
            redirs,
            git,
        },
        Writes {
            any: writes,
            links: makes_links,
        },
    ))
}

fn set_var(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(slot) => slot.1 = value.to_string(),
        None => env.push((name.to_string(), value.to_string())),
    }
}

fn check_assignment(name: &str, value: &str) -> Judged<()> {
    if !BENIGN_VARS.contains(&name) {
        let why = if name == "PATH"
            || name.starts_with("LD_")
            || name.starts_with("GIT_")
            || name.starts_with("DYLD_")
            || matches!(
                name,
                "PAGER" | "EDITOR" | "VISUAL" | "HOME" | "IFS" | "ENV" | "BASH_ENV" | "SHELL"
            ) {
            "changes which code programs load or run"
        } else {
            "is not one of the variables a command may set"
        };
        return Err(Refused::command(format!(
            "setting {name} {why}; allowed: {}",
            BENIGN_VARS.join(", ")
        )));
    }
    // Locale names with a slash, and zone names that are absolute, start
    // with `:` or climb with `..`, are file paths to glibc. A zone name such
    // as `America/New_York` is looked up under the system zone directory.
    let zone_name = |v: &str| {
        !v.starts_with('/')
            && !v.contains("..")
            && v.split('/').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_+-".contains(&b))
            })
    };
    let path_like = if name == "TZ" {
        !value.is_empty() && !zone_name(value)
    } else {
        value.contains('/') || value.starts_with(':') || value.contains("..")
    };
    if (name.starts_with("LC_") || name.starts_with("LANG") || name == "TZ") && path_like {
        return Err(Refused::command(format!(
            "{name}={value}: a path here makes programs load that file; use a plain name \
             such as C.UTF-8 or UTC"
        )));
    }
    // Programs' own parsers (sed's script reader above all) are judged in
    // UTF-8 or single-byte terms; a multibyte charset such as GB18030 can
    // hide ASCII syntax inside a character.
    if name.starts_with("LC_") || name == "LANG" {
        let v = value.to_ascii_lowercase();
        let ok = v.is_empty()
            || v == "c"
            || v == "posix"
            || v.ends_with(".utf-8")
            || v.ends_with(".utf8");
        if !ok {
            return Err(Refused::command(format!(
                "{name}={value}: only C, POSIX and UTF-8 locales (C.UTF-8, en_US.UTF-8) are allowed"
            )));
        }
    }
    Ok(())
}

fn judge_redir(
    r: &grammar::RawRedir,
    x: &Expander,
    cwd: &Path,
    gate: &Gate,
) -> Judged<(Judgement, Vec<Redir>)> {
    let target = x.single(&r.target)?;
    let shown = r.target.display();
    if r.fd > 2 {
        return Err(Refused::command(format!(
            "redirection of descriptor {}: only 0, 1 and 2 are supported",
            r.fd
        )));
    }
    let ok = |j: Judgement, v: Vec<Redir>| Ok((j, v));
    if r.op == RedirOp::Dup {
        if target == "-" {
            return ok(Judgement::low(""), vec![Redir::Close { fd: r.fd }]);
        }
        let to: u32 = target.parse().unwrap_or(u32::MAX);
        if to > 2 {
            return Err(Refused::command(format!(
                "`{}>&{shown}`: only descriptors 0, 1 and 2 are supported",
                r.fd
            )));
        }
        return ok(Judgement::low(""), vec![Redir::Dup { fd: r.fd, to }]);
    }
    if target.is_empty() {
        return Err(Refused::command(format!(
            "redirection to `{shown}`, which expands to nothing"
        )));
    }
    let path = absolute(cwd, &target);
    let (mode, fds): (OpenMode, &[u32]) = match r.op {
        RedirOp::Read => (OpenMode::Read, &[]),
        RedirOp::Write => (OpenMode::Truncate, &[]),
        RedirOp::Append => (OpenMode::Append, &[]),
        RedirOp::WriteBoth => (OpenMode::Truncate, &[2]),
        RedirOp::AppendBoth => (OpenMode::Append, &[2]),
        RedirOp::Dup => {
            return Err(Refused::command(format!(
                "`>&{shown}` needs a descriptor number"
            )));
        }
    };
    let fd = r.fd;
    let mut out = Vec::new();
    let j = if target == "/dev/null" {
        out.push(Redir::Open {
            fd,
            path: PathBuf::from("/dev/null"),
            mode,
        });
        Judgement::low("")
    } else if mode == OpenMode::Read {
        let resolved = gate
            .check_path(&path)
            .map_err(|e| e.map_reason(|r| format!("redirection: {r}")))?;
        out.push(Redir::Open {
            fd,
            path: resolved,
            mode,
        });
        Judgement::low("")
    } else {
        let resolved = gate
            .check_write_path(&path)
            .map_err(|e| e.map_reason(|r| format!("redirection: {r}")))?;
        out.push(Redir::Open {
            fd,
            path: resolved,
            mode,
        });
        Judgement::medium(format!("writes the file `{target}`"))
    };
    for &extra in fds {
        out.push(Redir::Dup { fd: extra, to: fd });
    }
    ok(j, out)
}

/// The executable a name runs: by path (relative to the command's
/// directory) or the first match on the fixed PATH. Looked up once, here;
/// the runner starts this file, so a file planted later changes nothing.
fn resolve_program(name: &str, cwd: &Path, gate: &Gate) -> Judged<PathBuf> {
    if name.contains('/') {
        let p = gate.check_path(&absolute(cwd, name))?;
        if !p.is_file() {
            return Err(Refused::command(format!("`{name}` is not a file")));
        }
        return Ok(p);
    }
    if let Some(p) = gate.lookup_program(name) {
        return Ok(p);
    }
    Err(Refused::command(format!(
        "`{name}` was not found on the command path ({SAFE_PATH}); shell builtins other than \
         `cd` are not available"
    )))
}

/// Denials that hold whatever the config says, and the configured list.
fn forbidden(lower: &str, name: &str, gate: &Gate) -> Judged<()> {
    if ALWAYS_DENY.contains(&lower) {
        return Err(Refused::command(format!(
            "`{name}` is never allowed (it runs code as another user or from a string)"
        )));
    }
    if gate.forbidden_command(lower) {
        return Err(Refused::command(format!(
            "`{name}` is a forbidden command (security.forbidden_commands)"
        )));
    }
    if DESTRUCTIVE.contains(&lower) || lower.starts_with("mkfs") {
        return Err(Refused::command(format!(
            "`{name}` is destructive and always refused"
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn judge_program(
    name: &str,
    lower: &str,
    program: &Path,
    argv: &[String],
    piped_into: bool,
    cwd: &Path,
    gate: &Gate,
    own_tool: bool,
) -> Judged<(Judgement, bool)> {
    let args = &argv[1..];
    if SHELLS.contains(&lower) {
        return Err(Refused::command(format!(
            "`{name}` is a shell: latchclaw runs commands itself and never hands a string to \
             a shell; run the commands directly"
        )));
    }
    if WRAPPERS.contains(&lower) {
        return Err(Refused::command(format!(
            "`{name}` runs another program chosen at run time; run the program directly \
             (globs work: `wc -l src/*.rs`)"
        )));
    }
    let by_path_trusted = name.contains('/') && gate.allowlisted_path(program);
    if !by_path_trusted && name.contains('/') {
        scan_args(args, cwd, gate, false)?;
        return Ok((
            Judgement::high(format!(
                "`{name}` is given by path and is not on the shell allowlist"
            )),
            true,
        ));
    }
    if INTERPRETERS.contains(&lower) || lower.starts_with("python") || lower.starts_with("perl") {
        if piped_into {
            return Err(Refused::command(format!(
                "piping into `{name}` runs code the gate cannot see"
            )));
        }
        for a in args {
            if let Some(p) = destructive_text(a) {
                return Err(Refused::command(format!(
                    "`{name}` code matches the destructive pattern `{p}`"
                )));
            }
            if let Some(f) = names_forbidden(a, gate) {
                return Err(Refused::command(format!(
                    "`{name}` code names the forbidden command `{f}`"
                )));
            }
        }
        scan_args(args, cwd, gate, false)?;
        if !gate.allowlisted(name) {
            return Ok((
                Judgement::high(format!(
                    "runs code: `{name}` (the gate cannot check what it does)"
                )),
                true,
            ));
        }
    }
    if !by_path_trusted && !own_tool && !gate.allowlisted(name) {
        scan_args(args, cwd, gate, false)?;
        return Ok((
            Judgement::high(format!("`{name}` is not on the shell allowlist")),
            true,
        ));
    }
    let table = if by_path_trusted {
        None
    } else {
        options::parse(lower, args)
    };
    let Some(parsed) = table else {
        // Allowlisted by the user without a table: its path arguments are
        // judged, and an argument naming a forbidden command is refused
        // (`npm exec -- rm -rf x`, `make CC=sudo`): a code runner may run it.
        scan_args(args, cwd, gate, by_path_trusted)?;
        if HARMLESS.contains(&lower) && !by_path_trusted {
            return Ok((Judgement::low(format!("`{name}` only prints")), false));
        }
        // Unknown to latchclaw: a code runner (`npm exec`, `make`, an
        // interpreter) that may do anything, links included; only the
        // kernel sandbox holds what it does. The operator's own script,
        // allowlisted by its path, is the one they vouched for.
        if by_path_trusted {
            return Ok((
                Judgement::medium(format!(
                    "`{name}` is allowlisted by its path (the kernel sandbox holds what it does)"
                )),
                true,
            ));
        }
        return Ok((
            Judgement::high(format!(
                "runs code: `{name}` (no option table: the gate judges its path arguments \
                 only; the kernel sandbox holds the rest)"
            )),
            true,
        ));
    };
    let parsed = parsed?;
    // What it reads outside the workspace (allowed with workspace_only =
    // false): such a plan is not low risk.
    let inside = |p: &Path| gate.workspace().is_ok_and(|ws| p.starts_with(ws));
    let mut outside: Option<String> = None;
    for r in &parsed.reads {
        let abs = absolute(cwd, r);
        let resolved = gate.check_path(&abs)?;
        // `mv` removes its sources: they are writes too.
        if lower == "mv" {
            gate.check_write_dir_ok(&abs)?;
        }
        if !inside(&resolved) {
            outside.get_or_insert_with(|| r.clone());
        }
    }
    // A `-` that may be read as a file of that name: judged when there is one.
    for d in &parsed.dash_reads {
        let abs = absolute(cwd, d);
        if Path::new(&abs).symlink_metadata().is_ok() {
            gate.check_path(&abs)?;
        }
    }
    for w in &parsed.writes {
        let resolved = gate.check_write_dir_ok(&absolute(cwd, w))?;
        // A directory written to may be written throughout (`git rm -r .`,
        // `git checkout dir`): not one holding a forbidden path or the
        // workspace's `.latchclaw`.
        if resolved.is_dir()
            && let Some(hit) = gate.write_refused_beneath(&resolved)
        {
            return Err(Refused::path(format!(
                "`{name}` would write into {} ({w}), which holds {hit}",
                resolved.display()
            )));
        }
    }
    let mut trees = parsed.read_dirs_recursive.clone();
    // Each program's own checks sit beside its option table.
    if lower == "git" {
        super::git::judge(argv, &parsed, &mut trees, program, cwd, gate)?;
    }
    let depth = if lower == "find" {
        options::find::walk_depth(args)
    } else {
        usize::MAX
    };
    for d in &trees {
        let resolved = gate.check_path(&absolute(cwd, d))?;
        if !inside(&resolved) {
            outside.get_or_insert_with(|| d.clone());
        }
        if let Some(hit) = gate.forbidden_within(&resolved, depth) {
            return Err(Refused::path(format!(
                "`{name}` would walk {} ({d}), which holds the forbidden path {hit}",
                resolved.display()
            )));
        }
    }
    for d in &parsed.write_dirs_recursive {
        let resolved = gate.check_write_dir_ok(&absolute(cwd, d))?;
        if let Some(hit) = gate.write_refused_beneath(&resolved) {
            return Err(Refused::path(format!(
                "`{name}` would write throughout {} ({d}), which holds {hit}",
                resolved.display()
            )));
        }
    }
    if lower == "cp" {
        options::coreutils::judge_cp(&parsed, cwd, gate)?;
    }
    if lower == "diff" {
        options::search::judge_diff(&parsed, cwd, gate)?;
    } else if parsed.follows_symlinks_recursively {
        return Err(Refused::command(format!(
            "`{name}` would follow symbolic links while walking a tree, which can lead out \
             of the workspace; drop the option that follows links"
        )));
    }
    // The reason says what the command does, as the operator would.
    let writes = parsed.writes_anything || !parsed.writes.is_empty();
    let j = if writes {
        Judgement::medium(if parsed.writes.is_empty() {
            format!("`{name}` changes files in the workspace")
        } else {
            format!("`{name}` writes {}", named(&parsed.writes))
        })
    } else if HARMLESS.contains(&lower) {
        Judgement::low(format!("`{name}` only prints"))
    } else if let Some(path) = outside {
        Judgement::medium(format!("`{name}` reads {path}, outside the workspace"))
    } else if parsed.reads.is_empty() {
        // By its option table it changes nothing and reaches nothing
        // outside: low risk, which `supervised` runs without asking.
        Judgement::low(format!("`{name}` only reads the workspace"))
    } else {
        Judgement::low(format!("`{name}` only reads {}", named(&parsed.reads)))
    };
    Ok((j, writes))
}

/// Paths as a reason names them: the first three, then how many more.
fn named(paths: &[String]) -> String {
    let mut out = paths
        .iter()
        .take(3)
        .map(|p| match p.as_str() {
            "." => "the current directory".to_string(),
            p => crate::util::printable(p),
        })
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > 3 {
        out.push_str(&format!(" and {} more", paths.len() - 3));
    }
    out
}

/// Arguments of a program without a table: paths it may touch get the
/// file tools' policy; a forbidden command named among them may be run.
fn scan_args(args: &[String], cwd: &Path, gate: &Gate, trusted: bool) -> Judged<()> {
    for t in args {
        if !trusted && let Some(name) = names_forbidden(t, gate) {
            return Err(Refused::command(format!(
                "argument `{t}` names the forbidden command `{name}`, which this program may run"
            )));
        }
        let value = t.split_once('=').map_or(t.as_str(), |(_, v)| v);
        // A glued short option value (`-f/abs/path`).
        let glued = t
            .strip_prefix('-')
            .filter(|r| !r.starts_with('-'))
            .and_then(|r| r.find('/').map(|i| &r[i..]));
        for p in [Some(t.as_str()), Some(value), glued].into_iter().flatten() {
            let looks_like_path = p.starts_with('/')
                || p.starts_with('~')
                || p.contains("../")
                || p == ".."
                || std::fs::symlink_metadata(cwd.join(p)).is_ok();
            if looks_like_path && !p.starts_with('-') {
                gate.check_path(&absolute(cwd, p))?;
            }
        }
    }
    Ok(())
}

/// A forbidden command named as a word anywhere in a string.
fn names_forbidden(code: &str, gate: &Gate) -> Option<String> {
    code.split(|c: char| !(c.is_alphanumeric() || "._-/".contains(c)))
        .map(|t| basename(t).to_lowercase())
        .find(|b| {
            !b.is_empty()
                && (gate.forbidden_command(b)
                    || DESTRUCTIVE.contains(&b.as_str())
                    || ALWAYS_DENY.contains(&b.as_str()) && b != ".")
        })
}

/// Built-in destructive forms, judged on the final argv.
fn destructive_argv(lower: &str, args: &[String]) -> Judged<()> {
    let short_flag = |c: char| {
        args.iter()
            .any(|t| t.starts_with('-') && !t.starts_with("--") && t.contains(c))
    };
    let has = |s: &str| args.iter().any(|t| t == s);
    let deny = |why: &str| Err(Refused::command(why));
    match lower {
        "rm" => {
            let recursive = short_flag('r') || short_flag('R') || has("--recursive");
            let wide = args.iter().any(|w| {
                matches!(
                    w.as_str(),
                    "/" | "/*" | "*" | "~" | "~/" | "." | ".." | "./*" | "../*"
                )
            });
            if recursive && wide {
                return deny("`rm -r` on a root, home or wildcard target is destructive");
            }
        }
        "chmod" if (short_flag('R') || has("--recursive")) && (has("777") || has("/")) => {
            return deny("`chmod` of the whole tree or the root is destructive");
        }
        "chmod" if has("/") => return deny("`chmod` of the root is destructive"),
        "chown" | "chgrp" if short_flag('R') || has("--recursive") => {
            return deny("recursive `chown`/`chgrp` is destructive");
        }
        "init" if args.iter().any(|t| matches!(t.as_str(), "0" | "6")) => {
            return deny("`init 0/6` halts or reboots the machine");
        }
        "systemctl"
            if args.iter().any(|t| {
                matches!(
                    t.as_str(),
                    "poweroff" | "reboot" | "halt" | "kexec" | "suspend" | "hibernate"
                )
            }) =>
        {
            return deny("`systemctl` power commands are destructive");
        }
        // Any spelling of pid 0, 1 or a negative group (`-01`, `-0001`),
        // past the signal given first.
        "kill"
            if args.iter().enumerate().any(|(i, t)| {
                let n = t.trim_start_matches('-');
                let signal_spec = i == 0 && t.starts_with('-') && t != "--";
                !signal_spec
                    && !n.is_empty()
                    && n.bytes().all(|b| b.is_ascii_digit())
                    && (t.starts_with('-') || n.parse::<u64>().map_or(true, |v| v <= 1))
            }) =>
        {
            return deny("signalling every process, a process group or init is destructive");
        }
        "pkill" | "killall" | "killall5" | "skill" | "slay" | "gdb" => {
            return deny("kills or attaches to processes by name or pid, latchclaw's own included");
        }
        _ => {}
    }
    Ok(())
}

/// Destructive patterns found in text after folding quotes, backslashes and
/// whitespace: a net for code strings the structural judge cannot parse.
pub fn destructive_text(text: &str) -> Option<&'static str> {
    let folded = fold(text);
    // Both fork-bomb shapes start with `:`.
    if folded.contains(':') {
        let compact: String = folded.chars().filter(|c| *c != ' ').collect();
        if compact.contains(":(){") || compact.contains(":|:&") {
            return Some(":(){ :|:& };:");
        }
    }
    let tokens = tokens(&folded);
    for (i, t) in tokens.iter().enumerate() {
        let base = basename(t);
        let after = &tokens[i + 1..tokens.len().min(i + 6)];
        match base {
            "rm" => {
                let recursive = after.iter().any(|a| {
                    *a == "--recursive"
                        || (a.starts_with('-') && !a.starts_with("--") && a.contains('r'))
                });
                let root = after
                    .iter()
                    .any(|a| matches!(*a, "/" | "/*" | "*" | "~" | "~/" | "--no-preserve-root"));
                if recursive && root {
                    return Some("rm -rf /");
                }
            }
            b if b.starts_with("mkfs") => return Some("mkfs"),
            "dd" if after
                .iter()
                .any(|a| a.starts_with("if=") || a.starts_with("of=")) =>
            {
                return Some("dd if=");
            }
            "chmod" if after.contains(&"-r") && after.contains(&"777") => {
                return Some("chmod -R 777 /");
            }
            "chown" if after.contains(&"-r") => return Some("chown -R"),
            _ => {}
        }
    }
    None
}

/// The words of folded text, split at spaces and shell punctuation.
fn tokens(folded: &str) -> Vec<&str> {
    // Split at ASCII bytes, so always between characters.
    let mut tokens: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, b) in folded.bytes().enumerate() {
        if matches!(
            b,
            b' ' | b';' | b'|' | b'&' | b'(' | b')' | b'`' | b'{' | b'}' | b'$'
        ) {
            if i > start {
                tokens.push(&folded[start..i]);
            }
            start = i + 1;
        }
    }
    if folded.len() > start {
        tokens.push(&folded[start..]);
    }
    tokens
}

/// `text` lowercased, without quotes and backslashes, each run of
/// whitespace one space.
fn fold(text: &str) -> String {
    // Plain ASCII is copied a run at a time: per-character `to_lowercase`
    // and `String::push` made this net a tenth of the gate's time on long
    // commands.
    let mut folded: Vec<u8> = Vec::with_capacity(text.len());
    let space = |folded: &mut Vec<u8>| {
        if folded.last() != Some(&b' ') {
            folded.push(b' ');
        }
    };
    // `char::is_whitespace` in ASCII: tab to carriage return, space.
    let special = |x: u8| !x.is_ascii() || matches!(x, b'\'' | b'"' | b'\\' | b'\t'..=b'\r' | b' ');
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if !special(b) {
            // A run of plain ASCII, lowercased in one copy.
            let end = bytes[i..]
                .iter()
                .position(|&x| special(x))
                .map_or(bytes.len(), |p| i + p);
            folded.extend(bytes[i..end].iter().map(u8::to_ascii_lowercase));
            i = end;
            continue;
        }
        if b.is_ascii() {
            i += 1;
            if !matches!(b, b'\'' | b'"' | b'\\') {
                space(&mut folded);
            }
            continue;
        }
        // A character starts here: the byte before was ASCII or ended one.
        let Some(c) = text.get(i..).and_then(|r| r.chars().next()) else {
            break;
        };
        i += c.len_utf8();
        if c.is_whitespace() {
            space(&mut folded);
        } else {
            let mut buf = [0u8; 4];
            for l in c.to_lowercase() {
                folded.extend_from_slice(l.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    // ASCII bytes and whole characters: valid UTF-8 by construction.
    String::from_utf8(folded).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// The folding as it was, character by character.
    fn fold_by_char(text: &str) -> String {
        let mut folded = String::new();
        for c in text.chars() {
            match c {
                '\'' | '"' | '\\' => {}
                c if c.is_whitespace() => {
                    if !folded.ends_with(' ') {
                        folded.push(' ');
                    }
                }
                c => folded.extend(c.to_lowercase()),
            }
        }
        folded
    }

    #[test]
    fn folding_and_splitting_by_byte_match_doing_it_by_character() {
        let alphabet: Vec<char> = "aZrRmM -/*:(){}|&;$`'\"\\\t\n\u{b}\u{c}\r\u{85}\u{a0}\u{1680}\u{2028}\u{3000}\u{200b}İΣσéÉß\u{e9}\u{1F600}K"
            .chars()
            .collect();
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..20_000 {
            let len = rng.usize(0..24);
            let text: String = (0..len)
                .map(|_| alphabet[rng.usize(..alphabet.len())])
                .collect();
            assert_eq!(fold(&text), fold_by_char(&text), "{text:?}");
            let by_char: Vec<&str> = text
                .split([' ', ';', '|', '&', '(', ')', '`', '{', '}', '$'])
                .filter(|t| !t.is_empty())
                .collect();
            assert_eq!(tokens(&text), by_char, "{text:?}");
        }
        assert_eq!(destructive_text("RM  -RF\t/"), Some("rm -rf /"));
        assert_eq!(destructive_text("r'm' -r\u{a0}/"), Some("rm -rf /"));
        assert_eq!(
            destructive_text(": ( ) { : | : & } ; :"),
            Some(":(){ :|:& };:")
        );
        assert_eq!(destructive_text("echo hi"), None);
    }
}
