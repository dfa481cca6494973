//! The four real MCP servers of issue 25, installed from PyPI and npm by
//! `scripts/mcp-servers.sh` (`.ci/run` runs it first): each is `mcp test`ed
//! by the binary, serves one `tools/call` through the library API in the
//! sandbox, then, approved, one through `tool run` and one in a mock
//! agent turn, judged and receipted. A server not in the cache is
//! skipped, saying why.

// The commands and tools of the `mcp` feature (the minimal build refuses
// them: tests/features.rs).
#![cfg(feature = "mcp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, lit, skip};
use latchclaw::config::{Autonomy, Config};
use latchclaw::mcp::{Launch, Server};
use latchclaw::security::redact::Redactor;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where `scripts/mcp-servers.sh` installs.
fn cache() -> PathBuf {
    if let Some(c) = std::env::var_os("LATCHCLAW_MCP_CACHE").filter(|c| !c.is_empty()) {
        return PathBuf::from(c);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        });
    base.join("latchclaw/mcp-servers")
}

/// The `[mcp.servers.NAME]` table for a real server, or why it is missing.
fn server_toml(name: &str, ws: &std::path::Path) -> Result<String, String> {
    let c = cache();
    let py = c.join("py");
    let npm = c.join("npm/node_modules/@modelcontextprotocol");
    let need = |p: PathBuf| match p.exists() {
        true => Ok(p),
        false => Err(format!(
            "{} is not installed (run scripts/mcp-servers.sh; no registry?)",
            p.display()
        )),
    };
    Ok(match name {
        "time" => {
            need(py.join("bin/mcp-server-time"))?;
            format!(
                "command = \"mcp-server-time\"\nargs = [\"--local-timezone\", \"UTC\"]\nread_paths = [{}]\n",
                lit(&py)
            )
        }
        "git" => {
            need(py.join("bin/mcp-server-git"))?;
            format!(
                "command = \"mcp-server-git\"\nread_paths = [{}]\nread_only_tools = [\"git_status\"]\n",
                lit(&py)
            )
        }
        "fs" => {
            let js = need(npm.join("server-filesystem/dist/index.js"))?;
            format!(
                "command = \"/usr/bin/node\"\nargs = [{}, {}]\nread_paths = [{}]\n",
                lit(&js),
                lit(ws),
                lit(&c.join("npm"))
            )
        }
        "everything" => {
            let js = need(npm.join("server-everything/dist/index.js"))?;
            format!(
                "command = \"/usr/bin/node\"\nargs = [{}, \"stdio\"]\nread_paths = [{}]\n",
                lit(&js),
                lit(&c.join("npm"))
            )
        }
        _ => unreachable!(),
    })
}

/// `mcp test NAME` on the binary, then one call of `tool` with `args` (made
/// from the workspace's path) through the library; its text holds `want`.
fn serve_one_call(name: &str, tool: &str, args: impl Fn(&str) -> Value, want: &str) {
    let env = Env::new();
    let table = match server_toml(name, &env.ws) {
        Ok(t) => t,
        Err(why) => return skip(why),
    };
    serve_one_call_in(env, name, &table, tool, args, want);
}

