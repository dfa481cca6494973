//! Link-time settings for the `latchclaw` executable only.
//!
//! On Linux with glibc 2.36 or newer the binary's relative relocations are
//! stored packed (DT_RELR): the binary stays position-independent (ASLR)
//! but drops a 119 KB relocation table, and the loader has less to apply at
//! every start. Older glibc cannot load such a binary, so the flag is only
//! used when the glibc this build links against supports it.
//!
//! A release build aborts on panic, so nothing ever unwinds: its unwind
//! tables (`.eh_frame`, 330 KB, and its index `.eh_frame_hdr`, 46 KB) are
//! only read to print a backtrace. The linker drops them from the release
//! executable; a panic still prints its message and location, then aborts,
//! with an empty backtrace. Debug and test builds unwind and keep them.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("HOST") == var("TARGET");
    let gnu_linux = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if native && gnu_linux && glibc_version().is_some_and(|v| v >= (2, 36)) {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    if var("PROFILE") == "release" && var("CARGO_CFG_TARGET_OS") == "linux" {
        let script = std::path::Path::new(&var("OUT_DIR")).join("no-unwind-tables.ld");
        let written = std::fs::write(
            &script,
            "SECTIONS { /DISCARD/ : { *(.eh_frame) *(.eh_frame.*) } }\nINSERT AFTER .text;\n",
        );
        match written {
            Ok(()) => {
                println!("cargo::rustc-link-arg-bins=-Wl,--no-eh-frame-hdr");
                println!("cargo::rustc-link-arg-bins=-Wl,-T,{}", script.display());
            }
            // The binary only keeps its unwind tables.
            Err(e) => println!(
                "cargo::warning=cannot write {}: {e}; unwind tables kept",
                script.display()
            ),
        }
    }
}

/// The C library version `getconf` reports, e.g. "glibc 2.36".
fn glibc_version() -> Option<(u32, u32)> {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().strip_prefix("glibc ")?.split_once('.')?;
    Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
}
