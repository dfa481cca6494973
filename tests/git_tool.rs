//! The `git` tool on the real binary: each subcommand in a repository the
//! test makes, readonly autonomy, option injection, a planted hostile
//! repository config, secret files, paths and `.git` links leaving the
//! workspace, and a model's turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// The system git, for building fixtures, with no user or system config.
fn git(env: &Env, dir: &Path, args: &[&str]) -> std::process::Output {
    git_dated(env, dir, args, None)
}

fn git_dated(env: &Env, dir: &Path, args: &[&str], date: Option<&str>) -> std::process::Output {
    let mut c = Command::new("git");
    for var in ["GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"] {
        match date {
            Some(d) => c.env(var, d),
            None => c.env_remove(var),
        };
    }
    let out = c
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("HOME", &env.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

/// A readonly workspace that is a repository with two commits, a branch
/// `feature`, and an unstaged and a staged change.
fn repo(confinement: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "[security]\nautonomy = \"readonly\"\nconfinement = \"{confinement}\"\n"
    ));
    let ws = &env.ws;
    git(&env, ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn one() {}\n").unwrap();
    git(&env, ws, &["add", "."]);
    git_dated(
        &env,
        ws,
        &["commit", "-q", "-m", "first commit"],
        Some("2001-02-03T04:05:06Z"),
    );
    std::fs::write(ws.join("a.txt"), "alpha\nBETA\ngamma\ndelta\n").unwrap();
    git(&env, ws, &["commit", "-q", "-am", "second: shout beta"]);
    git(&env, ws, &["branch", "feature"]);
    std::fs::write(ws.join("a.txt"), "alpha\nBETA\ngamma\ndelta\nunstaged\n").unwrap();
    std::fs::write(ws.join("src/lib.rs"), "fn one() {}\nfn staged() {}\n").unwrap();
    git(&env, ws, &["add", "src/lib.rs"]);
    env
}

fn run(env: &Env, args: Value) -> (common::Run, Value) {
    env.tool("git", args)
}

fn ok(env: &Env, args: Value) -> String {
    let (r, v) = run(env, args.clone());
    assert_eq!(r.code, 0, "{args}: {r:?}");
    assert_eq!(v["status"], "allowed", "{v}");
    assert_eq!(v["risk"], "low", "{v}");
    v["output"].as_str().unwrap().to_string()
}

/// Refused by the gate (exit 4, a `denied` receipt): its reason.
fn denied(env: &Env, args: Value) -> String {
    let (r, v) = run(env, args.clone());
    assert_eq!(r.code, 4, "{args} ran: {r:?}");
    assert_eq!(v["status"], "denied", "{args}: {v}");
    v["reason"].as_str().unwrap().to_string()
}

#[test]
fn every_subcommand_reads_the_repository_under_readonly() {
    let env = repo("best_effort");
    let status = ok(&env, json!({"command": "status"}));
    assert!(status.contains("## main"), "{status}");
    assert!(
        status.contains(" M a.txt") && status.contains("M  src/lib.rs"),
        "{status}"
    );

    let log = ok(&env, json!({"command": "log"}));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].ends_with("T: second: shout beta"), "{log}");
    assert!(lines[1].ends_with("T: first commit"), "{log}");
    let one = ok(&env, json!({"command": "log", "n": 1}));
    assert_eq!(one.lines().count(), 1, "{one}");
    let by_path = ok(&env, json!({"command": "log", "path": "src"}));
    assert!(
        by_path.contains("first commit") && !by_path.contains("second"),
        "{by_path}"
    );
    let since = ok(&env, json!({"command": "log", "since": "2000-01-01"}));
    assert_eq!(since.lines().count(), 2, "{since}");
    let later = ok(&env, json!({"command": "log", "since": "2010-01-01"}));
    assert_eq!(later.lines().count(), 1, "{later}");
    assert!(later.contains("second"), "{later}");

    let diff = ok(&env, json!({"command": "diff"}));
    assert!(
        diff.contains("+unstaged") && !diff.contains("staged()"),
        "{diff}"
    );
    let staged = ok(&env, json!({"command": "diff", "staged": true}));
    assert!(
        staged.contains("+fn staged() {}") && !staged.contains("+unstaged"),
        "{staged}"
    );
    let between = ok(
        &env,
        json!({"command": "diff", "refs": ["HEAD~1", "HEAD"], "path": "a.txt"}),
    );
    assert!(
        between.contains("-beta") && between.contains("+BETA"),
        "{between}"
    );
    let range = ok(&env, json!({"command": "diff", "refs": ["HEAD~1..main"]}));
    assert!(range.contains("+delta"), "{range}");

    let show = ok(&env, json!({"command": "show"}));
    assert!(
        show.contains("second: shout beta") && show.contains("+BETA"),
        "{show}"
    );
    let old = ok(
        &env,
        json!({"command": "show", "ref": "HEAD~1", "path": "a.txt"}),
    );
    assert_eq!(old, "alpha\nbeta\ngamma\n");
    let tip = ok(
        &env,
        json!({"command": "show", "ref": "feature", "path": "src/lib.rs"}),
    );
    assert_eq!(tip, "fn one() {}\n");

    let blame = ok(
        &env,
        json!({"command": "blame", "path": "a.txt", "start_line": 2, "end_line": 3}),
    );
    let lines: Vec<&str> = blame.lines().collect();
    assert_eq!(lines.len(), 2, "{blame}");
    assert!(
        lines[0].ends_with(" 2) BETA") && lines[1].ends_with(" 3) gamma"),
        "{blame}"
    );
    let whole = ok(&env, json!({"command": "blame", "path": "a.txt"}));
    assert_eq!(whole.lines().count(), 5, "{whole}");

    let branch = ok(&env, json!({"command": "branch"}));
    assert!(
        branch.contains("* main") && branch.contains("  feature"),
        "{branch}"
    );

    // Nothing above changed the repository.
    let after = git(&env, &env.ws, &["status", "--porcelain"]);
    assert_eq!(
        String::from_utf8_lossy(&after.stdout),
        " M a.txt\nM  src/lib.rs\n"
    );
    // Readonly runs the shell's git when it only reads (low risk), and
    // refuses it when it writes.
    let (_, v) = env.shell("git log -1");
    assert_eq!(v["status"], "allowed", "{v}");
    let (_, v) = env.shell("git add a.txt");
    assert_eq!(v["status"], "denied", "{v}");
}

