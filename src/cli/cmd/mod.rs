//! One file per command group; each function takes the shared [`Ctx`]
//! and exactly its command's options, and returns the exit code.
//!
//! [`Ctx`]: super::ctx::Ctx

pub mod agent;
pub mod approvals;
pub mod code;
pub mod config;
pub mod estop;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod memory;
#[cfg(feature = "plugins")]
pub mod plugin;
pub mod policy;
pub mod prompt;
pub mod provider;
pub mod receipt;
#[cfg(feature = "gateway")]
pub mod service;
pub mod skill;
#[cfg(feature = "sop")]
pub mod sop;
pub mod task;
pub mod tool;
