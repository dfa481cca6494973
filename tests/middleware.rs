//! Per-tool middleware on the real binary: `[tools.NAME] enabled`,
//! `timeout_secs` and `rate_limit` (per minute in one run, per hour across
//! runs), the denial receipts they leave, and bad values refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn offered(env: &Env) -> Vec<String> {
    let reqs = env.requests();
    reqs[0]["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn shell_env(tables: &str) -> Env {
    let env = Env::new();
    env.mock(
        "rate_limit.toml",
        "",
        &format!("[security]\nautonomy = \"full\"\n{tables}"),
    );
    env
}

#[test]
fn a_disabled_tool_is_not_offered_and_refused_everywhere() {
    let env = shell_env("[tools.shell]\nenabled = false\n[tools.file_write]\nenabled = true\n");
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "the model's calls were refused: {r:?}");
    let tools = offered(&env);
    assert!(!tools.iter().any(|t| t == "shell"), "{tools:?}");
    // `enabled = true` turns on a tool that is off by default.
    assert!(tools.iter().any(|t| t == "file_write"), "{tools:?}");
    assert!(tools.iter().any(|t| t == "file_read"), "{tools:?}");
    let receipts = env.receipts();
    assert_eq!(receipts.len(), 3, "{receipts:?}");
    for rc in &receipts {
        assert_eq!(rc["status"], "denied");
        assert_eq!(
            rc["reason"],
            "tool \"shell\" is disabled (tools.shell.enabled = false)"
        );
    }
    // What the model read: a failed call saying why.
    assert!(
        env.requests()[1]
            .to_string()
            .contains("tools.shell.enabled = false")
    );

    let (r, v) = env.shell("echo hi");
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");
    assert!(v["error"].as_str().unwrap().contains("disabled"), "{v}");
    let (_, list) = env.json(&["tool", "list", "--json"]);
    let row = |name: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()["enabled"]
            .clone()
    };
    assert_eq!(
        (row("shell"), row("file_write")),
        (json!(false), json!(true))
    );
    let (_, policy) = env.json(&[
        "policy",
        "check",
        "shell",
        "--json",
        r#"{"command": "echo"}"#,
    ]);
    assert_eq!(policy["decision"], "deny", "{policy}");
    // `enabled = false` wins over an explicit tools_allow too.
    let env = shell_env(
        "[channels.cli]\ntools_allow = [\"time\", \"shell\"]\n[tools.shell]\nenabled = false\n",
    );
    let (r, v) = env.shell("echo hi");
    assert_eq!((r.code, &v["status"]), (4, &json!("denied")), "{r:?}");
}

#[test]
fn the_per_minute_limit_refuses_the_third_call_of_a_turn_with_a_receipt() {
    let env = shell_env("[tools.shell]\nrate_limit = { per_minute = 2 }\n");
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "one call was refused: {r:?}");
    let receipts = env.receipts();
    let statuses: Vec<&str> = receipts
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["allowed", "allowed", "denied"], "{receipts:?}");
    assert_eq!(
        receipts[2]["reason"],
        "rate limit: shell 2/minute in this run (tools.shell.rate_limit.per_minute)"
    );
    // The refused call never ran: no started receipt for it.
    let started = env
        .receipt_lines()
        .iter()
        .filter(|r| r["status"] == "started")
        .count();
    assert_eq!(started, 2);
    // The model read it as a failed call, and the other two results.
    let second = env.requests()[1].to_string();
    assert!(
        second.contains("denied by policy: rate limit: shell 2/minute"),
        "{second}"
    );
    assert!(second.contains("one") && second.contains("two"), "{second}");

    let list = env.run(&["receipt", "list"]);
    assert!(
        list.stdout
            .contains("rate limit: shell 2/minute in this run"),
        "{list:?}"
    );
    let verify = env.run(&["receipt", "verify"]);
    assert_eq!(verify.code, 0, "{verify:?}");
    assert!(verify.stdout.starts_with("ok: 5 receipts"), "{verify:?}");

    // The minute is this run's: the next run starts afresh.
    let r = env.run(&["agent", "-m", "again"]);
    assert_eq!(r.code, 4, "{r:?}");
    let statuses: Vec<String> = env.receipts()[3..]
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["allowed", "allowed", "denied"]);
}

