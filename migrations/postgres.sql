-- The whole schema on PostgreSQL, at version 6: the tables, columns, keys and checks of
-- SQLite's schema after its migration steps 1 to 6 (`schema.sql` and
-- `src/store/migrations.rs`), in PostgreSQL's types — INTEGER is BIGINT, BLOB is BYTEA,
-- REAL is DOUBLE PRECISION, an `id INTEGER PRIMARY KEY` an identity column — and its
-- spelling of the checks (regular expressions for GLOB, jsonb for json_valid). Text
-- columns compare and sort byte by byte (COLLATE "C"), as SQLite's do, whatever the
-- database's own collation: keys, cursors and ORDER BY give the same order on both
-- engines. Later versions add a step beside each SQLite step.

CREATE TABLE tollgate_schema (
    id      BIGINT PRIMARY KEY CHECK (id = 1),
    version BIGINT NOT NULL
);

CREATE TABLE server_secrets (
    name       TEXT COLLATE "C"    PRIMARY KEY,
    value      BYTEA    NOT NULL CHECK (octet_length(value) >= 32),
    created_at BIGINT NOT NULL
);

CREATE TABLE plans (
    slug                   TEXT COLLATE "C"    PRIMARY KEY
                                   CHECK (length(slug) BETWEEN 1 AND 32
                                          AND slug ~ '^[a-z0-9_-]*$'),
    name                   TEXT COLLATE "C"    NOT NULL CHECK (length(name) > 0),
    -- Orders plans from smallest to largest (free < starter < pro < enterprise); used to
    -- name the smallest plan that includes a tool (`required_plan`).
    rank                   BIGINT NOT NULL UNIQUE,
    -- Calls per hour for the whole company; NULL = unlimited (the plan bucket is skipped).
    hourly_call_limit      BIGINT CHECK (hourly_call_limit IS NULL OR hourly_call_limit >= 0),
    -- Per-credential, per-category defaults (calls per minute).
    read_per_minute        BIGINT NOT NULL DEFAULT 120  CHECK (read_per_minute >= 0),
    write_per_minute       BIGINT NOT NULL DEFAULT 60   CHECK (write_per_minute >= 0),
    destructive_per_minute BIGINT NOT NULL DEFAULT 10   CHECK (destructive_per_minute >= 0),
    send_per_minute        BIGINT NOT NULL DEFAULT 10   CHECK (send_per_minute >= 0),
    generate_per_minute    BIGINT NOT NULL DEFAULT 10   CHECK (generate_per_minute >= 0),
    -- Default per-OAuth-client limit (all the client's tokens together, per minute).
    client_per_minute      BIGINT NOT NULL DEFAULT 1000 CHECK (client_per_minute >= 0),
    -- The plan includes every tool except these (JSON array of tool names or feature tags).
    excluded_tools         TEXT COLLATE "C"    NOT NULL DEFAULT '[]'
                                   CHECK (jsonb_typeof(excluded_tools::jsonb) = 'array'),
    -- Allowance: API keys that may be active at once (not revoked, not expired); NULL =
    -- unlimited. `key create` refuses one more; after a downgrade, calls answer
    -- `plan_limit_exceeded` until enough keys are revoked.
    max_active_keys        BIGINT CHECK (max_active_keys IS NULL OR max_active_keys >= 0)
);

INSERT INTO plans (slug, name, rank, hourly_call_limit, excluded_tools, max_active_keys) VALUES
    ('free',       'Free',       1, 500,   '["send_invoice","export_invoices"]', 3),
    ('starter',    'Starter',    2, 5000,  '["export_invoices"]',                10),
    ('pro',        'Pro',        3, 50000, '[]',                                 100),
    ('enterprise', 'Enterprise', 4, NULL,  '[]',                                 NULL);

CREATE TABLE company (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    name       TEXT COLLATE "C"    NOT NULL CHECK (length(trim(name)) > 0),
    -- Fiscal id (NIF/CIF in Spain); optional until the first invoice needs it.
    tax_id     TEXT COLLATE "C"    CHECK (tax_id IS NULL OR length(trim(tax_id)) > 0),
    plan_slug  TEXT COLLATE "C"    NOT NULL REFERENCES plans (slug) ON UPDATE CASCADE,
    -- Language of error hints unless the config overrides it.
    locale     TEXT COLLATE "C"    NOT NULL DEFAULT 'en' CHECK (locale IN ('en', 'es')),
    -- ISO 3166-1 alpha-2; decides the legal VAT rates.
    country    TEXT COLLATE "C"    NOT NULL DEFAULT 'ES'
                       CHECK (length(country) = 2 AND country ~ '^[A-Z]*$'),
    -- 'live', or 'test' for a development installation: `tg_test_` keys are refused
    -- (`invalid_token_type`) unless the mode is 'test'; live keys work in both modes.
    mode       TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'test')),
    created_at BIGINT NOT NULL
);

