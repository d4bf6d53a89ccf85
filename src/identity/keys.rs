//! A provider's signing keys: a JWKS (RFC 7517) read into the public keys tollgate can
//! verify with, each with the algorithms it may verify, and the choice of keys for one
//! token (by `kid`, else every key of the token's algorithm).
//!
//! A key that cannot serve (an encryption key, a symmetric `oct` key, a curve or type
//! that is not supported, a malformed entry) is left out rather than failing the set:
//! providers publish such keys beside their signing ones (Keycloak's `RSA-OAEP` key).

use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

const RSA_ALGORITHMS: [Algorithm; 6] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

/// One public key and what it may verify.
#[derive(Clone)]
struct VerifyingKey {
    kid: Option<String>,
    algorithms: Vec<Algorithm>,
    key: DecodingKey,
}

/// The usable keys of one JWKS.
#[derive(Clone, Default)]
pub(super) struct KeySet {
    keys: Vec<VerifyingKey>,
}

/// The keys that may have signed one token.
pub(super) enum Selection {
    /// These keys, to try in turn.
    Keys(Vec<DecodingKey>),
    /// The token's `kid` names a key that cannot verify the token's algorithm.
    WrongAlgorithm,
    /// No key has that `kid` (or, without a `kid`, none serves the algorithm).
    NotFound,
}

impl KeySet {
    /// Reads a JWKS document `{"keys": [...]}`; an error when it has no usable key.
    pub(super) fn parse(document: &Value) -> Result<KeySet, String> {
        let entries = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("the key set has no `keys` list")?;
        let keys: Vec<VerifyingKey> = entries.iter().filter_map(verifying_key).collect();
        if keys.is_empty() {
            return Err(format!(
                "none of the {} keys of the key set is a public signing key tollgate can use \
                 (RSA, EC P-256/P-384 or Ed25519)",
                entries.len()
            ));
        }
        Ok(KeySet { keys })
    }

    /// How many keys.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The keys for a token with this `kid` and algorithm.
    pub(super) fn select(&self, kid: Option<&str>, algorithm: Algorithm) -> Selection {
        let Some(kid) = kid else {
            let keys: Vec<DecodingKey> = self
                .keys
                .iter()
                .filter(|k| k.algorithms.contains(&algorithm))
                .map(|k| k.key.clone())
                .collect();
            return if keys.is_empty() {
                Selection::NotFound
            } else {
                Selection::Keys(keys)
            };
        };
        let named: Vec<&VerifyingKey> = self
            .keys
            .iter()
            .filter(|k| k.kid.as_deref() == Some(kid))
            .collect();
        if named.is_empty() {
            return Selection::NotFound;
        }
        let keys: Vec<DecodingKey> = named
            .iter()
            .filter(|k| k.algorithms.contains(&algorithm))
            .map(|k| k.key.clone())
            .collect();
        if keys.is_empty() {
            Selection::WrongAlgorithm
        } else {
            Selection::Keys(keys)
        }
    }
}

/// One JWK as a verifying key, or `None` when it cannot serve.
fn verifying_key(jwk: &Value) -> Option<VerifyingKey> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    if text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    let (key, family) = match (text("kty")?, text("crv")) {
        ("RSA", _) => (
            DecodingKey::from_rsa_components(text("n")?, text("e")?).ok()?,
            RSA_ALGORITHMS.to_vec(),
        ),
        ("EC", Some("P-256")) => (
            DecodingKey::from_ec_components(text("x")?, text("y")?).ok()?,
            vec![Algorithm::ES256],
        ),
        ("EC", Some("P-384")) => (
            DecodingKey::from_ec_components(text("x")?, text("y")?).ok()?,
            vec![Algorithm::ES384],
        ),
        ("OKP", Some("Ed25519")) => (
            DecodingKey::from_ed_components(text("x")?).ok()?,
            vec![Algorithm::EdDSA],
        ),
        _ => return None,
    };
    // A key that names its algorithm verifies that one only (RFC 7517 §4.4).
    let algorithms = match text("alg") {
        None => family,
        Some(alg) => {
            let named: Algorithm = alg.parse().ok()?;
            family.contains(&named).then(|| vec![named])?
        }
    };
    Some(VerifyingKey {
        kid: text("kid").map(str::to_owned),
        algorithms,
        key,
    })
}
