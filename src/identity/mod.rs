//! PLACEHOLDER (replaced by the real module on merge).
#![allow(missing_docs, dead_code, unused_variables)]
pub struct Identity;
#[derive(Debug, Clone)]
pub struct ProviderToken {
    pub issuer_name: String,
    pub issuer: String,
    pub subject: String,
    pub display_name: Option<String>,
    pub client_id: Option<String>,
    pub scopes: Vec<String>,
    pub expires_at: i64,
    pub cache_until: i64,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    Invalid(&'static str),
    Unavailable(String),
}
impl Identity {
    pub fn start(issuers: &[()], clock: crate::clock::Clock) -> Result<Identity, String> {
        Ok(Identity)
    }
    pub fn is_empty(&self) -> bool {
        true
    }
    pub fn verify(&self, token: &str) -> Result<ProviderToken, IdentityError> {
        Err(IdentityError::Invalid("malformed"))
    }
    pub fn issuer_urls(&self) -> Vec<String> {
        Vec::new()
    }
}
