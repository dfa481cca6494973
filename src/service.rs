//! The gateway as a systemd user service: the unit file (`Spec::unit`), the
//! crontab `@reboot` line for machines without systemd (`Spec::crontab`),
//! and `systemctl --user` run with a deadline, never through a shell.

use crate::config::Config;
use crate::error::{Error, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const UNIT_NAME: &str = "latchclaw-gateway.service";

/// Names another program to run instead of `systemctl` and skips the
/// `/run/systemd/system` probe: a hook for tests (a fake that records its
/// argv), documented as such in README.
pub const SYSTEMCTL_ENV: &str = "LATCHCLAW_SYSTEMCTL";

/// What the unit runs and may write.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// The absolute path of the latchclaw binary.
    pub exe: PathBuf,
    /// `--config PATH`, when the service must read a config other than
    /// `<state>/config.toml`.
    pub config: Option<PathBuf>,
    /// `--bind ADDR:PORT` for the gateway.
    pub bind: Option<String>,
    pub state_dir: PathBuf,
    /// The directories the gateway writes (state, workspace, and memory's,
    /// receipts' and the anchor file's directories when elsewhere), none
    /// inside another.
    pub writable: Vec<PathBuf>,
}

impl Spec {
    pub fn new(cfg: &Config, exe: PathBuf, config: Option<PathBuf>, bind: Option<String>) -> Spec {
        let mut dirs = vec![cfg.state_dir.clone(), cfg.workspace_dir.clone()];
        let files = [Some(&cfg.memory.path), Some(&cfg.receipts.path)];
        for f in files
            .into_iter()
            .chain([cfg.receipts.anchor_file.as_ref()])
            .flatten()
        {
            if let Some(d) = f.parent().filter(|d| !d.as_os_str().is_empty()) {
                dirs.push(d.to_path_buf());
            }
        }
        let mut writable: Vec<PathBuf> = Vec::new();
        for d in &dirs {
            let covered = dirs
                .iter()
                .any(|o| o != d && d.starts_with(o) && !o.starts_with(d));
            if !covered && !writable.contains(d) {
                writable.push(d.clone());
            }
        }
        Spec {
            exe,
            config,
            bind,
            state_dir: cfg.state_dir.clone(),
            writable,
        }
    }

    /// `gateway [--config PATH] [--bind ADDR:PORT]`.
    fn args(&self) -> Result<Vec<String>> {
        let mut v = vec!["gateway".to_string()];
        if let Some(c) = &self.config {
            v.push("--config".into());
            v.push(text(c)?.into());
        }
        if let Some(b) = &self.bind {
            v.push("--bind".into());
            v.push(b.clone());
        }
        Ok(v)
    }

    /// The unit file. Every value is quoted for the directive that reads it
    /// (systemd.syntax(7), systemd.service(5) "Command lines").
    pub fn unit(&self) -> Result<String> {
        let state = text(&self.state_dir)?;
        // The program itself gets no `$` expansion (systemd runs the path
        // as written), its arguments do: `$$` only there.
        let mut exec = quote(&text(&self.exe)?.replace('%', "%%"));
        for a in self.args()? {
            exec.push(' ');
            exec.push_str(&quote(&a.replace('%', "%%").replace('$', "$$")));
        }
        let mut rw = Vec::new();
        for d in &self.writable {
            rw.push(quote(&text(d)?.replace('%', "%%")));
        }
        Ok(format!(
            "# Written by `latchclaw service install`; `latchclaw service uninstall` removes it.
[Unit]
Description=LatchClaw gateway (local HTTP server)
After=network.target

[Service]
ExecStart={exec}
WorkingDirectory={workdir}
Environment={env}
Restart=on-failure
RestartSec=2
# A user manager makes the mount namespace below only inside a user
# namespace: said here so systemd < 253 applies it too, and so the unit
# fails (217/USER) rather than runs without it where none can be made.
PrivateUsers=yes
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths={rw}
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native
SystemCallFilter=~@mount
UMask=0077

[Install]
WantedBy=default.target
",
            // Not unquoted by systemd: the path as it is, specifiers escaped.
            workdir = state.replace('%', "%%"),
            env = quote(&format!("LATCHCLAW_HOME={state}").replace('%', "%%")),
            rw = rw.join(" "),
        ))
    }

