//! `latchclaw`: a small, local-first, synchronous agent runtime.
//! See ARCHITECTURE.md for the map of modules and the data flow.

mod channels;
mod cli;
mod config;
mod error;
mod logging;
mod memory;
mod providers;
mod receipts;
mod runtime;
mod security;
mod tools;
mod util;

use std::io::Write;

fn main() {
    // Die quietly on a closed stdout (`latchclaw memory list | head -1`)
    // instead of panicking on EPIPE. Sockets use MSG_NOSIGNAL, so only pipes
    // are affected.
    // SAFETY: setting a signal disposition to the default has no preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    logging::init();
    let code = match cli::run(std::env::args_os().skip(1)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("latchclaw: error: {e}");
            e.exit_code()
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