#[test]
fn tool_list_and_policy_show_git_as_low_risk() {
    let env = repo("best_effort");
    let r = env.run(&["tool", "list"]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("git"))
        .unwrap_or("");
    assert!(line.contains("low"), "{r:?}");
    let (_, v) = env.json(&[
        "policy",
        "check",
        "git",
        "--json",
        r#"{"command":"log","n":3}"#,
    ]);
    assert_eq!(
        (v["decision"].as_str(), v["risk"].as_str()),
        (Some("allow"), Some("low")),
        "{v}"
    );
    let (_, v) = env.json(&[
        "policy",
        "check",
        "git",
        "--json",
        r#"{"command":"log","ref":"HEAD"}"#,
    ]);
    assert_eq!(v["decision"], "deny", "{v}");
    assert!(
        v["reason"].as_str().unwrap().contains("does not apply"),
        "{v}"
    );
}

#[test]
fn option_injection_is_refused_and_writes_nothing() {
    let env = repo("off");
    let out = env.root.join("injected");
    let o = out.display().to_string();
    let cases = [
        json!({"command": "log", "path": format!("--output={o}")}),
        json!({"command": "diff", "path": format!("--output={o}")}),
        json!({"command": "diff", "refs": [format!("--output={o}")]}),
        json!({"command": "diff", "refs": ["HEAD", format!("--exec=touch {o}")]}),
        json!({"command": "show", "ref": format!("--exec=touch {o}")}),
        json!({"command": "show", "ref": "-p"}),
        json!({"command": "show", "ref": format!("--output={o}")}),
        json!({"command": "blame", "path": format!("--output={o}")}),
        json!({"command": "log", "since": format!("--output={o}")}),
        json!({"command": "log", "since": format!("x --output={o}")}),
        json!({"command": "show", "ref": "HEAD;touch x"}),
        json!({"command": "show", "ref": "$(touch x)"}),
    ];
    for c in cases {
        let why = denied(&env, c.clone());
        assert!(
            why.contains("option") || why.contains("may hold") || why.contains("since"),
            "{c}: {why}"
        );
    }
    assert!(!out.exists());
    assert!(!env.ws.join("x").exists());
    // A `--` pathspec that only looks like an option is still refused by name.
    let why = denied(&env, json!({"command": "show", "ref": "-p"}));
    assert!(why.contains("starts with `-`"), "{why}");
}

