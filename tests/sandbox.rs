//! The namespace sandbox by effect, on the real binary: what a program the
//! operator approved under `full` still cannot do (read a secret-named
//! file, write git's hooks or config, reboot, load a module, make a device
//! node, set the clock, make namespaces, see latchclaw's processes), that a
//! call's end — timeout, estop, Ctrl-C — takes every process it started
//! with it, even a fork-and-exit chain, what `policy show` says, and the
//! fallback when namespaces are unavailable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BASIC_TOOLS, Env, Run, git, output, processes_with, skip};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn env_with(top: &str, security_extra: &str) -> Env {
    let env = Env::new();
    env.config(&format!(
        "{top}\n[security]\nautonomy = \"full\"\n{security_extra}\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    env
}

/// Whether this machine gives children namespaces (`policy show` says).
fn namespaces_or_skip(env: &Env) -> bool {
    let r = env.run(&["policy", "show"]);
    let up = r.stdout.contains("\n  namespaces: ");
    if !up {
        skip(format!(
            "no namespace sandbox on this machine: {}",
            r.stdout
                .lines()
                .find(|l| l.contains("no namespaces"))
                .unwrap_or("?")
        ));
    }
    up
}

fn script(env: &Env, name: &str, body: &str) {
    let p = env.ws.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs `command` in the shell tool after the operator approved it, as a
/// high-risk call under `full` is: asked, approved with `approve --yes`,
/// asked again.
fn approved(env: &Env, command: &str) -> (Run, Value) {
    let (r, v) = env.shell(command);
    assert_eq!(r.code, 4, "{r:?}");
    let reason = v["reason"].as_str().unwrap();
    let id = reason
        .split_whitespace()
        .find(|w| w.starts_with("approval-"))
        .unwrap()
        .trim_end_matches([',', ')', '('])
        .to_string();
    let a = env.run(&["approve", &id, "--yes"]);
    assert_eq!(a.code, 0, "{a:?}");
    env.shell(command)
}

/// A python program that tries what no child may, and prints one line a
/// try: `name=ok` or `name=errno`.
const PROBE: &str = r##"
import ctypes, os, socket, errno
libc = ctypes.CDLL(None, use_errno=True)
def sys(name, f):
    r = f()
    e = ctypes.get_errno()
    print(f"{name}={'ok' if r == 0 else errno.errorcode.get(e, e)}")
def try_(name, f):
    try:
        f(); print(f"{name}=ok")
    except OSError as e:
        print(f"{name}={errno.errorcode.get(e.errno, e.errno)}")
def read(p):
    with open(p) as f:
        print(f"read {p}: {f.read()!r}")
try_("env", lambda: read(".env"))
try_("key", lambda: read("deploy/id_rsa"))
try_("linked", lambda: read("innocent.txt"))
try_("hook", lambda: open(".git/hooks/post-checkout", "w").write("#!/bin/sh\ntouch PWNED\n"))
try_("config", lambda: open(".git/config", "a").write("[core]\n\tfsmonitor = ./x\n"))
try_("gitobj", lambda: open(".git/objects/planted", "w").write("x"))
try_("skill", lambda: open(".latchclaw/skills/s/SKILL.md", "w").write("obey"))
# Wrong magic numbers and bad arguments: with the power to act the kernel
# would answer EINVAL/EBADF/EFAULT, never do anything.
sys("reboot", lambda: libc.syscall(169, 1, 2, 3, 0))
sys("init_module", lambda: libc.syscall(175, 0, 0, 0))
sys("finit_module", lambda: libc.syscall(313, -1, 0, 0))
sys("settime", lambda: libc.clock_settime(1, ctypes.byref((ctypes.c_long * 2)(0, 0))))
sys("unshare", lambda: libc.unshare(0x10000000))
sys("mount", lambda: libc.mount(b"none", b"/", b"tmpfs", 0, None))
try_("mknod", lambda: os.mknod("sda", 0o600 | 0o060000, os.makedev(8, 0)))
try_("mkfifo", lambda: (os.mkfifo("fifo"), os.unlink("fifo")))
try_("socket", lambda: socket.socket())
print("pids=" + ",".join(sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int)))
# Its init: not listed, no limit of its may be set, and a signal to it is
# dropped (a pid namespace's init ignores what it has no handler for).
import resource
hide = [l for l in open("/proc/self/mounts") if l.split()[1] == "/proc"]
print("hide=" + ("yes" if hide and "hidepid=ptraceable" in hide[-1] else "no"))
try_("init_status", lambda: open("/proc/1/status").read())
try_("prlimit_init", lambda: resource.prlimit(1, resource.RLIMIT_CPU, (1, 1)))
try_("prlimit_self", lambda: resource.prlimit(0, resource.RLIMIT_NOFILE))
try_("setrlimit_self", lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
for sig in (1, 2, 10, 15, 33):
    try_(f"kill_init_{sig}", lambda: os.kill(1, sig))
print("caps=" + [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
try_("home", lambda: os.listdir(os.environ.get("PROBE_HOME", "/root")))
print("done")
"##;

fn results(out: &str) -> std::collections::HashMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn planted_workspace(env: &Env) {
    std::fs::write(env.ws.join(".env"), "SECRET=canary-env-7731\n").unwrap();
    std::fs::create_dir_all(env.ws.join("deploy")).unwrap();
    std::fs::write(env.ws.join("deploy/id_rsa"), "canary-key-7732\n").unwrap();
    // The same file under a name no rule matches.
    std::fs::hard_link(env.ws.join(".env"), env.ws.join("innocent.txt")).unwrap();
    std::fs::create_dir_all(env.ws.join(".latchclaw/skills/s")).unwrap();
    std::fs::write(env.ws.join(".latchclaw/skills/s/SKILL.md"), "be nice\n").unwrap();
    git(&env.ws, &["init", "-q"]);
}

#[test]
fn an_approved_interpreter_under_full_cannot_reach_past_the_view() {
    if !cfg!(target_arch = "x86_64") {
        skip("the probe's system-call numbers are x86_64's");
        return;
    }
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        skip("no /usr/bin/python3");
        return;
    }
    let env = env_with("shell_timeout_secs = 20", "shell_allowlist = [\"python3\"]");
    if !namespaces_or_skip(&env) {
        return;
    }
    planted_workspace(&env);
    let config_before = std::fs::read(env.ws.join(".git/config")).unwrap();
    std::fs::write(env.ws.join("probe.py"), PROBE).unwrap();
    // One command builds its view in its own init; a command after another
    // joins the call's base view: the same walls either way.
    for line in ["python3 probe.py", "true; python3 probe.py"] {
        probe_holds(&env, line, &config_before);
    }
}

fn probe_holds(env: &Env, line: &str, config_before: &[u8]) {
    let (r, v) = approved(env, line);
    assert_eq!(r.code, 0, "{line}: {r:?}");
    let out = output(&v);
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("canary"), "a secret reached the child: {out}");
    let got = results(out);
    let want = [
        ("hook", "EROFS"),
        ("gitobj", "EROFS"),
        ("reboot", "EPERM"),
        ("init_module", "EPERM"),
        ("finit_module", "EPERM"),
        ("settime", "EPERM"),
        ("unshare", "EPERM"),
        ("mount", "EPERM"),
        ("mknod", "EPERM"),
        ("mkfifo", "ok"),
        ("socket", "EACCES"),
        ("caps", "0000000000000000"),
        ("home", "ENOENT"),
        ("prlimit_init", "EPERM"),
        ("prlimit_self", "ok"),
        ("setrlimit_self", "ok"),
        ("kill_init_1", "ok"),
        ("kill_init_2", "ok"),
        ("kill_init_10", "ok"),
        ("kill_init_15", "ok"),
        ("kill_init_33", "ok"),
    ];
    for (k, v) in want {
        assert_eq!(got.get(k).map(String::as_str), Some(v), "{k}: {out}");
    }
    // Masked: read as empty, and writing them fails.
    for k in ["env", "key", "linked"] {
        assert_eq!(got.get(k).map(String::as_str), Some("ok"), "{k}: {out}");
    }
    assert!(out.contains("read .env: ''"), "{out}");
    assert!(
        matches!(
            got.get("config").map(String::as_str),
            Some("EROFS" | "EACCES")
        ),
        "{out}"
    );
    assert!(
        matches!(got.get("skill").map(String::as_str), Some("EROFS")),
        "{out}"
    );
    // Its own PID namespace: itself, nothing of the host's, and its init
    // (latchclaw's, not dumpable) not even listed where the kernel has
    // hidepid=ptraceable (Linux 5.8; before it root's group sees init).
    let pids = got["pids"].split(',').collect::<Vec<_>>();
    if got["hide"] == "yes" {
        assert!(
            !pids.is_empty() && pids.len() <= 2 && !pids.contains(&"1"),
            "{pids:?}"
        );
        assert_eq!(got["init_status"], "ENOENT", "{out}");
    } else {
        eprintln!("SKIPPED in part: no hidepid=ptraceable on this kernel");
        assert!(pids.len() <= 3 && pids.contains(&"1"), "{pids:?}");
    }
    // Nothing changed on the host.
    assert!(!env.ws.join(".git/hooks/post-checkout").exists());
    assert!(!env.ws.join(".git/objects/planted").exists());
    assert!(!env.ws.join("sda").exists());
    assert_eq!(
        std::fs::read(env.ws.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".latchclaw/skills/s/SKILL.md")).unwrap(),
        "be nice\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join(".env")).unwrap(),
        "SECRET=canary-env-7731\n"
    );
}

#[test]
fn a_git_write_the_gate_approved_changes_objects_but_not_what_runs_code() {
    let env = env_with("", "");
    if !namespaces_or_skip(&env) {
        return;
    }
    std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
    git(&env.ws, &["init", "-q"]);
    git(&env.ws, &["config", "user.name", "T"]);
    git(&env.ws, &["config", "user.email", "t@example.invalid"]);
    for step in ["git add a.txt", "git commit -qm first"] {
        let (r, _) = env.shell(step);
        assert_eq!(r.code, 0, "{step}: {r:?}");
    }
    let (r, v) = env.shell("git log --oneline");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(output(&v).contains("first"), "{v}");
    // The gate refuses a config write; the kernel would too (below).
    let before = std::fs::read(env.ws.join(".git/config")).unwrap();
    let (r, _) = env.shell("git config user.name Planted");
    assert_eq!(r.code, 4, "{r:?}");
    assert_eq!(std::fs::read(env.ws.join(".git/config")).unwrap(), before);
}

/// The sandbox of `env`'s workspace through the library API, as the shell
/// runner prepares it (writable, best effort, the state dir out of view).
fn library_spec(env: &Env) -> latchclaw::security::confine::Spec {
    use latchclaw::security::confine::{Mode, Spec};
    Spec {
        workspace: env.ws.clone(),
        workspace_writable: true,
        tmp_dir: None,
        mode: Mode::BestEffort,
        state_dir: Some(env.state.clone()),
        secret_allow: Default::default(),
        forbidden: Vec::new(),
        egress: None,
        cwd: None,
        read_only_dirs: Vec::new(),
    }
}

/// git itself in the three views, through the library: a write view lets
/// it commit but not change its config or hooks; a read view lets it
/// change nothing in `.git`.
#[test]
fn the_git_views_hold_by_themselves() {
    use latchclaw::security::confine::{self, view::Kind};
    use std::process::Command;
    let env = Env::new();
    std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
    git(&env.ws, &["init", "-q"]);
    let spec = library_spec(&env);
    let p = confine::prepare(&spec).unwrap();
    if !p.has_namespaces() {
        skip("no namespace sandbox on this machine");
        return;
    }
    let run = |kind: Kind, args: &[&str]| {
        let mut c = Command::new("git");
        c.args(["-c", "user.name=T", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&env.ws)
            .env("HOME", &env.home)
            .env("GIT_CONFIG_NOSYSTEM", "1");
        p.install_as(&mut c, kind, None);
        c.output().unwrap()
    };
    let before = std::fs::read(env.ws.join(".git/config")).unwrap();
    for kind in [Kind::GitRead, Kind::Other] {
        let o = run(kind, &["add", "a.txt"]);
        assert!(!o.status.success(), "{kind:?}: {o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Read-only"),
            "{o:?}"
        );
    }
    for args in [&["add", "a.txt"][..], &["commit", "-qm", "first"]] {
        let o = run(Kind::GitWrite, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
    }
    for args in [
        &["config", "user.name", "Planted"][..],
        &["config", "core.hooksPath", "hooks2"],
    ] {
        let o = run(Kind::GitWrite, args);
        assert!(!o.status.success(), "{args:?}: {o:?}");
    }
    assert_eq!(std::fs::read(env.ws.join(".git/config")).unwrap(), before);
    let o = Command::new("sh")
        .args(["-c", "echo x > .git/hooks/pre-commit"])
        .current_dir(&env.ws)
        .output()
        .unwrap();
    assert!(o.status.success(), "control: {o:?}");
    std::fs::remove_file(env.ws.join(".git/hooks/pre-commit")).unwrap();
    let mut c = Command::new("sh");
    c.args(["-c", "echo x > .git/hooks/pre-commit"])
        .current_dir(&env.ws);
    p.install_as(&mut c, Kind::GitWrite, None);
    let o = c.output().unwrap();
    assert!(!o.status.success(), "{o:?}");
    assert!(!env.ws.join(".git/hooks/pre-commit").exists());
}

/// A process an earlier call left running (a background `code_run`, an MCP
/// server) may swap the workspace's directories between the walk that
/// finds what to mask and the child's view: a mask put by path would then
/// land on its decoy and leave the secret in view. Each mask and protected
/// directory is put on the object the walk found, or the child is refused.
#[test]
fn a_directory_swapped_after_the_walk_refuses_the_child_instead_of_showing_a_secret() {
    use latchclaw::security::confine;
    use std::process::Command;
    let env = Env::new();
    let ws = &env.ws;
    for d in ["p/a", "p/c", "decoy", "g/.git", "h"] {
        std::fs::create_dir_all(ws.join(d)).unwrap();
    }
    std::fs::write(ws.join("p/a/.env"), "NESTED-SECRET\n").unwrap();
    std::fs::write(ws.join("p/c/notes.txt"), "plain\n").unwrap();
    std::fs::write(ws.join("decoy/.env"), "decoy\n").unwrap();
    std::fs::write(ws.join("g/.git/config"), "[core]\n").unwrap();
    let spec = library_spec(&env);
    let run = |p: &confine::Prepared, script: &str| {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]).current_dir(ws);
        p.install(&mut c);
        c.output()
    };
    let read = "cat p/a/.env p/b/.env p/c/.env p/a/notes.txt 2>/dev/null; echo x >> g/.git/config";
    // The control: unswapped, the child runs and sees the secret empty.
    let p = confine::prepare(&spec).unwrap();
    if !p.has_namespaces() {
        skip("no namespace sandbox on this machine");
        return;
    }
    let o = run(&p, read).unwrap();
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("SECRET"),
        "{o:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("g/.git/config")).unwrap(),
        "[core]\n"
    );
    let swap = |a: &str, b: &str| {
        let t = ws.join("p/swap");
        std::fs::rename(ws.join(a), &t).unwrap();
        std::fs::rename(ws.join(b), ws.join(a)).unwrap();
        std::fs::rename(&t, ws.join(b)).unwrap();
    };
    // A link put where the directory was (the directory moved beside it),
    // and two directories swapped; both after the walk, before the child.
    std::os::unix::fs::symlink("../decoy", ws.join("p/b")).unwrap();
    for (a, b) in [("p/a", "p/b"), ("p/a", "p/c")] {
        let p = confine::prepare(&spec).unwrap();
        swap(a, b);
        match run(&p, read) {
            Ok(o) => panic!("{a} <-> {b}: the child ran: {o:?}"),
            Err(e) => {
                let why = confine::start_failure(&e);
                assert!(why.contains("the workspace changed"), "{a} <-> {b}: {why}");
            }
        }
        swap(a, b);
    }
    // The same for a protected directory: `.git` swapped for a plain one.
    std::fs::rename(ws.join("h"), ws.join("g/h")).unwrap();
    let p = confine::prepare(&spec).unwrap();
    std::fs::rename(ws.join("g/.git"), ws.join("g/old")).unwrap();
    std::fs::rename(ws.join("g/h"), ws.join("g/.git")).unwrap();
    std::fs::rename(ws.join("g/old"), ws.join("g/h")).unwrap();
    assert!(run(&p, "echo x >> g/h/config").is_err());
    assert_eq!(
        std::fs::read_to_string(ws.join("g/h/config")).unwrap(),
        "[core]\n"
    );
}