CREATE TABLE oauth_clients (
    client_id        TEXT COLLATE "C"    PRIMARY KEY CHECK (length(client_id) BETWEEN 1 AND 128),
    name             TEXT COLLATE "C"    NOT NULL,
    secret_hash      TEXT COLLATE "C"    NOT NULL CHECK (secret_hash LIKE '$argon2id$%'),
    allowed_scopes   TEXT COLLATE "C"    NOT NULL DEFAULT '[]'
                             CHECK (jsonb_typeof(allowed_scopes::jsonb) = 'array'),
    -- Overrides the plan's client_per_minute; NULL = inherit.
    per_minute_limit BIGINT CHECK (per_minute_limit IS NULL OR per_minute_limit >= 0),
    created_at       BIGINT NOT NULL,
    revoked_at       BIGINT
);

CREATE TABLE credentials (
    -- No '_' allowed: the token format uses '_' as its separator.
    public_id                  TEXT COLLATE "C"    PRIMARY KEY
                                       CHECK (length(public_id) BETWEEN 8 AND 64
                                              AND public_id ~ '^[A-Za-z0-9]*$'),
    kind                       TEXT COLLATE "C"    NOT NULL DEFAULT 'api_key'
                                       CHECK (kind IN ('api_key', 'oauth_access')),
    mode                       TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (mode IN ('live', 'test')),
    name                       TEXT COLLATE "C"    NOT NULL,
    secret_hash                TEXT COLLATE "C"    NOT NULL CHECK (length(secret_hash) > 0),
    scopes                     TEXT COLLATE "C"    NOT NULL DEFAULT '[]'
                                       CHECK (jsonb_typeof(scopes::jsonb) = 'array'),
    client_id                  TEXT COLLATE "C"    REFERENCES oauth_clients (client_id),
    expires_at                 BIGINT,
    created_at                 BIGINT NOT NULL,
    revoked_at                 BIGINT,
    last_used_at               BIGINT,
    -- Per-credential overrides of the plan's per-minute limits; NULL = inherit.
    read_per_minute            BIGINT CHECK (read_per_minute IS NULL OR read_per_minute >= 0),
    write_per_minute           BIGINT CHECK (write_per_minute IS NULL OR write_per_minute >= 0),
    destructive_per_minute     BIGINT CHECK (destructive_per_minute IS NULL
                                              OR destructive_per_minute >= 0),
    send_per_minute            BIGINT CHECK (send_per_minute IS NULL OR send_per_minute >= 0),
    generate_per_minute        BIGINT CHECK (generate_per_minute IS NULL
                                              OR generate_per_minute >= 0),
    -- Rotation: the previous secret stays valid until previous_secret_expires_at.
    previous_secret_hash       TEXT COLLATE "C",
    previous_secret_expires_at BIGINT, guard_channel TEXT COLLATE "C"
        CHECK (guard_channel IN ('jsonrpc', 'tool_result')),
    -- API-key secrets are argon2id PHC strings (PRODUCT.md section 3), never plain text.
    CHECK (kind <> 'api_key' OR secret_hash LIKE '$argon2id$%'),
    CHECK (previous_secret_hash IS NULL OR previous_secret_hash LIKE '$argon2id$%'),
    CHECK ((previous_secret_hash IS NULL) = (previous_secret_expires_at IS NULL)),
    -- An access token is always bound to the client it was issued to.
    CHECK (kind <> 'oauth_access' OR client_id IS NOT NULL)
);

CREATE TABLE rate_counters (
    bucket       TEXT COLLATE "C"    NOT NULL CHECK (length(bucket) > 0),
    key          TEXT COLLATE "C"    NOT NULL,
    window_start BIGINT NOT NULL,
    count        BIGINT NOT NULL DEFAULT 0 CHECK (count >= 0),
    PRIMARY KEY (bucket, key, window_start)
);

