//! Managing credentials (the CLI and the OAuth token endpoint): API keys (create, list,
//! revoke, rotate with a grace period), OAuth clients and their short-lived access tokens,
//! over [`crate::store::credentials`]. Secrets are hashed here and shown once; the store
//! keeps only hashes.

use super::*;

/// Expired OAuth access tokens are deleted this long after they expire.
pub(super) const ACCESS_TOKEN_RETENTION_SECS: i64 = 86_400;

// ---- Managing credentials and clients ----------------------------------------------

/// Why a management operation (CLI, token endpoint) failed. `Display` says how to fix it
/// and never contains a secret.
#[derive(Debug)]
pub enum CredentialError {
    /// There is no company yet.
    NotInitialised,
    /// No API key or access token has this public id.
    UnknownKey(String),
    /// The key is revoked or expired and cannot be rotated.
    KeyNotActive {
        /// The key's public id.
        id: String,
        /// `revoked` or `expired`.
        status: &'static str,
    },
    /// The operation applies to API keys only (not to OAuth access tokens).
    NotAnApiKey(String),
    /// No OAuth client has this id.
    UnknownClient(String),
    /// The OAuth client is revoked.
    ClientRevoked(String),
    /// A scope is not `resource:action` or `*` (empty: no scope was given).
    BadScope(String),
    /// A well-formed scope that no tool needs (nor `*` or `admin`).
    UnknownScope(UnknownScope),
    /// The OAuth client is not allowed this scope.
    ScopeNotAllowed {
        /// The scope asked for.
        scope: String,
        /// The client.
        client_id: String,
    },
    /// The plan's active-keys allowance is used up.
    PlanLimit {
        /// The company's plan.
        plan: String,
        /// Keys the plan allows.
        limit: i64,
        /// Keys active now.
        active: i64,
    },
    /// A name or duration is unusable.
    Invalid(String),
    /// The database failed.
    Store(StoreError),
    /// The random generator or the hasher failed.
    Internal(String),
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotInitialised => f.write_str("no company yet; run `tollgate init` first"),
            Self::UnknownKey(id) => write!(f, "no key has the id {id:?}; run `tollgate key list` to see the ids"),
            Self::KeyNotActive { id, status } => write!(
                f,
                "key {id} is {status} and cannot be rotated; create a new one with `tollgate key create`"
            ),
            Self::NotAnApiKey(id) => write!(
                f,
                "{id} is an OAuth access token, not an API key; access tokens expire on their own \
                 (revoke it with `tollgate key revoke {id}`)"
            ),
            Self::UnknownClient(id) => write!(f, "no OAuth client has the id {id:?}; run `tollgate client list` to see the ids"),
            Self::ClientRevoked(id) => write!(f, "OAuth client {id} is revoked; create a new one with `tollgate client create`"),
            Self::BadScope(scope) if scope.is_empty() => f.write_str(
                "no scope given; pass --scopes with scopes like invoices:read,clients:write (or * for all)",
            ),
            Self::BadScope(scope) => write!(
                f,
                "invalid scope {scope:?}: scopes look like resource:action in lowercase \
                 (e.g. invoices:read, clients:write), * for every tool, or admin for the console; \
                 separate them with commas"
            ),
            Self::UnknownScope(unknown) => write!(f, "{unknown}"),
            Self::ScopeNotAllowed { scope, client_id } => write!(
                f,
                "OAuth client {client_id} is not allowed the scope {scope:?}; use a scope from its \
                 allowed scopes (`tollgate client list`)"
            ),
            Self::PlanLimit { plan, limit, active } => write!(
                f,
                "the {plan} plan allows {limit} active keys and {active} are active; revoke one \
                 (`tollgate key revoke ID`) or move to a larger plan (`tollgate plan set SLUG`)"
            ),
            Self::Invalid(message) | Self::Internal(message) => f.write_str(message),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CredentialError {}

impl From<StoreError> for CredentialError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// Runs `f` in a write transaction, keeping its own error apart from storage errors.
pub(super) fn write_tx<T>(
    store: &Store,
    f: impl FnOnce(&Tx<'_>) -> Result<T, CredentialError>,
) -> Result<T, CredentialError> {
    let mut own: Option<CredentialError> = None;
    let result = store.in_transaction(|tx| {
        f(tx).map_err(|e| match e {
            CredentialError::Store(e) => e,
            other => {
                own = Some(other);
                StoreError::RolledBack
            }
        })
    });
    result.map_err(|e| own.take().unwrap_or(CredentialError::Store(e)))
}

/// What `tollgate key create` asks for.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// Operator-chosen label.
    pub name: String,
    /// Granted scopes (already parsed).
    pub scopes: Vec<String>,
    /// Lifetime; `None` = never expires.
    pub expires_in: Option<Duration>,
    /// The OAuth client the key belongs to, if any.
    pub client_id: Option<String>,
    /// Live or test key.
    pub mode: Mode,
    /// Its own guard channel (`None`: follow the `[errors] guard_channel` setting).
    pub guard_channel: Option<GuardChannel>,
}

/// A newly issued credential: its public id and the token, shown once.
#[derive(Debug)]
pub struct IssuedKey {
    /// Public id (what `key list`, `key revoke` and the audit log use).
    pub public_id: String,
    /// The whole token `tg_<mode>_<public id>_<secret>`.
    pub token: Secret,
    /// Expiry (unix seconds), if any.
    pub expires_at: Option<i64>,
}

pub(super) fn check_name(name: &str) -> Result<String, CredentialError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(CredentialError::Invalid(
            "--name: give a short label of 1 to 100 printable characters".to_owned(),
        ));
    }
    Ok(name.to_owned())
}

