//! Errors that say what to do next: a provider with no server behind its
//! URL, a key refused or not set, a model the server does not have (in the
//! body shapes llama.cpp, Ollama and OpenAI send), and a state directory
//! that cannot be written, before which nothing is created. Fake servers
//! on 127.0.0.1 only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{Env, Run, lit, skip};
use fake_server::{FakeServer, Reply};
use std::path::Path;

const KEY: &str = "sk-test-nextstep-0123456789abcdefKEY1";

/// A config whose default provider `o` is openai-compatible at `url`, no
/// retries; `extra` goes into its table.
fn env_at(url: &str, extra: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "default_provider = \"o\"\n[providers.models.o]\nkind = \"openai-compatible\"\n\
         base_url = \"{url}/v1\"\nmodel = \"qwen-x\"\nretries = 0\ntimeout_secs = 5\n{extra}\n"
    ));
    env
}

fn no_key_anywhere(r: &Run) {
    assert!(!r.stdout.contains(KEY) && !r.stderr.contains(KEY), "{r:?}");
}

/// A port nothing listens on: bound, then closed.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn an_unreachable_server_asks_whether_one_runs_and_names_provider_test() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    let env = env_at(&url, "");
    let want = format!("is a server running at {url}/v1?");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("{want} try `latchclaw provider test o`")),
        "{r:?}"
    );
    // `provider test` itself does not suggest running it.
    let r = env.run(&["provider", "test"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains(&want), "{r:?}");
    assert!(!r.stdout.contains("try `latchclaw provider test"), "{r:?}");
}

#[test]
fn a_refused_key_names_its_variable_never_its_value() {
    for (status, body) in [
        (401, "unauthorized.json"),
        (401, "llamacpp_unauthorized.json"),
        (403, "unauthorized.json"),
    ] {
        let server = FakeServer::start(vec![Reply::fixture(status, body)]);
        let env = env_at(&server.url(), "api_key_env = \"LC_NEXT_KEY\"");
        let r = env.run_env(&["agent", "-m", "hi"], &[("LC_NEXT_KEY", KEY)]);
        assert_eq!(r.code, 3, "{body}: {r:?}");
        assert!(
            r.stderr.contains(&format!("HTTP {status}: "))
                && r.stderr.contains(
                    "the server refused the key in LC_NEXT_KEY (providers.models.o.api_key_env): \
                     check that variable's value"
                ),
            "{body}: {r:?}"
        );
        no_key_anywhere(&r);
    }
    // No key configured: say where one goes.
    let server = FakeServer::start(vec![Reply::fixture(401, "llamacpp_unauthorized.json")]);
    let env = env_at(&server.url(), "");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains(
            "Invalid API Key; the server wants an API key: set \
             providers.models.o.api_key_env to the name of the variable that holds it"
        ),
        "{r:?}"
    );
}

/// "Model not found" as each server says it: which model, where it is
/// configured, and how to see the configured ones.
#[test]
fn a_model_the_server_lacks_is_named_with_where_to_change_it() {
    for (status, body, extra) in [
        (400, "llamacpp_model_not_found.json", ""),
        (
            404,
            "ollama_model_not_found.json",
            " (Ollama: `ollama pull qwen-x`)",
        ),
        (404, "openai_model_not_found.json", ""),
    ] {
        let server = FakeServer::start(vec![Reply::fixture(status, body)]);
        let env = env_at(&server.url(), "");
        let r = env.run(&["agent", "-m", "hi"]);
        assert_eq!(r.code, 3, "{body}: {r:?}");
        let want = format!(
            "the server at {}/v1 has no model \"qwen-x\"{extra}: set providers.models.o.model \
             to one it serves (`latchclaw provider list` shows each provider's model; \
             `--model NAME` tries another for one run)",
            server.url()
        );
        assert!(r.stderr.contains(&want), "{body}: {r:?}");
    }
    // The model named is the one asked for: --model replaces the configured one.
    let server = FakeServer::start(vec![Reply::fixture(404, "openai_model_not_found.json")]);
    let env = env_at(&server.url(), "");
    let r = env.run(&["agent", "--model", "gpt-9", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("has no model \"gpt-9\""), "{r:?}");
    // A 404 about the path, not the model: the base URL is what to check.
    let server = FakeServer::start(vec![Reply::fixture(404, "llamacpp_not_found.json")]);
    let env = env_at(&server.url(), "");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "HTTP 404: File Not Found; nothing answers at {}/v1/chat/completions: check \
             providers.models.o.base_url",
            server.url()
        )),
        "{r:?}"
    );
}