CREATE TABLE idempotency_keys (
    credential_id TEXT COLLATE "C"    NOT NULL,
    key           TEXT COLLATE "C"    NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    tool          TEXT COLLATE "C"    NOT NULL,
    fingerprint   TEXT COLLATE "C"    NOT NULL CHECK (length(fingerprint) = 64),
    state         TEXT COLLATE "C"    NOT NULL CHECK (state IN ('in_flight', 'completed')),
    owner         TEXT COLLATE "C",
    -- The stored tools/call result (JSON), present once completed.
    result        TEXT COLLATE "C"    CHECK (result IS NULL OR result::jsonb IS NOT NULL),
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    CHECK (state <> 'completed' OR result IS NOT NULL),
    CHECK ((state = 'in_flight') = (owner IS NOT NULL)),
    PRIMARY KEY (credential_id, key)
);

CREATE TABLE audit_log (
    id            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    at            BIGINT NOT NULL,                -- unix milliseconds UTC
    request_id    TEXT COLLATE "C"    NOT NULL,
    credential_id TEXT COLLATE "C",
    client_id     TEXT COLLATE "C",
    tool          TEXT COLLATE "C"    NOT NULL,
    outcome       TEXT COLLATE "C"    NOT NULL CHECK (length(outcome) > 0), -- 'ok' or a catalog code
    duration_us   BIGINT NOT NULL CHECK (duration_us >= 0),
    transport     TEXT COLLATE "C"    NOT NULL CHECK (transport IN ('stdio', 'http'))
, calls BIGINT NOT NULL DEFAULT 1 CHECK (calls >= 1), source TEXT COLLATE "C", backend TEXT COLLATE "C");

CREATE TABLE clients (
    book       TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id         TEXT COLLATE "C"    NOT NULL CHECK (id LIKE 'cli\_%'),
    name       TEXT COLLATE "C"    NOT NULL CHECK (length(trim(name)) > 0),
    tax_id     TEXT COLLATE "C"    CHECK (tax_id IS NULL OR length(tax_id) = 9),
    email      TEXT COLLATE "C",
    address    TEXT COLLATE "C",
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (book, id),
    UNIQUE (book, tax_id)
);

CREATE TABLE invoice_series (
    book            TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    code            TEXT COLLATE "C"    NOT NULL
                            CHECK (length(code) BETWEEN 1 AND 10 AND code ~ '^[A-Z0-9]*$'),
    last_number     BIGINT NOT NULL DEFAULT 0 CHECK (last_number >= 0),
    last_issue_date TEXT COLLATE "C",
    PRIMARY KEY (book, code)
);

CREATE TABLE invoices (
    book              TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id                TEXT COLLATE "C"    NOT NULL CHECK (id LIKE 'inv\_%'),
    client_id         TEXT COLLATE "C"    NOT NULL,
    kind              TEXT COLLATE "C"    NOT NULL CHECK (kind IN ('full', 'simplified', 'rectifying')),
    status            TEXT COLLATE "C"    NOT NULL CHECK (status IN ('draft', 'issued', 'paid', 'void')),
    series            TEXT COLLATE "C"    NOT NULL,
    number            TEXT COLLATE "C",
    issue_date        TEXT COLLATE "C",
    due_date          TEXT COLLATE "C",
    currency          TEXT COLLATE "C"    NOT NULL CHECK (length(currency) = 3),
    notes             TEXT COLLATE "C",
    gross_cents       BIGINT NOT NULL,
    discount_cents    BIGINT NOT NULL,
    subtotal_cents    BIGINT NOT NULL,
    vat_cents         BIGINT NOT NULL,
    withholding_cents BIGINT NOT NULL,
    total_cents       BIGINT NOT NULL,
    paid_cents        BIGINT NOT NULL DEFAULT 0 CHECK (paid_cents >= 0),
    recipient_name    TEXT COLLATE "C",
    recipient_tax_id  TEXT COLLATE "C",
    rectifies_id      TEXT COLLATE "C",
    rectified_by_id   TEXT COLLATE "C",
    void_reason       TEXT COLLATE "C",
    issued_at         BIGINT,
    voided_at         BIGINT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    PRIMARY KEY (book, id),
    UNIQUE (book, number),
    FOREIGN KEY (book, client_id) REFERENCES clients (book, id),
    FOREIGN KEY (book, rectifies_id) REFERENCES invoices (book, id),
    FOREIGN KEY (book, rectified_by_id) REFERENCES invoices (book, id),
    CHECK (status = 'draft' OR (number IS NOT NULL AND issue_date IS NOT NULL)),
    CHECK (status <> 'draft' OR number IS NULL),
    CHECK ((kind = 'rectifying') = (rectifies_id IS NOT NULL)),
    CHECK ((status = 'void') = (void_reason IS NOT NULL))
);

