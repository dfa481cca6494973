//! git and secret-named files. Names git reads by (`REV:path`, pathspecs)
//! go through the path policy like any other path; this module judges what
//! git shows without naming a file: the repository's config (`git config
//! --list`, `git remote -v`: remote URLs with tokens, `http.extraHeader`),
//! and whole-tree views (`git diff`, `git log -p`, `git show`, `git grep`)
//! of a repository whose index tracks a secret-named file. Those need
//! pathspecs after `--` that leave every such file out, and no raw object
//! id (which could name one of their blobs).

use crate::security::gate::Gate;
use crate::security::options::table::Parsed;
use crate::security::paths::{absolute, lexical_normalize};
use crate::security::refusal::Refused;
use std::path::{Path, PathBuf};

/// Largest index file the gate reads.
const MAX_INDEX_BYTES: u64 = 256 << 20;

/// Sections of git's config whose values are settings, not credentials.
#[rustfmt::skip]
const PLAIN_SECTIONS: &[&str] = &[
    "user", "core", "init", "branch", "pull", "push", "merge", "diff", "color", "commit", "log",
    "status", "rebase", "fetch", "advice", "gc", "tag", "format", "blame", "grep", "column",
    "rerere", "index", "feature", "extensions", "safe", "pack", "i18n", "help",
];

/// Key names that hold credentials wherever they are.
const SENSITIVE: &[&str] = &[
    "pass",
    "token",
    "secret",
    "auth",
    "cookie",
    "header",
    "credential",
    "url",
];

/// What git would show from the repository `argv` works in (the full
/// argv, `argv[0]` being git; `parsed` its reading by the option table).
pub(crate) fn judge(
    argv: &[String],
    parsed: &Parsed,
    program: &Path,
    cwd: &Path,
    gate: &Gate,
) -> Result<(), Refused> {
    let (start, sub) = super::repo::start_dir_and_subcommand(argv, cwd, gate)?;
    let Some(i) = sub else {
        return Ok(());
    };
    let sub = argv[i].as_str();
    let rest = &argv[i + 1..];
    let repo = super::repo::view(program, &start, gate)?;
    // `git diff A B` outside a repository, or with a path outside its work
    // tree, compares the files themselves, directories like `diff -r`.
    if sub == "diff" {
        for r in &parsed.reads {
            let p = gate.check_path(&absolute(cwd, r))?;
            if repo.as_ref().is_some_and(|repo| p.starts_with(&repo.top)) {
                continue;
            }
            if let Some((f, rule)) = gate.secret_within(&p, false)? {
                return Err(secret_in_tree("git diff", gate, &p, &f, rule));
            }
        }
    }
    let Some(repo) = repo else {
        return Ok(());
    };
    let top = &repo.top;
    // Untracked files are read from the work tree (ignored ones too, with
    // --no-exclude-standard).
    if sub == "grep"
        && rest.iter().any(|a| a == "--untracked")
        && let Some((f, rule)) = gate.secret_within(&start, true)?
    {
        return Err(secret_in_tree(
            "git grep --untracked",
            gate,
            &start,
            &f,
            rule,
        ));
    }
    let prints_config = match sub {
        "config" => config_reads_repository(rest),
        "remote" => rest
            .iter()
            .any(|a| matches!(a.as_str(), "-v" | "--verbose" | "get-url")),
        _ => false,
    };
    if prints_config {
        for f in &repo.files {
            gate.check_path(&f.to_string_lossy()).map_err(|e| {
                e.map_reason(|r| {
                    format!(
                        "`git {sub}` would print values from the repository's configuration: {r}"
                    )
                })
            })?;
        }
    }
    let ops = &parsed.git_operands;
    // A tag can be made to name any object, a blob too.
    let tags_id = sub == "tag" && ops.iter().any(|o| looks_like_object_id(o));
    if !shows_content(sub, rest) && !tags_id {
        return Ok(());
    }
    let tracked = tracked_secrets(&repo.gitdir, top, repo.sha256, gate)?;
    let Some((first, rule)) = tracked.first() else {
        return Ok(());
    };
    if matches!(sub, "show" | "diff" | "cat-file" | "tag")
        && let Some(id) = ops.iter().find(|o| looks_like_object_id(o))
    {
        return Err(Refused::path(format!(
            "`git {sub} {id}`: this repository tracks the secret-named file {first} (rule \
             \"{rule}\"), and an object id can name its content; use a branch or `HEAD~N`, \
             `git log -p -1 ID -- PATHS` for a commit, or list the file in [security] \
             secret_files_allow"
        )));
    }
    if sub == "tag" {
        return Ok(());
    }
    // `REV:path` operands only: exactly those files, each judged by its name.
    let only_named = !ops.is_empty() && ops.iter().all(|o| o.contains(':'));
    if matches!(sub, "show" | "diff" | "cat-file") && only_named {
        return Ok(());
    }
    if sub == "cat-file" {
        return Err(Refused::path(format!(
            "`git cat-file` could print {first}, a tracked secret-named file (rule \"{rule}\"); \
             name the file as `REV:path`, or list it in [security] secret_files_allow"
        )));
    }
    let specs: Vec<PathBuf> = parsed
        .git_pathspecs
        .iter()
        .map(|s| lexical_normalize(&PathBuf::from(absolute(cwd, s))))
        .collect();
    let lower = |p: &Path| PathBuf::from(p.to_string_lossy().to_lowercase());
    let exposed = tracked.iter().find(|(f, _)| {
        let f = lower(&top.join(f));
        specs.is_empty() || specs.iter().any(|s| f.starts_with(lower(s)))
    });
    if let Some((f, rule)) = exposed {
        return Err(Refused::path(format!(
            "`git {sub}` could show {f}, a secret-named file this repository tracks (rule \
             \"{rule}\"); name the paths to show after `--`, leaving it out (`git {sub} … -- \
             src`), or list it in [security] secret_files_allow"
        )));
    }
    Ok(())
}

