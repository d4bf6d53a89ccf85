//! The credential format and its hashes: `tg_live_<public id>_<secret>` (or `tg_test_…`),
//! OAuth client secrets `tg_cs_<secret>`, the argon2id PHC strings of API-key and client
//! secrets (OWASP parameters), the SHA-256 digests of access-token secrets, and the
//! random ids and secrets themselves.

use super::*;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use base64::Engine as _;

/// Prefix of live API keys.
pub const LIVE_PREFIX: &str = "tg_live_";
/// Prefix of test API keys (accepted only while the installation is in test mode).
pub const TEST_PREFIX: &str = "tg_test_";
/// Prefix of OAuth client secrets (never valid as a bearer token).
pub const CLIENT_SECRET_PREFIX: &str = "tg_cs_";

/// Random bytes of a public id (80 bits, 20 hex characters).
pub(super) const PUBLIC_ID_BYTES: usize = 10;
/// Random bytes of a secret (256 bits, 43 base64url characters).
pub(super) const SECRET_BYTES: usize = 32;
/// argon2id memory cost in KiB (OWASP: 19 MiB).
pub(super) const ARGON2_MEMORY_KIB: u32 = 19_456;
/// argon2id iterations (OWASP: 2).
pub(super) const ARGON2_ITERATIONS: u32 = 2;
/// argon2id lanes (OWASP: 1).
pub(super) const ARGON2_LANES: u32 = 1;
/// Stored form of an access token's secret: SHA-256 (the secret has 256 random bits).
pub(super) const ACCESS_HASH_PREFIX: &str = "sha256$";
/// A well-formed PHC string (same parameters) with no known preimage: unknown public ids
/// are verified against it, so that their timing matches that of known ones.
pub(super) const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$9Qd8wJ2zGk5Kx1m7uJ1pYg$\
                          3Wl4ROgWJ9qgIYo3X7QTUkAxzn3lVJ4C3IYVhkqmC8M";

/// A secret value (a token, a client secret): its `Debug` is redacted so it cannot reach
/// a log by accident, and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The secret itself, for printing it once to the operator or sending it to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl From<Mode> for crate::tools::Book {
    /// A credential's mode decides its book: test keys never see the live rows.
    fn from(mode: Mode) -> crate::tools::Book {
        match mode {
            Mode::Live => crate::tools::Book::Live,
            Mode::Test => crate::tools::Book::Test,
        }
    }
}

/// Whether a credential is a live or a test key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `tg_live_`: works on every installation.
    Live,
    /// `tg_test_`: works only while the installation is in test mode.
    Test,
}

impl Mode {
    /// `"live"` or `"test"`, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Test => "test",
        }
    }

    /// Parses `"live"` or `"test"`.
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "live" => Some(Mode::Live),
            "test" => Some(Mode::Test),
            _ => None,
        }
    }

    pub(super) fn prefix(self) -> &'static str {
        match self {
            Mode::Live => LIVE_PREFIX,
            Mode::Test => TEST_PREFIX,
        }
    }

    /// The schema's CHECK constraints keep stored values to the two known ones.
    pub(super) fn from_stored(text: &str) -> Mode {
        Mode::parse(text).unwrap_or(Mode::Live)
    }
}

/// A token as presented, split into its parts.
pub(super) struct PresentedToken<'a> {
    pub(super) mode: Mode,
    pub(super) public_id: &'a str,
    pub(super) secret: &'a str,
}

/// Splits `tg_<mode>_<public id>_<secret>`; anything else is malformed.
pub(super) fn parse_token(token: &str) -> Result<PresentedToken<'_>, Failure> {
    if token.starts_with(CLIENT_SECRET_PREFIX) {
        return Err(Failure::WrongType("client_secret"));
    }
    let (mode, rest) = if let Some(rest) = token.strip_prefix(LIVE_PREFIX) {
        (Mode::Live, rest)
    } else if let Some(rest) = token.strip_prefix(TEST_PREFIX) {
        (Mode::Test, rest)
    } else {
        return Err(Failure::Invalid("malformed"));
    };
    let (public_id, secret) = rest.split_once('_').ok_or(Failure::Invalid("malformed"))?;
    let id_ok =
        (8..=64).contains(&public_id.len()) && public_id.bytes().all(|b| b.is_ascii_alphanumeric());
    let secret_ok = (16..=128).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !id_ok || !secret_ok {
        return Err(Failure::Invalid("malformed"));
    }
    Ok(PresentedToken {
        mode,
        public_id,
        secret,
    })
}

