//! The MCP client's figures against the fake server of the tests
//! (`fixtures/mcp/hostile.py ok`, python in the sandbox): a server's start
//! (spawn in the sandbox, `initialize`, `tools/list`), and a `tools/call`
//! round trip through `latchclaw::mcp::Server::call`: JSON-RPC over the
//! child's stdin and stdout, the reader and writer threads, the result's
//! content made text. The server's own time for `echo` is a JSON parse
//! and a write (tens of µs in python); not yet judged or receipted (the
//! integration adds those).

use super::{Report, percentile};
use latchclaw::config::{Autonomy, Config};
use latchclaw::mcp::{Launch, Server};
use latchclaw::security::redact::Redactor;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const STARTS: usize = 10;
const CALLS: usize = 2000;

pub fn figures(report: &mut Report, root: &Path, ws: &Path) {
    if !Path::new("/usr/bin/python3").is_file() {
        report
            .notes
            .push("mcp: no /usr/bin/python3, no MCP figures".into());
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp");
    let text = format!(
        "workspace_dir = {:?}\n[mcp.servers.fake]\ncommand = \"/usr/bin/python3\"\n\
         args = [{:?}, \"ok\"]\nread_paths = [{:?}]\n",
        ws.display().to_string(),
        fixtures.join("hostile.py").display().to_string(),
        fixtures.display().to_string()
    );
    let cfg = Config::from_text(&text, &root.join("mcp.toml"), root.join(".latchclaw")).unwrap();
    let launch = Launch {
        cfg: &cfg,
        workspace: ws,
        autonomy: Autonomy::Supervised,
        redactor: Arc::new(Redactor::new()),
    };
    let server = &cfg.mcp.servers["fake"];
    let start = || Server::start(server, &launch, Instant::now() + Duration::from_secs(30));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (mut total, mut spawn, mut init) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..STARTS {
        let t = Instant::now();
        let s = match start() {
            Ok(s) => s,
            Err(e) => {
                report
                    .notes
                    .push(format!("mcp: the fake server did not start: {e}"));
                return;
            }
        };
        total.push(ms(t.elapsed()));
        spawn.push(ms(s.timings.spawn));
        init.push(ms(s.timings.initialize + s.timings.list));
        s.stop();
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        percentile(v, 50)
    };
    report.row(
        "MCP server start, fake (python), median",
        format!("{:.1} ms", med(&mut total)),
        "reported",
        None,
    );
    report.row(
        "  spawn in the sandbox / initialize+tools/list",
        format!("{:.1} / {:.1} ms", med(&mut spawn), med(&mut init)),
        "reported",
        None,
    );
    real_starts(report, root, ws);
    let mut s = start().unwrap();
    let never = || false;
    let args = json!({"text": "hello"});
    for _ in 0..50 {
        s.call(
            "echo",
            &args,
            Instant::now() + Duration::from_secs(10),
            &never,
        )
        .unwrap();
    }
    let mut rt = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let r = s
            .call("echo", &args, t + Duration::from_secs(10), &never)
            .unwrap();
        rt.push(ms(t.elapsed()));
        std::hint::black_box(r);
    }
    let mut pings = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        pings.push(ms(s
            .ping(Instant::now() + Duration::from_secs(10))
            .unwrap()));
    }
    s.stop();
    rt.sort_by(|a, b| a.total_cmp(b));
    pings.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (percentile(&rt, 50), percentile(&rt, 99));
    report.row(
        format!("MCP tools/call round trip, fake echo ({CALLS} calls), p50 / p99"),
        format!("{p50:.3} / {p99:.3} ms"),
        "≤ 2 ms (p50)",
        Some(p50 <= 2.0),
    );
    report.row(
        "MCP ping round trip, p50 / p99",
        format!(
            "{:.3} / {:.3} ms",
            percentile(&pings, 50),
            percentile(&pings, 99)
        ),
        "reported",
        None,
    );
}

/// Where `scripts/mcp-servers.sh` installs (as tests/mcp_real.rs finds it).
fn cache() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(c) = std::env::var_os("LATCHCLAW_MCP_CACHE").filter(|c| !c.is_empty()) {
        return PathBuf::from(c);
    }
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        })
        .join("latchclaw/mcp-servers")
}

/// The start of two real servers, when installed: PyPI's mcp-server-time
/// (python) and npm's server-everything (node); median of three.
fn real_starts(report: &mut Report, root: &Path, ws: &Path) {
    let c = cache();
    let everything =
        c.join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let servers = [
        (
            "mcp-server-time (PyPI, python)",
            c.join("py/bin/mcp-server-time"),
            format!(
                "command = \"mcp-server-time\"\nread_paths = [{:?}]\n",
                c.join("py").display().to_string()
            ),
        ),
        (
            "server-everything (npm, node)",
            everything.clone(),
            format!(
                "command = \"/usr/bin/node\"\nargs = [{:?}, \"stdio\"]\nread_paths = [{:?}]\n",
                everything.display().to_string(),
                c.join("npm").display().to_string()
            ),
        ),
    ];
    for (label, needs, table) in servers {
        if !needs.exists() {
            report.notes.push(format!(
                "mcp: {label} not installed (scripts/mcp-servers.sh), not timed"
            ));
            continue;
        }
        let text = format!(
            "workspace_dir = {:?}\n[mcp.servers.real]\n{table}",
            ws.display().to_string()
        );
        let cfg =
            Config::from_text(&text, &root.join("mcp.toml"), root.join(".latchclaw")).unwrap();
        let launch = Launch {
            cfg: &cfg,
            workspace: ws,
            autonomy: Autonomy::Supervised,
            redactor: Arc::new(Redactor::new()),
        };
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            match Server::start(
                &cfg.mcp.servers["real"],
                &launch,
                t + Duration::from_secs(60),
            ) {
                Ok(s) => {
                    times.push(t.elapsed().as_secs_f64() * 1000.0);
                    s.stop();
                }
                Err(e) => {
                    report
                        .notes
                        .push(format!("mcp: {label} did not start: {e}"));
                    break;
                }
            }
        }
        if !times.is_empty() {
            report.row(
                format!("MCP server start, {label}, median"),
                format!("{:.0} ms", percentile(&times, 50)),
                "reported",
                None,
            );
        }
    }
}

