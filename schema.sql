-- tollgate schema, version 1: the whole state of one installation in one SQLite file.
--
-- `src/store.rs` embeds this file as migration step 1 and runs it once, when a database is
-- created, inside a `BEGIN IMMEDIATE` transaction that also sets `PRAGMA user_version = 1`.
-- Never edit it after a release: a later change is a new migration step in `src/store.rs`.
--
-- Conventions:
--   * every table is STRICT, so a value of the wrong type is an error, not a silent cast;
--   * times are INTEGER unix seconds UTC (`*_at`), except `audit_log.at` (unix milliseconds);
--   * money is INTEGER cents (the invoicing tables at the end);
--   * lists are TEXT holding a JSON array, checked with json_valid/json_type;
--   * secrets are never stored: only argon2id PHC strings (`$argon2id$...`) or, for
--     short-lived OAuth access tokens, a digest chosen by the credentials code;
--   * a rate limit of NULL in an override column means "inherit"; in `plans` it means
--     "unlimited" (enterprise skips the hourly plan bucket).

-- Secrets the server generates for itself (never a credential): e.g. the key that signs
-- the `requestState` of multi-round tool calls, shared by every process on this file.
CREATE TABLE server_secrets (
    name       TEXT    PRIMARY KEY,
    value      BLOB    NOT NULL CHECK (length(value) >= 32),
    created_at INTEGER NOT NULL
) STRICT;

-- Plans the company can be on, with their limits. Seeded below; editable from the CLI.
CREATE TABLE plans (
    slug                   TEXT    PRIMARY KEY
                                   CHECK (length(slug) BETWEEN 1 AND 32
                                          AND slug NOT GLOB '*[^a-z0-9_-]*'),
    name                   TEXT    NOT NULL CHECK (length(name) > 0),
    -- Orders plans from smallest to largest (free < starter < pro < enterprise); used to
    -- name the smallest plan that includes a tool (`required_plan`).
    rank                   INTEGER NOT NULL UNIQUE,
    -- Calls per hour for the whole company; NULL = unlimited (the plan bucket is skipped).
    hourly_call_limit      INTEGER CHECK (hourly_call_limit IS NULL OR hourly_call_limit >= 0),
    -- Per-credential, per-category defaults (calls per minute).
    read_per_minute        INTEGER NOT NULL DEFAULT 120  CHECK (read_per_minute >= 0),
    write_per_minute       INTEGER NOT NULL DEFAULT 60   CHECK (write_per_minute >= 0),
    destructive_per_minute INTEGER NOT NULL DEFAULT 10   CHECK (destructive_per_minute >= 0),
    send_per_minute        INTEGER NOT NULL DEFAULT 10   CHECK (send_per_minute >= 0),
    generate_per_minute    INTEGER NOT NULL DEFAULT 10   CHECK (generate_per_minute >= 0),
    -- Default per-OAuth-client limit (all the client's tokens together, per minute).
    client_per_minute      INTEGER NOT NULL DEFAULT 1000 CHECK (client_per_minute >= 0),
    -- The plan includes every tool except these (JSON array of tool names or feature tags).
    excluded_tools         TEXT    NOT NULL DEFAULT '[]'
                                   CHECK (json_valid(excluded_tools)
                                          AND json_type(excluded_tools) = 'array'),
    -- Allowance: API keys that may be active at once (not revoked, not expired); NULL =
    -- unlimited. `key create` refuses one more; after a downgrade, calls answer
    -- `plan_limit_exceeded` until enough keys are revoked.
    max_active_keys        INTEGER CHECK (max_active_keys IS NULL OR max_active_keys >= 0)
) STRICT;

INSERT INTO plans (slug, name, rank, hourly_call_limit, excluded_tools, max_active_keys) VALUES
    ('free',       'Free',       1, 500,   '["send_invoice","export_invoices"]', 3),
    ('starter',    'Starter',    2, 5000,  '["export_invoices"]',                10),
    ('pro',        'Pro',        3, 50000, '[]',                                 100),
    ('enterprise', 'Enterprise', 4, NULL,  '[]',                                 NULL);

-- The one company this installation serves (at most one row, id = 1; `tollgate init` writes it).
CREATE TABLE company (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    name       TEXT    NOT NULL CHECK (length(trim(name)) > 0),
    -- Fiscal id (NIF/CIF in Spain); optional until the first invoice needs it.
    tax_id     TEXT    CHECK (tax_id IS NULL OR length(trim(tax_id)) > 0),
    plan_slug  TEXT    NOT NULL REFERENCES plans (slug) ON UPDATE CASCADE,
    -- Language of error hints unless the config overrides it.
    locale     TEXT    NOT NULL DEFAULT 'en' CHECK (locale IN ('en', 'es')),
    -- ISO 3166-1 alpha-2; decides the legal VAT rates.
    country    TEXT    NOT NULL DEFAULT 'ES'
                       CHECK (length(country) = 2 AND country NOT GLOB '*[^A-Z]*'),
    -- 'live', or 'test' for a development installation: `tg_test_` keys are refused
    -- (`invalid_token_type`) unless the mode is 'test'; live keys work in both modes.
    mode       TEXT    NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'test')),
    created_at INTEGER NOT NULL
) STRICT;