/// A chain of processes each of which forks the next and exits: no pid
/// lives long enough to be killed one by one.
const CHAIN: &str = "#!/bin/sh\nf() { echo t >> ticks; sleep 0.01; f & }\nf\nsleep 30\n";

fn ticks(env: &Env) -> u64 {
    std::fs::metadata(env.ws.join("ticks")).map_or(0, |m| m.len())
}

/// The chain stops growing once the call is over.
fn assert_chain_gone(env: &Env) {
    std::thread::sleep(Duration::from_millis(200));
    let a = ticks(env);
    std::thread::sleep(Duration::from_millis(400));
    let b = ticks(env);
    assert_eq!(a, b, "the fork-and-exit chain outlived the call");
}

fn wait_for_ticks(env: &Env) {
    common::wait_until(Duration::from_secs(10), "the chain to start", || {
        ticks(env) > 20
    });
}

#[test]
fn a_fork_and_exit_chain_ends_with_its_call_by_timeout() {
    let env = env_with(
        "shell_timeout_secs = 1",
        "shell_allowlist = [\"./chain.sh\"]",
    );
    if !namespaces_or_skip(&env) {
        return;
    }
    script(&env, "chain.sh", CHAIN);
    let t = Instant::now();
    let (r, v) = env.shell("./chain.sh");
    assert_ne!(r.code, 0, "{r:?}");
    assert_eq!(v["metadata"]["timed_out"], true, "{v}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(ticks(&env) > 0);
    assert_chain_gone(&env);
}

#[test]
fn a_fork_and_exit_chain_ends_with_its_call_by_estop_and_by_ctrl_c() {
    let env = env_with(
        "shell_timeout_secs = 30",
        "shell_allowlist = [\"./chain.sh\"]",
    );
    if !namespaces_or_skip(&env) {
        return;
    }
    script(&env, "chain.sh", CHAIN);
    // Estop from another process.
    let child = env
        .shell_command("./chain.sh")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_ticks(&env);
    let t = Instant::now();
    assert_eq!(env.run(&["estop"]).code, 0);
    let out = child.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["metadata"]["estop"], true, "{v}");
    assert_chain_gone(&env);
    assert_eq!(env.run(&["estop", "--clear"]).code, 0);
    // Ctrl-C: SIGINT to latchclaw.
    std::fs::remove_file(env.ws.join("ticks")).unwrap();
    let child = env
        .shell_command("./chain.sh")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_ticks(&env);
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.id() as i32).unwrap(),
        rustix::process::Signal::INT,
    );
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert_chain_gone(&env);
    assert!(processes_with("chain.sh").is_empty());
}

