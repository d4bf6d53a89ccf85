//! Token revocation (RFC 7009, `POST /oauth/revoke`): a client revokes an access token it
//! holds, or a refresh token and with it the token's whole family. An unknown token, or
//! another client's, changes nothing and is answered as if revoked (§2.2): the answer
//! tells nobody whether a token exists.

use std::collections::HashMap;

use serde_json::json;

use crate::store::oauth::secret_digest;

use super::core::{AuthorizationServer, Context, OAuthError, Reply};
use super::token::presented_client;

impl AuthorizationServer {
    /// `POST /oauth/revoke`.
    pub fn revoke(&self, ctx: &Context<'_>, body: &[u8]) -> Reply {
        match self.revocation(ctx, body) {
            Ok(()) => Reply::Json {
                status: 200,
                body: json!({}),
                headers: vec![("Cache-Control".to_owned(), "no-store".to_owned())],
            },
            Err(err) => err.into_reply(),
        }
    }

    fn revocation(&self, ctx: &Context<'_>, body: &[u8]) -> Result<(), OAuthError> {
        self.admit_source(ctx)?;
        let form: HashMap<String, String> = form_urlencoded::parse(body).into_owned().collect();
        let presented = presented_client(ctx, &form)?;
        let client = self.authenticate_client(&presented)?;
        let token = form
            .get("token")
            .ok_or_else(|| OAuthError::new(400, "invalid_request", "The token is missing."))?;
        self.store
            .revoke_issued(&secret_digest(token), &client.id, self.clock.unix_secs())
            .map_err(|e| {
                tracing::warn!(error = %e, "cannot revoke a token");
                OAuthError::new(503, "temporarily_unavailable", "Try again later.")
            })?;
        Ok(())
    }
}