-- OAuth clients (machine clients using the client_credentials grant).
CREATE TABLE oauth_clients (
    client_id        TEXT    PRIMARY KEY CHECK (length(client_id) BETWEEN 1 AND 128),
    name             TEXT    NOT NULL,
    secret_hash      TEXT    NOT NULL CHECK (secret_hash GLOB '$argon2id$*'),
    allowed_scopes   TEXT    NOT NULL DEFAULT '[]'
                             CHECK (json_valid(allowed_scopes)
                                    AND json_type(allowed_scopes) = 'array'),
    -- Overrides the plan's client_per_minute; NULL = inherit.
    per_minute_limit INTEGER CHECK (per_minute_limit IS NULL OR per_minute_limit >= 0),
    created_at       INTEGER NOT NULL,
    revoked_at       INTEGER
) STRICT;

-- Credentials: API keys (`tg_live_<public_id>_<secret>`, `tg_test_...`) and OAuth access
-- tokens issued to a client. Looked up by public id; the secret is verified against its hash.
CREATE TABLE credentials (
    -- No '_' allowed: the token format uses '_' as its separator.
    public_id                  TEXT    PRIMARY KEY
                                       CHECK (length(public_id) BETWEEN 8 AND 64
                                              AND public_id NOT GLOB '*[^A-Za-z0-9]*'),
    kind                       TEXT    NOT NULL DEFAULT 'api_key'
                                       CHECK (kind IN ('api_key', 'oauth_access')),
    mode                       TEXT    NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'test')),
    name                       TEXT    NOT NULL,
    secret_hash                TEXT    NOT NULL CHECK (length(secret_hash) > 0),
    scopes                     TEXT    NOT NULL DEFAULT '[]'
                                       CHECK (json_valid(scopes) AND json_type(scopes) = 'array'),
    client_id                  TEXT    REFERENCES oauth_clients (client_id),
    expires_at                 INTEGER,
    created_at                 INTEGER NOT NULL,
    revoked_at                 INTEGER,
    last_used_at               INTEGER,
    -- Per-credential overrides of the plan's per-minute limits; NULL = inherit.
    read_per_minute            INTEGER CHECK (read_per_minute IS NULL OR read_per_minute >= 0),
    write_per_minute           INTEGER CHECK (write_per_minute IS NULL OR write_per_minute >= 0),
    destructive_per_minute     INTEGER CHECK (destructive_per_minute IS NULL
                                              OR destructive_per_minute >= 0),
    send_per_minute            INTEGER CHECK (send_per_minute IS NULL OR send_per_minute >= 0),
    generate_per_minute        INTEGER CHECK (generate_per_minute IS NULL
                                              OR generate_per_minute >= 0),
    -- Rotation: the previous secret stays valid until previous_secret_expires_at.
    previous_secret_hash       TEXT,
    previous_secret_expires_at INTEGER,
    -- API-key secrets are argon2id PHC strings (PRODUCT.md section 3), never plain text.
    CHECK (kind <> 'api_key' OR secret_hash GLOB '$argon2id$*'),
    CHECK (previous_secret_hash IS NULL OR previous_secret_hash GLOB '$argon2id$*'),
    CHECK ((previous_secret_hash IS NULL) = (previous_secret_expires_at IS NULL)),
    -- An access token is always bound to the client it was issued to.
    CHECK (kind <> 'oauth_access' OR client_id IS NOT NULL)
) STRICT;