    /// The crontab line that does what the unit does, for a machine
    /// without systemd: quoted for sh, `%` escaped for cron (which turns a
    /// bare `%` into a newline).
    pub fn crontab(&self) -> Result<String> {
        let state = text(&self.state_dir)?;
        let mut cmd = format!(
            "cd {} && LATCHCLAW_HOME={} exec {}",
            sh(state),
            sh(state),
            sh(text(&self.exe)?)
        );
        for a in self.args()? {
            cmd.push(' ');
            cmd.push_str(&sh(&a));
        }
        let log = format!("{state}/gateway.log");
        cmd.push_str(&format!(" >>{} 2>&1", sh(&log)));
        Ok(format!("@reboot {}", cmd.replace('%', "\\%")))
    }
}

/// A path as unit and crontab text: UTF-8 and one line.
fn text(p: &Path) -> Result<&str> {
    let s = p.to_str().ok_or_else(|| {
        Error::usage(format!(
            "{}: not UTF-8; a unit file or crontab cannot name it",
            p.display()
        ))
    })?;
    if s.chars().any(char::is_control) {
        return Err(Error::usage(format!(
            "{:?}: a control character (a newline?) in a path; a unit file or crontab cannot name it",
            s
        )));
    }
    Ok(s)
}

/// A double-quoted word: `\` and `"` escaped, as systemd unquotes both
/// with and without C escapes.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '\\' || c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A single-quoted sh word.
pub fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-:+,=@".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `$XDG_CONFIG_HOME/systemd/user/latchclaw-gateway.service`, else under
/// `~/.config`.
pub fn unit_path() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from) {
        // The spec ignores a relative value.
        Some(p) if p.is_absolute() => p,
        _ => crate::util::home_dir()
            .ok_or_else(|| {
                Error::usage("cannot find the user's unit directory: neither XDG_CONFIG_HOME nor HOME is set")
            })?
            .join(".config"),
    };
    Ok(base.join("systemd").join("user").join(UNIT_NAME))
}

/// Writes `text` to `path` by a rename from a temporary file beside it,
/// mode 0644 whatever the umask: a crash leaves the old unit or the new
/// one, never half of one.
pub fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::runtime(format!("cannot create {}: {e}", dir.display())))?;
    crate::util::write_file_atomic(path, text.as_bytes(), 0o644, true)
        .map_err(|e| Error::runtime(format!("cannot write {}: {e}", path.display())))
}

/// What one `systemctl` call said.
#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// `systemctl --user`, once it is known to reach the user's manager.
pub struct Systemctl {
    program: PathBuf,
}

/// How long one systemctl call may take: a hung bus must not hang us.
const DEADLINE: Duration = Duration::from_secs(30);

/// The message for every `service` command where systemd is not there.
fn unavailable(why: &str) -> Error {
    Error::runtime(format!(
        "systemd is not available for this user: {why}. \
         `latchclaw service install --print` prints the unit and an equivalent crontab \
         @reboot line to use instead; it touches nothing"
    ))
}