pub(super) fn fingerprint(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

pub(super) fn access_hash(secret: &str) -> String {
    format!(
        "{ACCESS_HASH_PREFIX}{}",
        hex::encode(Sha256::digest(secret.as_bytes()))
    )
}

// ---- Secrets and hashes ------------------------------------------------------------

pub(super) fn random_bytes<const N: usize>() -> Result<[u8; N], CredentialError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| {
        CredentialError::Internal(format!(
            "the operating system's random generator failed: {e}"
        ))
    })?;
    Ok(bytes)
}

/// `N` bytes from the operating system's random generator, as lowercase hex: public ids
/// here, the console's session ids and CSRF tokens.
pub fn random_hex<const N: usize>() -> Result<String, CredentialError> {
    Ok(hex::encode(random_bytes::<N>()?))
}

pub(super) fn new_public_id() -> Result<String, CredentialError> {
    random_hex::<PUBLIC_ID_BYTES>()
}

pub(super) fn new_secret() -> Result<String, CredentialError> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes::<SECRET_BYTES>()?))
}

pub(super) fn hasher() -> Result<Argon2<'static>, CredentialError> {
    let params = Params::new(ARGON2_MEMORY_KIB, ARGON2_ITERATIONS, ARGON2_LANES, None)
        .map_err(|e| CredentialError::Internal(format!("argon2 parameters: {e}")))?;
    Ok(Argon2::new(Algorithm::Argon2id, Version::V0x13, params))
}

/// The argon2id PHC string of `secret` (OWASP parameters, random 128-bit salt).
pub fn hash_secret(secret: &Secret) -> Result<String, CredentialError> {
    hash_secret_beside(secret, None)
}

/// The argon2id PHC string of `secret` under the salt of `sibling` when `sibling` is a
/// PHC string of the same parameters, else under a random 128-bit salt. A rotated key's
/// new secret shares the salt of the secret it replaces, so one argon2 run checks a
/// presented secret against both while the old one is in its grace period: the work of a
/// verification then never tells whether a key was rotated. (The secrets are 256 random
/// bits each; a salt shared by two of them gives an attacker holding the hashes nothing.)
pub fn hash_secret_beside(
    secret: &Secret,
    sibling: Option<&str>,
) -> Result<String, CredentialError> {
    let hasher = hasher()?;
    let shared = sibling
        .and_then(|phc| PasswordHash::new(phc).ok())
        .filter(|hash| same_parameters(hash, &hasher))
        .and_then(|hash| hash.salt.map(|salt| salt.as_str().to_owned()));
    let salt = match shared {
        Some(b64) => SaltString::from_b64(&b64),
        None => SaltString::encode_b64(&random_bytes::<16>()?),
    }
    .map_err(|e| CredentialError::Internal(format!("argon2 salt: {e}")))?;
    let hash = hasher
        .hash_password(secret.expose().as_bytes(), &salt)
        .map_err(|e| CredentialError::Internal(format!("argon2: {e}")))?;
    Ok(hash.to_string())
}

/// Whether `hash` was made by `hasher`'s algorithm, version and parameters.
fn same_parameters(hash: &PasswordHash<'_>, hasher: &Argon2<'_>) -> bool {
    hash.algorithm == Algorithm::Argon2id.ident()
        && hash.version == Some(Version::V0x13.into())
        && Params::try_from(hash).is_ok_and(|p| {
            let want = hasher.params();
            (p.m_cost(), p.t_cost(), p.p_cost()) == (want.m_cost(), want.t_cost(), want.p_cost())
        })
}

/// Whether `secret` matches the PHC string (its own parameters are used).
pub(super) fn verify_phc(phc: &str, secret: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|hash| {
        Argon2::default()
            .verify_password(secret.as_bytes(), &hash)
            .is_ok()
    })
}

/// Which stored secret a presented one matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Matched {
    /// The key's current secret.
    Current,
    /// The secret it replaced, still in its grace period.
    Previous,
}

/// Checks `secret` against a key's `current` PHC string and, while it lasts, its
/// `previous` one. When both share their salt and parameters (every rotation since they
/// do) one argon2 run decides both, compared in constant time; otherwise each hash takes
/// its own run. Returns the match and the argon2 runs spent.
pub(super) fn verify_current_or_previous(
    current: &str,
    previous: Option<&str>,
    secret: &str,
) -> (Option<Matched>, u64) {
    let parsed = (
        PasswordHash::new(current).ok(),
        previous.and_then(|p| PasswordHash::new(p).ok()),
    );
    if let (Some(current), Some(previous)) = &parsed
        && current.salt.is_some()
        && (
            &current.algorithm,
            current.version,
            &current.params,
            current.salt,
        ) == (
            &previous.algorithm,
            previous.version,
            &previous.params,
            previous.salt,
        )
    {
        let computed = rehash(current, secret);
        let is = |stored: &PasswordHash<'_>| -> bool {
            match (&computed, stored.hash) {
                // `Output`'s equality is constant-time.
                (Some(computed), Some(stored)) => *computed == stored,
                _ => false,
            }
        };
        let (is_current, is_previous) = (is(current), is(previous));
        let matched = if is_current {
            Some(Matched::Current)
        } else {
            is_previous.then_some(Matched::Previous)
        };
        return (matched, 1);
    }
    if verify_phc(current, secret) {
        return (Some(Matched::Current), 1);
    }
    match previous {
        Some(previous) => (verify_phc(previous, secret).then_some(Matched::Previous), 2),
        None => (None, 1),
    }
}

