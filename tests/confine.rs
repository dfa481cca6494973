//! Kernel confinement (Landlock and the seccomp socket filter) of shell
//! children, through the library API the shell runner uses: real programs
//! spawned with `Prepared::install`. Each denial is checked against an
//! unconfined control run, so a test cannot pass because the program fails
//! anyway.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A pre_exec hook that leaks a descriptor (libc dup2).
#![allow(unsafe_code)]

mod common;

use common::skip;
use latchclaw::security::confine::{self, Mode, Prepared, Spec};
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A temporary "home" with a secret, a state dir and a workspace inside.
struct Fx {
    root: PathBuf,
    home: PathBuf,
    ws: PathBuf,
    state: PathBuf,
    tmp: PathBuf,
}

impl Drop for Fx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn fx() -> Fx {
    let root = common::temp_root("latchclaw-confine");
    let home = root.join("home");
    let ws = home.join("ws");
    let state = home.join(".latchclaw");
    let tmp = root.join("call-tmp");
    for d in [&ws, &state, &tmp] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join("secret.txt"), "top secret\n").unwrap();
    std::fs::write(state.join("config.toml"), "api_key = \"sk-test\"\n").unwrap();
    std::fs::write(ws.join("notes.txt"), "pear\napple\nfig\n").unwrap();
    Fx {
        home,
        ws,
        state,
        tmp,
        root,
    }
}

impl Fx {
    fn spec(&self, mode: Mode, writable: bool) -> Spec {
        Spec {
            workspace: self.ws.clone(),
            workspace_writable: writable,
            tmp_dir: Some(self.tmp.clone()),
            mode,
            state_dir: Some(self.state.clone()),
            secret_allow: Default::default(),
            forbidden: Vec::new(),
            egress: None,
            cwd: None,
            read_only_dirs: Vec::new(),
        }
    }

    /// Landlock and seccomp alone: these tests hold the walls below the
    /// namespaces (tests/sandbox.rs holds the namespaces).
    fn prepared(&self, writable: bool) -> Prepared {
        let p = confine::prepare(&self.spec(Mode::Required, writable))
            .unwrap()
            .without_namespaces();
        assert!(p.is_confined() && p.filters_sockets());
        p
    }

    /// The control: the same program with no kernel sandbox.
    fn unconfined(&self) -> Prepared {
        confine::prepare(&self.spec(Mode::Off, true)).unwrap()
    }

    /// Runs `sh -c script` the way the shell runner does.
    fn sh(&self, p: &Prepared, script: &str) -> Out {
        self.run(p, "/bin/sh", &["-c", script])
    }

