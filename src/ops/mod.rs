//! The operator's side: the command line and what assembles a server (`cli`), the
//! operator's commands (keys, clients, plans, company, sandbox and audit in `admin`; rate
//! limits and usage in `usage`; backup and restore; `store copy`, the move from an SQLite file
//! to PostgreSQL, in `store_copy`; `tools`, every tool with its scope, category and plans),
//! the health probe of a running server, and process logging. The top layer: it may use every other.

pub mod admin;
pub mod backends;
pub mod backup;
pub mod cli;
pub mod healthcheck;
pub mod logging;
pub mod quickstart;
pub mod store_copy;
pub mod tools;
pub mod usage;