#[test]
fn bad_arguments_name_what_is_allowed() {
    let env = repo("best_effort");
    let why = denied(&env, json!({"command": "push"}));
    assert!(
        why.contains("status, log, diff, show, blame, branch"),
        "{why}"
    );
    let why = denied(&env, json!({"command": "status", "path": "a.txt"}));
    assert!(why.contains("does not apply"), "{why}");
    let why = denied(&env, json!({"command": "diff", "refs": ["a", "b", "c"]}));
    assert!(why.contains("at most 2"), "{why}");
    let why = denied(&env, json!({"command": "blame"}));
    assert!(why.contains("required"), "{why}");
    let why = denied(
        &env,
        json!({"command": "blame", "path": "a.txt", "start_line": 5, "end_line": 2}),
    );
    assert!(why.contains("before"), "{why}");
    let why = denied(&env, json!({"command": "log", "n": 5000}));
    assert!(why.contains("200"), "{why}");
    // The schema is checked before the gate: a mistyped argument.
    let r = env.run(&[
        "tool",
        "run",
        "git",
        "--json",
        r#"{"command":"log","n":"5"}"#,
    ]);
    assert_eq!((r.code, r.stdout.as_str()), (2, ""), "a usage error: {r:?}");
    assert!(r.stderr.contains("must be an integer"), "{r:?}");
    let r = env.run(&[
        "tool",
        "run",
        "git",
        "--json",
        r#"{"command":"diff","refs":"HEAD"}"#,
    ]);
    assert_eq!((r.code, r.stdout.as_str()), (2, ""), "a usage error: {r:?}");
    assert!(r.stderr.contains("must be an array"), "{r:?}");
}

/// A script that records that it ran by creating `marker`.
fn planted(env: &Env, name: &str) -> (String, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let marker = env.root.join(format!("ran-{name}"));
    let script = env.root.join(format!("{name}.sh"));
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\ncat\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script.display().to_string(), marker)
}

#[test]
fn a_planted_repository_config_runs_no_program() {
    // Confinement off: the pins alone must keep the programs from running.
    let env = repo("off");
    let (pager, pager_ran) = planted(&env, "pager");
    let (fsmon, fsmon_ran) = planted(&env, "fsmonitor");
    let (ext, ext_ran) = planted(&env, "external");
    let (conv, conv_ran) = planted(&env, "textconv");
    std::fs::write(env.ws.join(".gitattributes"), "*.txt diff=evil\n").unwrap();
    git(&env, &env.ws, &["add", ".gitattributes", "a.txt"]);
    git(&env, &env.ws, &["commit", "-q", "-m", "attributes"]);
    std::fs::write(env.ws.join("a.txt"), "changed again\n").unwrap();
    let config = env.ws.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[core]\n\tpager = {pager}\n\tfsmonitor = {fsmon}\n[diff]\n\texternal = {ext}\n\
         [diff \"evil\"]\n\ttextconv = {conv}\n[pager]\n\tlog = {pager}\n"
    ));
    std::fs::write(&config, text).unwrap();

    // Control: plain git runs each planted program, so the test can fail.
    let plain = |args: &[&str]| {
        let _ = Command::new("git")
            .args(args)
            .current_dir(&env.ws)
            .env("HOME", &env.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
    };
    plain(&["status"]);
    plain(&["diff"]);
    plain(&["-c", "diff.external=", "log", "-p", "-1"]);
    for m in [&fsmon_ran, &ext_ran, &conv_ran] {
        assert!(m.exists(), "control: {} did not run", m.display());
        std::fs::remove_file(m).unwrap();
    }

    for args in [
        json!({"command": "status"}),
        json!({"command": "diff"}),
        json!({"command": "diff", "refs": ["HEAD~1"], "path": "a.txt"}),
        json!({"command": "log", "n": 3}),
        json!({"command": "show"}),
        json!({"command": "show", "ref": "HEAD~1", "path": "a.txt"}),
        json!({"command": "blame", "path": "a.txt"}),
        json!({"command": "branch"}),
    ] {
        let (r, v) = run(&env, args.clone());
        assert_eq!(v["status"], "allowed", "{args}: {r:?}");
        assert_eq!(r.code, 0, "{args}: {r:?}");
    }
    for m in [&pager_ran, &fsmon_ran, &ext_ran, &conv_ran] {
        assert!(!m.exists(), "{} ran", m.display());
    }
}