    fn run(&self, p: &Prepared, program: &str, args: &[&str]) -> Out {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .process_group(0);
        p.install(&mut cmd);
        let o = cmd.output().unwrap();
        Out {
            ok: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

#[derive(Debug)]
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Out {
    /// Failed with EACCES ("Permission denied").
    fn denied(&self) -> bool {
        !self.ok && self.stderr.contains("Permission denied")
    }
}

/// The ABI, or `None` after `skip` said why the test does not run.
fn abi_at_least(min: u32) -> Option<u32> {
    let st = confine::status();
    match st.abi {
        Some(abi) if abi >= min => Some(abi),
        Some(abi) => {
            skip(format!("needs Landlock ABI {min}, this kernel has {abi}"));
            None
        }
        None => {
            skip(format!(
                "this kernel has no Landlock ({})",
                st.unavailable.unwrap_or("?")
            ));
            None
        }
    }
}

#[test]
fn reads_outside_the_workspace_fail_with_eacces() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let (open, boxed) = (f.unconfined(), f.prepared(true));
    let secret = f.home.join("secret.txt").display().to_string();
    let config = f.state.join("config.toml").display().to_string();
    let home = f.home.display().to_string();
    for (program, args) in [
        ("cat", vec![secret.as_str()]),
        ("cat", vec![config.as_str()]),
        ("ls", vec![home.as_str()]),
        ("cat", vec!["/etc/passwd"]),
    ] {
        let control = f.run(&open, program, &args);
        assert!(control.ok, "control {program} {args:?}: {control:?}");
        let r = f.run(&boxed, program, &args);
        assert!(r.denied(), "{program} {args:?}: {r:?}");
        assert!(!r.stdout.contains("secret") && !r.stdout.contains("sk-test"));
    }
}

#[test]
fn writes_follow_the_workspace_mode_and_never_leave_it() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let rw = f.prepared(true);
    let r = f.sh(
        &rw,
        "echo hi > made.txt && mkdir d && echo x > d/y && mv d/y z",
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("made.txt")).unwrap(),
        "hi\n"
    );
    assert!(f.ws.join("z").exists());
    let r = f.sh(&rw, "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"");
    assert!(r.ok && r.stdout == "t\n", "{r:?}");
    let outside = [
        f.home.join("out.txt"),
        f.state.join("ESTOP"),
        PathBuf::from(format!("/tmp/latchclaw-confine-{}", std::process::id())),
    ];
    for p in &outside {
        let r = f.sh(&rw, &format!("echo x > '{}'", p.display()));
        assert!(r.denied(), "{}: {r:?}", p.display());
        assert!(!p.exists(), "{} was created", p.display());
    }
    let r = f.sh(
        &rw,
        &format!("echo x >> '{}'", f.state.join("config.toml").display()),
    );
    assert!(r.denied(), "{r:?}");

    let ro = f.prepared(false);
    let r = f.sh(&ro, "echo hi > ro.txt");
    assert!(r.denied(), "{r:?}");
    assert!(!f.ws.join("ro.txt").exists());
    let r = f.sh(&ro, "echo more >> notes.txt");
    assert!(r.denied(), "{r:?}");
    let r = f.run(&ro, "cat", &["notes.txt"]);
    assert!(r.ok && r.stdout.starts_with("pear"), "{r:?}");
    // The control: the same write with no sandbox succeeds.
    assert!(f.sh(&f.unconfined(), "echo hi > ro.txt").ok);
}

#[test]
fn tcp_connect_to_a_local_listener_is_refused() {
    if abi_at_least(4).is_none() {
        return;
    }
    let f = fx();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port}");
    let control = f.run(&f.unconfined(), "bash", &["-c", &script]);
    assert!(control.ok, "{control:?}");
    assert!(listener.accept().is_ok(), "the control connection arrived");
    let r = f.run(&f.prepared(true), "bash", &["-c", &script]);
    assert!(r.denied(), "{r:?}");
    assert_eq!(
        listener.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a confined connection reached the listener"
    );
}

#[test]
fn signals_to_processes_outside_the_sandbox_are_refused() {
    if abi_at_least(6).is_none() {
        return;
    }
    let f = fx();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let boxed = f.prepared(true);
    let me = std::process::id().to_string();
    let control = f.run(&f.unconfined(), "kill", &["-0", &me]);
    assert!(control.ok, "{control:?}");
    let r = f.sh(&boxed, &format!("kill -0 {me}"));
    assert!(!r.ok && r.stderr.contains("not permitted"), "{r:?}");
    let r = f.sh(&boxed, &format!("kill -TERM {}", victim.id()));
    assert!(!r.ok && r.stderr.contains("not permitted"), "{r:?}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        victim.try_wait().unwrap().is_none(),
        "the victim was killed"
    );
    // Inside its own domain the command still manages its children.
    let r = f.sh(&boxed, "sleep 10 & kill $! ; wait $! ; echo $?");
    assert!(r.ok && r.stdout.trim() == "143", "{r:?}");
    victim.kill().unwrap();
    victim.wait().unwrap();
}

