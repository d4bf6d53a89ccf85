//! A credential's row as authentication reads it on every call (one indexed read), and its
//! standing: revoked, expired, its OAuth client revoked, a test key on a live installation —
//! checked in that order. Also when `last_used_at` is written: at most once a minute per
//! credential, never waiting for another writer.

use crate::config::GuardChannel;
use crate::store::credentials;
use crate::store::{Store, StoreError};

use super::Failure;
use super::token::Mode;

/// `last_used_at` is written at most this often per credential.
const LAST_USED_INTERVAL_SECS: i64 = 60;

/// What one indexed read tells about a credential, on every call.
pub(super) struct CredentialRow {
    pub(super) kind: String,
    pub(super) mode: Mode,
    pub(super) secret_hash: String,
    pub(super) scopes: Vec<String>,
    pub(super) client_id: Option<String>,
    pub(super) expires_at: Option<i64>,
    pub(super) revoked_at: Option<i64>,
    pub(super) previous_hash: Option<String>,
    pub(super) previous_expires_at: Option<i64>,
    pub(super) last_used_at: Option<i64>,
    pub(super) client_revoked_at: Option<i64>,
    pub(super) installation_mode: Mode,
    pub(super) guard_channel: Option<GuardChannel>,
}

impl CredentialRow {
    /// The rotated-out hash while its grace period lasts.
    pub(super) fn active_previous(&self, now: i64) -> Option<&str> {
        match (&self.previous_hash, self.previous_expires_at) {
            (Some(hash), Some(until)) if now < until => Some(hash),
            _ => None,
        }
    }
}

impl From<credentials::CredentialRow> for CredentialRow {
    fn from(row: credentials::CredentialRow) -> CredentialRow {
        CredentialRow {
            kind: row.kind,
            mode: Mode::from_stored(&row.mode),
            secret_hash: row.secret_hash,
            scopes: row.scopes,
            client_id: row.client_id,
            expires_at: row.expires_at,
            revoked_at: row.revoked_at,
            previous_hash: row.previous_hash,
            previous_expires_at: row.previous_expires_at,
            last_used_at: row.last_used_at,
            client_revoked_at: row.client_revoked_at,
            installation_mode: Mode::from_stored(&row.installation_mode.unwrap_or_default()),
            guard_channel: row.guard_channel,
        }
    }
}

/// The row of the credential whose public id is `public_id`, if there is one.
pub(super) fn find_by_public_id(
    store: &Store,
    public_id: &str,
) -> Result<Option<CredentialRow>, StoreError> {
    Ok(store.credential(public_id)?.map(CredentialRow::from))
}

/// Revoked, expired, client revoked, test key on a live installation — in that order.
pub(super) fn check_standing(row: &CredentialRow, now: i64) -> Result<(), Failure> {
    if row.revoked_at.is_some() {
        return Err(Failure::Invalid("revoked"));
    }
    if row.expires_at.is_some_and(|at| at <= now) {
        return Err(Failure::Invalid("expired"));
    }
    if row.client_revoked_at.is_some() {
        return Err(Failure::ClientRevoked);
    }
    if row.mode == Mode::Test && row.installation_mode == Mode::Live {
        return Err(Failure::WrongType("test_key_on_live_installation"));
    }
    Ok(())
}

/// Whether `last_used_at` is due for an update (at most once a minute).
pub(super) fn needs_touch(row: &CredentialRow, now: i64) -> bool {
    row.last_used_at
        .is_none_or(|at| now - at >= LAST_USED_INTERVAL_SECS)
}

/// Records use at most once a minute, and never waits for another writer: on contention
/// the update is simply skipped (the next call tries again).
pub(super) fn touch_last_used(store: &Store, public_id: &str, now: i64) {
    if let Err(e) = store.touch_last_used_unless_busy(public_id, now)
        && !e.is_transient()
    {
        tracing::warn!(cause = %e, "cannot record when a credential was last used");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::catalog::ErrorKind;
    use crate::clock::Clock;
    use crate::guards::auth::testing::{fresh, reason};
    use crate::guards::auth::{Authenticator, Mode, NewKey, create_key};

    #[test]
    fn test_keys_need_test_mode_and_expiry_is_enforced() {
        let (_dir, store) = fresh("pro");
        let new = NewKey {
            name: "t".into(),
            scopes: vec!["*".into()],
            expires_in: Some(Duration::from_secs(60)),
            client_id: None,
            mode: Mode::Test,
            guard_channel: None,
        };
        let issued = create_key(&store, &new).expect("test key");
        assert!(issued.token.expose().starts_with("tg_test_"));
        let auth = Authenticator::new(store.clone(), Clock::System);
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("live installation");
        assert_eq!(err.kind(), ErrorKind::InvalidTokenType);
        store
            .sql_write(|tx| tx.execute("UPDATE company SET mode = 'test'", []))
            .expect("test mode");
        auth.authenticate(Some(issued.token.expose()), "s")
            .expect("test mode accepts");
        store
            .sql_write(|tx| tx.execute("UPDATE credentials SET expires_at = 1", []))
            .expect("expire");
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("expired");
        assert_eq!(reason(&err), "expired");
    }
}
