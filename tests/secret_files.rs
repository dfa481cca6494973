//! Secret-named files by effect on the real binary: each holds a canary that
//! no tool output, error, receipt, memory or provider request may ever
//! carry, whatever path, link, glob, walk or git view leads to it; the
//! neighbours (`env.txt`, `id_rsa.pub`, names in a listing) stay usable;
//! `[security] secret_files_allow` lets listed files through.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BASIC_TOOLS, Env, Run, commit_all, git, lit, write_files};
use serde_json::Value;
use std::os::unix::fs::symlink;

/// Secret-named files, each with its own canary.
const SECRETS: &[&str] = &[
    ".env",
    ".envrc",
    ".ENV.production",
    "deploy/.env.local",
    "id_rsa",
    "ID_ED25519",
    "tls/server.key",
    "tls/cert.pem",
    "putty.ppk",
    ".netrc",
    ".git-credentials",
    "credentials.json",
    ".aws/credentials",
    "cert.p12",
    "cert.pfx",
    ".npmrc",
    ".pypirc",
    "secrets.yaml",
];

fn canary(path: &str) -> String {
    format!("CANARY-{}", path.replace(['/', '.'], "_"))
}

/// The workspace: the secrets, their neighbours, a link to `.env`, a git
/// repository at the top whose config holds a token, and `proj/`, a
/// repository that tracks its `.npmrc`.
fn env_with(security: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 10\n[security]\nautonomy = \"full\"\n{security}\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    let ws = &env.ws;
    for s in SECRETS {
        let p = ws.join(s);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("KEY {}\n", canary(s))).unwrap();
    }
    write_files(
        ws,
        &[
            ("env.txt", "KEY=plain env notes\n"),
            ("keys.md", "KEY list: none here\n"),
            ("id_rsa.pub", "ssh-rsa AAAAB3Nza public KEY\n"),
            ("notes.txt", "KEY: the notes\n"),
            ("src/main.rs", "// KEY in code\n"),
            (".env.example", "example only: CANARY-example\n"),
            (".envs/readme.txt", "a directory named like a secret\n"),
        ],
    );
    symlink(".env", ws.join("link.txt")).unwrap();
    git(ws, &["init", "-q"]);
    git(ws, &["config", "user.name", "Test Person"]);
    git(ws, &["config", "user.email", "t@example.invalid"]);
    git(
        ws,
        &[
            "config",
            "remote.origin.url",
            "https://u:CANARY-git-token@example.invalid/r.git",
        ],
    );
    symlink(".git", ws.join("gitlink")).unwrap();
    let proj = ws.join("proj");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::write(proj.join(".npmrc"), "registry note CANARY-tracked-one\n").unwrap();
    std::fs::write(proj.join("src/a.rs"), "fn a() {}\n").unwrap();
    commit_all(&proj);
    std::fs::write(proj.join(".npmrc"), "registry note CANARY-tracked-two\n").unwrap();
    std::fs::write(proj.join("src/a.rs"), "fn a() { b() }\n").unwrap();
    env
}

fn assert_no_canary(what: &str, r: &Run) {
    assert!(
        !r.stdout.contains("CANARY") && !r.stderr.contains("CANARY"),
        "{what} leaked a canary: {r:?}"
    );
}

/// Denied (exit 4) with the rule named.
fn assert_refused(what: &str, r: &Run, v: &Value, rule: &str) {
    assert_eq!(r.code, 4, "{what}: {r:?}");
    assert_eq!(v["status"], "denied", "{what}: {v}");
    let reason = v["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("secret-named") && reason.contains(&format!("\"{rule}\"")),
        "{what}: {reason}"
    );
    assert_no_canary(what, r);
}

/// `command` run through the shell tool: denied (exit 4) as a secret, and
/// nothing of one in its output.
fn shell_refused_as_secret(env: &Env, command: &str) {
    let (r, v) = env.shell(command);
    assert_eq!(r.code, 4, "{command}: {r:?}");
    assert!(
        v["reason"].as_str().unwrap_or("").contains("secret-named"),
        "{command}: {v}"
    );
    assert_no_canary(command, &r);
}

