//! What latchclaw does for small local models (README: Small local models)
//! against the fake OpenAI-compatible server and the mock: structured
//! replies held to a JSON Schema and the fall-back from a server that
//! refuses it, the one repair of a malformed call, no claimed effect
//! without its call, pseudo calls never an exit-0 answer, and `max_tools`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{BASIC_TOOLS, Env, Run, commit_all};
use fake_server::{FakeServer, Reply};
use serde_json::{Value, json};

fn env_for(server: &FakeServer, extra: &str) -> Env {
    let env = Env::new();
    std::fs::write(env.ws.join("alpha.txt"), "a").unwrap();
    env.config(&format!(
        "default_provider = \"local\"\n\
         [security]\nautonomy = \"full\"\n[channels.cli]\n{BASIC_TOOLS}\n\
         [providers.models.local]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         model = \"qwen2.5-coder-1.5b\"\ntimeout_secs = 5\nretries = 0\n{extra}\n",
        server.url()
    ));
    env
}

/// `agent --json -m MESSAGE`: the run and its object.
fn agent(env: &Env, msg: &str) -> (Run, Value) {
    let r = env.run(&["agent", "--json", "-m", msg]);
    let v = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    (r, v)
}

/// A completion whose message is `content`, as llama.cpp sends it.
fn says(content: &str) -> Reply {
    let body = json!({"id": "chatcmpl-t", "object": "chat.completion", "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920},
        "timings": {"cache_n": 850}});
    Reply::json(200, body.to_string())
}

/// A completion with one native call.
fn calls(id: &str, name: &str, arguments: Value) -> Reply {
    let body = json!({"id": "chatcmpl-c", "object": "chat.completion", "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function",
                            "function": {"name": name, "arguments": arguments.to_string()}}]},
                     "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920}});
    Reply::json(200, body.to_string())
}

/// A server that has no structured output, as an older llama.cpp: every
/// request carrying `response_format` gets its 400; the others get
/// `replies` in order (the last repeats).
fn refusing(replies: Vec<Reply>) -> FakeServer {
    let served = std::sync::atomic::AtomicUsize::new(0);
    FakeServer::start_with("127.0.0.1:0", move |req, _| {
        if req.json().get("response_format").is_some() {
            return Reply::fixture(400, "format_refused.json");
        }
        let n = served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        replies[n.min(replies.len() - 1)].clone()
    })
}

fn messages(server: &FakeServer, i: usize) -> Vec<Value> {
    server.requests()[i].json()["messages"]
        .as_array()
        .unwrap()
        .clone()
}

fn warnings(r: &Run, what: &str) -> usize {
    r.stderr.lines().filter(|l| l.contains(what)).count()
}

// 1. Structured replies.

