//! Kernel confinement (Landlock) of shell children, through the library API
//! the shell runner uses: real programs spawned with `Prepared::install`.
//! Each denial is checked against an unconfined control run, so a test
//! cannot pass because the program fails anyway.

use latchclaw::security::confine::{self, Mode, Prepared, Spec};
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

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
    let root = std::env::temp_dir().join(format!(
        "latchclaw-confine-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&root);
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
    let root = std::fs::canonicalize(&root).unwrap();
    Fx {
        home: root.join("home"),
        ws: root.join("home/ws"),
        state: root.join("home/.latchclaw"),
        tmp: root.join("call-tmp"),
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
        }
    }

    fn prepared(&self, writable: bool) -> Prepared {
        let p = confine::prepare(&self.spec(Mode::Required, writable)).unwrap();
        assert!(p.is_confined());
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

/// The ABI, or `None` after saying why the test does not run.
fn abi_at_least(min: u32) -> Option<u32> {
    let st = confine::status();
    match st.abi {
        Some(abi) if abi >= min => Some(abi),
        Some(abi) => {
            eprintln!("SKIPPED: needs Landlock ABI {min}, this kernel has {abi}");
            None
        }
        None => {
            eprintln!(
                "SKIPPED: this kernel has no Landlock ({})",
                st.unavailable.unwrap_or("?")
            );
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

/// `main` makes latchclaw non-dumpable: `/proc/<pid>/environ` (the provider
/// key) then belongs to root, so another process of the same user cannot
/// read it. Root itself (CAP_SYS_PTRACE) still can; Landlock is what keeps a
/// shell child out, whatever its uid (the test above).
#[test]
fn the_runtime_is_not_dumpable() {
    // SAFETY: geteuid only returns an integer.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root to run both processes as another user");
        return;
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
            eprintln!("SKIPPED: user {NOBODY} cannot execute the built binary here ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let environ = format!("/proc/{}/environ", rt.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut owner = None;
    while Instant::now() < deadline {
        use std::os::unix::fs::MetadataExt;
        // Set by main() first thing; poll until the process got there.
        owner = std::fs::metadata(&environ).ok().map(|m| m.uid());
        if owner == Some(0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
