//! `onboard`: interactive on a terminal, or entirely from flags.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/pty.rs"]
mod pty;

use common::Env;
use pty::Pty;

#[test]
fn onboard_from_flags_writes_a_valid_config() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let ws = env.root.join("work space");
    let r = env.run(&[
        "onboard",
        "--provider",
        "openai-compatible",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--model",
        "qwen2.5",
        "--api-key-env",
        "MY_LLM_KEY",
        "--autonomy",
        "full",
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("export MY_LLM_KEY="), "{r:?}");
    assert!(ws.is_dir());
    assert_eq!(env.run(&["config", "validate"]).code, 0);
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(c["default_provider"], "openai_compatible");
    assert_eq!(c["security"]["autonomy"], "full");
    let p = &c["providers"]["models"]["openai_compatible"];
    assert_eq!(
        (p["base_url"].as_str(), p["model"].as_str()),
        (Some("http://127.0.0.1:9/v1"), Some("qwen2.5"))
    );
    assert_eq!(p["api_key_env"], "MY_LLM_KEY");
    // An existing config is not replaced without --force.
    let r = env.run(&["onboard", "--yes"]);
    assert!(r.code == 2 && r.stderr.contains("--force"), "{r:?}");
    // Bad answers are refused before anything is written.
    let r = env.run(&["onboard", "--force", "--autonomy", "godmode"]);
    assert!(
        r.code == 2 && r.stderr.contains("readonly, supervised, full"),
        "{r:?}"
    );
    let r = env.run(&[
        "onboard",
        "--force",
        "--provider",
        "openai-compatible",
        "--base-url",
        "ftp://x",
    ]);
    assert!(r.code == 2 && r.stderr.contains("base_url"), "{r:?}");
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(
        c["security"]["autonomy"], "full",
        "the old config is intact"
    );
}

#[test]
fn onboard_asks_on_a_terminal() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let ws = env.root.join("ws2");
    let mut p = Pty::spawn(&env, &["onboard"]);
    p.expect("Provider (mock or openai-compatible) [mock]: ");
    p.send("openai-compatible\n");
    p.expect("Server URL");
    p.send("http://localhost:8080/v1\n");
    p.expect("Model [local-model]: ");
    p.send("\n");
    p.expect("API key (- for none)");
    p.send("-\n");
    p.expect("Autonomy");
    p.send("readonly\n");
    p.expect("Workspace directory");
    p.send(&format!("{}\n", ws.display()));
    p.expect("next: latchclaw provider test   (one request to openai_compatible at http");
    assert_eq!(p.wait(), Some(0));
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(c["security"]["autonomy"], "readonly");
    let prov = &c["providers"]["models"]["openai_compatible"];
    assert_eq!(prov["model"], "local-model");
    assert!(prov.get("api_key_env").is_none(), "no key variable: {prov}");
    assert_eq!(c["workspace_dir"], ws.display().to_string());
}

#[test]
fn onboard_asks_again_after_a_bad_answer() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let ws = env.root.join("ws-b2");
    let mut p = Pty::spawn(&env, &["onboard"]);
    p.expect("Provider (mock or openai-compatible) [mock]: ");
    p.send("gpt-b2\n");
    p.expect("provider \"gpt-b2\" is not offered here; allowed values: mock, openai-compatible; try again");
    p.expect("Provider (mock or openai-compatible) [mock]: ");
    p.send("openai-compatible\n");
    p.expect("Server URL (…/v1) [http://localhost:1234/v1]: ");
    p.send("ftp://b2.example\n");
    p.expect("must start with http:// or https://");
    p.expect("Server URL");
    p.send("http://127.0.0.1:8099/v1\n");
    p.expect("Model [local-model]: ");
    p.send("b2-model\n");
    // A local server: the default is no key.
    p.expect("API key (- for none) [-]: ");
    p.send("not a name\n");
    p.expect("is not an environment variable name");
    p.expect("API key (- for none) [-]: ");
    p.send("\n");
    p.expect("Autonomy (readonly, supervised, full) [supervised]: ");
    p.send("godmode\n");
    p.expect("allowed values: readonly, supervised, full; try again");
    p.expect("Autonomy");
    p.send("full\n");
    p.expect("Workspace directory");
    p.send(&format!("{}\n", ws.display()));
    p.expect("next: latchclaw provider test   (one request to openai_compatible at http");
    let t = p.transcript();
    assert_eq!(p.wait(), Some(0));
    assert!(!t.contains("export "), "no key to export: {t}");
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(c["security"]["autonomy"], "full");
    let prov = &c["providers"]["models"]["openai_compatible"];
    assert_eq!(prov["base_url"], "http://127.0.0.1:8099/v1");
    assert_eq!(prov["model"], "b2-model");
    assert!(prov.get("api_key_env").is_none(), "{prov}");
    assert_eq!(c["workspace_dir"], ws.display().to_string());
}

