//! LatchClaw: a small, local-first, synchronous agent runtime.
//! The binary (`main.rs`) is a thin shell around [`cli::run`]; the modules
//! are public so benchmarks and tests can drive the pieces directly.
//! See ARCHITECTURE.md for the map of modules and the data flow.

pub(crate) mod channels;
pub mod cli;
pub mod config;
pub mod control;
pub mod error;
pub mod external;
pub mod features;
#[cfg(feature = "gateway")]
pub(crate) mod gateway;
pub mod logging;
pub mod mcp;
pub mod memory;
pub mod plugins;
pub(crate) mod prompt;
pub(crate) mod providers;
pub mod receipts;
pub(crate) mod rollup;
pub(crate) mod runtime;
pub mod security;
#[cfg(feature = "gateway")]
pub mod service;
pub mod skills;
// Compiled in every build (its table migrations and the approvals' hints
// use it); without the feature nothing runs a SOP.
#[cfg_attr(not(feature = "sop"), allow(dead_code, unused_imports))]
pub(crate) mod sop;
/// The one module that talks to the kernel (sandbox, signals, terminal,
/// descriptor-relative files), and the only one allowed raw system calls.
/// Public for `main.rs`.
#[allow(unsafe_code)]
pub mod sys;
pub mod tools;
pub(crate) mod transport;
pub mod types;
pub mod util;

/// For the panic hook in `main.rs`: the REPL's line editor may hold the
/// terminal in raw mode.
pub use channels::lineedit::restore_terminal;
