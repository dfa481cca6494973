//! Receipts of calls that ran: a started receipt before the tool, the
//! outcome after; a call cut off by SIGKILL keeps its started receipt, and
//! `receipt verify` reports it without calling the chain broken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BASIC_TOOLS, Env, Run, processes_with, wait_until};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

/// Autonomy full, `sleep` allowed: `tool run shell` runs it without asking.
fn shell_env() -> Env {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 60\n[security]\nautonomy = \"full\"\nshell_allowlist = [\"sleep\", \"echo\"]\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    env
}

/// `tool run` refused before it prints a result.
fn tool_refused(env: &Env, tool: &str, args: Value) -> Run {
    let r = env.run(&["tool", "run", tool, "--json", &args.to_string()]);
    assert!(r.code == 7 && r.stdout.is_empty(), "{r:?}");
    r
}

fn statuses(env: &Env) -> Vec<String> {
    env.receipt_lines()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `tool run shell` with `sleep SECS` and SIGKILLs latchclaw while the
/// sleep runs; then kills the orphaned sleep (this test started it).
fn kill_mid_call(env: &Env, secs: &str) {
    let mut child = env
        .shell_command(&format!("sleep {secs}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut sleeping = Vec::new();
    wait_until(Duration::from_secs(10), "sleep never started", || {
        assert!(child.try_wait().unwrap().is_none(), "latchclaw ended early");
        sleeping = processes_with(secs);
        !sleeping.is_empty()
    });
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    for p in sleeping {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(p.pid).unwrap(),
            rustix::process::Signal::KILL,
        );
    }
}

#[test]
fn a_call_that_runs_leaves_started_then_outcome() {
    let env = Env::new();
    env.mock("file_list.toml", "", "");
    let (r, out) = env.tool("shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "allowed"]);
    let (start, done) = (&lines[0], &lines[1]);
    // The started receipt: the decision, no result yet.
    assert_eq!(
        (start["tool"].as_str(), start["risk"].as_str()),
        (Some("shell"), Some("low"))
    );
    assert!(
        start.get("result_hash").is_none() && start.get("started_id").is_none(),
        "{start}"
    );
    assert_eq!(start["args_hash"], done["args_hash"]);
    assert_eq!(start["reason"], done["reason"]);
    // The outcome names its start and follows it in the chain.
    assert_eq!(done["started_id"], start["id"]);
    assert_eq!(done["previous_hash"], start["receipt_hash"]);
    assert!(
        done["result_hash"].as_str().is_some_and(|h| h.len() == 64),
        "{done}"
    );
    // `tool run` reports the outcome's id and the start's.
    assert_eq!(out["receipt_id"], done["id"]);
    assert_eq!(out["started_receipt_id"], start["id"]);
    assert_eq!(out["receipts_head"], done["receipt_hash"]);

    // A tool that changes nothing (file_list, time, file_read,
    // memory_search) leaves no effect if cut off: one receipt, after it ran.
    let (r, v) = env.json(&["agent", "-m", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[2]["status"], "allowed");
    assert!(lines[2].get("started_id").is_none(), "{}", lines[2]);
    let call = &v["tool_calls"][0];
    assert_eq!(call["receipt_id"], lines[2]["id"]);
    assert_eq!(call["started_receipt_id"], Value::Null);
    assert_eq!(v["receipts_head"], lines[2]["receipt_hash"]);

    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: 3 receipts, head "), "{r:?}");
    assert_eq!(r.stdout.lines().count(), 2, "nothing unfinished: {r:?}");
    assert!(
        r.stdout.lines().nth(1).unwrap().starts_with("keyed: "),
        "{r:?}"
    );
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (v["ok"].as_bool(), v["receipts"].as_u64()),
        (Some(true), Some(3))
    );
    assert_eq!(v["unfinished"], json!([]));
    let r = env.run(&["receipt", "list"]);
    assert_eq!(
        r.stdout.lines().filter(|l| l.contains(" started ")).count(),
        1,
        "{r:?}"
    );
}

#[test]
fn a_call_killed_mid_run_keeps_its_started_receipt() {
    let env = shell_env();
    kill_mid_call(&env, "7.3131");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started"], "{lines:?}");
    let cut = lines[0]["id"].as_str().unwrap().to_string();
    assert_eq!(lines[0]["tool"], "shell");

    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "the chain is intact: {r:?}");
    assert!(r.stdout.starts_with("ok: 1 receipt, head "), "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "started, no outcome (the process was cut off): receipt 1 of 1, tool shell, id {cut}"
        )),
        "{r:?}"
    );

    // The next call chains on top; the cut-off call stays reported.
    let (r, _) = env.tool("shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "started", "allowed"]);
    assert_eq!(lines[1]["previous_hash"], lines[0]["receipt_hash"]);
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (v["ok"].as_bool(), v["receipts"].as_u64()),
        (Some(true), Some(3))
    );
    assert_eq!(v["head"], lines[2]["receipt_hash"]);
    let unfinished = v["unfinished"].as_array().unwrap();
    assert_eq!(unfinished.len(), 1, "{v}");
    assert_eq!(
        (
            unfinished[0]["position"].as_u64(),
            unfinished[0]["tool"].as_str(),
            unfinished[0]["id"].as_str(),
            unfinished[0]["conversation_id"].as_str(),
            unfinished[0]["status"].as_str(),
        ),
        (
            Some(1),
            Some("shell"),
            Some(cut.as_str()),
            Some("cli-tool-run"),
            Some("started, no outcome (the process was cut off)")
        )
    );

    // A second cut-off call: both are listed, in log order.
    kill_mid_call(&env, "7.3232");
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let at: Vec<u64> = v["unfinished"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["position"].as_u64().unwrap())
        .collect();
    assert_eq!(at, [1, 4], "{v}");
}