#[test]
fn onboard_gives_up_at_end_of_input_without_writing() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let mut p = Pty::spawn(&env, &["onboard"]);
    p.expect("Provider (mock or openai-compatible) [mock]: ");
    p.send("nope-b2\n");
    p.expect("try again");
    p.send("\u{4}");
    p.expect("setup cancelled");
    assert_eq!(p.wait(), Some(2));
    assert!(!env.state.join("config.toml").exists());
}

#[test]
fn a_local_base_url_needs_no_key_and_a_remote_one_does() {
    for (url, key) in [
        ("http://localhost:8080/v1", None),
        ("http://127.0.0.1:8080/v1", None),
        ("http://[::1]:8080/v1", None),
        ("https://api.b2.example/v1", Some("OPENAI_API_KEY")),
        ("http://localhost.b2.example/v1", Some("OPENAI_API_KEY")),
    ] {
        let env = Env::new();
        std::fs::remove_dir_all(&env.state).unwrap();
        let r = env.run_env(
            &[
                "onboard",
                "--yes",
                "--provider",
                "openai-compatible",
                "--base-url",
                url,
            ],
            &[("OPENAI_API_KEY", "")],
        );
        assert_eq!(r.code, 0, "{url}: {r:?}");
        let (_, c) = env.json(&["config", "show", "--json"]);
        let prov = &c["providers"]["models"]["openai_compatible"];
        assert_eq!(prov["api_key_env"].as_str(), key, "{url}: {prov}");
        assert_eq!(
            r.stdout.contains("export OPENAI_API_KEY="),
            key.is_some(),
            "{url}: {r:?}"
        );
    }
    // init writes no key variable either: its server is localhost.
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let r = env.run_env(&["init"], &[("OPENAI_API_KEY", "")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!r.stdout.contains("export"), "{r:?}");
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert!(
        c["providers"]["models"]["openai_compatible"]
            .get("api_key_env")
            .is_none()
    );
}

#[test]
fn config_show_prints_a_config_that_validates_and_loads_the_same() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let r = env.run(&[
        "onboard",
        "--yes",
        "--provider",
        "openai-compatible",
        "--base-url",
        "https://api.b2.example/v1",
        "--api-key-env",
        "B2_KEY",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let shown = env.run(&["config", "show"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown
            .stdout
            .contains("# openai_compatible: B2_KEY is not set"),
        "{shown:?}"
    );
    let copy = env.root.join("shown-b2.toml");
    std::fs::write(&copy, &shown.stdout).unwrap();
    let copy = copy.to_str().unwrap();
    let r = env.run(&["--config", copy, "config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: "), "{r:?}");
    let (_, original) = env.json(&["config", "show", "--json"]);
    let (_, reloaded) = env.json(&["--config", copy, "config", "show", "--json"]);
    assert_eq!(original, reloaded);
    // Showing it again gives the same config: a fixed point.
    let again = env.run(&["--config", copy, "config", "show"]);
    let body = |s: &str| s.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&again.stdout), body(&shown.stdout));
}

#[test]
fn init_workspace_on_an_existing_config_says_what_it_did() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let first = env.root.join("ws-b2-first");
    let other = env.root.join("ws-b2-other");
    let r = env.run(&["init", "--workspace", first.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("(created)") && !r.stdout.contains("unchanged"),
        "{r:?}"
    );
    let before = std::fs::read_to_string(env.state.join("config.toml")).unwrap();

    let r = env.run(&["init", "--workspace", first.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "workspace  {} (unchanged: already the config's workspace)",
            first.display()
        )),
        "{r:?}"
    );

    let r = env.run(&["init", "--workspace", other.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "workspace  {} (unchanged: the existing config's; --workspace {} was not applied",
            first.display(),
            other.display()
        )),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(env.state.join("config.toml")).unwrap(),
        before
    );
    assert!(!other.exists());

    // --force applies it.
    let r = env.run(&["init", "--force", "--workspace", other.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("(overwritten)") && !r.stdout.contains("unchanged"),
        "{r:?}"
    );
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(c["workspace_dir"], other.display().to_string());
}

