//! git cannot be turned into a launcher. Every git the runner starts gets no
//! system or global config, no repository discovery above the workspace,
//! and `-c` settings that pin off each key that starts a program. Which
//! repository git will use and what its configuration says come from git
//! itself ([`view`]: one `git config --list` that also reports the
//! repository it set up, asked with the same environment and pins, in the
//! sandbox), never from latchclaw reading git's files: every driver the configuration names
//! (`filter.<name>.clean`, `diff.<name>.textconv`, …) is pinned off by the
//! name git reported. A repository, common directory or work tree outside
//! the workspace, a configuration git cannot read, one that includes files
//! outside the workspace, and a work tree set elsewhere are refused.

use super::ask::{Query, ask_git};
use super::views::{Cached, Repo, Setting, Viewed, stamp, watched};
use crate::security::gate::Gate;
use crate::security::paths::resolve;
use crate::security::refusal::Refused;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Repository settings that make git start a program. Command-line `-c`
/// beats every config file, so a planted or hostile config cannot turn
/// them back on.
#[rustfmt::skip]
const PINNED: &[&str] = &[
    "core.fsmonitor=false", "core.hooksPath=/dev/null", "core.pager=cat", "core.editor=false",
    "sequence.editor=false", "core.sshCommand=false", "core.askPass=", "core.gitProxy=",
    "credential.helper=", "diff.external=", "gpg.program=false", "gpg.ssh.program=false",
    "gpg.x509.program=false", "gpg.openpgp.program=false", "log.showSignature=false",
    "uploadpack.packObjectsHook=", "core.alternateRefsCommand=", "safe.bareRepository=explicit",
    "protocol.allow=never", "core.untrackedCache=false", "pager.log=false", "pager.diff=false",
    "pager.show=false", "pager.branch=false", "pager.tag=false", "pager.grep=false",
    "pager.blame=false", "pager.status=false", "pager.config=false", "pager.shortlog=false",
    "commit.gpgSign=false", "tag.gpgSign=false", "merge.verifySignatures=false",
    "submodule.recurse=false", "core.sparseCheckout=false", "receive.procReceiveRefs=",
    "gpg.ssh.defaultKeyCommand=", "mailmap.file=", "mailmap.blob=", "log.mailmap=false",
    "commit.template=", "core.attributesFile=/dev/null", "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false", "fetch.recurseSubmodules=false",
];

/// Per-driver keys that name a program, pinned empty for every name the
/// configuration gives (an empty command is no command to git). Keys git
/// does not know are ignored by it, so a key of a later git (`hook.*`) may
/// stand here already.
const DRIVER_KEYS: &[(&str, &[&str])] = &[
    ("filter", &["clean", "smudge", "process"]),
    ("diff", &["command", "textconv"]),
    ("merge", &["driver"]),
    ("trailer", &["cmd", "command"]),
    ("difftool", &["cmd", "path"]),
    ("mergetool", &["cmd", "path"]),
    ("credential", &["helper"]),
    ("man", &["cmd", "path"]),
    ("browser", &["cmd", "path"]),
    ("guitool", &["cmd"]),
    ("tar", &["command"]),
    ("remote", &["uploadpack", "receivepack", "vcs"]),
    ("hook", &["command"]),
];

/// Subcommands that write commits and so need an author.
const COMMITS: &[&str] = &["commit", "merge", "revert", "cherry-pick", "stash", "tag"];

/// Largest file the gate reads itself (the user's own git config, for
/// the author's identity; a repository's index is read in `secrets`).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// What git says of the repository it will use when started in `start`
/// (`None`: it finds none): asked once per decision, and again only when
/// something it rests on changed.
pub(super) fn view(program: &Path, start: &Path, gate: &Gate) -> Viewed {
    {
        let mut cache = gate.git_views.0.borrow_mut();
        if let Some(i) = cache
            .iter()
            .position(|c| c.program == program && c.start == start)
        {
            let c = &mut cache[i];
            if c.fresh || c.stamps.iter().all(|(p, s)| stamp(p) == *s) {
                c.fresh = true;
                return c.viewed.clone();
            }
            cache.swap_remove(i);
        }
    }
    let ws = gate.workspace()?.to_path_buf();
    // Stamped before asking (a change while git reads shows next time),
    // with what a refusal could rest on.
    let before = |v: &Viewed| {
        watched(start, &ws, v)
            .into_iter()
            .map(|p| {
                let s = stamp(&p);
                (p, s)
            })
            .collect::<Vec<_>>()
    };
    let pre = before(&Err(Refused::command(String::new())));
    let v = ask(program, start, gate).map(|r| r.map(Rc::new));
    {
        let mut stamps = pre;
        for (p, s) in before(&v) {
            if !stamps.iter().any(|(q, _)| *q == p) {
                stamps.push((p, s));
            }
        }
        gate.git_views.0.borrow_mut().push(Cached {
            program: program.to_path_buf(),
            start: start.to_path_buf(),
            viewed: v.clone(),
            stamps,
            fresh: true,
        });
    }
    v
}