#[test]
fn a_denied_call_leaves_exactly_one_receipt() {
    let env = shell_env();
    let (r, out) = env.tool("shell", json!({"command": "rm -rf /"}));
    assert_eq!(r.code, 4, "{r:?}");
    let (r2, _) = env.tool("file_read", json!({"path": "/etc/passwd"}));
    assert_eq!(r2.code, 4, "{r2:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["denied", "denied"]);
    assert!(lines[0].get("started_id").is_none(), "{}", lines[0]);
    assert!(lines[0]["result_hash"].is_string(), "{}", lines[0]);
    assert_eq!(out["receipt_id"], lines[0]["id"]);
    assert_eq!(out["started_receipt_id"], Value::Null);
    // Under the emergency stop too.
    assert_eq!(env.run(&["estop"]).code, 0);
    let (r, _) = env.tool("shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 5, "{r:?}");
    assert_eq!(statuses(&env), ["denied", "denied", "denied"]);
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: 3 receipts"), "{r:?}");
}

#[test]
fn no_started_receipt_no_run() {
    // A torn last line: verify reports it as before, and the next call
    // writes no started receipt, so the tool does not run.
    let env = shell_env();
    let (r, _) = env.tool("shell", json!({"command": "echo hi"}));
    assert_eq!(r.code, 0, "{r:?}");
    kill_mid_call(&env, "7.3333");
    let log = env.state.join("tool_receipts.log");
    let whole = std::fs::read_to_string(&log).unwrap();
    let torn = &whole[..whole.len() - 40];
    std::fs::write(&log, torn).unwrap();
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stdout.contains("receipt 3 of 3: torn line"), "{r:?}");
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!((r.code, v["broken_at"].as_u64()), (7, Some(3)), "{r:?}");
    let write = json!({"path": "out.txt", "content": "x"});
    let r = env.run(&["tool", "run", "file_write", "--json", &write.to_string()]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("torn"), "{r:?}");
    assert!(!env.ws.join("out.txt").exists(), "the tool did not run");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        torn,
        "nothing appended"
    );

    // A log that cannot be written at all (a directory in its place).
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    let r = env.run(&["tool", "run", "file_write", "--json", &write.to_string()]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("tool_receipts.log"), "{r:?}");
    assert!(!env.ws.join("out.txt").exists(), "the tool did not run");
}

#[test]
fn a_failed_call_pairs_like_any_other() {
    let env = shell_env();
    let (r, out) = env.tool("shell", json!({"command": "sleep x"}));
    assert_eq!(r.code, 3, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["started", "failed"]);
    assert_eq!(lines[1]["started_id"], lines[0]["id"]);
    assert_eq!(out["receipt_id"], lines[1]["id"]);
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["unfinished"], json!([]));
}

/// The log's bytes, and the backups `receipt repair` left beside it.
fn log_bytes(env: &Env) -> Vec<u8> {
    std::fs::read(env.state.join("tool_receipts.log")).unwrap()
}

fn backups(env: &Env) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(&env.state)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("tool_receipts.log.bak-")
        })
        .collect();
    found.sort();
    found
}

/// Two calls, three receipts: `echo hi` (started, allowed), then a denied
/// read.
fn echo_then_a_denial(env: &Env) {
    assert_eq!(env.shell("echo hi").0.code, 0);
    let (r, v) = env.tool("file_read", json!({"path": "/etc/passwd"}));
    assert_eq!((r.code, &v["status"]), (4, &json!("denied")), "{r:?}");
}

/// A log of three receipts: `echo` (started, allowed) and a denial.
fn three_receipts() -> Env {
    let env = shell_env();
    echo_then_a_denial(&env);
    assert_eq!(statuses(&env), ["started", "allowed", "denied"]);
    env
}

#[test]
fn repair_drops_a_torn_tail_and_ends_the_exit_7_loop() {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    let env = three_receipts();
    let log = env.state.join("tool_receipts.log");
    // A crash mid-append: a call's started receipt, cut off part-way.
    let whole = log_bytes(&env);
    let (r, _) = env.tool("shell", json!({"command": "echo again"}));
    assert_eq!(r.code, 0, "{r:?}");
    let next = log_bytes(&env)[whole.len()..].to_vec();
    let fragment = &next[..next.iter().position(|&b| b == b'\n').unwrap() / 2];
    let torn: Vec<u8> = [whole.as_slice(), fragment].concat();
    std::fs::write(&log, &torn).unwrap();

    // Every way in is refused with exit 7 and names the repair.
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stdout.contains("receipt 4 of 4: torn line"), "{r:?}");
    assert!(r.stdout.contains("`latchclaw receipt repair`"), "{r:?}");
    let args = json!({"command": "echo blocked"}).to_string();
    let r = env.run(&["tool", "run", "shell", "--json", &args]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("`latchclaw receipt repair`"), "{r:?}");
    let r = env.run(&["tool", "run", "time"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(r.stderr.contains("`latchclaw receipt repair`"), "{r:?}");
    assert_eq!(log_bytes(&env), torn, "nothing appended");

    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    let dropped = fragment.len();
    let sha = sha2::Sha256::digest(fragment)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    assert!(
        r.stdout.contains(&format!(
            "dropped a torn last line after receipt 3: {dropped} bytes, sha256 {sha}"
        )),
        "{r:?}"
    );
    // The backup holds the log exactly as it was, owner-only, and is named
    // on stdout.
    let made = backups(&env);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        r.stdout.contains(&format!("backup: {}", made[0].display())),
        "{r:?}"
    );
    assert_eq!(std::fs::read(&made[0]).unwrap(), torn);
    let mode = std::fs::metadata(&made[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let name = made[0].file_name().unwrap().to_string_lossy().into_owned();
    let stamp = name.strip_prefix("tool_receipts.log.bak-").unwrap();
    assert!(
        stamp.len() == 16
            && stamp.ends_with('Z')
            && stamp.as_bytes()[8] == b'T'
            && stamp[..8]
                .bytes()
                .chain(stamp[9..15].bytes())
                .all(|b| b.is_ascii_digit()),
        "{name}"
    );
    // The receipts before the tear are untouched; the chain says a repair
    // happened, and how much it dropped.
    let now = log_bytes(&env);
    assert!(now.starts_with(&whole));
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 4);
    let repaired = &lines[3];
    assert_eq!(repaired["status"], "repaired");
    assert_eq!(repaired["previous_hash"], lines[2]["receipt_hash"]);
    let reason = repaired["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("{dropped} bytes, sha256 {sha}"))
            && reason.contains(&made[0].display().to_string()),
        "{reason}"
    );
    assert!(repaired.get("result_hash").is_none(), "{repaired}");

    // And the loop is over: verify passes, tools run again.
    let r = env.run(&["receipt", "verify"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: 4 receipts"), "{r:?}");
    let (r, out) = env.tool("shell", json!({"command": "echo back"}));
    assert_eq!(
        (r.code, out["output"].as_str()),
        (0, Some("back\n")),
        "{r:?}"
    );
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
    // A second repair finds nothing to do.
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!((r.code, v["repaired"].as_bool()), (0, Some(false)), "{r:?}");
    assert_eq!(backups(&env).len(), 1);
}

#[test]
fn repair_reports_as_json_and_never_overwrites_a_backup() {
    let env = three_receipts();
    let log = env.state.join("tool_receipts.log");
    let whole = log_bytes(&env);
    // A tear that leaves NUL bytes behind (a crash after the file grew but
    // before its data landed).
    let torn: Vec<u8> = [whole.as_slice(), b"{\"args_hash\":\"9f", &[0u8; 24]].concat();
    std::fs::write(&log, &torn).unwrap();
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["repaired"].as_bool(),
            v["receipts"].as_u64(),
            v["kept"].as_u64(),
            v["dropped_bytes"].as_u64()
        ),
        (Some(true), Some(true), Some(4), Some(3), Some(40)),
        "{v}"
    );
    let first = std::path::PathBuf::from(v["backup"].as_str().unwrap());
    assert_eq!(std::fs::read(&first).unwrap(), torn);
    assert_eq!(v["receipt_id"], env.receipt_lines()[3]["id"]);
    // Torn again within the same second: a second backup, the first kept.
    let again: Vec<u8> = [log_bytes(&env).as_slice(), b"{\"arg"].concat();
    std::fs::write(&log, &again).unwrap();
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let second = std::path::PathBuf::from(v["backup"].as_str().unwrap());
    assert_ne!(first, second);
    assert_eq!(std::fs::read(&first).unwrap(), torn);
    assert_eq!(std::fs::read(&second).unwrap(), again);
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// `receipt repair` on `bytes` must refuse with exit 7 naming `position`,
/// and leave the log as it was, with no backup.
fn assert_refused(env: &Env, bytes: &[u8], position: u64) {
    let log = env.state.join("tool_receipts.log");
    std::fs::write(&log, bytes).unwrap();
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("not repaired: receipt {position} of "))
            && r.stderr.contains("only drops a torn last line")
            && r.stderr.contains("never rewrites or removes a receipt"),
        "{r:?}"
    );
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert_eq!(
        (v["ok"].as_bool(), v["broken_at"].as_u64()),
        (Some(false), Some(position)),
        "{v}"
    );
    assert_eq!(std::fs::read(&log).unwrap(), bytes, "the log is unchanged");
    assert!(backups(env).is_empty(), "no backup for a refused repair");
}

