//! Drivers planted in a repository's configuration in every spelling git
//! accepts — written by `git config` itself, and by hand: a byte-order
//! mark, quoted, escaped and dotted subsections, names with dots and
//! brackets, mixed case, continued lines, whitespace in headers, includes,
//! worktree configs, gitfiles whose `gitdir:` line has whitespace git
//! keeps — then git run through latchclaw: the `git` tool under readonly,
//! `git …` in the shell tool under full. The kernel sandbox is off, so
//! only the gate's pins stand between git and the driver. By effect: a
//! control run of plain git runs each driver (the spelling is live), and
//! through latchclaw none runs while git's own output still comes back. A
//! configuration git cannot read is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, output};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// git with no system or user config and a fixed identity, as a fixture
/// maker; fails the test when git fails.
fn git(dir: &Path, args: &[&str]) {
    let out = plain(dir)
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// git as a user would run it in `dir`: none of latchclaw's pins.
fn plain(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE");
    c
}

/// A workspace that is a repository with `a.txt` committed and changed,
/// every file sent through the filter and diff driver `driver` by
/// `.gitattributes`, and `hook`: a driver that creates `canary` (outside
/// the workspace) and passes its input through.
struct Case {
    env: Env,
    hook: String,
    canary: PathBuf,
}

impl Case {
    fn new(driver: &str) -> Case {
        let env = Env::new();
        env.config(
            "[security]\nautonomy = \"readonly\"\nconfinement = \"off\"\n\
             [channels.cli]\ntools_allow = [\"git\", \"shell\"]\n",
        );
        let canary = env.root.join("canary");
        let hook = env.root.join("driver.sh");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\ntouch '{}'\nif [ -f \"$1\" ]; then cat \"$1\"; else cat; fi\n",
                canary.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ws = &env.ws;
        git(ws, &["init", "-q", "-b", "main"]);
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        git(ws, &["add", "a.txt"]);
        git(ws, &["commit", "-qm", "first"]);
        std::fs::write(ws.join("a.txt"), "one\nchanged\n").unwrap();
        std::fs::write(
            ws.join(".gitattributes"),
            format!("* filter={driver} diff={driver}\n"),
        )
        .unwrap();
        Case {
            hook: hook.display().to_string(),
            env,
            canary,
        }
    }

    /// The repository's config replaced by `text` (bytes: a BOM too).
    fn config(&self, text: impl AsRef<[u8]>) {
        std::fs::write(self.env.ws.join(".git/config"), text).unwrap();
    }

    /// Plain git in `dir` runs the planted driver: the spelling is one git
    /// reads, so the checks after it can fail.
    fn control(&self, label: &str, dir: &Path) {
        for args in [&["status"][..], &["diff"]] {
            let _ = plain(dir).args(args).output().unwrap();
        }
        assert!(self.canary.exists(), "{label}: control: git ran no driver");
        std::fs::remove_file(&self.canary).unwrap();
    }

    /// The git tool's status and diff under readonly: git's output, no
    /// driver.
    fn tool_runs_no_driver(&self, label: &str) {
        let (r, v) = self.env.tool("git", json!({"command": "status"}));
        assert_eq!(r.code, 0, "{label}: {r:?}");
        assert!(output(&v).contains(" M a.txt"), "{label}: {v}");
        let (r, v) = self.env.tool("git", json!({"command": "diff"}));
        assert_eq!(r.code, 0, "{label}: {r:?}");
        assert!(output(&v).contains("+changed"), "{label}: {v}");
        assert!(!self.canary.exists(), "{label}: a planted driver ran");
    }

    /// `command` in the shell tool under full: it ran, and no driver did.
    fn shell_runs_no_driver(&self, label: &str, command: &str) -> String {
        self.env.config(
            "[security]\nautonomy = \"full\"\nconfinement = \"off\"\n\
             [channels.cli]\ntools_allow = [\"git\", \"shell\"]\n",
        );
        let (r, v) = self.env.shell(command);
        assert_eq!(r.code, 0, "{label}: {command}: {r:?}");
        assert!(
            !self.canary.exists(),
            "{label}: {command} ran a planted driver"
        );
        output(&v).to_string()
    }
}

/// What a spelling is, the driver name `.gitattributes` uses, and the
/// config that defines that driver to run `h`.
type Spelling = (&'static str, &'static str, fn(&str) -> Vec<u8>);

const CORE: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";

#[test]
fn drivers_git_config_wrote_never_run() {
    // Names with dots, spaces and quotes: `-c` reads the subsection as
    // everything between the first and the last dot.
    for name in ["x", "dots.in.name", "a]b", "q\"z", "Upper"] {
        let c = Case::new(name);
        for key in ["clean", "smudge"] {
            git(
                &c.env.ws,
                &["config", &format!("filter.{name}.{key}"), &c.hook],
            );
        }
        git(
            &c.env.ws,
            &["config", &format!("diff.{name}.textconv"), &c.hook],
        );
        git(&c.env.ws, &["config", "core.fsmonitor", &c.hook]);
        c.control(name, &c.env.ws);
        c.tool_runs_no_driver(name);
    }
}

#[test]
fn drivers_written_by_hand_in_every_spelling_never_run() {
    let cases: [Spelling; 9] = [
        ("a byte-order mark", "x", |h| {
            let mut t = b"\xEF\xBB\xBF".to_vec();
            t.extend(format!("[filter \"x\"]\n\tclean = {h}\n{CORE}").bytes());
            t
        }),
        (
            "a quoted subsection with escapes",
            "ee",
            // git drops a backslash before any character of a subsection.
            |h| format!("{CORE}[filter \"e\\e\"]\n\tclean = {h}\n").into_bytes(),
        ),
        ("a dotted subsection (git lowercases it)", "leg", |h| {
            format!("{CORE}[filter.LEG]\n\tclean = {h}\n").into_bytes()
        }),
        ("a dotted subsection with dots in it", "a.b", |h| {
            format!("{CORE}[filter.a.b]\n\tclean = {h}\n").into_bytes()
        }),
        ("mixed case sections and keys", "x", |h| {
            format!(
                "{CORE}[FiLtEr \"x\"]\n\tCLEAN = {h}\n[DIFF \"x\"]\n\ttExTcOnV = {h}\n\
                     [Core]\n\tFSMonitor = {h}\n"
            )
            .into_bytes()
        }),
        ("a continued value", "x", |h| {
            let (a, b) = h.split_at(h.len() / 2);
            format!("{CORE}[filter \"x\"]\n\tclean = {a}\\\n{b}\n").into_bytes()
        }),
        (
            "whitespace in and around the header, the key on its line",
            "x",
            |h| format!("{CORE}  [filter \t\"x\"] clean={h} # note\n").into_bytes(),
        ),
        ("a key after a comment-looking value", "x", |h| {
            format!("{CORE}[filter \"x\"]\n\tsmudge = \"a;b\" ; c\n\tclean = \"{h}\"\n")
                .into_bytes()
        }),
        ("a subsection name with a bracket", "x]y", |h| {
            format!("{CORE}[filter \"x]y\"]\n\tclean = {h}\n").into_bytes()
        }),
    ];
    for (label, driver, text) in cases {
        let c = Case::new(driver);
        c.config(text(&c.hook));
        c.control(label, &c.env.ws);
        c.tool_runs_no_driver(label);
    }
}

#[test]
fn drivers_in_included_files_never_run() {
    for (label, include, file) in [
        ("an include inside .git", "extra.cfg", ".git/extra.cfg"),
        ("a conditional include", "extra.cfg", ".git/extra.cfg"),
        (
            "an include in the work tree",
            "../shared.gitconfig",
            "shared.gitconfig",
        ),
    ] {
        let c = Case::new("x");
        let header = if label.contains("conditional") {
            "[includeIf \"gitdir:**\"]"
        } else {
            "[include]"
        };
        c.config(format!("{CORE}{header}\n\tpath = {include}\n"));
        std::fs::write(
            c.env.ws.join(file),
            format!("[filter \"x\"]\n\tclean = {}\n", c.hook),
        )
        .unwrap();
        c.control(label, &c.env.ws);
        c.tool_runs_no_driver(label);
    }
    // Outside the workspace: refused, whether or not the file exists.
    for target in ["../../outside.cfg", "/nonexistent/x.cfg", "~/x.cfg"] {
        let c = Case::new("x");
        c.config(format!("{CORE}[include]\n\tpath = {target}\n"));
        let (r, v) = c.env.tool("git", json!({"command": "status"}));
        assert_eq!(
            (r.code, &v["status"]),
            (4, &json!("denied")),
            "{target}: {r:?}"
        );
        assert!(
            v["reason"]
                .as_str()
                .unwrap()
                .contains("outside the workspace"),
            "{v}"
        );
    }
}

#[test]
fn drivers_in_worktree_configs_never_run() {
    // extensions.worktreeConfig: the main work tree's config.worktree.
    let c = Case::new("x");
    git(&c.env.ws, &["config", "extensions.worktreeConfig", "true"]);
    git(
        &c.env.ws,
        &["config", "--worktree", "filter.x.clean", &c.hook],
    );
    assert!(c.env.ws.join(".git/config.worktree").is_file());
    c.control("config.worktree", &c.env.ws);
    c.tool_runs_no_driver("config.worktree");

    // A linked work tree inside the workspace, with a driver of its own.
    let c = Case::new("y");
    git(&c.env.ws, &["add", ".gitattributes"]);
    git(&c.env.ws, &["commit", "-qm", "attributes"]);
    git(&c.env.ws, &["worktree", "add", "-q", "wt"]);
    let wt = c.env.ws.join("wt");
    git(&wt, &["config", "extensions.worktreeConfig", "true"]);
    git(&wt, &["config", "--worktree", "filter.y.clean", &c.hook]);
    git(&wt, &["config", "--worktree", "diff.y.textconv", &c.hook]);
    std::fs::write(wt.join("a.txt"), "one\nchanged in wt\n").unwrap();
    c.control("linked work tree", &wt);
    let out = c.shell_runs_no_driver("linked work tree", "cd wt && git diff");
    assert!(out.contains("+changed in wt"), "{out}");
    let out = c.shell_runs_no_driver("linked work tree", "git -C wt status --short");
    assert!(out.contains(" M a.txt"), "{out}");
}

#[test]
fn gitfiles_are_read_as_git_reads_them() {
    // git keeps everything after `gitdir: ` but the line end: a decoy at
    // the trimmed name has a clean config, the directory git uses does not.
    for (label, line, real, decoy) in [
        (
            "a leading space",
            "gitdir:  real.git\n",
            " real.git",
            "real.git",
        ),
        (
            "trailing spaces",
            "gitdir: real.git  \n",
            "real.git  ",
            "real.git",
        ),
        ("CRLF", "gitdir: real.git\r\n", "real.git", "real.git\r"),
        ("no line end", "gitdir: real.git", "real.git", "real.gi"),
    ] {
        let c = Case::new("x");
        let ws = &c.env.ws;
        std::fs::rename(ws.join(".git"), ws.join(real)).unwrap();
        copy_dir(&ws.join(real), &ws.join(decoy));
        std::fs::write(ws.join(".git"), line).unwrap();
        let mut text = std::fs::read_to_string(ws.join(real).join("config")).unwrap();
        text.push_str(&format!("[filter \"x\"]\n\tclean = {}\n", c.hook));
        std::fs::write(ws.join(real).join("config"), text).unwrap();
        c.control(label, ws);
        c.tool_runs_no_driver(label);
        let out = c.shell_runs_no_driver(label, "git diff");
        assert!(out.contains("+changed"), "{label}: {out}");
    }
    // A line git does not accept as a gitfile (a tab after the colon): git
    // refuses the repository, and so does the gate.
    let c = Case::new("x");
    let ws = &c.env.ws;
    std::fs::rename(ws.join(".git"), ws.join("real.git")).unwrap();
    std::fs::write(ws.join(".git"), "gitdir:\treal.git\n").unwrap();
    let (r, v) = c.env.tool("git", json!({"command": "status"}));
    assert_eq!((r.code, &v["status"]), (4, &json!("denied")), "{r:?}");
    assert!(!c.canary.exists());
}

#[test]
fn hooks_never_run_whatever_names_them() {
    let c = Case::new("none");
    let hooks = c.env.ws.join(".git/hooks");
    let planted = c.env.ws.join("planted-hooks");
    std::fs::create_dir_all(&planted).unwrap();
    for dir in [&hooks, &planted] {
        for name in [
            "pre-commit",
            "commit-msg",
            "post-commit",
            "post-index-change",
        ] {
            let p = dir.join(name);
            std::fs::copy(&c.hook, &p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    let mut text = std::fs::read_to_string(c.env.ws.join(".git/config")).unwrap();
    text.push_str("[Core]\n\tHooksPath = planted-hooks\n[user]\n\tname = T\n\temail = t@e\n");
    c.config(text);
    let _ = plain(&c.env.ws)
        .args(["commit", "-qam", "control"])
        .output()
        .unwrap();
    assert!(c.canary.exists(), "control: no hook ran");
    std::fs::remove_file(&c.canary).unwrap();
    std::fs::write(c.env.ws.join("a.txt"), "again\n").unwrap();
    c.shell_runs_no_driver("hooks", "git commit -qam second");
    let log = c.shell_runs_no_driver("hooks", "git log --format=%s -1");
    assert_eq!(log, "second\n");
}

#[test]
fn a_configuration_git_cannot_read_is_refused() {
    for (label, text) in [
        (
            "an unclosed header",
            format!("{CORE}[filter \"x\"\n\tclean = y\n"),
        ),
        (
            "a line that is no setting",
            format!("{CORE}[filter \"x\"]\n\t= y\n"),
        ),
        (
            "a byte-order mark past the start",
            format!("{CORE}\u{FEFF}[filter \"x\"]\n"),
        ),
    ] {
        let c = Case::new("x");
        c.config(text);
        // git itself refuses it.
        let out = plain(&c.env.ws).arg("status").output().unwrap();
        assert!(!out.status.success(), "{label}: git read it");
        let (r, v) = c.env.tool("git", json!({"command": "status"}));
        assert_eq!(
            (r.code, &v["status"]),
            (4, &json!("denied")),
            "{label}: {r:?}"
        );
        // git's own reason, quoted.
        assert!(
            v["reason"].as_str().unwrap().contains("bad config"),
            "{label}: {v}"
        );
    }
}

#[test]
fn a_configuration_git_cannot_finish_reading_is_refused_in_time() {
    // A FIFO git would wait on forever: the question is cut off.
    let c = Case::new("x");
    let config = c.env.ws.join(".git/config");
    std::fs::remove_file(&config).unwrap();
    let made = Command::new("mkfifo").arg(&config).status().unwrap();
    assert!(made.success());
    let t = std::time::Instant::now();
    let (r, v) = c.env.tool("git", json!({"command": "status"}));
    assert_eq!((r.code, &v["status"]), (4, &json!("denied")), "{r:?}");
    assert!(
        v["reason"].as_str().unwrap().contains("did not answer"),
        "{v}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(9),
        "{:?}",
        t.elapsed()
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}
