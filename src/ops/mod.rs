//! The operator's side: the command line, operator commands (keys, plans, limits and
//! usage, backup), the health probe, systemd notification, logging and metrics.

pub mod admin;
pub mod backup;
pub mod cli;
pub mod healthcheck;
pub mod logging;
pub mod usage;
