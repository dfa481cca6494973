//! `service install|start|stop|status|uninstall` on the real binary: the
//! printed unit and crontab line, `systemd-analyze verify` on that unit,
//! and every command against a fake systemctl (`LATCHCLAW_SYSTEMCTL`) that
//! records its argv, up and unreachable.
#![cfg(feature = "gateway")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BIN, Env, Run};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const UNIT: &str = "latchclaw-gateway.service";

/// The binary hard-linked under a directory whose name has spaces and `%`
/// (one that would be a specifier), which the unit must quote and escape.
fn odd_binary() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("service-{}", std::process::id()))
            .join("bin dir %i 100%");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("latchclaw");
        let _ = std::fs::remove_file(&exe);
        if std::fs::hard_link(BIN, &exe).is_err() {
            std::fs::copy(BIN, &exe).unwrap();
        }
        exe
    })
}

/// A systemctl that appends its arguments to `$FAKE_SYSTEMCTL_LOG`;
/// `FAKE_DOWN` makes it fail to reach the manager, `FAKE_FAIL=VERB` fail
/// that verb, `FAKE_STATE` is what is-active says.
fn fake_systemctl() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let p = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fake-systemctl-{}", std::process::id()));
        std::fs::write(
            &p,
            r#"#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_SYSTEMCTL_LOG"
if [ "$2" = show-environment ] && [ -n "$FAKE_DOWN" ]; then
  echo "Failed to connect to bus: No medium found" >&2; exit 1
fi
if [ "$2" = "$FAKE_FAIL" ]; then echo "Failed to $2 unit: boom" >&2; exit 1; fi
state="${FAKE_STATE:-active}"
case "$2" in
  show-environment) echo HOME=/nowhere ;;
  is-active) echo "$state"; [ "$state" = active ] || exit 3 ;;
  show) printf 'LoadState=loaded\nUnitFileState=enabled\nActiveState=%s\nSubState=running\nMainPID=4242\nExecMainStartTimestamp=Sun 2026-01-04 10:00:00 UTC\nNRestarts=1\n' "$state" ;;
esac
exit 0
"#,
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    })
}

struct Svc {
    env: Env,
    xdg: PathBuf,
    log: PathBuf,
}

impl Svc {
    fn new() -> Svc {
        let env = Env::new();
        env.config("");
        let xdg = env.root.join("xdg config");
        let log = env.root.join("systemctl.log");
        Svc { env, xdg, log }
    }

    fn unit_path(&self) -> PathBuf {
        self.xdg.join("systemd/user").join(UNIT)
    }

    /// `latchclaw ARGS` against the fake systemctl, with `extra` set.
    fn run(&self, args: &[&str], extra: &[(&str, &str)]) -> Run {
        let mut e = vec![
            ("XDG_CONFIG_HOME", self.xdg.to_str().unwrap()),
            ("LATCHCLAW_SYSTEMCTL", fake_systemctl().to_str().unwrap()),
            ("FAKE_SYSTEMCTL_LOG", self.log.to_str().unwrap()),
        ];
        e.extend_from_slice(extra);
        self.env.run_env(args, &e)
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }
}

/// `--print`'s output split into the unit and the crontab line.
fn printed(r: &Run) -> (String, String) {
    let (unit, cron) = r
        .stdout
        .split_once("# Or, where systemd is not running, this line in `crontab -e`:\n")
        .unwrap_or_else(|| panic!("{r:?}"));
    let unit = unit.split_once('\n').unwrap().1.trim_end().to_string() + "\n";
    (unit, cron.trim_end().to_string())
}

