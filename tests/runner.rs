//! The shell runner on the real binary: everyday command lines run without a
//! shell and give what sh would; git is hardened against planted config;
//! nothing a call starts outlives it; the kernel wall holds on its own for a
//! program the gate is told to trust, and it gets no socket.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A pre_exec hook that leaks a descriptor (libc dup2).
#![allow(unsafe_code)]

mod common;
#[path = "common/fake_server.rs"]
mod fake_server;

use common::{BASIC_TOOLS, Env, Run, git, output, processes_with, wait_for_process};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn env_with(security_extra: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 5\n[security]\nautonomy = \"full\"\n{security_extra}\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    env
}

fn repo(env: &Env) {
    std::fs::create_dir_all(env.ws.join("src")).unwrap();
    std::fs::write(env.ws.join("notes.txt"), "pear\napple\nfig\n").unwrap();
    std::fs::write(env.ws.join("src/main.rs"), "// TODO: x\nfn main() {}\n").unwrap();
    std::fs::write(env.ws.join("src/lib.rs"), "// TODO: y\n").unwrap();
    git(&env.ws, &["init", "-q"]);
    git(&env.ws, &["config", "user.name", "Test Person"]);
    git(&env.ws, &["config", "user.email", "t@example.invalid"]);
    git(&env.ws, &["add", "."]);
    git(&env.ws, &["commit", "-qm", "first commit"]);
}

#[test]
fn everyday_command_lines_run_without_a_shell() {
    let env = env_with("");
    repo(&env);
    for (command, want) in [
        ("LANG=C sort notes.txt", "apple\nfig\npear\n"),
        ("git config --get user.name", "Test Person\n"),
        ("find . -name '*.rs' | sort | wc -l", "2\n"),
        ("grep -c TODO src/main.rs", "1\n"),
        ("echo a && echo b || echo c; echo d", "a\nb\nd\n"),
        ("ls nope 2>/dev/null || echo missing", "missing\n"),
        ("cd src && ls", "lib.rs\nmain.rs\n"),
        ("echo src/*.rs", "src/lib.rs src/main.rs\n"),
        ("echo 'src/*.rs'", "src/*.rs\n"),
        ("! ls nope 2>/dev/null && echo negated", "negated\n"),
        ("TZ=UTC date -d @0 +%Y", "1970\n"),
    ] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 0, "{command}: {r:?}");
        assert_eq!(output(&v), want, "{command}");
    }
    let (r, v) = env.shell("git log --oneline -5");
    assert!(r.code == 0 && output(&v).contains("first commit"), "{r:?}");
    let (r, v) = env.shell("grep -rn TODO src");
    assert!(
        r.code == 0
            && output(&v).contains("src/main.rs:1:")
            && output(&v).contains("src/lib.rs:1:"),
        "{r:?}"
    );
    let (r, v) = env.shell("ls -la | head -3");
    assert!(r.code == 0 && output(&v).lines().count() == 3, "{r:?}");
    // A redirection the gate judged is opened by the runner itself.
    let (r, _) = env.shell("sort notes.txt > sorted.txt 2>&1");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(env.ws.join("sorted.txt")).unwrap(),
        "apple\nfig\npear\n"
    );
    let (r, _) = env.shell("echo more >> sorted.txt");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        std::fs::read_to_string(env.ws.join("sorted.txt"))
            .unwrap()
            .ends_with("pear\nmore\n")
    );
    // Exit status of a pipeline is its last command's.
    let (r, v) = env.shell("ls nope | cat");
    assert_eq!((r.code, v["metadata"]["exit_code"].as_i64()), (0, Some(0)));
    let (r, v) = env.shell("cat nope");
    assert_eq!((r.code, v["metadata"]["exit_code"].as_i64()), (3, Some(1)));
}

