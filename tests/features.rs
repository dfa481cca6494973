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
    if cfg!(feature = "gateway") {
        assert!(marked.is_empty(), "{marked:?}");
    } else {
        // gateway, gateway token, and the five service commands.
        assert_eq!(marked.len(), 7, "{}", top.stdout);
        for l in &marked {
            let w = l.trim_start();
            assert!(w.starts_with("gateway") || w.starts_with("service"), "{l}");
        }
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
            .filter(|t| t["name"] != "pdf_extract")
            .all(|t| t["built"] == true)
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