fn secret_in_tree(what: &str, gate: &Gate, dir: &Path, f: &Path, rule: &str) -> Refused {
    Refused::path(format!(
        "`{what}` would read {}, which holds the secret-named file {} (rule \"{rule}\"); name \
         the files, or list it in [security] secret_files_allow",
        gate.shown(dir),
        gate.shown(f)
    ))
}

/// Whether a reading `git config` prints values of the repository's own
/// config that may be credentials: everything (`--list`, `--get-regexp`,
/// `--get-urlmatch`) or a key outside the plain settings.
fn config_reads_repository(rest: &[String]) -> bool {
    let (mut whole, args) = match rest.first().map(String::as_str) {
        Some("list") => (true, &rest[1..]),
        Some("get") => (false, &rest[1..]),
        _ => (false, rest),
    };
    let mut name = None;
    let mut elsewhere = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        i += 1;
        match a {
            "-l" | "--list" | "--get-regexp" | "--regexp" | "--get-urlmatch" | "--url" => {
                whole = true;
                if a == "--url" {
                    i += 1;
                }
            }
            "-f" | "--file" | "--blob" => {
                elsewhere = true;
                i += 1;
            }
            "--global" | "--system" => elsewhere = true,
            "-t" | "--type" | "--default" | "--value" | "--comment" => i += 1,
            _ if a.starts_with("--file=") || a.starts_with("--blob=") => elsewhere = true,
            _ if a.starts_with("-f") && !a.starts_with("--") => elsewhere = true,
            _ if a.starts_with("--url=") => whole = true,
            // A cluster such as `-lz`.
            _ if a.starts_with('-') && !a.starts_with("--") && a.contains('l') => whole = true,
            _ if a.starts_with('-') => {}
            _ => {
                name.get_or_insert(a);
            }
        }
    }
    if elsewhere {
        return false;
    }
    whole || !name.is_some_and(plain_config_name)
}