#[test]
fn repair_refuses_anything_but_a_torn_tail() {
    let env = three_receipts();
    let whole = log_bytes(&env);
    let text = String::from_utf8(whole.clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let join = |l: &[&str]| l.iter().map(|l| format!("{l}\n")).collect::<String>();
    // An altered middle line, with and without a torn tail after it.
    let altered = lines[1].replace("\"status\":\"allowed\"", "\"status\":\"approved\"");
    assert_ne!(altered, lines[1]);
    let middle = join(&[lines[0], &altered, lines[2]]);
    assert_refused(&env, middle.as_bytes(), 2);
    assert_refused(&env, format!("{middle}{{\"args_hash\":\"ab").as_bytes(), 2);
    // A deleted line, and two lines swapped: broken links.
    assert_refused(&env, join(&[lines[0], lines[2]]).as_bytes(), 2);
    assert_refused(&env, join(&[lines[1], lines[0], lines[2]]).as_bytes(), 1);
    // An altered last line, whole with its newline, or whole without it.
    let last = lines[2].replace("forbidden path", "allowed path");
    assert_ne!(last, lines[2]);
    assert_refused(&env, join(&[lines[0], lines[1], &last]).as_bytes(), 3);
    let no_newline = format!("{}{last}", join(&[lines[0], lines[1]]));
    assert_refused(&env, no_newline.as_bytes(), 3);
    // A tail that is not the start of a receipt (something else wrote it).
    assert_refused(&env, format!("{}garbage", join(&lines)).as_bytes(), 4);
    assert_refused(
        &env,
        format!("{}{{\"tool\":\"x", join(&lines)).as_bytes(),
        4,
    );
    // And the healthy log was never touched along the way.
    std::fs::write(env.state.join("tool_receipts.log"), &whole).unwrap();
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

#[test]
fn repair_on_a_healthy_log_changes_nothing() {
    let env = shell_env();
    // No log at all.
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("nothing to repair"), "{r:?}");
    assert!(
        !env.state.join("tool_receipts.log").exists(),
        "nothing created"
    );
    let env = three_receipts();
    let before = log_bytes(&env);
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("ok: 3 receipts, head ") && r.stdout.contains("nothing to repair"),
        "{r:?}"
    );
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["repaired"].as_bool(),
            v["receipts"].as_u64()
        ),
        (Some(true), Some(false), Some(3)),
        "{v}"
    );
    assert_eq!(v["head"], env.receipt_lines()[2]["receipt_hash"]);
    assert_eq!(log_bytes(&env), before);
    assert!(backups(&env).is_empty());
    // A whole, valid last receipt that only lacks its newline keeps it.
    let cut = &before[..before.len() - 1];
    std::fs::write(env.state.join("tool_receipts.log"), cut).unwrap();
    assert_eq!(env.run(&["receipt", "verify"]).code, 7);
    let (r, v) = env.json(&["receipt", "repair", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        (
            v["added_newline"].as_bool(),
            v["dropped_bytes"].as_u64(),
            v["kept"].as_u64()
        ),
        (Some(true), Some(0), Some(3)),
        "{v}"
    );
    assert!(log_bytes(&env).starts_with(&before));
    assert_eq!(env.receipt_lines()[3]["status"], "repaired");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// What a rewrite does with each receipt's hmac.
#[derive(Clone, Copy)]
enum Mac<'a> {
    /// Left as it was (now stale where the receipt changed).
    Keep,
    Strip,
    /// Recomputed with this key: an attacker who can read it.
    With(&'a [u8]),
}

/// The log rewritten as someone who can write it would: the receipts in
/// `kept`, every `previous_hash` and `receipt_hash` recomputed the way
/// latchclaw computes them (SHA-256 of the canonical JSON without
/// `receipt_hash` and `hmac`), each hmac treated as `mac(i)` says.
fn rechain<'a>(env: &Env, kept: &[Value], mac: impl Fn(usize) -> Mac<'a>) {
    use hmac::{Hmac, KeyInit, Mac as _};
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let mut prev = "0".repeat(64);
    let mut out = String::new();
    for (i, r) in kept.iter().enumerate() {
        let mut o = r.as_object().unwrap().clone();
        o.remove("receipt_hash");
        let old_mac = o.remove("hmac");
        o.insert("previous_hash".into(), json!(prev));
        let canonical = Value::Object(o.clone()).to_string();
        let hash = hex(&Sha256::digest(canonical.as_bytes()));
        match mac(i) {
            Mac::Keep => {
                if let Some(m) = old_mac {
                    o.insert("hmac".into(), m);
                }
            }
            Mac::Strip => {}
            Mac::With(key) => {
                let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
                m.update(canonical.as_bytes());
                o.insert("hmac".into(), json!(hex(&m.finalize().into_bytes())));
            }
        }
        o.insert("receipt_hash".into(), json!(hash));
        out.push_str(&Value::Object(o).to_string());
        out.push('\n');
        prev = hash;
    }
    std::fs::write(env.state.join("tool_receipts.log"), out).unwrap();
}

