//! Tool names that were retired, with the tool to call instead.
//!
//! A retired name answers `-32602 tool_retired` with `replacement`, so an agent built
//! against an older tollgate learns the new name from the error instead of failing blind.
//! Names are never reused: once here, a name stays here.

use crate::tools::RetiredTool;

/// The declared table of retired names.
pub const RETIRED_TOOLS: &[RetiredTool] = &[
    RetiredTool {
        name: "list_invoices",
        replacement: "search_invoices",
        since: "0.1.0",
    },
    RetiredTool {
        name: "find_client",
        replacement: "search_clients",
        since: "0.1.0",
    },
];