#[test]
fn structured_mode_holds_every_reply_to_a_schema_of_the_tools() {
    let server = FakeServer::start(vec![
        says("{\"action\": \"call\", \"tool\": \"file_list\", \"arguments\": {\"path\": \".\"}}"),
        says("{\"action\": \"answer\", \"text\": \"There is \\\"alpha.txt\\\".\"}"),
    ]);
    let env = env_for(&server, "tool_mode = \"structured\"");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "There is \"alpha.txt\".");
    assert_eq!(v["tool_mode"], "structured");
    assert_eq!(env.receipts()[0]["tool"], "file_list");
    let reqs = server.requests();
    let first = reqs[0].json();
    assert!(first.get("tools").is_none(), "tools go in the schema");
    let format = &first["response_format"];
    assert_eq!(format["type"], "json_schema");
    let shapes = format["json_schema"]["schema"]["anyOf"].as_array().unwrap();
    // One shape per offered tool, then the answer.
    assert_eq!(shapes.len(), 7, "{format}");
    let file_read = shapes
        .iter()
        .find(|s| s["properties"]["tool"]["const"] == "file_read")
        .unwrap();
    assert_eq!(file_read["properties"]["action"]["const"], "call");
    assert_eq!(
        file_read["properties"]["arguments"]["additionalProperties"],
        false
    );
    assert_eq!(
        file_read["required"],
        json!(["action", "tool", "arguments"])
    );
    let answer = shapes.last().unwrap();
    assert_eq!(answer["properties"]["text"]["type"], "string");
    // On the wire each shape names its tool before its arguments (a
    // grammar follows the order the schema lists them in).
    let body = &reqs[0].body;
    let at = |k: &str| body.find(k).unwrap();
    assert!(at("\"response_format\"") < at("\"action\":{\"type\""));
    assert!(body.find("\"tool\":{\"type\"").unwrap() < body.rfind("\"arguments\":{").unwrap());
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("{\"action\": \"answer\", \"text\": \"your answer\"}")
            && system.contains(
                "Example: {\"action\": \"call\", \"tool\": \"shell\", \"arguments\": {\"command\": \"wc -l notes.txt\"}}"
            ),
        "{system}"
    );
    // The history goes back in the same form; the result as a framed
    // user message.
    let m = messages(&server, 1);
    assert_eq!(m[0], first["messages"][0], "the same system prompt");
    assert_eq!(
        m[2]["content"],
        "{\"action\": \"call\", \"tool\": \"file_list\", \"arguments\": {\"path\":\".\"}}"
    );
    assert_eq!(m[3]["role"], "user");
    assert!(
        m[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("<tool_result name=\"file_list\">"),
        "{m:?}"
    );
}

#[test]
fn a_structured_answer_streams_as_plain_text() {
    // Streamed as llama.cpp sends it, the JSON cut mid-escape.
    let pieces = [
        "{\"act",
        "ion\": \"answer\", \"te",
        "xt\": \"caf\\u00",
        "e9 \\\"open\\\"\\n",
        "bye\"}",
    ];
    let mut events: Vec<(u64, String)> = pieces
        .iter()
        .map(|p| {
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": p}}]});
            (0, format!("data: {chunk}\n\n"))
        })
        .collect();
    events.push((
        0,
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
            .into(),
    ));
    let server = FakeServer::start(vec![Reply::sse(events)]);
    let env = env_for(&server, "tool_mode = \"structured\"");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "café \"open\"\nbye\n"),
        "{r:?}"
    );
}

#[test]
fn a_server_that_refuses_response_format_falls_back_to_text_once() {
    let fence = "```json\n{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}\n```";
    let server = refusing(vec![
        says(fence),
        says("There is alpha.txt."),
        says("Still alpha.txt."),
    ]);
    let env = env_for(&server, "tool_mode = \"structured\"");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "There is alpha.txt.");
    assert_eq!(v["tool_mode"], "text");
    assert_eq!(warnings(&r, "refuses response_format"), 1, "{r:?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs[0].json().get("response_format").is_some());
    for q in &reqs[1..] {
        let body = q.json();
        assert!(body.get("response_format").is_none());
        let system = body["messages"][0]["content"].as_str().unwrap();
        assert!(system.contains("```json"), "text mode: {system}");
    }
    // Kept: the next run does not ask again, nor says so again.
    let (r, v) = agent(&env, "and now?");
    assert_eq!((r.code, &v["tool_mode"]), (0, &json!("text")), "{r:?}");
    assert_eq!(warnings(&r, "refuses response_format"), 0, "{r:?}");
    assert!(server.requests()[3].json().get("response_format").is_none());
    let (_, shown) = env.json(&["prompt", "show", "--json"]);
    assert_eq!(
        (
            &shown["tool_mode"]["configured"],
            &shown["tool_mode"]["uses"]
        ),
        (&json!("structured"), &json!("text"))
    );
    assert!(
        shown["tool_mode"]["why"]
            .as_str()
            .unwrap()
            .contains("refuses response_format")
    );
}

