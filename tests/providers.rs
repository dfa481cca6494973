//! The openai-compatible provider against an in-suite fake server on
//! 127.0.0.1, replaying the response shapes real servers send; plus the
//! reliable and router providers and `provider test`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{Env, Run, fixture, lit};
use fake_server::{FakeServer, Reply};
use serde_json::Value;
use std::time::{Duration, Instant};

const KEY: &str = "sk-test-SECRET-KEY-0123456789";

fn env_for(server: &FakeServer, extra: &str) -> Env {
    let env = Env::new();
    std::fs::write(env.ws.join("alpha.txt"), "a").unwrap();
    env.config(&format!(
        "default_provider = \"cloud\"\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\nmodel = \"gpt-4o-mini\"\n\
         api_key_env = \"LC_TEST_KEY\"\ntimeout_secs = 2\n{extra}\n",
        server.url()
    ));
    env
}

fn agent(env: &Env, msg: &str) -> Run {
    env.run_env(&["agent", "-m", msg], &[("LC_TEST_KEY", KEY)])
}

fn assert_no_key(env: &Env, r: &Run) {
    assert!(!r.stdout.contains(KEY) && !r.stderr.contains(KEY), "{r:?}");
    for f in ["tool_receipts.log", "memory.sqlite", "memory.sqlite-wal"] {
        let bytes = std::fs::read(env.state.join(f)).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains(KEY), "key in {f}");
    }
}

#[test]
fn text_reply_and_what_was_sent() {
    let server = FakeServer::start(vec![Reply::fixture(200, "text.json")]);
    let env = env_for(
        &server,
        "temperature = 0.2\nmax_tokens = 256\n[providers.models.cloud.headers]\nX-Title = \"latchclaw-test\"",
    );
    let r = agent(&env, "hi");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "Hello from the fake server.\n"),
        "{r:?}"
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let q = &reqs[0];
    assert_eq!(
        (q.method.as_str(), q.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        q.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(q.header("x-title"), Some("latchclaw-test"));
    let body = q.json();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["role"], "user");
    assert_eq!(body["messages"][1]["content"], "hi");
    let tools = body["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .all(|t| t["type"] == "function" && t["function"]["parameters"].is_object())
    );
    assert!(tools.iter().any(|t| t["function"]["name"] == "file_list"));
    assert_no_key(&env, &r);
    // Memory records the provider and the model the server reported.
    let (_, list) = env.json(&["memory", "list", "--json"]);
    let (_, turns) = env.json(&[
        "memory",
        "show",
        list[0]["conversation_id"].as_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        (turns[1]["provider"].as_str(), turns[1]["model"].as_str()),
        (Some("cloud"), Some("gpt-4o-mini"))
    );
}

/// End to end: the server scripts a `file_list` call, then a final answer.
#[test]
fn tool_call_round_trip_end_to_end() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "one_tool.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, "list the files");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "The workspace holds alpha.txt.\n"),
        "{r:?}"
    );
    let rc = env.receipts();
    assert_eq!(
        (rc.len(), rc[0]["tool"].as_str(), rc[0]["status"].as_str()),
        (1, Some("file_list"), Some("allowed"))
    );
    let second = server.requests()[1].json();
    let msgs = second["messages"].as_array().unwrap();
    let assistant = &msgs[2];
    assert_eq!(assistant["role"], "assistant");
    assert!(assistant["content"].is_null());
    assert_eq!(assistant["tool_calls"][0]["id"], "call_Xy12");
    assert_eq!(assistant["tool_calls"][0]["type"], "function");
    // Arguments go back as a JSON string, as OpenAI sends them.
    let args: Value = serde_json::from_str(
        assistant["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args["path"], ".");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_Xy12");
    assert!(msgs[3]["content"].as_str().unwrap().contains("alpha.txt"));
    assert_no_key(&env, &r);
}

#[test]
fn several_tool_calls_in_one_response() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "two_tools.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    assert_eq!(agent(&env, "go").code, 0);
    assert_eq!(env.receipts().len(), 2);
    let msgs = server.requests()[1].json()["messages"]
        .as_array()
        .unwrap()
        .clone();
    let ids: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_A", "call_B"]);
}