/// Runs `exe` like the harness runs the binary, in `env`'s home.
fn run_exe(env: &Env, exe: &Path, args: &[&str], extra: &[(&str, &str)]) -> Run {
    let mut c = Command::new(exe);
    c.args(args)
        .env("LATCHCLAW_HOME", &env.state)
        .env("HOME", &env.home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("LATCHCLAW_SYSTEMCTL")
        .stdin(Stdio::null());
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap().into()
}

#[test]
fn print_shows_the_unit_and_a_crontab_line_and_touches_nothing() {
    let env = Env::new();
    let state = env.root.join("state 50%");
    let state_s = state.to_str().unwrap();
    let cfg = env.root.join("my config.toml");
    std::fs::write(&cfg, format!("workspace_dir = {}\n", common::lit(&env.ws))).unwrap();
    let exe = odd_binary();
    let r = run_exe(
        &env,
        exe,
        &[
            "service",
            "install",
            "--print",
            "--bind",
            "127.0.0.1:8099",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[("LATCHCLAW_HOME", state_s)],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "# {}/.config/systemd/user/{UNIT}\n",
            env.home.display()
        )),
        "{r:?}"
    );
    let (unit, cron) = printed(&r);
    let exe_s = exe.to_str().unwrap();
    let exe_unit = exe_s.replace('%', "%%");
    let state_unit = state_s.replace('%', "%%");
    let cfg_s = cfg.to_str().unwrap();
    for line in [
        format!(
            "ExecStart=\"{exe_unit}\" \"gateway\" \"--config\" \"{cfg_s}\" \"--bind\" \"127.0.0.1:8099\""
        ),
        format!("Environment=\"LATCHCLAW_HOME={state_unit}\""),
        format!(
            "ReadWritePaths=\"{state_unit}\" \"{}\"",
            env.ws.to_str().unwrap()
        ),
        "ProtectSystem=strict".into(),
        "WantedBy=default.target".into(),
    ] {
        assert!(
            unit.lines().any(|l| l == line),
            "missing {line:?} in\n{unit}"
        );
    }
    let q = |s: &str| format!("'{}'", s.replace('%', "\\%"));
    assert_eq!(
        cron,
        format!(
            "@reboot cd {st} && LATCHCLAW_HOME={st} exec {exe} gateway --config {cfg} --bind 127.0.0.1:8099 >>{log} 2>&1",
            st = q(state_s),
            exe = q(exe_s),
            cfg = q(cfg_s),
            log = q(&format!("{state_s}/gateway.log")),
        )
    );
    // The words sh makes of it once cron has turned `\%` into `%`.
    let words = Command::new("sh")
        .args([
            "-c",
            &format!(
                "set -- {}; printf '%s\\n' \"$@\"",
                cron.strip_prefix("@reboot ")
                    .unwrap()
                    .replace("\\%", "%")
                    .replace(" && ", " ")
                    .replace(" >>", " ")
                    .replace(" 2>&1", "")
            ),
        ])
        .output()
        .unwrap();
    let words = String::from_utf8(words.stdout).unwrap();
    let words: Vec<&str> = words.lines().collect();
    assert_eq!(
        words,
        [
            "cd",
            state_s,
            &format!("LATCHCLAW_HOME={state_s}"),
            "exec",
            exe_s,
            "gateway",
            "--config",
            cfg_s,
            "--bind",
            "127.0.0.1:8099",
            &format!("{state_s}/gateway.log"),
        ]
    );
    // Nothing written: no unit directory, no state directory.
    assert!(!env.home.join(".config").exists());
    assert!(!state.exists());
}

