//! git cannot be turned into a launcher. Every git the runner starts gets no
//! system or global config, no repository discovery above the workspace,
//! and `-c` settings that pin off each key that starts a program. Keys whose
//! names are chosen by the repository (`filter.<name>.clean`,
//! `diff.<name>.textconv`, `merge.<name>.driver`) are found by reading the
//! config of the repository git will use, and pinned off by name; a
//! repository whose files or work tree lie outside the workspace, or whose
//! config includes files, is refused.

use crate::security::Gate;
use std::path::{Path, PathBuf};

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

/// Per-driver keys that name a program, pinned empty for every driver the
/// repository defines (an empty command is no command to git).
const DRIVER_KEYS: &[(&str, &[&str])] = &[
    ("filter", &["clean", "smudge", "process"]),
    ("diff", &["command", "textconv"]),
    ("merge", &["driver"]),
    ("trailer", &["cmd", "command"]),
    ("difftool", &["cmd"]),
    ("mergetool", &["cmd"]),
];

/// Subcommands that write commits and so need an author.
const COMMITS: &[&str] = &["commit", "merge", "revert", "cherry-pick", "stash", "tag"];

/// The user's name and email from their own git config, which git no
/// longer reads (`GIT_CONFIG_GLOBAL=/dev/null`): only those two values,
/// as `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, and only when the repository does
/// not set them itself.
fn identity(gitdir: &Path, env: &mut Vec<(String, String)>) {
    let has = |text: &str, key: &str| {
        entries(text)
            .iter()
            .any(|(s, sub, k, _)| s == "user" && sub.is_none() && k == key)
    };
    let repo = read_small(&gitdir.join("config"))
        .ok()
        .flatten()
        .unwrap_or_default();
    let Some(home) = env
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
    else {
        return;
    };
    let global: String = [home.join(".gitconfig"), home.join(".config/git/config")]
        .iter()
        .filter_map(|p| read_small(p).ok().flatten())
        .collect::<Vec<_>>()
        .join("\n");
    for (key, vars) in [
        ("name", ["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"]),
        ("email", ["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"]),
    ] {
        if has(&repo, key) {
            continue;
        }
        let Some(value) = entries(&global)
            .into_iter()
            .filter(|(s, sub, k, _)| s == "user" && sub.is_none() && k == key)
            .map(|e| e.3)
            .next_back()
        else {
            continue;
        };
        for v in vars {
            env.push((v.to_string(), value.clone()));
        }
    }
}

