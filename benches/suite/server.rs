//! The loopback OpenAI-compatible server: the tests' fake server, answering
//! every request with one fixed chat completion. It records how long it
//! spent on each request (accept to reply written), so its own time can be
//! taken out of the client's.

#[path = "../../tests/common/fake_server.rs"]
mod fake_server;

pub use fake_server::FakeServer;

const BODY: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;

pub fn start() -> FakeServer {
    FakeServer::start(vec![fake_server::Reply::json(200, BODY)])
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