#[test]
fn the_parents_environ_stays_closed_while_ordinary_programs_run() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let boxed = f.prepared(true);
    // This test process stands for latchclaw: the parent, outside the domain.
    let environ = format!("/proc/{}/environ", std::process::id());
    let control = f.run(&f.unconfined(), "cat", &[&environ]);
    assert!(control.ok && !control.stdout.is_empty(), "{control:?}");
    let r = f.run(&boxed, "cat", &[&environ]);
    assert!(r.denied(), "{r:?}");
    assert!(r.stdout.is_empty());
    let r = f.run(
        &boxed,
        "cat",
        &[&format!("/proc/{}/maps", std::process::id())],
    );
    assert!(r.denied(), "{r:?}");
    // Its own /proc entries stay readable.
    let r = f.run(&boxed, "cat", &["/proc/self/environ"]);
    assert!(r.ok && r.stdout.contains("PATH=/usr/local/bin"), "{r:?}");
    // Root's children lose the two capabilities that read environ past
    // Landlock (CAP_SYS_ADMIN 21, CAP_PERFMON 38), and gain no privileges.
    let r = f.run(&boxed, "cat", &["/proc/self/status"]);
    let field = |name: &str| {
        let line = r.stdout.lines().find(|l| l.starts_with(name)).unwrap();
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
    };
    for caps in ["CapEff:", "CapPrm:", "CapBnd:"] {
        assert_eq!(field(caps) & (1 << 21 | 1 << 38), 0, "{caps} {r:?}");
    }
    assert_eq!(field("NoNewPrivs:"), 1);

    for (script, want) in [
        ("ls", "notes.txt"),
        ("cat notes.txt", "pear"),
        ("sort notes.txt", "apple\nfig\npear"),
        ("git --version", "git version"),
        ("date +%Y", "20"),
        ("wc -l < notes.txt", "3"),
        ("file notes.txt", "text"),
        ("echo quiet > /dev/null && echo loud > /dev/stdout", "loud"),
        ("head -c 16 /dev/urandom | wc -c", "16"),
        ("git init -q && git status --short", "?? notes.txt"),
    ] {
        let r = f.sh(&boxed, script);
        assert!(r.ok && r.stdout.contains(want), "{script}: {r:?}");
    }
}

/// A system python3 (the sandbox cannot run one from a home directory), or
/// `None` after `skip` said why the test does not run.
fn python() -> Option<&'static str> {
    let found = ["/usr/bin/python3", "/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        skip("no python3 in /usr/bin, /bin or /usr/local/bin");
    }
    found
}

/// Each probe prints `name=ok` or `name=<errno name>`.
const NET_PY: &str = r#"
import asyncio, ctypes, errno, os, socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
def raw(nr, *args):
    r = libc.syscall(nr, *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"ping", ("127.0.0.1", port))
def udp6():
    socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"hello")
def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
def pair():
    a, b = socket.socketpair()
    a.sendall(b"x")
    assert b.recv(1) == b"x"
def pair_dgram():
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
def event_loop():
    asyncio.run(asyncio.sleep(0))
def uring():
    os.close(raw(425, 8, ctypes.create_string_buffer(120)))
def getfd():
    os.close(raw(438, os.pidfd_open(os.getpid()), 0, 0))
for name, probe in [("udp", udp), ("udp6", udp6), ("unix", unix), ("netlink", netlink),
                    ("pair", pair), ("pair_dgram", pair_dgram), ("event_loop", event_loop),
                    ("uring", uring), ("getfd", getfd)]:
    try:
        probe()
        print(f"{name}=ok")
    except OSError as e:
        print(f"{name}={errno.errorcode.get(e.errno, e.errno)}")
"#;

