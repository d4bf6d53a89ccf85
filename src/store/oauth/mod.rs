//! The tables of tollgate's OAuth authorization server and their only writer: clients that
//! registered themselves (RFC 7591), authorization requests in progress, people's consents
//! to clients (grants), authorization codes, and the access and refresh tokens issued under
//! a grant, grouped in families (one family per code exchange; a refresh token rotates
//! within its family, and a reused one revokes the family).
//!
//! Secrets never reach this module in the clear: codes and tokens are stored as the
//! lowercase hex SHA-256 of their text (256 random bits need no slow hash), a registered
//! client's secret likewise. A grant belongs to a principal: a user of the company's
//! identity provider (`u…`, [`crate::store::users`]) or, for a person who signed in with
//! a personal key, that key's public id.

mod grants;
mod registrations;
mod requests;
mod tokens;

pub use grants::touch_grant;
pub use grants::{Grant, NewGrant};
pub use registrations::{NewRegistration, Registration};
pub use requests::{AuthRequest, NewAuthRequest, SignedIn};
pub use tokens::{
    AccessStanding, CodeExchange, CodeRow, IssuedFamily, NewCode, RefreshOutcome, Revocation,
    Rotation, access_standing_on,
};

/// Step 10 of SQLite's schema: the authorization server's tables.
pub(super) const SQLITE_SCHEMA_STEP: &str = "
CREATE TABLE oauth_registrations (
    client_id        TEXT    PRIMARY KEY,
    secret_hash      TEXT,
    client_name      TEXT,
    client_uri       TEXT,
    redirect_uris    TEXT    NOT NULL,
    grant_types      TEXT    NOT NULL,
    auth_method      TEXT    NOT NULL
                     CHECK (auth_method IN ('none', 'client_secret_basic', 'client_secret_post')),
    application_type TEXT,
    source           TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    last_used_at     INTEGER
);
CREATE TABLE oauth_requests (
    id               TEXT    PRIMARY KEY,
    csrf             TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    client_name      TEXT,
    redirect_uri     TEXT    NOT NULL,
    state            TEXT,
    code_challenge   TEXT    NOT NULL,
    scopes           TEXT,
    resource         TEXT    NOT NULL,
    login_state      TEXT    UNIQUE,
    login_nonce      TEXT,
    login_verifier   TEXT,
    principal_id     TEXT,
    principal_label  TEXT,
    held_scopes      TEXT,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL
);
CREATE TABLE oauth_grants (
    id               TEXT    PRIMARY KEY,
    principal_id     TEXT    NOT NULL,
    principal_label  TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    client_name      TEXT,
    scopes           TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    last_used_at     INTEGER,
    revoked_at       INTEGER,
    UNIQUE (principal_id, client_id)
);
CREATE TABLE oauth_codes (
    code_hash        TEXT    PRIMARY KEY,
    grant_id         TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    redirect_uri     TEXT    NOT NULL,
    code_challenge   TEXT    NOT NULL,
    scopes           TEXT    NOT NULL,
    resource         TEXT    NOT NULL,
    expires_at       INTEGER NOT NULL,
    used_at          INTEGER,
    family_id        TEXT
);
CREATE TABLE oauth_families (
    id               TEXT    PRIMARY KEY,
    grant_id         TEXT    NOT NULL,
    client_id        TEXT    NOT NULL,
    scopes           TEXT    NOT NULL,
    resource         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    revoked_at       INTEGER,
    revoked_reason   TEXT
);
CREATE INDEX oauth_families_by_grant ON oauth_families (grant_id);
CREATE TABLE oauth_tokens (
    token_hash       TEXT    PRIMARY KEY,
    kind             TEXT    NOT NULL CHECK (kind IN ('access', 'refresh')),
    family_id        TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    expires_at       INTEGER NOT NULL,
    scopes           TEXT,
    used_at          INTEGER,
    revoked_at       INTEGER
);
CREATE INDEX oauth_tokens_by_family ON oauth_tokens (family_id);
";