#[test]
fn policy_show_lists_the_walls_up_on_this_machine() {
    let env = env_with("", "");
    let r = env.run(&["policy", "show"]);
    assert_eq!(r.code, 0, "{r:?}");
    for want in [
        "every capability dropped",
        "refused (seccomp, EPERM): reboot, kexec, module loading",
    ] {
        assert!(r.stdout.contains(want), "{want}\n{}", r.stdout);
    }
    if namespaces_or_skip(&env) {
        for want in [
            "namespaces: ",
            "mount+pid+ipc+uts+net",
            "no network: an empty network namespace",
            "read-only in the workspace, in every child: .git .latchclaw",
        ] {
            assert!(r.stdout.contains(want), "{want}\n{}", r.stdout);
        }
    }
}

#[test]
fn without_namespaces_required_refuses_and_best_effort_says_so() {
    let env = env_with("", "confinement = \"required\"");
    std::fs::write(env.ws.join("a.txt"), "x\n").unwrap();
    let no_ns = [("LATCHCLAW_SIMULATE_NO_NAMESPACES", "1")];
    let r = env.run_env(
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "cat a.txt"}"#,
        ],
        &no_ns,
    );
    assert_ne!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let err = v["error"].as_str().unwrap();
    assert!(
        err.contains("confinement = \"required\" but children cannot get namespaces"),
        "{err}"
    );
    let r = env.run_env(&["policy", "show"], &no_ns);
    assert!(r.stdout.contains("required (refused: "), "{}", r.stdout);
    // best_effort: the call runs behind the other walls, and stderr says
    // once that the namespaces are missing.
    env.config(&format!(
        "[security]\nautonomy = \"full\"\n[channels.cli]\n{BASIC_TOOLS}\n"
    ));
    let r = env.run_env(
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "cat a.txt"}"#,
        ],
        &no_ns,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stderr
            .matches("shell commands run without namespaces")
            .count(),
        1,
        "{r:?}"
    );
    let r = env.run_env(&["policy", "show"], &no_ns);
    assert!(r.stdout.contains("no namespaces ("), "{}", r.stdout);
}