#[test]
fn git_ignores_planted_config_that_would_run_programs() {
    let env = env_with("");
    repo(&env);
    // Inside the workspace, where the kernel wall lets a write through: only
    // the git hardening stands in the way.
    let canary = env.ws.join("pwned");
    // What a hostile model would have planted, had it reached .git/config
    // (the gate refuses that write; this is the second line).
    let hook = env.ws.join("evil.sh");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", canary.display())).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = env.ws.join(".git/config");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[core]\n\tfsmonitor = {h}\n\tpager = {h}\n[diff \"x\"]\n\ttextconv = {h}\n\tcommand = {h}\n\
         [filter \"f\"]\n\tclean = {h}\n\tsmudge = {h}\n\tprocess = {h}\n\trequired = true\n\
         [merge \"m\"]\n\tdriver = {h}\n[alias]\n\tst = !{h}\n",
        h = hook.display()
    ));
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(env.ws.join(".gitattributes"), "* diff=x filter=f merge=m\n").unwrap();
    std::fs::write(env.ws.join("notes.txt"), "changed\n").unwrap();
    for command in [
        "git status",
        "git diff",
        "git diff --stat",
        "git log -p -1",
        "git show HEAD",
        "git status --short",
        "git blame notes.txt",
        "git add notes.txt",
        "git commit -qm second",
    ] {
        let (r, _) = env.shell(command);
        assert_eq!(r.code, 0, "{command}: {r:?}");
        assert!(!canary.exists(), "{command} ran the planted program");
    }
    // A bare repository planted in the workspace is not used implicitly.
    let bare = env.ws.join("planted");
    for d in ["objects", "refs"] {
        std::fs::create_dir_all(bare.join(d)).unwrap();
    }
    std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(
        bare.join("config"),
        format!("[core]\n\tbare = true\n\tfsmonitor = {}\n", hook.display()),
    )
    .unwrap();
    let _ = env.shell("cd planted && git status");
    let _ = env.shell("git -C planted status");
    assert!(!canary.exists(), "a planted bare repository ran a program");
    // A repository whose config reaches outside the workspace is refused.
    let linked = env.ws.join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::write(
        linked.join(".git"),
        format!("gitdir: {}\n", env.home.display()),
    )
    .unwrap();
    let inc = env.ws.join("inc");
    git(&env.ws.join(""), &["init", "-q", "inc"]);
    let mut c = std::fs::read_to_string(inc.join(".git/config")).unwrap();
    // From `inc/.git/`, three levels up is the workspace's parent.
    c.push_str("[include]\n\tpath = ../../../x.cfg\n");
    std::fs::write(inc.join(".git/config"), c).unwrap();
    for command in [
        "git --git-dir=planted status",
        "git -c core.pager=sh log",
        "git config core.fsmonitor x",
        "git -C linked status",
        "cd inc && git status",
        "git apply x.patch && cat notes.txt",
    ] {
        let (r, _) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
    }
}

/// A repository workspace with a forbidden `private/key` canary inside it.
fn repo_with_private() -> Env {
    let env = Env::new();
    env.config(&format!(
        "shell_timeout_secs = 5\n[security]\nautonomy = \"full\"\nforbidden_paths = [\"/etc\", {}]\n\
         [channels.cli]\n{BASIC_TOOLS}\n",
        common::lit(&env.ws.join("private"))
    ));
    repo(&env);
    std::fs::create_dir_all(env.ws.join("private")).unwrap();
    std::fs::write(env.ws.join("private/key"), "CANARY-PRIVATE\n").unwrap();
    env
}

/// A script the operator trusts (on the allowlist by path): the gate lets it
/// run, so only the runner and the kernel stand between it and the rest.
fn trusted_script(env: &Env, name: &str, body: &str) {
    let p = env.ws.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn no_process_outlives_a_call_that_daemonised() {
    let env = env_with("shell_allowlist = [\"./daemon.sh\"]");
    trusted_script(
        &env,
        "daemon.sh",
        "setsid sleep 61.7171 </dev/null >/dev/null 2>&1 &\n( ( sleep 61.7272 </dev/null >/dev/null 2>&1 & ) & )\nnohup sleep 61.7373 >/dev/null 2>&1 &\necho started",
    );
    let t = Instant::now();
    let (r, v) = env.shell("./daemon.sh");
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), "started\n");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    std::thread::sleep(Duration::from_millis(100));
    for marker in ["61.7171", "61.7272", "61.7373"] {
        let left = processes_with(marker);
        assert!(left.is_empty(), "survived the call: {left:?}");
    }
}