/// `init` ends on `provider test`, which tests the default provider (the
/// built-in `mock`) when no name is given; nothing about the empty workspace.
#[test]
fn init_suggests_provider_test_on_the_builtin_mock() {
    let env = Env::new();
    std::fs::remove_dir_all(&env.state).unwrap();
    let r = env.run(&["init"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .contains("next: latchclaw provider test   (one request to mock, model mock)"),
        "{r:?}"
    );
    assert!(
        r.stdout.contains("a real model: latchclaw onboard --force"),
        "{r:?}"
    );
    assert!(!r.stdout.contains("What files"), "{r:?}");
    let text = std::fs::read_to_string(env.state.join("config.toml")).unwrap();
    assert!(
        text.contains("default_provider = \"mock\"") && text.contains("[providers.models.mock]"),
        "{text}"
    );
    assert!(!text.contains("local\""), "{text}");
    let r = env.run(&["provider", "test"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("provider mock (mock, model mock)"),
        "{r:?}"
    );
    let (_, rows) = env.json(&["provider", "list", "--json"]);
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mock", "openai_compatible"]);
}

/// A config written when the mock was called `local` keeps working: the old
/// name means `mock`, with one note per place it appears (none under -q).
#[test]
fn the_old_mock_name_local_still_works_with_a_note() {
    let env = Env::new();
    env.config(
        "default_provider = \"local\"\n[providers.models.fb]\nkind = \"reliable\"\n\
         providers = [\"local\"]\n",
    );
    let r = env.run(&["agent", "-m", "hello"]);
    assert_eq!(r.code, 0, "{r:?}");
    let notes: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("latchclaw: note: "))
        .collect();
    assert_eq!(notes.len(), 2, "{r:?}");
    assert!(
        notes[0]
            .contains("config.toml: providers.models.fb.providers[0]: \"local\" is the old name")
            && notes[1].contains("config.toml: default_provider: \"local\" is the old name")
            && notes[1].ends_with("now \"mock\"; it still works, write \"mock\" instead"),
        "{r:?}"
    );
    let r = env.run(&["agent", "-q", "-m", "hello"]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{r:?}");
    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("default \"mock\""), "{r:?}");
    assert!(r.stderr.contains("default_provider: \"local\""), "{r:?}");

    // On the command line too, where the config no longer says it.
    env.config("");
    for args in [
        &["agent", "--provider", "local", "-m", "hello"][..],
        &["provider", "test", "local"][..],
    ] {
        let r = env.run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(
                "latchclaw: note: \"local\" is the old name of the built-in mock provider"
            ),
            "{args:?}: {r:?}"
        );
    }
    // A config with its own `local` means that one, and says nothing.
    env.config(
        "default_provider = \"local\"\n[providers.models.local]\nkind = \"mock\"\nmodel = \"mine\"\n",
    );
    let r = env.run(&["provider", "test"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("provider local (mock, model mine)"),
        "{r:?}"
    );
    assert!(!r.stderr.contains("note"), "{r:?}");
}