/// Namespaces that cannot be made for want of processes or memory are not
/// this machine's answer: `best_effort` refuses the call (nothing runs)
/// instead of running it behind fewer walls, and says nothing of running
/// without namespaces. A call that filled the process table cannot make
/// the calls after it run with less.
#[test]
fn a_shortage_refuses_the_call_instead_of_dropping_the_namespaces() {
    let env = env_with("", "");
    if !namespaces_or_skip(&env) {
        return;
    }
    let canary = env.ws.join("canary");
    let call = [
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "touch canary"}"#,
    ];
    let busy = [("LATCHCLAW_SIMULATE_NAMESPACES_BUSY", "1")];
    let r = env.run_env(&call, &busy);
    assert_ne!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(v["success"], false, "{v}");
    assert!(!canary.exists(), "ran without its namespaces: {r:?}");
    assert!(!r.stderr.contains("without namespaces"), "{r:?}");
    let r = env.run_env(&["policy", "show"], &busy);
    assert!(r.stdout.contains("best_effort (refused: "), "{}", r.stdout);
    let r = env.run_env(&call, &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(canary.exists(), "{r:?}");
}

#[test]
fn as_an_unprivileged_user_the_same_walls_hold() {
    use std::os::unix::process::CommandExt;
    if rustix::process::geteuid().as_raw() != 0 {
        skip("not root: cannot start latchclaw as another user here");
        return;
    }
    let env = env_with("", "shell_allowlist = [\"./show.sh\"]");
    planted_workspace(&env);
    std::fs::write(env.ws.join("a.txt"), "visible\n").unwrap();
    let Some(pol) = handed_to_nobody(&env) else {
        return;
    };
    let as_nobody = |args: &[&str]| {
        let mut c = env.command(args);
        c.uid(NOBODY).gid(NOBODY);
        c.output().map(Run::from)
    };
    if !pol.stdout.contains("namespaces: user+") {
        skip("no unprivileged user namespaces on this machine");
        return;
    }
    // A script the operator allowlisted by path reads what it likes; only
    // the kernel's masks stand between it and the secrets (innocent.txt
    // is a hard link to `.env`).
    script(
        &env,
        "show.sh",
        "#!/bin/sh\ncat a.txt .env innocent.txt deploy/id_rsa\necho x > .git/hooks/post-checkout\n",
    );
    let _ = std::os::unix::fs::lchown(env.ws.join("show.sh"), Some(NOBODY), Some(NOBODY));
    let r = as_nobody(&[
        "tool",
        "run",
        "shell",
        "--json",
        r#"{"command": "./show.sh"}"#,
    ])
    .unwrap();
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert!(output(&v).starts_with("visible\n"), "{v}");
    assert!(!output(&v).contains("canary"), "{v}");
    assert!(!env.ws.join(".git/hooks/post-checkout").exists());
}

const NOBODY: u32 = 65534;

/// Gives `env`'s files to `nobody` and runs `policy show` as `nobody`: its
/// output, or `None` (said on stderr) where latchclaw cannot run so here.
fn handed_to_nobody(env: &Env) -> Option<Run> {
    use std::os::unix::process::CommandExt;
    for e in walkdir(&env.root) {
        let _ = std::os::unix::fs::lchown(&e, Some(NOBODY), Some(NOBODY));
    }
    let mut c = env.command(&["policy", "show"]);
    c.uid(NOBODY).gid(NOBODY);
    match c.output().map(Run::from) {
        Ok(r) if r.code == 0 => Some(r),
        other => {
            skip(format!("cannot run latchclaw as nobody here: {other:?}"));
            None
        }
    }
}

fn walkdir(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            out.extend(rd.flatten().map(|e| e.path()));
        }
        i += 1;
    }
    out
}