#[test]
fn a_signal_to_latchclaw_kills_the_call_and_keeps_the_receipt() {
    let env = env_with("shell_allowlist = [\"./linger.sh\"]");
    trusted_script(
        &env,
        "linger.sh",
        "setsid sleep 62.8181 </dev/null >/dev/null 2>&1 &\nsleep 62.8282",
    );
    let child = env
        .shell_command("./linger.sh")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_process("62.8282", Duration::from_secs(10));
    wait_for_process("62.8181", Duration::from_secs(10));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    let out = child.wait_with_output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{out:?}");
    std::thread::sleep(Duration::from_millis(100));
    for marker in ["62.8181", "62.8282"] {
        assert!(processes_with(marker).is_empty(), "{marker} survived");
    }
    let rc = env.receipts();
    assert_eq!(rc.last().unwrap()["tool"], "shell", "{rc:?}");
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

/// What a probe may reach over the network: a TCP and a UDP port on
/// 127.0.0.1 and a UNIX socket outside the workspace (a daemon's).
struct Targets {
    tcp: u16,
    udp: u16,
    unix: std::path::PathBuf,
    /// A process outside the sandbox, holding the provider key in its
    /// environment (`$PPID` is latchclaw only without a PID namespace).
    victim: u32,
}

/// What a trusted script manages against the kernel alone: the gate lets it
/// run and never reads its body.
fn probe(env: &Env, confinement: &str, net: &Targets, kill_parent: bool) -> (Run, String) {
    let outside = env.home.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET").unwrap();
    env.config(&format!(
        "shell_timeout_secs = 5\n[security]\nautonomy = \"full\"\nconfinement = \"{confinement}\"\n\
         shell_allowlist = [\"./probe.sh\"]\n[channels.cli]\n{BASIC_TOOLS}\n\
         [providers.models.cloud]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"LC_PROVIDER_KEY\"\n"
    ));
    let _ = std::fs::remove_file(env.home.join("escape.txt"));
    trusted_script(
        env,
        "probe.sh",
        &format!(
            "cat {out}/secret.txt 2>/dev/null | grep -q TOP-SECRET && echo READ_OUTSIDE\n\
             echo x 2>/dev/null > {home}/escape.txt && echo WROTE_OUTSIDE\n\
             cat {state}/config.toml 2>/dev/null | grep -q security && echo READ_STATE\n\
             perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new(PeerAddr=>\"127.0.0.1:{tcp}\") ? 0 : 1)' 2>/dev/null && echo TCP_CONNECTED\n\
             perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr=>\"127.0.0.1:{udp}\", Proto=>\"udp\") or exit 1; exit(defined $s->send(\"ping\") ? 0 : 1)' 2>/dev/null && echo UDP_SENT\n\
             perl -MIO::Socket::UNIX -e '$s = IO::Socket::UNIX->new(Peer=>\"{unix}\") or exit 1; print $s \"hello\"' 2>/dev/null && echo UNIX_CONNECTED\n\
             ls -l /proc/self/fd | grep -q socket: && echo SOCKET_INHERITED\n\
             kill -0 {victim} 2>/dev/null && echo SIGNALLED\n\
             for p in $PPID 1 {victim}; do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -q sk-canary && echo ENVIRON; done\n\
             {kill}\necho done",
            out = outside.display(),
            home = env.home.display(),
            state = env.state.display(),
            tcp = net.tcp,
            udp = net.udp,
            unix = net.unix.display(),
            victim = net.victim,
            kill = if kill_parent {
                "kill -KILL $PPID 2>/dev/null"
            } else {
                ""
            },
        ),
    );
    let r = env.run_env(
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "./probe.sh"}"#,
        ],
        &[("LC_PROVIDER_KEY", "sk-canary-4242")],
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    (r, output(&v).to_string())
}

#[test]
fn the_kernel_wall_holds_alone_for_a_trusted_program() {
    let env = Env::new();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let unix_path = env.home.join("daemon.sock");
    let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let mut victim = std::process::Command::new("sleep")
        .arg("60")
        .env("LC_PROVIDER_KEY", "sk-canary-4242")
        .spawn()
        .unwrap();
    let net = Targets {
        tcp: tcp.local_addr().unwrap().port(),
        udp: udp.local_addr().unwrap().port(),
        unix: unix_path,
        victim: victim.id(),
    };
    let drain = || {
        let mut got = 0;
        while tcp.accept().is_ok() {
            got += 1;
        }
        while udp.recv(&mut [0u8; 8]).is_ok() {
            got += 1;
        }
        while unix.accept().is_ok() {
            got += 1;
        }
        got
    };
    let network = ["TCP_CONNECTED", "UDP_SENT", "UNIX_CONNECTED"];
    // Control: with confinement off the same script does it all, so the
    // confined runs below are not passing by accident.
    let (r, seen) = probe(&env, "off", &net, false);
    assert_eq!(r.code, 0, "{r:?}");
    for what in ["READ_OUTSIDE", "WROTE_OUTSIDE", "READ_STATE", "SIGNALLED"]
        .into_iter()
        .chain(network)
    {
        assert!(seen.contains(what), "control run could not {what}: {seen}");
    }
    // latchclaw hands a child no socket even unconfined.
    assert!(!seen.contains("SOCKET_INHERITED"), "{seen}");
    assert_eq!(drain(), 3, "the control reached all three listeners");
    // The red team's setting: full autonomy, best_effort, a program the
    // operator approved. UDP and UNIX sockets are open to Landlock below
    // ABI 9/10; the socket filter refuses them.
    let (r, seen) = probe(&env, "best_effort", &net, false);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(seen.contains("done\n"), "{seen}");
    for what in network.into_iter().chain(["SOCKET_INHERITED"]) {
        assert!(
            !seen.contains(what),
            "escaped the socket filter: {what}: {seen}"
        );
    }
    assert_eq!(drain(), 0, "a best_effort child reached a listener");
    let (r, seen) = probe(&env, "required", &net, true);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(seen.contains("done\n"), "{seen}");
    for what in [
        "READ_OUTSIDE",
        "WROTE_OUTSIDE",
        "READ_STATE",
        "SIGNALLED",
        "ENVIRON",
        "SOCKET_INHERITED",
    ]
    .into_iter()
    .chain(network)
    {
        assert!(!seen.contains(what), "escaped the kernel wall: {what}");
    }
    assert!(!env.home.join("escape.txt").exists());
    let _ = victim.kill();
    let _ = victim.wait();
    assert_eq!(drain(), 0, "a confined child reached a listener");
    // The kill was refused: latchclaw lived to write the call's receipt.
    let rc = env.receipts();
    let last = rc.last().unwrap();
    assert_eq!(
        (last["tool"].as_str(), last["status"].as_str()),
        (Some("shell"), Some("allowed")),
        "{rc:?}"
    );
    assert_eq!(env.run(&["receipt", "verify"]).code, 0);
}

