//! The acceptance tests, each on the real binary in a temporary home.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, fixture, lit};
use serde_json::Value;

/// Acceptance test 1: `init` with no state dir creates the config, the memory database and
/// the workspace.
#[test]
fn at1_init_creates_state_config_memory_and_workspace() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    std::fs::remove_dir_all(&env.ws).unwrap();
    let r = env.run(&["init"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.state.join("config.toml").is_file());
    assert!(env.state.join("memory.sqlite").is_file());
    use std::os::unix::fs::PermissionsExt;
    for f in ["config.toml", "memory.sqlite"] {
        let mode = std::fs::metadata(env.state.join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    let default_ws = env.home.join("latchclaw-workspace");
    assert!(default_ws.is_dir(), "{r:?}");
    // The written config is valid, and a second init keeps it.
    assert_eq!(env.run(&["config", "validate"]).code, 0);
    let again = env.run(&["init"]);
    assert!(again.stdout.contains("kept"), "{again:?}");
    // The default provider answers out of the box, with no key.
    let r = env.run(&["agent", "-m", "hi there"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("You said: hi there"), "{r:?}");
}

#[test]
fn at1_init_with_workspace_flag_and_mode() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let ws = env.root.join("my ws $weird");
    let r = env.run(&["init", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(ws.is_dir());
    let mode = std::fs::metadata(&env.state).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let (_, cfg) = env.json(&["config", "show", "--json"]);
    assert_eq!(cfg["workspace_dir"], ws.display().to_string());
}

/// Acceptance test 2: `autonomy = "godmode"`: `config validate` exits non-zero and names the
/// allowed values.
#[test]
fn at2_bad_autonomy_names_allowed_values() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"godmode\"\n");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("security.autonomy"), "{r:?}");
    assert!(r.stderr.contains("readonly, supervised, full"), "{r:?}");
    // Every other command refuses the same config the same way.
    assert_eq!(env.run(&["agent", "-m", "hi"]).code, 2);
}

/// Acceptance test 3: Mock fixture returns "hello": `agent -m "hi"` prints hello; memory
/// holds the user and assistant turns.
#[test]
fn at3_hello_and_both_turns_in_memory() {
    let env = Env::new();
    env.mock("hello.toml", "", "");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\n"), "{r:?}");
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let conv = list[0]["conversation_id"].as_str().unwrap().to_string();
    assert_eq!(list[0]["turns"], 2);
    let (_, turns) = env.json(&["memory", "show", &conv, "--json"]);
    let turns = turns.as_array().unwrap();
    assert_eq!(turns[0]["role"], "user");
    assert_eq!(turns[0]["content"], "hi");
    assert_eq!(turns[1]["role"], "assistant");
    assert_eq!(turns[1]["content"], "hello");
    assert_eq!(turns[1]["provider"], "m");
    assert_eq!(turns[1]["model"], "mock");
    assert!(turns[0]["timestamp"].as_str().unwrap().ends_with('Z'));
}

/// Acceptance test 4: Mock fixture emits `file_list {path="."}`: it runs inside the
/// workspace, a receipt is written, the final answer includes the file list.
#[test]
fn at4_file_list_runs_in_workspace_with_receipt_and_summary() {
    let env = Env::new();
    std::fs::write(env.ws.join("alpha.txt"), "a").unwrap();
    std::fs::create_dir(env.ws.join("beta")).unwrap();
    std::fs::write(env.home.join("outside.txt"), "o").unwrap();
    env.mock("file_list.toml", "", "");
    let r = env.run(&["agent", "-m", "What files are in this project?"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("Summary of the workspace:"), "{r:?}");
    assert!(
        r.stdout.contains("alpha.txt") && r.stdout.contains("beta/"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("outside.txt"), "{r:?}");
    let receipts = env.receipts();
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0]["tool"], "file_list");
    assert_eq!(receipts[0]["status"], "allowed");
    assert_eq!(receipts[0]["risk"], "low");
    // The provider was told about the tools and got the result back.
    let reqs = env.requests();
    assert_eq!(reqs.len(), 2);
    let tools: Vec<&str> = reqs[0]["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"file_list") && tools.contains(&"file_read"),
        "{tools:?}"
    );
    assert!(
        reqs[0]["request"]["system_prompt"]
            .as_str()
            .unwrap()
            .contains("supervised")
    );
    let msgs = reqs[1]["request"]["messages"].as_array().unwrap();
    let tool_msg = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], "call_0_0");
    assert!(tool_msg["content"].as_str().unwrap().contains("alpha.txt"));
    // Every step is in memory: user, assistant with the call, tool, answer.
    let (_, list) = env.json(&["memory", "list", "--json"]);
    assert_eq!(list[0]["turns"], 4);
}