/// A log of seven receipts, two of them denials (3 and 6).
fn log_with_denials() -> Env {
    let env = shell_env();
    for (tool, args, code) in [
        ("shell", json!({"command": "echo one"}), 0),
        ("file_read", json!({"path": "/etc/passwd"}), 4),
        ("shell", json!({"command": "echo two"}), 0),
        ("file_read", json!({"path": "/etc/shadow"}), 4),
        ("time", json!({}), 0),
    ] {
        assert_eq!(env.tool(tool, args).0.code, code);
    }
    assert_eq!(
        statuses(&env),
        [
            "started", "allowed", "denied", "started", "allowed", "denied", "allowed"
        ]
    );
    env
}

/// `receipt head`: `N HASH`.
fn head(env: &Env) -> (u64, String) {
    let r = env.run(&["receipt", "head"]);
    assert_eq!(r.code, 0, "{r:?}");
    let (n, h) = r.stdout.trim_end().split_once(' ').unwrap();
    (n.parse().unwrap(), h.to_string())
}

fn verify(env: &Env, extra: &[&str]) -> Run {
    let args: Vec<&str> = ["receipt", "verify"].iter().chain(extra).copied().collect();
    env.run(&args)
}

#[test]
fn every_receipt_is_keyed_and_head_prints_n_and_hash() {
    let env = log_with_denials();
    let key = std::fs::read(env.state.join("receipt.key")).unwrap();
    assert_eq!(key.len(), 32);
    let lines = env.receipt_lines();
    for l in &lines {
        let mac = l["hmac"].as_str().unwrap_or_else(|| panic!("{l}"));
        assert!(
            mac.len() == 64 && mac.bytes().all(|b| b.is_ascii_hexdigit()),
            "{l}"
        );
    }
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("\nkeyed: every receipt carries an hmac, each checked with the receipt key "),
        "{r:?}"
    );
    let (n, h) = head(&env);
    assert_eq!(
        (n, h.as_str()),
        (7, lines[6]["receipt_hash"].as_str().unwrap())
    );
    let (r, v) = env.json(&["receipt", "head", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v, json!({"receipts": 7, "head": h}));
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (&v["unkeyed"], &v["keyed"], &v["hmac_checked"]),
        (&json!(0), &json!(7), &json!(true)),
        "{v}"
    );
    // Recorded heads that still hold pass, in either spelling.
    for extra in [
        vec!["--since".to_string(), format!("{n}:{h}")],
        vec!["--since".to_string(), format!("{n} {}", h.to_uppercase())],
        vec![
            "--since".to_string(),
            format!("2:{}", lines[1]["receipt_hash"].as_str().unwrap()),
        ],
        vec![
            "--expect-head".to_string(),
            lines[3]["receipt_hash"].as_str().unwrap().into(),
        ],
    ] {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let r = verify(&env, &extra);
        assert_eq!(r.code, 0, "{extra:?}: {r:?}");
    }
    // Bad spellings are usage errors naming the flag.
    for (flag, value) in [
        ("--since", "7"),
        ("--since", "0:ab"),
        ("--since", &format!("x:{h}")),
        ("--since", &format!("3:{}", &h[1..])),
        ("--expect-head", "HEAD"),
    ] {
        let r = verify(&env, &[flag, value]);
        assert_eq!(r.code, 2, "{flag} {value}: {r:?}");
        assert!(r.stderr.contains(flag), "{r:?}");
    }
    // A head no chain of this log has: exit 7 without a position.
    let (r, v) = env.json(&[
        "receipt",
        "verify",
        "--json",
        "--expect-head",
        &"ab".repeat(32),
    ]);
    assert_eq!(r.code, 7, "{r:?}");
    assert_eq!(
        (v["ok"].as_bool(), &v["broken_at"]),
        (Some(false), &Value::Null),
        "{v}"
    );
}