#[test]
fn the_per_hour_limit_counts_across_runs_and_not_the_refused_calls() {
    let env = shell_env(
        "[tools.shell]\nrate_limit = { per_hour = 2 }\n[tools.time]\nrate_limit = { per_hour = 1 }\n",
    );
    let (r, _) = env.shell("echo a");
    assert_eq!(r.code, 0, "{r:?}");
    let (r, _) = env.shell("echo b");
    assert_eq!(r.code, 0, "{r:?}");
    for _ in 0..2 {
        let (r, v) = env.shell("echo c");
        assert_eq!(r.code, 4, "{r:?}");
        assert_eq!(v["status"], "denied");
        assert_eq!(
            v["reason"],
            "rate limit: shell 2/hour across runs (tools.shell.rate_limit.per_hour)"
        );
        assert_eq!(v["output"], "", "it did not run");
    }
    // Another tool has its own allowance.
    let (r, v) = env.json(&["tool", "run", "time"]);
    assert_eq!((r.code, &v["status"]), (0, &json!("allowed")), "{r:?}");
    // An agent run is one more run against the same hour: all three refused.
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "{r:?}");
    let last: Vec<Value> = env.receipts().into_iter().rev().take(3).collect();
    assert!(last.iter().all(|r| r["status"] == "denied"), "{last:?}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
    // Refused calls were not counted: exactly the two that ran are stored.
    let db = recorded_calls(&env);
    assert_eq!(db, 3, "two shell calls and one time call");
}

/// The calls recorded for the hourly limits (no command shows them): the
/// lines of the counts file beside the database.
fn recorded_calls(env: &Env) -> i64 {
    let text = std::fs::read_to_string(env.state.join("memory.sqlite.calls")).unwrap();
    text.lines().count() as i64
}