const SHELL_CALL: &str = r#"{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_s","type":"function","function":{"name":"shell","arguments":"{\"command\":\"./fds.sh\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":5,"total_tokens":55}}"#;
const ANSWER: &str = r#"{"id":"c2","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Listed."},"finish_reason":"stop"}],"usage":{"prompt_tokens":90,"completion_tokens":4,"total_tokens":94}}"#;

/// A socket reaches a child only if latchclaw passes one on. During an agent
/// turn it holds its provider connection open, and here it was also started
/// with a UDP socket left open on descriptor 7 (a careless parent's leak):
/// the confined child still gets its three standard descriptors and
/// nothing else.
#[test]
fn a_shell_child_inherits_no_socket_from_latchclaw() {
    use fake_server::{FakeServer, Reply};
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    for confinement in ["off", "best_effort"] {
        let server =
            FakeServer::start(vec![Reply::json(200, SHELL_CALL), Reply::json(200, ANSWER)]);
        let env = Env::new();
        env.config(&format!(
            "default_provider = \"local\"\nshell_timeout_secs = 5\n\
             [providers.models.local]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\n\
             model = \"m\"\ntimeout_secs = 10\nretries = 0\n\
             [security]\nautonomy = \"full\"\nconfinement = \"{confinement}\"\n\
             shell_allowlist = [\"./fds.sh\"]\n[channels.cli]\n{BASIC_TOOLS}\n",
            server.url()
        ));
        trusted_script(
            &env,
            "fds.sh",
            "ls -l /proc/self/fd | grep -q socket: && echo CHILD_HAS_SOCKET\n\
             ls -l /proc/$PPID/fd 2>/dev/null | grep -q socket: && echo PARENT_HAS_SOCKET\n\
             echo leak 2>/dev/null >&7 && echo WROTE_INHERITED\n\
             echo FDS: && ls /proc/self/fd && echo done",
        );
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let leak = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        leak.connect(rx.local_addr().unwrap()).unwrap();
        let leak_fd = leak.as_raw_fd();
        let mut cmd = env.command(&["agent", "-m", "list your descriptors"]);
        // SAFETY: dup2 is async-signal-safe; the copy it makes is not
        // close-on-exec, so latchclaw inherits it.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(leak_fd, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let r: Run = cmd.output().unwrap().into();
        assert_eq!(
            (r.code, r.stdout.as_str()),
            (0, "Listed.\n"),
            "{confinement}: {r:?}"
        );
        let reqs = server.requests();
        assert_eq!(reqs.len(), 2, "{r:?}");
        assert_eq!(
            reqs[0].peer_port, reqs[1].peer_port,
            "one kept-alive connection"
        );
        let tool = reqs[1].json()["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap_or("").to_string())
            .unwrap_or_default();
        assert!(tool.contains("done"), "{confinement}: {tool}");
        let leaked = rx.recv(&mut [0u8; 8]).is_ok();
        if confinement == "off" {
            // The control: latchclaw held its provider socket during the
            // call (so the probe sees sockets), yet the one leaked to it
            // reached no child even unconfined: latchclaw marks what it
            // inherited close-on-exec when it starts.
            assert!(tool.contains("PARENT_HAS_SOCKET"), "control: {tool}");
            assert!(!tool.contains("CHILD_HAS_SOCKET"), "{tool}");
            assert!(!tool.contains("WROTE_INHERITED"), "{tool}");
            assert!(!leaked, "an unconfined child wrote to the leaked socket");
        } else {
            // stdin, stdout, stderr, and ls's own descriptor for /proc/self/fd.
            assert!(tool.contains("FDS:\n0\n1\n2\n3\ndone"), "{tool}");
            assert!(!tool.contains("CHILD_HAS_SOCKET"), "{tool}");
            assert!(!tool.contains("WROTE_INHERITED"), "{tool}");
            assert!(!leaked, "a confined child wrote to the leaked socket");
        }
    }
}

#[test]
fn a_child_that_kills_latchclaw_leaves_the_started_receipt() {
    // Without the kernel wall (confinement off) a child can kill latchclaw:
    // the call's started receipt was written before it ran.
    let env = env_with("confinement = \"off\"\nshell_allowlist = [\"./assassin.sh\"]");
    trusted_script(&env, "assassin.sh", "kill -KILL $PPID\nsleep 5");
    let r = env.run(&[
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "./assassin.sh"}"#,
    ]);
    assert_eq!(r.code, -1, "latchclaw should have been killed: {r:?}");
    let lines = env.receipt_lines();
    let last = lines.last().expect("a receipt");
    assert_eq!(
        (last["tool"].as_str(), last["status"].as_str()),
        (Some("shell"), Some("started")),
        "{lines:?}"
    );
    let v = env.run(&["receipt", "verify"]);
    assert_eq!(v.code, 0, "{v:?}");
    assert!(v.stdout.contains("started, no outcome"), "{v:?}");
}

