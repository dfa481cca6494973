//! Skills on the real binary: `skill list` / `skill show`, the skills layer
//! in `prompt show` and in the request a provider receives, their order,
//! every way `config validate` refuses one, and workspace skills (off by
//! default, a state-dir skill of the same name wins).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::Path;

fn skill_at(dir: &Path, name: &str, text: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("SKILL.md"), text).unwrap();
}

fn skill_text(name: &str, tools: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: The {name} skill.\ntools: [{tools}]\n---\n{body}\n")
}

/// A state-dir skill.
fn skill(env: &Env, name: &str, tools: &str, body: &str) {
    skill_at(
        &env.state.join("skills"),
        name,
        &skill_text(name, tools, body),
    );
}

/// The mock provider, recording requests, with these `[skills]` and
/// `[channels.cli]` lines.
fn setup(env: &Env, skills: &str, channel: &str) {
    env.mock(
        "hello.toml",
        "",
        &format!("[skills]\n{skills}\n[channels.cli]\n{channel}\n"),
    );
}

fn layers(env: &Env) -> Value {
    let (r, v) = env.json(&["prompt", "show", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    v
}

#[test]
fn list_and_show_name_each_skill_its_source_tools_and_whether_it_is_enabled() {
    let env = Env::new();
    skill(&env, "grep-helper", "grep, git", "Search with grep first.");
    skill(&env, "notes", "", "Keep answers short.");
    skill_at(
        &env.state.join("skills"),
        "broken",
        "---\nname: broken\n---\nbody\n",
    );
    // Not skills: a plain file, a hidden directory.
    std::fs::write(env.state.join("skills/README"), "x").unwrap();
    skill(&env, ".hidden", "", "x");
    setup(&env, "enabled = [\"notes\", \"grep-helper\"]", "");

    let r = env.run(&["skill", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("SKILL"), "{r:?}");
    assert_eq!(lines.len(), 4, "{r:?}");
    assert!(lines[1].starts_with("broken") && lines[1].contains("unusable: "));
    assert!(lines[1].contains("no `description:`"), "{r:?}");
    let grep: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        grep[..5],
        ["grep-helper", "yes", "(2)", "state", "grep,git"]
    );
    assert!(lines[3].starts_with("notes") && lines[3].contains("yes (1)"));

    let (r, v) = env.json(&["skill", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows = v.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["broken", "grep-helper", "notes"]);
    assert_eq!(rows[1]["tools"], serde_json::json!(["grep", "git"]));
    assert_eq!(rows[1]["source"], "state");
    assert_eq!(rows[1]["description"], "The grep-helper skill.");
    assert_eq!(
        (rows[1]["enabled"].clone(), rows[1]["position"].clone()),
        (true.into(), 2.into())
    );
    assert_eq!(rows[0]["enabled"], false);
    assert!(
        rows[0]["error"]
            .as_str()
            .unwrap()
            .contains("broken/SKILL.md")
    );

    let r = env.run(&["skill", "show", "grep-helper"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(
            "name: grep-helper\ndescription: The grep-helper skill.\ntools: grep, git\nsource: state ("
        ),
        "{r:?}"
    );
    assert!(
        r.stdout
            .contains("enabled: yes (2 of 2 in [skills] enabled)\n\nSearch with grep first.\n")
    );
    let (_, v) = env.json(&["skill", "show", "notes", "--json"]);
    assert_eq!(v["body"], "Keep answers short.");
    assert_eq!(v["tools"], serde_json::json!([]));

    let r = env.run(&["skill", "show", "nothing-here"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("skill \"nothing-here\" not found: no "),
        "{r:?}"
    );
    let r = env.run(&["skill", "show", "broken"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("broken/SKILL.md: line 3: the front matter has no `description:`"),
        "{r:?}"
    );
}

#[test]
fn enabled_skills_join_the_system_prompt_in_order_and_reach_the_provider() {
    let env = Env::new();
    skill(&env, "alpha", "grep", "ALPHA-BODY: grep before reading.");
    skill(&env, "beta", "", "BETA-BODY: answer in one line.");
    skill(&env, "gamma", "", "GAMMA-BODY: never enabled.");
    setup(&env, "enabled = [\"beta\", \"alpha\"]", "");

    let v = layers(&env);
    let system = v["system_prompt"].as_str().unwrap();
    let (a, b) = (
        system.find("ALPHA-BODY").unwrap(),
        system.find("BETA-BODY").unwrap(),
    );
    assert!(b < a, "the config's order: {system}");
    assert!(!system.contains("GAMMA-BODY"));
    // After the user layers, before the policy.
    assert!(system.find("Policy: ").unwrap() > a);
    let names: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["base", "persona", "user", "previous", "skills", "policy"]
    );
    let skills_bytes = v["layers"][4]["bytes"].as_u64().unwrap();
    assert!(skills_bytes > 60, "{v}");
    let r = env.run(&["prompt", "show"]);
    assert!(
        r.stdout
            .contains("<skill name=\"beta\" description=\"The beta skill.\">\nBETA-BODY"),
        "{r:?}"
    );

    let r = env.run(&["agent", "-m", "hello"]);
    assert_eq!(r.code, 0, "{r:?}");
    let reqs = env.requests();
    let sent = reqs[0]["request"]["system_prompt"].as_str().unwrap();
    assert_eq!(sent, system, "the provider gets what prompt show shows");

    // Without skills the layer is empty and no skill text is sent.
    setup(&env, "", "");
    let v = layers(&env);
    assert_eq!(v["layers"][4]["bytes"], 0);
    assert!(!v["system_prompt"].as_str().unwrap().contains("BODY"));
}

/// `config validate` (and a run) refuses each broken enabled skill with a
/// message naming the skill and the problem; nothing is half-loaded.
#[test]
fn validate_refuses_missing_malformed_and_unsatisfiable_skills() {
    let env = Env::new();
    let skills = env.state.join("skills");
    let outside = env.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(
        outside.join("SKILL.md"),
        skill_text("escape", "", "OUTSIDE-TEXT"),
    )
    .unwrap();
    skill(&env, "ok", "grep", "fine");
    skill(&env, "needs-http", "http", "x");
    skill(&env, "needs-magic", "teleport", "x");
    skill_at(
        &skills,
        "bad-key",
        "---\nname: bad-key\ndescription: d\nrequires: [grep]\n---\nx\n",
    );
    skill_at(&skills, "no-close", "---\nname: no-close\ndescription: d\n");
    skill_at(&skills, "misnamed", &skill_text("other", "", "x"));
    skill_at(&skills, "huge", &skill_text("huge", "", &"y".repeat(9000)));
    skill_at(
        &skills,
        "huge-file",
        &format!("{}{}", skill_text("huge-file", "", "z"), "#".repeat(17000)),
    );
    std::fs::create_dir_all(skills.join("escape")).unwrap();
    symlink(outside.join("SKILL.md"), skills.join("escape/SKILL.md")).unwrap();
    symlink(&outside, skills.join("escape-dir")).unwrap();
    // A link that stays inside the skills directory is fine.
    std::fs::create_dir_all(skills.join("linked")).unwrap();
    std::fs::write(
        skills.join("shared.md"),
        skill_text("linked", "", "LINKED-BODY"),
    )
    .unwrap();
    symlink("../shared.md", skills.join("linked/SKILL.md")).unwrap();
    std::fs::create_dir_all(skills.join("fifo")).unwrap();
    mkfifo(&skills.join("fifo/SKILL.md"));

    let cases: &[(&str, &str)] = &[
        ("missing", "skill \"missing\" not found: no "),
        (
            "needs-http",
            "skill \"needs-http\" needs tool \"http\", which is not enabled on the cli channel",
        ),
        (
            "needs-magic",
            "needs tool \"teleport\", which does not exist; known tools: time,",
        ),
        (
            "bad-key",
            "bad-key/SKILL.md: line 4: unknown key \"requires\"; allowed: name, description, version, tools",
        ),
        ("no-close", "never closed by a `---` line"),
        (
            "misnamed",
            "name \"other\" differs from its directory's name \"misnamed\"",
        ),
        ("huge", "the body is 9000 bytes; the limit is 8192"),
        ("huge-file", "over 16384 bytes; the limit for a SKILL.md"),
        (
            "escape",
            "escape/SKILL.md: cannot open: a symlink leads out of the skills directory",
        ),
        ("escape-dir", "a symlink leads out of the skills directory"),
        ("fifo", "fifo/SKILL.md: not a regular file"),
    ];
    for (name, want) in cases {
        setup(&env, &format!("enabled = [\"ok\", \"{name}\"]"), "");
        let r = env.run(&["config", "validate"]);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(
            r.stderr.contains("skills.enabled: 1 problem:"),
            "{name}: {r:?}"
        );
        assert!(r.stderr.contains(want), "{name} should say {want:?}: {r:?}");
        assert!(!r.stderr.contains("OUTSIDE-TEXT"));
        // A run refuses the same way, before any request.
        let r = env.run(&["agent", "-m", "hi"]);
        assert_eq!(r.code, 2, "{name}: {r:?}");
        assert!(r.stderr.contains(want), "{name}: {r:?}");
    }
    assert!(env.requests().is_empty());

    // Enabling the tool satisfies the skill: a skill asks, the config grants.
    setup(
        &env,
        "enabled = [\"needs-http\", \"linked\"]",
        "tools_allow = [\"time\", \"http\"]",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("2 skills"), "{r:?}");
    assert!(
        layers(&env)["system_prompt"]
            .as_str()
            .unwrap()
            .contains("LINKED-BODY")
    );
    // `ok` needs grep, which this channel leaves out.
    setup(&env, "enabled = [\"ok\"]", "tools_allow = [\"time\"]");
    let r = env.run(&["config", "validate"]);
    assert!(
        r.code == 2 && r.stderr.contains("needs tool \"grep\""),
        "{r:?}"
    );

    // Every problem at once; names are checked with the rest of the config.
    setup(
        &env,
        "enabled = [\"missing\", \"needs-http\", \"huge\"]",
        "",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("skills.enabled: 3 problems:"), "{r:?}");
    setup(
        &env,
        "enabled = [\"ok\", \"ok\", \"Bad.Name\", \"\"]\nworkspace = \"yes\"",
        "",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "skills.enabled[1]: \"ok\" is listed twice",
        "skills.enabled[2]: \"Bad.Name\" is not a skill name: only a-z, 0-9, _ and - are allowed",
        "skills.enabled[3]: \"\" is not a skill name: 1 to 64 characters",
        "skills.workspace: expected true or false, found string",
    ] {
        assert!(r.stderr.contains(want), "{want}: {r:?}");
    }
}

/// The enabled skills together have a cap, as each body has.
#[test]
fn the_skills_layer_has_a_total_cap() {
    let env = Env::new();
    let names: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    for n in &names {
        skill(&env, n, "", &"w ".repeat(3900));
    }
    let list = names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ");
    setup(&env, &format!("enabled = [{list}]"), "");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("bytes of system prompt; the limit is 32768"),
        "{r:?}"
    );
    setup(&env, "enabled = [\"s0\", \"s1\", \"s2\", \"s3\"]", "");
    assert_eq!(env.run(&["config", "validate"]).code, 0);
}

#[test]
fn workspace_skills_are_ignored_by_default_and_lose_to_state_skills() {
    let env = Env::new();
    let ws_skills = env.ws.join(".latchclaw/skills");
    skill_at(&ws_skills, "repo", &skill_text("repo", "", "REPO-BODY"));
    skill_at(
        &ws_skills,
        "shared",
        &skill_text("shared", "", "WS-SHARED-BODY"),
    );
    skill(&env, "shared", "", "STATE-SHARED-BODY");

    setup(&env, "enabled = [\"repo\"]", "");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("skill \"repo\" not found")
            && r.stderr
                .contains("workspace skills are off: [skills] workspace = false"),
        "{r:?}"
    );
    setup(&env, "", "");
    let r = env.run(&["skill", "list"]);
    assert!(!r.stdout.contains("repo "), "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "(skills in {} are not used: [skills] workspace = false)",
            ws_skills.display()
        )),
        "{r:?}"
    );
    assert!(
        !layers(&env)["system_prompt"]
            .as_str()
            .unwrap()
            .contains("REPO-BODY")
    );

    setup(
        &env,
        "enabled = [\"repo\", \"shared\"]\nworkspace = true",
        "",
    );
    assert_eq!(env.run(&["config", "validate"]).code, 0);
    let system = layers(&env)["system_prompt"].as_str().unwrap().to_string();
    assert!(
        system.contains("REPO-BODY") && system.contains("STATE-SHARED-BODY"),
        "{system}"
    );
    assert!(
        !system.contains("WS-SHARED-BODY"),
        "the state dir's skill wins"
    );
    let (_, v) = env.json(&["skill", "list", "--json"]);
    let rows: Vec<(String, String, bool, bool)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().into(),
                r["source"].as_str().unwrap().into(),
                r["shadowed"].as_bool().unwrap(),
                r["enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("repo".into(), "workspace".into(), false, true),
            ("shared".into(), "state".into(), false, true),
            ("shared".into(), "workspace".into(), true, false),
        ]
    );
    let (_, v) = env.json(&["skill", "show", "shared", "--json"]);
    assert_eq!(v["source"], "state");

    // The workspace's skills directory is reached with no symlink on the
    // way: a repository cannot point it at the operator's files.
    let other = env.root.join("elsewhere");
    skill_at(&other, "repo", &skill_text("repo", "", "ELSEWHERE-BODY"));
    std::fs::remove_dir_all(&ws_skills).unwrap();
    symlink(&other, &ws_skills).unwrap();
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("cannot open the workspace skills directory"),
        "{r:?}"
    );
}