#[test]
fn a_rewritten_chain_fails_through_the_hmac_and_the_recorded_head() {
    let env = log_with_denials();
    let (n, h) = head(&env);
    let lines = env.receipt_lines();
    let h5 = lines[4]["receipt_hash"].as_str().unwrap().to_string();
    let h2 = lines[1]["receipt_hash"].as_str().unwrap().to_string();
    let since_head = format!("{n}:{h}");
    let since_5 = format!("5:{h5}");
    let since_2 = format!("2:{h2}");
    // The denials dropped, every hash recomputed: the chain links again.
    let kept: Vec<Value> = lines
        .iter()
        .filter(|l| l["status"] != "denied")
        .cloned()
        .collect();
    let key = std::fs::read(env.state.join("receipt.key")).unwrap();

    // Without the key: the stale hmacs give it away, from the first
    // receipt that changed (old receipt 4, now 3).
    rechain(&env, &kept, |_| Mac::Keep);
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout.starts_with("broken: receipt 3 of 5: bad hmac: "),
        "{r:?}"
    );
    for since in [&since_head, &since_5] {
        assert_eq!(verify(&env, &["--since", since]).code, 7);
    }
    // Nor does stripping the hmacs help: of the rewritten receipts only...
    rechain(&env, &kept, |i| if i < 2 { Mac::Keep } else { Mac::Strip });
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout
            .contains("receipt 3 has no hmac, but the receipts before it from 1 on are keyed"),
        "{r:?}"
    );
    // ...or of all of them: the key exists, so some receipt must be keyed.
    rechain(&env, &kept, |_| Mac::Strip);
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout
            .contains("exists, but none of the 5 receipts carries an hmac"),
        "{r:?}"
    );
    // And no receipt is written on top of a stripped log: the call does not run.
    let before = log_bytes(&env);
    let r = tool_refused(&env, "shell", json!({"command": "echo three"}));
    assert!(r.stderr.contains("has no hmac"), "{r:?}");
    assert_eq!(log_bytes(&env), before);

    // Someone who can read the key forges hmacs the verifier accepts; the
    // key proves nothing against them. A head recorded before still does.
    rechain(&env, &kept, |_| Mac::With(&key));
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "a forged chain under a stolen key: {r:?}");
    let r = verify(&env, &["--since", &since_head]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "the log holds 5 receipts, but receipt 7 was recorded with the hash {h}"
        )),
        "{r:?}"
    );
    let r = verify(&env, &["--since", &since_5]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout
            .starts_with("broken: receipt 5 of 5: receipt 5 has the hash ")
            && r.stdout.contains(&format!("not {h5} as recorded")),
        "{r:?}"
    );
    let (r, v) = env.json(&["receipt", "verify", "--json", "--expect-head", &h]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("is in no receipt of the chain"),
        "{v}"
    );
    // What came before the first dropped receipt is unchanged, and says so.
    let r = verify(&env, &["--since", &since_2]);
    assert_eq!(r.code, 0, "{r:?}");

    // Someone who can also delete the key: stripped hmacs and no key read
    // as a log from before the key, and only the recorded head tells.
    std::fs::remove_file(env.state.join("receipt.key")).unwrap();
    rechain(&env, &kept, |_| Mac::Strip);
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("not authenticated"), "{r:?}");
    assert_eq!(verify(&env, &["--since", &since_head]).code, 7);
    assert_eq!(verify(&env, &["--expect-head", &h]).code, 7);
}

#[test]
fn a_log_from_before_the_key_verifies_then_goes_on_keyed() {
    // Two receipts as latchclaw wrote them before receipts were keyed.
    let old = shell_env();
    for _ in 0..2 {
        assert_eq!(old.tool("time", json!({})).0.code, 0);
    }
    let env = shell_env();
    rechain(&env, &old.receipt_lines(), |_| Mac::Strip);
    assert!(!env.state.join("receipt.key").exists());
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(
            "\nnot authenticated: no receipt carries an hmac and there is no receipt key"
        ),
        "{r:?}"
    );
    // The next run makes the key, records where keyed receipts begin, and
    // keys its own.
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    let mode = std::fs::metadata(env.state.join("receipt.key")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let lines = env.receipt_lines();
    assert_eq!(statuses(&env), ["allowed", "allowed", "keyed", "allowed"]);
    let keyed: Vec<bool> = lines.iter().map(|l| l.get("hmac").is_some()).collect();
    assert_eq!(keyed, [false, false, true, true]);
    assert_eq!(lines[2]["tool"], "receipt key");
    assert!(
        lines[2]["reason"]
            .as_str()
            .unwrap()
            .contains("receipts 1–2 before this one were written without it"),
        "{}",
        lines[2]
    );
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(
            "\nkeyed: receipts 1–2 were written before the receipt key existed (not \
             authenticated); 3–4 keyed, each hmac checked with "
        ),
        "{r:?}"
    );
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!((&v["unkeyed"], &v["keyed"]), (&json!(2), &json!(2)), "{v}");
    // The unkeyed prefix cannot grow afterwards: a keyed receipt's hmac
    // covers its link to the one before.
    let mut grown = lines[..2].to_vec();
    grown.push(lines[1].clone());
    grown.extend_from_slice(&lines[2..]);
    grown[2]["id"] = json!("receipt-20250101-000000000000");
    rechain(&env, &grown, |_| Mac::Keep);
    let r = verify(&env, &[]);
    assert!(
        r.code == 7 && r.stdout.contains("receipt 4 of 5: bad hmac"),
        "{r:?}"
    );
    // Nor can the `keyed` receipt be dropped with the hmacs after it kept.
    let mut dropped = lines.clone();
    dropped.remove(2);
    rechain(&env, &dropped, |_| Mac::Keep);
    assert!(
        verify(&env, &[])
            .stdout
            .contains("receipt 3 of 3: bad hmac")
    );

    // Keyed receipts and a missing key: they cannot be authenticated, and
    // no run appends (or makes a new key) until it is back.
    rechain(&env, &lines, |_| Mac::Keep);
    let key = env.state.join("receipt.key");
    let aside = env.root.join("receipt.key.aside");
    std::fs::rename(&key, &aside).unwrap();
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "cannot authenticate: receipts 3–4 carry an hmac, but the receipt key {} is missing",
            key.display()
        )),
        "{r:?}"
    );
    assert_eq!(env.run(&["receipt", "head"]).code, 7);
    let r = tool_refused(&env, "time", json!({}));
    assert!(r.stderr.contains("restore it"), "{r:?}");
    assert!(!key.exists() && !env.state.join("receipt.key.new").exists());
    assert_eq!(env.receipt_lines().len(), 4);
    std::fs::rename(&aside, &key).unwrap();
    assert_eq!(verify(&env, &[]).code, 0);
}

