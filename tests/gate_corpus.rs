//! The hostile corpus (`tests/hostile_corpus.jsonl`): every case goes through
//! `latchclaw policy check` on the real binary in a workspace laid out with
//! the traps the cases refer to (links out, loops, hard links, forbidden
//! directories inside the workspace, the state dir and state files moved into
//! the workspace, files named like options, planted repositories and patches
//! that turn files into links, secret-named files, a repository that
//! tracks one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, commit_all, lit, write_files};
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::Path;

fn lay_out(env: &Env) -> std::path::PathBuf {
    let ws = &env.ws;
    let out = env.home.join("outside");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("secret.txt"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    std::fs::write(env.home.join(".ssh/id_rsa"), "KEY").unwrap();
    write_files(
        ws,
        &[
            ("a.txt", "alpha\nfoo\n"),
            ("README.md", "# readme\n"),
            ("notes.txt", "notes sudo\n"),
            ("rm-notes.txt", "rm notes\n"),
            ("src/main.rs", "fn main() {}\n"),
            ("private/key", "k"),
            ("script.sh", "ls\n"),
            (".git/hooks/README", ""),
            // Workspace configuration latchclaw reads (skills), and a tree
            // that would land one where a copy or a move puts it.
            (
                ".latchclaw/skills/demo/SKILL.md",
                "---\nname: demo\ndescription: d\n---\nbody\n",
            ),
            (
                "plant-skill/.latchclaw/skills/demo/SKILL.md",
                "---\nname: demo\ndescription: d\n---\nevil\n",
            ),
            // A key inside the workspace, under a forbidden path of its own.
            (".ssh/id_rsa", "WS-KEY"),
            // Files named like options, waiting for a glob to expand them into
            // an argv (`cd plant-sort && sort *`).
            ("plant-sort/--compress-program=sh", ""),
            ("plant-sort/a.txt", "b\na\n"),
            ("plant-ls/-LR", ""),
            ("plant-grep/-R", ""),
            ("plant-find/-delete", ""),
            ("plant-git/--ext-diff", ""),
            ("plant-git/--output=x", ""),
            ("plant-git/a.txt", ""),
            ("plant-sed/--expression=1e sh", ""),
            ("plant-sed/a.txt", "a\n"),
            // Names full of shell syntax: with no shell re-reading the argv
            // they are just names.
            ("plant-meta/$(id)", ""),
            ("plant-meta/a;rm a.txt", ""),
            ("plant-meta/`id`", ""),
            ("plant-meta/x y", ""),
            // A bare repository whose config would start a program if git
            // discovered it, and a template that plants a hook.
            ("plant-bare/HEAD", "ref: refs/heads/main\n"),
            (
                "plant-bare/config",
                "[core]\n\tbare = true\n\tfsmonitor = touch pwned\n[alias]\n\tst = !touch pwned\n",
            ),
            ("plant-bare/objects/info/.keep", ""),
            ("plant-bare/refs/heads/.keep", ""),
            ("plant-tmpl/hooks/post-checkout", "#!/bin/sh\ntouch pwned\n"),
            // A patch that creates `up` as a symlink to the workspace's parent.
            (
                "evil.patch",
                "diff --git a/up b/up\nnew file mode 120000\nindex 0000000..a96aa0e\n\
                 --- /dev/null\n+++ b/up\n@@ -0,0 +1 @@\n+..\n\\ No newline at end of file\n",
            ),
            // NUL-separated names for `--files0-from`: the names are read at run time.
            ("names0", "/etc/passwd\0"),
            // `swap.patch` turns the regular file `victim.txt` into a link out.
            ("victim.txt", "hello\n"),
            (
                "swap.patch",
                "diff --git a/victim.txt b/victim.txt\ndeleted file mode 100644\n\
                 index ce01362..0000000\n--- a/victim.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n\
                 diff --git a/victim.txt b/victim.txt\nnew file mode 120000\nindex 0000000..76958f2\n\
                 --- /dev/null\n+++ b/victim.txt\n@@ -0,0 +1 @@\n+../outside/secret.txt\n\
                 \\ No newline at end of file\n",
            ),
            // latchclaw's own state, configured inside the workspace below.
            ("data/memory.sqlite", "SQLite format 3\0"),
            ("logs/tool_receipts.log", "{}\n"),
            // Secret-named files and their innocent neighbours.
            (".env", "KEY=1\n"),
            (".envrc", "export KEY=1\n"),
            ("deploy/.env.local", "KEY=2\n"),
            ("id_rsa", "-----BEGIN OPENSSH PRIVATE KEY-----\n"),
            ("id_rsa.pub", "ssh-rsa AAAA\n"),
            ("tls/server.key", "k\n"),
            ("tls/cert.pem", "c\n"),
            ("credentials.json", "{}\n"),
            (".aws/credentials", "[default]\n"),
            (".npmrc", "//r/:_authToken=t\n"),
            (".netrc", "machine h login u password p\n"),
            ("secrets.yaml", "k: v\n"),
            ("cert.p12", "p\n"),
            ("env.txt", "KEY notes\n"),
            ("keys.md", "KEY list\n"),
            (".envs/readme.txt", "a directory named like a secret\n"),
            (
                ".git/config",
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
                 [remote \"origin\"]\n\turl = https://u:t@example.invalid/r.git\n",
            ),
            ("app/.env", "KEY=3\n"),
            ("app/server.key", "k\n"),
            ("app/main.rs", "// KEY\n"),
            ("app/.git/config", "[core]\n\tbare = false\n"),
            // Enough of a repository for git to use it (it asks git).
            (".git/HEAD", "ref: refs/heads/main\n"),
            (".git/objects/info/.keep", ""),
            (".git/refs/heads/.keep", ""),
            ("app/.git/HEAD", "ref: refs/heads/main\n"),
            ("app/.git/objects/info/.keep", ""),
            ("app/.git/refs/heads/.keep", ""),
            ("plant-tracked/.npmrc", "//r/:_authToken=t\n"),
            ("plant-tracked/src/a.rs", "fn a() {}\n"),
        ],
    );
    // Repositories planted in the workspace whose git data or work tree
    // is outside it.
    for d in ["plant-wt/.git/objects/info", "plant-wt/.git/refs/heads"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("plant-wt/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        ws.join("plant-wt/.git/config"),
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n",
            out.display()
        ),
    )
    .unwrap();
    // A repository whose own config names programs that even `git status`
    // starts (a clean filter, diff drivers), switched on by `.gitattributes`.
    for d in [
        "plant-filter/.git/objects/info",
        "plant-filter/.git/refs/heads",
    ] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    for (f, text) in [
        ("plant-filter/.git/HEAD", "ref: refs/heads/main\n"),
        (
            "plant-filter/.git/config",
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
             [filter \"x\"]\n\tclean = touch pwned && cat\n\tsmudge = touch pwned && cat\n\
             [diff \"x\"]\n\tcommand = touch pwned\n\ttextconv = touch pwned && cat\n",
        ),
        ("plant-filter/.gitattributes", "* filter=x diff=x\n"),
        ("plant-filter/a.txt", "a\n"),
    ] {
        std::fs::write(ws.join(f), text).unwrap();
    }
    std::fs::create_dir_all(ws.join("plant-gitfile")).unwrap();
    std::fs::write(
        ws.join("plant-gitfile/.git"),
        format!("gitdir: {}\n", out.join("repo.git").display()),
    )
    .unwrap();
    // A repository that tracks a secret-named file.
    let tracked = ws.join("plant-tracked");
    commit_all(&tracked);
    symlink(out.join("secret.txt"), ws.join("link-out")).unwrap();
    for d in ["plant-ls/sub", "plant-grep/sub"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
        symlink(&out, ws.join(d).join("out")).unwrap();
    }
    symlink(&out, ws.join("dir-out")).unwrap();
    symlink(out.join("not-yet"), ws.join("dangling")).unwrap();
    symlink("loop-b", ws.join("loop-a")).unwrap();
    symlink("loop-a", ws.join("loop-b")).unwrap();
    symlink("/etc", ws.join("etc-link")).unwrap();
    std::fs::hard_link(out.join("secret.txt"), ws.join("hard")).unwrap();
    env.config(&format!(
        "file_write_max_bytes = 65536\n[security]\nforbidden_paths = [\"/etc\", \"/sys\", \"/boot\", \"/proc\", \"/dev\", \"/root\", \"~/.ssh\", {}, {}]\n\
         [memory]\npath = {}\n[receipts]\npath = {}\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\", \"grep\", \"git\", \"memory_store\", \"memory_recall\", \"memory_forget\", \"ask_user\", \"pdf_extract\"]\n\
         [tools.http]\nallowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n\
         [tools.web_search]\nprovider = \"searxng\"\nurl = \"http://127.0.0.1:9/searx\"\n",
        lit(&ws.join("private")),
        lit(&ws.join(".ssh")),
        lit(&ws.join("data/memory.sqlite")),
        lit(&ws.join("logs/tool_receipts.log"))
    ));
    out
}

/// Per-case traps; a link target may name `$STATE` or `$OUT`.
fn setup(ws: &Path, actions: &Value, state: &str, outside: &str) {
    for a in actions.as_array().into_iter().flatten() {
        if let Some([t, l]) = a["symlink"].as_array().map(Vec::as_slice) {
            let link = ws.join(l.as_str().unwrap());
            let target = t
                .as_str()
                .unwrap()
                .replace("$STATE", state)
                .replace("$OUT", outside);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(target, link).unwrap();
            }
        }
    }
}

#[test]
fn hostile_corpus_is_denied_and_everyday_commands_pass() {
    let env = Env::new();
    let out = lay_out(&env);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_corpus.jsonl"),
    )
    .unwrap();
    let state = env.state.display().to_string();
    let outside = out.display().to_string();
    let cases: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deny = cases.iter().filter(|c| c["expect"] == "deny").count();
    let allow = cases.iter().filter(|c| c["expect"] == "allow").count();
    assert!(
        deny >= 1100 && allow >= 140,
        "corpus too small: {deny} deny, {allow} allow"
    );
    // The eight attack classes, each tried at every autonomy level.
    for class in [
        "c1-parse-differential",
        "c2-option-abuse",
        "c3-planted-files",
        "c4-state-and-secrets",
        "c5-races-and-links",
        "c6-process-control",
        "c7-forbidden-inside",
        "c8-secret-files",
    ] {
        let of_class: Vec<&Value> = cases.iter().filter(|c| c["category"] == class).collect();
        assert!(of_class.len() >= 15, "{class}: {} cases", of_class.len());
        for level in ["readonly", "supervised", "full"] {
            assert!(
                of_class.iter().any(|c| c["autonomy"] == level),
                "{class} has no case under {level}"
            );
        }
    }
    for c in &cases {
        setup(&env.ws, &c["setup"], &state, &outside);
    }
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            let (env, failures, state, outside) = (&env, &failures, &state, &outside);
            s.spawn(move || {
                for c in chunk {
                    let args = c["args"]
                        .to_string()
                        .replace("$STATE", state)
                        .replace("$OUT", outside);
                    let tool = c["tool"].as_str().unwrap();
                    let autonomy = c["autonomy"].as_str().unwrap_or("supervised");
                    let r = env.run(&[
                        "policy",
                        "check",
                        tool,
                        "--json",
                        &args,
                        "--autonomy",
                        autonomy,
                    ]);
                    let got: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
                    // A build without `pdf` refuses every pdf_extract call,
                    // saying why, whatever its path.
                    let not_built = tool == "pdf_extract" && !cfg!(feature = "pdf");
                    let expect = if not_built {
                        Value::from("deny")
                    } else {
                        c["expect"].clone()
                    };
                    let reason = got["reason"].as_str().unwrap_or("");
                    // A denial says its kind; nothing else carries one.
                    let kinds = [
                        "estop", "unavailable", "not_on_channel", "arguments", "path",
                        "network", "command", "confinement", "autonomy",
                    ];
                    let typed = match got["decision"].as_str() {
                        Some("deny") => got["refusal"].as_str().is_some_and(|k| kinds.contains(&k)),
                        _ => got.get("refusal").is_none(),
                    };
                    if r.code != 0
                        || got["decision"] != expect
                        || !typed
                        || (not_built && !reason.contains("is not in this build"))
                    {
                        failures.lock().unwrap().push(format!(
                            "[{}] {tool} {args} under {autonomy}: expected {}, got {} (refusal {}) ({})",
                            c["category"].as_str().unwrap_or(""),
                            expect,
                            got["decision"],
                            got["refusal"],
                            got["reason"].as_str().unwrap_or(&r.stderr)
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
