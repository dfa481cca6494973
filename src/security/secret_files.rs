//! Secret-named files: `.env`, private keys, credential stores, a
//! repository's `.git/config`. The path policy refuses them by name, as
//! written and where links lead, case-insensitively, for reading and
//! writing alike (a planted `.npmrc` or `.netrc` redirects the user's own
//! tools); `[security] secret_files_allow` lists exceptions. Programs that
//! read whole trees (`grep -r`, `rg`, `diff` of directories) get options
//! that skip such files, and git's whole-repository views are refused while
//! the repository tracks one.

use super::Gate;
use super::plan::{Tok, compile_pattern, glob_match, matches};
use std::path::{Component, Path, PathBuf};

/// One rule: a lowercase glob over a file's name.
#[derive(Debug)]
pub struct Rule {
    /// How reasons and `policy show` name it.
    pub shown: &'static str,
    glob: &'static str,
    /// `id_rsa.pub` and its kind are public keys, written as such by
    /// ssh-keygen.
    public_keys_ok: bool,
    /// Only below a `.git` (or bare `NAME.git`) directory.
    in_git_dir: bool,
}

const fn name(shown: &'static str) -> Rule {
    Rule {
        shown,
        glob: shown,
        public_keys_ok: false,
        in_git_dir: false,
    }
}

const fn private_key(shown: &'static str) -> Rule {
    Rule {
        public_keys_ok: true,
        ..name(shown)
    }
}

/// The built-in rules, matched against the lowercased last component.
pub const RULES: &[Rule] = &[
    name(".env*"),
    name("*.pem"),
    name("*.key"),
    private_key("id_rsa*"),
    private_key("id_dsa*"),
    private_key("id_ecdsa*"),
    private_key("id_ed25519*"),
    name("*.ppk"),
    name(".netrc"),
    name("_netrc"),
    name(".git-credentials"),
    name("credentials*"),
    name("*.p12"),
    name("*.pfx"),
    name("*.jks"),
    name("*.keystore"),
    name(".npmrc"),
    name(".pypirc"),
    name(".pgpass"),
    name(".htpasswd"),
    name("secrets.*"),
    // `config`, `config.worktree`, a `config.lock` being written: remote
    // URLs with tokens, `http.extraHeader` credentials.
    Rule {
        shown: ".git/config",
        glob: "config*",
        public_keys_ok: false,
        in_git_dir: true,
    },
];

/// KELVIN SIGN lowercases to `k`: on a case-folding file system `.\u{212A}ey`
/// opens `.key`. Walk exclusions skip every name holding one.
const KELVIN: char = '\u{212A}';

fn normal_parts(p: &Path) -> Vec<String> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

fn git_dir_name(lower: &str) -> bool {
    lower.ends_with(".git")
}

/// The rule `path` matches, by its last component (and, for `.git/config`,
/// a git directory above it). Relative paths are taken from the workspace.
pub fn rule_for(path: &Path) -> Option<&'static Rule> {
    // Compiled once: a walk (grep, file_list) asks for every file it meets.
    static COMPILED: std::sync::OnceLock<Vec<Vec<Tok>>> = std::sync::OnceLock::new();
    let compiled = COMPILED.get_or_init(|| RULES.iter().map(|r| compile_pattern(r.glob)).collect());
    let mut parts = normal_parts(path);
    let last = parts.pop()?.to_lowercase();
    let in_git = parts.iter().any(|c| git_dir_name(&c.to_lowercase()));
    let chars: Vec<char> = last.chars().collect();
    RULES.iter().zip(compiled).find_map(|(r, toks)| {
        ((!r.in_git_dir || in_git)
            && matches(toks, &chars)
            && !(r.public_keys_ok && last.ends_with(".pub")))
        .then_some(r)
    })
}

/// The rules as one line, for `policy show` and README.
pub fn rules_shown() -> String {
    RULES.iter().map(|r| r.shown).collect::<Vec<_>>().join(" ")
}

/// `[security] secret_files_allow`: each entry a workspace-relative path or
/// glob. Without a `/` it matches the name anywhere (`.env.example`); with
/// one, the whole path from the workspace (`config/*.pem`, `fixtures/**`).
/// Matching is case-sensitive: an exception is exactly what it says.
#[derive(Debug, Clone, Default)]
pub struct Allow {
    entries: Vec<Vec<String>>,
}