#[test]
fn secret_files_are_refused_by_every_tool_with_the_rule_named() {
    let env = env_with("");
    for (path, rule) in [
        (".env", ".env*"),
        ("./.env", ".env*"),
        ("src/../.env", ".env*"),
        (".envrc", ".env*"),
        (".ENV.production", ".env*"),
        (".Env", ".env*"),
        ("deploy/.env.local", ".env*"),
        ("link.txt", ".env*"),
        ("id_rsa", "id_rsa*"),
        ("ID_ED25519", "id_ed25519*"),
        ("tls/server.key", "*.key"),
        ("tls/cert.pem", "*.pem"),
        ("putty.ppk", "*.ppk"),
        (".netrc", ".netrc"),
        (".git-credentials", ".git-credentials"),
        ("credentials.json", "credentials*"),
        (".aws/credentials", "credentials*"),
        ("cert.p12", "*.p12"),
        ("cert.pfx", "*.pfx"),
        (".npmrc", ".npmrc"),
        (".pypirc", ".pypirc"),
        ("secrets.yaml", "secrets.*"),
        (".git/config", ".git/config"),
        ("gitlink/config", ".git/config"),
        ("proj/.git/config", ".git/config"),
        (".env.example", ".env*"),
    ] {
        let (r, v) = env.tool("file_read", serde_json::json!({ "path": path }));
        assert_refused(&format!("file_read {path}"), &r, &v, rule);
        let (r, v) = env.tool("file_list", serde_json::json!({ "path": path }));
        assert_refused(&format!("file_list {path}"), &r, &v, rule);
        let (r, v) = env.shell(&format!("cat {path}"));
        assert_refused(&format!("cat {path}"), &r, &v, rule);
    }
    // A write to a secret name is refused too, and changes nothing.
    let before = std::fs::read_to_string(env.ws.join(".env")).unwrap();
    for (name, args, rule) in [
        (
            "file_write",
            serde_json::json!({"path": ".env", "content": "X=1"}),
            ".env*",
        ),
        (
            "file_write",
            serde_json::json!({"path": "new/.npmrc", "content": "registry=x"}),
            ".npmrc",
        ),
        (
            "shell",
            serde_json::json!({"command": "echo X=1 > .env"}),
            ".env*",
        ),
        (
            "shell",
            serde_json::json!({"command": "echo X=1 >> .env"}),
            ".env*",
        ),
        (
            "shell",
            serde_json::json!({"command": "touch .pgpass"}),
            ".pgpass",
        ),
        (
            "shell",
            serde_json::json!({"command": "cp notes.txt .npmrc"}),
            ".npmrc",
        ),
    ] {
        let (r, v) = env.tool(name, args.clone());
        assert_refused(&format!("{name} {args}"), &r, &v, rule);
    }
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".env")).unwrap(),
        before
    );
    assert!(!env.ws.join("new").exists() && !env.ws.join(".pgpass").exists());
}

/// Every way a command line can name, expand to, redirect from or copy a
/// secret file: refused before anything runs, the canary nowhere.
#[test]
fn shell_spellings_of_a_secret_are_refused() {
    let env = env_with("");
    for command in [
        "head .env",
        "tail -n1 deploy/.env.local",
        "sed -n p .env",
        "sed 'r .env' notes.txt",
        "diff .env notes.txt",
        "cat < .env",
        "sort < id_rsa",
        "grep KEY .env",
        "grep -f .env notes.txt",
        "wc -c .env",
        "cat *",
        "cat .e*",
        "cat .[e]nv",
        "cat tls/*",
        "cat \"$HOME/ws/.env\"",
        "cat ~/ws/id_rsa",
        "cd deploy && cat .env.local",
        "cd .git && cat config",
        "cat .git/c*",
        "cp .env x.txt",
        "cp -r deploy copy",
        "mv .env x.txt",
        // A backup renames the destination over a secret: `tls/server`
        // backed up as `tls/server.key`.
        "cp -b -S .key notes.txt tls/server",
        "cp --suffix=.key notes.txt tls",
        "mv --backup=simple --suffix=.pem keys.md tls/cert",
        "git show HEAD:.env",
        "git config --list",
        "git config --get remote.origin.url",
        "git remote -v",
        "cd proj && git show HEAD:.npmrc",
        "cd proj && git show :0:.npmrc",
        "cd proj && git cat-file -p HEAD:.npmrc",
        "cd proj && git log -L1,1:.npmrc",
        "cd proj && git config --blob=HEAD:.npmrc --list",
        "cd proj && git diff",
        "cd proj && git diff HEAD -- .",
        "cd proj && git log -p",
        "cd proj && git log -SCANARY --oneline",
        "cd proj && git show",
        "cd proj && git grep Token",
        "cd proj && git status -v",
        "git -C proj diff",
    ] {
        shell_refused_as_secret(&env, command);
    }
    assert!(!env.ws.join("x.txt").exists() && !env.ws.join("copy").exists());
    assert!(env.ws.join(".env").exists());
    // An object id from `git ls-files -s` names the tracked secret's blob.
    let (r, v) = env.shell("cd proj && git ls-files -s");
    assert_eq!(r.code, 0, "{r:?}");
    let line = v["output"]
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.ends_with(".npmrc"))
        .unwrap()
        .to_string();
    let id = line.split_whitespace().nth(1).unwrap();
    for command in [
        format!("cd proj && git cat-file -p {id}"),
        format!("cd proj && git show {id}"),
        format!("cd proj && git diff {id} HEAD:src/a.rs"),
        format!("cd proj && git tag t {id}"),
    ] {
        let (r, v) = env.shell(&command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
        assert!(
            v["reason"].as_str().unwrap_or("").contains("object id"),
            "{command}: {v}"
        );
        assert_no_canary(&command, &r);
    }
}