/// The probes' results by name.
fn results(out: &Out) -> std::collections::HashMap<String, String> {
    assert!(out.ok, "{out:?}");
    out.stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The red team's case: Landlock below ABI 9/10 leaves UDP and pathname UNIX
/// sockets open; the socket filter closes them on every kernel.
#[test]
fn udp_unix_sockets_and_io_uring_are_refused_by_the_socket_filter() {
    if abi_at_least(1).is_none() {
        return;
    }
    let Some(py) = python() else {
        return;
    };
    let f = fx();
    std::fs::write(f.ws.join("net.py"), NET_PY).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let port = udp.local_addr().unwrap().port().to_string();
    // Outside the workspace, as docker.sock or the D-Bus socket would be.
    let path = f.home.join("daemon.sock");
    let unix = UnixListener::bind(&path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let path = path.display().to_string();
    let args = ["net.py", port.as_str(), path.as_str()];

    let control = results(&f.run(&f.unconfined(), py, &args));
    for probe in [
        "udp",
        "udp6",
        "unix",
        "netlink",
        "pair",
        "pair_dgram",
        "event_loop",
        "getfd",
    ] {
        assert_eq!(control[probe], "ok", "control {probe}: {control:?}");
    }
    let mut buf = [0u8; 16];
    assert_eq!(
        udp.recv(&mut buf).unwrap(),
        4,
        "the control datagram arrived"
    );
    let (mut conn, _) = unix.accept().expect("the control connection arrived");
    conn.set_nonblocking(false).unwrap();
    let mut got = String::new();
    conn.read_to_string(&mut got).unwrap();
    assert_eq!(got, "hello");

    let r = results(&f.run(&f.prepared(true), py, &args));
    for (probe, want) in [
        ("udp", "EACCES"),
        ("udp6", "EACCES"),
        ("unix", "EACCES"),
        ("netlink", "EACCES"),
        ("pair_dgram", "EACCES"),
        ("uring", "ENOSYS"),
        ("getfd", "EPERM"),
        // Local plumbing stays: a stream pair, and asyncio's self-pipe on one.
        ("pair", "ok"),
        ("event_loop", "ok"),
    ] {
        assert_eq!(r[probe], want, "{probe}: {r:?}");
    }
    assert_eq!(
        udp.recv(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a confined datagram arrived"
    );
    assert_eq!(
        unix.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a confined connection reached the UNIX listener"
    );
    // io_uring's control: a kernel with io_uring disabled says so itself.
    if control["uring"] != "ok" {
        eprintln!(
            "note: io_uring is unavailable here even unconfined ({})",
            control["uring"]
        );
    }
}

/// A socket the parent holds without close-on-exec (as latchclaw might have
/// inherited one) would pass the socket filter by already existing: the
/// command gets stdin, stdout and stderr only.
#[test]
fn an_inherited_socket_does_not_reach_the_command() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_nonblocking(true).unwrap();
    let leak = UdpSocket::bind("127.0.0.1:0").unwrap();
    leak.connect(rx.local_addr().unwrap()).unwrap();
    let run = |p: &Prepared| {
        use std::os::fd::AsRawFd;
        let fd = leak.as_raw_fd();
        let mut cmd = Command::new("bash");
        cmd.args(["-c", "echo leak >&200; ls /proc/self/fd"])
            .current_dir(&f.ws)
            .stdin(Stdio::null());
        // SAFETY: dup2 is async-signal-safe. Registered before `install`,
        // so it runs first: fd 200 is open, not close-on-exec, when the
        // sandbox's hook runs. (A low number could be one std::process
        // itself uses in the child, such as its exec-error pipe, with
        // other tests running alongside.)
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 200) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        p.install(&mut cmd);
        let o = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        (stdout, stderr, rx.recv(&mut [0u8; 8]).is_ok())
    };
    let (stdout, _, arrived) = run(&f.unconfined());
    assert!(arrived && stdout.contains("200\n"), "control: {stdout}");
    let (stdout, stderr, arrived) = run(&f.prepared(true));
    assert!(!arrived, "a confined command wrote to the inherited socket");
    assert!(stderr.contains("Bad file descriptor"), "{stderr}");
    assert_eq!(stdout, "0\n1\n2\n3\n");
}

/// The same refusal from a program with no interpreter: bash's /dev/udp.
#[test]
fn bash_udp_to_a_local_listener_never_arrives() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let script = format!(
        "echo ping > /dev/udp/127.0.0.1/{}",
        udp.local_addr().unwrap().port()
    );
    let control = f.run(&f.unconfined(), "bash", &["-c", &script]);
    assert!(control.ok, "{control:?}");
    let mut buf = [0u8; 16];
    assert_eq!(udp.recv(&mut buf).unwrap(), 5);
    let r = f.run(&f.prepared(true), "bash", &["-c", &script]);
    assert!(r.denied(), "{r:?}");
    assert_eq!(
        udp.recv(&mut buf).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "a confined datagram arrived"
    );
}