/// The variables every git the gate starts or judges gets: no system or
/// global config, no discovery above the workspace, no terminal prompt,
/// pager or editor, literal pathspecs.
fn set_hardened(env: &mut Vec<(String, String)>, ws: &Path) {
    let ceiling = ws.parent().unwrap_or(ws).to_string_lossy().into_owned();
    for (k, v) in [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_CEILING_DIRECTORIES", ceiling.as_str()),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
        ("GIT_EDITOR", "false"),
        ("GIT_OPTIONAL_LOCKS", "0"),
        ("GIT_NO_REPLACE_OBJECTS", "1"),
        ("GIT_ATTR_NOSYSTEM", "1"),
        // Pathspecs are the paths the gate judged: no wildcards, no magic.
        ("GIT_LITERAL_PATHSPECS", "1"),
    ] {
        match env.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = v.to_string(),
            None => env.push((k.to_string(), v.to_string())),
        }
    }
}

/// The environment of the gate's own queries: the call's, hardened (a
/// command's own `NAME=value` prefixes can only be locale and terminal
/// variables, which change nothing git discovers or reads).
fn query_env(gate: &Gate, ws: &Path) -> Vec<(String, String)> {
    let mut env = gate.child_env().to_vec();
    set_hardened(&mut env, ws);
    env
}

/// `-c K=V` for each of `kvs`.
fn config_args<'a>(kvs: impl Iterator<Item = &'a str>) -> Vec<String> {
    kvs.flat_map(|kv| ["-c".to_string(), kv.to_string()])
        .collect()
}