pub(super) fn seconds(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}

/// Creates an API key; refuses one beyond the plan's active-keys allowance.
pub fn create_key(store: &Store, new: &NewKey) -> Result<IssuedKey, CredentialError> {
    let name = check_name(&new.name)?;
    if new.scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    let public_id = new_public_id()?;
    let secret = Secret::new(new_secret()?);
    let hash = hash_secret(&secret)?;
    let now = Clock::System.unix_secs();
    let expires_at = new.expires_in.map(|d| now.saturating_add(seconds(d)));
    write_tx(store, |tx| {
        check_key_allowance(tx, now)?;
        if let Some(client_id) = &new.client_id {
            check_client_grants(tx, client_id, &new.scopes)?;
        }
        credentials::insert_credential(
            tx,
            &NewCredential {
                public_id: &public_id,
                kind: "api_key",
                mode: new.mode.as_str(),
                name: &name,
                secret_hash: &hash,
                scopes: &new.scopes,
                client_id: new.client_id.as_deref(),
                expires_at,
                created_at: now,
                guard_channel: new.guard_channel,
            },
        )?;
        Ok(())
    })?;
    Ok(IssuedKey {
        token: compose_token(new.mode, &public_id, secret.expose()),
        public_id,
        expires_at,
    })
}

pub(super) fn check_key_allowance(tx: &Tx<'_>, now: i64) -> Result<(), CredentialError> {
    let Some(plan) = plans::company_plan_on(tx)? else {
        return Err(CredentialError::NotInitialised);
    };
    let active = credentials::count_active_keys(tx, now)?;
    match plan.max_active_keys {
        Some(limit) if active >= limit => Err(CredentialError::PlanLimit {
            plan: plan.slug,
            limit,
            active,
        }),
        _ => Ok(()),
    }
}

pub(super) fn check_client_grants(
    tx: &Tx<'_>,
    client_id: &str,
    scopes: &[String],
) -> Result<(), CredentialError> {
    let Some((client, _)) = credentials::client_on(tx, client_id)? else {
        return Err(CredentialError::UnknownClient(client_id.to_owned()));
    };
    if client.revoked {
        return Err(CredentialError::ClientRevoked(client_id.to_owned()));
    }
    match scopes.iter().find(|s| !grants(&client.allowed_scopes, s)) {
        Some(scope) => Err(CredentialError::ScopeNotAllowed {
            scope: scope.clone(),
            client_id: client_id.to_owned(),
        }),
        None => Ok(()),
    }
}

/// One API key as `tollgate key list` shows it (never its secret or hash): the store's row.
pub use crate::store::credentials::KeyRow as KeyInfo;

/// Every API key, oldest first (OAuth access tokens are not listed).
pub fn list_keys(store: &Store) -> Result<Vec<KeyInfo>, CredentialError> {
    Ok(store.api_keys()?)
}

/// Revokes a key (or access token). Returns `false` when it was already revoked. Running
/// servers refuse it on their next call: they read the row on every call.
pub fn revoke_key(store: &Store, public_id: &str) -> Result<bool, CredentialError> {
    let now = Clock::System.unix_secs();
    write_tx(store, |tx| {
        credentials::revoke(tx, Revocable::Credential, public_id, now)?
            .ok_or_else(|| CredentialError::UnknownKey(public_id.to_owned()))
    })
}

/// Sets the guard channel of a key or access token (`None`: follow the setting). Running
/// servers answer its next call on the new channel: they read the row on every call.
pub fn set_guard_channel(
    store: &Store,
    public_id: &str,
    channel: Option<GuardChannel>,
) -> Result<(), CredentialError> {
    write_tx(store, |tx| {
        if credentials::set_guard_channel(tx, public_id, channel)? {
            Ok(())
        } else {
            Err(CredentialError::UnknownKey(public_id.to_owned()))
        }
    })
}