/// An unset key variable: the run stops before any request, naming the
/// variable and the key that names it; `config validate` warns of it.
#[test]
fn an_unset_key_variable_is_named_at_run_time_and_by_config_validate() {
    let server = FakeServer::start(vec![Reply::fixture(200, "text.json")]);
    let env = env_at(&server.url(), "api_key_env = \"LC_NEXT_UNSET_KEY\"");
    let r = env.run(&["agent", "-m", "hi"]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains(
            "the environment variable LC_NEXT_UNSET_KEY is not set \
             (providers.models.o.api_key_env names it): export LC_NEXT_UNSET_KEY=…"
        ) && r.stderr.contains("set it in the crontab or the unit"),
        "{r:?}"
    );
    assert!(server.requests().is_empty());

    let r = env.run(&["config", "validate"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.starts_with("ok: "), "{r:?}");
    assert!(
        r.stderr.contains(
            "latchclaw: warning: providers.models.o.api_key_env: LC_NEXT_UNSET_KEY is not set \
             in this environment, so requests to provider \"o\" fail until it is; cron jobs and \
             services do not see your login shell's environment"
        ),
        "{r:?}"
    );
    let r = env.run_env(&["config", "validate"], &[("LC_NEXT_UNSET_KEY", KEY)]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{r:?}");
}

/// What an unusable state directory leaves behind: nothing. The config
/// comes from `--config` and names a workspace that does not exist yet.
fn nothing_created_under(home: &Path, env: &Env, what: &str) {
    let ws = env.root.join("ws-never");
    let cfg = env.root.join("outside.toml");
    std::fs::write(&cfg, format!("workspace_dir = {}\n", lit(&ws))).unwrap();
    let cfg = cfg.to_str().unwrap();
    let home = home.to_str().unwrap();
    for args in [
        &["agent", "-m", "hi"][..],
        &["--config", cfg, "agent", "-m", "hi"][..],
        &["--config", cfg, "agent", "--json", "-m", "hi"][..],
        &["--config", cfg, "tool", "run", "time", "--json", "{}"][..],
        &["init", "--workspace", ws.to_str().unwrap()][..],
    ] {
        let r = env.run_env(args, &[("LATCHCLAW_HOME", home)]);
        assert_eq!(r.code, 3, "{what}: {args:?}: {r:?}");
        assert!(
            r.stderr
                .contains(&format!("the state directory {home} {what}"))
                && r.stderr
                    .contains("; set LATCHCLAW_HOME to a writable directory"),
            "{what}: {args:?}: {r:?}"
        );
        assert!(!ws.exists(), "{what}: {args:?} created the workspace");
        assert!(
            !env.home.join("latchclaw-workspace").exists(),
            "{what}: {args:?} created the default workspace"
        );
    }
}

#[test]
fn an_unusable_state_dir_says_set_latchclaw_home_and_creates_nothing() {
    let env = Env::new();
    // Root ignores mode bits, so: a path through a regular file...
    let file = env.root.join("a-file");
    std::fs::write(&file, "").unwrap();
    nothing_created_under(&file.join("state"), &env, "cannot be created");
    // ...and the file itself.
    nothing_created_under(&file, &env, "cannot be created");
    assert_eq!(std::fs::read(&file).unwrap(), b"");
}

/// A read-only mount, where the directory exists and only writing fails:
/// in a mount namespace of its own (`unshare`), skipped where that is not
/// allowed.
#[test]
fn a_read_only_state_dir_says_set_latchclaw_home_and_creates_nothing() {
    let env = Env::new();
    let state = env.root.join("ro-state");
    std::fs::create_dir_all(&state).unwrap();
    let ws = env.root.join("ws-never");
    let cfg = env.root.join("outside.toml");
    std::fs::write(&cfg, format!("workspace_dir = {}\n", lit(&ws))).unwrap();
    let mount = format!(
        "mount --bind {0} {0} && mount -o remount,bind,ro {0}",
        lit(&state)
    );
    let probe = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "{{ {mount}; }} 2>/dev/null && ! touch {}/x 2>/dev/null",
            lit(&state)
        ))
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        _ => return skip("no read-only bind mount here (unshare -m and mount need privileges)"),
    }
    let script = format!("{mount} && exec \"$@\"");
    for args in [&["agent", "-m", "hi"][..], &["init"][..]] {
        let c = env.command(&["--config", cfg.to_str().unwrap()]);
        // The same binary and environment, its argv behind the mount.
        let mut u = std::process::Command::new("unshare");
        u.args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
            .arg(c.get_program())
            .args(c.get_args())
            .args(args)
            .envs(c.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
            .env("LATCHCLAW_HOME", &state)
            .stdin(std::process::Stdio::null());
        let r: Run = u.output().unwrap().into();
        assert_eq!(r.code, 3, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(&format!(
                "the state directory {} is not writable: Read-only file system",
                state.display()
            )) && r
                .stderr
                .contains("set LATCHCLAW_HOME to a writable directory"),
            "{args:?}: {r:?}"
        );
        assert!(!ws.exists(), "{args:?} created the workspace");
    }
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0);
}