/// Asks git, in one run, where its repository is and what its
/// configuration says: `git config -z --list --show-scope --show-origin`
/// lists every setting with the file it came from, and the same process
/// reports the repository it set up (`GIT_TRACE_SETUP`, the trace git's
/// own repository-setup tests read) on the same stdout, written as setup
/// ends and so before any setting. One process, so the repository and the
/// settings cannot come from two moments.
fn ask(program: &Path, start: &Path, gate: &Gate) -> Result<Option<Repo>, Refused> {
    let ws = gate.workspace()?.to_path_buf();
    let mut env = query_env(gate, &ws);
    env.retain(|(k, _)| !k.starts_with("GIT_TRACE"));
    env.push(("GIT_TRACE_SETUP".into(), "/proc/self/fd/1".into()));
    env.push(("GIT_TRACE_BARE".into(), "1".into()));
    let mut args = config_args(PINNED.iter().copied());
    args.extend(["config", "-z", "--list", "--show-scope", "--show-origin"].map(String::from));
    let answers = ask_git(program, start, &env, &[Query { args, stdin: None }], gate)?;
    let [config] = &answers[..] else {
        return Err(Refused::command("git gave no answer"));
    };
    if !config.ok() {
        return Err(Refused::command(format!(
            "git cannot read the repository here or its configuration ({}); latchclaw does \
             not run git where it cannot read every setting",
            config.message()
        )));
    }
    let (traced, listed) = split_trace(&config.stdout);
    let records = records(listed, true)?;
    let Some(setup) = setup(traced)? else {
        // No repository: then git read no repository's settings either.
        if records
            .iter()
            .any(|r| matches!(r.scope, b"local" | b"worktree"))
        {
            return Err(Refused::command(
                "git read a repository's settings but did not say which repository",
            ));
        }
        return Ok(None);
    };
    let Setup {
        gitdir,
        common,
        top,
        cwd,
    } = setup;
    let mut out = Vec::with_capacity(3);
    for (what, raw) in [
        ("git directory", gitdir),
        ("common git directory", common),
        ("work tree", top),
    ] {
        // Relative paths are from where git works.
        let resolved = resolve(&cwd.join(raw))?;
        if !resolved.starts_with(&ws) {
            return Err(Refused::path(format!(
                "git would use the {what} {}, outside the workspace; latchclaw does not run git \
                 on a repository it cannot see",
                resolved.display()
            )));
        }
        out.push(resolved);
    }
    let [gitdir, common, top] = <[PathBuf; 3]>::try_from(out)
        .map_err(|_| Refused::command("git's repository setup is not one latchclaw reads"))?;
    let mut files: Vec<PathBuf> = Vec::new();
    let mut includes: Vec<PathBuf> = Vec::new();
    let mut checked: Option<&[u8]> = None;
    let mut sha256 = false;
    let mut settings = Vec::with_capacity(records.len());
    for r in &records {
        let setting = setting(r.key)?;
        let shown = || {
            format!(
                "`{}` in {}",
                crate::util::printable(&String::from_utf8_lossy(r.key)),
                crate::util::printable(&String::from_utf8_lossy(r.origin))
            )
        };
        // The work tree decides what git walks and rewrites; the gate
        // judges the repository's own directory.
        if setting.section == "core" && setting.sub.is_none() && setting.name == "worktree" {
            return Err(Refused::command(format!(
                "the repository's work tree is set elsewhere ({}); latchclaw runs git only where \
                 the work tree is the repository's own directory",
                shown()
            )));
        }
        // The last one is the one git uses.
        if setting.section == "extensions"
            && setting.sub.is_none()
            && setting.name == "objectformat"
        {
            sha256 = r.value == Some(b"sha256");
        }
        let origin = match (r.scope, r.origin.strip_prefix(b"file:")) {
            (b"command", None) if r.origin == b"command line:" => None,
            // `GIT_CONFIG_GLOBAL=/dev/null`: nothing is listed from it.
            (b"global", Some(b"/dev/null")) => None,
            (b"local" | b"worktree", Some(path)) => Some(path),
            _ => {
                return Err(Refused::command(format!(
                    "git read {} from where latchclaw does not expect a repository's settings",
                    shown()
                )));
            }
        };
        if let Some(path) = origin {
            let raw = cwd.join(OsStr::from_bytes(path));
            // Records come file by file: each file is judged once.
            if checked != Some(path) {
                let file = resolve(&raw)?;
                let inside = |d: &Path| file.starts_with(d);
                if !file.starts_with(&ws) || !(inside(&gitdir) || inside(&common) || inside(&top)) {
                    return Err(Refused::path(format!(
                        "git reads settings from {} ({}), outside the repository; latchclaw does \
                         not run git where settings come from elsewhere",
                        file.display(),
                        shown()
                    )));
                }
                if !files.contains(&file) {
                    files.push(file);
                }
                checked = Some(path);
            }
            let include = setting.name == "path"
                && (setting.section == "include"
                    || setting.section == "includeif" && setting.sub.is_some());
            if include {
                let value = r.value.unwrap_or_default();
                check_include(value, &raw, &ws, &shown)?;
                let target = Path::new(OsStr::from_bytes(value));
                includes.push(match raw.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target.to_path_buf(),
                });
            }
        }
        settings.push(setting);
    }
    Ok(Some(Repo {
        gitdir,
        top,
        sha256,
        files,
        common,
        includes,
        settings,
    }))
}

/// git's stdout: the setup trace (five lines, each path escaped onto its
/// line; nothing when git found no repository), then the listing, whose
/// first record starts with a scope, never with `setup: `.
fn split_trace(out: &[u8]) -> (&[u8], &[u8]) {
    if !out.starts_with(b"setup: ") {
        return (b"", out);
    }
    let mut end = 0;
    for _ in 0..5 {
        match memchr::memchr(b'\n', &out[end..]) {
            Some(i) => end += i + 1,
            None => return (out, b""),
        }
    }
    out.split_at(end)
}

/// The repository git set up, as its setup trace reports it: paths as git
/// holds them (the git directories may be relative to `cwd`, where git
/// works).
#[derive(Debug, PartialEq)]
struct Setup {
    gitdir: PathBuf,
    common: PathBuf,
    top: PathBuf,
    cwd: PathBuf,
}