/// A run that enables no skill reads nothing under `skills/`: broken
/// skills lying there do not matter until one is enabled.
#[test]
fn without_enabled_skills_nothing_is_read() {
    let env = Env::new();
    let skills = env.state.join("skills");
    skill_at(&skills, "broken", "not a skill");
    std::fs::create_dir_all(skills.join("fifo")).unwrap();
    mkfifo(&skills.join("fifo/SKILL.md"));
    env.config("");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(env.run(&["config", "validate"]).code, 0);
    // `skill list` does read them, and says what is wrong.
    let r = env.run(&["skill", "list"]);
    assert!(
        r.stdout.contains("fifo/SKILL.md: not a regular file"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("broken/SKILL.md: line 1: not `---`"),
        "{r:?}"
    );
}

/// A named pipe at `path` (mode 0600).
fn mkfifo(path: &std::path::Path) {
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    mknodat(CWD, path, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
}

/// What latchclaw reads as the operator's configuration from the
/// workspace is protected like `.git`: with workspace skills on and
/// autonomy full, no writer — `file_write`, a redirection, `cp`, `sed -i`,
/// git writing the work tree — changes an enabled skill, and every later
/// conversation still gets the skill as it was.
#[test]
fn no_tool_rewrites_a_workspace_skill() {
    let env = Env::new();
    let ws_skills = env.ws.join(".latchclaw/skills");
    skill_at(&ws_skills, "repo", &skill_text("repo", "", "REPO-BODY"));
    std::fs::write(env.ws.join("evil.md"), "---\nname: repo\n---\nEVIL-BODY\n").unwrap();
    common::commit_all(&env.ws);
    std::fs::write(
        env.ws.join("skill.patch"),
        "diff --git a/notes.txt b/notes.txt\nnew file mode 100644\n--- /dev/null\n\
         +++ b/notes.txt\n@@ -0,0 +1 @@\n+x\n",
    )
    .unwrap();
    setup(
        &env,
        "enabled = [\"repo\"]\nworkspace = true",
        "tools_allow = [\"file_write\", \"shell\"]\n[security]\nautonomy = \"full\"",
    );
    let file = ws_skills.join("repo/SKILL.md");
    let before = std::fs::read_to_string(&file).unwrap();
    let (r, v) = env.tool(
        "file_write",
        serde_json::json!({"path": ".latchclaw/skills/repo/SKILL.md", "content": "EVIL-BODY"}),
    );
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("inside a .latchclaw directory"),
        "{v}"
    );
    for command in [
        "echo EVIL-BODY >> .latchclaw/skills/repo/SKILL.md",
        "cp evil.md .latchclaw/skills/repo/SKILL.md",
        "sed -i s/REPO/EVIL/ .latchclaw/skills/repo/SKILL.md",
        "mkdir -p .latchclaw/skills/other",
        "git checkout HEAD -- .",
        "git apply skill.patch",
        "git stash",
    ] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
        assert!(
            v["error"].as_str().unwrap().contains(".latchclaw"),
            "{command}: {v}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    assert!(!ws_skills.join("other").exists());
    let system = layers(&env)["system_prompt"].as_str().unwrap().to_string();
    assert!(
        system.contains("REPO-BODY") && !system.contains("EVIL-BODY"),
        "{system}"
    );
    // Reading it stays allowed.
    let (r, v) = env.shell("cat .latchclaw/skills/repo/SKILL.md");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(v["output"].as_str().unwrap().contains("REPO-BODY"), "{v}");
}

/// `version:` is read, checked, listed, shown and carried into the layer.
#[test]
fn a_skill_carries_its_version() {
    let env = Env::new();
    setup(&env, "enabled = [\"release\"]", "");
    skill_at(
        &env.state.join("skills"),
        "release",
        "---\nname: release\ndescription: Cuts a release.\nversion: 2.1.0\n---\nTag, then push.\n",
    );
    let (r, list) = env.json(&["skill", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(list[0]["version"], "2.1.0", "{list}");
    let (_, show) = env.json(&["skill", "show", "release", "--json"]);
    assert_eq!(show["version"], "2.1.0", "{show}");
    let text = env.run(&["skill", "show", "release"]);
    assert!(text.stdout.contains("\nversion: 2.1.0\n"), "{text:?}");
    let p = layers(&env)["system_prompt"].as_str().unwrap().to_string();
    assert!(
        p.contains("<skill name=\"release\" description=\"Cuts a release.\" version=\"2.1.0\">"),
        "{p}"
    );
    skill_at(
        &env.state.join("skills"),
        "release",
        "---\nname: release\ndescription: d\nversion: two point one\n---\nb\n",
    );
    let r = env.run(&["config", "validate"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("is not a version"), "{r:?}");
}