#[test]
fn llama_cpp_ollama_and_vllm_shapes() {
    for shape in ["llamacpp_tool.json", "ollama_tool.json", "vllm_tool.json"] {
        let server = FakeServer::start(vec![
            Reply::fixture(200, shape),
            Reply::fixture(200, "final.json"),
        ]);
        let env = env_for(&server, "");
        let r = agent(&env, "list");
        assert_eq!(r.code, 0, "{shape}: {r:?}");
        assert_eq!(env.receipts()[0]["tool"], "file_list", "{shape}");
        let msgs = server.requests()[1].json()["messages"]
            .as_array()
            .unwrap()
            .clone();
        let id = msgs[2]["tool_calls"][0]["id"].clone();
        assert_eq!(msgs[3]["tool_call_id"], id, "{shape}");
    }
}

#[test]
fn qwen_style_text_tool_call_in_auto_mode() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "qwen_text_tool.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, "list");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(env.receipts()[0]["tool"], "file_list");
}

#[test]
fn text_tool_mode_describes_tools_in_the_prompt() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "qwen_text_tool.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "tool_mode = \"text\"");
    let r = agent(&env, "list");
    assert_eq!(r.code, 0, "{r:?}");
    let reqs = server.requests();
    let first = reqs[0].json();
    assert!(first.get("tools").is_none(), "no native tools in text mode");
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("```json") && system.contains("file_list"),
        "{system}"
    );
    // The call goes back in the same fenced form the model was told to use.
    let msgs = reqs[1].json()["messages"].as_array().unwrap().clone();
    let call = "```json\n{\"name\": \"file_list\", \"arguments\": {\"path\":\".\"}}\n```";
    assert!(
        msgs[2]["content"].as_str().unwrap().contains(call),
        "{msgs:?}"
    );
    // The result is labelled with the tool's name.
    assert_eq!(msgs[3]["role"], "user");
    let result = msgs[3]["content"].as_str().unwrap();
    assert!(
        result.starts_with("<tool_result name=\"file_list\">\n"),
        "{result}"
    );
}

/// A chat completion whose message is `content` (no native calls).
fn says(content: &str) -> Reply {
    let body = serde_json::json!({"id": "chatcmpl-t", "object": "chat.completion", "model": "qwen",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920,
                  "prompt_tokens_details": {"cached_tokens": 850}}});
    Reply::json(200, body.to_string())
}

#[test]
fn fenced_json_calls_run_in_text_and_native_mode() {
    // The form Qwen2.5-Coder writes: a ```json fence, no <tool_call> tag.
    let fence = "```json\n{\"name\": \"file_list\", \"arguments\": {\"path\": \".\"}}\n```";
    for mode in ["text", "native", "auto"] {
        let server = FakeServer::start(vec![says(fence), says("There is alpha.txt.")]);
        let env = env_for(&server, &format!("tool_mode = \"{mode}\""));
        let r = env.run_env(&["agent", "-m", "list", "--json"], &[("LC_TEST_KEY", KEY)]);
        let v: Value = serde_json::from_str(&r.stdout).unwrap_or_default();
        assert_eq!(r.code, 0, "{mode}: {r:?}");
        assert_eq!(v["answer"], "There is alpha.txt.", "{mode}");
        assert_eq!(env.receipts()[0]["tool"], "file_list", "{mode}");
        // Token counts, cached ones included, are added up over the turn.
        assert_eq!(v["usage"]["prompt_tokens"], 1800, "{v}");
        assert_eq!(v["usage"]["cached_tokens"], 1700, "{v}");
        let (_, runs) = env.json(&["runs", "list", "--json"]);
        assert_eq!(
            (&runs[0]["prompt_tokens"], &runs[0]["cached_tokens"]),
            (&Value::from(1800), &Value::from(1700)),
            "{runs}"
        );
        assert_eq!(runs[0]["completion_tokens"], 40);
        let r = env.run(&["runs", "list"]);
        assert!(r.stdout.contains("1800/1700"), "{r:?}");
    }
    // JSON naming something that is not a tool is an answer, not a call.
    let server = FakeServer::start(vec![says("```json\n{\"name\": \"Ada\"}\n```")]);
    let env = env_for(&server, "");
    let r = agent(&env, "give me a json example");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("\"Ada\""), "{r:?}");
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn tool_syntax_is_never_printed_as_an_answer() {
    // Each reply only looks like a call or a result; asked for plain text,
    // the model repeats it: exit 3, and stdout never shows the markup.
    for fake in [
        "<tool_result>{\"time\": \"12:00\"}</tool_result> It is noon.",
        "<function=time>{}</function>",
        "Calling: {\"name\": \"time\", \"arguments\": {}} now",
        "<|im_start|>assistant",
    ] {
        let server = FakeServer::start(vec![says(fake)]);
        let env = env_for(&server, "");
        let r = agent(&env, "what time is it?");
        assert_eq!(r.code, 3, "{fake}: {r:?}");
        assert!(
            !r.stdout.contains("<tool_result")
                && !r.stdout.contains("\"name\"")
                && !r.stdout.contains("<function")
                && !r.stdout.contains("<|im_start|>"),
            "{r:?}"
        );
        let reqs = server.requests();
        assert_eq!(reqs.len(), 2, "asked once more: {fake}");
        let msgs = reqs[1].json()["messages"].as_array().unwrap().clone();
        assert!(
            msgs.last().unwrap()["content"]
                .as_str()
                .unwrap()
                .contains("plain text")
        );
    }
}