/// A program on the allowlist without an option table runs code latchclaw
/// cannot read: high risk at every autonomy, and an argument naming a
/// forbidden command is refused outright (`npm exec -- rm -rf canary`).
#[test]
fn code_runners_are_high_risk_and_may_not_name_forbidden_commands() {
    let env = env_with(
        "",
        "shell_allowlist = [\"npm\", \"make\", \"cargo\", \"python3\", \"ls\"]",
    );
    std::fs::write(env.ws.join("canary"), "alive\n").unwrap();
    let check = |command: &str, autonomy: &str| {
        let args = serde_json::json!({ "command": command }).to_string();
        let r = env.run(&[
            "policy",
            "check",
            "shell",
            "--json",
            &args,
            "--autonomy",
            autonomy,
        ]);
        assert_eq!(r.code, 0, "{r:?}");
        serde_json::from_str::<Value>(&r.stdout).unwrap()
    };
    let on_path = |p: &str| {
        ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(p).exists())
    };
    for (program, command) in [
        ("npm", "npm exec -- rm -rf canary"),
        ("npm", "npm exec -- sudo true"),
        ("make", "make CC=rm canary"),
        ("python3", "python3 -m shutil rm canary"),
    ] {
        if !on_path(program) {
            continue;
        }
        for autonomy in ["readonly", "supervised", "full"] {
            let v = check(command, autonomy);
            assert_eq!(v["decision"], "deny", "{command} under {autonomy}: {v}");
        }
    }
    for (program, command) in [
        ("npm", "npm run build"),
        ("make", "make all"),
        ("cargo", "cargo build"),
    ] {
        if !on_path(program) {
            continue;
        }
        let v = check(command, "full");
        assert_eq!(v["risk"], "high", "{command}: {v}");
        assert_ne!(v["decision"], "allow", "{command}: {v}");
    }
    // A program with a table keeps its own judgement: reading is low.
    let v = check("ls", "full");
    assert_eq!(
        (v["risk"].as_str(), v["decision"].as_str()),
        (Some("low"), Some("allow")),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.join("canary")).unwrap(),
        "alive\n"
    );
}

/// git is asked what its config names with the config in view (it is
/// masked for every other program): a planted filter is pinned off even
/// where the sandbox would let it write, under `full`.
#[test]
fn a_planted_filter_is_pinned_off_inside_the_sandbox() {
    let env = Env::new();
    env.config(
        "[security]\nautonomy = \"full\"\n[channels.cli]\n\
         tools_allow = [\"shell\", \"git\"]\n",
    );
    std::fs::write(env.ws.join("a.txt"), "one\n").unwrap();
    git(&env.ws, &["init", "-q"]);
    git(&env.ws, &["config", "user.name", "T"]);
    git(&env.ws, &["config", "user.email", "t@example.invalid"]);
    git(&env.ws, &["add", "a.txt"]);
    git(&env.ws, &["commit", "-qm", "first"]);
    git(
        &env.ws,
        &["config", "filter.x.clean", "touch PWNED-clean; cat"],
    );
    git(
        &env.ws,
        &["config", "filter.x.process", "touch PWNED-process"],
    );
    git(
        &env.ws,
        &["config", "diff.x.textconv", "touch PWNED-textconv; cat"],
    );
    std::fs::write(env.ws.join(".gitattributes"), "* filter=x diff=x\n").unwrap();
    std::fs::write(env.ws.join("a.txt"), "two\n").unwrap();
    for command in ["git status", "git diff", "git diff HEAD -- a.txt"] {
        let (r, _) = env.shell(command);
        assert_eq!(r.code, 0, "{command}: {r:?}");
    }
    let (r, v) = env.tool("git", serde_json::json!({"command": "diff"}));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(output(&v).contains("+two"), "{v}");
    let planted: Vec<_> = std::fs::read_dir(&env.ws)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("PWNED"))
        .map(|e| e.file_name())
        .collect();
    assert!(planted.is_empty(), "a planted driver ran: {planted:?}");
}

/// The walk for masks meets links and repositories under other names: a
/// link named like a secret covers what it leads to inside the workspace
/// and breaks nothing when it leads outside or nowhere; a git directory
/// found by its shape (a bare repository, a gitfile's target) is read-only.
#[test]
fn links_and_repositories_by_shape_are_covered() {
    let env = env_with("", "shell_allowlist = [\"./x.sh\"]");
    if !namespaces_or_skip(&env) {
        return;
    }
    let ws = &env.ws;
    std::fs::write(ws.join("data.txt"), "canary-data-9911\n").unwrap();
    std::os::unix::fs::symlink("data.txt", ws.join(".env")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/key", ws.join("id_rsa")).unwrap();
    std::os::unix::fs::symlink(&env.home, ws.join("secrets.d")).unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    git(&ws.join("sub"), &["init", "-q", "--bare", "repo"]);
    script(
        &env,
        "x.sh",
        "#!/bin/sh\ncat data.txt; echo x > sub/repo/hooks/post-update && echo WROTE-HOOK; \
         echo x > sub/repo/config && echo WROTE-CONFIG; echo done\n",
    );
    let (r, v) = env.shell("./x.sh");
    assert_eq!(r.code, 0, "{r:?}");
    let out = output(&v);
    assert!(out.contains("done"), "{out}");
    for leak in ["canary-data", "WROTE-HOOK", "WROTE-CONFIG"] {
        assert!(!out.contains(leak), "{leak}: {out}");
    }
    assert!(!ws.join("sub/repo/hooks/post-update").exists());
}

/// One gate keeps git's answers between decisions only while nothing they
/// rest on changed: in a REPL session a driver planted (or an include
/// pointed) after the first git call is still pinned off on the next.
#[test]
fn git_answers_are_asked_again_when_the_repository_changed() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"full\"\n");
    let ws = &env.ws;
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    git(ws, &["init", "-q"]);
    git(ws, &["config", "user.name", "T"]);
    git(ws, &["config", "user.email", "t@example.invalid"]);
    git(ws, &["add", "a.txt"]);
    git(ws, &["commit", "-qm", "first"]);
    std::fs::write(ws.join("a.txt"), "two\n").unwrap();
    use latchclaw::config::Config;
    use latchclaw::security::Gate;
    let path = env.state.join("config.toml");
    let cfg = Config::from_text(
        &std::fs::read_to_string(&path).unwrap(),
        &path,
        env.state.clone(),
    )
    .unwrap();
    let gate = Gate::new(&cfg, &latchclaw::tools::ToolName::ALL);
    let args = serde_json::json!({"command": "git diff"});
    let plan = |gate: &Gate| {
        let d = gate.decide(latchclaw::tools::ToolName::Shell, &args);
        serde_json::to_string(&d.plan.as_ref().map(|p| format!("{p:?}"))).unwrap()
    };
    let first = plan(&gate);
    assert!(!first.contains("filter.late.clean"), "{first}");
    // Planted after the first answer: the next decision must pin it.
    git(ws, &["config", "filter.late.clean", "touch PWNED; cat"]);
    let second = plan(&gate);
    assert!(second.contains("filter.late.clean"), "{second}");
    // An include pointed at a file that appears later.
    git(ws, &["config", "include.path", "../later.cfg"]);
    let third = plan(&gate);
    std::fs::write(
        ws.join("later.cfg"),
        "[filter \"inc\"]\n\tclean = touch PWNED2\n",
    )
    .unwrap();
    let fourth = plan(&gate);
    assert!(!third.contains("filter.inc.clean"), "{third}");
    assert!(fourth.contains("filter.inc.clean"), "{fourth}");
}