/// Hardens one git argv and its environment. `cwd` is where it runs.
pub fn harden(
    argv: &mut Vec<String>,
    env: &mut Vec<(String, String)>,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), String> {
    for a in argv.iter().skip(1) {
        if matches!(
            a.as_str(),
            "--icase-pathspecs" | "--glob-pathspecs" | "--noglob-pathspecs"
        ) {
            return Err(format!(
                "git `{a}`: pathspecs are matched literally here (a pattern could reach a \
                 forbidden path the gate cannot see); name the files"
            ));
        }
        // Nested repositories have configs of their own, never read here.
        if a.starts_with("--submodule")
            || a.starts_with("--recurse-submodules")
            || (a.starts_with("--ignore-submodules") && a != "--ignore-submodules=all")
        {
            return Err(format!(
                "git `{a}` would run git inside nested repositories, whose configs latchclaw \
                 does not read; run git there with `-C DIR`"
            ));
        }
        if a == "--git-dir"
            || a.starts_with("--git-dir=")
            || a == "--work-tree"
            || a.starts_with("--work-tree=")
        {
            return Err(format!(
                "git `{a}` points git at another repository, whose config could run programs; \
                 use `-C DIR` inside the workspace"
            ));
        }
    }
    let ws = gate.workspace()?.to_path_buf();
    let ceiling = ws.parent().unwrap_or(&ws).to_string_lossy().into_owned();
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
    let mut pinned: Vec<String> = Vec::with_capacity(PINNED.len() * 2);
    for kv in PINNED {
        pinned.push("-c".into());
        pinned.push((*kv).into());
    }
    if let Some(repo) = find_repo(&start, &ws)? {
        for kv in driver_overrides(&repo, &ws)? {
            pinned.push("-c".into());
            pinned.push(kv);
        }
        if sub.is_some_and(|i| COMMITS.contains(&argv[i].as_str())) {
            identity(&repo, env);
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
) -> Result<(PathBuf, Option<usize>), String> {
    let mut dir = cwd.to_path_buf();
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if a == "-C" {
            let Some(d) = argv.get(i + 1) else {
                return Err("git `-C` needs a directory".into());
            };
            dir = gate.check_path(&dir.join(d).to_string_lossy())?;
            i += 2;
        } else if let Some(d) = a.strip_prefix("-C") {
            dir = gate.check_path(&dir.join(d).to_string_lossy())?;
            i += 1;
        } else if matches!(a, "-c" | "--namespace" | "--config-env" | "--list-cmds") {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Ok((dir, Some(i)));
        }
    }
    Ok((dir, None))
}

/// The git directory git will use from `start`: the nearest `.git` at or
/// above it, not above the workspace (`GIT_CEILING_DIRECTORIES` stops git
/// there too). A `.git` file must point inside the workspace.
fn find_repo(start: &Path, ws: &Path) -> Result<Option<PathBuf>, String> {
    Ok(find_repo_top(start, ws)?.map(|(gitdir, _)| gitdir))
}

/// [`find_repo`], and the top of the work tree it serves.
pub(super) fn find_repo_top(start: &Path, ws: &Path) -> Result<Option<(PathBuf, PathBuf)>, String> {
    let mut dir = start.to_path_buf();
    loop {
        let dot = dir.join(".git");
        match std::fs::symlink_metadata(&dot) {
            Ok(md) if md.is_dir() => return Ok(Some((dot, dir))),
            Ok(md) if md.is_file() => {
                let text = read_small(&dot)?.unwrap_or_default();
                let Some(target) = text.trim().strip_prefix("gitdir:") else {
                    return Err(format!("{} is not a usable git link", dot.display()));
                };
                let target = dir.join(target.trim());
                let resolved =
                    crate::security::resolve(&crate::security::lexical_normalize(&target))
                        .map_err(|e| format!("{}: {e}", dot.display()))?;
                if !resolved.starts_with(ws) {
                    return Err(format!(
                        "{} points git at {}, outside the workspace; latchclaw does not run git \
                         on a repository it cannot see",
                        dot.display(),
                        resolved.display()
                    ));
                }
                return Ok(Some((resolved, dir)));
            }
            Ok(_) => {
                return Err(format!(
                    "{} is a symbolic link; latchclaw does not run git through it",
                    dot.display()
                ));
            }
            Err(_) => {}
        }
        if dir == ws || !dir.pop() || !dir.starts_with(ws) {
            return Ok(None);
        }
    }
}

/// Largest repository file (config, git link) the gate reads.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A small regular file's text; `None` when it does not exist. A link, a
/// device or a file over [`MAX_CONFIG_BYTES`] is refused: the gate reads
/// these outside the sandbox and must not follow a planted link or hang
/// on `/dev/zero`.
pub(super) fn read_small(path: &Path) -> Result<Option<String>, String> {
    read_bounded(path, MAX_CONFIG_BYTES)?
        .map(|b| String::from_utf8(b).map_err(|_| format!("{}: not UTF-8 text", path.display())))
        .transpose()
}

/// The bytes of a regular file of at most `max` bytes, opened without
/// following a link and without blocking on a FIFO; `None` when it does
/// not exist; anything else is an error naming the file.
pub(super) fn read_bounded(path: &Path, max: u64) -> Result<Option<Vec<u8>>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e} (a link or unreadable)", path.display())),
    };
    let md = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !md.is_file() || md.len() > max {
        return Err(format!(
            "{} is not a regular file of at most {max} bytes",
            path.display()
        ));
    }
    let mut data = Vec::with_capacity(md.len() as usize);
    f.take(max)
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(data))
}

/// `-c` pins for the drivers a repository's config defines; refuses a
/// config that reaches outside (includes, a work tree elsewhere).
fn driver_overrides(gitdir: &Path, ws: &Path) -> Result<Vec<String>, String> {
    let mut files = vec![gitdir.join("config"), gitdir.join("config.worktree")];
    // A linked work tree shares its main repository's config.
    if let Some(common) = read_small(&gitdir.join("commondir"))? {
        let c = crate::security::resolve(&crate::security::lexical_normalize(
            &gitdir.join(common.trim()),
        ))?;
        if !c.starts_with(ws) {
            return Err(format!(
                "{} points git at {}, outside the workspace",
                gitdir.join("commondir").display(),
                c.display()
            ));
        }
        files.push(c.join("config"));
        files.push(c.join("config.worktree"));
    }
    let mut out = Vec::new();
    for f in files {
        let Some(text) = read_small(&f)? else {
            continue;
        };
        let Some(all) = entries_checked(&text) else {
            return Err(format!(
                "{} has a section header latchclaw cannot read the way git does; it will \
                 not run git on that repository",
                f.display()
            ));
        };
        for (section, sub, key, value) in all {
            let shown = || {
                format!(
                    "{} (in {})",
                    [section.as_str(), key.as_str()].join("."),
                    f.display()
                )
            };
            match (section.as_str(), key.as_str()) {
                ("include" | "includeif", _) => {
                    return Err(format!(
                        "the repository config includes other files ({}); latchclaw does not \
                         run git where it cannot read every setting",
                        shown()
                    ));
                }
                // The work tree decides what git walks and rewrites; the gate
                // judges the repository's own directory.
                ("core", "worktree") => {
                    let wt = crate::security::lexical_normalize(&gitdir.join(&value));
                    return Err(format!(
                        "the repository's work tree is set to {} ({}); latchclaw runs git \
                         only where the work tree is the repository's own directory",
                        wt.display(),
                        shown()
                    ));
                }
                _ => {}
            }
            if let (Some(sub), Some((_, keys))) = (
                sub,
                DRIVER_KEYS.iter().find(|(s, _)| *s == section.as_str()),
            ) {
                // A name `-c SECTION.NAME.KEY=` cannot spell is refused.
                if sub.contains(['=', '\n', '\r', '\0']) {
                    return Err(format!(
                        "the repository config names a {section} driver `{sub}` that cannot \
                         be pinned off ({})",
                        f.display()
                    ));
                }
                for k in *keys {
                    let kv = format!("{section}.{sub}.{k}=");
                    if !out.contains(&kv) {
                        out.push(kv);
                    }
                }
                if section == "filter" {
                    out.push(format!("filter.{sub}.required=false"));
                }
            }
        }
    }
    Ok(out)
}

