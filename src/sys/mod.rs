//! The one module that talks to the kernel for the sandbox, signal handling,
//! the terminal and descriptor-relative file operations. Every `unsafe`
//! block of the crate is here, each with its `SAFETY:` argument, behind safe
//! functions and types; the rest of the crate denies `unsafe_code`.
//!
//! A leaf: it imports nothing from the rest of the crate. What the sandbox
//! allows (paths, autonomy, which system calls) is decided in
//! `security::confine`; this is only the mechanism.
//!
//! `rustix` makes the calls wherever it has them (raw system calls that do
//! not allocate, so they are safe between fork and exec too). `libc`
//! remains for what rustix lacks: signal dispositions, Landlock, seccomp,
//! `close_range`, `localtime_r`, and `poll(2)` on a set of raw descriptor
//! numbers.
//!
//! Functions marked *async-signal-safe* may be called from a signal
//! handler and from a [`process::set_pre_exec`] hook.

pub mod fs;
pub mod net;
pub mod ns;
pub mod poll;
pub mod process;
pub mod rand;
pub mod sandbox;
pub mod signal;
pub mod term;
pub mod time;