#[test]
fn policy_show_names_programs_without_a_table_and_the_sandbox() {
    let env = env_with("shell_allowlist = [\"ls\", \"jq\", \"./tools/check.sh\"]");
    let r = env.run(&["policy", "show"]);
    assert_eq!(r.code, 0, "{r:?}");
    for want in [
        "without an option table: code runners, high risk, judged by their path arguments \
         only; only the kernel sandbox holds what they do: jq",
        "allowlisted by path, without an option table (judged by their path arguments only; \
         only the kernel sandbox holds what they do): ./tools/check.sh",
    ] {
        assert!(r.stdout.contains(want), "{want}\n{}", r.stdout);
    }
    assert!(
        r.stdout.contains("shell confinement: best_effort"),
        "{}",
        r.stdout
    );
    // A program without a table is still judged by its path arguments.
    let (r, _) = env.shell("jq . /etc/passwd");
    assert_eq!(r.code, 4, "{r:?}");
}

#[test]
fn forbidden_paths_in_a_repository_stay_out_of_git_and_option_parsing() {
    let env = repo_with_private();
    // git matches pathspecs literally: a pattern cannot reach what the gate
    // never saw named.
    for command in [
        "git add -N -f 'priv*'",
        "git add -N -f ':(icase)PRIVATE'",
        "git diff",
        "git status --short",
        "git diff --cached",
    ] {
        let (_, v) = env.shell(command);
        assert!(!output(&v).contains("CANARY-PRIVATE"), "{command}: {v}");
    }
    for command in [
        "git add -N -f private",
        "git --icase-pathspecs add -N PRIVATE",
        "git add .",
        "grep -r CANARY .",
        // GNU option parsing changes under POSIXLY_CORRECT; the tables
        // read argv the GNU way, so the variable is never set.
        "POSIXLY_CORRECT=1 grep -h '' notes.txt -e private/key",
    ] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
        assert!(!output(&v).contains("CANARY-PRIVATE"), "{command}: {v}");
    }
    // A commit takes the user's identity from their own git config (the
    // rest of that file is never read by git here), as git reads it: a
    // byte-order mark, mixed case, a continued line.
    std::fs::write(
        env.home.join(".gitconfig"),
        "\u{FEFF}[User]\n\tName = Home \\\nPerson\n\temail = home@example.invalid\n[core]\n\tpager = false\n",
    )
    .unwrap();
    let fresh = env.ws.join("fresh");
    git(&env.ws, &["init", "-q", "fresh"]);
    std::fs::write(fresh.join("f.txt"), "x\n").unwrap();
    let (r, _) = env.shell("cd fresh && git add f.txt");
    assert_eq!(r.code, 0, "{r:?}");
    let (r, _) = env.shell("cd fresh && git commit -qm one");
    assert_eq!(r.code, 0, "{r:?}");
    let (r, v) = env.shell("cd fresh && git log --format=%an");
    assert_eq!((r.code, output(&v)), (0, "Home Person\n"), "{r:?}");
    // Writing into a directory is fine; `cp f dir/` is everyday work.
    let (r, _) = env.shell("cp notes.txt src/");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("src/notes.txt").exists());
}

#[test]
fn a_recursive_copy_never_writes_through_a_link_in_its_destination() {
    let env = env_with("");
    repo(&env);
    let before = std::fs::read_to_string(env.ws.join(".git/config")).unwrap();
    // A link planted in the destination (git apply can make one), then a
    // source tree with a file of the same name.
    std::fs::create_dir_all(env.ws.join("dst")).unwrap();
    std::os::unix::fs::symlink("../.git/config", env.ws.join("dst/c")).unwrap();
    std::fs::create_dir_all(env.ws.join("src2")).unwrap();
    std::fs::write(env.ws.join("src2/c"), "[core]\n\tfsmonitor = evil\n").unwrap();
    for command in ["cp -rT src2 dst", "cp -r src2/. dst", "cp -a src2/. dst"] {
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {v}");
    }
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".git/config")).unwrap(),
        before
    );
    // Without the link the same copy is ordinary work.
    std::fs::remove_file(env.ws.join("dst/c")).unwrap();
    let (r, _) = env.shell("cp -rT src2 dst");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(env.ws.join("dst/c").is_file());
}

#[test]
fn tool_calls_of_processes_sharing_a_state_dir_do_not_overlap() {
    let env = env_with("shell_allowlist = [\"sleep\", \"echo\"]");
    let slow = env
        .shell_command("sleep 1.2424")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The sleep itself (not latchclaw, whose arguments name it too): the
    // first call holds the lock by then.
    wait_for_process("sleep 1.2424", Duration::from_secs(10));
    let started = Instant::now();
    let (r, v) = env.shell("echo after");
    let waited = started.elapsed();
    assert_eq!((r.code, output(&v)), (0, "after\n"), "{r:?}");
    assert!(
        waited > Duration::from_millis(700),
        "the second call ran while the first was running ({waited:?})"
    );
    let _ = slow.wait_with_output();
}

