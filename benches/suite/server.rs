//! The loopback OpenAI-compatible server: the tests' fake server (keep-alive,
//! head and body in two writes, as real servers write), answering with
//! fixed chat completions. It records how long it spent on each request
//! (first bytes read to reply written), so its own time can be taken out of
//! the client's, and the client's port, so reuse can be checked.

#[path = "../../tests/common/fake_server.rs"]
mod fake_server;

pub use fake_server::FakeServer;
use fake_server::Reply;

const BODY: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;

pub fn start() -> FakeServer {
    FakeServer::start(vec![Reply::json(200, BODY)])
}

/// Calls the `time` tool, and answers once the chat carries a tool result:
/// a one-tool-round turn every time, however many turns are run.
pub fn start_tool_round() -> FakeServer {
    let call = Reply::fixture(200, "time_tool.json");
    let answer = Reply::fixture(200, "final.json");
    FakeServer::start_with("127.0.0.1:0", move |req, _| {
        let json = req.json();
        let last = json["messages"].as_array().and_then(|m| m.last());
        if last.is_some_and(|m| m["role"] == "tool") {
            answer.clone()
        } else {
            call.clone()
        }
    })
}

/// Requests per connection so far: a turn of n requests on one
/// connection gives n.
pub fn requests_per_connection(server: &FakeServer) -> f64 {
    let reqs = server.requests();
    let mut ports: Vec<u16> = reqs.iter().map(|r| r.peer_port).collect();
    ports.sort();
    ports.dedup();
    reqs.len() as f64 / ports.len().max(1) as f64
}

/// The server's median time per request so far, in milliseconds.
pub fn median_ms(server: &FakeServer) -> f64 {
    let times: Vec<f64> = server
        .handled
        .lock()
        .unwrap()
        .iter()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    super::measure::percentile(&times, 50)
}