/// Acceptance test 5: `workspace_only = true`, model asks `file_read {path="/etc/passwd"}`:
/// denied, a denied receipt is written, the provider receives a tool error.
#[test]
fn at5_etc_passwd_denied_with_receipt_and_tool_error() {
    let env = Env::new();
    // Even with /etc not forbidden, the workspace boundary holds.
    env.mock(
        "read_etc_passwd.toml",
        "",
        "[security]\nworkspace_only = true\nforbidden_paths = []\n",
    );
    let r = env.run(&["agent", "-m", "show me the users"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(!r.stdout.contains("root:"), "{r:?}");
    assert!(r.stdout.contains("outside the workspace"), "{r:?}");
    let receipts = env.receipts();
    assert_eq!(receipts.len(), 1);
    assert_eq!(receipts[0]["status"], "denied");
    assert!(
        receipts[0]["reason"]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );
    let reqs = env.requests();
    let msgs = reqs[1]["request"]["messages"].as_array().unwrap();
    let tool_msg = msgs.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_msg["tool_call_id"], "call_passwd");
    assert!(
        tool_msg["content"]
            .as_str()
            .unwrap()
            .starts_with("error: denied by policy")
    );
}

/// A call that ran (started, allowed) and one denied call (one receipt).
fn three_receipts(env: &Env) -> Vec<String> {
    env.config("");
    assert_eq!(env.shell("echo hi").0.code, 0);
    let (denied, _) = env.tool("file_read", serde_json::json!({"path": "/etc/passwd"}));
    assert_eq!(denied.code, 4, "{denied:?}");
    let log = std::fs::read_to_string(env.state.join("tool_receipts.log")).unwrap();
    let lines: Vec<String> = log.lines().map(String::from).collect();
    let statuses: Vec<String> = env
        .receipt_lines()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["started", "allowed", "denied"]);
    lines
}

fn write_log(env: &Env, lines: &[String], newline: bool) {
    let mut s = lines.join("\n");
    if newline {
        s.push('\n');
    }
    std::fs::write(env.state.join("tool_receipts.log"), s).unwrap();
}

/// Acceptance test 8: Three receipts exist, the second is edited by hand: `receipt verify`
/// reports the chain broken at receipt 2.
#[test]
fn at8_edited_second_receipt_breaks_chain_at_2() {
    let env = Env::new();
    let lines = three_receipts(&env);
    let ok = env.run(&["receipt", "verify"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(ok.stdout.starts_with("ok: 3 receipts, head "), "{ok:?}");
    let mut edited = lines.clone();
    edited[1] = edited[1].replace("\"allowed\"", "\"denied\"");
    assert_ne!(edited[1], lines[1]);
    write_log(&env, &edited, true);
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stdout.contains("receipt 2 of 3"), "{r:?}");
    assert!(r.stdout.contains("bad hash"), "{r:?}");
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (v["ok"].as_bool(), v["broken_at"].as_u64()),
        (Some(false), Some(2))
    );
}