#[test]
fn the_receipt_key_is_private_and_no_tool_reaches_it() {
    let env = Env::new();
    let r = env.run(&["init", "--workspace", env.ws.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    let key = env.state.join("receipt.key");
    assert!(
        r.stdout
            .contains(&format!("receipt key {} (created, 0600", key.display())),
        "{r:?}"
    );
    let bytes = std::fs::read(&key).unwrap();
    assert_eq!(bytes.len(), 32);
    assert_ne!(bytes, [0u8; 32]);
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(mode(&key), 0o600);
    // Never overwritten.
    let r = env.run(&["init", "--force", "--workspace", env.ws.to_str().unwrap()]);
    assert!(r.stdout.contains("(kept)"), "{r:?}");
    assert_eq!(std::fs::read(&key).unwrap(), bytes);

    // No tool reads it, even with the workspace rule off and `cat` allowed.
    env.config(&format!(
        "[security]\nautonomy = \"full\"\nworkspace_only = false\nshell_allowlist = [\"cat\"]\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    let (r, out) = env.tool("file_read", json!({"path": key.to_str().unwrap()}));
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(out["status"], "denied", "{out}");
    let (r, out) = env.shell(&format!("cat {}", key.display()));
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(out["status"], "denied", "{out}");
    let (r, out) = env.shell(&format!(
        "cat {}/../.latchclaw/receipt.key",
        env.ws.display()
    ));
    assert_eq!(
        (r.code, out["status"].as_str()),
        (4, Some("denied")),
        "{r:?}"
    );
    assert_eq!(env.receipts().len(), 3);
    assert_eq!(verify(&env, &[]).code, 0);

    // A key others may read, or one that is not 32 bytes, is refused.
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let r = verify(&env, &[]);
    assert!(
        r.code == 7 && r.stderr.contains(&format!("chmod 600 {}", key.display())),
        "{r:?}"
    );
    tool_refused(&env, "time", json!({}));
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(&key, &bytes[..16]).unwrap();
    let r = verify(&env, &[]);
    assert!(
        r.code == 7
            && r.stderr
                .contains("is not a key latchclaw wrote (16 bytes, not 32)"),
        "{r:?}"
    );
    std::fs::write(&key, &bytes).unwrap();
    assert_eq!(verify(&env, &[]).code, 0);
}

#[test]
fn the_anchor_file_gets_the_head_after_every_run_that_wrote_receipts() {
    let env = Env::new();
    let anchor = env.root.join("heads/anchor.log");
    std::fs::create_dir_all(anchor.parent().unwrap()).unwrap();
    env.mock(
        "file_list.toml",
        "",
        &format!(
            "[security]\nautonomy = \"full\"\nshell_allowlist = [\"echo\"]\n[channels.cli]\n{BASIC_TOOLS}\n[receipts]\nanchor_file = {}\n",
            common::lit(&anchor)
        ),
    );
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    echo_then_a_denial(&env);
    // Refused before any receipt: no head to record.
    assert_eq!(
        env.run(&["tool", "run", "file_read", "--json", "{}"]).code,
        2
    );
    let (r, v) = env.json(&["agent", "-m", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(lines.len(), 5);
    assert_eq!(v["receipts_head"], lines[4]["receipt_hash"]);
    let text = std::fs::read_to_string(&anchor).unwrap();
    let heads: Vec<(String, u64, String)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "{l}");
            (f[0].to_string(), f[1].parse().unwrap(), f[2].to_string())
        })
        .collect();
    let counts: Vec<u64> = heads.iter().map(|h| h.1).collect();
    assert_eq!(counts, [1, 3, 4, 5], "{text}");
    for (ts, n, hash) in &heads {
        assert!(
            ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{ts}"
        );
        assert_eq!(
            lines[*n as usize - 1]["receipt_hash"].as_str(),
            Some(hash.as_str())
        );
        assert_eq!(verify(&env, &["--since", &format!("{n}:{hash}")]).code, 0);
    }
    assert_eq!(head(&env), (5, heads[3].2.clone()));
    let mode = std::fs::metadata(&anchor).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    // No tool reaches it.
    let (r, out) = env.tool("file_read", json!({"path": anchor.to_str().unwrap()}));
    assert_eq!(
        (r.code, out["status"].as_str()),
        (4, Some("denied")),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&anchor).unwrap().lines().count(), 5);

    // An anchor the run cannot write to is a warning, not a failed run.
    std::fs::remove_file(&anchor).unwrap();
    std::fs::remove_dir(anchor.parent().unwrap()).unwrap();
    let (r, _) = env.tool("time", json!({}));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("cannot open the anchor file {}", anchor.display())),
        "{r:?}"
    );

    // It must live outside the state dir.
    let cfg = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    let inside = env.state.join("anchor.log");
    std::fs::write(
        env.state.join("config.toml"),
        cfg.replace(&common::lit(&anchor), &common::lit(&inside)),
    )
    .unwrap();
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "receipts.anchor_file: {} is inside the state directory",
            inside.display()
        )),
        "{r:?}"
    );
}

/// Autonomy full, `echo` allowed, receipts anchored in `<root>/heads/anchor.log`.
fn anchored_env() -> (Env, std::path::PathBuf) {
    let env = Env::new();
    let anchor = env.root.join("heads/anchor.log");
    std::fs::create_dir_all(anchor.parent().unwrap()).unwrap();
    anchor_config(&env, Some(&anchor));
    (env, anchor)
}

fn anchor_config(env: &Env, anchor: Option<&std::path::Path>) {
    let receipts = anchor.map_or(String::new(), |a| {
        format!("[receipts]\nanchor_file = {}\n", common::lit(a))
    });
    env.mock(
        "file_list.toml",
        "",
        &format!(
            "[security]\nautonomy = \"full\"\nshell_allowlist = [\"echo\"]\n[channels.cli]\n{BASIC_TOOLS}\n{receipts}"
        ),
    );
}

/// The log's first `n` lines.
fn first_lines(bytes: &[u8], n: usize) -> Vec<u8> {
    let mut end = 0;
    for _ in 0..n {
        end += bytes[end..].iter().position(|b| *b == b'\n').unwrap() + 1;
    }
    bytes[..end].to_vec()
}

/// Every way a run can append refuses, and nothing is written: not the
/// log, not the anchor file.
fn runs_refuse(env: &Env, anchor: &std::path::Path, why: &[&str]) {
    let log = log_bytes(env);
    let anchored = std::fs::read(anchor).unwrap();
    let says = |text: &str| why.iter().all(|w| text.contains(w));
    for (tool, args) in [
        ("time", json!({})),
        ("shell", json!({"command": "echo hi"})),
    ] {
        let r = tool_refused(env, tool, args);
        assert!(says(&r.stderr), "{r:?}");
    }
    let (r, v) = env.json(&["agent", "-m", "list", "--json"]);
    assert_eq!(
        (r.code, v["exit_reason"].as_str()),
        (7, Some("integrity")),
        "{r:?}"
    );
    assert!(says(v["error"].as_str().unwrap()), "{v}");
    assert_eq!(log_bytes(env), log, "no receipt appended");
    assert_eq!(std::fs::read(anchor).unwrap(), anchored, "nothing anchored");
}