CREATE INDEX credentials_by_client ON credentials (client_id) WHERE client_id IS NOT NULL;
-- Counting the plan's active-keys allowance on every call reads only this index.
CREATE INDEX credentials_active_keys ON credentials (expires_at)
    WHERE kind = 'api_key' AND revoked_at IS NULL;
CREATE INDEX credentials_oauth_by_expiry ON credentials (expires_at) WHERE kind = 'oauth_access';

-- Fixed-window rate counters shared by every process on this file.
-- bucket: which bucket (e.g. a category, 'plan', 'client', 'auth'); key: whose counter
-- (credential public id, plan slug, client id, source); window_start: unix seconds.
CREATE TABLE rate_counters (
    bucket       TEXT    NOT NULL CHECK (length(bucket) > 0),
    key          TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0 CHECK (count >= 0),
    PRIMARY KEY (bucket, key, window_start)
) STRICT, WITHOUT ROWID;

-- Pruning of expired windows scans by time.
CREATE INDEX rate_counters_by_window ON rate_counters (window_start);

-- Idempotency keys (src/idempotency.rs), scoped to a credential and bound to a SHA-256
-- fingerprint of the tool name and its canonical arguments. A completed key replays
-- `result` until `expires_at` (at least 24 h after completion). An in-flight key is leased
-- to `owner` ("<pid>:<nonce>") until `expires_at`; after that its holder is presumed dead
-- and the key may be taken over. No foreign key to `credentials`: rows expire on their own,
-- and credentials are revoked, never deleted.
CREATE TABLE idempotency_keys (
    credential_id TEXT    NOT NULL,
    key           TEXT    NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    tool          TEXT    NOT NULL,
    fingerprint   TEXT    NOT NULL CHECK (length(fingerprint) = 64),
    state         TEXT    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owner         TEXT,
    -- The stored tools/call result (JSON), present once completed.
    result        TEXT    CHECK (result IS NULL OR json_valid(result)),
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    CHECK (state <> 'completed' OR result IS NOT NULL),
    CHECK ((state = 'in_flight') = (owner IS NOT NULL)),
    PRIMARY KEY (credential_id, key)
) STRICT, WITHOUT ROWID;

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

-- One row per tools/call: who, which tool, outcome, how long. Never a secret, never argument
-- values. No foreign keys: the log outlives credentials and records unknown ids too.
CREATE TABLE audit_log (
    id            INTEGER PRIMARY KEY,
    at            INTEGER NOT NULL,                -- unix milliseconds UTC
    request_id    TEXT    NOT NULL,
    credential_id TEXT,
    client_id     TEXT,
    tool          TEXT    NOT NULL,
    outcome       TEXT    NOT NULL CHECK (length(outcome) > 0), -- 'ok' or a catalog code
    duration_us   INTEGER NOT NULL CHECK (duration_us >= 0),
    transport     TEXT    NOT NULL CHECK (transport IN ('stdio', 'http'))
) STRICT;

CREATE INDEX audit_log_by_at ON audit_log (at);              -- dropped at version 2
CREATE INDEX audit_log_by_credential ON audit_log (credential_id, at);
CREATE INDEX audit_log_by_tool ON audit_log (tool, at);     -- dropped at version 2

-- ==== The built-in invoicing back office (src/invoicing) ====================================
-- Money is INTEGER cents (i64) in the invoice's currency; percentages are whole numbers;
-- dates are TEXT 'YYYY-MM-DD'; ids are '<prefix>_<uuid v7>' TEXT. Amount columns hold what
-- `src/invoicing/money.rs` computed, so reading never recomputes or rounds.

