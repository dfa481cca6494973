//! The `plan` tool is not implemented yet: never offered to a model, and
//! every call of it refused as such, through `tool run`, `policy check`
//! and an agent turn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Env;
use serde_json::json;

#[test]
fn every_plan_call_is_refused_as_not_implemented() {
    let env = Env::new();
    env.mock(
        "plan_call.toml",
        "",
        "[security]\nautonomy = \"full\"\n[tools.plan]\nenabled = true\n",
    );
    let args =
        json!({"tasks": [{"title": "a", "purpose": "b", "instructions": "c", "evaluation": "d"}]});
    let (r, v) = env.json(&["policy", "check", "plan", "--json", &args.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["decision"], "deny");
    assert_eq!(v["refusal"], "unavailable");
    assert!(
        v["reason"].as_str().unwrap().contains("not implemented"),
        "{v}"
    );
    let (r, v) = env.tool("plan", args);
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(v["status"], "denied");

    // Enabled in the config, it is still not offered; a model that calls
    // it anyway reads why.
    let r = env.run(&["agent", "-m", "plan it"]);
    assert_eq!(r.code, 4, "{r:?}");
    let requests = env.requests();
    let tools: Vec<&str> = requests[0]["request"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!tools.contains(&"plan"), "{tools:?}");
    assert!(requests[1].to_string().contains("not implemented"));
    let last = env.receipts().pop().unwrap();
    assert_eq!(
        (last["tool"].as_str(), last["status"].as_str()),
        (Some("plan"), Some("denied"))
    );
}