/// `(section, subsection, key, value)` of a git config file, sections and
/// keys lowercased (git compares them case-insensitively).
/// One setting: section, subsection, key (lowercased), value.
pub(super) type Entry = (String, Option<String>, String, String);

pub(super) fn entries(text: &str) -> Vec<Entry> {
    entries_checked(text).unwrap_or_default()
}

/// [`entries`], or `None` when a section header is not in the form this
/// reader is sure it reads as git does (then the config is refused).
fn entries_checked(text: &str) -> Option<Vec<Entry>> {
    let mut out = Vec::new();
    let (mut section, mut sub): (String, Option<String>) = (String::new(), None);
    for raw in text.lines() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let mut rest = line;
        if let Some(h) = line.strip_prefix('[') {
            let name_end = h
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
                .unwrap_or(h.len());
            let name = &h[..name_end];
            let mut after = &h[name_end..];
            if name.is_empty() {
                return None;
            }
            if after.starts_with(' ') || after.starts_with('\t') {
                // `[section "sub"]`: the quoted name, escapes and all, up to
                // its closing quote, then `]`.
                let q = after.trim_start().strip_prefix('"')?;
                let mut name_sub = String::new();
                let mut chars = q.char_indices();
                let mut close = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => name_sub.push(chars.next()?.1),
                        '"' => {
                            close = Some(i);
                            break;
                        }
                        c => name_sub.push(c),
                    }
                }
                after = q[close? + 1..].strip_prefix(']')?;
                section = name.to_ascii_lowercase();
                sub = Some(name_sub);
            } else {
                after = after.strip_prefix(']')?;
                // `[section.sub]`, the old spelling.
                match name.split_once('.') {
                    Some((n, s)) => {
                        section = n.to_ascii_lowercase();
                        sub = Some(s.to_ascii_lowercase());
                    }
                    None => {
                        section = name.to_ascii_lowercase();
                        sub = None;
                    }
                }
            }
            rest = after.trim();
            if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
                continue;
            }
        }
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim().trim_matches('"')),
            None => (rest, "true"),
        };
        out.push((
            section.clone(),
            sub.clone(),
            key.to_ascii_lowercase(),
            value.to_string(),
        ));
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_sections_subsections_and_keys() {
        let e = entries(
            "[core]\n\tbare = false\n[filter \"lfs\"]\n\tclean = git-lfs clean\n\
             [Diff \"x\"] textconv = sh\n[merge.y]\ndriver=z\n[include]\n path = a\n",
        );
        assert!(e.contains(&(
            "filter".into(),
            Some("lfs".into()),
            "clean".into(),
            "git-lfs clean".into()
        )));
        assert!(e.iter().any(|x| x.0 == "diff" && x.2 == "textconv"));
        assert!(
            e.iter()
                .any(|x| x.0 == "merge" && x.1.as_deref() == Some("y"))
        );
        assert!(e.iter().any(|x| x.0 == "include"));
        let e = entries("[filter \"a]b\"] clean = z\n");
        assert_eq!(e[0].1.as_deref(), Some("a]b"));
        assert!(entries_checked("[ filter \"x\"]\n").is_none());
        assert!(entries_checked("[filter \"x\"\n").is_none());
        // git drops a backslash before any character in a subsection name.
        let e = entries("[filter \"e\\e\"]\n\tclean = x\n[diff \"a\\\"b\"]\n\tcommand = y\n");
        assert_eq!(e[0].1.as_deref(), Some("ee"));
        assert_eq!(e[1].1.as_deref(), Some("a\"b"));
    }
}
