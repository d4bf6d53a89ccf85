//! The verified-token cache: a token whose secret argon2 has verified is remembered by the
//! SHA-256 of its text, so that later presentations run only the cheap row checks — and
//! the single flight per token, so that requests bringing the same new token at once
//! verify it one at a time (the first runs argon2, the others then find it cached).
//!
//! An entry remembers the fingerprint of the hash the secret matched: when the row's hash
//! changes (a rotation), the entry no longer matches the row and argon2 runs again. A token
//! of the company's identity provider is remembered with what its verification granted
//! ([`ProviderGrant`]) until the verdict may no longer be reused (its expiry, or the end of
//! the introspection cache); the user's row is still re-checked on every call.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::standing::CredentialRow;
use super::token::fingerprint;

/// Verified tokens kept in memory; the cache is emptied when full (re-verification costs
/// one argon2 run per live token).
const CACHE_MAX_ENTRIES: usize = 10_000;

/// The cache key of a presented token: the SHA-256 of its text.
pub(super) fn digest_of(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A verified token remembered by the SHA-256 of its text.
#[derive(Clone)]
pub struct CacheEntry {
    pub(super) public_id: String,
    /// The OAuth client of the credential (fixed for its lifetime).
    pub(super) client_id: Option<String>,
    /// SHA-256 of the PHC string the secret was verified against: when the row's hash
    /// changes (rotation), the entry no longer matches and argon2 runs again.
    pub(super) hash_fingerprint: [u8; 32],
    /// For a provider's token: what its verification granted (`public_id` is then the
    /// user's id and `client_id` the bucket of the OAuth client the token names).
    pub(super) provider: Option<Arc<ProviderGrant>>,
}

/// What a provider's token was verified to grant.
#[derive(Debug)]
pub(crate) struct ProviderGrant {
    /// The tollgate scopes its claims map to.
    pub(super) scopes: Vec<String>,
    /// The roles its claims name.
    pub(super) roles: Vec<String>,
    /// Until when (unix seconds, exclusive) the verdict may be reused without asking the
    /// provider's keys or introspection again.
    pub(super) valid_until: i64,
    /// The user's name, for refusals.
    pub(super) label: String,
    /// For an access token tollgate's authorization server issued: the token's row, read
    /// again on every call (the entry's `public_id` is then the person's user id or key).
    pub(super) issued: Option<IssuedRef>,
}

/// The row of an issued access token.
#[derive(Debug)]
pub(crate) struct IssuedRef {
    /// The hex SHA-256 of the token.
    pub(super) hash: String,
}

impl CacheEntry {
    /// Whether the row's current (or still valid previous) secret is the one this entry
    /// was verified against; compared in constant time.
    pub(super) fn matches(&self, row: &CredentialRow, now: i64) -> bool {
        let current = fingerprint(&row.secret_hash).ct_eq(&self.hash_fingerprint);
        let previous = row
            .active_previous(now)
            .map_or(subtle::Choice::from(0), |h| {
                fingerprint(h).ct_eq(&self.hash_fingerprint)
            });
        bool::from(current | previous)
    }
}

/// The verified tokens, by digest.
#[derive(Default)]
pub(super) struct TokenCache {
    entries: Mutex<HashMap<[u8; 32], CacheEntry>>,
}

impl TokenCache {
    /// The entry of `digest`, if that token was verified.
    pub(super) fn get(&self, digest: &[u8; 32]) -> Option<CacheEntry> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(digest)
            .cloned()
    }

    /// Remembers a token verified against the hash of `hash_fingerprint`.
    pub(super) fn remember(
        &self,
        digest: [u8; 32],
        public_id: &str,
        hash_fingerprint: [u8; 32],
        client_id: Option<String>,
    ) {
        self.insert(
            digest,
            CacheEntry {
                public_id: public_id.to_owned(),
                client_id,
                hash_fingerprint,
                provider: None,
            },
        );
    }

    /// Remembers a provider's token of user `user_id`, verified to grant `grant`.
    pub(super) fn remember_provider(
        &self,
        digest: [u8; 32],
        user_id: &str,
        client_id: Option<String>,
        grant: ProviderGrant,
    ) {
        self.insert(
            digest,
            CacheEntry {
                public_id: user_id.to_owned(),
                client_id,
                hash_fingerprint: [0; 32],
                provider: Some(Arc::new(grant)),
            },
        );
    }

    /// Keeps `entry` under `digest`, emptying the cache first when it is full.
    fn insert(&self, digest: [u8; 32], entry: CacheEntry) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CACHE_MAX_ENTRIES {
            entries.clear();
        }
        entries.insert(digest, entry);
    }

    /// Forgets the token of `digest` (its entry went stale).
    pub(super) fn forget(&self, digest: &[u8; 32]) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(digest);
    }
}

/// The tokens being verified right now, by digest.
#[derive(Default)]
pub(super) struct Flights {
    verifying: Mutex<HashSet<[u8; 32]>>,
    done: Condvar,
}

impl Flights {
    /// Waits until no other request is verifying `digest`, then marks it as this one's.
    pub(super) fn join(&self, digest: [u8; 32]) -> Flight<'_> {
        let mut verifying = self
            .verifying
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while verifying.contains(&digest) {
            verifying = self
                .done
                .wait(verifying)
                .unwrap_or_else(PoisonError::into_inner);
        }
        verifying.insert(digest);
        Flight(self, digest)
    }
}

/// One request's turn to verify a token, ended on drop.
pub(super) struct Flight<'a>(&'a Flights, [u8; 32]);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.0
            .verifying
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.1);
        self.0.done.notify_all();
    }
}