/// The request budget: a turn that calls one tool, with every tool that is
/// on by default offered (seven, `git` and `grep` among them), stays within
/// 3.5 KB per request in every tool mode: small local models pay for each
/// byte of a request they have not cached. Tools that are off by default
/// cost their schema only once enabled. In structured mode the budget is
/// the prompt's: `response_format` becomes a grammar, not prompt tokens.
#[test]
fn a_one_tool_turn_with_the_default_tools_fits_in_three_and_a_half_kb() {
    for mode in ["native", "text", "structured"] {
        let server = FakeServer::start(vec![
            Reply::fixture(200, "one_tool.json"),
            Reply::fixture(200, "final.json"),
        ]);
        let env = env_for(&server, &format!("tool_mode = \"{mode}\"\n"));
        let r = agent(&env, "what files are in the workspace?");
        assert_eq!(r.code, 0, "{r:?}");
        let reqs = server.requests();
        assert_eq!(reqs.len(), 2);
        let prompts: Vec<String> = reqs
            .iter()
            .map(|q| {
                let mut v = q.json();
                let format = v.as_object_mut().unwrap().remove("response_format");
                assert_eq!(format.is_some(), mode == "structured", "{mode}");
                v.to_string()
            })
            .collect();
        for p in &prompts {
            eprintln!("{mode}: {} bytes", p.len());
            assert!(p.len() <= 3584, "{mode}: {} bytes: {p}", p.len());
        }
        let (a, b) = (reqs[0].json(), reqs[1].json());
        // The same system prompt in both; each default tool described once
        // (and, in text and structured mode, called once in its example),
        // none of the others.
        assert_eq!(a["messages"][0], b["messages"][0]);
        let times = if mode == "native" { 1 } else { 2 };
        for name in ["grep", "git", "memory_search", "shell"] {
            // `git`'s message filter is an argument named `grep` too.
            let git_arg = if name == "grep" {
                prompts[0].matches("\\\"grep\\\":{").count()
                    + prompts[0].matches("\"grep\":{").count()
            } else {
                0
            };
            assert_eq!(
                q_count(&prompts[0], name) - git_arg,
                times,
                "{mode}: {name}: {}",
                prompts[0]
            );
        }
        for name in [
            "file_write",
            "http",
            "pdf_extract",
            "web_search",
            "ask_user",
        ] {
            assert_eq!(q_count(&reqs[0].body, name), 0, "{mode}: {name}");
        }
    }
}

fn q_count(body: &str, name: &str) -> usize {
    body.matches(&format!("\\\"{name}\\\"")).count()
        + body.matches(&format!("\"{name}\"")).count()
        + body.matches(&format!("- {name}:")).count()
}

