//! The layered system prompt and `prompt show`.

mod common;

use common::{Env, lit};

fn pos(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} missing from:\n{text}"))
}

#[test]
fn layers_come_in_the_documented_order() {
    let env = Env::new();
    env.mock("by_message.toml", "", "");
    std::fs::create_dir_all(env.state.join("prompt")).unwrap();
    std::fs::write(
        env.state.join("prompt/persona.md"),
        "PERSONA: a terse librarian.",
    )
    .unwrap();
    std::fs::write(
        env.state.join("prompt/user.md"),
        "USER: prefers metric units.",
    )
    .unwrap();
    env.run(&["agent", "-m", "the Aardvark adapter needs a new cable"]);
    let r = env.run(&["prompt", "show", "-m", "what about the aardvark?"]);
    assert_eq!(r.code, 0, "{r:?}");
    let p = &r.stdout;
    let order = [
        pos(p, "You are LatchClaw"),
        pos(p, "PERSONA: a terse librarian."),
        pos(p, "USER: prefers metric units."),
        pos(p, "Notes from earlier conversations"),
        pos(p, "Tools you can call:"),
        pos(p, "Policy: autonomy is supervised"),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{p}");
    assert!(p.contains("[Aardvark] adapter"), "{p}");
    // The agent sends exactly this prompt.
    env.run(&["agent", "-m", "what about the aardvark?"]);
    let sent = env.requests().last().unwrap()["request"]["system_prompt"].clone();
    assert_eq!(sent.as_str().unwrap(), p.trim_end());
}

#[test]
fn memory_context_skips_tool_output_this_conversation_and_the_budget() {
    let env = Env::new();
    std::fs::write(env.ws.join("zebra.txt"), "zebra").unwrap();
    env.mock("file_list.toml", "", "[memory]\ncontext_bytes = 200\n");
    // A tool result mentioning zebra, and a user turn mentioning zebra.
    let (_, v) = env.json(&["agent", "-m", "list files about zebra", "--json"]);
    let conv = v["conversation_id"].as_str().unwrap();
    let r = env.run(&["prompt", "show", "-m", "zebra"]);
    assert!(r.stdout.contains("user] list files about [zebra]"), "{r:?}");
    assert!(!r.stdout.contains("tool]"), "tool output stays out: {r:?}");
    let r = env.run(&["prompt", "show", "-m", "zebra", "--conversation", conv]);
    assert!(!r.stdout.contains("Notes from earlier"), "{r:?}");
    for i in 0..10 {
        env.run(&[
            "agent",
            "-m",
            &format!("zebra note number {i} with some padding text"),
        ]);
    }
    let r = env.run(&["prompt", "show", "-m", "zebra"]);
    let notes = r
        .stdout
        .split("Notes from earlier conversations")
        .nth(1)
        .unwrap();
    let notes = notes.split("\n\n").next().unwrap();
    assert!(notes.len() <= 260, "within context_bytes: {}", notes.len());
}

#[test]
fn configured_prompt_files() {
    let env = Env::new();
    let base = env.root.join("base.md");
    std::fs::write(&base, "BASE: you are a test double.").unwrap();
    env.config(&format!("[prompt]\nbase_file = {}\n", lit(&base)));
    let r = env.run(&["prompt", "show"]);
    assert!(
        r.stdout.starts_with("BASE: you are a test double."),
        "{r:?}"
    );
    assert!(!r.stdout.contains("You are LatchClaw"));
    env.config(&format!(
        "[prompt]\npersona_file = {}\n",
        lit(&env.root.join("missing.md"))
    ));
    let r = env.run(&["agent", "-m", "hi"]);
    assert!(
        r.code == 2 && r.stderr.contains("prompt.persona_file"),
        "{r:?}"
    );
}