/// Every program of the default allowlist, in ordinary use, inside the whole
/// sandbox (Landlock and the socket filter). `ls -l` looks owners up through
/// glibc, which asks nscd or systemd-userdb over a UNIX socket first: the
/// refused socket must read as "no daemon", not as an error.
#[test]
fn allowlisted_programs_work_under_the_socket_filter() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let boxed = f.prepared(true);
    std::fs::create_dir_all(f.ws.join("src")).unwrap();
    std::fs::write(f.ws.join("src/main.rs"), "// TODO: x\nfn main() {}\n").unwrap();
    let git = "git -c user.name=T -c user.email=t@example.invalid";
    let setup = format!(
        "git init -q && git add . && {git} commit -qm 'first commit' && echo more >> notes.txt"
    );
    let r = f.sh(&boxed, &setup);
    assert!(r.ok, "{r:?}");
    let mut cases = vec![
        ("ls -l", "notes.txt"),
        ("ls -la src", "main.rs"),
        ("git status --short", " M notes.txt"),
        ("git log --oneline", "first commit"),
        ("git diff", "+more"),
        ("LANG=C sort notes.txt", "apple\nfig\nmore\npear\n"),
        ("grep -r TODO .", "./src/main.rs:// TODO: x"),
        ("find . -name '*.rs'", "./src/main.rs"),
        ("TZ=UTC date -d @0 +%Y", "1970"),
        ("du -s src", "\tsrc"),
        ("df -P .", "%"),
        ("stat -c %s notes.txt", "20"),
        ("file notes.txt", "notes.txt: ASCII text"),
        (
            "mkdir -p d/e && touch d/e/t && cp notes.txt d/n && mv d/n d/m && echo hi | tee d/tee.txt && ls d",
            "hi\ne\nm\ntee.txt",
        ),
        (
            "head -n 1 notes.txt && tail -n 1 notes.txt && wc -l < notes.txt",
            "pear\nmore\n4",
        ),
        ("cut -c1-2 notes.txt | tr a-z A-Z | uniq | sed -n 2p", "AP"),
        ("diff notes.txt d/m; echo $?", "0"),
        (
            "which ls && basename /a/b.txt .txt && dirname /a/b && expr 2 + 3",
            "b\n/a\n5",
        ),
        ("printf '%s-' x y && pwd && true && echo ok", "x-y-/"),
    ];
    if std::path::Path::new("/usr/bin/rg").exists() {
        cases.push(("rg -n TODO", "src/main.rs:1:// TODO: x"));
    }
    for (script, want) in cases {
        let r = f.sh(&boxed, script);
        assert!(r.ok && r.stdout.contains(want), "{script}: {r:?}");
        assert!(!r.stderr.contains("ermission denied"), "{script}: {r:?}");
    }
}