/// The hash output of `secret` under `stored`'s algorithm, version, parameters and salt.
fn rehash(stored: &PasswordHash<'_>, secret: &str) -> Option<argon2::password_hash::Output> {
    let params = Params::try_from(stored).ok()?;
    Argon2::default()
        .hash_password_customized(
            secret.as_bytes(),
            Some(stored.algorithm),
            stored.version,
            params,
            stored.salt?,
        )
        .ok()?
        .hash
}

pub(super) fn compose_token(mode: Mode, public_id: &str, secret: &str) -> Secret {
    Secret::new(format!("{}{public_id}_{secret}", mode.prefix()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guards::auth::testing::{fresh, key};

    #[test]
    fn dummy_hash_is_a_valid_phc_with_the_owasp_parameters() {
        let hash = argon2::password_hash::PasswordHash::new(DUMMY_HASH).expect("phc");
        assert_eq!(hash.algorithm.as_str(), "argon2id");
        let params = argon2::Params::try_from(&hash).expect("params");
        assert_eq!(
            (params.m_cost(), params.t_cost(), params.p_cost()),
            (19_456, 2, 1)
        );
    }

    #[test]
    fn token_format_and_parsing() {
        let (_dir, store) = fresh("pro");
        let issued = key(&store, &["*"]);
        let token = issued.token.expose();
        assert!(token.starts_with("tg_live_"));
        let parsed = parse_token(token).ok().expect("parses");
        assert_eq!(parsed.public_id, issued.public_id);
        assert_eq!(parsed.public_id.len(), 20);
        assert_eq!(parsed.secret.len(), 43);
        for bad in [
            "tg_live_",
            "tg_live_abc_def",
            "bearer x",
            "tg_live_abcdefgh12",
            "tg_live_abcd!fgh_0123456789abcdefgh",
        ] {
            assert!(
                matches!(parse_token(bad), Err(Failure::Invalid("malformed"))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_token("tg_cs_abc"),
            Err(Failure::WrongType("client_secret"))
        ));
        assert_eq!(format!("{:?}", issued.token), "Secret(<redacted>)");
    }

    #[test]
    fn a_rotated_secret_shares_its_salt_and_one_run_decides_both() {
        let old = Secret::new("old-secret".into());
        let new = Secret::new("new-secret".into());
        let old_hash = hash_secret(&old).expect("hash");
        let new_hash = hash_secret_beside(&new, Some(&old_hash)).expect("hash");
        let salt = |phc: &str| phc.rsplit('$').nth(1).map(str::to_owned);
        assert_eq!(salt(&old_hash), salt(&new_hash));
        assert_ne!(old_hash, new_hash);
        let check = |secret: &str| verify_current_or_previous(&new_hash, Some(&old_hash), secret);
        assert_eq!(check("new-secret"), (Some(Matched::Current), 1));
        assert_eq!(check("old-secret"), (Some(Matched::Previous), 1));
        assert_eq!(check("wrong"), (None, 1));
        // A pair hashed under different salts (rotated before salts were shared) still
        // works, at one run per hash.
        let unrelated = hash_secret(&new).expect("hash");
        assert_ne!(salt(&unrelated), salt(&old_hash));
        let legacy = |secret: &str| verify_current_or_previous(&unrelated, Some(&old_hash), secret);
        assert_eq!(legacy("new-secret"), (Some(Matched::Current), 1));
        assert_eq!(legacy("old-secret"), (Some(Matched::Previous), 2));
        assert_eq!(legacy("wrong"), (None, 2));
        // A sibling of other parameters lends nothing.
        let other = "$argon2id$v=19$m=8192,t=1,p=1$9Qd8wJ2zGk5Kx1m7uJ1pYg$\
                     3Wl4ROgWJ9qgIYo3X7QTUkAxzn3lVJ4C3IYVhkqmC8M";
        let fresh = hash_secret_beside(&new, Some(other)).expect("hash");
        assert_ne!(salt(&fresh), salt(other));
    }
}