/// Step 10 of PostgreSQL's schema: the same tables in its types.
pub(super) const POSTGRES_SCHEMA_STEP: &str = r#"
CREATE TABLE oauth_registrations (
    client_id        TEXT COLLATE "C" PRIMARY KEY,
    secret_hash      TEXT,
    client_name      TEXT,
    client_uri       TEXT,
    redirect_uris    TEXT   NOT NULL,
    grant_types      TEXT   NOT NULL,
    auth_method      TEXT   NOT NULL
                     CHECK (auth_method IN ('none', 'client_secret_basic', 'client_secret_post')),
    application_type TEXT,
    source           TEXT   NOT NULL,
    created_at       BIGINT NOT NULL,
    last_used_at     BIGINT
);
CREATE TABLE oauth_requests (
    id               TEXT COLLATE "C" PRIMARY KEY,
    csrf             TEXT   NOT NULL,
    client_id        TEXT   NOT NULL,
    client_name      TEXT,
    redirect_uri     TEXT   NOT NULL,
    state            TEXT,
    code_challenge   TEXT   NOT NULL,
    scopes           TEXT,
    resource         TEXT   NOT NULL,
    login_state      TEXT COLLATE "C" UNIQUE,
    login_nonce      TEXT,
    login_verifier   TEXT,
    principal_id     TEXT,
    principal_label  TEXT,
    held_scopes      TEXT,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL
);
CREATE TABLE oauth_grants (
    id               TEXT COLLATE "C" PRIMARY KEY,
    principal_id     TEXT COLLATE "C" NOT NULL,
    principal_label  TEXT   NOT NULL,
    client_id        TEXT COLLATE "C" NOT NULL,
    client_name      TEXT,
    scopes           TEXT   NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    last_used_at     BIGINT,
    revoked_at       BIGINT,
    UNIQUE (principal_id, client_id)
);
CREATE TABLE oauth_codes (
    code_hash        TEXT COLLATE "C" PRIMARY KEY,
    grant_id         TEXT   NOT NULL,
    client_id        TEXT   NOT NULL,
    redirect_uri     TEXT   NOT NULL,
    code_challenge   TEXT   NOT NULL,
    scopes           TEXT   NOT NULL,
    resource         TEXT   NOT NULL,
    expires_at       BIGINT NOT NULL,
    used_at          BIGINT,
    family_id        TEXT
);
CREATE TABLE oauth_families (
    id               TEXT COLLATE "C" PRIMARY KEY,
    grant_id         TEXT COLLATE "C" NOT NULL,
    client_id        TEXT   NOT NULL,
    scopes           TEXT   NOT NULL,
    resource         TEXT   NOT NULL,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    revoked_at       BIGINT,
    revoked_reason   TEXT
);
CREATE INDEX oauth_families_by_grant ON oauth_families (grant_id);
CREATE TABLE oauth_tokens (
    token_hash       TEXT COLLATE "C" PRIMARY KEY,
    kind             TEXT   NOT NULL CHECK (kind IN ('access', 'refresh')),
    family_id        TEXT COLLATE "C" NOT NULL,
    created_at       BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    scopes           TEXT,
    used_at          BIGINT,
    revoked_at       BIGINT
);
CREATE INDEX oauth_tokens_by_family ON oauth_tokens (family_id);
"#;

/// Rows that ended (expired requests, codes, tokens and families) are deleted this long
/// after their end, on the way of a later write.
pub const ENDED_RETENTION_SECS: i64 = 24 * 3600;

/// The stored form of a secret value (a code, a token, a registered client's secret): the
/// lowercase hex SHA-256 of its text.
pub fn secret_digest(value: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(value.as_bytes()))
}

/// A list of strings stored as JSON.
fn to_json(list: &[String]) -> String {
    serde_json::Value::from(list.to_vec()).to_string()
}

/// A stored JSON list; an unreadable one reads as empty (and is logged), so a damaged row
/// grants nothing.
fn from_json(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| {
        tracing::warn!(cause = %e, "a stored OAuth list is unreadable; treating it as empty");
        Vec::new()
    })
}

#[cfg(test)]
mod tests;
