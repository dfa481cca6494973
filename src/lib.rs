//! LatchClaw: a small, local-first, synchronous agent runtime.
//! The binary (`main.rs`) is a thin shell around [`cli::run`]; the modules
//! are public so benchmarks and tests can drive the pieces directly.
//! See ARCHITECTURE.md for the map of modules and the data flow.

pub mod channels;
pub mod cli;
pub mod config;
pub mod control;
pub mod error;
pub mod logging;
pub mod memory;
pub mod prompt;
pub mod providers;
pub mod receipts;
pub mod runtime;
pub mod security;
pub mod tools;
pub mod transport;
pub mod util;