#[test]
fn an_including_config_is_refused() {
    let env = repo("best_effort");
    let config = env.ws.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[include]\n\tpath = /tmp/elsewhere.conf\n");
    std::fs::write(&config, text).unwrap();
    let why = denied(&env, json!({"command": "status"}));
    assert!(
        why.contains("includes /tmp/elsewhere.conf") && why.contains("outside the workspace"),
        "{why}"
    );
}

#[test]
fn secret_files_are_never_shown() {
    let env = repo("best_effort");
    std::fs::write(env.ws.join(".env"), "API_TOKEN=hunter2-secret\n").unwrap();
    git(&env, &env.ws, &["add", "-f", ".env"]);
    git(&env, &env.ws, &["commit", "-q", "-m", "oops, the env file"]);
    for args in [
        json!({"command": "show", "ref": "HEAD", "path": ".env"}),
        json!({"command": "show", "ref": "HEAD:.env"}),
        json!({"command": "show", "ref": "HEAD:./.env"}),
        json!({"command": "show"}),
        json!({"command": "diff", "refs": ["HEAD~1"]}),
        json!({"command": "diff", "refs": ["HEAD~1", "HEAD"], "path": ".env"}),
        json!({"command": "diff", "refs": ["HEAD~1", "HEAD"], "path": "."}),
        json!({"command": "blame", "path": ".env"}),
        json!({"command": "log", "path": ".env"}),
    ] {
        let (r, v) = run(&env, args.clone());
        assert_eq!(v["status"], "denied", "{args}: {r:?}");
        assert!(
            !r.stdout.contains("hunter2") && !r.stderr.contains("hunter2"),
            "{args}: {r:?}"
        );
    }
    // What leaves the secret out still works: a pathspec elsewhere, the log.
    let diff = ok(
        &env,
        json!({"command": "diff", "refs": ["HEAD~2"], "path": "a.txt"}),
    );
    assert!(diff.contains("+unstaged"), "{diff}");
    let log = ok(&env, json!({"command": "log", "n": 1}));
    assert!(log.contains("oops"), "{log}");
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let env = repo("best_effort");
    std::fs::write(env.root.join("outside.txt"), "out\n").unwrap();
    std::os::unix::fs::symlink(env.root.join("outside.txt"), env.ws.join("link")).unwrap();
    let outside = env.root.join("outside.txt").display().to_string();
    for (args, want) in [
        (
            json!({"command": "log", "path": outside.as_str()}),
            "outside the workspace",
        ),
        (
            json!({"command": "log", "path": "/etc/passwd"}),
            "forbidden",
        ),
        (json!({"command": "log", "path": "../outside.txt"}), "`..`"),
        (
            json!({"command": "blame", "path": "src/../../outside.txt"}),
            "`..`",
        ),
        (
            json!({"command": "show", "ref": "HEAD", "path": "link"}),
            "outside the workspace",
        ),
        (
            json!({"command": "log", "path": "~/x"}),
            "relative to the workspace",
        ),
        (
            json!({"command": "show", "ref": "HEAD:../outside.txt"}),
            "`..`",
        ),
    ] {
        let why = denied(&env, args.clone());
        assert!(why.contains(want), "{args}: {why}");
    }
}

#[test]
fn a_git_link_pointing_outside_is_refused() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"readonly\"\n");
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    git(&env, &elsewhere, &["init", "-q", "-b", "main"]);
    std::fs::write(
        env.ws.join(".git"),
        format!("gitdir: {}\n", elsewhere.join(".git").display()),
    )
    .unwrap();
    // In the sandbox git cannot even open it; without, it is outside.
    for confinement in ["best_effort", "off"] {
        env.config(&format!(
            "[security]\nautonomy = \"readonly\"\nconfinement = \"{confinement}\"\n"
        ));
        for command in ["status", "log"] {
            let why = denied(&env, json!({ "command": command }));
            assert!(why.contains(&elsewhere.display().to_string()), "{why}");
        }
    }
}

#[test]
fn not_a_repository_fails_with_gits_message() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"readonly\"\n");
    let (r, v) = run(&env, json!({"command": "status"}));
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["status"], "failed", "{v}");
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("not a git repository"),
        "{v}"
    );
}