impl Systemctl {
    /// Finds `systemctl` and checks it reaches the user's service manager.
    pub fn connect() -> Result<Systemctl> {
        let program = match std::env::var_os(SYSTEMCTL_ENV).filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => {
                if !Path::new("/run/systemd/system").is_dir() {
                    return Err(unavailable(
                        "/run/systemd/system is missing, so this system was not booted with \
                         systemd (as in most containers)",
                    ));
                }
                PathBuf::from("systemctl")
            }
        };
        let s = Systemctl { program };
        let out = s.run(&["show-environment"])?;
        if !out.ok {
            return Err(unavailable(&format!(
                "`systemctl --user` cannot reach the user's service manager ({}); \
                 it needs a login session, or `loginctl enable-linger` for this user",
                first_line(&out.stderr)
            )));
        }
        Ok(s)
    }

    /// `systemctl --user ARGS`, stdin closed, output kept, killed at the
    /// deadline.
    pub fn run(&self, args: &[&str]) -> Result<Output> {
        let shown = format!("systemctl --user {}", args.join(" "));
        let mut cmd = Command::new(&self.program);
        cmd.arg("--user")
            .args(args)
            .env("SYSTEMD_PAGER", "")
            .env("SYSTEMD_COLORS", "0");
        run_with_deadline(cmd, DEADLINE).map_err(|e| match e {
            Spawn::NotFound => unavailable("there is no systemctl program on PATH"),
            Spawn::Io(e) => Error::runtime(format!("cannot run `{shown}`: {e}")),
            Spawn::Timeout => Error::runtime(format!(
                "`{shown}` did not finish in {} s; it was killed",
                DEADLINE.as_secs()
            )),
        })
    }

    /// `run`, with a failure an error quoting systemctl.
    pub fn must(&self, args: &[&str]) -> Result<Output> {
        let out = self.run(args)?;
        if !out.ok {
            return Err(Error::runtime(format!(
                "`systemctl --user {}` failed: {}",
                args.join(" "),
                first_line(&out.stderr)
            )));
        }
        Ok(out)
    }
}

fn first_line(s: &str) -> &str {
    let l = s.trim().lines().next().unwrap_or("");
    if l.is_empty() { "no message" } else { l }
}

pub enum Spawn {
    NotFound,
    Io(std::io::Error),
    Timeout,
}