/// `main` makes latchclaw non-dumpable: `/proc/<pid>/environ` (the provider
/// key) then belongs to root, so another process of the same user cannot
/// read it. Root itself (CAP_SYS_PTRACE) still can; Landlock is what keeps a
/// shell child out, whatever its uid (the test above).
#[test]
fn the_runtime_is_not_dumpable() {
    if !rustix::process::geteuid().is_root() {
        return skip("needs root to run both processes as another user");
    }
    let f = fx();
    const NOBODY: u32 = 65534;
    std::os::unix::fs::chown(&f.root, Some(NOBODY), Some(NOBODY)).unwrap();
    let spawn_as_nobody = |cmd: &mut Command| {
        cmd.env_clear()
            .env("LATCHCLAW_HOME", f.root.join("state"))
            .env("HOME", &f.root)
            .env("LATCHCLAW_TEST_KEY", "sk-not-for-you")
            .uid(NOBODY)
            .gid(NOBODY)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    };
    let read_as_nobody = |pid: u32| {
        Command::new("cat")
            .arg(format!("/proc/{pid}/environ"))
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap()
    };
    // The control: an ordinary (dumpable) process of the same user.
    let mut sleeper = spawn_as_nobody(Command::new("sleep").arg("30")).unwrap();
    let o = read_as_nobody(sleeper.id());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("sk-not-for-you"),
        "{o:?}"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // `agent` with stdin piped waits for the message: alive until stdin closes.
    let mut rt = match spawn_as_nobody(Command::new(env!("CARGO_BIN_EXE_latchclaw")).arg("agent")) {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return skip(format!(
                "user {NOBODY} cannot execute the built binary here ({e})"
            ));
        }
        Err(e) => panic!("{e}"),
    };
    let environ = format!("/proc/{}/environ", rt.id());
    let mut owner = None;
    // Set by main() first thing; poll until the process got there.
    common::eventually(Duration::from_secs(5), || {
        use std::os::unix::fs::MetadataExt;
        owner = std::fs::metadata(&environ).ok().map(|m| m.uid());
        owner == Some(0)
    });
    assert_eq!(owner, Some(0), "latchclaw's /proc entries stayed its own");
    let o = read_as_nobody(rt.id());
    assert!(!o.status.success(), "{o:?}");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("sk-not-for-you"));
    // Root is not stopped by this.
    let mut as_root = String::new();
    std::fs::File::open(&environ)
        .unwrap()
        .read_to_string(&mut as_root)
        .unwrap();
    assert!(as_root.contains("sk-not-for-you"));
    drop(rt.stdin.take());
    rt.wait().unwrap();
}

/// What confinement adds to one shell call, printed for the record
/// (`cargo test --test confine cost -- --nocapture`); medians, as the
/// machine may be shared.
#[test]
fn cost_of_prepare_and_install() {
    if abi_at_least(1).is_none() {
        return;
    }
    let f = fx();
    let spec = f.spec(Mode::Required, true);
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (mut prepare, mut install) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let t = Instant::now();
        let p = confine::prepare(&spec).unwrap();
        prepare.push(t.elapsed());
        let mut cmd = Command::new("true");
        let t = Instant::now();
        p.install(&mut cmd);
        install.push(t.elapsed());
    }
    let spawn = |p: Option<&Prepared>| {
        let mut v = Vec::new();
        for _ in 0..50 {
            let mut cmd = Command::new("/bin/true");
            if let Some(p) = p {
                p.install(&mut cmd);
            }
            let t = Instant::now();
            assert!(cmd.status().unwrap().success());
            v.push(t.elapsed());
        }
        median(v)
    };
    let p = confine::prepare(&spec).unwrap();
    let (prepare, install) = (median(prepare), median(install));
    let (plain, confined) = (spawn(None), spawn(Some(&p)));
    println!(
        "confine (medians): prepare {} µs, install {} µs; spawn+wait /bin/true {} µs plain, {} µs confined",
        prepare.as_micros(),
        install.as_micros(),
        plain.as_micros(),
        confined.as_micros()
    );
    assert!(prepare + install < Duration::from_millis(20), "{prepare:?}");
}