/// Red-team round on the sandbox: a later command of the same call cannot
/// move a covered path out from under its cover (the covers are set up
/// once for the call and follow renames), a directory the walk cannot read
/// refuses the call, and secret-named files inside `.git` are masked.
#[test]
fn covers_follow_renames_within_a_call() {
    let env = env_with("", "shell_allowlist = [\"./x.sh\"]");
    if !namespaces_or_skip(&env) {
        return;
    }
    let ws = &env.ws;
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    git(&ws.join("sub"), &["init", "-q"]);
    let config = std::fs::read(ws.join("sub/.git/config")).unwrap();
    std::fs::create_dir_all(ws.join("deploy")).unwrap();
    std::fs::write(ws.join("deploy/id_rsa"), "canary-idrsa-5151\n").unwrap();
    script(
        &env,
        "x.sh",
        "#!/bin/sh\nif [ ! -e stage1 ]; then touch stage1\n\
         mv sub sub2 && mkdir -p sub/.git && touch sub/.git/config\n\
         mv deploy deploy2 && mkdir deploy && touch deploy/id_rsa\n\
         else cat deploy2/id_rsa\n\
         echo x > sub2/.git/hooks/pre-commit && echo WROTE-HOOK\n\
         echo x >> sub2/.git/config && echo WROTE-CONFIG\n\
         fi\necho done\n",
    );
    let (r, v) = env.shell("./x.sh; ./x.sh");
    assert_eq!(r.code, 0, "{r:?}");
    let out = output(&v);
    assert_eq!(out.matches("done").count(), 2, "{out}");
    for leak in ["canary-idrsa", "WROTE-HOOK", "WROTE-CONFIG"] {
        assert!(!out.contains(leak), "{leak}: {out}");
    }
    assert!(!ws.join("sub2/.git/hooks/pre-commit").exists());
    assert_eq!(std::fs::read(ws.join("sub2/.git/config")).unwrap(), config);
}