#[test]
fn receipt_deletion_reorder_and_torn_line_are_located() {
    let env = Env::new();
    let l = three_receipts(&env);
    write_log(&env, &[l[0].clone(), l[2].clone()], true);
    let r = env.run(&["receipt", "verify"]);
    assert!(
        r.code == 7 && r.stdout.contains("receipt 2 of 2: broken link"),
        "{r:?}"
    );

    write_log(&env, &[l[0].clone(), l[2].clone(), l[1].clone()], true);
    let r = env.run(&["receipt", "verify"]);
    assert!(r.code == 7 && r.stdout.contains("receipt 2 of 3"), "{r:?}");

    // A crash mid-write leaves a torn last line: verify names it, and the
    // next tool call is refused rather than chained onto it.
    let mut torn = l.clone();
    torn[2].truncate(30);
    write_log(&env, &torn, false);
    let r = env.run(&["receipt", "verify"]);
    assert!(
        r.code == 7 && r.stdout.contains("receipt 3 of 3: torn line"),
        "{r:?}"
    );
    let r = env.run(&["tool", "run", "time", "--json", "{}"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("torn"), "{r:?}");
    assert!(r.stdout.is_empty(), "the tool did not run: {r:?}");
    let after = std::fs::read_to_string(env.state.join("tool_receipts.log")).unwrap();
    assert_eq!(after.lines().count(), 3, "nothing appended");
}

/// Acceptance test 9: Reliable provider `[bad_provider, mock_provider]`, bad one times out:
/// the fallback is logged and the answer comes from the mock.
#[test]
fn at9_reliable_falls_back_from_timeout_to_mock() {
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"reliable\"\n\
         [providers.models.reliable]\nkind = \"reliable\"\nproviders = [\"bad_provider\", \"mock_provider\"]\n\
         [providers.models.bad_provider]\nkind = \"mock\"\nfixture = {}\n\
         [providers.models.mock_provider]\nkind = \"mock\"\nfixture = {}\n",
        lit(&fixture("timeout.toml")),
        lit(&fixture("hello.toml"))
    ));
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\n"), "{r:?}");
    assert!(r.stderr.contains("provider_fallback"), "{r:?}");
    assert!(
        r.stderr.contains("bad_provider") && r.stderr.contains("timeout"),
        "{r:?}"
    );
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let conv = list[0]["conversation_id"].as_str().unwrap().to_string();
    let (_, turns) = env.json(&["memory", "show", &conv, "--json"]);
    assert_eq!(turns[1]["provider"], "mock_provider");
}

/// Acceptance test 10: A previous conversation contains "Aardvark adapter":
/// `memory search "aardvark"` returns its conversation id.
#[test]
fn at10_memory_search_finds_conversation() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    let (_, first) = env.json(&["agent", "-m", "notes on the Aardvark adapter", "--json"]);
    env.run(&["agent", "-m", "something unrelated"]);
    let conv = first["conversation_id"].as_str().unwrap();
    let r = env.run(&["memory", "search", "aardvark"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(conv), "{r:?}");
    assert!(!r.stdout.contains("unrelated"), "{r:?}");
    let (_, hits) = env.json(&["memory", "search", "AARDVARK", "--json"]);
    assert_eq!(hits[0]["conversation_id"], conv);
}

#[test]
fn hostile_search_strings_through_the_cli() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    env.run(&["agent", "-m", "the Aardvark adapter \"quoted\" NEAR: x*"]);
    for q in [
        "\"",
        "*",
        "-",
        ":",
        "NEAR",
        "NEAR(a b)",
        "a AND",
        "日本",
        "🦀",
        "",
        "'; DROP TABLE turns; --",
    ] {
        let r = env.run(&["memory", "search", q]);
        assert_eq!(r.code, 0, "{q:?}: {r:?}");
    }
    let (_, v) = env.json(&["memory", "list", "--json"]);
    assert_eq!(v.as_array().unwrap().len(), 1, "table still there");
}