fn plain_config_name(name: &str) -> bool {
    let lower = name.to_lowercase();
    let section = lower.split('.').next().unwrap_or("");
    lower.contains('.')
        && PLAIN_SECTIONS.contains(&section)
        && !SENSITIVE.iter().any(|w| lower.contains(w))
}

/// Subcommands (with these options) that print files' content from the
/// work tree, the index or history without each file being named.
fn shows_content(sub: &str, rest: &[String]) -> bool {
    let any = |f: &dyn Fn(&str) -> bool| rest.iter().any(|a| f(a));
    let patch = |a: &str| {
        matches!(
            a,
            "-p" | "-u"
                | "--patch"
                | "--patch-with-stat"
                | "--patch-with-raw"
                | "--cc"
                | "-c"
                | "--dd"
                | "-m"
                | "--remerge-diff"
                | "--binary"
                | "-W"
                | "--function-context"
        ) || [
            "-U",
            "--unified",
            "--word-diff",
            "--color-words",
            "--diff-merges",
        ]
        .iter()
        .any(|p| a.starts_with(p))
    };
    // Searches of the changes answer questions about the content.
    let pickaxe = |a: &str| {
        ["-S", "-G", "--pickaxe", "--find-object"]
            .iter()
            .any(|p| a.starts_with(p))
    };
    let summary = |a: &str| {
        matches!(
            a,
            "--numstat"
                | "--shortstat"
                | "--name-only"
                | "--name-status"
                | "--raw"
                | "--summary"
                | "--compact-summary"
                | "-s"
                | "--no-patch"
                | "--quiet"
        ) || ["--stat", "--dirstat", "-X"]
            .iter()
            .any(|p| a.starts_with(p))
    };
    let short_has = |c: char| any(&|a| a.starts_with('-') && !a.starts_with("--") && a.contains(c));
    match sub {
        "diff" => any(&patch) || any(&pickaxe) || !any(&summary),
        "log" | "whatchanged" | "reflog" => any(&patch) || any(&pickaxe),
        "show" | "grep" => true,
        "stash" => any(&patch) || any(&pickaxe),
        "status" => any(&|a| a == "--verbose") || short_has('v'),
        "cat-file" => {
            short_has('p')
                || rest
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .is_some_and(|a| matches!(a.as_str(), "blob" | "tree" | "commit" | "tag"))
        }
        _ => false,
    }
}