#[test]
fn provider_test_says_when_the_server_refuses_response_format() {
    let replies = || {
        vec![
            says("pong"),
            says("```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```"),
        ]
    };
    let server = refusing(replies());
    let env = env_for(&server, "tool_mode = \"structured\"");
    let r = env.run(&["provider", "test", "local"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("text:        ok")
            && r.stdout.contains("structured:  refused by the server")
            && r.stdout.contains("tool mode:   structured uses text"),
        "{r:?}"
    );
    let server = refusing(replies());
    let env = env_for(&server, "tool_mode = \"structured\"");
    let (r, v) = env.json(&["provider", "test", "local", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["structured"]["accepted"], false, "{v}");
    assert!(
        v["structured"]["refused"]
            .as_str()
            .unwrap()
            .contains("response_format type must be one of"),
        "{v}"
    );
    assert_eq!(v["tool_mode"]["uses"], "text", "{v}");
}

#[test]
fn auto_turns_structured_when_the_model_writes_calls_as_text() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "qwen_text_tool.json"),
        says("{\"action\": \"answer\", \"text\": \"There is alpha.txt.\"}"),
        says("{\"action\": \"answer\", \"text\": \"Hello.\"}"),
    ]);
    let env = env_for(&server, "");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "There is alpha.txt.");
    assert_eq!(v["tool_mode"], "structured");
    assert_eq!(env.receipts()[0]["tool"], "file_list", "the text call ran");
    assert_eq!(warnings(&r, "structured replies"), 1, "{r:?}");
    let reqs = server.requests();
    assert!(reqs[0].json().get("tools").is_some());
    assert!(reqs[0].json().get("response_format").is_none());
    assert!(reqs[1].json().get("response_format").is_some());
    // The next run starts structured, and `prompt show` says why.
    let (r, _) = agent(&env, "hello");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(server.requests()[2].json().get("response_format").is_some());
    let r = env.run(&["prompt", "show"]);
    assert!(
        r.stdout
            .contains("tool mode of local: auto uses structured (learned ")
            && r.stdout.contains("the model wrote its tool calls as text"),
        "{r:?}"
    );
}