/// Reads git's setup trace: nothing when git found no repository, else
/// exactly five lines in git's order, each path with `\\`, `\n` and `\r`
/// escaped. Anything else is refused; so is a repository without a work
/// tree (git run inside a git directory).
fn setup(trace: &[u8]) -> Result<Option<Setup>, Refused> {
    if trace.is_empty() {
        return Ok(None);
    }
    let unreadable = || {
        Refused::command(format!(
            "git's report of the repository it set up is not one latchclaw reads: {}",
            crate::util::one_line(
                &crate::util::printable(&String::from_utf8_lossy(trace)),
                300
            )
        ))
    };
    let body = trace.strip_suffix(b"\n").ok_or_else(unreadable)?;
    let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    let [gitdir, common, top, cwd, _prefix] = lines[..] else {
        return Err(unreadable());
    };
    let field = |line: &[u8], name: &str| -> Result<PathBuf, Refused> {
        let value = line
            .strip_prefix(format!("setup: {name}: ").as_bytes())
            .ok_or_else(unreadable)?;
        let mut out = Vec::with_capacity(value.len());
        let mut i = 0;
        while let Some(&b) = value.get(i) {
            if b == b'\\' {
                out.push(match value.get(i + 1) {
                    Some(b'\\') => b'\\',
                    Some(b'n') => b'\n',
                    Some(b'r') => b'\r',
                    _ => return Err(unreadable()),
                });
                i += 2;
            } else {
                out.push(b);
                i += 1;
            }
        }
        Ok(PathBuf::from(OsStr::from_bytes(&out)))
    };
    let setup = Setup {
        gitdir: field(gitdir, "git_dir")?,
        common: field(common, "git_common_dir")?,
        top: field(top, "worktree")?,
        cwd: field(cwd, "cwd")?,
    };
    if !setup.cwd.is_absolute() {
        return Err(unreadable());
    }
    if !setup.top.is_absolute() {
        return Err(Refused::command(format!(
            "git would work in {} without a work tree; latchclaw runs git only in a \
             repository's work tree",
            setup.gitdir.display()
        )));
    }
    Ok(Some(setup))
}

/// An include directive (`include.path`, `includeIf.<cond>.path`) names a
/// file inside the workspace, whether or not it exists now or its
/// condition holds: one that appears later is read by the next git.
/// `origin` is the including file as git opened it; git reads a relative
/// path from that file's directory.
fn check_include(
    value: &[u8],
    origin: &Path,
    ws: &Path,
    shown: &dyn Fn() -> String,
) -> Result<(), Refused> {
    let outside = |what: String| {
        Err(Refused::path(format!(
            "the repository config includes {what} ({}), outside the workspace; latchclaw does \
             not run git where it cannot read every setting",
            shown()
        )))
    };
    // `~/…` is a home directory, `%(prefix)/…` git's installation.
    if value.starts_with(b"~") || value.starts_with(b"%(") {
        return outside(crate::util::printable(&String::from_utf8_lossy(value)));
    }
    let target = Path::new(OsStr::from_bytes(value));
    let target = match origin.parent() {
        Some(dir) if target.is_relative() => dir.join(target),
        _ => target.to_path_buf(),
    };
    // As the kernel will open it: a link's `..` is the link target's parent.
    let resolved = resolve(&target)?;
    if !resolved.starts_with(ws) {
        return outside(resolved.display().to_string());
    }
    Ok(())
}

/// One record of `git config -z --list` (with `--show-scope
/// --show-origin`: `scope NUL origin NUL key [LF value] NUL`; without:
/// `key [LF value] NUL`). A key set without `=` has no value.
struct Record<'a> {
    scope: &'a [u8],
    origin: &'a [u8],
    key: &'a [u8],
    value: Option<&'a [u8]>,
}