#[test]
fn an_unwalkable_workspace_refuses_the_call_and_git_secrets_are_masked() {
    let env = env_with("", "shell_allowlist = [\"./x.sh\"]");
    if !namespaces_or_skip(&env) {
        return;
    }
    let ws = &env.ws;
    git(ws, &["init", "-q"]);
    git(
        ws,
        &[
            "config",
            "remote.origin.url",
            "https://u:canary-token-6161@example.invalid/r",
        ],
    );
    std::fs::create_dir_all(ws.join(".git/modules/m")).unwrap();
    std::fs::write(ws.join(".git/modules/m/config"), "canary-module-6262\n").unwrap();
    std::fs::hard_link(ws.join(".git/config"), ws.join("notes.txt")).unwrap();
    script(
        &env,
        "x.sh",
        "#!/bin/sh\ncat .git/config .git/modules/m/config notes.txt; echo done\n",
    );
    let (r, v) = env.shell("./x.sh");
    assert_eq!(r.code, 0, "{r:?}");
    let out = output(&v);
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("canary"), "{out}");
    // A tree past PATH_MAX: the walk cannot name what is in it, so the
    // call is refused rather than run with it uncovered.
    let deep = std::fs::File::open(ws).unwrap();
    let mut dir: std::os::fd::OwnedFd = deep.into();
    let name = "d".repeat(250);
    for _ in 0..18 {
        rustix::fs::mkdirat(&dir, name.as_str(), rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
        dir = rustix::fs::openat(
            &dir,
            name.as_str(),
            rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
    }
    rustix::fs::mkdirat(&dir, "hidden", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
    let (r, v) = env.shell("./x.sh");
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or("")
            .contains("view of the workspace cannot be built"),
        "{v}"
    );
    // Remove it the same way (a path this long defeats remove_dir_all).
    let _ = std::process::Command::new("rm")
        .args(["-rf", &name])
        .current_dir(ws)
        .status();
}

/// Red-team round 2: git after a command that may change files, on the
/// same line, is refused (its drivers were pinned as the gate read the
/// config, which that command could change first); a secret moved into a
/// git directory's object store is still masked.
#[test]
fn git_after_a_writer_is_refused_and_object_stores_are_walked() {
    let env = env_with(
        "",
        "shell_allowlist = [\"./x.sh\", \"./y.sh\", \"git\", \"echo\"]",
    );
    if !namespaces_or_skip(&env) {
        return;
    }
    let ws = &env.ws;
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    git(&ws.join("sub"), &["init", "-q"]);
    script(&env, "x.sh", "#!/bin/sh\necho '[core]' > sub/inc.cfg\n");
    for line in [
        "./x.sh; git -C sub status",
        "git -C sub status; ./x.sh",
        "./x.sh | git -C sub status",
        "echo x > a.txt && git -C sub status",
    ] {
        let (r, v) = env.shell(line);
        assert_eq!(r.code, 4, "{line}: {r:?}");
        assert!(
            v["reason"].as_str().unwrap_or("").contains("separate call"),
            "{line}: {v}"
        );
    }
    let (r, _) = env.shell("git -C sub status");
    assert_ne!(r.code, 4, "git alone stays allowed: {r:?}");
    std::fs::create_dir_all(ws.join("deploy")).unwrap();
    std::fs::write(ws.join("deploy/id_rsa"), "canary-moved-7171\n").unwrap();
    script(
        &env,
        "x.sh",
        "#!/bin/sh\nmkdir -p g/.git && mv deploy g/.git/objects && echo moved\n",
    );
    let (r, v) = env.shell("./x.sh");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(output(&v).contains("moved"), "{v}");
    script(
        &env,
        "y.sh",
        "#!/bin/sh\ncat g/.git/objects/id_rsa; echo done\n",
    );
    let (r, v) = env.shell("./y.sh");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(output(&v).contains("done"), "{v}");
    assert!(!output(&v).contains("canary"), "{v}");
}

/// Red-team round 3: latchclaw's own files inside the workspace (the state
/// dir, a receipts log, the memory database) are covered in every child,
/// and the directories above them are pinned: a child cannot move the real
/// state dir aside and put a config of its own (`confinement = "off"`) in
/// its place for the next call.
#[test]
fn state_inside_the_workspace_is_covered_and_cannot_be_swapped() {
    let env = Env::new();
    let state = env.ws.join("a/st");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::create_dir_all(env.ws.join("logs")).unwrap();
    std::fs::write(
        state.join("config.toml"),
        format!(
            "workspace_dir = {ws:?}\n[security]\nautonomy = \"full\"\n\
             shell_allowlist = [\"./x.sh\", \"./y.sh\"]\n\
             [receipts]\npath = {log:?}\n[channels.cli]\n{BASIC_TOOLS}\n",
            ws = env.ws.display().to_string(),
            log = env.ws.join("logs/receipts.log").display().to_string(),
        ),
    )
    .unwrap();
    let run = |command: &str| {
        let mut c = env.command(&[
            "tool",
            "run",
            "shell",
            "--json",
            &serde_json::json!({ "command": command }).to_string(),
        ]);
        c.env("LATCHCLAW_HOME", &state);
        Run::from(c.output().unwrap())
    };
    let pol = {
        let mut c = env.command(&["policy", "show"]);
        c.env("LATCHCLAW_HOME", &state);
        Run::from(c.output().unwrap())
    };
    if !pol.stdout.contains("\n  namespaces: ") {
        skip("no namespace sandbox on this machine");
        return;
    }
    script(
        &env,
        "x.sh",
        "#!/bin/sh\nls a/st logs 2>&1 | head -5\ncat logs/receipts.log a/st/config.toml 2>&1 | head -3\n\
         mkdir -p a2/st && printf '[security]\\nconfinement = \"off\"\\n' > a2/st/config.toml\n\
         mv a a_old && mv a2 a && echo SWAPPED\nmv logs logs_old && echo MOVED-LOGS\necho done\n",
    );
    let r = run("./x.sh");
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let out = output(&v);
    assert!(out.contains("done"), "{out}");
    for leak in ["SWAPPED", "MOVED-LOGS", "workspace_dir", "\"tool\""] {
        assert!(!out.contains(leak), "{leak}: {out}");
    }
    // The next call still runs confined, from the real config.
    script(
        &env,
        "y.sh",
        "#!/bin/sh\ncat /proc/1/comm; ls /tmp | head -3; echo done\n",
    );
    let r = run("./y.sh");
    assert_eq!(r.code, 0, "{r:?}");
    let pol = {
        let mut c = env.command(&["policy", "show"]);
        c.env("LATCHCLAW_HOME", &state);
        Run::from(c.output().unwrap())
    };
    assert!(pol.stdout.contains("\n  namespaces: "), "{}", pol.stdout);
    assert!(
        std::fs::read_to_string(state.join("config.toml"))
            .unwrap()
            .contains("./y.sh")
    );
}

/// A shell call's sandbox is prepared ahead, while the call is judged and
/// receipted: for a single command in the workspace before the call is
/// even judged. Used or thrown away (another directory, a pipeline, a
/// denied call), it leaves no tmp behind, and what runs is the call as
/// judged, in the directory it named.
#[test]
fn a_sandbox_prepared_ahead_is_the_calls_own_and_leaves_nothing() {
    let env = env_with("", "");
    if !namespaces_or_skip(&env) {
        return;
    }
    std::fs::create_dir_all(env.ws.join("sub")).unwrap();
    std::fs::write(env.ws.join("sub/f.txt"), "x").unwrap();
    let tmp = env.root.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp_s = tmp.display().to_string();
    let shell = |args: Value| {
        let r = env.run_env(
            &["tool", "run", "shell", "--json", &args.to_string()],
            &[("TMPDIR", &tmp_s)],
        );
        let v: Value = serde_json::from_str(&r.stdout).unwrap_or(Value::Null);
        (r, v)
    };
    for (args, want) in [
        (
            serde_json::json!({"command": "pwd"}),
            std::fs::canonicalize(&env.ws)
                .unwrap()
                .display()
                .to_string(),
        ),
        (
            serde_json::json!({"command": "ls", "cwd": "sub"}),
            "f.txt".into(),
        ),
        (serde_json::json!({"command": "ls sub | wc -l"}), "1".into()),
    ] {
        let (r, v) = shell(args.clone());
        assert_eq!(r.code, 0, "{args}: {r:?}");
        assert_eq!(output(&v).trim(), want, "{args}: {v}");
        let left = calls_left_in(&tmp);
        assert!(left.is_empty(), "{args}: left in TMPDIR: {left:?}");
    }
    let (r, _) = shell(serde_json::json!({"command": "cat /etc/shadow"}));
    assert_ne!(r.code, 0, "{r:?}");
    let left = calls_left_in(&tmp);
    assert!(left.is_empty(), "a denied call: left in TMPDIR: {left:?}");
}

/// What is in `tmp` but the sweep's stamp (`latchclaw-swept-UID`, which
/// says when killed calls' dirs were last looked for, and stays): every
/// name, so anything a call left shows.
fn calls_left_in(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("latchclaw-swept-"))
        .collect()
}