/// Per-call cost of external tools in an agent turn on the mock: a turn
/// whose one round makes 20 calls against one making 1, interleaved, the
/// difference over 19 — each call validated, judged, its started and
/// outcome receipts appended (fsync'd), run, redacted and stored with the
/// round. For the fake MCP server's `echo` (the server started once per
/// turn, so not in the difference), the seed's echo plugin (a process in
/// the sandbox per call) and the built-in `file_list`, for reference.
pub fn turn_figures(report: &mut Report, root: &Path, ws: &Path) {
    if !Path::new("/usr/bin/python3").is_file() {
        return;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = here.join("fixtures/mcp");
    let rows = [
        (
            "MCP tool (fake server's echo)",
            "mcp_fake_echo",
            true,
            "≤ 2 ms",
        ),
        (
            "MCP tool (fake server's echo)",
            "mcp_fake_echo",
            false,
            "reported",
        ),
        ("plugin tool (the echo plugin)", "echo", true, "reported"),
        (
            "built-in `file_list`, for reference",
            "file_list",
            true,
            "reported",
        ),
    ];
    for (label, tool, receipts, budget) in rows {
        // Each call's arguments differ from the last: a repeat of the last
        // call is answered from its result, not run.
        let calls = |n: usize| {
            (0..n)
                .map(|i| match tool {
                    "file_list" if i % 2 == 0 => {
                        format!("{{ name = \"{tool}\", arguments = {{}} }}")
                    }
                    "file_list" => {
                        format!("{{ name = \"{tool}\", arguments = {{ path = \".\" }} }}")
                    }
                    _ => format!("{{ name = \"{tool}\", arguments = {{ text = \"hi {i}\" }} }}"),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let script = root.join(format!("turn-{tool}.toml"));
        std::fs::write(
            &script,
            format!(
                "[[script]]\nwhen = \"twenty\"\n[[script.responses]]\ntool_calls = [{}]\n\
                 [[script.responses]]\ntext = \"done\"\n\
                 [[script]]\n[[script.responses]]\ntool_calls = [{}]\n\
                 [[script.responses]]\ntext = \"done\"\n",
                calls(20),
                calls(1)
            ),
        )
        .unwrap();
        let home = super::setup_home(
            root,
            &format!("turn-{tool}-{receipts}"),
            &format!(
                "{}default_provider = \"m\"\n[receipts]\nenabled = {receipts}\n\
                 [providers.models.m]\nkind = \"mock\"\nfixture = {:?}\n\
                 [mcp.servers.fake]\ncommand = \"/usr/bin/python3\"\nargs = [{:?}, \"ok\"]\n\
                 read_paths = [{:?}]\nrisk = \"low\"\nread_only_tools = [\"echo\"]\n",
                super::ws_line(ws),
                script.display().to_string(),
                fixtures.join("hostile.py").display().to_string(),
                fixtures.display().to_string()
            ),
        );
        let setup = |args: &[&str]| {
            let out = super::cmd(&home, args)
                .command_for_setup()
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
        };
        setup(&["mcp", "approve", "fake"]);
        let echo = here.join("fixtures/plugins/echo");
        setup(&["plugin", "install", echo.to_str().unwrap()]);
        // Rate-limited by default like every tool; named once they exist.
        let file = home.join(".latchclaw/config.toml");
        let mut text = std::fs::read_to_string(&file).unwrap();
        for t in ["mcp_fake_echo", "echo"] {
            text.push_str(&format!(
                "\n[tools.{t}]\nrate_limit = {{ per_minute = 10000, per_hour = 1000000 }}\n"
            ));
        }
        std::fs::write(&file, text).unwrap();
        let (one, twenty) = super::measure::paired(
            &super::cmd(&home, &["agent", "-m", "one"]),
            &super::cmd(&home, &["agent", "-m", "twenty"]),
            super::RUNS,
        );
        let per = (percentile(&twenty, 50) - percentile(&one, 50)) / 19.0;
        report.row(
            format!(
                "{label}: one call in an agent turn, judged, {}",
                if receipts {
                    "receipted (fsync'd)"
                } else {
                    "receipts off"
                }
            ),
            super::ms(per),
            budget,
            (budget != "reported").then_some(per <= 2.0),
        );
    }
}