/// Issues a new secret for an active API key. The previous secret keeps working for
/// `grace` (zero: not at all); a secret rotated out earlier stops working at once.
pub fn rotate_key(
    store: &Store,
    public_id: &str,
    grace: Duration,
) -> Result<IssuedKey, CredentialError> {
    let secret = Secret::new(new_secret()?);
    // The secret being replaced lends its salt, so that while it lasts one argon2 run
    // checks a presented secret against both (a rotation is not told by timing).
    let replaced = store.credential(public_id)?.map(|row| row.secret_hash);
    let hash = hash_secret_beside(&secret, replaced.as_deref())?;
    let now = Clock::System.unix_secs();
    let until = (!grace.is_zero()).then(|| now.saturating_add(seconds(grace)));
    let (mode, expires_at) = write_tx(store, |tx| {
        let Some(standing) = credentials::key_standing(tx, public_id)? else {
            return Err(CredentialError::UnknownKey(public_id.to_owned()));
        };
        let credentials::KeyStanding {
            kind,
            mode,
            revoked_at,
            expires_at,
        } = standing;
        let status = match (revoked_at, expires_at) {
            (Some(_), _) => Some("revoked"),
            (None, Some(at)) if at <= now => Some("expired"),
            _ => None,
        };
        if let Some(status) = status {
            return Err(CredentialError::KeyNotActive {
                id: public_id.to_owned(),
                status,
            });
        }
        if kind != "api_key" {
            return Err(CredentialError::NotAnApiKey(public_id.to_owned()));
        }
        credentials::replace_secret(tx, public_id, &hash, until)?;
        Ok((Mode::from_stored(&mode), expires_at))
    })?;
    Ok(IssuedKey {
        token: compose_token(mode, public_id, secret.expose()),
        public_id: public_id.to_owned(),
        expires_at,
    })
}

/// A newly created OAuth client: its id and its secret, shown once.
#[derive(Debug)]
pub struct IssuedClient {
    /// Client id.
    pub client_id: String,
    /// `tg_cs_<secret>`.
    pub secret: Secret,
}

/// Creates an OAuth client allowed `scopes`.
pub fn create_client(
    store: &Store,
    name: &str,
    scopes: &[String],
) -> Result<IssuedClient, CredentialError> {
    let name = check_name(name)?;
    if scopes.is_empty() {
        return Err(CredentialError::BadScope(String::new()));
    }
    if super::is_operator(scopes) {
        return Err(CredentialError::Invalid(
            "the admin scope signs an operator in to the console and belongs to an API key; \
             an OAuth client cannot be allowed it"
                .to_owned(),
        ));
    }
    let client_id = format!("client{}", new_public_id()?);
    let secret = Secret::new(format!("{CLIENT_SECRET_PREFIX}{}", new_secret()?));
    let hash = hash_secret(&secret)?;
    let now = Clock::System.unix_secs();
    store.insert_client(&NewClient {
        client_id: &client_id,
        name: &name,
        secret_hash: &hash,
        allowed_scopes: scopes,
        created_at: now,
    })?;
    Ok(IssuedClient { client_id, secret })
}

/// Every OAuth client, oldest first.
pub fn list_clients(store: &Store) -> Result<Vec<OAuthClient>, CredentialError> {
    Ok(store.clients()?)
}

/// Revokes a client: every call with one of its credentials then answers
/// `client_revoked`. Returns `false` when it was already revoked.
pub fn revoke_client(store: &Store, client_id: &str) -> Result<bool, CredentialError> {
    let now = Clock::System.unix_secs();
    write_tx(store, |tx| {
        credentials::revoke(tx, Revocable::Client, client_id, now)?
            .ok_or_else(|| CredentialError::UnknownClient(client_id.to_owned()))
    })
}

/// Issues a short-lived OAuth access token (a credential of kind `oauth_access` bound to
/// `client`) carrying `scopes` — all of the client's allowed scopes when empty. Its secret
/// is stored as a SHA-256 digest (256 random bits need no slow hash); it expires `ttl`
/// after the time of `clock`. Access tokens that expired more than a day ago are deleted
/// on the way.
pub fn issue_access_token(
    store: &Store,
    client: &OAuthClient,
    scopes: &[String],
    ttl: Duration,
    clock: &Clock,
) -> Result<IssuedKey, CredentialError> {
    if ttl.is_zero() {
        return Err(CredentialError::Invalid(
            "an access token needs a lifetime above zero".to_owned(),
        ));
    }
    let scopes = if scopes.is_empty() {
        client.allowed_scopes.clone()
    } else {
        scopes.to_vec()
    };
    let public_id = new_public_id()?;
    let secret = new_secret()?;
    let now = clock.unix_secs();
    let expires_at = now.saturating_add(seconds(ttl));
    write_tx(store, |tx| {
        check_client_grants(tx, &client.client_id, &scopes)?;
        credentials::delete_access_tokens_expired_before(tx, now - ACCESS_TOKEN_RETENTION_SECS)?;
        credentials::insert_credential(
            tx,
            &NewCredential {
                public_id: &public_id,
                kind: "oauth_access",
                mode: "live",
                name: &format!("access token of {}", client.client_id),
                secret_hash: &access_hash(&secret),
                scopes: &scopes,
                client_id: Some(&client.client_id),
                expires_at: Some(expires_at),
                created_at: now,
                guard_channel: None,
            },
        )?;
        Ok(())
    })?;
    Ok(IssuedKey {
        token: compose_token(Mode::Live, &public_id, &secret),
        public_id,
        expires_at: Some(expires_at),
    })
}