#[test]
fn think_preamble_is_stripped() {
    let server = FakeServer::start(vec![Reply::fixture(200, "think.json")]);
    let env = env_for(&server, "");
    let r = agent(&env, "what is the answer?");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "The answer is 42.\n"),
        "{r:?}"
    );
}

#[test]
fn no_tool_support_switches_to_text_mode_and_retries() {
    let server = FakeServer::start(vec![
        Reply::fixture(400, "tools_unsupported.json"),
        Reply::fixture(200, "text.json"),
    ]);
    let env = env_for(&server, "");
    let r = agent(&env, "hi");
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, "Hello from the fake server.\n"),
        "{r:?}"
    );
    assert!(r.stderr.contains("switching to text tool calls"), "{r:?}");
    let reqs = server.requests();
    assert!(reqs[0].json().get("tools").is_some());
    let second = reqs[1].json();
    assert!(second.get("tools").is_none());
    assert!(
        second["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("```json")
    );
}

#[test]
fn retry_after_is_honoured_then_success() {
    let server = FakeServer::start(vec![
        Reply::fixture(429, "rate_limited.json").header("Retry-After", "1"),
        Reply::fixture(200, "text.json"),
    ]);
    let env = env_for(&server, "");
    let t = Instant::now();
    let r = agent(&env, "hi");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "waited for Retry-After"
    );
    assert_eq!(server.requests().len(), 2);
    assert!(r.stderr.contains("rate_limit"), "{r:?}");
}

#[test]
fn server_error_then_success_and_exhausted_retries() {
    let server = FakeServer::start(vec![
        Reply::fixture(500, "server_error.json"),
        Reply::fixture(200, "text.json"),
    ]);
    let env = env_for(&server, "");
    assert_eq!(agent(&env, "hi").code, 0);
    assert_eq!(server.requests().len(), 2);

    let server = FakeServer::start(vec![Reply::fixture(503, "server_error.json")]);
    let env = env_for(&server, "retries = 1");
    let r = agent(&env, "hi");
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("(server)") && r.stderr.contains("HTTP 503"),
        "{r:?}"
    );
    assert_eq!(server.requests().len(), 2);
    // The user's turn is kept even though the provider failed.
    assert!(env.run(&["memory", "search", "hi"]).stdout.contains("user"));
}

#[test]
fn bad_responses_are_typed_errors() {
    // (reply, config, the error's kind, what its message names)
    let cases: Vec<(Reply, &str, &str, &str)> = vec![
        (
            Reply::fixture(200, "malformed.json"),
            "",
            "bad_response",
            "not JSON",
        ),
        (
            Reply::json(200, vec![b' '; 2 * 1024 * 1024]),
            "",
            "bad_response",
            "larger than max_response_bytes",
        ),
        (
            Reply::fixture(401, "unauthorized.json"),
            "",
            "auth",
            "HTTP 401",
        ),
        (
            Reply::json(404, "{\"error\": {\"message\": \"model not found\"}}"),
            "",
            "bad_request",
            "model not found",
        ),
        (
            Reply::json(200, "{\"object\": \"list\"}"),
            "",
            "bad_response",
            "no choices",
        ),
    ];
    for (reply, extra, kind, want) in cases {
        let server = FakeServer::start(vec![reply]);
        let env = env_for(&server, extra);
        let r = agent(&env, "hi");
        assert_eq!(r.code, 3, "{want}: {r:?}");
        assert!(
            r.stderr
                .contains(&format!("provider \"cloud\" failed ({kind}): ")),
            "{kind}: {r:?}"
        );
        assert!(r.stderr.contains(want), "{want}: {r:?}");
        assert!(!r.stderr.contains("panicked"));
        assert_no_key(&env, &r);
    }
}

#[test]
fn a_server_that_never_answers_times_out() {
    let server = FakeServer::start(vec![Reply::hang(), Reply::hang()]);
    // env_for sets timeout_secs = 2. A timeout is not retried (a slow local
    // model would start over and time out again) and names the setting.
    let env = env_for(&server, "retries = 2");
    let t = Instant::now();
    let r = agent(&env, "hi");
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("(timeout)"), "{r:?}");
    assert!(r.stderr.contains("timeout_secs"), "{r:?}");
    assert_eq!(server.requests().len(), 1, "retried after a timeout");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
}

#[test]
fn missing_key_variable_is_an_auth_error_naming_it() {
    let server = FakeServer::start(vec![Reply::fixture(200, "text.json")]);
    let env = env_for(&server, "");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("LC_TEST_KEY") && r.stderr.contains("not set"),
        "{r:?}"
    );
    assert!(server.requests().is_empty());
}

#[test]
fn malformed_tool_arguments_reach_the_model_as_an_error() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "bad_args.json"),
        Reply::fixture(200, "final.json"),
    ]);
    let env = env_for(&server, "");
    // The model's mistake, not a refusal: the run is not exit 4.
    let r = agent(&env, "read it");
    assert_eq!(r.code, 0, "{r:?}");
    let msgs = server.requests()[1].json()["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(msgs[3]["tool_call_id"], "call_bad");
    assert!(
        msgs[3]["content"]
            .as_str()
            .unwrap()
            .contains("the arguments must be a JSON object"),
        "{:?}",
        msgs[3]
    );
}

/// Acceptance test 9 with a real timeout: the first provider never answers.
#[test]
fn reliable_falls_back_from_a_hung_server_to_the_mock() {
    let server = FakeServer::start(vec![Reply::hang()]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"reliable\"\n\
         [providers.models.reliable]\nkind = \"reliable\"\nproviders = [\"bad_provider\", \"mock_provider\"]\n\
         [providers.models.bad_provider]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\ntimeout_secs = 1\nretries = 0\n\
         [providers.models.mock_provider]\nkind = \"mock\"\nfixture = {}\n",
        server.url(),
        lit(&fixture("hello.toml"))
    ));
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, "hello\n"), "{r:?}");
    assert!(
        r.stderr.contains("provider_fallback") && r.stderr.contains("bad_provider"),
        "{r:?}"
    );
    assert!(r.stderr.contains("timeout"), "{r:?}");
}

#[test]
fn router_follows_hints_then_rules_then_default() {
    let fast = FakeServer::start(vec![Reply::json(
        200,
        r#"{"choices":[{"message":{"content":"from fast"}}]}"#,
    )]);
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"auto\"\n\
         [providers.models.auto]\nkind = \"router\"\ndefault_route = \"plain\"\n\
         [providers.models.auto.hints]\nfast = \"fast\"\n\
         [providers.models.auto.routes]\n\"stack trace\" = \"fast\"\n\
         [providers.models.fast]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         [providers.models.plain]\nkind = \"mock\"\nfixture = {}\n",
        fast.url(),
        lit(&fixture("hello.toml"))
    ));
    assert_eq!(env.run(&["agent", "-m", "hi"]).stdout, "hello\n");
    assert_eq!(
        env.run(&["agent", "--hint", "fast", "-m", "hi"]).stdout,
        "from fast\n"
    );
    assert_eq!(
        env.run(&["agent", "-m", "here is a Stack Trace"]).stdout,
        "from fast\n"
    );
    assert_eq!(
        env.run(&["agent", "--hint", "nope", "-m", "hi"]).stdout,
        "hello\n"
    );
    assert_eq!(fast.requests().len(), 2);
}

#[test]
fn provider_test_reports_text_and_native_tool_calls() {
    let server = FakeServer::start(vec![
        Reply::fixture(200, "text.json"),
        Reply::fixture(200, "one_tool.json"),
    ]);
    let env = env_for(&server, "");
    let r = env.run_env(&["provider", "test", "cloud"], &[("LC_TEST_KEY", KEY)]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("text:        ok") && r.stdout.contains("tool calls:  native"),
        "{r:?}"
    );
    let sent = server.requests()[1].json();
    assert_eq!(sent["tools"][0]["function"]["name"], "get_time");
    let down = FakeServer::start(vec![Reply::fixture(500, "server_error.json")]);
    let env = env_for(&down, "retries = 0");
    let r = env.run_env(
        &["provider", "test", "cloud", "--json"],
        &[("LC_TEST_KEY", KEY)],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["ok"], false);
}
