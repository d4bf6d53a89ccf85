//! The one list of the tables and columns an installation holds, in foreign-key order
//! ([`TABLES`]): what the copy inserts and what the checksums hash. A unit test holds it
//! equal to both schemas, so a table added later cannot be forgotten by the copy.

/// A primary-key column, and whether it holds text (ordered byte-wise on both engines).
#[derive(Debug, Clone, Copy)]
pub struct KeyColumn {
    /// The column's name.
    pub name: &'static str,
    /// True for a text column (PostgreSQL orders it with `COLLATE "C"`, as SQLite does).
    pub text: bool,
}

const fn text(name: &'static str) -> KeyColumn {
    KeyColumn { name, text: true }
}

const fn int(name: &'static str) -> KeyColumn {
    KeyColumn { name, text: false }
}

/// One table of an installation, as the copy sees it.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The table's name.
    pub name: &'static str,
    /// Every column, in the schema's order.
    pub columns: &'static [&'static str],
    /// The primary key, in order.
    pub key: &'static [KeyColumn],
    /// An `id` the database assigns (an identity column on PostgreSQL), moved past the
    /// copied maximum after the copy.
    pub identity: bool,
    /// A column pointing at rows of the same table that may come later in any order: it
    /// is inserted as NULL and set once every row is in.
    pub deferred: Option<&'static str>,
}

/// Every table of an installation, parents before children (the copy's insertion order;
/// emptying runs in reverse).
pub const TABLES: &[Table] = &[
    Table {
        name: "server_secrets",
        columns: &["name", "value", "created_at"],
        key: &[text("name")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "plans",
        columns: &[
            "slug",
            "name",
            "rank",
            "hourly_call_limit",
            "read_per_minute",
            "write_per_minute",
            "destructive_per_minute",
            "send_per_minute",
            "generate_per_minute",
            "client_per_minute",
            "excluded_tools",
            "max_active_keys",
        ],
        key: &[text("slug")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "company",
        columns: &[
            "id",
            "name",
            "tax_id",
            "plan_slug",
            "locale",
            "country",
            "mode",
            "created_at",
        ],
        key: &[int("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "oauth_clients",
        columns: &[
            "client_id",
            "name",
            "secret_hash",
            "allowed_scopes",
            "per_minute_limit",
            "created_at",
            "revoked_at",
        ],
        key: &[text("client_id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "credentials",
        columns: &[
            "public_id",
            "kind",
            "mode",
            "name",
            "secret_hash",
            "scopes",
            "client_id",
            "expires_at",
            "created_at",
            "revoked_at",
            "last_used_at",
            "read_per_minute",
            "write_per_minute",
            "destructive_per_minute",
            "send_per_minute",
            "generate_per_minute",
            "previous_secret_hash",
            "previous_secret_expires_at",
            "guard_channel",
        ],
        key: &[text("public_id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "users",
        columns: &[
            "id",
            "issuer",
            "subject",
            "display_name",
            "client_id",
            "first_seen_at",
            "last_seen_at",
            "blocked_at",
            "read_per_minute",
            "write_per_minute",
            "destructive_per_minute",
            "send_per_minute",
            "generate_per_minute",
        ],
        key: &[text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "rate_counters",
        columns: &["bucket", "key", "window_start", "count"],
        key: &[text("bucket"), text("key"), int("window_start")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "idempotency_keys",
        columns: &[
            "credential_id",
            "key",
            "tool",
            "fingerprint",
            "state",
            "owner",
            "result",
            "created_at",
            "expires_at",
        ],
        key: &[text("credential_id"), text("key")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "audit_log",
        columns: &[
            "id",
            "at",
            "request_id",
            "credential_id",
            "client_id",
            "tool",
            "outcome",
            "duration_us",
            "transport",
            "calls",
            "source",
            "backend",
            "entry",
        ],
        key: &[int("id")],
        identity: true,
        deferred: None,
    },
    Table {
        name: "faults",
        columns: &[
            "id",
            "tool",
            "credential_id",
            "code",
            "probability",
            "remaining",
            "retry_after",
            "created_at",
        ],
        key: &[int("id")],
        identity: true,
        deferred: None,
    },
    Table {
        name: "clients",
        columns: &[
            "book",
            "id",
            "name",
            "tax_id",
            "email",
            "address",
            "created_at",
            "updated_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "invoice_series",
        columns: &["book", "code", "last_number", "last_issue_date"],
        key: &[text("book"), text("code")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "invoices",
        columns: &[
            "book",
            "id",
            "client_id",
            "kind",
            "status",
            "series",
            "number",
            "issue_date",
            "due_date",
            "currency",
            "notes",
            "gross_cents",
            "discount_cents",
            "subtotal_cents",
            "vat_cents",
            "withholding_cents",
            "total_cents",
            "paid_cents",
            "recipient_name",
            "recipient_tax_id",
            "rectifies_id",
            "rectified_by_id",
            "void_reason",
            "issued_at",
            "voided_at",
            "created_at",
            "updated_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        // A voided invoice names the rectifying invoice made after it.
        deferred: Some("rectified_by_id"),
    },
    Table {
        name: "invoice_lines",
        columns: &[
            "book",
            "invoice_id",
            "position",
            "description",
            "quantity",
            "unit_price_cents",
            "discount_percent",
            "vat_rate",
            "withholding_rate",
            "gross_cents",
            "discount_cents",
            "net_cents",
            "vat_cents",
            "withholding_cents",
            "total_cents",
        ],
        key: &[text("book"), text("invoice_id"), int("position")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "payments",
        columns: &[
            "book",
            "id",
            "invoice_id",
            "amount_cents",
            "currency",
            "paid_on",
            "method",
            "reference",
            "created_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "outbox",
        columns: &[
            "book",
            "id",
            "invoice_id",
            "recipient",
            "subject",
            "body",
            "state",
            "created_at",
        ],
        key: &[text("book"), text("id")],
        identity: false,
        deferred: None,
    },
    Table {
        name: "http_sessions",
        columns: &[
            "id",
            "owner",
            "protocol_version",
            "client_capabilities",
            "log_level",
            "created_at_ms",
            "last_seen_at_ms",
        ],
        key: &[text("id")],
        identity: false,
        deferred: None,
    },
];