/// latchclaw's own environment (where provider keys live) never reaches a
/// sandboxed program: it gets the variables set for it, nothing inherited.
#[test]
fn a_sandboxed_program_gets_none_of_latchclaws_environment() {
    let env = env_with("", "shell_allowlist = [\"./e.sh\"]");
    if !namespaces_or_skip(&env) {
        return;
    }
    script(&env, "e.sh", "#!/bin/sh\nenv\n");
    let r = env.run_env(
        &["tool", "run", "shell", "--json", r#"{"command": "./e.sh"}"#],
        &[("LATCHCLAW_TEST_PLANTED", "planted-value-0451")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("PATH="), "{r:?}");
    assert!(!r.stdout.contains("planted-value-0451"), "{r:?}");
    assert!(!r.stdout.contains("LATCHCLAW_HOME"), "{r:?}");
}

/// Out of processes (a call may fill the system's pid space, and another
/// conversation's call then cannot make a thread), a shell call fails with
/// the reason and latchclaw goes on: it never panics. As `nobody` with a
/// process limit of 2 (root ignores the limit).
#[test]
fn a_call_that_cannot_make_a_thread_fails_without_taking_latchclaw_down() {
    let env = env_with("", "");
    if !limits_for_nobody(&env) {
        return;
    }
    let r = limited_as_nobody(
        &env,
        &[
            "tool",
            "run",
            "shell",
            "--json",
            r#"{"command": "echo hi"}"#,
        ],
        2,
    );
    assert!(
        !r.stderr.contains("panicked") && !r.stderr.contains("internal error"),
        "{r:?}"
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {r:?}"));
    assert_eq!(v["success"], false, "{v}");
    assert_ne!(output(&v).trim(), "hi", "{v}");
    // Why: no thread, no process, or no namespaces to be had now.
    assert!(!v["error"].as_str().unwrap_or("").is_empty(), "{v}");
}

/// Whether this test can start latchclaw as `nobody` under a process
/// limit (root, util-linux's prlimit, the binary reachable by `nobody`);
/// hands `env`'s files to `nobody`.
fn limits_for_nobody(env: &Env) -> bool {
    nobody_policy(env).is_some()
}

/// [`limits_for_nobody`], and then what `policy show` says to `nobody`.
fn nobody_policy(env: &Env) -> Option<Run> {
    if rustix::process::geteuid().as_raw() != 0 {
        skip("not root: cannot start latchclaw as another user here");
        return None;
    }
    if !Path::new("/usr/bin/prlimit").exists() {
        skip("no /usr/bin/prlimit (util-linux)");
        return None;
    }
    // Without the limit first: the binary must be reachable by `nobody`.
    handed_to_nobody(env)
}

/// `args` run as `nobody` with at most `nproc` processes and threads.
fn limited_as_nobody(env: &Env, args: &[&str], nproc: u32) -> Run {
    use std::os::unix::process::CommandExt;
    let base = env.command(args);
    let mut c = std::process::Command::new("/usr/bin/prlimit");
    c.arg(format!("--nproc={nproc}"))
        .arg(base.get_program())
        .args(base.get_args())
        .current_dir(base.get_current_dir().unwrap_or(&env.root))
        .env("LATCHCLAW_HOME", &env.state)
        .env("HOME", &env.home)
        .uid(NOBODY)
        .gid(NOBODY);
    Run::from(c.output().unwrap())
}

/// One `tool run` at every process limit from 1 up to the first that lets
/// it through: below it the call fails saying why, whichever of
/// latchclaw's threads or processes the limit refused (before its child
/// started or after); latchclaw never panics and leaves nothing running.
/// The failures seen, for the caller.
#[cfg(any(feature = "code", feature = "plugins"))]
fn at_every_limit(env: &Env, tool: &str, args: &str, marker: &str, want: &str) -> Vec<String> {
    // The limit counts every task of the user's: one test at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut failures = Vec::new();
    for nproc in 1..=48 {
        // An exited latchclaw's last children are reaped by PID 1, which
        // may take its time; they count until then.
        let until = Instant::now() + Duration::from_secs(5);
        while tasks_of(NOBODY) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = limited_as_nobody(env, &["tool", "run", tool, "--json", args], nproc);
        assert!(
            !r.stderr.contains("panicked") && !r.stderr.contains("internal error"),
            "--nproc={nproc}: {r:?}"
        );
        let v: Value = serde_json::from_str(&r.stdout)
            .unwrap_or_else(|e| panic!("--nproc={nproc}: {e}: {r:?}"));
        // `nobody`'s only: other tests (and other users) run snippets too.
        let left: Vec<_> = processes_with(marker)
            .into_iter()
            .filter(|p| owned_by(&Path::new("/proc").join(p.pid.to_string()), NOBODY))
            .collect();
        assert!(left.is_empty(), "--nproc={nproc}: left running: {left:?}");
        if v["success"] == true {
            assert!(output(&v).contains(want), "--nproc={nproc}: {v}");
            return failures;
        }
        let error = v["error"].as_str().unwrap_or("").to_string();
        assert!(!error.is_empty(), "--nproc={nproc}: {v}");
        assert!(!output(&v).contains(want), "--nproc={nproc}: {v}");
        failures.push(error);
    }
    panic!("no limit up to 48 let the call run: {failures:?}");
}

/// How many processes, zombies included, run as `uid`.
#[cfg(any(feature = "code", feature = "plugins"))]
fn tasks_of(uid: u32) -> usize {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| owned_by(&e.path(), uid))
        .count()
}

/// Whether the process at `/proc/<pid>` (`dir`) runs as `uid`.
#[cfg(any(feature = "code", feature = "plugins"))]
fn owned_by(dir: &Path, uid: u32) -> bool {
    std::fs::read_to_string(dir.join("status")).is_ok_and(|st| {
        st.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .is_some_and(|real| real == uid.to_string())
    })
}

#[test]
#[cfg(feature = "code")]
fn code_run_fails_cleanly_at_every_process_limit() {
    if !Path::new("/usr/bin/python3").exists() {
        skip("no /usr/bin/python3");
        return;
    }
    let env = Env::new();
    env.config(
        "[security]\nautonomy = \"full\"\n[channels.cli]\ntools_allow = [\"code_run\"]\n\
         [tools.code_run]\nrisk = \"low\"\n",
    );
    let Some(policy) = nobody_policy(&env) else {
        return;
    };
    // Where `nobody` gets namespaces, a snippet that runs runs inside its
    // own PID namespace (its init 1, itself 2), whatever the limit: never
    // behind fewer walls for want of processes.
    // (`stdout` as the JSON of the output carries it.)
    let want = if policy.stdout.contains("\n  namespaces: ") {
        "42 nproc-code 2\\n"
    } else {
        "42 nproc-code"
    };
    let args =
        r#"{"language": "python", "code": "import os\nprint(6 * 7, 'nproc-code', os.getpid())"}"#;
    let failures = at_every_limit(&env, "code_run", args, "snippet.py", want);
    eprintln!("code_run below the limit: {failures:?}");
}

#[test]
#[cfg(feature = "plugins")]
fn a_plugin_fails_cleanly_at_every_process_limit() {
    let env = Env::new();
    env.config("[security]\nautonomy = \"full\"\n");
    let dir = env.root.join("src-limited");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("manifest.toml"),
        "name = \"limited\"\nversion = \"1.0.0\"\ncapabilities = [\"tool\"]\n\
         [[tools]]\nname = \"limited\"\ndescription = \"d\"\ncommand = \"limited.sh\"\n\
         schema = { type = \"object\", properties = {} }\nrisk = \"low\"\nread_only = true\n",
    )
    .unwrap();
    let script = dir.join("limited.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\nprintf '{\"output\": \"ran nproc-plugin\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = env.run(&["plugin", "install", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    if !limits_for_nobody(&env) {
        return;
    }
    let failures = at_every_limit(&env, "limited", "{}", "limited.sh", "ran nproc-plugin");
    eprintln!("the plugin below the limit: {failures:?}");
}