/// Recursive reads run, and skip secret files (and git directories) even
/// when the caller asks for them by pattern.
#[test]
fn recursive_reads_skip_secret_files_and_find_the_rest() {
    let env = env_with("");
    std::fs::create_dir_all(env.ws.join("deploy2")).unwrap();
    std::fs::write(env.ws.join("deploy2/.env.local"), "KEY=CANARY-other\n").unwrap();
    std::fs::write(env.ws.join("deploy2/app.txt"), "app\n").unwrap();
    for (command, want) in [
        ("grep -rn KEY .", "notes.txt:1:KEY: the notes"),
        ("grep -r KEY", "keys.md"),
        ("grep -d recurse KEY .", "env.txt"),
        ("grep -rl --include=* KEY .", "notes.txt"),
        (
            "grep -rl --include=.env* --include=*.key KEY . || echo none",
            "none",
        ),
        ("grep -r -e CANARY -- . || echo none", "none"),
        ("grep -ri token . || echo none", "none"),
        ("cd .git && grep -r CANARY . || echo none", "none"),
        ("grep -r CANARY gitlink || echo none", "none"),
        (
            "diff -r deploy deploy2 || echo differ",
            "Only in deploy2: app.txt",
        ),
        (
            "diff deploy deploy2 || echo differ",
            "Only in deploy2: app.txt",
        ),
        ("ls -a", ".env\n"),
        ("ls -R tls", "server.key"),
        ("find . -name '.env*' | sort", "./.env\n"),
        ("cd proj && git diff -- src", "b()"),
        ("cd proj && git log -p --oneline -- src", "fn a"),
        ("cd proj && git diff --stat", ".npmrc"),
        ("cd proj && git grep fn -- src", "src/a.rs"),
        ("git config --get user.name", "Test Person"),
        ("git remote", "origin"),
        ("cat env.txt keys.md id_rsa.pub", "ssh-rsa"),
        ("cat .envs/readme.txt", "a directory named like a secret"),
        ("cat .git/HEAD", "ref:"),
    ] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 0, "{command}: {r:?}");
        let out = v["output"].as_str().unwrap_or("");
        assert!(out.contains(want), "{command}: {out}");
        assert_no_canary(command, &r);
    }
    // The listing names secret files and marks them; it never opens them.
    let (r, v) = env.tool(
        "file_list",
        serde_json::json!({"path": ".", "include_hidden": true}),
    );
    assert_eq!(r.code, 0, "{r:?}");
    let out = v["output"].as_str().unwrap();
    assert!(
        out.contains(".env  (") && out.contains("secret-named (rule \".env*\")"),
        "{out}"
    );
    assert!(out.contains("link.txt -> .env  [secret-named"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("id_rsa.pub") && !l.contains("secret")),
        "{out}"
    );
    assert_no_canary("file_list", &r);
    for path in ["env.txt", "keys.md", "id_rsa.pub", ".envs/readme.txt"] {
        let (r, _) = env.tool("file_read", serde_json::json!({ "path": path }));
        assert_eq!(r.code, 0, "{path}: {r:?}");
    }
    // Nothing of it reached the receipts either.
    let log = std::fs::read_to_string(env.state.join("tool_receipts.log")).unwrap();
    assert!(!log.contains("CANARY"), "receipts hold a canary");
}

#[test]
fn secret_files_allow_lets_listed_files_through_and_nothing_else() {
    let env = env_with(
        "secret_files_allow = [\".env.example\", \"tls/*.pem\", \".git/config\", \"proj/.npmrc\"]",
    );
    for (command, want) in [
        ("cat .env.example", "CANARY-example"),
        ("cat tls/cert.pem", "CANARY-tls_cert_pem"),
        ("git remote -v", "example.invalid/r.git"),
        ("cd proj && git diff", "CANARY-tracked-two"),
    ] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 0, "{command}: {r:?}");
        assert!(
            v["output"].as_str().unwrap().contains(want),
            "{command}: {v}"
        );
    }
    for command in ["cat tls/server.key", "cat .env", "cat sub/tls/cert.pem"] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
        assert_no_canary(command, &r);
        let _ = v;
    }
    let shown = env.run(&["config", "show"]);
    assert!(
        shown.stdout.contains(
            "secret_files_allow = [\".env.example\", \"tls/*.pem\", \".git/config\", \"proj/.npmrc\"]"
        ),
        "{shown:?}"
    );
    let policy = env.run(&["policy", "show", "--json"]);
    let p: Value = serde_json::from_str(&policy.stdout).unwrap();
    assert_eq!(p["secret_files_allow"][1], "tls/*.pem", "{p}");
    assert!(
        p["secret_files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == ".git/config"),
        "{p}"
    );
}

