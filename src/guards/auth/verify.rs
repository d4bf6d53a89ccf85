//! Verification of a presented credential: a bearer token ([`Authenticator::authenticate`])
//! or an OAuth client's secret ([`Authenticator::verify_client_secret`]).
//!
//! A bearer token is verified in this order:
//!
//! 1. missing → `invalid_token` (`reason: "missing"`);
//! 2. the token's SHA-256 is looked up in the verified-token cache; on a hit only the cheap
//!    row checks below run, never argon2 — so revocation by another process still applies
//!    to the very next call, and a rotated secret invalidates the cache entry;
//! 3. on a miss, the source's failure throttle is charged *before* any argon2 work
//!    (`rate_limited`, `bucket: "auth"`, after [`AUTH_FAILURE_LIMIT`](super::AUTH_FAILURE_LIMIT)
//!    failures a minute);
//! 4. parse; then the server-wide ceiling on argon2 work is charged (at most
//!    `auth.argon2_per_second` verifications started per second across every source,
//!    beyond it `rate_limited`, `bucket: "auth"`, `retry_after: 1`), so that a flood from
//!    many addresses cannot buy more CPU than that while cached tokens keep working;
//! 5. look up by public id and verify the secret — one argon2 verification whatever the
//!    id is (unknown ids, and OAuth access tokens with a wrong secret, are verified
//!    against a dummy hash; a key inside its rotation grace period may take a second one
//!    for its previous secret) — and only then revoked / expired / OAuth client revoked /
//!    test key on a live installation. A caller who does not hold the secret therefore
//!    gets the same `invalid_token` (`reason: "unknown"`) after the same work for an
//!    unknown, a revoked, an expired or a test key: a public id reveals nothing.
//!
//! A token that is not in one of tollgate's formats, when an identity provider is
//! configured, takes step 3 (the failure throttle) and then `provider`'s path instead of
//! 4 and 5: no argon2 is spent on it.

use std::sync::atomic::Ordering;

use subtle::ConstantTimeEq;

use crate::catalog::McpError;
use crate::store::credentials::OAuthClient;
use crate::store::store_failure;

use super::cache::{CacheEntry, digest_of};
use super::standing::{
    CredentialRow, check_standing, find_by_public_id, needs_touch, touch_last_used,
};
use super::token::{
    DUMMY_HASH, Matched, PresentedToken, Secret, access_hash, fingerprint, parse_token,
    verify_current_or_previous, verify_phc,
};
use super::{Authenticator, CredentialRef, Failure, Principal, invalid_token};

impl Authenticator {
    /// The credential `token` belongs to, for binding a session to it: from the cache
    /// when the token was verified before (no read, no argon2; the request's own
    /// authentication re-checks its standing), otherwise verified now exactly like
    /// [`Authenticator::authenticate`].
    pub fn identify(&self, token: Option<&str>, source: &str) -> Result<CredentialRef, McpError> {
        if let Some(token) = token.filter(|t| !t.is_empty())
            && let Some(entry) = self.cache.get(&digest_of(token))
        {
            // A provider user's sessions are its own, whatever client its token names.
            let client_id = entry.client_id.filter(|_| entry.provider.is_none());
            return Ok(CredentialRef {
                credential_id: entry.public_id,
                client_id,
            });
        }
        self.authenticate(token, source)
            .map(|principal| CredentialRef::from(&principal))
    }

