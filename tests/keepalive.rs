//! No stall against servers that write like real ones: keep-alive, the
//! response head and body in separate writes with Nagle on (the fake
//! server), chunked bodies and `Connection: close`.
//!
//! A stalled response costs at least one delayed-ACK period (40 ms on
//! Linux, TCP_ATO_MIN): the server's kernel holds the body until our ACK of
//! the head, which we would otherwise delay. So every assertion on time is
//! against that period, on the median gap between a turn's requests, which
//! a stall lengthens by 40 ms or more and a busy machine rarely by as much.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::Env;
use fake_server::{FakeServer, Recorded, Reply};
use std::time::{Duration, Instant};

const DELAYED_ACK: Duration = Duration::from_millis(40);

const TIME_CALL: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_t","type":"function","function":{"name":"time","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":5,"total_tokens":55}}"#;
const ANSWER: &str = r#"{"id":"c2","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"It is now."},"finish_reason":"stop"}],"usage":{"prompt_tokens":90,"completion_tokens":4,"total_tokens":94}}"#;

/// `rounds` calls of the `time` tool, then the answer, each reply shaped
/// by `shape`.
fn server(rounds: usize, shape: impl Fn(Reply) -> Reply) -> FakeServer {
    let mut replies: Vec<Reply> = (0..rounds)
        .map(|_| shape(Reply::json(200, TIME_CALL)))
        .collect();
    replies.push(shape(Reply::json(200, ANSWER)));
    FakeServer::start(replies)
}

fn env_for(server: &FakeServer) -> Env {
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"local\"\nmax_tool_rounds = 10\n\
         [providers.models.local]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
         model = \"m\"\ntimeout_secs = 10\nretries = 0\n",
        server.url()
    ));
    env
}

/// Runs the turn; its wall time and the requests the server saw.
fn turn(server: &FakeServer, rounds: usize) -> (Duration, Vec<Recorded>) {
    let env = env_for(server);
    let t = Instant::now();
    let r = env.run(&["agent", "-m", "what time is it?"]);
    let took = t.elapsed();
    assert_eq!((r.code, r.stdout.as_str()), (0, "It is now.\n"), "{r:?}");
    let reqs = server.requests();
    assert_eq!(reqs.len(), rounds + 1, "{r:?}");
    let tool_results = reqs[rounds].json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("UTC time"))
        .count();
    assert_eq!(tool_results, rounds, "every round's tool result went back");
    (took, reqs)
}

/// The median time from one request of the turn to the next: the client's
/// whole round (reading the reply, the tool, receipts, the commit).
fn median_gap(reqs: &[Recorded]) -> Duration {
    let mut gaps: Vec<Duration> = reqs
        .windows(2)
        .map(|w| w[1].received - w[0].received)
        .collect();
    gaps.sort();
    gaps[gaps.len() / 2]
}

fn ports(reqs: &[Recorded]) -> Vec<u16> {
    reqs.iter().map(|r| r.peer_port).collect()
}

#[test]
fn keep_alive_two_write_server_reuses_one_connection_without_stalling() {
    let rounds = 5;
    let server = server(rounds, |r| r);
    let (took, reqs) = turn(&server, rounds);
    let ports = ports(&reqs);
    assert!(
        ports.iter().all(|&p| p == ports[0]),
        "one connection for the whole turn: {ports:?}"
    );
    let gap = median_gap(&reqs);
    assert!(
        gap < DELAYED_ACK,
        "median round {gap:?}: a response waited on a delayed ACK"
    );
    // Five reused requests would have stalled 200 ms at least.
    assert!(took < DELAYED_ACK * rounds as u32, "turn took {took:?}");
}

#[test]
fn chunked_replies_in_several_writes_do_not_stall() {
    let rounds = 3;
    let server = server(rounds, |r| r.chunked(4));
    let (_, reqs) = turn(&server, rounds);
    let ports = ports(&reqs);
    assert!(ports.iter().all(|&p| p == ports[0]), "{ports:?}");
    let gap = median_gap(&reqs);
    assert!(gap < DELAYED_ACK, "median round {gap:?}");
}

#[test]
fn connection_close_replies_are_read_to_the_end_and_not_reused() {
    let rounds = 3;
    // Bodies that end with the connection (no length), and chunked ones
    // on a connection the server closes after them.
    for chunks in [0, 3] {
        let server = server(rounds, |r| {
            if chunks > 0 {
                r.close().chunked(chunks)
            } else {
                r.close()
            }
        });
        let (_, reqs) = turn(&server, rounds);
        let mut ports = ports(&reqs);
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), rounds + 1, "a new connection per request");
        let gap = median_gap(&reqs);
        assert!(gap < DELAYED_ACK, "median round {gap:?}");
    }
}

/// The http tool follows redirects on one agent: the hops reuse the
/// connection (a stall would show between them), and the last body arrives
/// chunked or ends with the connection.
#[test]
fn http_tool_redirects_on_a_kept_alive_connection_without_stalling() {
    // With a body, as real servers send a 302: two writes, like the rest.
    let hop = || Reply::json(302, "<a href=\"/next\">moved</a>").header("Location", "/next");
    let finals = [
        Reply::json(200, "arrived in pieces")
            .header("Content-Type", "text/plain")
            .chunked(3),
        Reply::json(200, "arrived in pieces")
            .header("Content-Type", "text/plain")
            .close(),
    ];
    for last in finals {
        let server = FakeServer::start(vec![hop(), hop(), hop(), last]);
        let env = Env::new();
        env.config(
            "[channels.cli]\ntools_allow = [\"http\"]\n[tools.http]\n\
             allowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\nmax_redirects = 3\n",
        );
        let args = serde_json::json!({ "url": server.url() }).to_string();
        let r = env.run(&["tool", "run", "http", "--json", &args]);
        assert_eq!(r.code, 0, "{r:?}");
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert!(
            v["output"].as_str().unwrap().ends_with("arrived in pieces"),
            "{v}"
        );
        assert_eq!(v["metadata"]["redirects"], 3);
        let reqs = server.requests();
        let ports = ports(&reqs);
        assert!(ports.iter().all(|&p| p == ports[0]), "{ports:?}");
        let gap = median_gap(&reqs);
        assert!(gap < DELAYED_ACK, "median hop {gap:?}");
    }
}
