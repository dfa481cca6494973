//! The workspace is where you are: a run started inside a git work tree
//! works there, `-w` overrides, `workspace_dir = "."` is the current
//! directory, and otherwise the configured workspace is named on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;

fn run_in(env: &Env, dir: &Path, args: &[&str]) -> Run {
    env.command(args).current_dir(dir).output().unwrap().into()
}

fn read(env: &Env, dir: &Path, extra: &[&str]) -> (Run, Value) {
    let mut args = vec!["tool", "run", "file_read"];
    args.extend_from_slice(extra);
    args.extend(["--json", r#"{"path": "marker.txt"}"#]);
    let r = run_in(env, dir, &args);
    let v = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
    (r, v)
}

fn workspace_notes(r: &Run) -> usize {
    r.stderr
        .lines()
        .filter(|l| l.contains("latchclaw: warn: [workspace_configured] workspace "))
        .count()
}

fn repo(env: &Env, name: &str, marker: &str) -> std::path::PathBuf {
    let dir = env.root.join(name);
    std::fs::create_dir_all(dir.join("src/deep")).unwrap();
    std::fs::write(dir.join("marker.txt"), marker).unwrap();
    git(&dir, &["init", "-q"]);
    dir
}

#[test]
fn a_run_inside_a_git_work_tree_works_there() {
    let env = Env::new();
    env.config("");
    std::fs::write(env.ws.join("marker.txt"), "configured\n").unwrap();
    let repo = repo(&env, "proj", "in the repo\n");
    for dir in [repo.clone(), repo.join("src/deep")] {
        let (r, v) = read(&env, &dir, &[]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(output(&v), "in the repo\n", "{dir:?}: {v}");
        assert_eq!(workspace_notes(&r), 0, "{r:?}");
    }
    // The gate's boundary is the work tree: a path out of it is refused.
    let r = run_in(
        &env,
        &repo,
        &[
            "tool",
            "run",
            "file_read",
            "--json",
            r#"{"path": "../home/ws/marker.txt"}"#,
        ],
    );
    assert_eq!(r.code, 4, "{r:?}");
    // `policy check` judges against the same workspace.
    let r = run_in(
        &env,
        &repo.join("src"),
        &[
            "policy",
            "check",
            "file_read",
            "--json",
            r#"{"path": "marker.txt"}"#,
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    // -w overrides the work tree.
    let (r, v) = read(&env, &repo, &["-w", env.ws.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), "configured\n", "{v}");
}

#[test]
fn elsewhere_the_configured_workspace_is_used_and_named_once() {
    let env = Env::new();
    env.config("");
    std::fs::write(env.ws.join("marker.txt"), "configured\n").unwrap();
    let plain = env.root.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (r, v) = read(&env, &plain, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), "configured\n", "{v}");
    assert_eq!(workspace_notes(&r), 1, "{r:?}");
    assert!(r.stderr.contains(env.ws.to_str().unwrap()), "{r:?}");
    // From inside the configured workspace there is nothing to say.
    let (r, _) = read(&env, &env.ws, &[]);
    assert_eq!(workspace_notes(&r), 0, "{r:?}");
    // The agent names it too, and -q silences it.
    let a = run_in(&env, &plain, &["agent", "-m", "hello"]);
    assert_eq!(a.code, 0, "{a:?}");
    assert_eq!(workspace_notes(&a), 1, "{a:?}");
    let q = run_in(&env, &plain, &["agent", "-q", "-m", "hello"]);
    assert_eq!(workspace_notes(&q), 0, "{q:?}");
}

#[test]
fn workspace_dir_dot_is_the_current_directory() {
    let env = Env::new();
    std::fs::write(env.state.join("config.toml"), "workspace_dir = \".\"\n").unwrap();
    let here = env.root.join("here");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::write(here.join("marker.txt"), "here\n").unwrap();
    let (r, v) = read(&env, &here, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), "here\n", "{v}");
    assert_eq!(workspace_notes(&r), 0, "{r:?}");
}

#[test]
fn a_home_or_state_dir_that_is_a_work_tree_is_not_taken() {
    let env = Env::new();
    env.config("");
    std::fs::write(env.ws.join("marker.txt"), "configured\n").unwrap();
    // A dotfiles repository: the whole home is a work tree.
    std::fs::write(env.home.join("marker.txt"), "home\n").unwrap();
    git(&env.home, &["init", "-q"]);
    let (r, v) = read(&env, &env.home, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), "configured\n", "{v}");
    assert_eq!(workspace_notes(&r), 1, "{r:?}");
    assert!(r.stderr.contains("home directory"), "{r:?}");
}

#[test]
fn an_approval_from_a_work_tree_is_rerun_there() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"supervised\"");
    let repo = repo(&env, "proj", "x\n");
    // A write: it waits for approval under supervised.
    let r = run_in(
        &env,
        &repo,
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "touch out.txt"}"#,
        ],
    );
    assert_eq!(r.code, 4, "{r:?}");
    let canon = std::fs::canonicalize(&repo).unwrap();
    let w = format!("-w '{}'", canon.display());
    assert!(
        r.stderr.contains(&w),
        "the rerun line names the work tree: {r:?}"
    );
    let id = r
        .stderr
        .split_whitespace()
        .find(|w| w.starts_with("approval-"))
        .unwrap()
        .trim_end_matches([',', ')', '('])
        .to_string();
    assert_eq!(env.run(&["approve", &id, "--yes"]).code, 0);
    // The same call started in another work tree is another call: the
    // approval is not used there.
    let other = self::repo(&env, "other", "y\n");
    let there = run_in(
        &env,
        &other,
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command":"touch out.txt"}"#,
        ],
    );
    assert_eq!(there.code, 4, "{there:?}");
    assert!(!other.join("out.txt").exists());
    // Run again as told, from somewhere else: it acts in the work tree.
    let again = env.run(&[
        "tool",
        "run",
        "shell",
        "-w",
        canon.to_str().unwrap(),
        "--json",
        r#"{"command":"touch out.txt"}"#,
    ]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(repo.join("out.txt").exists());
    assert!(!env.ws.join("out.txt").exists());
}