CREATE TABLE invoice_lines (
    book              TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    invoice_id        TEXT COLLATE "C"    NOT NULL,
    position          BIGINT NOT NULL CHECK (position >= 1),
    description       TEXT COLLATE "C"    NOT NULL,
    quantity          BIGINT NOT NULL CHECK (quantity > 0),
    unit_price_cents  BIGINT NOT NULL,
    discount_percent  BIGINT NOT NULL CHECK (discount_percent BETWEEN 0 AND 100),
    vat_rate          BIGINT NOT NULL CHECK (vat_rate BETWEEN 0 AND 100),
    withholding_rate  BIGINT NOT NULL CHECK (withholding_rate BETWEEN 0 AND 100),
    gross_cents       BIGINT NOT NULL,
    discount_cents    BIGINT NOT NULL,
    net_cents         BIGINT NOT NULL,
    vat_cents         BIGINT NOT NULL,
    withholding_cents BIGINT NOT NULL,
    total_cents       BIGINT NOT NULL,
    PRIMARY KEY (book, invoice_id, position),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id) ON DELETE CASCADE
);

CREATE TABLE payments (
    book         TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id           TEXT COLLATE "C"    NOT NULL CHECK (id LIKE 'pay\_%'),
    invoice_id   TEXT COLLATE "C"    NOT NULL,
    amount_cents BIGINT NOT NULL CHECK (amount_cents > 0),
    currency     TEXT COLLATE "C"    NOT NULL CHECK (length(currency) = 3),
    paid_on      TEXT COLLATE "C"    NOT NULL,
    method       TEXT COLLATE "C"    NOT NULL
                         CHECK (method IN ('transfer', 'card', 'cash', 'direct_debit', 'other')),
    reference    TEXT COLLATE "C",
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (book, id),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id)
);

CREATE TABLE outbox (
    book       TEXT COLLATE "C"    NOT NULL DEFAULT 'live' CHECK (book IN ('live', 'test')),
    id         TEXT COLLATE "C"    NOT NULL CHECK (id LIKE 'out\_%'),
    invoice_id TEXT COLLATE "C"    NOT NULL,
    recipient  TEXT COLLATE "C"    NOT NULL,
    subject    TEXT COLLATE "C"    NOT NULL,
    body       TEXT COLLATE "C"    NOT NULL,
    state      TEXT COLLATE "C"    NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'delivered', 'failed', 'sandboxed')),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (book, id),
    FOREIGN KEY (book, invoice_id) REFERENCES invoices (book, id),
    CHECK ((book = 'test') = (state = 'sandboxed'))
);

CREATE TABLE faults (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        tool TEXT COLLATE "C" NOT NULL,
        credential_id TEXT COLLATE "C",
        code TEXT COLLATE "C" NOT NULL,
        probability DOUBLE PRECISION NOT NULL CHECK (probability > 0 AND probability <= 1),
        remaining BIGINT CHECK (remaining IS NULL OR remaining >= 0),
        retry_after BIGINT CHECK (retry_after IS NULL OR retry_after >= 0),
        created_at BIGINT NOT NULL
    );

CREATE INDEX credentials_by_client ON credentials (client_id) WHERE client_id IS NOT NULL;

CREATE INDEX credentials_active_keys ON credentials (expires_at)
    WHERE kind = 'api_key' AND revoked_at IS NULL;

CREATE INDEX credentials_oauth_by_expiry ON credentials (expires_at) WHERE kind = 'oauth_access';

CREATE INDEX rate_counters_by_window ON rate_counters (window_start);

CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);

CREATE INDEX audit_log_by_credential ON audit_log (credential_id, at);

CREATE INDEX invoices_by_client ON invoices (book, client_id);

CREATE INDEX invoices_by_status_due ON invoices (book, status, due_date);

CREATE INDEX invoices_by_issue_date ON invoices (book, issue_date);

CREATE INDEX payments_by_invoice ON payments (book, invoice_id, id);

CREATE INDEX outbox_by_invoice ON outbox (book, invoice_id);

CREATE INDEX faults_by_tool ON faults (tool);