#[test]
fn bad_secret_files_allow_entries_name_the_key_and_what_is_allowed() {
    let env = Env::new();
    env.config(&format!(
        "[security]\nsecret_files_allow = [\"ok.pem\", \"/etc/x.pem\", \"../up.key\", \"fixtures/\"]\nforbidden_paths = [{}]\n",
        lit(&env.ws.join("private"))
    ));
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "security.secret_files_allow[1]: \"/etc/x.pem\" is not relative to the workspace",
        "security.secret_files_allow[2]: \"../up.key\" has an empty, \".\" or \"..\" component",
        "security.secret_files_allow[3]: \"fixtures/\" ends with \"/\"",
    ] {
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
    assert!(!r.stderr.contains("[0]"), "{r:?}");
}

/// The agent loop end to end: a model that asks for secrets gets refusals,
/// and no canary reaches the provider, memory, the receipts or the logs.
#[test]
fn an_agent_asking_for_secrets_never_sees_one() {
    let env = env_with("");
    let fixture = env.root.join("steal.toml");
    std::fs::write(
        &fixture,
        "[[script]]\n[[script.responses]]\ntool_calls = [\
         { name = \"file_read\", arguments = { path = \".env\" } },\
         { name = \"file_read\", arguments = { path = \"link.txt\" } },\
         { name = \"shell\", arguments = { command = \"cat id_rsa\" } },\
         { name = \"shell\", arguments = { command = \"grep -rn KEY .\" } },\
         { name = \"shell\", arguments = { command = \"cd proj && git diff\" } },\
         { name = \"file_list\", arguments = { path = \".\" } }]\n\
         [[script.responses]]\ntext = \"Results: {{tool_results}}\"\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    std::fs::write(
        env.state.join("config.toml"),
        format!(
            "default_provider = \"m\"\n{text}\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\nrecord_requests = {}\n",
            lit(&fixture),
            lit(&env.root.join("requests.jsonl"))
        ),
    )
    .unwrap();
    let r = env.run_env(
        &["agent", "-m", "show me the keys"],
        &[("LATCHCLAW_LOG", "debug")],
    );
    // Exit 4: calls were denied; the answer is still printed.
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stdout.contains("secret-named"), "{r:?}");
    assert!(
        r.stdout.contains("notes.txt:1:KEY"),
        "the search ran: {r:?}"
    );
    assert_no_canary("agent", &r);
    let requests = std::fs::read_to_string(env.root.join("requests.jsonl")).unwrap();
    assert!(!requests.is_empty() && !requests.contains("CANARY"));
    let log = std::fs::read_to_string(env.state.join("tool_receipts.log")).unwrap();
    assert!(!log.contains("CANARY"));
    let m = env.run(&["memory", "search", "KEY"]);
    assert_no_canary("memory search", &m);
    for f in ["memory.sqlite", "memory.sqlite-wal"] {
        let db = std::fs::read(env.state.join(f)).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&db).contains("CANARY"),
            "{f} holds a canary"
        );
    }
}

/// `-` is standard input to most programs but a file named `-` to some
/// options (git's `--ignore-revs-file`, `-O`, `-X`; `sort --random-source`;
/// `date -r`; `touch -r`): a `-` that leads to a secret is refused, and
/// with no such file `-` is judged as standard input, as before.
#[test]
fn a_file_named_dash_is_judged_where_a_program_would_read_it() {
    let env = env_with("");
    symlink(".env", env.ws.join("-")).unwrap();
    let commands = [
        "git blame --ignore-revs-file - notes.txt",
        "git log -O - -1",
        "git ls-files -X -",
        "sort -R --random-source=- notes.txt",
        "date -r -",
        "touch -r - notes.txt",
    ];
    for command in commands {
        shell_refused_as_secret(&env, command);
    }
    // A plain file of that name is judged like any other.
    std::fs::remove_file(env.ws.join("-")).unwrap();
    std::fs::write(env.ws.join("-"), "random bytes\n").unwrap();
    let (r, _) = env.shell("date -r - +%Y");
    assert_eq!(r.code, 0, "{r:?}");
}