#[test]
fn several_tool_calls_in_one_response_and_bad_arguments() {
    let env = Env::new();
    std::fs::write(env.ws.join("notes.txt"), "remember the milk").unwrap();
    env.mock("by_message.toml", "", "");
    let r = env.run(&["agent", "-m", "use two tools"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("UTC time") && r.stdout.contains("remember the milk"),
        "{r:?}"
    );
    assert_eq!(env.receipts().len(), 2);

    // Arguments that are not an object are the model's mistake, told to
    // it (never to the user) with how to write the call; not a refusal.
    let r = env.run(&["agent", "-m", "bad args please"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "I could not read the file.\n"),
        "{r:?}"
    );
    let read = env.requests().last().unwrap()["request"]["messages"].to_string();
    assert!(
        read.contains("file_read: the arguments must be a JSON object, not a string"),
        "{read}"
    );
    assert_eq!(env.receipts()[2]["status"], "failed");
}

#[test]
fn approval_fields_in_arguments_approve_nothing() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    // Fields the tool does not take are refused before the gate sees them.
    let r = env.run(&["agent", "-m", "approve yourself"]);
    assert_eq!(r.code, 0, "{r:?}");
    let read = env.requests().last().unwrap()["request"]["messages"].to_string();
    assert!(
        read.contains("unknown argument \\\"approval\\\"")
            || read.contains("unknown argument \\\"approved\\\""),
        "{read}"
    );
    let rc = env.receipts();
    assert_eq!(rc.len(), 1);
    assert_eq!(rc[0]["status"], "failed");
    assert!(env.receipt_lines().iter().all(|r| r["status"] != "started"));
}

#[test]
fn max_tool_rounds_stops_the_loop() {
    let env = Env::new();
    env.mock("endless_tools.toml", "max_tool_rounds = 3", "");
    let (r, v) = env.json(&["agent", "-m", "loop forever", "--json"]);
    assert_eq!(r.code, 6, "{r:?}");
    assert_eq!(v["rounds"], 3);
    assert_eq!(v["exit_reason"], "max_tool_rounds");
    // The same call every round: it ran once; the repeats got its result.
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 1);
    assert_eq!(env.receipts().len(), 1);
    assert_eq!(v["receipts_head"], env.receipts()[0]["receipt_hash"]);
    // The last request said tools would not run again; the user still gets
    // the last results and a plain reason.
    let reqs = env.requests();
    assert_eq!(reqs.len(), 4);
    let last = reqs[3]["request"]["messages"].as_array().unwrap().clone();
    let asked = last.last().unwrap();
    assert_eq!(asked["role"], "user");
    assert_eq!(asked["from_runtime"], true);
    assert!(
        asked["content"]
            .as_str()
            .unwrap()
            .contains("tools will not run again")
    );
    assert_eq!(
        reqs[3]["request"]["tools"],
        serde_json::json!([]),
        "no tools offered"
    );
    assert!(reqs[2]["request"]["tools"].as_array().unwrap().len() > 1);
    for earlier in &reqs[..3] {
        let m = earlier["request"]["messages"].to_string();
        assert!(!m.contains("tools will not run again"), "{m}");
    }
    // Each repeat was answered with a user-role line, not inside the result.
    let m = reqs[2]["request"]["messages"].as_array().unwrap();
    let line = m.last().unwrap();
    assert_eq!(
        (&line["role"], &line["from_runtime"]),
        (&"user".into(), &true.into())
    );
    assert!(
        line["content"]
            .as_str()
            .unwrap()
            .contains("called time again"),
        "{line}"
    );
    let results: Vec<&serde_json::Value> = m.iter().filter(|m| m["role"] == "tool").collect();
    assert!(
        results
            .iter()
            .all(|r| !r["content"].as_str().unwrap().contains("latchclaw"))
    );
    let answer = v["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("stopped after 3 tool rounds"),
        "{answer}"
    );
    assert!(
        answer.contains("[time]") && answer.contains("Local time"),
        "{answer}"
    );
    // latchclaw's own words are not stored as the model's.
    let conv = v["conversation_id"].as_str().unwrap();
    let (_, shown) = env.json(&["memory", "show", conv, "--json"]);
    let turns = shown["turns"]
        .as_array()
        .unwrap_or_else(|| shown.as_array().unwrap());
    let last_turn = turns.last().unwrap();
    assert_eq!(last_turn["role"], "system", "{last_turn}");
    assert!(turns.iter().all(|t| {
        !(t["role"] == "assistant"
            && t["content"]
                .as_str()
                .unwrap_or("")
                .contains("stopped after"))
    }));
    // Resuming sends no "stopped" line back as the model's own.
    env.run(&["agent", "-c", "-m", "go on"]);
    let reqs = env.requests();
    let resumed = reqs.last().unwrap()["request"]["messages"].to_string();
    assert!(!resumed.contains("stopped after"), "{resumed}");
}

