//! What a build without some of its features does, on the real binary
//! (README, "Builds and features"): `--version` names the features built;
//! a command or a tool left out stays known and is refused, saying how to
//! get it; https without `tls` is refused before anything connects. The
//! tests marked `#[cfg(not(feature = …))]` run in `cargo test
//! --no-default-features` (`make test` runs both builds).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::Env;
use serde_json::json;

/// The features as `--version` lists them, from what this test was built with.
fn built() -> Vec<&'static str> {
    [
        ("gateway", cfg!(feature = "gateway")),
        ("pdf", cfg!(feature = "pdf")),
        ("lineedit", cfg!(feature = "lineedit")),
        ("tls", cfg!(feature = "tls")),
        ("mcp", cfg!(feature = "mcp")),
        ("plugins", cfg!(feature = "plugins")),
        ("sop", cfg!(feature = "sop")),
        ("plan", cfg!(feature = "plan")),
        ("code", cfg!(feature = "code")),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| n)
    .collect()
}

#[test]
fn version_names_the_features_built() {
    let env = Env::new();
    let r = env.run(&["--version"]);
    assert_eq!(r.code, 0, "{r:?}");
    let features = match built() {
        none if none.is_empty() => "none (minimal build)".to_string(),
        some => some.join(", "),
    };
    assert_eq!(
        r.stdout,
        format!(
            "latchclaw {}\nfeatures: {features}\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    env.config("");
    let (r, v) = env.json(&["policy", "show", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["features"], json!(built()), "{v}");
}

#[test]
fn help_marks_exactly_the_commands_not_built() {
    let env = Env::new();
    let top = env.run(&["--help"]);
    assert_eq!(top.code, 0, "{top:?}");
    let marked: Vec<&str> = top
        .stdout
        .lines()
        .filter(|l| l.ends_with("(not in this build)"))
        .collect();
    // gateway, gateway token and the five service commands; the four mcp,
    // the five plugin and the eight sop commands.
    let groups = [
        (["gateway", "service"], 7, cfg!(feature = "gateway")),
        (["mcp", "mcp"], 4, cfg!(feature = "mcp")),
        (["plugin", "plugin"], 5, cfg!(feature = "plugins")),
        (["sop", "sop"], 8, cfg!(feature = "sop")),
    ];
    let want: usize = groups.iter().filter(|g| !g.2).map(|g| g.1).sum();
    assert_eq!(marked.len(), want, "{}", top.stdout);
    for l in &marked {
        let first = l.split_whitespace().next().unwrap_or("");
        assert!(groups.iter().any(|g| !g.2 && g.0.contains(&first)), "{l}");
    }
    for words in [&["help", "gateway"][..], &["service", "install", "--help"]] {
        let r = env.run(words);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(
            r.stdout
                .contains("Not in this build: latchclaw was built without the feature `gateway`"),
            !cfg!(feature = "gateway"),
            "{r:?}"
        );
    }
    let r = env.run(&["service", "--help"]);
    assert_eq!(
        r.stdout.matches("(not in this build)").count(),
        if cfg!(feature = "gateway") { 0 } else { 5 },
        "{r:?}"
    );
}

/// Every `gateway` and `service` command: known, its options checked as
/// ever, then refused with exit 2, touching nothing.
#[cfg(not(feature = "gateway"))]
#[test]
fn gateway_and_service_commands_are_refused_with_how_to_get_them() {
    let env = Env::new();
    env.config("");
    for (words, path) in [
        (&["gateway"][..], "gateway"),
        (&["gateway", "--bind", "127.0.0.1:0"], "gateway"),
        (&["gateway", "token"], "gateway token"),
        (&["gateway", "token", "--rotate"], "gateway token"),
        (&["service", "install", "--print"], "service install"),
        (&["service", "start"], "service start"),
        (&["service", "stop"], "service stop"),
        (&["service", "status"], "service status"),
        (&["service", "uninstall"], "service uninstall"),
    ] {
        let r = env.run(words);
        assert_eq!(r.code, 2, "{words:?}: {r:?}");
        assert_eq!(r.stdout, "", "{words:?}");
        assert!(
            r.stderr.contains(&format!(
                "`latchclaw {path}` is not in this build: latchclaw was built without the feature \
                 `gateway`; rebuild with default features"
            )) && r.stderr.contains("--features gateway"),
            "{words:?}: {r:?}"
        );
    }
    assert!(!env.state.join("gateway.token").exists());
    // A mistake in the options is still named as one.
    let r = env.run(&["gateway", "--rotate"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("does not take --rotate"), "{r:?}");
}

/// Every `mcp` and `plugin` command of a build without the feature: known,
/// checked, refused with exit 2, touching nothing. A config with MCP
/// servers and a plugin tool's section still loads and runs; no such tool
/// is offered.
#[cfg(not(any(feature = "mcp", feature = "plugins")))]
#[test]
fn mcp_and_plugin_commands_are_refused_and_their_config_still_loads() {
    let env = Env::new();
    env.config("[mcp.servers.git]\ncommand = \"/bin/false\"\n\n[tools.\"echo\"]\nenabled = true\n");
    let echo = common::fixture("plugins/echo");
    let echo = echo.to_str().unwrap();
    for (words, path, feature) in [
        (&["mcp", "list"][..], "mcp list", "mcp"),
        (&["mcp", "tools", "git"], "mcp tools", "mcp"),
        (&["mcp", "test", "git"], "mcp test", "mcp"),
        (&["mcp", "approve", "git"], "mcp approve", "mcp"),
        (&["plugin", "list"], "plugin list", "plugins"),
        (&["plugin", "install", echo], "plugin install", "plugins"),
        (&["plugin", "show", "echo"], "plugin show", "plugins"),
        (&["plugin", "approve", "echo"], "plugin approve", "plugins"),
        (&["plugin", "remove", "echo"], "plugin remove", "plugins"),
    ] {
        let r = env.run(words);
        assert_eq!(r.code, 2, "{words:?}: {r:?}");
        assert_eq!(r.stdout, "", "{words:?}");
        assert!(
            r.stderr
                .contains(&format!("`latchclaw {path}` is not in this build"))
                && r.stderr.contains(&format!("--features {feature}")),
            "{words:?}: {r:?}"
        );
    }
    assert!(!env.state.join("plugins").exists(), "nothing installed");
    assert!(!env.state.join("pins").exists(), "nothing approved");
    // The options are still checked first.
    let r = env.run(&["mcp", "list", "--bogus"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--bogus"), "{r:?}");
    assert_eq!(env.run(&["config", "validate"]).code, 0);
    let (r, v) = env.json(&["tool", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"echo"), "{names:?}");
    // The model is offered what a config without them offers.
    let plain = Env::new();
    let mut offered = Vec::new();
    for (e, extra) in [
        (&env, "[mcp.servers.git]\ncommand = \"/bin/false\"\n"),
        (&plain, ""),
    ] {
        e.mock("hello.toml", "", extra);
        let r = e.run(&["agent", "-m", "hi"]);
        assert_eq!(r.code, 0, "{r:?}");
        offered.push(e.requests()[0]["request"]["tools"].clone());
    }
    assert!(offered[0].is_array(), "{offered:?}");
    assert_eq!(offered[0], offered[1]);
}

/// The tools this build lacks (those of the features left out).
#[cfg(not(feature = "pdf"))]
fn not_built_tools() -> Vec<&'static str> {
    let mut out = Vec::new();
    if !cfg!(feature = "pdf") {
        out.push("pdf_extract");
    }
    if !cfg!(feature = "plan") {
        out.push("plan");
    }
    if !cfg!(feature = "code") {
        out.extend(["code_run", "code_status"]);
    }
    out
}

/// `plan`, `code_run` and `code_status` in a build without their features,
/// enabled by the config: listed as not built, offered to no model, refused
/// by `tool run` (exit 2, no receipt) and by the gate; the `sop` commands
/// refused like any command not built, the config still loading.
#[cfg(not(any(feature = "plan", feature = "code", feature = "sop")))]
#[test]
fn plan_code_and_sop_are_refused_and_their_config_still_loads() {
    let env = Env::new();
    env.config(
        "[security]\nautonomy = \"full\"\n[tools.plan]\nenabled = true\n\
         [tools.code_run]\nenabled = true\n",
    );
    let (r, v) = env.json(&["tool", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    for (tool, args, feature) in [
        ("plan", json!({"tasks": []}), "plan"),
        (
            "code_run",
            json!({"language": "python", "code": "print(1)"}),
            "code",
        ),
        ("code_status", json!({"id": "x"}), "code"),
    ] {
        let row = v.as_array().unwrap().iter().find(|t| t["name"] == tool);
        assert_eq!(row.unwrap()["built"], json!(false), "{tool}: {v}");
        let r = env.run(&["tool", "run", tool, "--json", &args.to_string()]);
        assert_eq!(r.code, 2, "{tool}: {r:?}");
        assert!(
            r.stderr
                .contains(&format!("tool \"{tool}\" is not in this build"))
                && r.stderr.contains(&format!("--features {feature}")),
            "{tool}: {r:?}"
        );
        let (r, d) = env.json(&["policy", "check", tool, "--json", &args.to_string()]);
        assert_eq!((r.code, &d["decision"]), (0, &json!("deny")), "{tool}: {d}");
    }
    assert!(env.receipt_lines().is_empty());
    let (_, p) = env.json(&["policy", "show", "--json"]);
    let enabled = p["tools_enabled"].to_string();
    assert!(
        !enabled.contains("\"plan\"") && !enabled.contains("code_run"),
        "{enabled}"
    );
    for words in [&["sop", "list"][..], &["sop", "run", "x"], &["sop", "runs"]] {
        let r = env.run(words);
        assert_eq!(r.code, 2, "{words:?}: {r:?}");
        assert!(
            r.stderr.contains("is not in this build") && r.stderr.contains("--features sop"),
            "{words:?}: {r:?}"
        );
    }
    assert_eq!(env.run(&["config", "validate"]).code, 0);
}

/// A config asking for `pdf_extract` still loads; the tool is listed as not
/// built, offered to no model, refused by `tool run` (exit 2, no receipt),
/// by the gate and when a model calls it anyway.
#[cfg(not(feature = "pdf"))]
#[test]
fn pdf_extract_is_listed_as_not_built_and_refused_everywhere() {
    let env = Env::new();
    std::fs::write(env.ws.join("a.pdf"), "%PDF-1.4\n").unwrap();
    let fixture = env.root.join("pdf.toml");
    std::fs::write(
        &fixture,
        "[[script]]\n[[script.responses]]\n\
         tool_calls = [{ name = \"pdf_extract\", arguments = { path = \"a.pdf\" } }]\n\
         [[script.responses]]\ntext = \"got: {{tool_results}}\"\n",
    )
    .unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[providers.models.m]\nkind = \"mock\"\nfixture = {}\n\
         record_requests = {}\n[security]\nautonomy = \"full\"\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_read\", \"pdf_extract\"]\n\
         [tools.pdf_extract]\nenabled = true\n",
        common::lit(&fixture),
        common::lit(&env.root.join("requests.jsonl"))
    ));
    let not_built = "tool \"pdf_extract\" is not in this build: latchclaw was built without the \
                     feature `pdf`";

    let (r, v) = env.json(&["tool", "list", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rows = v.as_array().unwrap();
    let pdf = rows.iter().find(|t| t["name"] == "pdf_extract").unwrap();
    assert_eq!(
        (&pdf["built"], &pdf["enabled"]),
        (&json!(false), &json!(false))
    );
    assert!(
        rows.iter()
            .filter(|t| t["built"] == false)
            .all(|t| not_built_tools().contains(&t["name"].as_str().unwrap()))
    );
    let r = env.run(&["tool", "list"]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("pdf_extract"))
        .unwrap();
    assert!(line.contains("  not built  "), "{r:?}");
    let (_, v) = env.json(&["policy", "show", "--json"]);
    assert_eq!(v["tools_enabled"], json!(["time", "file_read"]), "{v}");

    let r = env.run(&[
        "tool",
        "run",
        "pdf_extract",
        "--json",
        "{\"path\": \"a.pdf\"}",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains(not_built), "{r:?}");
    assert!(env.receipt_lines().is_empty());

    let (r, v) = env.json(&[
        "policy",
        "check",
        "pdf_extract",
        "--json",
        "{\"path\": \"a.pdf\"}",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["decision"], "deny", "{v}");
    assert!(v["reason"].as_str().unwrap().contains(not_built), "{v}");

    // A model that names it anyway gets a failed call it can read, in the
    // one repair note; this mock then answers with the note's own words,
    // which is no answer (exit 3), never the note shown as one.
    let r = env.run(&["agent", "-m", "read a.pdf"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(!r.stdout.contains("did not run"), "{r:?}");
    let requests = env.requests();
    let repair = requests[1]["request"].to_string();
    assert!(repair.contains(&not_built.replace('"', "\\\"")), "{repair}");
    let req = &requests[0]["request"];
    let offered: Vec<&str> = req["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().or(t["name"].as_str()))
        .collect();
    assert!(
        offered.contains(&"time") && !offered.contains(&"pdf_extract"),
        "{offered:?}"
    );
    let receipts = env.receipts();
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(
        (&receipts[0]["tool"], &receipts[0]["status"]),
        (&json!("pdf_extract"), &json!("failed"))
    );
}

/// An https provider: refused before the turn, naming the key (exit 2).
#[cfg(not(feature = "tls"))]
#[test]
fn an_https_provider_is_a_config_error_without_tls() {
    let env = Env::new();
    env.config(
        "default_provider = \"cloud\"\n[providers.models.cloud]\nkind = \"openai-compatible\"\n\
         base_url = \"https://127.0.0.1:9/v1\"\nmodel = \"m\"\n",
    );
    for args in [&["agent", "-m", "hi"][..], &["provider", "test", "cloud"]] {
        let r = env.run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(
                "providers.models.cloud.base_url = \"https://127.0.0.1:9/v1\": this latchclaw \
                 was built without TLS (feature `tls`); use http:// to a local server or \
                 rebuild with default features"
            ),
            "{args:?}: {r:?}"
        );
    }
    let (r, v) = env.json(&["agent", "--json", "-m", "hi"]);
    assert_eq!((r.code, &v["exit_reason"]), (2, &json!("usage")), "{r:?}");
}

/// The http tool: an https URL, first or by a redirect, fails with the
/// reason and connects nowhere; web_search on an https URL likewise.
#[cfg(not(feature = "tls"))]
#[test]
fn https_urls_fail_in_the_tools_without_connecting() {
    use fake_server::{FakeServer, Reply};
    use std::net::TcpListener;
    let no_tls = "this latchclaw was built without TLS (feature `tls`)";
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let tls_port = listener.local_addr().unwrap().port();
    let https = format!("https://127.0.0.1:{tls_port}/");
    let server = FakeServer::start(vec![Reply::json(302, "").header("Location", &https)]);
    let env = Env::new();
    env.config(&format!(
        "[channels.cli]\ntools_allow = [\"http\", \"web_search\"]\n\
         [tools.http]\nallowed_domains = [\"127.0.0.1\"]\nallow_private = [\"127.0.0.1\"]\n\
         [tools.web_search]\nprovider = \"searxng\"\nurl = \"https://127.0.0.1:{tls_port}/searx\"\n"
    ));
    let run = |tool: &str, args: serde_json::Value| {
        env.json(&["tool", "run", tool, "--json", &args.to_string()])
    };
    let (r, v) = run("http", json!({"url": https}));
    assert_eq!((r.code, &v["status"]), (3, &json!("failed")), "{r:?}");
    assert!(v["error"].as_str().unwrap().contains(no_tls), "{v}");
    let (r, v) = run("http", json!({"url": format!("{}/moved", server.url())}));
    assert_eq!(r.code, 3, "{r:?}");
    let error = v["error"].as_str().unwrap();
    assert!(error.contains(&https) && error.contains(no_tls), "{v}");
    assert_eq!(server.requests().len(), 1);
    let (r, v) = run("web_search", json!({"query": "x"}));
    assert_eq!(r.code, 3, "{r:?}");
    assert!(v["error"].as_str().unwrap().contains(no_tls), "{v}");
    assert!(
        listener.accept().is_err(),
        "nothing connected to the https port"
    );
}