#[test]
fn a_log_cut_short_of_its_anchor_fails_verify_and_takes_no_receipt() {
    let (env, anchor) = anchored_env();
    // Set, but no run yet: nothing to hold.
    let r = verify(&env, &[]);
    assert!(r.code == 0 && !r.stdout.contains("anchor:"), "{r:?}");
    echo_then_a_denial(&env);
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    let whole = log_bytes(&env);
    let lines = env.receipt_lines();
    let h4 = lines[3]["receipt_hash"].as_str().unwrap().to_string();
    let last = std::fs::read_to_string(&anchor).unwrap();
    assert!(last.ends_with(&format!(" 4 {h4}\n")), "{last}");
    let r = verify(&env, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "anchor: receipt 4 still has {h4}, as anchored in {} at ",
            anchor.display()
        )),
        "{r:?}"
    );
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (&v["ok"], &v["anchor"]["receipts"], &v["anchor"]["head"]),
        (&json!(true), &json!(4), &json!(h4)),
        "{v}"
    );

    // The newest receipt dropped: verify names it.
    std::fs::write(env.state.join("tool_receipts.log"), first_lines(&whole, 3)).unwrap();
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout
            .starts_with("broken: the log holds 3 receipts, but receipt 4 was anchored")
            && r.stdout
                .contains(&format!("with the hash {h4} in {}", anchor.display()))
            && r.stdout.contains("receipt 4 is missing (cut off)")
            && r.stdout.contains("`latchclaw receipt anchor --reset`"),
        "{r:?}"
    );
    let (r, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(
        (r.code, &v["ok"], &v["receipts"], &v["broken_at"]),
        (7, &json!(false), &json!(3), &Value::Null),
        "{v}"
    );
    // The newest two: both named; `receipt head` prints no head either.
    std::fs::write(env.state.join("tool_receipts.log"), first_lines(&whole, 2)).unwrap();
    let r = verify(&env, &[]);
    assert!(
        r.code == 7 && r.stdout.contains("receipts 3–4 are missing (cut off)"),
        "{r:?}"
    );
    let r = env.run(&["receipt", "head"]);
    assert!(
        r.code == 7 && r.stdout.contains("receipts 3–4 are missing"),
        "{r:?}"
    );

    // No run appends to it, and each says what to do.
    let refusal = [
        "the receipts log ",
        "holds 2 receipts, but the anchor file",
        &format!("records receipt 4 with the hash {h4}"),
        "receipts 3–4 were cut off",
        "no receipt is appended",
        "restore the one holding receipt 4 from a backup",
        "`latchclaw receipt anchor --reset`",
    ];
    runs_refuse(&env, &anchor, &refusal);
    // Nor does `receipt repair`, which has nothing to repair here.
    let r = env.run(&["receipt", "repair"]);
    assert!(
        r.code == 7 && r.stderr.contains("not repaired: the log holds 2 receipts"),
        "{r:?}"
    );
    assert!(backups(&env).is_empty());
    assert_eq!(log_bytes(&env), first_lines(&whole, 2));

    // The log restored from a backup: verify and runs go on.
    std::fs::write(env.state.join("tool_receipts.log"), &whole).unwrap();
    assert_eq!(verify(&env, &[]).code, 0);
    let (r, out) = env.tool("time", json!({}));
    assert_eq!(r.code, 0, "{r:?}");
    let text = std::fs::read_to_string(&anchor).unwrap();
    let h5 = out["receipts_head"].as_str().unwrap();
    assert!(text.ends_with(&format!(" 5 {h5}\n")), "{text}");
    let r = verify(&env, &[]);
    assert!(
        r.code == 0
            && r.stdout
                .contains(&format!("anchor: receipt 5 still has {h5}")),
        "{r:?}"
    );
}

#[test]
fn a_rewritten_anchored_receipt_fails_verify_and_takes_no_receipt() {
    let (env, anchor) = anchored_env();
    echo_then_a_denial(&env);
    let whole = log_bytes(&env);
    let h3 = env.receipt_lines()[2]["receipt_hash"]
        .as_str()
        .unwrap()
        .to_string();
    // Receipt 3 edited in place: its own hash no longer matches.
    let edited = String::from_utf8(whole.clone())
        .unwrap()
        .replace("\"status\":\"denied\"", "\"status\":\"allowed\"");
    std::fs::write(env.state.join("tool_receipts.log"), &edited).unwrap();
    let r = verify(&env, &[]);
    assert!(
        r.code == 7 && r.stdout.starts_with("broken: receipt 3 of 3: "),
        "{r:?}"
    );

    // Receipt 3 replaced by another that links and carries a good hmac
    // (written by latchclaw itself while the anchor was not configured):
    // only the anchor tells.
    std::fs::write(env.state.join("tool_receipts.log"), first_lines(&whole, 2)).unwrap();
    anchor_config(&env, None);
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    anchor_config(&env, Some(&anchor));
    let other = env.receipt_lines()[2]["receipt_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let r = verify(&env, &[]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "broken: receipt 3 of 3: receipt 3 has the hash {other}, not {h3} as anchored in {}",
            anchor.display()
        )) && r.stdout.contains("rewritten at or before receipt 3"),
        "{r:?}"
    );
    let (_, v) = env.json(&["receipt", "verify", "--json"]);
    assert_eq!(v["broken_at"], 3, "{v}");
    runs_refuse(
        &env,
        &anchor,
        &[
            &format!("has receipt 3, but it has the hash {other}, not {h3}"),
            "rewritten at or before receipt 3",
            "`latchclaw receipt anchor --reset`",
        ],
    );
}