#[test]
fn told_that_tools_stop_the_model_answers_from_what_it_has() {
    let env = Env::new();
    env.mock("last_round.toml", "max_tool_rounds = 2", "");
    let (r, v) = env.json(&["agent", "-m", "check things", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "From the listing and the clock: all fine.");
    assert_eq!(v["exit_reason"], "completed");
    assert_eq!(v["rounds"], 2);
}

#[test]
fn invented_tool_results_are_never_the_answer() {
    let env = Env::new();
    env.mock("fake_result.toml", "", "");
    // Asked once for plain text, the model answers.
    let (r, v) = env.json(&["agent", "-m", "what time is it?", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        v["answer"],
        "I have not looked at a clock; ask me to use the time tool."
    );
    let reqs = env.requests();
    let m = reqs[1]["request"]["messages"].as_array().unwrap();
    assert!(
        m.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("plain text")
    );
    // A model that does it again: no answer, exit 3, nothing that looks
    // like a result on stdout.
    let r = env.run(&["agent", "-m", "twice: what time is it?"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        !r.stdout.contains("tool_result") && !r.stdout.contains("12:00"),
        "{r:?}"
    );
    assert!(r.stdout.contains("tool-call text"), "{r:?}");
}

#[test]
fn a_failed_call_reports_its_error_not_the_gate_reason() {
    let env = Env::new();
    env.mock("retry_failed.toml", "", "");
    let (_, v) = env.json(&["agent", "-m", "read it", "--json"]);
    let first = &v["tool_calls"][0];
    assert_eq!(first["status"], "failed", "{v}");
    let reason = first["reason"].as_str().unwrap();
    assert!(reason.starts_with("failed: "), "{reason}");
    assert!(!reason.contains("under supervised"), "{reason}");
    let rc = env.receipts();
    let outcome = rc.iter().find(|r| r["status"] == "failed").unwrap();
    assert_eq!(outcome["reason"], first["reason"]);
}

#[test]
fn a_refusal_beats_the_round_limit_and_estop_beats_both() {
    let env = Env::new();
    env.mock("endless_denied.toml", "max_tool_rounds = 2", "");
    let (r, v) = env.json(&["agent", "-m", "read it", "--json"]);
    assert_eq!(v["turn_reason"], "max_tool_rounds", "{v}");
    assert_eq!(
        (v["exit_code"].as_i64(), &v["exit_reason"]),
        (Some(4), &"refused".into()),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap().starts_with("file_read: "),
        "{v}"
    );
    assert_eq!(r.code, 4, "{r:?}");
    // The refused call repeated is not judged again (one receipt, one
    // record): the model is told it was refused and not to retry.
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(env.receipts().len(), 1);
    let reqs = env.requests();
    let line = reqs[2]["request"]["messages"].as_array().unwrap().clone();
    let lines: Vec<&str> = line
        .iter()
        .filter(|m| m["from_runtime"] == true)
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("refused before")),
        "{lines:?}"
    );
    assert_eq!(env.run(&["estop"]).code, 0);
    let (r, v) = env.json(&["agent", "-m", "read it", "--json"]);
    assert_eq!(v["turn_reason"], "max_tool_rounds", "{v}");
    assert_eq!(
        (v["exit_code"].as_i64(), &v["exit_reason"]),
        (Some(5), &"estop".into()),
        "{v}"
    );
    assert_eq!(r.code, 5, "{r:?}");
}

#[test]
fn an_identical_repeat_is_not_run_again_but_answered_from() {
    let env = Env::new();
    env.mock("repeats.toml", "max_tool_rounds = 5", "");
    let (r, v) = env.json(&["agent", "-m", "what is here?", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "Answered from the listing.");
    // file_list, (repeat: not run), time, file_list again (another call ran
    // in between, so it runs): three calls, three receipts.
    let names: Vec<&str> = v["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["file_list", "time", "file_list"]);
    assert_eq!(env.receipts().len(), 3);
    // The repeat got the earlier result back with the instruction.
    let reqs = env.requests();
    let third = &reqs[2]["request"]["messages"];
    let last = third.as_array().unwrap().last().unwrap();
    let text = last["content"].as_str().unwrap();
    assert!(
        text.contains("not run again") && text.contains("Answer the user"),
        "{text}"
    );
}

#[test]
fn a_failed_call_repeated_as_it_is_is_not_run_again() {
    // A 0.5B model called file_list on a missing path five times in a row.
    let env = Env::new();
    env.mock("retry_failed.toml", "", "");
    let (r, v) = env.json(&["agent", "-m", "read it", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(env.receipts().len(), 1);
    let reqs = env.requests();
    let m = reqs[2]["request"]["messages"].to_string();
    assert!(m.contains("it failed before"), "{m}");
}

#[test]
fn a_tool_without_arguments_called_again_with_made_up_ones_is_a_repeat() {
    let env = Env::new();
    env.mock("time_made_up.toml", "", "");
    let (r, v) = env.json(&["agent", "-m", "what time is it", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    // time({}) ran; time({"current": …}) after it was answered from it.
    assert_eq!(v["tool_calls"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["answer"], "It is late.");
}

#[test]
fn provider_failure_still_persists_the_user_turn() {
    let env = Env::new();
    env.mock("server_error.toml", "", "");
    let r = env.run(&["agent", "-m", "are you there?"]);
    // The provider error's kind, as its message names it.
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("(server)"), "{r:?}");
    assert!(r.stdout.is_empty());
    let r = env.run(&["memory", "search", "there"]);
    assert!(r.stdout.contains("user"), "{r:?}");
}

#[test]
fn estop_denies_tools_but_the_agent_still_answers() {
    let env = Env::new();
    env.mock("file_list.toml", "", "");
    assert_eq!(env.run(&["estop"]).code, 0);
    assert!(env.state.join("ESTOP").exists());
    let r = env.run(&["agent", "-m", "list files"]);
    assert_eq!(r.code, 5, "{r:?}");
    assert!(r.stdout.contains("emergency stop"), "{r:?}");
    let rc = env.receipts();
    assert_eq!(rc[0]["status"], "denied");
    assert!(rc[0]["reason"].as_str().unwrap().contains("emergency stop"));
    let r = env.run(&["tool", "run", "time", "--json", "{}"]);
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(env.run(&["estop", "--clear"]).code, 0);
    assert_eq!(env.run(&["agent", "-m", "list files"]).code, 0);
    // An ESTOP path that cannot be checked (the state dir is a file, so the
    // check fails with ENOTDIR) counts as on. A run stops before it, at the
    // state dir itself; the gate alone (`policy check`) still meets it.
    let cfg = env.root.join("elsewhere.toml");
    std::fs::write(
        &cfg,
        format!(
            "workspace_dir = {}\n[memory]\npath = {}\n[receipts]\npath = {}\n",
            lit(&env.ws),
            lit(&env.root.join("m.sqlite")),
            lit(&env.root.join("r.log"))
        ),
    )
    .unwrap();
    std::fs::remove_dir_all(&env.state).unwrap();
    std::fs::write(&env.state, "not a directory").unwrap();
    let cfg = cfg.to_str().unwrap();
    let r = env.run(&["--config", cfg, "tool", "run", "time", "--json", "{}"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr
            .contains("set LATCHCLAW_HOME to a writable directory"),
        "{r:?}"
    );
    let (r, v) = env.json(&["--config", cfg, "policy", "check", "time", "--json", "{}"]);
    assert_eq!(
        (&v["decision"], &v["refusal"]),
        (&"deny".into(), &"estop".into()),
        "{r:?}"
    );
    assert!(
        v["reason"].as_str().unwrap().contains("cannot be checked"),
        "{r:?}"
    );
}

#[test]
fn stdout_is_only_the_answer_and_json_logs_parse() {
    let env = Env::new();
    env.mock("file_list.toml", "", "");
    let r = env.run_env(
        &["agent", "-m", "list"],
        &[("LATCHCLAW_LOG", "json"), ("LATCHCLAW_LOG_LEVEL", "info")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("Summary of the workspace:"), "{r:?}");
    let events: Vec<Value> = r
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let names: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    for want in [
        "startup",
        "config_path",
        "workspace_path",
        "provider_selected",
        "channel_started",
        "conversation_started",
        "tool_requested",
        "tool_completed",
        "receipt_written",
        "memory_persisted",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
}

#[test]
fn secrets_never_leave_the_environment() {
    let env = Env::new();
    let secret = "sk-test-DO-NOT-LEAK-0123456789";
    env.mock(
        "file_list.toml",
        "",
        "[providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"LATCHCLAW_TEST_KEY\"\n",
    );
    let vars = [
        ("LATCHCLAW_TEST_KEY", secret),
        ("LATCHCLAW_LOG", "json"),
        ("LATCHCLAW_LOG_LEVEL", "trace"),
    ];
    let mut all = String::new();
    for args in [
        &["config", "show"][..],
        &["config", "show", "--json"],
        &["provider", "list"],
        &["provider", "list", "--json"],
        &["agent", "-m", "list"],
        &["receipt", "list", "--json"],
        &["memory", "list", "--json"],
    ] {
        let r = env.run_env(args, &vars);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        all.push_str(&r.stdout);
        all.push_str(&r.stderr);
    }
    assert!(
        all.contains("LATCHCLAW_TEST_KEY (set)"),
        "shows that it is set"
    );
    assert!(!all.contains(secret));
    for f in ["tool_receipts.log", "memory.sqlite", "memory.sqlite-wal"] {
        let bytes = std::fs::read(env.state.join(f)).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains(secret), "{f}");
    }
}

#[test]
fn an_empty_answer_after_tools_is_asked_for_then_shows_the_results() {
    let env = Env::new();
    env.mock("empty_answer.toml", "", "");
    let (r, v) = env.json(&["agent", "-m", "answers: the time?", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "It is time.");
    let reqs = env.requests();
    let asked = reqs[2]["request"]["messages"].to_string();
    assert!(asked.contains("your reply was empty"), "{asked}");
    // Still empty: the user gets the tool results, never a blank answer.
    let (r, v) = env.json(&["agent", "-m", "the time?", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let answer = v["answer"].as_str().unwrap();
    assert!(answer.starts_with("the model gave no answer"), "{answer}");
    assert!(
        answer.contains("[time]") && answer.contains("Local time"),
        "{answer}"
    );
    assert_eq!(v["turn_reason"], "no_answer", "{v}");
}
