//! `grep`, `file_read` line ranges and `file_list` depth/glob/sort on the
//! real binary: what they find, their limits, and what they never show.
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
    let (code, v) = run(&env, "grep", serde_json::json!({"pattern": "needle"}));
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
        serde_json::json!({"pattern": "^// needle", "case_insensitive": true, "path": "src"}),
    );
    assert!(
        output(&v).starts_with("src/main.rs:5:// Needle in caps\n"),
        "{v}"
    );
    let (_, v) = run(
        &env,
        "grep",
        serde_json::json!({"pattern": "let", "context": 1, "path": "src/main.rs"}),
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
        serde_json::json!({"pattern": "needle \\d+", "path": "many.txt", "max_matches": 3}),
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
    let (_, v) = run(&env, "file_list", serde_json::json!({"depth": 5}));
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
        (serde_json::json!({"depth": 6}), "from 1 to 5"),
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
