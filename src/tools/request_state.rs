//! Integrity-protected `requestState` for multi-round tool calls (2026-07-28 MRTR).
//!
//! The state travels through the client, so it is attacker-controlled: it is sealed as
//! `base64url(payload) "." base64url(HMAC-SHA256(key, payload))` with a key kept in the
//! database (shared by every process on the file) and opened only when the tag matches,
//! compared in constant time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// The key that signs request states.
#[derive(Clone)]
pub struct StateKey(Vec<u8>);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(<redacted>)")
    }
}

impl StateKey {
    /// Wraps key bytes (at least 32).
    pub fn new(bytes: Vec<u8>) -> StateKey {
        StateKey(bytes)
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length, so this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!())
    }

    /// Seals a JSON payload.
    pub fn seal(&self, payload: &Value) -> String {
        let body = serde_json::to_vec(payload).unwrap_or_default();
        let mut mac = self.mac();
        mac.update(&body);
        let tag = mac.finalize().into_bytes();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&body),
            URL_SAFE_NO_PAD.encode(tag)
        )
    }

    /// Opens a sealed state; `None` when it was altered or is not ours.
    pub fn open(&self, sealed: &str) -> Option<Value> {
        let (body, tag) = sealed.split_once('.')?;
        let body = URL_SAFE_NO_PAD.decode(body).ok()?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut mac = self.mac();
        mac.update(&body);
        mac.verify_slice(&tag).ok()?;
        serde_json::from_slice(&body).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sealed_states_open_and_tampered_ones_do_not() {
        let key = StateKey::new(vec![7; 32]);
        let sealed = key.seal(&json!({"round": 1}));
        assert_eq!(key.open(&sealed), Some(json!({"round": 1})));
        assert_eq!(key.open(&format!("{sealed}-TAMPERED")), None);
        assert_eq!(StateKey::new(vec![8; 32]).open(&sealed), None);
        assert_eq!(key.open("garbage"), None);
        assert_eq!(format!("{key:?}"), "StateKey(<redacted>)");
    }
}