#[test]
fn round_three_diff_links_escaped_driver_names_and_nested_repositories() {
    let env = repo_with_private();
    // diff compares the files inside directory operands; a link there
    // (git apply can make one) is compared as a link, never followed.
    std::fs::create_dir_all(env.ws.join("r1")).unwrap();
    std::fs::create_dir_all(env.ws.join("r1d")).unwrap();
    std::os::unix::fs::symlink("../private/key", env.ws.join("r1/k")).unwrap();
    std::fs::write(env.ws.join("r1d/k"), "").unwrap();
    for command in ["diff r1d r1", "diff r1d/k r1", "diff -r r1d r1"] {
        let (_, v) = env.shell(command);
        assert!(!output(&v).contains("CANARY-PRIVATE"), "{command}: {v}");
    }
    let (r, _) = env.shell("diff . r1");
    assert_eq!(r.code, 4, "{r:?}");
    // Driver names are read the way git reads them (`e\e` is `ee`).
    let hook = env.ws.join("evil.sh");
    std::fs::write(&hook, "#!/bin/sh\ntouch \"$(dirname \"$0\")/pwned\"; cat\n").unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = env.ws.join(".git/config");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&format!(
        "[filter \"e\\e\"]\n\tclean = {h}\n[filter \"a]b\"]\n\tclean = {h}\n",
        h = hook.display()
    ));
    std::fs::write(&cfg, text).unwrap();
    std::fs::write(
        env.ws.join(".gitattributes"),
        "*.t filter=ee\n*.u filter=a]b\n",
    )
    .unwrap();
    std::fs::write(env.ws.join("f.t"), "x\n").unwrap();
    std::fs::write(env.ws.join("f.u"), "x\n").unwrap();
    let (r, _) = env.shell("git add f.t f.u");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!env.ws.join("pwned").exists(), "an escaped driver name ran");
    // A nested repository with a driver of its own: git in the outer one
    // does not descend into it.
    let sm = env.ws.join("sm");
    git(&env.ws, &["init", "-q", "sm"]);
    std::fs::write(sm.join(".gitattributes"), "*.t filter=zz\n").unwrap();
    std::fs::write(sm.join("f.t"), "x\n").unwrap();
    git(&sm, &["config", "user.name", "a"]);
    git(&sm, &["config", "user.email", "a@b"]);
    git(&sm, &["add", "."]);
    git(&sm, &["commit", "-qm", "sm"]);
    let mut t = std::fs::read_to_string(sm.join(".git/config")).unwrap();
    t.push_str(&format!("[filter \"zz\"]\n\tclean = {}\n", hook.display()));
    std::fs::write(sm.join(".git/config"), t).unwrap();
    std::fs::write(sm.join("f.t"), "y\n").unwrap();
    let _ = env.shell("git add sm");
    for command in ["git status", "git diff", "git status --short"] {
        let _ = env.shell(command);
        assert!(
            !env.ws.join("pwned").exists(),
            "{command} ran a nested repository's driver"
        );
    }
    let (r, _) = env.shell("git diff --submodule=diff");
    assert_eq!(r.code, 4, "{r:?}");
    // A plain copy is not a link-making write: it may share a line.
    let (r, _) = env.shell("mkdir -p build && cp notes.txt build/");
    assert_eq!(r.code, 0, "{r:?}");
}

