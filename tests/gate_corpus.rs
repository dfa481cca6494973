//! The hostile corpus (`tests/hostile_corpus.jsonl`): every case goes through
//! `latchclaw policy check` on the real binary in a workspace laid out with
//! the traps the cases refer to (links out, loops, hard links, a forbidden
//! directory inside the workspace, the state dir).

mod common;

use common::{Env, lit};
use serde_json::Value;
use std::os::unix::fs::symlink;
use std::path::Path;

fn lay_out(env: &Env) -> std::path::PathBuf {
    let ws = &env.ws;
    let out = env.home.join("outside");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("secret.txt"), "TOP-SECRET").unwrap();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    std::fs::write(env.home.join(".ssh/id_rsa"), "KEY").unwrap();
    for (f, text) in [
        ("a.txt", "alpha\nfoo\n"),
        ("README.md", "# readme\n"),
        ("notes.txt", "notes sudo\n"),
        ("rm-notes.txt", "rm notes\n"),
        ("src/main.rs", "fn main() {}\n"),
        ("private/key", "k"),
        ("script.sh", "ls\n"),
        (".git/hooks/README", ""),
    ] {
        let p = ws.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    symlink(out.join("secret.txt"), ws.join("link-out")).unwrap();
    symlink(&out, ws.join("dir-out")).unwrap();
    symlink(out.join("not-yet"), ws.join("dangling")).unwrap();
    symlink("loop-b", ws.join("loop-a")).unwrap();
    symlink("loop-a", ws.join("loop-b")).unwrap();
    symlink("/etc", ws.join("etc-link")).unwrap();
    std::fs::hard_link(out.join("secret.txt"), ws.join("hard")).unwrap();
    env.config(&format!(
        "file_write_max_bytes = 65536\n[security]\nforbidden_paths = [\"/etc\", \"/sys\", \"/boot\", \"/proc\", \"/dev\", \"/root\", \"~/.ssh\", {}]\n\
         [channels.cli]\ntools_allow = [\"time\", \"file_list\", \"file_read\", \"file_write\", \"shell\", \"memory_search\"]\n",
        lit(&ws.join("private"))
    ));
    out
}

fn setup(ws: &Path, actions: &Value) {
    for a in actions.as_array().into_iter().flatten() {
        if let Some([t, l]) = a["symlink"].as_array().map(Vec::as_slice) {
            let link = ws.join(l.as_str().unwrap());
            if !link.exists() && std::fs::symlink_metadata(&link).is_err() {
                symlink(t.as_str().unwrap(), link).unwrap();
            }
        }
    }
}

#[test]
fn hostile_corpus_is_denied_and_everyday_commands_pass() {
    let env = Env::new();
    let out = lay_out(&env);
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile_corpus.jsonl"),
    )
    .unwrap();
    let state = env.state.display().to_string();
    let outside = out.display().to_string();
    let cases: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deny = cases.iter().filter(|c| c["expect"] == "deny").count();
    let allow = cases.iter().filter(|c| c["expect"] == "allow").count();
    assert!(
        deny >= 200 && allow >= 40,
        "corpus too small: {deny} deny, {allow} allow"
    );
    for c in &cases {
        setup(&env.ws, &c["setup"]);
    }
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for chunk in cases.chunks(cases.len().div_ceil(4)) {
            let (env, failures, state, outside) = (&env, &failures, &state, &outside);
            s.spawn(move || {
                for c in chunk {
                    let args = c["args"]
                        .to_string()
                        .replace("$STATE", state)
                        .replace("$OUT", outside);
                    let tool = c["tool"].as_str().unwrap();
                    let autonomy = c["autonomy"].as_str().unwrap_or("supervised");
                    let r = env.run(&[
                        "policy",
                        "check",
                        tool,
                        "--json",
                        &args,
                        "--autonomy",
                        autonomy,
                    ]);
                    let got: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
                    if r.code != 0 || got["decision"] != c["expect"] {
                        failures.lock().unwrap().push(format!(
                            "[{}] {tool} {args} under {autonomy}: expected {}, got {} ({})",
                            c["category"].as_str().unwrap_or(""),
                            c["expect"],
                            got["decision"],
                            got["reason"].as_str().unwrap_or(&r.stderr)
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