#[test]
fn runs_at_once_share_one_hourly_allowance() {
    let env = shell_env("[tools.time]\nrate_limit = { per_hour = 3 }\n");
    // The database exists before the race, as after any first run.
    let (r, _) = env.json(&["tool", "run", "time"]);
    assert_eq!(r.code, 0, "{r:?}");
    let children: Vec<_> = (0..6)
        .map(|_| {
            env.command(&["tool", "run", "time"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    let ran = codes.iter().filter(|c| **c == 0).count();
    let refused = codes.iter().filter(|c| **c == 4).count();
    assert_eq!((ran, refused), (2, 4), "{codes:?}");
    assert_eq!(recorded_calls(&env), 3);
}

#[test]
fn timeout_secs_cuts_a_slow_shell_call_short() {
    let env = Env::new();
    env.config(
        "shell_timeout_secs = 30\n[security]\nautonomy = \"full\"\nshell_allowlist = [\"sleep\"]\n\
         [tools.shell]\ntimeout_secs = 1\n",
    );
    let started = Instant::now();
    let (r, v) = env.shell("sleep 30.7171");
    let took = started.elapsed();
    assert_eq!(r.code, 3, "{r:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(v["metadata"]["timed_out"], true, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("tools.shell.timeout_secs"),
        "{v}"
    );
    // A longer per-tool timeout lifts tool_timeout_secs for that tool.
    let env = Env::new();
    env.config(
        "tool_timeout_secs = 1\n[security]\nautonomy = \"full\"\nshell_allowlist = [\"sleep\"]\n\
         [tools.shell]\ntimeout_secs = 10\n",
    );
    let (r, v) = env.shell("sleep 1.5");
    assert_eq!(r.code, 0, "{r:?} {v}");
}

#[test]
fn bad_middleware_values_are_refused_with_what_is_allowed() {
    let env = Env::new();
    env.config(
        "[tools.shel]\nenabled = false\n[tools.shell]\ntimeout_secs = 0\n\
         rate_limit = { per_minute = -1, per_day = 3 }\n[tools.http]\nenabled = \"yes\"\n",
    );
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    for want in [
        "5 errors",
        "tools.shel: unknown tool \"shel\" (did you mean \"shell\"?); [tools.NAME] takes one of: time, file_list",
        "tools.shell.timeout_secs: 0 is out of range; allowed: 1 to 3600",
        "tools.shell.rate_limit.per_minute: -1 is out of range; allowed: 1 to 10000",
        "tools.shell.rate_limit.per_day: unknown key",
        "tools.http.enabled: expected true or false, found string",
    ] {
        assert!(r.stderr.contains(want), "missing {want:?}: {r:?}");
    }
    // `config show` writes the keys back in a form that validates.
    let env = Env::new();
    env.config(
        "[tools.shell]\ntimeout_secs = 4\nrate_limit = { per_minute = 3, per_hour = 9 }\n\
         [tools.grep]\nenabled = false\n",
    );
    let shown = env.run(&["config", "show"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    std::fs::write(env.state.join("config.toml"), &shown.stdout).unwrap();
    let again = env.run(&["config", "show"]);
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(
        shown.stdout.lines().skip(1).collect::<Vec<_>>(),
        again.stdout.lines().skip(1).collect::<Vec<_>>()
    );
    assert!(shown.stdout.contains("per_hour = 9"), "{shown:?}");
}

/// With no `rate_limit` of its own a tool takes the defaults: ten calls a
/// minute in a run (and 200 an hour across runs).
#[test]
fn every_tool_has_a_default_limit_of_ten_a_minute() {
    let env = shell_env("");
    env.mock("eleven_calls.toml", "", "[security]\nautonomy = \"full\"\n");
    let r = env.run(&["agent", "-m", "run eleven commands"]);
    assert_eq!(r.code, 4, "the eleventh call was refused: {r:?}");
    let receipts = env.receipts();
    let statuses: Vec<&str> = receipts
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses.len(), 11, "{statuses:?}");
    assert!(
        statuses[..10].iter().all(|s| *s == "allowed"),
        "{statuses:?}"
    );
    assert_eq!(statuses[10], "denied");
    assert_eq!(
        receipts[10]["reason"],
        "rate limit: shell 10/minute in this run (tools.shell.rate_limit.per_minute)"
    );
    // A limit of its own replaces the default.
    let env = Env::new();
    env.mock(
        "eleven_calls.toml",
        "",
        "[security]\nautonomy = \"full\"\n[tools.shell]\nrate_limit = { per_minute = 20 }\n",
    );
    let r = env.run(&["agent", "-m", "eleven times"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.receipts().iter().all(|r| r["status"] == "allowed"));
}

#[test]
fn the_global_limit_counts_every_tool_and_a_burst_goes_at_once() {
    let env = shell_env("[tools]\nrate_limit = { per_minute = 2 }\n");
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "{r:?}");
    let receipts = env.receipts();
    let statuses: Vec<&str> = receipts
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["allowed", "allowed", "denied"], "{receipts:?}");
    assert_eq!(
        receipts[2]["reason"],
        "rate limit: all tools 2/minute in this run (tools.rate_limit.per_minute)"
    );
    let (_, shown) = env.json(&["config", "show", "--json"]);
    assert_eq!(shown["tools"]["rate_limit"]["per_minute"], 2, "{shown}");

    // One a minute, but two may go at once.
    let env = shell_env("[tools.shell]\nrate_limit = { per_minute = 1, burst = 2 }\n");
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "{r:?}");
    let receipts = env.receipts();
    let statuses: Vec<&str> = receipts
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["allowed", "allowed", "denied"], "{receipts:?}");
    assert_eq!(
        receipts[2]["reason"],
        "rate limit: shell 1/minute after a burst of 2 in this run \
         (tools.shell.rate_limit.per_minute, tools.shell.rate_limit.burst)"
    );
    // Without the burst the second call is refused.
    let env = shell_env("[tools.shell]\nrate_limit = { per_minute = 1 }\n");
    env.run(&["agent", "-m", "run three commands"]);
    let statuses: Vec<String> = env
        .receipts()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses, ["allowed", "denied", "denied"]);
}

/// `cache_ttl_secs` keeps a read-only tool's result for the same judged
/// call within a run; any call that may change something empties it, and
/// every call is still judged and receipted.
#[test]
fn a_read_only_result_is_cached_until_a_write() {
    let env = Env::new();
    env.mock(
        "cache_reads.toml",
        "",
        "[security]\nautonomy = \"full\"\n[channels.cli]\n\
         tools_allow = [\"file_read\", \"file_write\", \"shell\"]\n\
         [tools.file_read]\ncache_ttl_secs = 600\n",
    );
    std::fs::write(env.ws.join("a.txt"), "first\n").unwrap();
    std::fs::write(env.ws.join("b.txt"), "other\n").unwrap();
    let r = env.run(&["agent", "-m", "read it twice, write, read again"]);
    assert_eq!(r.code, 0, "{r:?}");
    let receipts = env.receipts();
    let reads: Vec<&Value> = receipts
        .iter()
        .filter(|r| r["tool"] == "file_read")
        .collect();
    assert_eq!(reads.len(), 4, "{receipts:?}");
    let measured: Vec<&str> = reads
        .iter()
        .map(|r| r["measured"].as_str().unwrap())
        .collect();
    // a.txt ran, b.txt is another call, a.txt again from the cache; after
    // the write, a.txt ran again.
    assert!(!measured[0].contains("cached"), "{measured:?}");
    assert!(!measured[1].contains("cached"), "{measured:?}");
    assert!(measured[2].ends_with(" cached=true"), "{measured:?}");
    assert!(!measured[3].contains("cached"), "{measured:?}");
    // The model read the file as the write left it, not the cached copy.
    let reqs = env.requests();
    let msgs = reqs.last().unwrap()["request"]["messages"]
        .as_array()
        .unwrap()
        .clone();
    let last_result = msgs.last().unwrap();
    assert_eq!(last_result["role"], "tool", "{msgs:?}");
    assert_eq!(last_result["content"], "second\n", "{msgs:?}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);

    // Only read-only built-ins take the key.
    env.config("[tools.shell]\ncache_ttl_secs = 60\n");
    let r = env.run(&["config", "validate"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("tools.shell: \"shell\" is not a read-only tool"),
        "{r:?}"
    );
}

/// Each call that ran carries its duration, whether it was cut and a
/// token estimate: in its outcome receipt, in the stored round, and in
/// `tool stats`.
#[test]
fn every_call_records_duration_truncation_and_tokens() {
    let env = shell_env("[tools.shell]\nrate_limit = { per_minute = 2 }\n");
    let r = env.run(&["agent", "-m", "run three commands"]);
    assert_eq!(r.code, 4, "{r:?}");
    let receipts = env.receipts();
    for rc in &receipts[..2] {
        let m = rc["measured"].as_str().unwrap_or_else(|| panic!("{rc}"));
        let parts: Vec<&str> = m.split(' ').collect();
        assert_eq!(parts.len(), 3, "{m}");
        assert!(
            parts[0]
                .strip_prefix("duration_ms=")
                .unwrap()
                .parse::<u64>()
                .is_ok(),
            "{m}"
        );
        assert_eq!(parts[1], "truncated=false", "{m}");
        // "one\n" is four bytes: one token.
        assert_eq!(parts[2], "tokens_est=1", "{m}");
    }
    assert!(
        receipts[2].get("measured").is_none(),
        "a denied call never ran: {}",
        receipts[2]
    );
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
    // The stored round holds the same.
    let c = rusqlite::Connection::open(env.state.join("memory.sqlite")).unwrap();
    let stored: Vec<String> = c
        .prepare("SELECT tool_results FROM turns WHERE role = 'tool' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(stored.len(), 3);
    let first: Value = serde_json::from_str(&stored[0]).unwrap();
    assert_eq!(
        first[0]["result"]["measured"]["truncated"], false,
        "{first}"
    );
    assert_eq!(first[0]["result"]["measured"]["tokens_est"], 1, "{first}");
    assert!(
        first[0]["result"]["measured"]["duration_ms"].is_u64(),
        "{first}"
    );

    let (r, stats) = env.json(&["tool", "stats", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let shell = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tool"] == "shell")
        .unwrap_or_else(|| panic!("{stats}"));
    assert_eq!(
        (&shell["calls"], &shell["succeeded"], &shell["timed"]),
        (&json!(3), &json!(2), &json!(2)),
        "{shell}"
    );
    assert_eq!(shell["success_rate"], 66.7, "{shell}");
    assert!(
        shell["avg_ms"].is_number() && shell["p95_ms"].is_u64(),
        "{shell}"
    );
    let table = env.run(&["tool", "stats"]);
    assert!(table.stdout.starts_with("TOOL"), "{table:?}");
    assert!(table.stdout.contains("66.7%"), "{table:?}");
    // --since: a day after today counts nothing; a bad date is a usage error.
    let (_, later) = env.json(&["tool", "stats", "--json", "--since", "2999-01-01"]);
    assert_eq!(later, json!([]));
    let bad = env.run(&["tool", "stats", "--since", "yesterday"]);
    assert_eq!(bad.code, 2, "{bad:?}");

    // A result the tool cut says so.
    std::fs::write(env.ws.join("many.txt"), "hit\n".repeat(50)).unwrap();
    let (_, v) = env.tool("grep", json!({"pattern": "hit", "max_matches": 3}));
    assert_eq!(v["measured"]["truncated"], true, "{v}");
    let out_len = v["output"].as_str().unwrap().len() as u64;
    assert_eq!(
        v["measured"]["tokens_est"],
        json!(out_len.div_ceil(4)),
        "{v}"
    );
}