/// Runs `cmd` with stdin closed and its output read by two threads (so a
/// full pipe cannot stall it), killing it when `limit` passes.
pub fn run_with_deadline(mut cmd: Command, limit: Duration) -> Result<Output, Spawn> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Spawn::NotFound,
            _ => Spawn::Io(e),
        })?;
    let reader = |r: Option<Box<dyn Read + Send>>| {
        std::thread::Builder::new().spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                // Capped: status lines, not a journal.
                let _ = r.by_ref().take(1 << 20).read_to_end(&mut buf);
                let _ = std::io::copy(&mut r, &mut std::io::sink());
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(child.stdout.take().map(|r| Box::new(r) as _));
    let err = reader(child.stderr.take().map(|r| Box::new(r) as _));
    let (out, err) = match (out, err) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Spawn::Io(e));
        }
    };
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= end => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Spawn::Timeout);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(Spawn::Io(e)),
        }
    };
    Ok(Output {
        ok: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn spec(exe: &str, state: &str) -> Spec {
        Spec {
            exe: exe.into(),
            config: None,
            bind: None,
            state_dir: state.into(),
            writable: vec![state.into(), "/home/u/ws".into()],
        }
    }

    #[test]
    fn unit_quotes_spaces_and_escapes_percent_dollar_quote_and_backslash() {
        let mut s = spec("/opt/my apps/100%/latchclaw", "/home/u/st 1%");
        s.config = Some(r#"/etc/a "b" \c $HOME.toml"#.into());
        s.bind = Some("127.0.0.1:8080".into());
        let u = s.unit().unwrap();
        assert!(
            u.contains(
                r#"ExecStart="/opt/my apps/100%%/latchclaw" "gateway" "--config" "/etc/a \"b\" \\c $$HOME.toml" "--bind" "127.0.0.1:8080""#
            ),
            "{u}"
        );
        assert!(u.contains("\nWorkingDirectory=/home/u/st 1%%\n"), "{u}");
        assert!(
            u.contains("\nEnvironment=\"LATCHCLAW_HOME=/home/u/st 1%%\"\n"),
            "{u}"
        );
        assert!(
            u.contains("\nReadWritePaths=\"/home/u/st 1%%\" \"/home/u/ws\"\n"),
            "{u}"
        );
        // The program's own `$` stays: systemd does not expand the path.
        let u = spec("/opt/a$b/latchclaw", "/s").unit().unwrap();
        assert!(
            u.contains(r#"ExecStart="/opt/a$b/latchclaw" "gateway""#),
            "{u}"
        );
    }

    #[test]
    fn unit_has_the_hardening_and_install_section() {
        let u = spec("/usr/bin/latchclaw", "/home/u/.latchclaw")
            .unit()
            .unwrap();
        for line in [
            "After=network.target",
            "Restart=on-failure",
            "RestartSec=2",
            "NoNewPrivileges=yes",
            "PrivateTmp=yes",
            "ProtectSystem=strict",
            "ProtectHome=read-only",
            "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
            "LockPersonality=yes",
            "RestrictRealtime=yes",
            "RestrictSUIDSGID=yes",
            "SystemCallArchitectures=native",
            "UMask=0077",
            "[Install]\nWantedBy=default.target",
        ] {
            assert!(u.contains(&format!("\n{line}\n")), "{line} missing:\n{u}");
        }
    }

    #[test]
    fn control_characters_and_non_utf8_are_refused_not_written() {
        let e = spec("/opt/a\nExecStartPre=/bin/evil/latchclaw", "/s")
            .unit()
            .unwrap_err();
        assert!(e.msg.contains("control character"), "{e}");
        assert!(spec("/x", "/s\r").crontab().is_err());
        use std::os::unix::ffi::OsStrExt;
        let mut s = spec("/x", "/s");
        s.exe = PathBuf::from(std::ffi::OsStr::from_bytes(b"/x\xff"));
        assert!(s.unit().unwrap_err().msg.contains("not UTF-8"));
    }

    #[test]
    fn crontab_line_is_sh_quoted_and_cron_percent_escaped() {
        let mut s = spec("/opt/my apps/it's 100%/latchclaw", "/home/u/st");
        s.bind = Some("127.0.0.1:9000".into());
        assert_eq!(
            s.crontab().unwrap(),
            r#"@reboot cd /home/u/st && LATCHCLAW_HOME=/home/u/st exec '/opt/my apps/it'\''s 100\%/latchclaw' gateway --bind 127.0.0.1:9000 >>/home/u/st/gateway.log 2>&1"#
        );
        assert_eq!(sh("$HOME"), "'$HOME'");
        assert_eq!(sh(""), "''");
    }

    #[test]
    fn writable_dirs_drop_those_inside_another() {
        let mut cfg = Config::defaults("/h/.latchclaw/config.toml".into(), "/h/.latchclaw".into());
        cfg.workspace_dir = "/h/ws".into();
        cfg.receipts.path = "/var/log/lc/receipts.log".into();
        let s = Spec::new(&cfg, "/usr/bin/latchclaw".into(), None, None);
        assert_eq!(
            s.writable,
            [
                PathBuf::from("/h/.latchclaw"),
                "/h/ws".into(),
                "/var/log/lc".into()
            ]
        );
    }

    #[test]
    fn a_child_past_its_deadline_is_killed() {
        let mut c = Command::new("sleep");
        c.arg("5");
        let t = Instant::now();
        assert!(matches!(
            run_with_deadline(c, Duration::from_millis(200)),
            Err(Spawn::Timeout)
        ));
        assert!(t.elapsed() < Duration::from_secs(3));
        let out = run_with_deadline(Command::new("true"), Duration::from_secs(5))
            .ok()
            .unwrap();
        assert!(out.ok);
        assert!(matches!(
            run_with_deadline(
                Command::new("/nonexistent/systemctl"),
                Duration::from_secs(1)
            ),
            Err(Spawn::NotFound)
        ));
    }
}