-- Clients. `tax_id` is the normalised, checksum-valid NIF/NIE/CIF; unique when present.
CREATE TABLE clients (
    id         TEXT    PRIMARY KEY CHECK (id GLOB 'cli_*'),
    name       TEXT    NOT NULL CHECK (length(trim(name)) > 0),
    tax_id     TEXT    UNIQUE CHECK (tax_id IS NULL OR length(tax_id) = 9),
    email      TEXT,
    address    TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- Numbering series: numbers are consecutive per series and issue dates never go backwards.
CREATE TABLE invoice_series (
    code            TEXT    PRIMARY KEY
                            CHECK (length(code) BETWEEN 1 AND 10 AND code NOT GLOB '*[^A-Z0-9]*'),
    last_number     INTEGER NOT NULL DEFAULT 0 CHECK (last_number >= 0),
    last_issue_date TEXT
) STRICT;

-- Invoices: draft -> issued -> paid, or void (cancelled by a rectifying invoice).
CREATE TABLE invoices (
    id                TEXT    PRIMARY KEY CHECK (id GLOB 'inv_*'),
    client_id         TEXT    NOT NULL REFERENCES clients (id),
    kind              TEXT    NOT NULL CHECK (kind IN ('full', 'simplified', 'rectifying')),
    status            TEXT    NOT NULL CHECK (status IN ('draft', 'issued', 'paid', 'void')),
    series            TEXT    NOT NULL,
    number            TEXT    UNIQUE,
    issue_date        TEXT,
    due_date          TEXT,
    currency          TEXT    NOT NULL CHECK (length(currency) = 3),
    notes             TEXT,
    gross_cents       INTEGER NOT NULL,
    discount_cents    INTEGER NOT NULL,
    subtotal_cents    INTEGER NOT NULL,
    vat_cents         INTEGER NOT NULL,
    withholding_cents INTEGER NOT NULL,
    total_cents       INTEGER NOT NULL,
    paid_cents        INTEGER NOT NULL DEFAULT 0 CHECK (paid_cents >= 0),
    -- The recipient as it was at issue: the legal record does not follow later client edits.
    recipient_name    TEXT,
    recipient_tax_id  TEXT,
    rectifies_id      TEXT    REFERENCES invoices (id),
    rectified_by_id   TEXT    REFERENCES invoices (id),
    void_reason       TEXT,
    issued_at         INTEGER,
    voided_at         INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    CHECK (status = 'draft' OR (number IS NOT NULL AND issue_date IS NOT NULL)),
    CHECK (status <> 'draft' OR number IS NULL),
    CHECK ((kind = 'rectifying') = (rectifies_id IS NOT NULL)),
    CHECK ((status = 'void') = (void_reason IS NOT NULL))
) STRICT;

CREATE INDEX invoices_by_client ON invoices (client_id);
CREATE INDEX invoices_by_status_due ON invoices (status, due_date);
CREATE INDEX invoices_by_issue_date ON invoices (issue_date);

-- Invoice lines, positions 1..n. A rectifying line has the negated unit price.
CREATE TABLE invoice_lines (
    invoice_id        TEXT    NOT NULL REFERENCES invoices (id) ON DELETE CASCADE,
    position          INTEGER NOT NULL CHECK (position >= 1),
    description       TEXT    NOT NULL,
    quantity          INTEGER NOT NULL CHECK (quantity > 0),
    unit_price_cents  INTEGER NOT NULL,
    discount_percent  INTEGER NOT NULL CHECK (discount_percent BETWEEN 0 AND 100),
    vat_rate          INTEGER NOT NULL CHECK (vat_rate BETWEEN 0 AND 100),
    withholding_rate  INTEGER NOT NULL CHECK (withholding_rate BETWEEN 0 AND 100),
    gross_cents       INTEGER NOT NULL,
    discount_cents    INTEGER NOT NULL,
    net_cents         INTEGER NOT NULL,
    vat_cents         INTEGER NOT NULL,
    withholding_cents INTEGER NOT NULL,
    total_cents       INTEGER NOT NULL,
    PRIMARY KEY (invoice_id, position)
) STRICT, WITHOUT ROWID;

-- Payments received; their sum is `invoices.paid_cents` and never exceeds the total.
CREATE TABLE payments (
    id           TEXT    PRIMARY KEY CHECK (id GLOB 'pay_*'),
    invoice_id   TEXT    NOT NULL REFERENCES invoices (id),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
    currency     TEXT    NOT NULL CHECK (length(currency) = 3),
    paid_on      TEXT    NOT NULL,
    method       TEXT    NOT NULL
                         CHECK (method IN ('transfer', 'card', 'cash', 'direct_debit', 'other')),
    reference    TEXT,
    created_at   INTEGER NOT NULL
) STRICT;

CREATE INDEX payments_by_invoice ON payments (invoice_id);

-- Invoices queued for sending. tollgate never sends mail itself: a mail relay or an
-- integration reads 'pending' rows and marks them delivered or failed.
CREATE TABLE outbox (
    id         TEXT    PRIMARY KEY CHECK (id GLOB 'out_*'),
    invoice_id TEXT    NOT NULL REFERENCES invoices (id),
    recipient  TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    state      TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    created_at INTEGER NOT NULL
) STRICT;

CREATE INDEX outbox_by_invoice ON outbox (invoice_id);