impl Allow {
    /// Entries already checked by the config reader; an unusable one
    /// allows nothing.
    pub fn new(entries: &[String]) -> Allow {
        Allow {
            entries: entries
                .iter()
                .filter(|e| crate::config::check_secret_allow_entry(e).is_ok())
                .map(|e| {
                    crate::config::strip_dot(e)
                        .split('/')
                        .map(String::from)
                        .collect()
                })
                .collect(),
        }
    }

    /// Whether `rel`, a path relative to the workspace, is listed.
    pub fn allows(&self, rel: &Path) -> bool {
        let parts = normal_parts(rel);
        let Some(last) = parts.last() else {
            return false;
        };
        self.entries.iter().any(|e| match e.as_slice() {
            [one] => glob_match(one, last),
            pattern => path_match(pattern, &parts),
        })
    }
}

/// Component-wise glob match; `**` stands for any number of components.
fn path_match(pattern: &[String], parts: &[String]) -> bool {
    // reach[j]: the first i pattern components can match parts[..j].
    let mut reach = vec![false; parts.len() + 1];
    reach[0] = true;
    for p in pattern {
        let mut next = vec![false; parts.len() + 1];
        for j in 0..=parts.len() {
            if !reach[j] {
                continue;
            }
            if p == "**" {
                for slot in next.iter_mut().skip(j) {
                    *slot = true;
                }
            } else if j < parts.len() && glob_match(p, &parts[j]) {
                next[j + 1] = true;
            }
        }
        reach = next;
    }
    reach[parts.len()]
}

/// `glob` with every ASCII letter as a class of both cases, for programs
/// whose exclusions are case-sensitive (`fnmatch`).
fn both_cases(glob: &str) -> String {
    let mut out = String::with_capacity(glob.len() * 4);
    for c in glob.chars() {
        if c.is_ascii_alphabetic() {
            out.push('[');
            out.push(c.to_ascii_lowercase());
            out.push(c.to_ascii_uppercase());
            out.push(']');
        } else {
            out.push(c);
        }
    }
    out
}

