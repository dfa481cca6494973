//! `onboard`: interactive on a terminal, or entirely from flags.

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
    p.expect("next: latchclaw agent");
    assert_eq!(p.wait(), Some(0));
    let (_, c) = env.json(&["config", "show", "--json"]);
    assert_eq!(c["security"]["autonomy"], "readonly");
    let prov = &c["providers"]["models"]["openai_compatible"];
    assert_eq!(prov["model"], "local-model");
    assert!(prov.get("api_key_env").is_none(), "no key variable: {prov}");
    assert_eq!(c["workspace_dir"], ws.display().to_string());
}
