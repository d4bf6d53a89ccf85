//! A person signs in for an authorization request: with a personal key on tollgate's own
//! page (`POST /oauth/sign-in`), or at the company's identity provider, which sends them
//! back to `GET /oauth/callback` with a code tollgate exchanges and an ID token it verifies
//! ([`crate::identity`]). Either way the request then goes on to consent
//! ([`AuthorizationServer::signed_in`]).

use crate::identity::IdentityError;
use crate::store::oauth::SignedIn;
use crate::store::users::SeenUser;

use super::authorize::{Query, Return, expired_page, unavailable_page};
use super::core::{AuthorizationServer, Context, Page, REQUEST_COOKIE, Reply};

impl AuthorizationServer {
    /// `POST /oauth/sign-in`: a person signs in with a personal key.
    pub fn sign_in(&self, ctx: &Context<'_>, body: &[u8]) -> Reply {
        let (form, request) = match self.posted_form(ctx, body) {
            Ok(posted) => posted,
            Err(reply) => return *reply,
        };
        let principal = match ctx.auth.authenticate(Some(form.get("key")), ctx.source) {
            Ok(principal) if !principal.is_user() && principal.client_id.is_none() => principal,
            Ok(_) | Err(_) => {
                return Reply::Page {
                    status: 401,
                    page: Page::SignIn {
                        request: request.id,
                        csrf: request.csrf,
                        client: request.client_name.unwrap_or(request.client_id),
                        failed: true,
                    },
                    cookie: None,
                    form_targets: Vec::new(),
                };
            }
        };
        let held = if principal
            .scopes
            .iter()
            .any(|s| s == crate::guards::auth::SUPER_SCOPE)
        {
            ctx.scopes.to_vec()
        } else {
            principal.scopes.clone()
        };
        let label = self
            .store
            .api_keys()
            .ok()
            .and_then(|keys| {
                keys.into_iter()
                    .find(|k| k.public_id == principal.credential_id)
            })
            .map_or_else(|| principal.credential_id.clone(), |k| k.name);
        let who = SignedIn {
            principal_id: principal.credential_id,
            label,
            held_scopes: held,
        };
        self.signed_in(ctx, request, who)
    }

    /// `GET /oauth/callback`: the identity provider sends the person back.
    pub fn callback(&self, ctx: &Context<'_>, query: &str) -> Reply {
        let query = Query::parse(query);
        let Some(login_state) = query.get("state") else {
            return Reply::error_page(400, "invalid_request", "The answer carries no state.");
        };
        let request = match self
            .store
            .take_request_login(login_state, self.clock.unix_secs())
        {
            Ok(Some(request)) => request,
            Ok(None) => return expired_page(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read an authorization request");
                return unavailable_page();
            }
        };
        if ctx.cookie(REQUEST_COOKIE) != Some(request.id.as_str()) {
            return Reply::error_page(
                400,
                "invalid_request",
                "This sign-in was started in another browser. Start again from the application.",
            );
        }
        let back = Return {
            redirect_uri: &request.redirect_uri,
            state: request.state.as_deref(),
            issuer: ctx.issuer,
        };
        let end = |reply: Reply| {
            let _ = self.store.end_auth_request(&request.id);
            reply
        };
        // RFC 9207: a provider that names itself must be the one the person was sent to;
        // an answer from another (a mix-up attack) is refused before its code is used.
        if let (Some(iss), Some(expected)) = (
            query.get("iss"),
            self.login_identity().and_then(|i| i.login_issuer_url()),
        ) && iss != expected
        {
            tracing::warn!("an identity provider's answer named another issuer (mix-up); refused");
            return end(back.error(
                "access_denied",
                "The sign-in answer came from another identity provider.",
            ));
        }
        if query.get("error").is_some() {
            return end(back.error(
                "access_denied",
                "The sign-in at the identity provider did not complete.",
            ));
        }
        let (Some(identity), Some(code), Some(nonce), Some(verifier)) = (
            self.login_identity(),
            query.get("code"),
            request.login_nonce.as_deref(),
            request.login_verifier.as_deref(),
        ) else {
            return end(back.error("access_denied", "The identity provider sent no code."));
        };
        let callback = format!("{}/oauth/callback", ctx.issuer);
        let person = match identity.finish_login(code, &callback, verifier, nonce) {
            Ok(person) => person,
            Err(IdentityError::Invalid(reason)) => {
                tracing::info!(reason, "a sign-in at the identity provider was refused");
                return end(back.error(
                    "access_denied",
                    "The sign-in at the identity provider was refused.",
                ));
            }
            Err(IdentityError::Unavailable(why)) => {
                tracing::warn!(cause = %why, "the identity provider could not finish a sign-in");
                return end(back.error(
                    "temporarily_unavailable",
                    "The identity provider cannot be reached; try again later.",
                ));
            }
        };
        let seen = SeenUser {
            issuer: &person.issuer,
            subject: &person.subject,
            display_name: person.display_name.as_deref(),
            client_id: Some(&request.client_id),
        };
        let (user_id, standing) = match self.store.record_user(&seen, self.clock.unix_secs()) {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot record a user");
                return end(back.error("temporarily_unavailable", "Try again later."));
            }
        };
        if standing.blocked_at.is_some() {
            return end(back.error("access_denied", "The operator blocked this user."));
        }
        let who = SignedIn {
            principal_id: user_id,
            label: person.display_name.unwrap_or(person.subject),
            held_scopes: person.scopes,
        };
        self.signed_in(ctx, request, who)
    }
}