fn records(out: &[u8], with_origin: bool) -> Result<Vec<Record<'_>>, Refused> {
    let bad = || Refused::command("git's listing of its configuration is not one latchclaw reads");
    let Some(body) = out.strip_suffix(b"\0") else {
        return if out.is_empty() {
            Ok(Vec::new())
        } else {
            Err(bad())
        };
    };
    let fields: Vec<&[u8]> = body.split(|b| *b == 0).collect();
    let per = if with_origin { 3 } else { 1 };
    if !fields.len().is_multiple_of(per) {
        return Err(bad());
    }
    let mut out = Vec::with_capacity(fields.len() / per);
    for f in fields.chunks(per) {
        let (scope, origin, kv) = match f {
            [s, o, kv] => (*s, *o, *kv),
            [kv] => (&b""[..], &b""[..], *kv),
            _ => return Err(bad()),
        };
        let (key, value) = match kv.iter().position(|b| *b == b'\n') {
            Some(i) => (&kv[..i], Some(&kv[i + 1..])),
            None => (kv, None),
        };
        out.push(Record {
            scope,
            origin,
            key,
            value,
        });
    }
    Ok(out)
}

/// A key as git prints it: `section.name` or `section.subsection.name`,
/// the subsection being everything between the first and the last dot
/// (which is how `-c` reads it back).
fn setting(key: &[u8]) -> Result<Setting, Refused> {
    let bad = || {
        Refused::command(format!(
            "git listed a setting `{}` latchclaw cannot read",
            crate::util::printable(&String::from_utf8_lossy(key))
        ))
    };
    let (Some(first), Some(last)) = (
        key.iter().position(|b| *b == b'.'),
        key.iter().rposition(|b| *b == b'.'),
    ) else {
        return Err(bad());
    };
    let ascii = |b: &[u8]| {
        (!b.is_empty() && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-'))
            .then(|| String::from_utf8_lossy(b).to_ascii_lowercase())
    };
    let (Some(section), Some(name)) = (ascii(&key[..first]), ascii(&key[last + 1..])) else {
        return Err(bad());
    };
    Ok(Setting {
        section,
        sub: (first < last).then(|| key[first + 1..last].to_vec()),
        name,
    })
}

impl Repo {
    /// `-c` pins for every driver the configuration names; refuses a name
    /// `-c SECTION.NAME.KEY=` cannot spell.
    fn pins(&self) -> Result<Vec<String>, Refused> {
        let mut seen: HashSet<String> = PINNED.iter().map(|s| s.to_string()).collect();
        let mut out = Vec::new();
        let mut add = |kv: String| {
            if seen.insert(kv.clone()) {
                out.push(kv);
            }
        };
        for s in &self.settings {
            // `pager.<command>` names the pager of that command.
            if s.section == "pager" && s.sub.is_none() {
                add(format!("pager.{}=false", s.name));
                continue;
            }
            let Some(sub) = &s.sub else {
                continue;
            };
            let keys = DRIVER_KEYS
                .iter()
                .find(|(sec, _)| *sec == s.section)
                .map(|(_, k)| *k);
            if keys.is_none() && s.section != "protocol" {
                continue;
            }
            // `-c` splits at the first `=`; argv is text.
            let name = std::str::from_utf8(sub)
                .ok()
                .filter(|n| !n.contains(['=', '\n', '\0']))
                .ok_or_else(|| {
                    Refused::command({
                        format!(
                            "the repository config names a {} `{}` that cannot be pinned off",
                            s.section,
                            crate::util::printable(&String::from_utf8_lossy(sub))
                        )
                    })
                })?;
            for k in keys.unwrap_or_default() {
                add(format!("{}.{name}.{k}=", s.section));
            }
            match s.section.as_str() {
                "filter" => add(format!("filter.{name}.required=false")),
                // A transport allowed by name would run its helper.
                "protocol" => add(format!("protocol.{name}.allow=never")),
                _ => {}
            }
        }
        Ok(out)
    }

    fn sets(&self, section: &str, name: &str) -> bool {
        self.settings
            .iter()
            .any(|s| s.section == section && s.sub.is_none() && s.name == name)
    }
}

/// The user's name and email from their own git config, which git no
/// longer reads (`GIT_CONFIG_GLOBAL=/dev/null`): only those two values,
/// as `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, and only when the repository does
/// not set them itself. git reads the files (given on stdin, so the
/// sandbox need not open the home directory); a file git cannot read
/// gives nothing, and the commit fails as git says.
fn identity(
    repo: &Repo,
    program: &Path,
    start: &Path,
    env: &mut Vec<(String, String)>,
    gate: &Gate,
) {
    let wanted: Vec<(&str, [&str; 2])> = [
        ("name", ["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"]),
        ("email", ["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"]),
    ]
    .into_iter()
    .filter(|(k, _)| !repo.sets("user", k))
    .collect();
    let Some(home) = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
    else {
        return;
    };
    if wanted.is_empty() {
        return;
    }
    // git reads the XDG file first; ~/.gitconfig wins over it.
    let texts: Vec<Vec<u8>> = [home.join(".config/git/config"), home.join(".gitconfig")]
        .iter()
        .filter_map(|p| read_bounded(p, MAX_CONFIG_BYTES).ok().flatten())
        .collect();
    if texts.is_empty() {
        return;
    }
    let Ok(ws) = gate.workspace() else {
        return;
    };
    let queries: Vec<Query<'_>> = texts
        .iter()
        .map(|t| Query {
            args: ["config", "-z", "--file", "-", "--list"]
                .map(String::from)
                .to_vec(),
            stdin: Some(t),
        })
        .collect();
    let Ok(answers) = ask_git(program, start, &query_env(gate, ws), &queries, gate) else {
        return;
    };
    for (key, vars) in wanted {
        let value = answers
            .iter()
            .filter(|a| a.ok())
            .flat_map(|a| records(&a.stdout, false).unwrap_or_default())
            .filter(|r| r.key == format!("user.{key}").as_bytes())
            .filter_map(|r| r.value)
            .next_back();
        let Some(value) = value.and_then(|v| std::str::from_utf8(v).ok()) else {
            continue;
        };
        for v in vars {
            env.push((v.to_string(), value.to_string()));
        }
    }
}

/// Hardens one git argv and its environment. `cwd` is where it runs.
/// `program` is the git the call runs (the gate asks that same git).
pub fn harden(
    argv: &mut Vec<String>,
    env: &mut Vec<(String, String)>,
    program: &Path,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    for a in argv.iter().skip(1) {
        if matches!(
            a.as_str(),
            "--icase-pathspecs" | "--glob-pathspecs" | "--noglob-pathspecs"
        ) {
            return Err(Refused::command(format!(
                "git `{a}`: pathspecs are matched literally here (a pattern could reach a \
                 forbidden path the gate cannot see); name the files"
            )));
        }
        // Nested repositories have configs of their own, never read here.
        if a.starts_with("--submodule")
            || a.starts_with("--recurse-submodules")
            || (a.starts_with("--ignore-submodules") && a != "--ignore-submodules=all")
        {
            return Err(Refused::command(format!(
                "git `{a}` would run git inside nested repositories, whose configs latchclaw \
                 does not read; run git there with `-C DIR`"
            )));
        }
        if a == "--git-dir"
            || a.starts_with("--git-dir=")
            || a == "--work-tree"
            || a.starts_with("--work-tree=")
        {
            return Err(Refused::command(format!(
                "git `{a}` points git at another repository, whose config could run programs; \
                 use `-C DIR` inside the workspace"
            )));
        }
    }
    let ws = gate.workspace()?.to_path_buf();
    set_hardened(env, &ws);
    let (start, sub) = start_dir_and_subcommand(argv, cwd, gate)?;
    if let Some(i) = sub {
        let flags: &[&str] = match argv[i].as_str() {
            "diff" | "log" | "show" => &["--no-ext-diff", "--no-textconv"],
            // `blame.ignoreRevsFile` names a file git reads and quotes in its
            // errors; only `--no-ignore-revs-file` clears it (an empty `-c`
            // value does not). Later `--ignore-revs-file` options are judged.
            "blame" => &["--no-textconv", "--no-ignore-revs-file"],
            "grep" => &["--no-textconv"],
            _ => &[],
        };
        // Right after the subcommand; the option tables refuse the flags
        // that would turn them back on (`--ext-diff`, `--textconv`).
        argv.splice(i + 1..i + 1, flags.iter().map(|f| f.to_string()));
    }
    let mut pinned = config_args(PINNED.iter().copied());
    if let Some(repo) = view(program, &start, gate)? {
        pinned.extend(config_args(repo.pins()?.iter().map(String::as_str)));
        if sub.is_some_and(|i| COMMITS.contains(&argv[i].as_str())) {
            identity(&repo, program, &start, env, gate);
        }
    }
    argv.splice(1..1, pinned);
    Ok(())
}

/// Where git will start looking for its repository (`-C` applied), and the
/// index of the subcommand word.
pub(super) fn start_dir_and_subcommand(
    argv: &[String],
    cwd: &Path,
    gate: &Gate,
) -> Result<(PathBuf, Option<usize>), Refused> {
    let mut dir = cwd.to_path_buf();
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if a == "-C" {
            let Some(d) = argv.get(i + 1) else {
                return Err(Refused::command("git `-C` needs a directory"));
            };
            dir = gate.check_path(&dir.join(d).to_string_lossy())?;
            i += 2;
        } else if let Some(d) = a.strip_prefix("-C") {
            dir = gate.check_path(&dir.join(d).to_string_lossy())?;
            i += 1;
        } else if matches!(
            a,
            // Every global option that takes its value as the next word (as
            // `options::git` reads them): else the value passes for the
            // subcommand and the hardening of the real one is left out.
            "-c" | "--namespace"
                | "--config-env"
                | "--list-cmds"
                | "--attr-source"
                | "--git-dir"
                | "--work-tree"
        ) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Ok((dir, Some(i)));
        }
    }
    Ok((dir, None))
}