#[test]
fn round_four_config_named_files_work_trees_and_copied_links() {
    let env = repo_with_private();
    // A common user setting names a file git reads and quotes in errors.
    git(
        &env.ws,
        &["config", "blame.ignoreRevsFile", ".git-blame-ignore-revs"],
    );
    std::os::unix::fs::symlink("private/key", env.ws.join(".git-blame-ignore-revs")).unwrap();
    let (_, v) = env.shell("git blame notes.txt");
    assert!(!output(&v).contains("CANARY-PRIVATE"), "{v}");
    std::fs::remove_file(env.ws.join(".git-blame-ignore-revs")).unwrap();
    // A relative link copied as a link would point at the forbidden file.
    std::fs::create_dir_all(env.ws.join("sub")).unwrap();
    std::os::unix::fs::symlink("private/key", env.ws.join("sub/l")).unwrap();
    let (r, _) = env.shell("cp -P sub/l copied");
    assert_eq!(r.code, 4, "{r:?}");
    assert!(std::fs::symlink_metadata(env.ws.join("copied")).is_err());
    // A nested repository whose work tree is elsewhere is not run.
    git(&env.ws, &["init", "-q", "nc"]);
    git(&env.ws.join("nc"), &["config", "core.worktree", "../.."]);
    for command in [
        "cd nc && git add -A",
        "cd nc && git reset --hard",
        "git -C nc status",
    ] {
        let (r, _) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
    }
    assert!(env.ws.join("private/key").exists());
    // find obeys its last -maxdepth.
    let (r, v) = env.shell("find . -maxdepth 1 -maxdepth 5 -name key");
    assert_eq!(r.code, 4, "{v}");
    // A repository file the gate reads is never followed through a link
    // or read without bound (`config -> /dev/zero` answers at once).
    git(&env.ws, &["init", "-q", "nl"]);
    std::fs::remove_file(env.ws.join("nl/.git/config")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", env.ws.join("nl/.git/config")).unwrap();
    let t = Instant::now();
    let (r, _) = env.shell("cd nl && git status");
    assert_eq!(r.code, 4, "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn a_deep_tree_is_judged_quickly() {
    let env = env_with("");
    for (depth, top) in [(200usize, "t200"), (1500, "t1500")] {
        let chain = "a/".repeat(depth);
        for side in ["s", "d"] {
            std::fs::create_dir_all(env.ws.join(top).join(side).join(&chain)).unwrap();
        }
        std::fs::write(env.ws.join(top).join("s").join(&chain).join("c"), "x").unwrap();
        std::os::unix::fs::symlink(
            "/dev/null",
            env.ws.join(top).join("d").join(&chain).join("c"),
        )
        .unwrap();
        let t = Instant::now();
        let (r, v) = env.shell(&format!("cp -rT {top}/s {top}/d"));
        assert_eq!(r.code, 4, "{v}");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "depth {depth}: {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn a_command_runs_in_the_directory_the_gate_judged_even_outside_the_workspace() {
    let env = Env::new();
    let outside = env.home.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    env.config(&format!(
        "[security]\nautonomy = \"full\"\nworkspace_only = false\nconfinement = \"off\"\n\
         [channels.cli]\n{BASIC_TOOLS}\n"
    ));
    let (r, v) = env.shell(&format!("cd {} && pwd", outside.display()));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(output(&v), format!("{}\n", outside.display()));
}

/// A call killed with SIGKILL cannot remove its own tmp dir: the next run
/// that makes one removes those of processes that are gone, and nothing
/// else (a live pid's, a recent one, a symlink, another name).
#[test]
fn the_tmp_dirs_of_killed_calls_are_swept_by_a_later_run() {
    use std::time::SystemTime;
    let env = env_with("");
    let tmp = env.root.join("tmp");
    let elsewhere = env.root.join("elsewhere");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("keep.txt"), "keep").unwrap();
    // A pid no process has: one that ran and was reaped.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    let dir = |name: String, modified: SystemTime| {
        let d = tmp.join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/spill"), "x").unwrap();
        std::fs::set_permissions(d.join("sub"), std::fs::Permissions::from_mode(0o000)).unwrap();
        std::fs::File::open(&d)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        d
    };
    let abandoned = dir(format!("latchclaw-call-{dead}-0000abcd"), hours_ago);
    let recent = dir(format!("latchclaw-call-{dead}-0000abce"), SystemTime::now());
    let live = dir(
        format!("latchclaw-call-{}-0000abcf", std::process::id()),
        hours_ago,
    );
    let other = dir(format!("latchclaw-caller-{dead}-0000abd0"), hours_ago);
    let link = tmp.join(format!("latchclaw-call-{dead}-0000abd1"));
    std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
    // A shell call with this tmp dir as its TMPDIR.
    let run_with_tmp = || {
        let r = env.run_env(
            &[
                "tool",
                "run",
                "shell",
                "--json",
                r#"{"command": "echo hi"}"#,
            ],
            &[("TMPDIR", tmp.to_str().unwrap())],
        );
        assert_eq!(r.code, 0, "{r:?}");
    };
    run_with_tmp();
    assert!(!abandoned.exists(), "the abandoned dir is still there");
    for kept in [&recent, &live, &other] {
        assert!(kept.join("sub").exists(), "{} was removed", kept.display());
        std::fs::set_permissions(kept.join("sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    assert!(link.symlink_metadata().is_ok() && elsewhere.join("keep.txt").exists());
    // Only the run's own dir came and went, and the sweep's stamp stays.
    let stamp = format!("latchclaw-swept-{}", effective_uid());
    let mut left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left.len(), 5, "{left:?}");
    assert!(left.contains(&stamp), "{left:?}");
    // Within the hour the next run does not list the tmp dir again.
    let again = dir(format!("latchclaw-call-{dead}-0000abd2"), hours_ago);
    run_with_tmp();
    assert!(again.join("sub").exists());
    std::fs::set_permissions(again.join("sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// This process's effective user id, from /proc.
fn effective_uid() -> u32 {
    let st = std::fs::read_to_string("/proc/self/status").unwrap();
    st.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

/// A redirection is opened when its command starts, by path: a process
/// left running by an earlier call (here the test itself) may swap a
/// directory on that path after the gate judged it. What is opened then is
/// held to the gate's rule again: a hard link to a secret, swapped in for a
/// decoy the gate allowed, is refused and nothing of it is read; nothing is
/// truncated either.
#[test]
fn a_redirection_swapped_after_the_gate_judged_it_is_refused_at_open() {
    use std::io::Write as _;
    let env = env_with("");
    let ws = &env.ws;
    std::fs::write(ws.join(".env"), "TOKEN=swapped-in-secret-0317\n").unwrap();
    for d in ["d", "bk"] {
        std::fs::create_dir(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("d/notes.txt"), "decoy\n").unwrap();
    std::fs::hard_link(ws.join(".env"), ws.join("bk/notes.txt")).unwrap();
    let fifo = ws.join("sync");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for (command, what) in [
        ("cat sync; cat < d/notes.txt", "read"),
        ("cat sync; echo x > d/notes.txt", "truncate"),
    ] {
        let runner = {
            let cmd = env.shell_command(command);
            std::thread::spawn(move || {
                let mut cmd = cmd;
                Run::from(cmd.output().unwrap())
            })
        };
        // Opens once `cat sync` runs: the gate has judged, the view is made.
        let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        std::fs::rename(ws.join("d"), ws.join("t")).unwrap();
        std::fs::rename(ws.join("bk"), ws.join("d")).unwrap();
        std::fs::rename(ws.join("t"), ws.join("bk")).unwrap();
        w.write_all(b"go\n").unwrap();
        drop(w);
        let r = runner.join().unwrap();
        assert!(!r.stdout.contains("swapped-in-secret"), "{what}: {r:?}");
        assert!(r.stdout.contains("hard links now"), "{what}: {r:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join(".env")).unwrap(),
            "TOKEN=swapped-in-secret-0317\n",
            "{what}"
        );
        // Back as the gate saw it, for the next.
        std::fs::rename(ws.join("d"), ws.join("t")).unwrap();
        std::fs::rename(ws.join("bk"), ws.join("d")).unwrap();
        std::fs::rename(ws.join("t"), ws.join("bk")).unwrap();
    }
}

/// A git directory by another name (`git init --separate-git-dir`, a bare
/// repository): its config and hooks run code as `.git`'s do, so no write
/// reaches them, and its config (a remote's credentials) is masked for
/// every program but git.
#[test]
fn a_git_directory_by_another_name_is_protected_like_dot_git() {
    let env = env_with("");
    let ws = &env.ws;
    let sep = env.root.join("sep");
    std::fs::create_dir_all(&sep).unwrap();
    git(
        &sep,
        &[
            "init",
            "-q",
            "--separate-git-dir",
            ws.join("gitdata").to_str().unwrap(),
        ],
    );
    git(
        &sep,
        &[
            "config",
            "remote.origin.url",
            "https://u:gitdata-token-7731@example.invalid/r",
        ],
    );
    let before = std::fs::read_to_string(ws.join("gitdata/config")).unwrap();
    for command in [
        "printf '[core]\\n\\tfsmonitor = touch planted\\n' >> gitdata/config",
        "echo x > gitdata/hooks/pre-commit",
        "cp notes.txt gitdata/hooks/post-checkout",
    ] {
        std::fs::write(ws.join("notes.txt"), "n\n").unwrap();
        let (r, v) = env.shell(command);
        assert_eq!(r.code, 4, "{command}: {r:?}");
        assert!(
            v["reason"]
                .as_str()
                .unwrap_or("")
                .contains("a git directory"),
            "{command}: {v}"
        );
    }
    let (r, v) = env.tool(
        "file_write",
        serde_json::json!({"path": "gitdata/hooks/pre-push", "content": "x"}),
    );
    assert_eq!(r.code, 4, "{r:?}: {v}");
    assert_eq!(
        std::fs::read_to_string(ws.join("gitdata/config")).unwrap(),
        before
    );
    assert!(!ws.join("gitdata/hooks/pre-commit").exists());
    // Its config reads empty to any other program (a mask of the
    // namespace sandbox).
    if latchclaw::security::confine::namespace_status().is_err() {
        common::skip("no namespace sandbox on this machine: the mask is not checked");
        return;
    }
    let (r, v) = env.shell("cat gitdata/config");
    assert_eq!(r.code, 4, "{r:?}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap_or("")
            .contains("a git directory's config"),
        "{v}"
    );
    // A recursive read, which the gate lets through (it skips secrets by
    // name), meets the mask.
    std::fs::create_dir_all(ws.join("other")).unwrap();
    std::fs::write(ws.join("other/config"), "x\n").unwrap();
    // diff's exit 1 (the trees differ) is a failed call, exit 3.
    let (r, _) = env.shell("diff -r gitdata other");
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains("> x"), "{r:?}");
    // Nothing of it, not only the token (which the output's redaction
    // would catch in a URL anyway).
    assert!(!r.stdout.contains("repositoryformatversion"), "{r:?}");
}
