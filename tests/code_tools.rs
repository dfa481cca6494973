//! `grep`, `file_read` line ranges and `file_list` depth/glob/sort on the
//! real binary: what they find, their limits, and what they never show.
// The `code` feature (the minimal build refuses it: tests/features.rs).
#![cfg(feature = "code")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit, output};
use serde_json::Value;
use std::os::unix::fs::symlink;

const SECRET: &str = "CANARY-SECRET-7731";
const OUTSIDE: &str = "CANARY-OUTSIDE-4410";

/// A workspace with sources, an ignored build dir, a nested .gitignore
/// that re-includes, a binary file, a secret-named file, a .git dir, a
/// forbidden dir and symlinks planted to outside — all holding the word.
fn env_with(autonomy: &str, top: &str) -> Env {
    let env = Env::new();
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("leak.txt"), format!("needle {OUTSIDE}\n")).unwrap();
    let ws = &env.ws;
    for d in ["src/sub", "build", ".git", "private", "logs/keep"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {\n    let needle = 1;\n    println!(\"{needle}\");\n}\n// Needle in caps\n",
    )
    .unwrap();
    std::fs::write(ws.join("src/sub/notes.txt"), "a needle here\n").unwrap();
    std::fs::write(ws.join("build/out.txt"), "needle built\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "build/\n*.log\n").unwrap();
    std::fs::write(ws.join("logs/a.log"), "needle log a\n").unwrap();
    std::fs::write(ws.join("logs/keep/.gitignore"), "!*.log\n").unwrap();
    std::fs::write(ws.join("logs/keep/b.log"), "needle log b\n").unwrap();
    std::fs::write(ws.join("blob.bin"), b"needle\0\x01\x02").unwrap();
    std::fs::write(ws.join(".env"), format!("TOKEN=needle {SECRET}\n")).unwrap();
    std::fs::write(ws.join(".git/HEAD"), "needle in git\n").unwrap();
    std::fs::write(ws.join("private/p.txt"), "needle private\n").unwrap();
    symlink(&outside, ws.join("src/out-dir")).unwrap();
    symlink(outside.join("leak.txt"), ws.join("src/out-file.txt")).unwrap();
    env.config(&format!(
        "{top}\n[security]\nautonomy = \"{autonomy}\"\nforbidden_paths = [{}]\n",
        lit(&ws.join("private"))
    ));
    env
}

fn run(env: &Env, tool: &str, args: Value) -> (i32, Value) {
    let (r, v) = env.tool(tool, args);
    (r.code, v)
}

#[test]
fn grep_finds_lines_and_skips_what_it_must() {
    let env = env_with("readonly", "");
    let (code, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle", "case_sensitive": true, "context": 0}),
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "allowed", "readonly allows grep: {v}");
    assert_eq!(v["risk"], "low");
    let o = output(&v);
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(
        lines,
        [
            "logs/keep/b.log:1:needle log b",
            "src/main.rs:2:    let needle = 1;",
            "src/main.rs:3:    println!(\"{needle}\");",
            "src/sub/notes.txt:1:a needle here",
            "4 matching lines in 3 files (5 files searched; skipped: 2 ignored by .gitignore, \
             1 binary, 1 secret-named, 1 forbidden or latchclaw's state, 2 symlinks (not followed))",
        ],
        "{o}"
    );
    for never in [
        SECRET,
        OUTSIDE,
        "needle built",
        "needle log a",
        "in git",
        "private",
        "blob.bin",
    ] {
        assert!(!o.contains(never), "{never} in {o}");
    }
    assert_eq!(v["metadata"]["skipped"]["binary"], 1, "{v}");
    assert_eq!(v["metadata"]["skipped"]["secret"], 1, "{v}");
    assert_eq!(v["metadata"]["skipped"]["ignored"], 2, "{v}");
    assert_eq!(v["metadata"]["skipped"]["forbidden"], 1, "{v}");
    assert_eq!(v["metadata"]["truncated"], false, "{v}");

    // Case, context, files only, include and exclude globs.
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "^// needle", "path": "src", "context": 0}),
    );
    assert!(
        output(&v).starts_with("src/main.rs:5:// Needle in caps\n"),
        "{v}"
    );
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "let", "context": 1, "path": "src/main.rs", "case_sensitive": true}),
    );
    assert!(
        output(&v).starts_with(
            "src/main.rs-1-fn main() {\nsrc/main.rs:2:    let needle = 1;\nsrc/main.rs-3-    println"
        ),
        "{v}"
    );
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle", "files_only": true, "glob": "*.rs,*.txt", "exclude": "src/sub/**"}),
    );
    assert!(
        output(&v).starts_with("src/main.rs\n1 matching files"),
        "{v}"
    );
    // A bad pattern is the model's to fix.
    let (code, v) = run(&env, "grep", serde_json::json!({"pattern": "(unclosed"}));
    assert_eq!(code, 3, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("not a valid regular expression"),
        "{v}"
    );
}

#[test]
fn grep_limits_say_they_cut() {
    let env = env_with("readonly", "tool_output_max_bytes = 2048");
    let many: String = (0..500).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(env.ws.join("many.txt"), many).unwrap();
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle \\d+", "path": "many.txt", "max_matches": 3, "context": 0}),
    );
    let o = output(&v);
    assert!(
        o.starts_with("many.txt:1:needle 0\nmany.txt:2:needle 1\nmany.txt:3:needle 2\n3 matching"),
        "{o}"
    );
    assert!(o.contains("…[truncated: max_matches = 3 reached"), "{o}");
    assert_eq!(v["metadata"]["truncated"], true);
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle \\d+", "max_matches": 10000}),
    );
    let o = output(&v);
    assert!(o.len() <= 2048, "{}", o.len());
    assert!(
        o.contains("…[truncated: the output reached tool_output_max_bytes = 2048"),
        "{o}"
    );
    let (code, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "x", "max_matches": 0}),
    );
    assert_eq!(code, 3);
    assert!(
        v["error"].as_str().unwrap().contains("from 1 to 10000"),
        "{v}"
    );
    let (code, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "x", "context": 11}),
    );
    assert_eq!(code, 3, "{v}");
}

#[test]
fn grep_refuses_paths_the_gate_refuses() {
    let env = env_with("readonly", "");
    for (path, why) in [
        (".env", "secret-named"),
        ("private", "forbidden"),
        ("../outside", "outside the workspace"),
        ("src/out-dir", "outside the workspace"),
        ("/etc", "outside the workspace"),
    ] {
        let (code, v) = run(
            &env,
            "grep",
            serde_json::json!({"pattern": "needle", "path": path}),
        );
        assert_eq!(
            (code, v["status"].as_str()),
            (4, Some("denied")),
            "{path}: {v}"
        );
        let all = v.to_string();
        assert!(all.contains(why), "{path}: {all}");
        assert!(!all.contains(SECRET) && !all.contains(OUTSIDE), "{all}");
    }
    // A schema mistake never reaches the gate.
    let r = env.run(&["tool", "run", "grep", "--json", r#"{"path": "src"}"#]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("missing required argument \"pattern\""),
        "{r:?}"
    );
}

#[test]
fn file_read_ranges_and_numbers() {
    let env = env_with("readonly", "tool_output_max_bytes = 1024");
    let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(env.ws.join("long.txt"), &text).unwrap();
    let (_, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "start_line": 3, "end_line": 4, "line_numbers": true}),
    );
    assert_eq!(
        output(&v),
        "     3\tline 3\n     4\tline 4\n…[996 more lines after line 4; ask with start_line=5]"
    );
    let (_, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "start_line": 999}),
    );
    assert_eq!(output(&v), "line 999\nline 1000\n");
    // Whole, cut by the output limit at a line end, saying what is left.
    let (_, v) = run(&env, "file_read", serde_json::json!({"path": "long.txt"}));
    let o = output(&v);
    assert!(o.starts_with("line 1\nline 2\n"), "{o}");
    assert!(
        o.contains("…[truncated: showing the first 1017 of 8893 bytes (lines 1–125); 875 more lines; ask with start_line=126]"),
        "{o}"
    );
    let (_, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "start_line": 126, "end_line": 126}),
    );
    assert_eq!(
        output(&v),
        "line 126\n…[874 more lines after line 126; ask with start_line=127]"
    );
    // Bad line numbers fail in the tool (exit 3); a secret is the gate's (4).
    for (args, code_status, want) in [
        (
            serde_json::json!({"path": "long.txt", "start_line": 2000}),
            (3, "failed"),
            "past the end of long.txt (1000 lines)",
        ),
        (
            serde_json::json!({"path": "long.txt", "start_line": 0}),
            (3, "failed"),
            "of 1 or more",
        ),
        (
            serde_json::json!({"path": "long.txt", "start_line": 5, "end_line": 4}),
            (3, "failed"),
            "before",
        ),
        (
            serde_json::json!({"path": ".env", "start_line": 1}),
            (4, "denied"),
            "secret-named",
        ),
    ] {
        let (code, v) = run(&env, "file_read", args.clone());
        assert_eq!(
            (code, v["status"].as_str().unwrap()),
            code_status,
            "{args}: {v}"
        );
        assert!(v.to_string().contains(want), "{args}: {v}");
        assert!(!v.to_string().contains(SECRET));
    }
}

#[test]
fn file_list_depth_glob_sort_and_cap() {
    let env = env_with("readonly", "");
    std::fs::write(env.ws.join("src/big.rs"), "x".repeat(5000)).unwrap();
    let (_, v) = run(
        &env,
        "file_list",
        serde_json::json!({"path": "src", "depth": 2, "glob": "*.rs,*.txt", "sort": "size"}),
    );
    let o = output(&v);
    let lines: Vec<&str> = o.lines().collect();
    assert!(lines[1].starts_with("file  big.rs  (4.9 KiB)"), "{o}");
    assert!(
        o.contains("\nfile  main.rs") && o.contains("\nfile  sub/notes.txt"),
        "{o}"
    );
    assert!(
        o.starts_with("src:\n") && o.contains("\n(4 entries: 0 directories, 3 files, 1 links)"),
        "{o}"
    );
    // The file symlink to outside is listed by name (the glob matches it), never followed.
    assert!(!o.contains(OUTSIDE) && !o.contains("leak.txt  ("), "{o}");
    // Depth 1 is today's listing; .git and forbidden directories are named, not entered.
    let (_, v) = run(
        &env,
        "file_list",
        serde_json::json!({"depth": 5, "include_hidden": true}),
    );
    let o = output(&v);
    assert!(o.contains("dir   .git/") && !o.contains(".git/HEAD"), "{o}");
    assert!(o.contains("dir   private/") && !o.contains("p.txt"), "{o}");
    assert!(
        o.contains("file  .env  (") && o.contains("[secret-named"),
        "{o}"
    );
    assert!(!o.contains(SECRET));
    assert!(o.contains("file  logs/keep/b.log"), "{o}");
    let (_, v) = run(&env, "file_list", serde_json::json!({}));
    assert!(!output(&v).contains("src/main.rs"), "{v}");
    for (args, want) in [
        (serde_json::json!({"depth": 11}), "from 1 to 10"),
        (serde_json::json!({"limit": 0}), "from 1 to 2000"),
        (
            serde_json::json!({"sort": "date"}),
            "allowed: name, mtime, size",
        ),
        (serde_json::json!({"glob": "[x"}), "without its ]"),
    ] {
        let (code, v) = run(&env, "file_list", args.clone());
        assert_eq!(code, 3, "{args}: {v}");
        assert!(v.to_string().contains(want), "{args}: {v}");
    }
    // Over the walk cap: a deep listing stops and says so.
    for i in 0..200 {
        let d = env.ws.join(format!("wide/d{i:03}"));
        std::fs::create_dir_all(&d).unwrap();
        for j in 0..101 {
            std::fs::write(d.join(format!("f{j}")), "").unwrap();
        }
    }
    let (_, v) = run(
        &env,
        "file_list",
        serde_json::json!({"path": "wide", "depth": 2}),
    );
    let o = output(&v);
    assert!(
        o.contains("…[truncated: stopped after 20000 entries"),
        "{}",
        &o[o.len().saturating_sub(300)..]
    );
    assert_eq!(v["metadata"]["truncated"], true);
}

/// The defaults a model gets without asking: case-insensitive, two lines
/// of context, at most 100 matching lines, dependency and build
/// directories left out unless named or `include_ignored`.
#[test]
fn grep_defaults_fold_case_show_context_and_skip_dependency_dirs() {
    let env = env_with("readonly", "");
    for d in ["node_modules/pkg", "target/debug", "dist", ".venv/lib"] {
        std::fs::create_dir_all(env.ws.join(d)).unwrap();
        std::fs::write(env.ws.join(d).join("dep.js"), "NEEDLE in a dependency\n").unwrap();
    }
    std::fs::write(
        env.ws.join("src/ctx.txt"),
        "one\ntwo\nthree\nA NeEdLe here\nfive\nsix\nseven\n",
    )
    .unwrap();
    let (code, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle", "path": "src/ctx.txt"}),
    );
    assert_eq!(code, 0, "{v}");
    assert!(
        output(&v).starts_with(
            "src/ctx.txt-2-two\nsrc/ctx.txt-3-three\nsrc/ctx.txt:4:A NeEdLe here\n\
             src/ctx.txt-5-five\nsrc/ctx.txt-6-six\n1 matching lines"
        ),
        "{v}"
    );
    // A regular expression folds case too; case_sensitive turns it off.
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "ne+dle h", "path": "src/ctx.txt", "context": 0}),
    );
    assert_eq!(v["metadata"]["matches"], 1, "{v}");
    for pattern in ["needle here", "ne+dle h"] {
        let (_, v) = run(
            &env,
            "grep",
            serde_json::json!({"pattern": pattern, "path": "src/ctx.txt", "case_sensitive": true}),
        );
        assert_eq!(v["metadata"]["matches"], 0, "{pattern}: {v}");
    }
    // The whole workspace: the dependency directories are counted, not searched.
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle in a dep"}),
    );
    assert_eq!(v["metadata"]["matches"], 0, "{v}");
    assert_eq!(v["metadata"]["skipped"]["excluded_dirs"], 4, "{v}");
    assert!(
        output(&v).contains("4 dependency or build directories (include_ignored: true"),
        "{v}"
    );
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle in a dep", "include_ignored": true, "context": 0}),
    );
    let o = output(&v);
    for f in [
        "node_modules/pkg/dep.js:1:",
        "target/debug/dep.js:1:",
        "dist/dep.js:1:",
        ".venv/lib/dep.js:1:",
    ] {
        assert!(o.contains(f), "{f}: {o}");
    }
    // Named: a search that starts in one searches it.
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "needle", "path": "node_modules"}),
    );
    assert_eq!(v["metadata"]["matches"], 1, "{v}");
    // At most 100 matching lines unless asked.
    let many: String = (0..150).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(env.ws.join("many.txt"), many).unwrap();
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "NEEDLE", "path": "many.txt"}),
    );
    assert_eq!(v["metadata"]["matches"], 100, "{v}");
    assert_eq!(v["metadata"]["truncated"], true, "{v}");
    assert!(output(&v).contains("…[truncated: max_matches = 100 reached"));
}

#[test]
fn file_list_hides_dotfiles_goes_ten_deep_and_stops_at_its_limit() {
    let env = env_with("readonly", "");
    let deep = env.ws.join("d1/d2/d3/d4/d5/d6/d7/d8/d9");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom.txt"), "x").unwrap();
    std::fs::write(env.ws.join(".bashrc"), "x").unwrap();
    let (code, v) = run(
        &env,
        "file_list",
        serde_json::json!({"path": "d1", "depth": 10}),
    );
    assert_eq!(code, 0, "{v}");
    assert!(
        output(&v).contains("file  d2/d3/d4/d5/d6/d7/d8/d9/bottom.txt"),
        "{v}"
    );
    let (_, v) = run(&env, "file_list", serde_json::json!({}));
    let o = output(&v);
    for hidden in [".git/", ".env", ".gitignore", ".bashrc"] {
        assert!(!o.contains(&format!("  {hidden}")), "{hidden}: {o}");
    }
    assert_eq!(v["metadata"]["hidden_not_shown"], 4, "{v}");
    assert!(o.contains("include_hidden: true"), "{o}");
    let (_, v) = run(
        &env,
        "file_list",
        serde_json::json!({"include_hidden": true}),
    );
    let o = output(&v);
    assert!(o.contains("file  .gitignore  ("), "{o}");
    assert!(
        o.contains("file  .bashrc  (") && o.contains("(rule \".*\"): refused]"),
        "{o}"
    );
    let wide = env.ws.join("wide");
    std::fs::create_dir_all(&wide).unwrap();
    for i in 0..600 {
        std::fs::write(wide.join(format!("f{i:03}")), "").unwrap();
    }
    let (_, v) = run(&env, "file_list", serde_json::json!({"path": "wide"}));
    let o = output(&v);
    assert_eq!(o.lines().filter(|l| l.starts_with("file  ")).count(), 500);
    assert!(
        o.contains("…[truncated: 100 more entries; limit = 500]"),
        "{}",
        &o[o.len().saturating_sub(300)..]
    );
    assert_eq!(v["metadata"]["truncated"], true);
    let (_, v) = run(
        &env,
        "file_list",
        serde_json::json!({"path": "wide", "limit": 600}),
    );
    assert_eq!(v["metadata"]["truncated"], false, "{v}");
}

#[test]
fn file_read_shows_500_lines_unless_asked_and_says_how_to_go_on() {
    let env = env_with("readonly", "tool_output_max_bytes = 1048576");
    let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(env.ws.join("long.txt"), &text).unwrap();
    let (_, v) = run(&env, "file_read", serde_json::json!({"path": "long.txt"}));
    let o = output(&v);
    assert_eq!(o.lines().filter(|l| l.starts_with("line ")).count(), 500);
    assert!(
        o.ends_with(
            "line 500\n…[500 more lines after line 500 (max_lines = 500); ask with start_line=501]"
        ),
        "{}",
        &o[o.len() - 200..]
    );
    assert_eq!(v["metadata"]["truncated"], true, "{v}");
    let (_, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "start_line": 10, "max_lines": 2}),
    );
    assert_eq!(
        output(&v),
        "line 10\nline 11\n…[989 more lines after line 11 (max_lines = 2); ask with start_line=12]"
    );
    let (_, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "start_line": 601}),
    );
    assert!(output(&v).ends_with("line 1000\n"), "{v}");
    assert_eq!(v["metadata"]["truncated"], false, "{v}");
    let (code, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": "long.txt", "max_lines": 0}),
    );
    assert_eq!(code, 3, "{v}");
}

/// Names that say they hold a secret, and dotfiles outside the allow list,
/// are refused by the gate with the rule named; the allow list is config.
#[test]
fn secret_words_and_dotfiles_are_refused_by_rule() {
    let env = env_with("readonly", "");
    for (name, rule) in [
        ("password.txt", "*password*"),
        ("db_passwd", "*passwd*"),
        ("private_key.txt", "*private_key*"),
        ("my-private-key", "*private-key*"),
        ("client_secret.json", "*secret*"),
        ("aws_credential.ini", "*credential*"),
        (".bashrc", ".*"),
        (".zsh_history", ".*"),
    ] {
        std::fs::write(env.ws.join(name), format!("{SECRET}\n")).unwrap();
        let (code, v) = run(&env, "file_read", serde_json::json!({"path": name}));
        assert_eq!(
            (code, v["status"].as_str()),
            (4, Some("denied")),
            "{name}: {v}"
        );
        let all = v.to_string();
        assert!(
            all.contains(&format!("(rule \\\"{rule}\\\")")),
            "{name}: {all}"
        );
        assert!(!all.contains(SECRET), "{all}");
    }
    let (_, v) = run(&env, "file_read", serde_json::json!({"path": ".bashrc"}));
    assert!(v.to_string().contains("dotfiles_allow"), "{v}");
    // Grep skips them too.
    let (_, v) = run(&env, "grep", serde_json::json!({"pattern": SECRET}));
    assert_eq!(v["metadata"]["matches"], 0, "{v}");
    // Allowed dotfiles read; the allow list is the operator's.
    std::fs::write(env.ws.join(".editorconfig"), "root = true\n").unwrap();
    let (code, v) = run(
        &env,
        "file_read",
        serde_json::json!({"path": ".editorconfig"}),
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(output(&v), "root = true\n");
    env.config("[security]\nautonomy = \"readonly\"\ndotfiles_allow = [\".bashrc\", \".env*\"]\n");
    let (code, v) = run(&env, "file_read", serde_json::json!({"path": ".bashrc"}));
    assert_eq!(code, 0, "{v}");
    // Only the dotfile rule is lifted: .env is refused by its own rule.
    let (code, v) = run(&env, "file_read", serde_json::json!({"path": ".env"}));
    assert_eq!(code, 4, "{v}");
    assert!(v.to_string().contains("(rule \\\".env*\\\")"), "{v}");
    // And .editorconfig is no longer listed, so refused.
    let (code, _) = run(
        &env,
        "file_read",
        serde_json::json!({"path": ".editorconfig"}),
    );
    assert_eq!(code, 4);
    env.config("[security]\ndotfiles_allow = [\"bashrc\"]\n");
    let r = env.run(&["config", "validate"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("security.dotfiles_allow[0]"), "{r:?}");
}

/// `tool list --json` shows each tool's parameters with their defaults;
/// the defaults stay out of what a model is sent.
#[test]
fn tool_list_json_shows_parameters_and_defaults() {
    let env = env_with("readonly", "");
    let (r, list) = env.json(&["tool", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let params = |tool: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == tool)
            .unwrap_or_else(|| panic!("{tool}: {list}"))["parameters"]["properties"]
            .clone()
    };
    let grep = params("grep");
    assert_eq!(grep["case_sensitive"]["default"], false, "{grep}");
    assert_eq!(grep["context"]["default"], 2, "{grep}");
    assert_eq!(grep["max_matches"]["default"], 100, "{grep}");
    assert_eq!(grep["include_ignored"]["default"], false, "{grep}");
    let list_p = params("file_list");
    assert_eq!(list_p["include_hidden"]["default"], false, "{list_p}");
    assert_eq!(list_p["limit"]["default"], 500, "{list_p}");
    assert_eq!(params("file_read")["max_lines"]["default"], 500);
    let git = params("git");
    for k in ["author", "grep", "include_diff"] {
        assert!(git.get(k).is_some(), "{k}: {git}");
    }
    assert_eq!(git["include_diff"]["default"], false);
    let shell = params("shell");
    for k in ["cwd", "timeout_ms", "max_output_chars"] {
        assert!(shell.get(k).is_some(), "{k}: {shell}");
    }
    // What a model is sent carries the parameters, not the defaults.
    let env = Env::new();
    env.mock("hello.toml", "", "");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    let tools = env.requests()[0]["request"]["tools"].to_string();
    assert!(
        tools.contains("\"max_lines\"") && tools.contains("\"timeout_ms\""),
        "{tools}"
    );
    assert!(!tools.contains("\"default\""), "{tools}");
}