/// [`serve_one_call`] with the server's table given.
fn serve_one_call_in(
    env: Env,
    name: &str,
    table: &str,
    tool: &str,
    args: impl Fn(&str) -> Value,
    want: &str,
) {
    std::fs::write(env.ws.join("hello.txt"), "hello from the workspace\n").unwrap();
    common::git(&env.ws, &["init", "-q"]);
    let toml = format!("[mcp.servers.{name}]\ntimeout_secs = 60\n{table}");
    env.config(&toml);
    let (r, v) = env.json(&["mcp", "test", name, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(v["ok"], true, "{v}");
    eprintln!("mcp test {name}: {v}");

    let text = format!("workspace_dir = {}\n{toml}", lit(&env.ws));
    let cfg = Config::from_text(&text, &env.state.join("config.toml"), env.state.clone()).unwrap();
    let launch = Launch {
        cfg: &cfg,
        workspace: &env.ws,
        autonomy: Autonomy::Supervised,
        redactor: Arc::new(Redactor::new()),
    };
    let t = Instant::now();
    let mut s = Server::start(&cfg.mcp.servers[name], &launch, t + Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let listed = t.elapsed();
    assert!(
        s.tools().iter().any(|x| x.name == tool),
        "{name}: {:?}",
        s.tools().iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    for x in s.tools() {
        assert!(
            latchclaw::mcp::valid_model_name(&x.model_name),
            "{}",
            x.model_name
        );
    }
    let t = Instant::now();
    let never = || false;
    let args = args(&env.ws.display().to_string());
    let r = s
        .call(tool, &args, t + Duration::from_secs(60), &never)
        .unwrap_or_else(|e| panic!("{name} {tool}: {e}"));
    let took = t.elapsed();
    assert!(!r.is_error, "{name} {tool}: {}", r.text);
    assert!(r.text.contains(want), "{name} {tool}: {}", r.text);
    eprintln!("{name}: started and listed in {listed:?}, {tool} in {took:?}");
    let pid = s.pid();
    s.stop();
    assert!(pid == 0 || !std::path::Path::new(&format!("/proc/{pid}/status")).exists());

    // Approved, then called by the runtime: `tool run`, and a mock turn.
    let model = latchclaw::mcp::model_name(name, tool);
    let inline: Vec<String> = args
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!("{k} = {}", lit(std::path::Path::new(v.as_str().unwrap()))))
        .collect();
    let script = env.root.join("real-turn.toml");
    std::fs::write(
        &script,
        format!(
            "[[script]]\n[[script.responses]]\ntool_calls = [{{ name = \"{model}\", arguments = {{ {} }} }}]\n\
             [[script.responses]]\ntext = \"The server said: {{{{tool_results}}}}\"\n",
            inline.join(", ")
        ),
    )
    .unwrap();
    env.config(&format!(
        "default_provider = \"m\"\n[security]\nautonomy = \"full\"\n[providers.models.m]\n\
         kind = \"mock\"\nfixture = {}\n{toml}",
        lit(&script)
    ));
    let (r, v) = env.json(&["mcp", "approve", name, "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        v["tools"].as_array().unwrap().contains(&json!(model)),
        "{v}"
    );
    let (r, v) = env.json(&["tool", "run", &model, "--json", &args.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(v["output"].as_str().unwrap().contains(want), "{v}");
    let r = env.run(&["agent", "-m", "use the server"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(want), "{r:?}");
    let lines = env.receipt_lines();
    assert!(
        lines
            .iter()
            .filter(|l| l["tool"] == model.as_str() && l["status"] == "allowed")
            .count()
            == 2,
        "{lines:?}"
    );
}

#[test]
fn mcp_server_time_serves_a_call() {
    serve_one_call(
        "time",
        "get_current_time",
        |_| json!({"timezone": "UTC"}),
        "UTC",
    );
}

#[test]
fn mcp_server_git_serves_a_call() {
    serve_one_call("git", "git_status", |ws| json!({"repo_path": ws}), "branch");
}

#[test]
fn server_filesystem_serves_a_call() {
    serve_one_call(
        "fs",
        "list_directory",
        |ws| json!({"path": ws}),
        "hello.txt",
    );
}

#[test]
fn server_everything_serves_a_call() {
    serve_one_call(
        "everything",
        "echo",
        |_| json!({"message": "hi there"}),
        "hi there",
    );
}

/// server-everything again, in its Streamable HTTP mode: started by the
/// test on a free port, reached at its url (no process of latchclaw's).
#[test]
fn server_everything_serves_a_call_over_streamable_http() {
    let env = Env::new();
    let js = cache().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !js.exists() || !std::path::Path::new("/usr/bin/node").exists() {
        return skip(format!(
            "{} is not installed (run scripts/mcp-servers.sh; no registry?)",
            js.display()
        ));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _node = Kill(
        std::process::Command::new("/usr/bin/node")
            .arg(&js)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let up = common::eventually(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "server-everything did not listen on {port}");
    let table = format!(
        "url = \"http://127.0.0.1:{port}/mcp\"\nrisk = \"low\"\nread_only_tools = [\"echo\"]\n"
    );
    serve_one_call_in(
        env,
        "evhttp",
        &table,
        "echo",
        |_| json!({"message": "hi over http"}),
        "hi over http",
    );
}