/// The options that make `program` skip every secret-named file (and git
/// directories) while it walks a tree; `in_git_dir` when a walk starts at
/// or below one, where `config` itself is a secret.
pub fn walk_exclusions(program: &str, in_git_dir: bool) -> Vec<String> {
    let names = RULES
        .iter()
        .filter(|r| !r.in_git_dir || in_git_dir)
        .map(|r| r.glob);
    match program {
        "rg" => names
            .map(|g| format!("--iglob=!{g}"))
            .chain(["--iglob=!*.git".to_string()])
            .collect(),
        "grep" => names
            .map(|g| format!("--exclude={}", both_cases(g)))
            .chain([
                format!("--exclude=*{KELVIN}*"),
                format!("--exclude-dir={}", both_cases("*.git")),
            ])
            .collect(),
        // diff's exclusions apply to files and directories alike.
        "diff" => names
            .chain(["*.git"])
            .map(|g| format!("--exclude={}", both_cases(g)))
            .chain([format!("--exclude=*{KELVIN}*")])
            .collect(),
        _ => Vec::new(),
    }
}

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
) -> Result<(), String> {
    if !matches!(lower, "grep" | "rg" | "diff") {
        return Ok(());
    }
    let before = read_argv(lower, argv)?;
    let mut roots = Vec::new();
    let mut files = Vec::new();
    for r in before.reads.iter().chain(&before.read_dirs_recursive) {
        let p = gate.check_path(&super::judge::absolute(cwd, r))?;
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
                            format!("`diff` would read {}: {e}", gate.shown(&d.join(name)))
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
fn add_exclusions(lower: &str, argv: &mut Vec<String>, in_git: bool) -> Result<(), String> {
    let before = read_argv(lower, argv)?;
    let at = match lower {
        "diff" => 1,
        _ => {
            1 + super::options::options_end(lower, &argv[1..])
                .ok_or_else(|| format!("`{lower}`: cannot tell where its options end"))?
        }
    };
    argv.splice(at..at, walk_exclusions(lower, in_git));
    let after = read_argv(lower, argv)?;
    let same = |a: &super::options::Parsed, b: &super::options::Parsed| {
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
        return Err(format!(
            "`{lower}`: the options that keep it out of secret-named files would change what \
             it reads; name the files instead"
        ));
    }
    Ok(())
}

fn read_argv(lower: &str, argv: &[String]) -> Result<super::options::Parsed, String> {
    super::options::parse(lower, &argv[1..])
        .unwrap_or_else(|| Err(format!("`{lower}` has no option table")))
}

/// Entries a walk for secret-named files looks at before it gives up.
const WALK_LIMIT: usize = 20_000;
const DEPTH_LIMIT: usize = 256;

impl Gate {
    /// The rule that refuses `p` (absolute, lexical: no link in it), unless
    /// `secret_files_allow` lists it. Directories are judged by the files in
    /// them, never by their own name (a virtualenv called `.env`).
    pub(crate) fn secret_rule(&self, p: &Path) -> Option<&'static str> {
        let rel = self.workspace().ok().and_then(|w| p.strip_prefix(w).ok());
        let rule = rule_for(rel.unwrap_or(p))?;
        if rel.is_some_and(|rel| self.secret_allow.allows(rel)) {
            return None;
        }
        Some(rule.shown)
    }

    /// The reason a path is refused as secret-named: as written
    /// (`lexical`) or where it resolves to. `None` when neither is, or
    /// the path is a directory.
    pub(crate) fn secret_refusal(&self, lexical: &Path, resolved: &Path) -> Option<String> {
        if resolved.is_dir() {
            return None;
        }
        let tail = "; [security] secret_files_allow lists exceptions";
        let written = self.shown(lexical);
        if let Some(rule) = self.secret_rule(lexical) {
            return Some(format!(
                "\"{written}\" is a secret-named file (rule \"{rule}\"){tail}"
            ));
        }
        let rule = self.secret_rule(resolved)?;
        Some(format!(
            "\"{written}\" leads to \"{}\", a secret-named file (rule \"{rule}\"){tail}",
            self.shown(resolved)
        ))
    }

    /// A path as the workspace names it.
    pub(crate) fn shown(&self, p: &Path) -> String {
        match self.workspace().ok().and_then(|w| p.strip_prefix(w).ok()) {
            Some(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => p.display().to_string(),
        }
    }

    /// The first secret-named file below `dir` (not following links), with
    /// its rule; `skip_git` leaves `.git` directories out (git never reads
    /// its own directory as work tree files). Fails closed past
    /// [`WALK_LIMIT`] entries.
    pub(crate) fn secret_within(
        &self,
        dir: &Path,
        skip_git: bool,
    ) -> Result<Option<(PathBuf, &'static str)>, String> {
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut stack = vec![(dir.to_path_buf(), 0usize)];
        let mut seen = 0usize;
        while let Some((d, depth)) = stack.pop() {
            if depth > DEPTH_LIMIT {
                return Err(format!(
                    "{} is deeper than {DEPTH_LIMIT} levels; latchclaw cannot check it for \
                     secret-named files",
                    self.shown(dir)
                ));
            }
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd.flatten() {
                seen += 1;
                if seen > WALK_LIMIT {
                    return Err(format!(
                        "{} holds more than {WALK_LIMIT} entries; latchclaw cannot check it \
                         for secret-named files: name a smaller tree",
                        self.shown(dir)
                    ));
                }
                let p = e.path();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir {
                    let git = git_dir_name(&e.file_name().to_string_lossy().to_lowercase());
                    if !(skip_git && git) {
                        stack.push((p, depth + 1));
                    }
                } else if let Some(rule) = self.secret_rule(&p) {
                    return Ok(Some((p, rule)));
                }
            }
        }
        Ok(None)
    }

    /// Whether `p` (resolved) is at or below a git directory.
    pub(crate) fn in_git_dir(&self, p: &Path) -> bool {
        let rel = self
            .workspace()
            .ok()
            .and_then(|w| p.strip_prefix(w).ok())
            .unwrap_or(p);
        normal_parts(rel)
            .iter()
            .any(|c| git_dir_name(&c.to_lowercase()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn rule(p: &str) -> Option<&'static str> {
        rule_for(Path::new(p)).map(|r| r.shown)
    }

    #[test]
    fn names_match_case_insensitively() {
        for (p, want) in [
            (".env", ".env*"),
            ("deploy/.env.local", ".env*"),
            (".envrc", ".env*"),
            (".ENV", ".env*"),
            (".env.example", ".env*"),
            ("tls/server.pem", "*.pem"),
            ("server.KEY", "*.key"),
            ("server.\u{212A}ey", "*.key"),
            ("id_rsa", "id_rsa*"),
            ("ID_RSA", "id_rsa*"),
            ("id_rsa.old", "id_rsa*"),
            ("id_ed25519_sk", "id_ed25519*"),
            ("id_ecdsa", "id_ecdsa*"),
            ("id_dsa", "id_dsa*"),
            ("putty.ppk", "*.ppk"),
            (".netrc", ".netrc"),
            ("_netrc", "_netrc"),
            (".git-credentials", ".git-credentials"),
            ("credentials", "credentials*"),
            (".aws/credentials", "credentials*"),
            ("credentials.json", "credentials*"),
            ("cert.p12", "*.p12"),
            ("cert.PFX", "*.pfx"),
            ("app.jks", "*.jks"),
            ("release.keystore", "*.keystore"),
            (".npmrc", ".npmrc"),
            (".pypirc", ".pypirc"),
            (".pgpass", ".pgpass"),
            (".htpasswd", ".htpasswd"),
            ("secrets.yaml", "secrets.*"),
            (".git/config", ".git/config"),
            ("sub/.git/config", ".git/config"),
            (".git/modules/lib/config", ".git/config"),
            (".git/worktrees/w/config.worktree", ".git/config"),
            ("mirror.git/config", ".git/config"),
            (".GIT/CONFIG", ".git/config"),
            (".git/credentials", "credentials*"),
            ("/home/u/.aws/credentials", "credentials*"),
        ] {
            assert_eq!(rule(p), Some(want), "{p}");
        }
    }

    #[test]
    fn neighbours_are_not_secret() {
        for p in [
            "env.txt",
            "keys.md",
            "notes.txt",
            "config",
            "src/config",
            ".git/HEAD",
            ".git/hooks/pre-commit",
            "id_rsa.pub",
            "ID_ED25519.PUB",
            "secrets",
            "my-secrets.txt",
            "key",
            "monkey.txt",
            "environment.md",
            "a.pem.txt",
            ".gitconfig",
            "",
            ".",
        ] {
            assert_eq!(rule(p), None, "{p}");
        }
    }

    #[test]
    fn allow_entries_match_names_or_workspace_paths() {
        let a = Allow::new(&[
            ".env.example".into(),
            "./config/*.pem".into(),
            "fixtures/**".into(),
            "a/**/b.key".into(),
        ]);
        for p in [
            ".env.example",
            "sub/.env.example",
            "config/ca.pem",
            "fixtures/tls/x.key",
            "fixtures/k.pem",
            "a/b.key",
            "a/x/y/b.key",
        ] {
            assert!(a.allows(Path::new(p)), "{p}");
        }
        for p in [
            ".env",
            ".ENV.EXAMPLE",
            "config/sub/ca.pem",
            "other/fixtures/x.key",
            "a/c.key",
            "",
        ] {
            assert!(!a.allows(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn bad_allow_entries_say_why() {
        for (e, why) in [
            ("", "empty"),
            ("/etc/x.pem", "not relative"),
            ("~/.aws/credentials", "not relative"),
            ("fixtures/", "ends with"),
            ("a//b", "empty"),
            ("../x.key", "\"..\""),
            ("a/./b.pem", "\".\""),
            ("a\0b", "NUL"),
        ] {
            let got = crate::config::check_secret_allow_entry(e).unwrap_err();
            assert!(got.contains(why), "{e:?}: {got}");
        }
        for e in [".env.example", "./a.pem", "fixtures/**", "x/*.key"] {
            assert!(crate::config::check_secret_allow_entry(e).is_ok(), "{e}");
        }
    }

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

    /// Every rule's exclusion, in the program's own spelling, skips the
    /// names the rule refuses (checked with the same matcher fnmatch obeys).
    #[test]
    fn exclusions_cover_every_rule_in_any_case() {
        let grep = walk_exclusions("grep", true);
        let covered = |name: &str| {
            grep.iter()
                .filter_map(|o| o.strip_prefix("--exclude="))
                .any(|g| glob_match(g, name))
        };
        for n in [
            ".env",
            ".ENV.local",
            "Server.Pem",
            "ID_RSA",
            "id_ed25519",
            "CREDENTIALS",
            "secrets.JSON",
            "config",
            "Config.worktree",
            "a.\u{212A}ey",
            ".NPMRC",
            "x.Keystore",
        ] {
            assert!(covered(n), "{n}");
        }
        assert!(!covered("notes.txt"));
        assert!(grep.iter().any(|o| o == "--exclude-dir=*.[gG][iI][tT]"));
        assert!(
            !walk_exclusions("grep", false)
                .iter()
                .any(|o| o.contains("[cC][oO][nN]"))
        );
        let rg = walk_exclusions("rg", false);
        assert!(rg.contains(&"--iglob=!.env*".to_string()), "{rg:?}");
        assert!(rg.contains(&"--iglob=!*.git".to_string()), "{rg:?}");
        let diff = walk_exclusions("diff", false);
        assert!(diff.iter().all(|o| o.starts_with("--exclude=")), "{diff:?}");
    }
}
