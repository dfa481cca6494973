//! `latchclaw`: a small, local-first, synchronous agent runtime.
//! Everything lives in the library (`lib.rs`); this is the process edge.

use latchclaw::{cli, logging, sys, tools};
use std::io::Write;

fn main() {
    // Our /proc/<pid>/environ holds the provider keys. Non-dumpable, its
    // /proc entries belong to root, so other processes of the same user
    // cannot read them (or attach); root with CAP_SYS_PTRACE still can.
    // Children are dumpable again after exec (they get no keys).
    let _ = sys::process::set_undumpable();
    // Whatever started latchclaw may have leaked descriptors to it (a
    // socket, a pipe): none of them reaches a child, confined or not.
    sys::sandbox::close_inherited();
    // Die quietly on a closed stdout (`latchclaw memory list | head -1`)
    // instead of panicking on EPIPE. Sockets use MSG_NOSIGNAL; the threads
    // that write to a child's pipe block SIGPIPE while they do
    // (`sys::signal::QuietPipes`), so a child that stops reading fails its
    // call instead of killing latchclaw.
    sys::signal::set_default(libc::SIGPIPE);
    // A panic is a bug: say so and exit 1 (the documented code), rather than
    // abort with a backtrace a script cannot tell from other failures.
    std::panic::set_hook(Box::new(|info| {
        // The exit below runs no destructors: the REPL's terminal modes
        // are put back here.
        latchclaw::restore_terminal();
        let _ = std::io::stdout().flush();
        eprintln!("latchclaw: internal error (a bug; please report it): {info}");
        std::process::exit(1);
    }));
    // A parser child (`tools::isolate`): no config, no log, no secret;
    // requests on stdin, answers on stdout.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(std::ffi::OsStr::new(tools::isolate::ARG)) {
        std::process::exit(tools::serve_parser(args.next().as_deref()));
    }
    // The process's one redactor: the patterns now; the command adds the
    // secrets its config names, the gateway its token. The logger and the
    // command share it, so what it learns reaches every log line.
    let redactor = std::sync::Arc::new(latchclaw::security::redact::Redactor::new());
    logging::init(std::sync::Arc::clone(&redactor));
    let code = match cli::run(std::env::args_os().skip(1), &redactor) {
        Ok(code) => code,
        Err(e) => {
            // An error may quote a server's reply or a tool's output.
            let text = redactor.redact(&e.to_string()).into_owned();
            eprintln!("latchclaw: error: {text}");
            e.exit_code()
        }
    };
    let _ = std::io::stdout().flush();
    let sig = latchclaw::control::exit_signal();
    if sig != 0 {
        // A signal interrupted a shell call: the call was cleaned up and
        // recorded; now end the way the signal would have.
        sys::signal::die_of(sig);
    }
    std::process::exit(code);
}