/// An operand that may be a raw object id (or one with `~`/`^` after it):
/// four or more hex digits, not `REV:path`.
fn looks_like_object_id(op: &str) -> bool {
    if op.contains(':') {
        return false;
    }
    let head = op.split(['~', '^', '@']).next().unwrap_or("");
    (4..=64).contains(&head.len()) && head.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Secret-named files the repository's index lists, as paths from the
/// top of its work tree, with the rule each matches.
fn tracked_secrets(
    gitdir: &Path,
    top: &Path,
    sha256: bool,
    gate: &Gate,
) -> Result<Vec<(String, &'static str)>, Refused> {
    let path = gitdir.join("index");
    let data = match read_index(&path)? {
        Some(d) => d,
        None => return Ok(Vec::new()),
    };
    let hash_len = if sha256 { 32 } else { 20 };
    let names = index_paths(&data, hash_len).map_err(|e| {
        e.map_reason(|r| {
            format!(
                "{}: {r}; latchclaw cannot tell which files git tracks",
                path.display()
            )
        })
    })?;
    let mut out = Vec::new();
    for n in names {
        let rel = String::from_utf8_lossy(&n).into_owned();
        if let Some(rule) = gate.secret_rule(&top.join(&rel)) {
            out.push((rel, rule));
        }
    }
    Ok(out)
}

fn read_index(path: &Path) -> Result<Option<Vec<u8>>, Refused> {
    super::repo::read_bounded(path, MAX_INDEX_BYTES)
        .map_err(|e| e.map_reason(|r| format!("{r}; latchclaw cannot tell which files git tracks")))
}

/// The path of every entry of a git index (versions 2, 3 and 4). A split
/// or sparse index leaves files out of this one file: refused.
fn index_paths(data: &[u8], hash_len: usize) -> Result<Vec<Vec<u8>>, Refused> {
    let short = || Refused::command("the index is cut short");
    let be32 = |at: usize| -> Result<usize, Refused> {
        let b = data.get(at..at + 4).ok_or_else(short)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let be16 = |at: usize| -> Result<usize, Refused> {
        let b = data.get(at..at + 2).ok_or_else(short)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    };
    if data.get(..4) != Some(b"DIRC") {
        return Err(Refused::command("not a git index"));
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return Err(Refused::command(format!(
            "index version {version} is not one latchclaw reads"
        )));
    }
    let count = be32(8)?;
    let mut pos = 12;
    let mut prev: Vec<u8> = Vec::new();
    let mut out = Vec::with_capacity(count.min(1 << 20));
    for _ in 0..count {
        let mode = be32(pos + 24)?;
        let flags_at = pos + 40 + hash_len;
        let flags = be16(flags_at)?;
        let mut name_at = flags_at + 2;
        if version >= 3 && flags & 0x4000 != 0 {
            name_at += 2;
        }
        let tail = data.get(name_at..).ok_or_else(short)?;
        let name = if version == 4 {
            let (strip, used) = varint(tail).ok_or_else(short)?;
            let rest = &tail[used..];
            let len = memchr::memchr(0, rest).ok_or_else(short)?;
            let keep = prev.len().checked_sub(strip).ok_or_else(|| {
                Refused::command("an index entry strips more than the path before it")
            })?;
            let mut n = prev[..keep].to_vec();
            n.extend_from_slice(&rest[..len]);
            pos = name_at + used + len + 1;
            n
        } else {
            let len = memchr::memchr(0, tail).ok_or_else(short)?;
            pos += (name_at - pos + len + 8) & !7;
            tail[..len].to_vec()
        };
        if flags & 0xFFF != name.len().min(0xFFF) {
            return Err(Refused::command(
                "an index entry's name does not have the length it records",
            ));
        }
        if mode & 0o170000 == 0o040000 {
            return Err(Refused::command(
                "a sparse index lists directories, not the files in them",
            ));
        }
        prev.clone_from(&name);
        out.push(name);
    }
    let end = data.len().checked_sub(hash_len).ok_or_else(short)?;
    while pos + 8 <= end {
        if &data[pos..pos + 4] == b"link" {
            return Err(Refused::command(
                "a split index keeps entries in another file",
            ));
        }
        pos += 8 + be32(pos + 4)?;
    }
    Ok(out)
}

/// git's offset varint (index v4 path prefixes).
fn varint(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    let mut c = *b.first()?;
    i += 1;
    let mut val = usize::from(c & 127);
    while c & 128 != 0 {
        c = *b.get(i)?;
        i += 1;
        val = val.checked_add(1)?.checked_mul(128)? + usize::from(c & 127);
    }
    Some((val, i))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn config_reads_that_print_credentials() {
        for (args, prints) in [
            ("--get user.name", false),
            ("user.email", false),
            ("get core.bare", false),
            ("--list", true),
            ("-l", true),
            ("-lz", true),
            ("list", true),
            ("--get-regexp .", true),
            ("--get remote.origin.url", true),
            ("get remote.origin.url", true),
            ("--get http.https://h/.extraheader", true),
            ("--get credential.helper", true),
            ("--get user.password", true),
            ("--get-urlmatch http https://h", true),
            ("--file other.cfg --list", false),
            ("--blob HEAD:x --list", false),
            ("--global --list", false),
            ("--get", true),
        ] {
            assert_eq!(config_reads_repository(&w(args)), prints, "{args}");
        }
    }

    #[test]
    fn content_views() {
        for (sub, args, shows) in [
            ("diff", "", true),
            ("diff", "--stat", false),
            ("diff", "--name-only HEAD~1", false),
            ("diff", "--stat -p", true),
            ("diff", "--cached", true),
            ("log", "--oneline -5", false),
            ("log", "-p", true),
            ("log", "-U3", true),
            ("log", "-SAKIA --oneline", true),
            ("log", "-G^K", true),
            ("whatchanged", "", false),
            ("show", "", true),
            ("show", "--stat HEAD", true),
            ("grep", "-l x", true),
            ("stash", "show", false),
            ("stash", "show -p", true),
            ("status", "-s", false),
            ("status", "-sv", true),
            ("status", "--verbose", true),
            ("cat-file", "-t HEAD", false),
            ("cat-file", "-p HEAD", true),
            ("cat-file", "blob abcd", true),
            ("blame", "x", false),
            ("ls-files", "", false),
        ] {
            assert_eq!(shows_content(sub, &w(args)), shows, "{sub} {args}");
        }
    }

    #[test]
    fn object_ids() {
        for id in [
            "abcd",
            "deadbeef12",
            "DEADBEEF~2",
            "0123456789abcdef0123456789abcdef01234567^",
        ] {
            assert!(looks_like_object_id(id), "{id}");
        }
        for op in [
            "HEAD",
            "main",
            "abc",
            "HEAD:x",
            "abcd:x",
            "v1.0",
            "feature-x",
        ] {
            assert!(!looks_like_object_id(op), "{op}");
        }
    }

    #[test]
    fn varints_read_as_git_writes_them() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x80, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xff, 0x7f]), Some((16511, 2)));
        assert_eq!(varint(&[0x80]), None);
    }

    /// Indexes git itself wrote: every version, both hash sizes, long and
    /// prefix-sharing names; a split index is refused.
    #[test]
    fn reads_the_paths_of_real_indexes() {
        let dir = std::env::temp_dir().join(crate::util::new_id("latchclaw-index"));
        let names = [
            ".env",
            "a/.npmrc",
            "a/b.txt",
            "a/bb/c.txt",
            &format!("deep/{}/{}/id_rsa", "x".repeat(200), "y".repeat(200)),
        ];
        let git = |repo: &Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(repo)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        for (format, hash_len) in [("sha1", 20), ("sha256", 32)] {
            let repo = dir.join(format);
            for n in names {
                let p = repo.join(n);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, n).unwrap();
            }
            git(&repo, &["init", "-q", &format!("--object-format={format}")]);
            git(&repo, &["add", "."]);
            for version in ["2", "3", "4"] {
                git(&repo, &["update-index", "--index-version", version]);
                let data = std::fs::read(repo.join(".git/index")).unwrap();
                let got: Vec<String> = index_paths(&data, hash_len)
                    .unwrap_or_else(|e| panic!("{format} v{version}: {e}"))
                    .into_iter()
                    .map(|n| String::from_utf8(n).unwrap())
                    .collect();
                assert_eq!(got, names, "{format} v{version}");
            }
            git(&repo, &["update-index", "--split-index"]);
            let data = std::fs::read(repo.join(".git/index")).unwrap();
            let e = index_paths(&data, hash_len).unwrap_err();
            assert!(e.reason.contains("split index"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_broken_index_is_an_error_not_a_panic() {
        assert!(index_paths(b"", 20).is_err());
        assert!(index_paths(b"DIRC\0\0\0\x05\0\0\0\0", 20).is_err());
        let mut d = b"DIRC\0\0\0\x02\0\0\0\x01".to_vec();
        d.extend([0u8; 30]);
        assert!(index_paths(&d, 20).is_err());
        // An entry count far beyond the data.
        let mut d = b"DIRC\0\0\0\x02\xff\xff\xff\xff".to_vec();
        d.extend([0u8; 100]);
        assert!(index_paths(&d, 20).is_err());
    }
}