#[test]
fn a_model_turn_uses_the_git_tool_under_readonly() {
    let env = repo("best_effort");
    env.mock("git_tool.toml", "", "[security]\nautonomy = \"readonly\"\n");
    let r = env.run(&["agent", "-m", "what changed in the last commit?"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("second: shout beta"), "{r:?}");
    assert!(r.stdout.contains("alpha\nBETA\ngamma\ndelta"), "{r:?}");
    let rc = env.receipts();
    assert_eq!(rc.len(), 2, "{rc:?}");
    assert!(
        rc.iter()
            .all(|r| r["tool"] == "git" && r["status"] == "allowed"),
        "{rc:?}"
    );
    // The model offered the tool with its schema.
    let req = &env.requests()[0];
    assert!(req.to_string().contains("\"git\""), "{req}");

    std::fs::write(env.ws.join(".env"), "API_TOKEN=hunter2-secret\n").unwrap();
    git(&env, &env.ws, &["add", "-f", ".env"]);
    git(&env, &env.ws, &["commit", "-q", "-m", "env"]);
    let r = env.run(&["agent", "-m", "show me the secret"]);
    assert!(!r.stdout.contains("hunter2"), "{r:?}");
    let rc = env.receipts();
    assert_eq!(rc.last().unwrap()["status"], "denied", "{rc:?}");
}

/// `log`'s filters: `author` and `grep` (the message) as fixed text in any
/// case, `include_diff` with each commit's patch, bounded; all judged as
/// the rest of `log`.
#[test]
fn log_filters_by_author_and_message_and_shows_patches() {
    let env = repo("best_effort");
    let ws = env.ws.clone();
    std::fs::write(ws.join("b.txt"), "bee\n").unwrap();
    git(&env, &ws, &["add", "b.txt"]);
    git(
        &env,
        &ws,
        &[
            "-c",
            "user.name=Ada Lovelace",
            "commit",
            "-q",
            "-m",
            "Add the bee file (x.*)",
        ],
    );
    let by_author = ok(&env, json!({"command": "log", "author": "ada"}));
    assert_eq!(by_author.lines().count(), 1, "{by_author}");
    assert!(
        by_author.contains("Ada Lovelace: Add the bee file"),
        "{by_author}"
    );
    let by_t = ok(&env, json!({"command": "log", "author": "T <t@"}));
    assert_eq!(by_t.lines().count(), 2, "{by_t}");
    let by_msg = ok(&env, json!({"command": "log", "grep": "SHOUT"}));
    assert_eq!(by_msg.lines().count(), 1, "{by_msg}");
    assert!(by_msg.contains("second: shout beta"), "{by_msg}");
    // Fixed text: regex syntax matches itself only.
    let fixed = ok(&env, json!({"command": "log", "grep": "(x.*)"}));
    assert_eq!(fixed.lines().count(), 1, "{fixed}");
    let none = ok(&env, json!({"command": "log", "grep": "s.*t"}));
    assert_eq!(none.lines().count(), 0, "{none}");
    let with_diff = ok(
        &env,
        json!({"command": "log", "n": 1, "grep": "shout", "include_diff": true}),
    );
    assert!(
        with_diff.contains("second: shout beta") && with_diff.contains("+BETA"),
        "{with_diff}"
    );
    let plain = ok(&env, json!({"command": "log", "n": 1, "grep": "shout"}));
    assert!(!plain.contains("+BETA"), "{plain}");
    for (args, want) in [
        (
            json!({"command": "log", "n": 21, "include_diff": true}),
            "the most is 20",
        ),
        (json!({"command": "log", "author": ""}), "1 to 200 bytes"),
        (json!({"command": "log", "grep": "a\nb"}), "control"),
        (json!({"command": "diff", "author": "x"}), "does not apply"),
    ] {
        let why = denied(&env, args.clone());
        assert!(why.contains(want), "{args}: {why}");
    }
    // A repository that tracks a secret-named file: the patches would show
    // it, so the gate refuses them; the plain log still runs.
    std::fs::write(ws.join(".env"), "API_TOKEN=hunter2-secret\n").unwrap();
    git(&env, &ws, &["add", "-f", ".env"]);
    git(&env, &ws, &["commit", "-q", "-m", "the env file"]);
    let (r, v) = run(&env, json!({"command": "log", "include_diff": true}));
    assert_eq!(v["status"], "denied", "{r:?}");
    assert!(!r.stdout.contains("hunter2") && !r.stderr.contains("hunter2"));
    let log = ok(&env, json!({"command": "log", "grep": "env"}));
    assert!(log.contains("the env file"), "{log}");
}
