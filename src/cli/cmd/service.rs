//! `service install|start|stop|status|uninstall`: the gateway as a systemd
//! user service (`crate::service` renders the unit and runs systemctl).

use crate::cli::ctx::Ctx;
use crate::error::{Error, Result, exit};
use crate::service::{self, Spec, Systemctl, UNIT_NAME};
use std::path::PathBuf;

/// The binary the unit runs: this one, by its absolute path.
fn current_exe() -> Result<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::runtime(format!("cannot find this program's path: {e}")))?;
    // Linux names a replaced or removed binary "PATH (deleted)".
    if !exe.is_file() {
        return Err(Error::runtime(format!(
            "this program's path {} no longer exists (replaced while running?); run the \
             installed latchclaw",
            exe.display()
        )));
    }
    Ok(exe)
}

pub fn install(ctx: &Ctx, bind: Option<String>, print: bool, force: bool) -> Result<i32> {
    let cfg = ctx.load_config()?;
    let config = ctx.config.as_ref().map(|_| cfg.config_path.clone());
    let spec = Spec::new(&cfg, current_exe()?, config, bind);
    let unit = spec.unit()?;
    let path = service::unit_path()?;
    if print {
        let crontab = spec.crontab()?;
        println!("# {}", path.display());
        println!("{unit}");
        println!("# Or, where systemd is not running, this line in `crontab -e`:");
        println!("{crontab}");
        return Ok(exit::OK);
    }
    let sc = Systemctl::connect()?;
    let action = match std::fs::read_to_string(&path) {
        Ok(old) if old == unit => "unchanged",
        Ok(_) if !force => {
            return Err(Error::usage(format!(
                "{} exists and differs from the unit this would write; `latchclaw service \
                 install --force` replaces it (`--print` shows the new one)",
                path.display()
            )));
        }
        Ok(_) => "replaced",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "written",
        Err(e) => {
            return Err(Error::runtime(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    // Under ProtectSystem=strict the gateway can create nothing outside
    // these, so they must exist before it starts.
    crate::util::private_dir(&cfg.state_dir)?;
    for d in &spec.writable {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::runtime(format!("cannot create {}: {e}", d.display())))?;
    }
    if action != "unchanged" {
        service::write_atomic(&path, &unit)?;
    }
    sc.must(&["daemon-reload"])?;
    sc.must(&["enable", UNIT_NAME])?;
    println!(
        "{} {action}; enabled: it starts with your session",
        path.display()
    );
    println!(
        "`latchclaw service start` starts it now; `loginctl enable-linger` starts it at boot \
         without a login"
    );
    Ok(exit::OK)
}

/// The unit file, or a usage error saying to install it.
fn installed() -> Result<PathBuf> {
    let path = service::unit_path()?;
    if !path.exists() {
        return Err(Error::usage(format!(
            "the gateway service is not installed (no {}); `latchclaw service install` writes it",
            path.display()
        )));
    }
    Ok(path)
}

pub fn start(_ctx: &Ctx) -> Result<i32> {
    let sc = Systemctl::connect()?;
    installed()?;
    sc.must(&["start", UNIT_NAME])?;
    println!(
        "{UNIT_NAME} started; `latchclaw service status` shows it, `journalctl --user -u {UNIT_NAME}` its log"
    );
    Ok(exit::OK)
}

pub fn stop(_ctx: &Ctx) -> Result<i32> {
    let sc = Systemctl::connect()?;
    installed()?;
    sc.must(&["stop", UNIT_NAME])?;
    println!("{UNIT_NAME} stopped");
    Ok(exit::OK)
}

const SHOWN: &str =
    "LoadState,UnitFileState,ActiveState,SubState,MainPID,ExecMainStartTimestamp,NRestarts";

pub fn status(_ctx: &Ctx) -> Result<i32> {
    let sc = Systemctl::connect()?;
    let path = service::unit_path()?;
    // is-active exits non-zero for every state but active: its answer is
    // the line it prints.
    let active = sc.run(&["is-active", UNIT_NAME])?;
    let state = active.stdout.trim();
    let show = sc.must(&["show", UNIT_NAME, &format!("--property={SHOWN}")])?;
    let prop = |k: &str| {
        show.stdout
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    let file = if path.exists() {
        "installed"
    } else {
        "not installed"
    };
    println!("unit:     {} ({file})", path.display());
    println!("enabled:  {}", or_dash(&prop("UnitFileState")));
    println!(
        "state:    {} ({})",
        or_dash(state),
        or_dash(&prop("SubState"))
    );
    let pid = prop("MainPID");
    if !pid.is_empty() && pid != "0" {
        println!("main pid: {pid}");
    }
    let since = prop("ExecMainStartTimestamp");
    if !since.is_empty() {
        println!("since:    {since}");
    }
    println!("restarts: {}", or_dash(&prop("NRestarts")));
    println!("log:      journalctl --user -u {UNIT_NAME}");
    Ok(if state == "active" {
        exit::OK
    } else {
        exit::RUNTIME
    })
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

pub fn uninstall(_ctx: &Ctx) -> Result<i32> {
    let sc = Systemctl::connect()?;
    let path = service::unit_path()?;
    if !path.exists() {
        println!(
            "the gateway service is not installed (no {}): nothing to remove",
            path.display()
        );
        return Ok(exit::OK);
    }
    sc.must(&["disable", "--now", UNIT_NAME])?;
    std::fs::remove_file(&path)
        .map_err(|e| Error::runtime(format!("cannot remove {}: {e}", path.display())))?;
    sc.must(&["daemon-reload"])?;
    println!(
        "{UNIT_NAME} stopped, disabled and removed ({})",
        path.display()
    );
    Ok(exit::OK)
}
