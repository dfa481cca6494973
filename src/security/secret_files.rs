//! Secret-named files: `.env`, private keys, credential stores, a
//! repository's `.git/config`. The path policy refuses them by name, as
//! written and where links lead, case-insensitively, for reading and
//! writing alike (a planted `.npmrc` or `.netrc` redirects the user's own
//! tools); `[security] secret_files_allow` lists exceptions. Programs that
//! read whole trees (`grep -r`, `rg`, `diff` of directories) get options
//! that skip such files, and git's whole-repository views are refused while
//! the repository tracks one.

use super::plan::{Tok, compile_pattern, glob_match, matches};
use std::path::{Component, Path};

pub(super) mod walk;

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
    // Names that say what they hold.
    name("*secret*"),
    name("*password*"),
    name("*passwd*"),
    name("*private_key*"),
    name("*private-key*"),
    name("*credential*"),
    // `config`, `config.worktree`, a `config.lock` being written: remote
    // URLs with tokens, `http.extraHeader` credentials.
    Rule {
        shown: ".git/config",
        glob: "config*",
        public_keys_ok: false,
        in_git_dir: true,
    },
    // Last: every other rule names its file first. Shell profiles, tool
    // configs with tokens, history files: a dotfile is refused unless
    // `[security] dotfiles_allow` names it.
    name(DOTFILES),
];

/// The dotfile rule's glob and name.
pub const DOTFILES: &str = ".*";

/// KELVIN SIGN lowercases to `k`: on a case-folding file system `.\u{212A}ey`
/// opens `.key`. Walk exclusions skip every name holding one.
const KELVIN: char = '\u{212A}';

pub(super) fn normal_parts(p: &Path) -> Vec<String> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

pub(super) fn git_dir_name(lower: &str) -> bool {
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
            // A `.git` (directory or gitfile) is git's: its own rules.
            && !(r.shown == DOTFILES && last == ".git")
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
///
/// `[security] dotfiles_allow`: lowercase name globs of dotfiles the
/// dotfile rule lets through (only that rule: `.env` stays refused).
#[derive(Debug, Clone, Default)]
pub struct Allow {
    entries: Vec<Vec<String>>,
    dotfiles: Vec<String>,
}

impl Allow {
    /// Entries already checked by the config reader; an unusable one
    /// allows nothing.
    pub fn new(entries: &[String], dotfiles: &[String]) -> Allow {
        Allow {
            dotfiles: dotfiles
                .iter()
                .filter(|e| crate::config::check_dotfile_allow_entry(e).is_ok())
                .map(|e| e.to_lowercase())
                .collect(),
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

    /// Whether `rule`, matched by `path`, is lifted: the dotfile rule by
    /// `dotfiles_allow`, any rule by `secret_files_allow` (`rel`: the path
    /// from the workspace, when it is inside).
    pub fn lifts(&self, rule: &Rule, path: &Path, rel: Option<&Path>) -> bool {
        if rule.shown == DOTFILES
            && let Some(last) = normal_parts(path).last()
        {
            let last = last.to_lowercase();
            if self.dotfiles.iter().any(|g| glob_match(g, &last)) {
                return true;
            }
        }
        rel.is_some_and(|r| self.allows(r))
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
            // Names that say what they hold, and dotfiles.
            ("secrets", "*secret*"),
            ("my-secrets.txt", "*secret*"),
            ("password.txt", "*password*"),
            ("etc-passwd.bak", "*passwd*"),
            ("PRIVATE_KEY.txt", "*private_key*"),
            ("private-key", "*private-key*"),
            ("credential.ini", "*credential*"),
            (".bashrc", ".*"),
            (".gitconfig", ".*"),
            (".gitignore", ".*"),
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
            "key",
            "monkey.txt",
            "environment.md",
            "a.pem.txt",
            "private.txt",
            "pass.txt",
            ".git",
            ".GIT",
            "",
            ".",
        ] {
            assert_eq!(rule(p), None, "{p}");
        }
    }

    #[test]
    fn allow_entries_match_names_or_workspace_paths() {
        let a = Allow::new(
            &[
                ".env.example".into(),
                "./config/*.pem".into(),
                "fixtures/**".into(),
                "a/**/b.key".into(),
            ],
            &[],
        );
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
    fn dotfiles_allow_lifts_the_dotfile_rule_only() {
        let defaults: Vec<String> = crate::config::DEFAULT_DOTFILES_ALLOW
            .iter()
            .map(|s| s.to_string())
            .collect();
        let a = Allow::new(&[], &defaults);
        let lifted = |p: &str| {
            let path = Path::new(p);
            rule_for(path).is_none_or(|r| a.lifts(r, path, Some(path)))
        };
        for p in [
            ".gitignore",
            "sub/.editorconfig",
            ".ESLINTRC.json",
            ".dockerignore",
            "a.txt",
        ] {
            assert!(lifted(p), "{p}");
        }
        for p in [
            ".bashrc",
            ".env",
            ".npmrc",
            ".git-credentials",
            ".secret-ignore",
            "x/.zshrc",
        ] {
            assert!(!lifted(p), "{p}");
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