/// The bytes of a regular file of at most `max` bytes, opened without
/// following a link and without blocking on a FIFO; `None` when it does
/// not exist; anything else is an error naming the file.
pub(super) fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, Refused> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Refused::command(format!(
                "{}: {e} (a link or unreadable)",
                path.display()
            )));
        }
    };
    let md = f
        .metadata()
        .map_err(|e| Refused::command(format!("{}: {e}", path.display())))?;
    if !md.is_file() || md.len() > max {
        return Err(Refused::command(format!(
            "{} is not a regular file of at most {max} bytes",
            path.display()
        )));
    }
    let mut data = Vec::with_capacity(md.len() as usize);
    f.take(max)
        .read_to_end(&mut data)
        .map_err(|e| Refused::command(format!("{}: {e}", path.display())))?;
    Ok(Some(data))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn repo(keys: &[&[u8]]) -> Repo {
        Repo {
            gitdir: PathBuf::from("/ws/.git"),
            top: PathBuf::from("/ws"),
            sha256: false,
            files: Vec::new(),
            common: PathBuf::from("/ws/.git"),
            includes: Vec::new(),
            settings: keys.iter().map(|k| setting(k).unwrap()).collect(),
        }
    }

    #[test]
    fn reads_gits_listing_record_by_record() {
        let out = b"local\0file:.git/config\0filter.a.b c.clean\nx\n y\0\
                    worktree\0file:/w/config.worktree\0diff.x.textconv\0\
                    command\0command line:\0core.pager\ncat\0";
        let r = records(out, true).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].scope, r[0].origin, r[0].key, r[0].value),
            (
                &b"local"[..],
                &b"file:.git/config"[..],
                &b"filter.a.b c.clean"[..],
                Some(&b"x\n y"[..])
            )
        );
        // A key set without `=` has no value.
        assert_eq!((r[1].key, r[1].value), (&b"diff.x.textconv"[..], None));
        assert!(records(b"", true).unwrap().is_empty());
        // Fields that do not come in threes, or no final NUL: not read.
        assert!(records(b"local\0file:x\0", true).is_err());
        assert!(records(b"local\0file:x\0a.b\nc", true).is_err());
        let plain = records(b"user.name\nA B\0user.email\na@b\0", false).unwrap();
        assert_eq!(plain[1].value, Some(&b"a@b"[..]));
    }

    #[test]
    fn keys_split_as_dash_c_reads_them_back() {
        let s = setting(b"filter.a.b c\"d.clean").unwrap();
        assert_eq!(
            (s.section.as_str(), s.sub.as_deref(), s.name.as_str()),
            ("filter", Some(&b"a.b c\"d"[..]), "clean")
        );
        let s = setting(b"core.fsmonitor").unwrap();
        assert_eq!(
            (s.section.as_str(), s.sub, s.name.as_str()),
            ("core", None, "fsmonitor")
        );
        for bad in [&b"nodot"[..], b".x", b"a.", b"a b.c", b"\xff.x"] {
            assert!(setting(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_driver_name_is_pinned_by_its_exact_spelling() {
        let r = repo(&[
            b"filter.Dots.In.Name.clean",
            b"filter.x]y.smudge",
            b"diff.q\"z.textconv",
            b"merge.m.name",
            b"pager.status",
            b"protocol.ext.allow",
            b"credential.https://h.helper",
            b"core.bare",
        ]);
        let pins = r.pins().unwrap();
        for want in [
            "filter.Dots.In.Name.clean=",
            "filter.Dots.In.Name.process=",
            "filter.Dots.In.Name.required=false",
            "filter.x]y.clean=",
            "diff.q\"z.textconv=",
            "diff.q\"z.command=",
            "merge.m.driver=",
            "protocol.ext.allow=never",
            "credential.https://h.helper=",
        ] {
            assert!(pins.iter().any(|p| p == want), "{want}: {pins:?}");
        }
        // Already pinned, not repeated.
        assert!(!pins.iter().any(|p| p == "pager.status=false"), "{pins:?}");
        let mut r = repo(&[b"pager.newcmd"]);
        assert_eq!(r.pins().unwrap(), ["pager.newcmd=false"]);
        // `-c` cannot spell a name with `=`, nor argv one that is not text.
        r = repo(&[b"filter.a=b.clean"]);
        assert!(r.pins().is_err());
        r = repo(&[b"diff.\xff.textconv"]);
        assert!(r.pins().is_err());
    }

    #[test]
    fn the_trace_comes_before_the_listing() {
        let five = b"setup: git_dir: .git\nsetup: git_common_dir: .git\nsetup: worktree: /w\n\
                     setup: cwd: /w\nsetup: prefix: (null)\n";
        let mut out = five.to_vec();
        out.extend(b"local\0file:.git/config\0a.b\nsetup: x\n\0");
        let (trace, listed) = split_trace(&out);
        assert_eq!(trace, five);
        assert_eq!(records(listed, true).unwrap()[0].key, b"a.b");
        let none = b"command\0command line:\0a.b\nc\0";
        assert_eq!(split_trace(none), (&b""[..], &none[..]));
        // Cut short: all of it is trace, which is then refused.
        assert!(setup(split_trace(b"setup: git_dir: .git\n").0).is_err());
    }

    #[test]
    fn reads_gits_setup_trace_strictly() {
        let trace = b"setup: git_dir: .git\nsetup: git_common_dir: .git\n\
                      setup: worktree: /w/a\\\\b\\nc\nsetup: cwd: /w\nsetup: prefix: sub/\n";
        assert_eq!(
            setup(trace).unwrap(),
            Some(Setup {
                gitdir: ".git".into(),
                common: ".git".into(),
                top: PathBuf::from(OsStr::from_bytes(b"/w/a\\b\nc")),
                cwd: "/w".into(),
            })
        );
        // No repository: no trace.
        assert_eq!(setup(b"").unwrap(), None);
        let five = |top: &str, cwd: &str| {
            format!(
                "setup: git_dir: .git\nsetup: git_common_dir: .git\nsetup: worktree: {top}\n\
                 setup: cwd: {cwd}\nsetup: prefix: (null)\n"
            )
        };
        // Inside a git directory: no work tree.
        let e = setup(five("(null)", "/w/.git").as_bytes()).unwrap_err();
        assert!(e.reason.contains("without a work tree"), "{e}");
        for bad in [
            five("/w", "w"),
            five("/w\\x", "/w"),
            five("/w", "/w").replace("cwd", "cwdx"),
            five("/w", "/w").trim_end().to_string(),
            format!("{}{}", five("/w", "/w"), five("/v", "/v")),
            "setup: git_dir: .git\n".to_string(),
        ] {
            assert!(setup(bad.as_bytes()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn includes_must_name_a_file_in_the_workspace() {
        let ws = Path::new("/ws");
        let origin = Path::new("/ws/.git/config");
        let shown = || "x".to_string();
        for ok in [&b"extra.cfg"[..], b"../shared.cfg", b"/ws/a/b.cfg"] {
            assert!(check_include(ok, origin, ws, &shown).is_ok(), "{ok:?}");
        }
        for bad in [
            &b"../../x.cfg"[..],
            b"/etc/x",
            b"~/x",
            b"~root/x",
            b"%(prefix)/x",
        ] {
            assert!(check_include(bad, origin, ws, &shown).is_err(), "{bad:?}");
        }
    }
}