#[test]
fn receipt_anchor_records_the_head_and_reset_accepts_a_cut_log() {
    let (env, anchor) = anchored_env();
    let r = env.run(&["receipt", "anchor"]);
    assert_eq!(r.code, 0, "{r:?}");
    let genesis = "0".repeat(64);
    assert_eq!(
        r.stdout,
        format!("anchored: 0 {genesis} in {}\n", anchor.display())
    );
    echo_then_a_denial(&env);
    let whole = log_bytes(&env);
    let (count, h3) = head(&env);
    // Already the last line: nothing appended.
    let before = std::fs::read_to_string(&anchor).unwrap();
    let r = env.run(&["receipt", "anchor"]);
    assert!(r.code == 0 && r.stdout.starts_with("ok: 3 "), "{r:?}");
    assert_eq!(std::fs::read_to_string(&anchor).unwrap(), before);

    // Cut: refused without --reset, nothing anchored.
    std::fs::write(env.state.join("tool_receipts.log"), first_lines(&whole, 2)).unwrap();
    let r = env.run(&["receipt", "anchor"]);
    assert!(
        r.code == 7 && r.stdout.contains("receipt 3 is missing"),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&anchor).unwrap(), before);
    // --reset: the log that is there becomes the anchor; the old line stays.
    let (r, v) = env.json(&["receipt", "anchor", "--reset", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let h2 = env.receipt_lines()[1]["receipt_hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        (
            &v["anchored"],
            &v["receipts"],
            &v["head"],
            &v["replaced"]["receipts"],
            &v["replaced"]["head"]
        ),
        (
            &json!(true),
            &json!(2),
            &json!(h2),
            &json!(count),
            &json!(h3)
        ),
        "{v}"
    );
    let text = std::fs::read_to_string(&anchor).unwrap();
    assert!(
        text.starts_with(&before) && text[before.len()..].ends_with(&format!(" 2 {h2}\n")),
        "{text}"
    );
    assert_eq!(verify(&env, &[]).code, 0);
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    assert_eq!(env.receipt_lines().len(), 3);

    // A new chain: the old log moved aside, then --reset records it empty.
    std::fs::rename(
        env.state.join("tool_receipts.log"),
        env.root.join("old_receipts.log"),
    )
    .unwrap();
    assert_eq!(verify(&env, &[]).code, 7);
    let r = tool_refused(&env, "time", json!({}));
    assert!(r.stderr.contains("holds 0 receipts"), "{r:?}");
    let r = env.run(&["receipt", "anchor", "--reset"]);
    assert!(
        r.code == 0
            && r.stdout.starts_with(&format!("anchored: 0 {genesis}"))
            && r.stdout
                .contains("reset: the log no longer holds receipt 3 "),
        "{r:?}"
    );
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    assert_eq!(verify(&env, &[]).code, 0);

    // Without receipts.anchor_file there is nothing to anchor to.
    anchor_config(&env, None);
    let r = env.run(&["receipt", "anchor"]);
    assert!(
        r.code == 2 && r.stderr.contains("receipts.anchor_file is not set"),
        "{r:?}"
    );
}

#[test]
fn an_anchor_file_latchclaw_did_not_write_is_a_clear_error() {
    let (env, anchor) = anchored_env();
    echo_then_a_denial(&env);
    let (_, h3) = head(&env);
    let before = std::fs::read_to_string(&anchor).unwrap();
    let log = log_bytes(&env);
    for (bad, why) in [
        (
            format!("{before}2026-11-22T23:51:04.147Z 3 {}\n", &h3[..60]),
            "HASH is not 64 hex digits",
        ),
        (
            format!("{before}3 {h3}\n"),
            "2 space-separated fields, not 3",
        ),
        (
            format!("{before}\0\0\0\0"),
            "1 space-separated fields, not 3",
        ),
    ] {
        std::fs::write(&anchor, &bad).unwrap();
        let said = [
            &format!(
                "the anchor file {} does not end with a head latchclaw wrote",
                anchor.display()
            ),
            why,
            "restore the file from a copy",
            "`latchclaw receipt anchor --reset`",
        ];
        let r = verify(&env, &[]);
        assert!(
            r.code == 7 && said.iter().all(|s| r.stderr.contains(s)),
            "{r:?}"
        );
        assert!(!r.stderr.contains("panicked"), "{r:?}");
        runs_refuse(&env, &anchor, &said);
    }
    assert_eq!(log_bytes(&env), log);
    // --reset accepts the log as it is after a line it cannot read.
    let r = env.run(&["receipt", "anchor", "--reset"]);
    assert!(
        r.code == 0 && r.stdout.starts_with(&format!("anchored: 3 {h3}")),
        "{r:?}"
    );
    assert_eq!(verify(&env, &[]).code, 0);
    assert_eq!(env.tool("time", json!({})).0.code, 0);
}

#[test]
fn repair_keys_its_receipt_and_refuses_without_the_key() {
    let env = three_receipts();
    let log = env.state.join("tool_receipts.log");
    let whole = log_bytes(&env);
    let torn: Vec<u8> = [whole.as_slice(), b"{\"args_hash\":\"9f"].concat();
    std::fs::write(&log, &torn).unwrap();
    // Without the key the `repaired` receipt could not be keyed: refused,
    // nothing changed, no backup.
    let key = env.state.join("receipt.key");
    let aside = env.root.join("key.aside");
    std::fs::rename(&key, &aside).unwrap();
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 7, "{r:?}");
    assert!(
        r.stderr
            .contains("receipts 1–3 carry an hmac but there is no receipt key"),
        "{r:?}"
    );
    assert_eq!(log_bytes(&env), torn);
    assert!(backups(&env).is_empty());
    std::fs::rename(&aside, &key).unwrap();
    let r = env.run(&["receipt", "repair"]);
    assert_eq!(r.code, 0, "{r:?}");
    let lines = env.receipt_lines();
    assert_eq!(lines[3]["status"], "repaired");
    assert!(
        lines[3]["hmac"].as_str().is_some_and(|m| m.len() == 64),
        "{}",
        lines[3]
    );
    let r = verify(&env, &[]);
    assert!(
        r.code == 0 && r.stdout.contains("keyed: every receipt carries an hmac"),
        "{r:?}"
    );
}

#[test]
fn a_key_made_for_a_torn_log_waits_for_the_repair() {
    // A pre-key log whose last append was torn.
    let old = shell_env();
    for _ in 0..2 {
        assert_eq!(old.tool("time", json!({})).0.code, 0);
    }
    let env = shell_env();
    rechain(&env, &old.receipt_lines(), |_| Mac::Strip);
    let whole = log_bytes(&env);
    let log = env.state.join("tool_receipts.log");
    std::fs::write(&log, [whole.as_slice(), b"{\"args_hash\":\"12"].concat()).unwrap();
    // init sets up the rest and names the problem; no key is made.
    let r = env.run(&["init", "--workspace", env.ws.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("(not created: ") && r.stdout.contains("torn line"),
        "{r:?}"
    );
    let key = env.state.join("receipt.key");
    assert!(!key.exists());
    // A run cannot record its call either, so it does not run it.
    let r = tool_refused(&env, "time", json!({}));
    assert!(r.stderr.contains("receipt repair"), "{r:?}");
    assert!(!key.exists());
    // The repair (unkeyed, as the log is) ends it; the next run keys.
    assert_eq!(env.run(&["receipt", "repair"]).code, 0);
    assert_eq!(env.tool("time", json!({})).0.code, 0);
    assert!(key.exists());
    assert_eq!(
        statuses(&env),
        ["allowed", "allowed", "repaired", "keyed", "allowed"]
    );
    let r = verify(&env, &[]);
    assert!(
        r.code == 0
            && r.stdout
                .contains("keyed: receipts 1–3 were written before the receipt key"),
        "{r:?}"
    );
}
