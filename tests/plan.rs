//! The `plan` tool on the real binary with scripted mock models: a
//! three-level tree whose leaves run with only the tools they name and the
//! skill that matches them, a parent's failed evaluation corrected by one
//! subtask, `task list|show`; budgets stopping a model that keeps
//! planning; a tree killed mid-way resumed without running a done leaf
//! again (counted by the lines its leaves append to a canary file).
// The `plan` feature (the minimal build refuses it: tests/features.rs).
#![cfg(feature = "plan")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::{Value, json};

const FULL: &str = "[security]\nautonomy = \"full\"\n[tools.plan]\nenabled = true\n";

fn skill(env: &Env, name: &str, description: &str, body: &str) {
    let dir = env.state.join("skills").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
    )
    .unwrap();
}

fn canary(env: &Env) -> Vec<String> {
    std::fs::read_to_string(env.ws.join("canary.txt"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// The newest tree's root path and conversation.
fn newest_tree(env: &Env) -> (String, String) {
    let (r, v) = env.json(&["task", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let t = &v[0];
    (
        t["path"].as_str().unwrap().to_string(),
        t["conversation"].as_str().unwrap().to_string(),
    )
}

/// `task show PATH --json`'s tasks, by their id (the path's last part).
fn tasks(env: &Env, path: &str) -> Vec<(String, Value)> {
    let (r, v) = env.json(&["task", "show", path, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    v["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let p = t["path"].as_str().unwrap();
            (p.rsplit('/').next().unwrap().to_string(), t.clone())
        })
        .collect()
}

fn task<'t>(all: &'t [(String, Value)], id: &str) -> &'t Value {
    &all.iter()
        .find(|(i, _)| i == id)
        .unwrap_or_else(|| panic!("no task {id} in {all:?}"))
        .1
}

/// The request the mock received for the task whose title holds `word`
/// (its first request).
fn request_for<'r>(requests: &'r [Value], word: &str) -> &'r Value {
    requests
        .iter()
        .find(|r| {
            r["request"]["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Task ") && c.lines().next().unwrap().contains(word))
        })
        .unwrap_or_else(|| panic!("no request for {word}"))
}

fn offered(request: &Value) -> Vec<String> {
    request["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_three_level_tree_runs_its_leaves_with_their_tools_and_skills_and_corrects_a_failure() {
    let env = Env::new();
    env.mock("plan_tree.toml", "", FULL);
    skill(
        &env,
        "changelog",
        "Writes changelog release notes for users from commits",
        "ZQSKILL-CHANGELOG",
    );
    skill(
        &env,
        "dbtuner",
        "Tunes database indexes and slow queries",
        "ZQSKILL-DB",
    );
    let (r, v) = env.json(&["agent", "-m", "plan the release", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["exit_reason"], "completed");
    let plan = &v["tool_calls"][0];
    assert_eq!(
        (plan["tool"].as_str(), plan["status"].as_str()),
        (Some("plan"), Some("allowed"))
    );

    // By effect: the leaves' lines, the corrective one's before the last
    // task's; the line of the call its task did not name never written.
    assert_eq!(canary(&env), ["one", "fix", "three"]);

    let (root, conv) = newest_tree(&env);
    assert!(root.starts_with(&format!("{conv}/msg-")), "{root}");
    let all = tasks(&env, &root);
    let ids: Vec<&str> = all.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(
        ids[1..],
        [
            "task-1",
            "task-1.1",
            "task-1.1.1",
            "task-1.1.2",
            "task-1.1.3",
            "task-1.2"
        ]
    );
    for (id, t) in &all {
        assert_eq!(t["state"], "done", "{id}: {t}");
    }
    assert_eq!(task(&all, "task-1.1.1")["depth"], 3);
    assert_eq!(task(&all, "task-1.1.1")["result"], "wrote line one");
    assert_eq!(task(&all, "task-1.1.2")["result"], "the shell was refused");
    // One corrective subtask for the failed child, run as a leaf.
    let fix = task(&all, "task-1.1.3");
    assert_eq!(
        fix["corrects"].as_str(),
        Some(format!("{root}/task-1/task-1.1/task-1.1.2").as_str())
    );
    assert_eq!(fix["tools"], json!(["shell"]));
    assert_eq!(
        all.iter().filter(|(_, t)| !t["corrects"].is_null()).count(),
        1
    );
    // The matched skill, and none where nothing matches.
    assert_eq!(task(&all, "task-1.1.1")["skill"], "changelog");
    assert!(task(&all, "task-1.2")["skill"].is_null());
    assert!(all[0].1["tokens"].as_u64().unwrap() > 0);

    let requests = env.requests();
    // Each leaf was offered exactly the tools it names.
    assert_eq!(offered(request_for(&requests, "zqone")), ["shell"]);
    assert_eq!(offered(request_for(&requests, "zqtwo")), ["file_list"]);
    let one = request_for(&requests, "zqone");
    assert!(
        one["request"]["system_prompt"]
            .as_str()
            .unwrap()
            .contains("ZQSKILL-CHANGELOG")
    );
    let three = request_for(&requests, "zqthree");
    let prompt = three["request"]["system_prompt"].as_str().unwrap();
    assert!(!prompt.contains("ZQSKILL"), "{prompt}");
    // Its context: the ancestors' purpose and instructions, and what the
    // earlier sibling found.
    let message = three["request"]["messages"][0]["content"].as_str().unwrap();
    assert!(
        message.contains("a release everyone can check"),
        "{message}"
    );
    assert!(message.contains("3 of 3 subtasks done"), "{message}");
    // The parents' evaluations: one model call each.
    let evaluations = requests
        .iter()
        .filter(|r| {
            r["request"]["messages"][0]["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Evaluate the subtasks"))
        })
        .count();
    assert_eq!(evaluations, 2);

    // Every call of every task went through the gate and carries its
    // task's path; the one its task did not name was refused.
    let receipts = env.receipts();
    let shell: Vec<&Value> = receipts.iter().filter(|r| r["tool"] == "shell").collect();
    assert_eq!(shell.len(), 4, "{shell:?}");
    let refused: Vec<&&Value> = shell.iter().filter(|r| r["status"] == "denied").collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(
        refused[0]["conversation_id"].as_str(),
        Some(format!("{root}/task-1/task-1.1/task-1.1.2").as_str())
    );
    for r in &shell {
        let c = r["conversation_id"].as_str().unwrap();
        assert!(c.starts_with(&format!("{root}/task-1/")), "{c}");
    }

    // The text forms name the same tree.
    let r = env.run(&["task", "show", &root]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("corrects task-1.1.2") && r.stdout.contains("skill changelog"));
    let r = env.run(&["task", "list", &conv]);
    assert!(r.code == 0 && r.stdout.contains(&root), "{r:?}");
    let (r, v) = env.json(&["task", "list", "conv-none", "--json"]);
    assert_eq!((r.code, v), (0, json!([])));
    let r = env.run(&["task", "show", "conv-none/msg-0"]);
    assert_eq!(r.code, 2, "{r:?}");
    // The trees go with the conversations.
    assert_eq!(env.run(&["memory", "clear", "--yes"]).code, 0);
    let (_, trees) = env.json(&["task", "list", "--json"]);
    assert_eq!(trees, json!([]));
    assert_eq!(env.run(&["task", "show", &root]).code, 2);
}

#[test]
fn budgets_stop_a_model_that_keeps_planning_and_say_which() {
    let env = Env::new();
    env.mock("plan_runaway.toml", "", FULL);
    let (r, v) = env.json(&["agent", "-m", "keep planning deep", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["exit_reason"], "plan_budget");
    assert_eq!(v["tool_calls"][0]["budget"], "depth");
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    // Three levels (tools.plan.max_depth), then the plan below refused.
    assert_eq!(all.len(), 4, "{all:?}");
    assert_eq!(
        all.iter().map(|(_, t)| t["depth"].as_u64().unwrap()).max(),
        Some(3)
    );
    for (id, t) in &all {
        assert_eq!(
            (t["state"].as_str(), t["budget"].as_str()),
            (Some("stopped"), Some("depth")),
            "{id}"
        );
    }

    // Wide instead of deep, under a task budget: stopped at it.
    env.mock(
        "plan_runaway.toml",
        "",
        &format!("{FULL}max_depth = 8\nmax_tasks = 5\n"),
    );
    let (r, v) = env.json(&["agent", "-m", "keep planning wide", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["tool_calls"][0]["budget"], "tasks");
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert!(all.len() - 1 <= 5, "{all:?}");
    assert_eq!(all[0].1["budget"], "tasks");

    // A whole tree deeper than the budget never starts: nothing is stored.
    env.mock("plan_runaway.toml", "", FULL);
    let deep = json!({"tasks": [{"title": "a", "purpose": "p", "instructions": "i", "evaluation": "",
        "subtasks": [{"title": "b", "purpose": "p", "instructions": "i", "evaluation": "",
        "subtasks": [{"title": "c", "purpose": "p", "instructions": "i", "evaluation": "",
        "subtasks": [{"title": "d", "purpose": "p", "instructions": "i", "evaluation": ""}]}]}]}]});
    let (r, v) = env.tool("plan", deep);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["metadata"]["budget"], "depth");
    let (_, trees) = env.json(&["task", "list", "--json"]);
    assert_eq!(trees.as_array().unwrap().len(), 2);

    // The tree's tokens.
    env.mock(
        "plan_resume.toml",
        "",
        &format!("{FULL}tree_tokens = 100\n"),
    );
    let (r, v) = env.json(&["agent", "-m", "three lines", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    let budget = v["tool_calls"][0]["budget"].as_str().unwrap().to_string();
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    // The first leaf spends the tree's tokens; the rest never start.
    assert_eq!(budget, "tree_tokens", "{all:?}");
    assert_eq!(task(&all, "task-3")["state"], "stopped");
    assert_eq!(task(&all, "task-3")["attempts"], 0);
}

#[test]
fn a_tree_killed_mid_way_resumes_without_running_a_done_leaf_again() {
    for point in ["task_done:task-2", "task_started:task-2"] {
        let env = Env::new();
        env.mock("plan_resume.toml", "", FULL);
        let r = env.run_env(
            &["agent", "-m", "three lines please"],
            &[("LATCHCLAW_TEST_KILL", point)],
        );
        assert_eq!(r.code, -1, "{point}: killed: {r:?}");
        let before = match point {
            "task_done:task-2" => vec!["alpha", "beta"],
            _ => vec!["alpha"],
        };
        assert_eq!(canary(&env), before, "{point}");
        let (root, conv) = newest_tree(&env);
        let all = tasks(&env, &root);
        assert_eq!(task(&all, "task-1")["state"], "done");
        assert_eq!(task(&all, "task-3")["state"], "pending");

        let (r, v) = env.json(&[
            "agent",
            "--resume",
            &conv,
            "-m",
            "three lines again",
            "--json",
        ]);
        assert_eq!(r.code, 0, "{point}: {r:?}");
        assert_eq!(v["tool_calls"][0]["status"], "allowed");
        // Each line once: no done leaf ran again.
        assert_eq!(canary(&env), ["alpha", "beta", "gamma"], "{point}");
        let (again, _) = newest_tree(&env);
        assert_eq!(again, root, "{point}: the same tree went on");
        let all = tasks(&env, &root);
        for (id, t) in &all {
            assert_eq!(t["state"], "done", "{point}: {id}");
        }
        assert_eq!(task(&all, "task-1")["attempts"], 1, "{point}");
        let alpha_calls = env
            .receipts()
            .iter()
            .filter(|r| {
                r["tool"] == "shell" && r["conversation_id"].as_str().unwrap().ends_with("/task-1")
            })
            .count();
        assert_eq!(alpha_calls, 1, "{point}");
    }
}

#[test]
fn the_gate_judges_a_plan_tree_and_a_task_widens_nothing() {
    let env = Env::new();
    env.mock("plan_call.toml", "", FULL);
    let good = json!({"tasks": [{"title": "a", "purpose": "b", "instructions": "c", "evaluation": "d",
        "tools": ["shell"]}]});
    let (r, v) = env.json(&["policy", "check", "plan", "--json", &good.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["decision"], "allow");
    // A tool the channel does not offer (file_write is off by default).
    let wider = json!({"tasks": [{"title": "a", "purpose": "b", "instructions": "c", "evaluation": "d",
        "subtasks": [{"title": "w", "purpose": "b", "instructions": "c", "evaluation": "d",
        "tools": ["file_write"]}]}]});
    let (_, v) = env.json(&["policy", "check", "plan", "--json", &wider.to_string()]);
    assert_eq!(
        (v["decision"].as_str(), v["refusal"].as_str()),
        (Some("deny"), Some("arguments"))
    );
    assert!(v["reason"].as_str().unwrap().contains("file_write"), "{v}");
    for bad in [
        json!({"tasks": []}),
        json!({"tasks": [{"title": "a"}]}),
        json!({"tasks": [{"title": "a", "purpose": "b", "instructions": "c", "evaluation": "d", "tools": "shell"}]}),
        json!({"tasks": [{"title": "a", "purpose": "b", "instructions": "c", "evaluation": "d", "extra": 1}]}),
    ] {
        let (_, v) = env.json(&["policy", "check", "plan", "--json", &bad.to_string()]);
        assert_eq!(
            (v["decision"].as_str(), v["refusal"].as_str()),
            (Some("deny"), Some("arguments")),
            "{bad}"
        );
    }
    // Supervised, the plan itself is asked about like any medium-risk call.
    let (_, v) = env.json(&[
        "policy",
        "check",
        "plan",
        "--json",
        &good.to_string(),
        "--autonomy",
        "supervised",
    ]);
    assert_eq!(v["decision"], "ask");

    // Off unless enabled: not offered, and refused.
    env.mock("plan_call.toml", "", "[security]\nautonomy = \"full\"\n");
    let (_, v) = env.json(&["policy", "check", "plan", "--json", &good.to_string()]);
    assert_eq!(v["decision"], "deny");
    let r = env.run(&["agent", "-m", "plan it"]);
    assert_eq!(r.code, 4, "{r:?}");
    let tools = offered(&env.requests()[0]);
    assert!(!tools.contains(&"plan".to_string()), "{tools:?}");
}

#[test]
fn a_policy_rule_for_the_task_origin_holds_inside_a_plan_only() {
    let env = Env::new();
    let rule = "[[policy.rules]]\nname = \"no-shell-in-tasks\"\ntool = \"shell\"\norigin = \"task\"\n\
                effect = \"deny\"\nreason = \"tasks do not run commands\"\n";
    env.mock("plan_resume.toml", "", &format!("{FULL}{rule}"));
    let (r, v) = env.json(&["agent", "-m", "three lines", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["tool_calls"][0]["tool"], "plan");
    // By effect: no leaf's command ran.
    assert!(canary(&env).is_empty(), "{:?}", canary(&env));
    let denied: Vec<Value> = env
        .receipts()
        .into_iter()
        .filter(|r| r["tool"] == "shell")
        .collect();
    assert_eq!(denied.len(), 3);
    assert!(denied.iter().all(|r| r["status"] == "denied"));
    assert!(
        denied[0]["reason"]
            .as_str()
            .unwrap()
            .contains("no-shell-in-tasks")
    );
    // Outside a plan the rule does not apply.
    let (r, v) = env.shell("echo outside >> canary.txt");
    assert_eq!(
        (r.code, v["status"].as_str()),
        (0, Some("allowed")),
        "{r:?}"
    );
    assert_eq!(canary(&env), ["outside"]);
}

/// The three-line plan with every model call taking `delay_ms`.
fn slow(env: &Env, delay_ms: u64) {
    let script = std::fs::read_to_string(common::fixture("plan_resume.toml")).unwrap();
    let path = env.root.join("slow.toml");
    std::fs::write(&path, format!("delay_ms = {delay_ms}\n{script}")).unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n{FULL}",
        common::lit(&path)
    ));
}

#[test]
fn timeout_and_the_emergency_stop_stop_the_whole_tree() {
    // Seven model calls of 400 ms each cannot finish in one second.
    let env = Env::new();
    slow(&env, 400);
    let (r, v) = env.json(&["agent", "-m", "three lines", "--timeout", "1", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["exit_reason"], "timeout");
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(all[0].1["state"], "stopped", "{all:?}");
    assert!(canary(&env).len() < 3);
    assert!(all.iter().any(|(_, t)| t["state"] != "done"), "{all:?}");

    // The emergency stop engaged once the first leaf's line is written
    // (two model calls, two seconds, before the next leaf's command could
    // run): no later leaf runs.
    let env = Env::new();
    slow(&env, 1000);
    let child = env
        .command(&["agent", "-m", "three lines", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(
        std::time::Duration::from_secs(30),
        "the first leaf's line",
        || !canary(&env).is_empty(),
    );
    assert_eq!(env.run(&["estop"]).code, 0);
    let r: common::Run = child.wait_with_output().unwrap().into();
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(canary(&env), ["alpha"]);
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(task(&all, "task-3")["attempts"], 0, "{all:?}");
    assert_eq!(all[0].1["state"], "stopped");
    assert_eq!(env.run(&["estop", "--clear"]).code, 0);
}

#[test]
fn a_task_call_that_waits_for_approval_stops_the_tree_until_it_is_approved() {
    let env = Env::new();
    env.mock(
        "plan_resume.toml",
        "",
        "[security]\nautonomy = \"supervised\"\n[tools.plan]\nenabled = true\n",
    );
    // Each round: the run stops at a call that waits (the plan call, asked
    // about each time it is made, or a leaf's command), the operator
    // approves it, and the plan called again goes on from there.
    let mut conv: Option<String> = None;
    let mut approved: Vec<String> = Vec::new();
    loop {
        let mut args = vec!["agent", "-m", "three lines", "--json"];
        if let Some(c) = &conv {
            args.extend(["--resume", c.as_str()]);
        }
        let (r, v) = env.json(&args);
        conv = v["conversation_id"].as_str().map(String::from);
        // Nothing ran that was not approved.
        let shells = approved.iter().filter(|t| *t == "shell").count();
        assert!(canary(&env).len() <= shells, "{v}");
        if r.code == 0 {
            break;
        }
        assert_eq!(r.code, 4, "{r:?}");
        assert!(v["tool_calls"][0]["pending_approval"].is_string(), "{v}");
        let (_, pending) = env.json(&["approvals", "list", "--json"]);
        let waiting: Vec<&Value> = pending
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["status"] == "pending")
            .collect();
        assert_eq!(waiting.len(), 1, "{pending}");
        let id = waiting[0]["id"].as_str().unwrap();
        assert_eq!(env.run(&["approve", id, "--yes"]).code, 0);
        approved.push(waiting[0]["tool"].as_str().unwrap().to_string());
        assert!(
            approved.len() <= 7,
            "more approvals than calls: {approved:?}"
        );
    }
    // Each leaf's command once, each after its approval.
    assert_eq!(approved.iter().filter(|t| *t == "shell").count(), 3);
    assert_eq!(canary(&env), ["alpha", "beta", "gamma"]);
    let (root, _) = newest_tree(&env);
    for (id, t) in tasks(&env, &root) {
        assert_eq!(t["state"], "done", "{id}");
    }
}

#[test]
fn a_task_that_never_answers_is_stopped_by_its_rounds_or_its_tokens() {
    let env = Env::new();
    for (extra, budget, rounds) in [
        ("task_rounds = 2\n", "rounds", 2),
        ("task_rounds = 50\ntask_tokens = 150\n", "tokens", 1),
    ] {
        env.mock("plan_budgets.toml", "", &format!("{FULL}{extra}"));
        let (r, v) = env.json(&["agent", "-m", "loop in a task", "--json"]);
        assert_eq!(r.code, 6, "{budget}: {r:?}");
        assert_eq!(v["tool_calls"][0]["budget"], budget);
        let (root, _) = newest_tree(&env);
        let all = tasks(&env, &root);
        let t = task(&all, "task-1");
        assert_eq!(
            (t["state"].as_str(), t["budget"].as_str()),
            (Some("stopped"), Some(budget))
        );
        assert!(t["rounds"].as_u64().unwrap() >= rounds, "{t}");
        assert!(t["rounds"].as_u64().unwrap() < 50, "{t}");
    }
}

#[test]
fn ctrl_c_stops_the_whole_tree() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    slow(&env, 1000);
    let child = env
        .command(&["agent", "-m", "three lines"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_until(
        std::time::Duration::from_secs(30),
        "the first leaf's line",
        || !canary(&env).is_empty(),
    );
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{out:?}");
    assert_eq!(canary(&env), ["alpha"]);
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(task(&all, "task-3")["attempts"], 0, "{all:?}");
    assert_ne!(all[0].1["state"], "done");
}

#[test]
fn no_memory_runs_no_plan_and_stores_nothing() {
    let env = Env::new();
    env.mock("plan_resume.toml", "", FULL);
    let (r, v) = env.json(&["agent", "--no-memory", "-m", "three lines", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["tool_calls"][0]["status"], "failed");
    assert!(v["answer"].as_str().unwrap().contains("--no-memory"), "{v}");
    assert!(canary(&env).is_empty());
    let (_, trees) = env.json(&["task", "list", "--json"]);
    assert_eq!(trees, json!([]));
}

#[test]
fn a_task_that_plans_goes_on_within_what_its_subtasks_left_of_the_tree() {
    // The child's one request spends the tree's tokens: its parent, whose
    // turn goes on after the plan it called, makes no call after that.
    let env = Env::new();
    env.mock(
        "plan_nested_budget.toml",
        "",
        &format!("{FULL}tree_tokens = 100\n"),
    );
    let (r, v) = env.json(&["agent", "-m", "nested tokens", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["tool_calls"][0]["budget"], "tree_tokens", "{v}");
    assert!(canary(&env).is_empty(), "{:?}", canary(&env));
    assert!(env.receipts().iter().all(|r| r["tool"] != "shell"));
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(task(&all, "task-1")["budget"], "tree_tokens", "{all:?}");
    // The tree spent what its tasks spent, and stopped there: one request
    // past the budget at most, never another task's worth.
    let spent = all[0].1["tokens"].as_u64().unwrap();
    let leaves: u64 = all[1..]
        .iter()
        .map(|(_, t)| t["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(spent, leaves, "{all:?}");
}

#[test]
fn a_task_call_ends_at_the_trees_wall_clock() {
    let env = Env::new();
    env.mock(
        "plan_nested_budget.toml",
        "",
        "[security]\nautonomy = \"full\"\nshell_allowlist = [\"echo\", \"sleep\"]\n\
         [tools.plan]\nenabled = true\nwall_clock_secs = 1\n",
    );
    let began = std::time::Instant::now();
    let (r, v) = env.json(&["agent", "-m", "outlive the clock", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["tool_calls"][0]["budget"], "wall_clock", "{v}");
    assert!(began.elapsed() < std::time::Duration::from_secs(3), "{r:?}");
    // The command was killed with the clock: its line never comes.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(canary(&env).is_empty(), "{:?}", canary(&env));
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(task(&all, "task-1")["state"], "stopped", "{all:?}");
}

#[test]
fn a_tasks_message_recalled_later_is_not_the_users() {
    let env = Env::new();
    env.mock(
        "plan_recall.toml",
        "",
        &format!("{FULL}[memory]\nrecall = \"always\"\n"),
    );
    let r = env.run(&["agent", "-m", "plan for later"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = env.run(&["agent", "-m", "what was orioleqz about?"]);
    assert_eq!(r.code, 0, "{r:?}");
    let requests = env.requests();
    let notes = requests.last().unwrap()["request"]["messages"][0]["notes"]
        .as_str()
        .unwrap_or_else(|| panic!("no notes: {requests:?}"))
        .to_string();
    // The task's message (the model's plan, with an earlier task's result
    // in it) is recalled as the plan's, never as what the user asked.
    assert!(notes.contains("orioleqz"), "{notes}");
    for line in notes.lines().filter(|l| l.contains("orioleqz")) {
        assert!(!line.contains(", user)"), "{line}");
        assert!(
            line.contains("plan task (written by the assistant"),
            "{line}"
        );
    }
}

#[test]
fn a_corrective_subtask_the_operator_would_be_asked_about_is_not_added_unasked() {
    let env = Env::new();
    env.mock(
        "plan_fix_supervised.toml",
        "",
        "[security]\nautonomy = \"supervised\"\n[tools.plan]\nenabled = true\n",
    );
    std::fs::write(env.ws.join("private.txt"), "zqprivate line").unwrap();
    // The plan call waits; the operator approves the tree it shows.
    let (r, v) = env.json(&["agent", "-m", "check the child", "--json"]);
    assert_eq!(r.code, 4, "{r:?}");
    let conv = v["conversation_id"].as_str().unwrap().to_string();
    assert_eq!(env.run(&["approve", "last", "--yes"]).code, 0);
    let (r, v) = env.json(&[
        "agent",
        "--resume",
        &conv,
        "-m",
        "check the child",
        "--json",
    ]);
    assert_eq!(v["tool_calls"][0]["tool"], "plan", "{r:?}");
    // The evaluator's new task, with a tool no approved task named, never
    // ran: no read, no receipt, nothing of the file anywhere.
    assert!(env.receipts().iter().all(|r| r["tool"] != "file_read"));
    for req in env.requests() {
        assert!(!req.to_string().contains("zqprivate"), "{req}");
    }
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    assert_eq!(all.len(), 3, "{all:?}");
    let parent = task(&all, "task-1");
    assert_eq!(parent["state"], "failed", "{parent}");
    assert!(
        parent["result"]
            .as_str()
            .unwrap()
            .contains("corrective subtask was not added"),
        "{parent}"
    );
}

#[test]
fn no_evaluation_runs_once_the_tree_spent_its_tokens() {
    let env = Env::new();
    env.mock(
        "plan_eval_budget.toml",
        "",
        &format!("{FULL}tree_tokens = 100\n"),
    );
    let (r, v) = env.json(&["agent", "-m", "evaluate past the budget", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["tool_calls"][0]["budget"], "tree_tokens", "{v}");
    let evaluations = env
        .requests()
        .iter()
        .filter(|r| r.to_string().contains("Evaluate the subtasks"))
        .count();
    assert_eq!(evaluations, 0);
    let (root, _) = newest_tree(&env);
    let all = tasks(&env, &root);
    let parent = task(&all, "task-1");
    assert_eq!(parent["budget"], "tree_tokens", "{parent}");
    assert!(
        parent["result"]
            .as_str()
            .unwrap()
            .contains("its evaluation did not run"),
        "{parent}"
    );
}