#[test]
fn the_printed_unit_passes_systemd_analyze_verify_and_a_typo_fails_it() {
    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        return common::skip("systemd-analyze is not installed");
    };
    let env = Env::new();
    env.config("");
    let exe = odd_binary();
    let r = run_exe(&env, exe, &["service", "install", "--print"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let (unit, _) = printed(&r);
    let runtime = env.root.join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let verify = |text: &str, dir: &str| -> (bool, String) {
        let d = env.root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join(UNIT);
        std::fs::write(&f, text).unwrap();
        let out = Command::new(analyze)
            .args(["--user", "verify", "--man=no"])
            .arg(&f)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("HOME", &env.home)
            .env("SYSTEMD_LOG_COLOR", "0")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, warnings) = verify(&unit, "good");
    assert!(ok && warnings.trim().is_empty(), "{warnings}\n{unit}");
    // The check bites: a misspelt directive is a warning; an unescaped `%`
    // or an unquoted space in the program's path names another program.
    let (_, warnings) = verify(&unit.replace("ProtectSystem=", "ProtectSytem="), "typo");
    assert!(warnings.contains("ProtectSytem"), "{warnings}");
    let (ok, warnings) = verify(&unit.replace("%%i", "%i"), "percent");
    assert!(!ok && warnings.contains("is not executable"), "{warnings}");
    let exec = unit.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    let (ok, warnings) = verify(&unit.replacen(exec, &exec.replacen('"', "", 2), 1), "space");
    assert!(!ok && warnings.contains("is not executable"), "{warnings}");
}

#[test]
fn install_without_systemd_says_so_and_writes_nothing() {
    let s = Svc::new();
    let r = s.run(&["service", "install"], &[("FAKE_DOWN", "1")]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("systemd is not available for this user")
            && r.stderr.contains("Failed to connect to bus")
            && r.stderr.contains("latchclaw service install --print"),
        "{r:?}"
    );
    assert!(!s.xdg.exists(), "nothing half-written");
    assert!(!s.env.ws.join("x").exists());
    assert_eq!(s.calls(), ["--user show-environment"]);
    for cmd in ["start", "stop", "status", "uninstall"] {
        let r = s.run(&["service", cmd], &[("FAKE_DOWN", "1")]);
        assert_eq!(r.code, 3, "{cmd}: {r:?}");
        assert!(
            r.stderr.contains("systemd is not available for this user"),
            "{cmd}: {r:?}"
        );
    }
    assert!(
        s.calls().iter().all(|c| c == "--user show-environment"),
        "{:?}",
        s.calls()
    );
}

#[test]
fn install_on_a_machine_not_booted_with_systemd_says_so() {
    if Path::new("/run/systemd/system").exists() {
        return common::skip(
            "this machine runs systemd: the probe's refusal is not reachable here",
        );
    }
    let env = Env::new();
    env.config("");
    let xdg = env.root.join("xdg");
    let r = env.run_env(
        &["service", "install"],
        &[("XDG_CONFIG_HOME", xdg.to_str().unwrap())],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("/run/systemd/system is missing")
            && r.stderr.contains("service install --print"),
        "{r:?}"
    );
    assert!(!xdg.exists());
}

#[test]
fn install_writes_the_unit_reloads_and_enables_and_keeps_a_differing_unit() {
    let s = Svc::new();
    let printed_unit = printed(&s.run(&["service", "install", "--print"], &[])).0;
    let r = s.run(&["service", "install"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("written; enabled"), "{r:?}");
    let path = s.unit_path();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, printed_unit);
    assert!(
        text.contains(&format!("ExecStart=\"{BIN}\" \"gateway\"\n")),
        "{text}"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert_eq!(
        s.calls(),
        [
            "--user show-environment",
            "--user daemon-reload",
            format!("--user enable {UNIT}").as_str()
        ]
    );
    // No temporary file left beside it.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [UNIT]);

    let r = s.run(&["service", "install"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("unchanged"), "{r:?}");

    // Another --bind: a different unit, kept without --force.
    let r = s.run(&["service", "install", "--bind", "127.0.0.1:9"], &[]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("exists and differs") && r.stderr.contains("--force"),
        "{r:?}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let r = s.run(&["service", "install", "--bind", "[::1]:9", "--force"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("replaced"), "{r:?}");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"gateway\" \"--bind\" \"[::1]:9\"\n")
    );
}

#[test]
fn a_failing_systemctl_step_is_an_error_quoting_it() {
    let s = Svc::new();
    let r = s.run(&["service", "install"], &[("FAKE_FAIL", "enable")]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "`systemctl --user enable {UNIT}` failed: Failed to enable unit: boom"
        )),
        "{r:?}"
    );
    let r = s.run(&["service", "start"], &[("FAKE_FAIL", "start")]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("Failed to start unit: boom"), "{r:?}");
}

#[test]
fn start_stop_status_uninstall_drive_systemctl_user() {
    let s = Svc::new();
    for cmd in ["start", "stop"] {
        let r = s.run(&["service", cmd], &[]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.stderr.contains("not installed") && r.stderr.contains("service install"),
            "{r:?}"
        );
    }
    assert_eq!(s.run(&["service", "install"], &[]).code, 0);
    let _ = std::fs::remove_file(&s.log);

    let r = s.run(&["service", "start"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = s.run(&["service", "stop"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = s.run(&["service", "status"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    for line in [
        format!("unit:     {} (installed)", s.unit_path().display()),
        "enabled:  enabled".into(),
        "state:    active (running)".into(),
        "main pid: 4242".into(),
        "restarts: 1".into(),
    ] {
        assert!(r.stdout.lines().any(|l| l == line), "{line:?}: {r:?}");
    }
    let r = s.run(&["service", "status"], &[("FAKE_STATE", "failed")]);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stdout.contains("state:    failed"), "{r:?}");
    let show = format!(
        "--user show {UNIT} --property=LoadState,UnitFileState,ActiveState,SubState,MainPID,ExecMainStartTimestamp,NRestarts"
    );
    let up = "--user show-environment".to_string();
    assert_eq!(
        s.calls(),
        [
            up.clone(),
            format!("--user start {UNIT}"),
            up.clone(),
            format!("--user stop {UNIT}"),
            up.clone(),
            format!("--user is-active {UNIT}"),
            show.clone(),
            up.clone(),
            format!("--user is-active {UNIT}"),
            show,
        ]
    );

    let _ = std::fs::remove_file(&s.log);
    let r = s.run(&["service", "uninstall"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!s.unit_path().exists());
    assert_eq!(
        s.calls(),
        [
            up,
            format!("--user disable --now {UNIT}"),
            "--user daemon-reload".into()
        ]
    );
    let r = s.run(&["service", "uninstall"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("not installed"), "{r:?}");
}