/// An agent's pending call runs only in the workspace it was asked in:
/// `approve` names it in the resume command, a resume from elsewhere does
/// not run it there, and one with `-w` runs it where it was asked.
#[test]
fn a_resumed_approval_runs_where_it_was_asked() {
    let env = Env::new();
    env.mock(
        "forgets_approved.toml",
        "",
        "[channels.cli]\ntools_allow = [\"file_write\", \"time\"]\n",
    );
    let repo = repo(&env, "proj", "x\n");
    let r = run_in(&env, &repo, &["agent", "-m", "write the report", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    let id = v["tool_calls"][0]["pending_approval"]
        .as_str()
        .unwrap()
        .to_string();
    let a = env.run(&["approve", &id, "--yes"]);
    let canon = std::fs::canonicalize(&repo).unwrap();
    assert!(
        a.stdout
            .contains(&format!("--resume {conv} -w '{}'", canon.display())),
        "{a:?}"
    );
    // From the configured workspace: not this call's workspace.
    let elsewhere = run_in(&env, &env.ws, &["agent", "--resume", &conv, "--json"]);
    assert_eq!(elsewhere.code, 0, "{elsewhere:?}");
    assert!(!env.ws.join("report.txt").exists());
    assert!(!repo.join("report.txt").exists());
    let w = canon.to_str().unwrap();
    let here = env.run(&["agent", "--resume", &conv, "-w", w, "--json"]);
    assert_eq!(here.code, 0, "{here:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("report.txt")).unwrap(),
        "quarterly numbers"
    );
}

/// Red-team round: a work tree that holds the home, one another user owns
/// (a `.git` planted in a shared parent), and a world-writable one are not
/// taken; `workspace_dir = "."` refuses the home outright.
#[test]
fn work_trees_someone_else_could_have_made_or_that_hold_home_are_not_taken() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    env.config("");
    std::fs::write(env.ws.join("marker.txt"), "configured\n").unwrap();
    // The home inside a work tree (HOME=$PWD/.home setups).
    let outer = env.root.join("outer");
    std::fs::create_dir_all(outer.join("proj")).unwrap();
    std::fs::write(outer.join("marker.txt"), "outer\n").unwrap();
    git(&outer, &["init", "-q"]);
    let r: Run = env
        .command(&[
            "tool",
            "run",
            "file_read",
            "--json",
            r#"{"path": "marker.txt"}"#,
        ])
        .current_dir(outer.join("proj"))
        .env("HOME", &outer)
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("configured"), "{r:?}");
    assert!(r.stderr.contains("home directory"), "{r:?}");
    // A .git another user owns.
    let shared = env.root.join("shared");
    std::fs::create_dir_all(shared.join("scratch")).unwrap();
    std::fs::write(shared.join("marker.txt"), "someone else's\n").unwrap();
    git(&shared, &["init", "-q"]);
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534", shared.join(".git").to_str().unwrap()])
        .status();
    if chown.is_ok_and(|s| s.success()) {
        let (r, v) = read(&env, &shared.join("scratch"), &[]);
        assert_eq!(output(&v), "configured\n", "{r:?}");
        assert!(r.stderr.contains("another user"), "{r:?}");
    } else {
        skip("chown to another uid needs root");
    }
    // A world-writable top (as /tmp is).
    let open = env.root.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::write(open.join("marker.txt"), "anyone's\n").unwrap();
    git(&open, &["init", "-q"]);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (r, v) = read(&env, &open, &[]);
    assert_eq!(output(&v), "configured\n", "{r:?}");
    assert!(r.stderr.contains("writable by every user"), "{r:?}");
    // workspace_dir = "." started in the home is an error, not the home.
    std::fs::write(env.state.join("config.toml"), "workspace_dir = \".\"\n").unwrap();
    let r = run_in(
        &env,
        &env.home,
        &[
            "tool",
            "run",
            "file_read",
            "--json",
            r#"{"path": "marker.txt"}"#,
        ],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("home directory"), "{r:?}");
}