    /// Verifies the presented token; `source` (`stdio:<pid>`, an HTTP peer address)
    /// identifies the caller for throttling repeated failures.
    pub fn authenticate(&self, token: Option<&str>, source: &str) -> Result<Principal, McpError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(invalid_token("missing"));
        };
        let now = self.clock.unix_secs();
        let digest = digest_of(token);
        if let Some(outcome) = self.served_from_cache(&digest, source, now) {
            return outcome;
        }
        // Requests that bring the same new token at once verify it one at a time: the
        // first runs argon2, the others then find it cached. (Otherwise a client opening
        // with many requests in flight would spend its failure allowance on attempts that
        // were never failures.)
        let flight = self.flights.join(digest);
        if let Some(outcome) = self.served_from_cache(&digest, source, now) {
            return outcome;
        }
        let ticket = self.throttle().admit(source, now)?;
        let outcome = self.authenticate_uncached(token, digest, now);
        drop(flight);
        if outcome.as_ref().err().is_none_or(|f| !f.is_callers_fault()) {
            self.throttle().refund(ticket);
        }
        outcome.map_err(Failure::into_error)
    }

    /// The principal of a credential chosen by configuration rather than presented (the
    /// loopback-only development mode of the HTTP transport). Standing checks still apply.
    pub fn principal_for_public_id(&self, public_id: &str) -> Result<Principal, McpError> {
        let now = self.clock.unix_secs();
        let row = find_by_public_id(&self.store, public_id)
            .map_err(|e| store_failure(e, false))?
            .ok_or_else(|| invalid_token("unknown"))?;
        check_standing(&row, now).map_err(Failure::into_error)?;
        Ok(self.admit_principal(public_id, row, now))
    }

    /// The outcome for a cached token (a refusal counted against `source`), or `None` when
    /// the token is not cached or its entry went stale (then it is forgotten).
    fn served_from_cache(
        &self,
        digest: &[u8; 32],
        source: &str,
        now: i64,
    ) -> Option<Result<Principal, McpError>> {
        let entry = self.cache.get(digest)?;
        match self.authenticate_cached(&entry, now) {
            Some(Ok(principal)) => Some(Ok(principal)),
            Some(Err(failure)) => {
                if failure.is_callers_fault() {
                    self.throttle().record_failure(source, now);
                }
                Some(Err(failure.into_error()))
            }
            None => {
                self.cache.forget(digest);
                None
            }
        }
    }

    /// A cache hit: only the row checks, no argon2. `None` when the entry is stale.
    fn authenticate_cached(
        &self,
        entry: &CacheEntry,
        now: i64,
    ) -> Option<Result<Principal, Failure>> {
        if let Some(grant) = &entry.provider {
            return self.provider_cached(entry, grant, now);
        }
        let row = match find_by_public_id(&self.store, &entry.public_id) {
            Ok(Some(row)) => row,
            Ok(None) => return Some(Err(Failure::Invalid("unknown"))),
            Err(e) => return Some(Err(Failure::Store(e))),
        };
        if let Err(failure) = check_standing(&row, now) {
            return Some(Err(failure));
        }
        if !entry.matches(&row, now) {
            return None;
        }
        Some(Ok(self.admit_principal(&entry.public_id, row, now)))
    }

    fn authenticate_uncached(
        &self,
        token: &str,
        digest: [u8; 32],
        now: i64,
    ) -> Result<Principal, Failure> {
        if self.is_provider_token(token) {
            return self.authenticate_provider(token, digest, now);
        }
        if token.starts_with(super::issued::ACCESS_TOKEN_PREFIX) {
            return self.authenticate_issued(token, digest, now);
        }
        let presented = parse_token(token)?;
        self.ceiling.admit(now).map_err(Failure::Busy)?;
        let pass = self.argon2_gate.enter();
        let verified = self.find_and_verify(&presented, now);
        drop(pass);
        let (row, matched) = verified?;
        // The standing is told only to whoever holds the secret (see the module header).
        check_standing(&row, now)?;
        // Access tokens need no argon2, but caching them too keeps a valid token working
        // from a source that the failure throttle currently refuses.
        self.cache
            .remember(digest, presented.public_id, matched, row.client_id.clone());
        Ok(self.admit_principal(presented.public_id, row, now))
    }

    /// The row of the presented id and the fingerprint of the hash its secret matched;
    /// `unknown` after one argon2 verification when either is wrong.
    fn find_and_verify(
        &self,
        presented: &PresentedToken<'_>,
        now: i64,
    ) -> Result<(CredentialRow, [u8; 32]), Failure> {
        let row = find_by_public_id(&self.store, presented.public_id).map_err(Failure::Store)?;
        let Some(row) = row.filter(|r| r.mode == presented.mode) else {
            // Unknown ids cost the same argon2 run as known ones.
            self.argon2_verify(DUMMY_HASH, presented.secret);
            return Err(Failure::Invalid("unknown"));
        };
        match self.verify_secret(&row, presented.secret, now) {
            Some(matched) => Ok((row, matched)),
            None => Err(Failure::Invalid("unknown")),
        }
    }

    /// Checks the secret; returns the fingerprint of the hash it matched.
    fn verify_secret(&self, row: &CredentialRow, secret: &str, now: i64) -> Option<[u8; 32]> {
        if row.kind == "oauth_access" {
            let expected = access_hash(secret);
            let ok: bool = expected.as_bytes().ct_eq(row.secret_hash.as_bytes()).into();
            if !ok {
                // A wrong secret costs what it costs on an API key or an unknown id.
                self.argon2_verify(DUMMY_HASH, secret);
            }
            return ok.then(|| fingerprint(&row.secret_hash));
        }
        let previous = row.active_previous(now);
        let (matched, runs) = verify_current_or_previous(&row.secret_hash, previous, secret);
        self.argon2_runs.fetch_add(runs, Ordering::Relaxed);
        match matched? {
            Matched::Current => Some(fingerprint(&row.secret_hash)),
            Matched::Previous => previous.map(fingerprint),
        }
    }

    fn argon2_verify(&self, phc: &str, secret: &str) -> bool {
        self.argon2_runs.fetch_add(1, Ordering::Relaxed);
        verify_phc(phc, secret)
    }

    fn admit_principal(&self, public_id: &str, row: CredentialRow, now: i64) -> Principal {
        if needs_touch(&row, now) {
            touch_last_used(&self.store, public_id, now);
        }
        Principal {
            credential_id: public_id.to_owned(),
            client_id: row.client_id,
            scopes: row.scopes,
            mode: row.mode,
            guard_channel: row.guard_channel,
            installation: row.installation_mode,
            roles: Vec::new(),
        }
    }

    /// Verifies an OAuth client's secret (the token endpoint's client authentication),
    /// throttled per `source` like bearer tokens. Unknown client ids spend one argon2 run.
    pub fn verify_client_secret(
        &self,
        client_id: &str,
        secret: &Secret,
        source: &str,
    ) -> Result<OAuthClient, McpError> {
        let now = self.clock.unix_secs();
        let ticket = self.throttle().admit(source, now)?;
        let outcome = self.check_client_secret(client_id, secret.expose(), now);
        if outcome.as_ref().err().is_none_or(|f| !f.is_callers_fault()) {
            self.throttle().refund(ticket);
        }
        outcome.map_err(Failure::into_error)
    }

    /// The secret first, then the client's standing (revealed only to its holder).
    fn check_client_secret(
        &self,
        client_id: &str,
        secret: &str,
        now: i64,
    ) -> Result<OAuthClient, Failure> {
        self.ceiling.admit(now).map_err(Failure::Busy)?;
        let pass = self.argon2_gate.enter();
        let found = self
            .store
            .client_with_hash(client_id)
            .map_err(Failure::Store);
        let verified = found.map(|found| match found {
            Some((client, hash)) => self.argon2_verify(&hash, secret).then_some(client),
            None => {
                self.argon2_verify(DUMMY_HASH, secret);
                None
            }
        });
        drop(pass);
        let client = verified?.ok_or(Failure::Invalid("unknown"))?;
        if client.revoked {
            return Err(Failure::ClientRevoked);
        }
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::catalog::ErrorKind;
    use crate::clock::{Clock, ManualClock};
    use crate::guards::auth::testing::{fresh, key, reason};
    use crate::guards::auth::{
        AUTH_FAILURE_LIMIT, CredentialError, IssuedClient, Mode, NewKey, create_client, create_key,
        issue_access_token, revoke_client, revoke_key, rotate_key,
    };
    use crate::store::Store;

    #[test]
    fn argon2_runs_once_per_token_and_revocation_applies_next_call() {
        let (_dir, store) = fresh("pro");
        let issued = key(&store, &["invoices:read"]);
        let auth = Authenticator::new(store.clone(), Clock::System);
        for _ in 0..5 {
            let p = auth
                .authenticate(Some(issued.token.expose()), "s")
                .expect("valid");
            assert_eq!(p.scopes, vec!["invoices:read".to_owned()]);
        }
        assert_eq!(auth.argon2_runs(), 1);
        assert!(revoke_key(&store, &issued.public_id).expect("revoke"));
        let err = auth
            .authenticate(Some(issued.token.expose()), "s")
            .expect_err("revoked");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
        assert_eq!(reason(&err), "revoked");
        assert!(!revoke_key(&store, &issued.public_id).expect("again"));
        assert_eq!(auth.argon2_runs(), 1);
    }

    #[test]
    fn rotation_keeps_the_old_secret_for_the_grace_only() {
        let (_dir, store) = fresh("pro");
        let old = key(&store, &["*"]);
        let auth = Authenticator::new(store.clone(), Clock::System);
        auth.authenticate(Some(old.token.expose()), "s")
            .expect("old valid");
        let new = rotate_key(&store, &old.public_id, Duration::from_secs(3600)).expect("rotate");
        assert_eq!(new.public_id, old.public_id);
        auth.authenticate(Some(old.token.expose()), "s")
            .expect("old valid in grace");
        auth.authenticate(Some(new.token.expose()), "s")
            .expect("new valid");
        let newest = rotate_key(&store, &old.public_id, Duration::ZERO).expect("rotate again");
        let err = auth
            .authenticate(Some(old.token.expose()), "s")
            .expect_err("old gone");
        assert_eq!(reason(&err), "unknown");
        let err = auth
            .authenticate(Some(new.token.expose()), "s")
            .expect_err("no grace");
        assert_eq!(reason(&err), "unknown");
        auth.authenticate(Some(newest.token.expose()), "s")
            .expect("newest valid");
    }

    #[test]
    fn unknown_ids_spend_one_dummy_verification() {
        let (_dir, store) = fresh("pro");
        let auth = Authenticator::new(store, Clock::System);
        let token = format!("tg_live_0123456789abcdef0123_{}", "A".repeat(43));
        let err = auth.authenticate(Some(&token), "s").expect_err("unknown");
        assert_eq!(reason(&err), "unknown");
        assert_eq!(auth.argon2_runs(), 1);
        let err = auth.authenticate(None, "s").expect_err("missing");
        assert_eq!(reason(&err), "missing");
        assert_eq!(auth.argon2_runs(), 1);
    }

    #[test]
    fn throttle_refuses_before_argon2_and_resets_with_the_window() {
        let (_dir, store) = fresh("pro");
        let (auth, now) = clocked(store, 1_000_045);
        let token = format!("tg_live_0123456789abcdef0123_{}", "B".repeat(43));
        for _ in 0..AUTH_FAILURE_LIMIT {
            auth.authenticate(Some(&token), "peer")
                .expect_err("unknown");
        }
        let err = auth
            .authenticate(Some(&token), "peer")
            .expect_err("throttled");
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        assert_eq!(err.fields()["bucket"], "auth");
        assert_eq!(err.fields()["limit"], 10);
        // The window started at 1_000_020 (a multiple of 60) and ends a minute later.
        assert_eq!(err.fields()["reset"], 1_000_080);
        assert_eq!(err.fields()["retry_after"], 35);
        assert_eq!(auth.argon2_runs(), u64::from(AUTH_FAILURE_LIMIT));
        now.advance(Duration::from_secs(60));
        let err = auth
            .authenticate(Some(&token), "peer")
            .expect_err("new window");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
    }

    /// An authenticator on a settable clock.
    fn clocked(store: Store, start: i64) -> (Authenticator, ManualClock) {
        let now = ManualClock::at_unix_secs(start);
        (Authenticator::new(store, now.clock()), now)
    }

    fn envelope(err: &McpError) -> String {
        serde_json::to_string(&err.envelope(crate::config::Locale::En)).expect("serialize")
    }

    #[test]
    fn the_argon2_ceiling_holds_across_sources_and_spares_cached_tokens() {
        let (_dir, store) = fresh("pro");
        let (valid, later) = (key(&store, &["*"]), key(&store, &["*"]));
        let (auth, now) = clocked(store, 2_000_000);
        auth.limit_argon2_per_second(5);
        auth.authenticate(Some(valid.token.expose()), "http:10.0.0.1")
            .expect("verified and cached");
        now.advance(Duration::from_secs(1));
        let before = auth.argon2_runs();
        let (mut unknown, mut ceiling) = (0, 0);
        for i in 0..200 {
            let token = format!("tg_live_{:020x}_{}", i, "C".repeat(43));
            let source = format!("http:10.1.{}.{}", i / 250, i % 250);
            let err = auth.authenticate(Some(&token), &source).expect_err("bad");
            match err.kind() {
                ErrorKind::InvalidToken => unknown += 1,
                ErrorKind::RateLimited => {
                    ceiling += 1;
                    assert_eq!(err.fields()["bucket"], "auth");
                    assert_eq!(err.fields()["limit"], 5);
                    assert_eq!(err.fields()["retry_after"], 1);
                    assert_eq!(err.fields()["reset"], 2_000_002);
                    assert_eq!(reason(&err), "server_verification_ceiling");
                }
                other => panic!("unexpected {other:?}"),
            }
            // The cached key keeps working in the middle of the flood, without argon2.
            auth.authenticate(Some(valid.token.expose()), "http:10.0.0.1")
                .expect("cached key works");
        }
        assert_eq!((unknown, ceiling), (5, 195));
        assert_eq!(auth.argon2_runs() - before, 5);
        // A valid key not yet verified waits for the next second like everyone else…
        let err = auth
            .authenticate(Some(later.token.expose()), "http:10.0.0.2")
            .expect_err("ceiling");
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        // …and refusals by the ceiling are not charged to their source's allowance.
        let token = format!("tg_live_{:020x}_{}", 7, "D".repeat(43));
        for _ in 0..(2 * AUTH_FAILURE_LIMIT) {
            let err = auth
                .authenticate(Some(&token), "http:10.9.9.9")
                .expect_err("bad");
            assert_eq!(reason(&err), "server_verification_ceiling");
        }
        now.advance(Duration::from_secs(1));
        auth.authenticate(Some(later.token.expose()), "http:10.0.0.2")
            .expect("next second");
        let err = auth
            .authenticate(Some(&token), "http:10.9.9.9")
            .expect_err("bad");
        assert_eq!(err.kind(), ErrorKind::InvalidToken);
        assert_eq!(auth.argon2_runs() - before, 7);
    }

    #[test]
    fn a_stranger_learns_nothing_about_a_public_id() {
        let (_dir, store) = fresh("pro");
        let new_key = |mode, expires_in| NewKey {
            name: "e".into(),
            scopes: vec!["*".into()],
            expires_in,
            client_id: None,
            mode,
            guard_channel: None,
        };
        let revoked = key(&store, &["*"]);
        assert!(revoke_key(&store, &revoked.public_id).expect("revoke"));
        let minute = Some(Duration::from_secs(60));
        let expired = create_key(&store, &new_key(Mode::Live, minute)).expect("key");
        let test_key = create_key(&store, &new_key(Mode::Test, None)).expect("key");
        let fresh_key = key(&store, &["*"]);
        // Rotated with an hour of grace: two secrets work, and a wrong one must still cost
        // what it costs everywhere else.
        let rotated = key(&store, &["*"]);
        let rotated_out = rotated.token.clone();
        let rotated =
            rotate_key(&store, &rotated.public_id, Duration::from_secs(3600)).expect("rotate");
        let client = create_client(&store, "agent", &["*".to_owned()]).expect("client");
        let principal = auth_client(&store, &client);
        let access = issue_access_token(
            &store,
            &principal,
            &[],
            Duration::from_secs(7200),
            &Clock::System,
        )
        .expect("access token");
        // Two minutes on, the expiring key has expired.
        let (auth, _now) = clocked(store, Clock::System.unix_secs() + 120);
        // The same prefix and public id, another secret.
        let wrong = |token: &Secret| {
            let parts: Vec<&str> = token.expose().splitn(4, '_').collect();
            format!("{}_{}_{}_{}", parts[0], parts[1], parts[2], "W".repeat(43))
        };
        let mut answers = Vec::new();
        let unknown = format!("tg_live_{}_{}", "0".repeat(20), "W".repeat(43));
        for (i, token) in [
            unknown,
            wrong(&revoked.token),
            wrong(&expired.token),
            wrong(&test_key.token),
            wrong(&access.token),
            wrong(&fresh_key.token),
            wrong(&rotated.token),
        ]
        .iter()
        .enumerate()
        {
            let before = auth.argon2_runs();
            let source = format!("s{i}");
            let err = auth.authenticate(Some(token), &source).expect_err("wrong");
            assert_eq!(auth.argon2_runs() - before, 1, "{token}");
            answers.push(envelope(&err));
        }
        assert!(answers.iter().all(|a| *a == answers[0]), "{answers:#?}");
        assert!(
            answers[0].contains("\"reason\":\"unknown\""),
            "{}",
            answers[0]
        );
        // Only the holder of the secret learns the standing, after the same work.
        for (token, expected) in [
            (&revoked.token, "revoked"),
            (&expired.token, "expired"),
            (&test_key.token, "test_key_on_live_installation"),
        ] {
            let before = auth.argon2_runs();
            let err = auth
                .authenticate(Some(token.expose()), "holder")
                .expect_err("standing");
            assert_eq!(auth.argon2_runs() - before, 1);
            assert_eq!(reason(&err), expected);
        }
        // Both secrets of the rotated key work in its grace hour, each after one run.
        for token in [&rotated.token, &rotated_out] {
            let before = auth.argon2_runs();
            auth.authenticate(Some(token.expose()), "holder")
                .expect("in its grace period");
            assert_eq!(auth.argon2_runs() - before, 1);
        }
    }

    fn auth_client(store: &Store, issued: &IssuedClient) -> OAuthClient {
        Authenticator::new(store.clone(), Clock::System)
            .verify_client_secret(&issued.client_id, &issued.secret, "s")
            .expect("client")
    }

    #[test]
    fn a_revoked_client_is_told_only_to_the_holder_of_its_secret() {
        let (_dir, store) = fresh("pro");
        let issued = create_client(&store, "agent", &["*".to_owned()]).expect("client");
        assert!(revoke_client(&store, &issued.client_id).expect("revoke"));
        let auth = Authenticator::new(store, Clock::System);
        let wrong = Secret::new(format!("tg_cs_{}", "W".repeat(43)));
        let stranger = auth
            .verify_client_secret(&issued.client_id, &wrong, "a")
            .expect_err("wrong");
        let unknown = auth
            .verify_client_secret("no-such-client", &wrong, "b")
            .expect_err("unknown");
        assert_eq!(envelope(&stranger), envelope(&unknown));
        assert_eq!(auth.argon2_runs(), 2);
        let holder = auth
            .verify_client_secret(&issued.client_id, &issued.secret, "c")
            .expect_err("revoked");
        assert_eq!(holder.kind(), ErrorKind::ClientRevoked);
        assert_eq!(auth.argon2_runs(), 3);
    }

    #[test]
    fn clients_and_access_tokens() {
        let (_dir, store) = fresh("pro");
        let issued = create_client(&store, "agent", &["invoices:read".to_owned()]).expect("client");
        assert!(issued.secret.expose().starts_with("tg_cs_"));
        let auth = Authenticator::new(store.clone(), Clock::System);
        let err = auth
            .authenticate(Some(issued.secret.expose()), "s")
            .expect_err("not a bearer");
        assert_eq!(err.kind(), ErrorKind::InvalidTokenType);
        let client = auth
            .verify_client_secret(&issued.client_id, &issued.secret, "s")
            .expect("secret ok");
        let wrong = Secret::new("tg_cs_nope".into());
        assert_eq!(
            auth.verify_client_secret(&issued.client_id, &wrong, "s")
                .expect_err("bad")
                .kind(),
            ErrorKind::InvalidToken
        );
        let denied = issue_access_token(
            &store,
            &client,
            &["invoices:write".to_owned()],
            Duration::from_secs(600),
            &Clock::System,
        );
        assert!(matches!(
            denied,
            Err(CredentialError::ScopeNotAllowed { .. })
        ));
        let token = issue_access_token(
            &store,
            &client,
            &[],
            Duration::from_secs(600),
            &Clock::System,
        )
        .expect("token");
        let runs = auth.argon2_runs();
        let p = auth
            .authenticate(Some(token.token.expose()), "s")
            .expect("access token");
        assert_eq!(p.client_id.as_deref(), Some(issued.client_id.as_str()));
        assert_eq!(p.scopes, vec!["invoices:read".to_owned()]);
        assert_eq!(auth.argon2_runs(), runs, "access tokens need no argon2");
        assert!(revoke_client(&store, &issued.client_id).expect("revoke"));
        let err = auth
            .authenticate(Some(token.token.expose()), "s")
            .expect_err("client revoked");
        assert_eq!(err.kind(), ErrorKind::ClientRevoked);
    }
}