#[test]
fn provider_test_chooses_the_tool_mode_auto_will_use() {
    let server = FakeServer::start(vec![
        says("pong"),
        says("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"),
        says("{\"action\": \"call\", \"tool\": \"get_time\", \"arguments\": {}}"),
    ]);
    let env = env_for(&server, "");
    let r = env.run(&["provider", "test", "local"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("tool calls:  through text")
            && r.stdout.contains("structured:  ok")
            && r.stdout.contains("tool mode:   auto uses structured"),
        "{r:?}"
    );
    assert!(server.requests()[2].json().get("response_format").is_some());
    // A server whose native calls work: native, and nothing is kept.
    let server = FakeServer::start(vec![says("pong"), calls("call_1", "get_time", json!({}))]);
    let env = env_for(&server, "");
    let (r, v) = env.json(&["provider", "test", "local", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (
            &v["tools"]["native"],
            &v["tool_mode"]["uses"],
            &v["structured"]
        ),
        (&json!(true), &json!("native"), &Value::Null),
        "{v}"
    );
    assert_eq!(server.requests().len(), 2);
}

// 2. One repair round.

#[test]
fn a_made_up_tool_gets_one_repair_naming_the_form_the_schema_and_the_error() {
    let server = FakeServer::start(vec![
        calls("call_1", "file_lst", json!({"path": "."})),
        calls("call_2", "file_list", json!({"path": "."})),
        says("There is alpha.txt."),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "There is alpha.txt.");
    let statuses: Vec<&Value> = v["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["status"])
        .collect();
    assert_eq!(statuses, [&json!("failed"), &json!("allowed")]);
    // The repair round's request: the call answered with the note.
    let m = messages(&server, 1);
    assert_eq!(m[3]["role"], "tool");
    assert_eq!(m[3]["tool_call_id"], "call_1");
    let note = m[3]["content"].as_str().unwrap();
    for want in [
        "[latchclaw: the call did not run: unknown tool \"file_lst\"; the tools on this channel: ",
        "Did you mean file_list?",
        "Write the call exactly in this form, with arguments that fit file_list's schema:\n\
         {\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}",
        "file_list's arguments (JSON Schema): {",
        "answer the user in plain text",
    ] {
        assert!(note.contains(want), "{want:?} not in {note}");
    }
    // Memory keeps the error, not the note.
    let (_, turns) = env.json(&[
        "memory",
        "show",
        v["conversation_id"].as_str().unwrap(),
        "--json",
    ]);
    let kept = turns.to_string();
    assert!(
        kept.contains("unknown tool") && !kept.contains("Did you mean"),
        "{kept}"
    );
}

#[test]
fn bad_arguments_go_back_to_the_model_never_to_the_user() {
    let server = FakeServer::start(vec![
        calls("call_1", "time", json!({"format": "%Y"})),
        calls("call_2", "time", json!({})),
        says("It is 2026."),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "what year is it?");
    assert_eq!((r.code, &v["answer"]), (0, &json!("It is 2026.")), "{r:?}");
    let note = messages(&server, 1)[3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.contains(
            "invalid arguments: time: unknown argument \"format\"; it takes no arguments"
        ) && note.contains("{\"name\": \"time\", \"arguments\": {}}")
            && note.contains("time's arguments (JSON Schema)"),
        "{note}"
    );
}

#[test]
fn a_second_malformed_call_ends_the_turn_with_exit_3() {
    let server = FakeServer::start(vec![
        calls(
            "call_1",
            "file_read",
            json!({"path": "alpha.txt", "start_line": "1"}),
        ),
        calls("call_2", "file_read", json!({"file": "alpha.txt"})),
        says("never asked"),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "read alpha.txt");
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["turn_reason"], "unusable_reply", "{v}");
    assert_eq!(server.requests().len(), 2);
    let answer = v["answer"].as_str().unwrap();
    assert!(
        answer.starts_with("stopped: the model's tool call could not run again"),
        "{answer}"
    );
    // Neither the note nor a result of the malformed call is shown as found.
    assert!(
        !answer.contains("[latchclaw") && !answer.contains("The last tool results"),
        "{answer}"
    );
    // The second call did not run: one receipt, the first attempt's.
    assert_eq!(env.receipts().len(), 1);
}

#[test]
fn double_brace_pseudo_calls_are_never_an_exit_0_answer() {
    let pseudo = "Sure: {{\"name\": \"add\", \"arguments\": {\"num1\": \"10\", \"num2\": \"20\"}}}";
    let server = FakeServer::start(vec![says(pseudo)]);
    let env = env_for(&server, "tool_mode = \"text\"");
    let (r, v) = agent(&env, "add 10 and 20");
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["turn_reason"], "unusable_reply");
    assert!(!v["answer"].as_str().unwrap().contains("\"name\""), "{v}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "one repair");
    let note = messages(&server, 1).last().unwrap()["content"].clone();
    let note = note.as_str().unwrap();
    assert!(
        note.contains("unknown tool \"add\"") && note.contains("```json\n{\"name\": \"TOOL_NAME\""),
        "{note}"
    );
    // Double braces around a real tool's call: the call runs.
    let server = FakeServer::start(vec![
        says("{{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}}"),
        says("There is alpha.txt."),
    ]);
    let env = env_for(&server, "tool_mode = \"text\"");
    let (r, v) = agent(&env, "which files?");
    assert_eq!(
        (r.code, &v["answer"]),
        (0, &json!("There is alpha.txt.")),
        "{r:?}"
    );
    assert_eq!(env.receipts()[0]["tool"], "file_list");
}

// 3. No claimed effect without its call.

#[test]
fn a_claimed_write_without_a_call_is_reminded_once_then_exit_3() {
    let claim = "DONE has been written into status.txt.";
    let server = FakeServer::start(vec![says(claim)]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "Write DONE into status.txt");
    assert_eq!(r.code, 3, "{r:?}");
    assert_eq!(v["answer"], claim, "the answer is shown for what it is");
    assert_eq!(v["turn_reason"], "unusable_reply");
    assert_eq!(warnings(&r, "[claimed_effect]"), 1, "{r:?}");
    assert!(!env.ws.join("status.txt").exists());
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let last = messages(&server, 1).last().unwrap()["content"].clone();
    assert!(
        last.as_str()
            .unwrap()
            .contains("no file_write or shell or memory_store call succeeded"),
        "{last}"
    );
    // Reminded, the model makes the call: exit 0, and the file is there.
    let server = FakeServer::start(vec![
        says(claim),
        calls(
            "call_w",
            "file_write",
            json!({"path": "status.txt", "content": "DONE\n"}),
        ),
        says(claim),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, _) = agent(&env, "Write DONE into status.txt");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("status.txt")).unwrap(),
        "DONE\n"
    );
}

#[test]
fn a_call_described_to_the_user_instead_of_made_is_reminded() {
    let server = FakeServer::start(vec![
        says("You can call the `file_list` function with {\"path\": \".\"}."),
        calls("call_1", "file_list", json!({"path": "."})),
        says("There is alpha.txt."),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(
        (r.code, &v["answer"]),
        (0, &json!("There is alpha.txt.")),
        "{r:?}"
    );
    let last = messages(&server, 1).last().unwrap()["content"].clone();
    assert!(
        last.as_str()
            .unwrap()
            .contains("the user cannot call file_list"),
        "{last}"
    );
}

// 4. Fewer tools per turn.

#[test]
fn max_tools_offers_the_best_matches_with_examples() {
    let env = Env::new();
    env.mock(
        "hello.toml",
        "",
        &format!("max_tools = 3\n[channels.cli]\n{BASIC_TOOLS}\n"),
    );
    let r = env.run(&[
        "agent",
        "-m",
        "Use the shell to count the lines of notes.txt",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let offered: Vec<Value> = env.requests()[0]["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(
        offered,
        [json!("file_list"), json!("file_read"), json!("shell")]
    );
    // In text mode the prompt lists exactly those, each with an example call.
    let server = FakeServer::start(vec![says("Ok.")]);
    let env = env_for(&server, "tool_mode = \"text\"\nmax_tools = 3");
    let (r, _) = agent(&env, "What time is it?");
    assert_eq!(r.code, 0, "{r:?}");
    let system = server.requests()[0].json()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let listed: Vec<&str> = system
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert_eq!(listed, ["time", "file_list", "file_read"], "{system}");
    assert!(
        system.contains("Example: {\"name\": \"time\", \"arguments\": {}}"),
        "{system}"
    );
    // Checked like every key.
    let env = Env::new();
    env.config("[providers.models.m]\nkind = \"mock\"\nmax_tools = 0\n");
    let r = env.run(&["config", "validate"]);
    assert!(
        r.code == 2 && r.stderr.contains("providers.models.m.max_tools"),
        "{r:?}"
    );
}

#[test]
fn an_answer_made_up_before_looking_is_reminded_once() {
    let server = FakeServer::start(vec![
        says("It is 2023."),
        calls("call_1", "time", json!({})),
        says("It is 2026."),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "What year is it?");
    assert_eq!((r.code, &v["answer"]), (0, &json!("It is 2026.")), "{r:?}");
    let last = messages(&server, 1).last().unwrap()["content"].clone();
    assert!(
        last.as_str()
            .unwrap()
            .contains("you answered without calling a tool, but the question is about the time"),
        "{last}"
    );
    // The reminded request is held to a call, the one after it is not.
    let reqs = server.requests();
    assert_eq!(reqs[0].json().get("tool_choice"), None);
    assert_eq!(reqs[1].json()["tool_choice"], "required");
    assert_eq!(reqs[2].json().get("tool_choice"), None);
    // In structured mode its schema leaves the answer out.
    let server = FakeServer::start(vec![
        says("{\"action\": \"answer\", \"text\": \"It is 2023.\"}"),
        says("{\"action\": \"call\", \"tool\": \"time\", \"arguments\": {}}"),
        says("{\"action\": \"answer\", \"text\": \"It is 2026.\"}"),
    ]);
    let env = env_for(&server, "tool_mode = \"structured\"");
    let (r, v) = agent(&env, "What year is it?");
    assert_eq!((r.code, &v["answer"]), (0, &json!("It is 2026.")), "{r:?}");
    let shapes = |i: usize| {
        server.requests()[i].json()["response_format"]["json_schema"]["schema"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s["properties"]["action"]["const"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect::<Vec<_>>()
    };
    assert!(shapes(0).contains(&"answer".to_string()));
    assert!(
        !shapes(1).contains(&"answer".to_string()),
        "{:?}",
        shapes(1)
    );
    assert!(shapes(2).contains(&"answer".to_string()));
    // Reminded once: the second answer stands.
    let server = FakeServer::start(vec![says("I cannot tell.")]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "Does alpha.txt exist?");
    assert_eq!(
        (r.code, &v["answer"]),
        (0, &json!("I cannot tell.")),
        "{r:?}"
    );
    assert_eq!(server.requests().len(), 2);
    // Nothing a tool could tell: no reminder.
    let server = FakeServer::start(vec![says("Hello, Ada.")]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, _) = agent(&env, "Hello, I am Ada.");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_value_the_tool_does_not_take_is_repaired_not_answered() {
    let server = FakeServer::start(vec![
        calls("call_1", "file_list", json!({"depth": 0, "path": "."})),
        calls("call_2", "file_list", json!({"path": "."})),
        says("There is alpha.txt."),
    ]);
    let env = env_for(&server, "tool_mode = \"native\"");
    let (r, v) = agent(&env, "which files are here?");
    assert_eq!(
        (r.code, &v["answer"]),
        (0, &json!("There is alpha.txt.")),
        "{r:?}"
    );
    let note = messages(&server, 1)[3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.contains("file_list: argument \"depth\" must be an integer from 1 to 10, not 0"),
        "{note}"
    );
    // `tool run` is the operator's: the tool's own error, as before.
    let r = env.run(&["tool", "run", "file_list", "--json", "{\"depth\": 0}"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stdout
            .contains("\\\"depth\\\" must be an integer from 1 to 10"),
        "{r:?}"
    );
}

#[test]
fn a_git_argument_its_command_does_not_take_is_repaired_not_refused() {
    let server = FakeServer::start(vec![
        calls(
            "call_1",
            "git",
            json!({"command": "log", "n": 1, "refs": ["HEAD"], "staged": false}),
        ),
        calls("call_2", "git", json!({"command": "log", "n": 1})),
        says("The last commit is \"one\"."),
    ]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"local\"\n\
         [security]\nautonomy = \"full\"\n[channels.cli]\ntools_allow = [\"git\", \"file_read\"]\n\
         [providers.models.local]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         timeout_secs = 5\nretries = 0\ntool_mode = \"native\"\n",
        server.url()
    ));
    std::fs::write(env.ws.join("alpha.txt"), "a").unwrap();
    commit_all(&env.ws);
    let (r, v) = agent(&env, "What is the last commit?");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["answer"], "The last commit is \"one\".");
    let statuses: Vec<&Value> = v["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["status"])
        .collect();
    assert_eq!(statuses, [&json!("failed"), &json!("allowed")], "{v}");
    let note = messages(&server, 1)[3]["content"].clone();
    assert!(
        note.as_str()
            .unwrap()
            .contains("git log: argument \"refs\" does not apply; it takes n, path, since"),
        "{note}"
    );
    // The repair round's request is held to a call, the next is not.
    assert_eq!(server.requests()[1].json()["tool_choice"], "required");
    assert_eq!(server.requests()[2].json().get("tool_choice"), None);
}
