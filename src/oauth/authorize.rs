//! The authorization endpoint (`GET /oauth/authorize`) and the person's way through it:
//! sign-in (at the company's identity provider, or with a personal key), consent, and the
//! code sent back to the client's redirect URI with `state` and `iss` (RFC 9207).
//!
//! Until the client and its redirect URI are known to be genuine, a refusal is a page here
//! and never a redirect (RFC 6749 §4.1.2.1): an attacker must not be able to bounce a
//! person to a URI of its choosing. After that, refusals go back to the client as
//! `error=…` on its redirect URI.

use crate::identity::IdentityError;
use crate::store::oauth::{AuthRequest, NewAuthRequest, NewCode, NewGrant, SignedIn};

use super::clients::{Client, ClientRefusal, secs};
use super::core::{
    AuthorizationServer, Context, Page, REQUEST_COOKIE, Reply, origin_of, random_id, random_secret,
};

/// Authorization requests a source may start per minute.
pub const AUTHORIZE_PER_MINUTE: u32 = 60;

/// The longest `state` a client may send (it is stored and sent back).
const MAX_STATE_BYTES: usize = 1024;

/// The query of an authorization request, each parameter at most once.
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(query: &str) -> Query {
        Query(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first parameter given more than once (RFC 6749 §3.1 forbids it).
    fn repeated(&self) -> Option<&str> {
        self.0.iter().enumerate().find_map(|(i, (name, _))| {
            self.0[..i]
                .iter()
                .any(|(n, _)| n == name)
                .then_some(name.as_str())
        })
    }
}

/// Where an error goes once the redirect URI is trusted.
pub(super) struct Return<'a> {
    pub(super) redirect_uri: &'a str,
    pub(super) state: Option<&'a str>,
    pub(super) issuer: &'a str,
}

impl Return<'_> {
    /// `redirect_uri` with `params`, `state` and `iss` added to its query.
    fn with(&self, params: &[(&str, &str)]) -> String {
        let mut url = self.redirect_uri.to_owned();
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (name, value) in params {
            query.append_pair(name, value);
        }
        if let Some(state) = self.state {
            query.append_pair("state", state);
        }
        query.append_pair("iss", self.issuer);
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&query.finish());
        url
    }

    pub(super) fn error(&self, error: &str, description: &str) -> Reply {
        Reply::Redirect {
            location: self.with(&[("error", error), ("error_description", description)]),
            cookie: None,
        }
    }
}

/// The scopes of a space-separated list, each once, in order.
pub(super) fn scope_list(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for scope in text.split_ascii_whitespace() {
        if !out.iter().any(|s| s == scope) {
            out.push(scope.to_owned());
        }
    }
    out
}

impl AuthorizationServer {
    /// `GET /oauth/authorize`.
    pub fn authorize(&self, ctx: &Context<'_>, query: &str) -> Reply {
        // A request may make the server fetch a client's metadata document: bounded per
        // source like the token endpoint, so that nobody keeps its workers waiting on
        // documents of their choosing.
        if self
            .windows
            .charge(&format!("authorize:{}", ctx.source), AUTHORIZE_PER_MINUTE)
            .is_some()
        {
            return Reply::error_page(
                429,
                "temporarily_unavailable",
                "Too many sign-ins were started from this address; wait a minute and try again.",
            );
        }
        let query = Query::parse(query);
        if let Some(name) = query.repeated() {
            return Reply::error_page(
                400,
                "invalid_request",
                format!("The parameter {name} was given more than once."),
            );
        }
        let Some(client_id) = query.get("client_id").filter(|c| !c.is_empty()) else {
            return Reply::error_page(400, "invalid_request", "The request names no client_id.");
        };
        let client = match self.client(client_id) {
            Ok(client) => client,
            Err(refusal) => return client_refusal_page(&refusal),
        };
        let redirect_uri = match query.get("redirect_uri") {
            Some(presented) => match client.redirect_for(presented) {
                Some(_) => presented.to_owned(),
                None => {
                    return Reply::error_page(
                        400,
                        "invalid_request",
                        "The redirect_uri is not one the client registered.",
                    );
                }
            },
            None if client.redirect_uris.len() == 1 => client.redirect_uris[0].clone(),
            None => {
                return Reply::error_page(
                    400,
                    "invalid_request",
                    "The client registered several redirect URIs; the request must name one.",
                );
            }
        };
        let state = query.get("state");
        if state.is_some_and(|s| s.len() > MAX_STATE_BYTES) {
            return Reply::error_page(400, "invalid_request", "The state is too long.");
        }
        let back = Return {
            redirect_uri: &redirect_uri,
            state,
            issuer: ctx.issuer,
        };
        match self.check_request(ctx, &query, &client) {
            Ok(checked) => self.begin(ctx, &client, &redirect_uri, state, checked),
            Err((error, description)) => back.error(error, description),
        }
    }

    /// The rest of the request, once its redirect URI is trusted: the response type, PKCE
    /// (S256 only), the resource (RFC 8707) and the scopes.
    fn check_request(
        &self,
        ctx: &Context<'_>,
        query: &Query,
        client: &Client,
    ) -> Result<Checked, (&'static str, &'static str)> {
        if query.get("response_type") != Some("code") {
            return Err((
                "unsupported_response_type",
                "Only the authorization code flow (response_type=code) is supported.",
            ));
        }
        if !client.may_use("authorization_code") {
            return Err((
                "unauthorized_client",
                "The client did not register for the authorization_code grant.",
            ));
        }
        let Some(challenge) = query.get("code_challenge") else {
            return Err((
                "invalid_request",
                "PKCE is required: send a code_challenge (S256).",
            ));
        };
        if query.get("code_challenge_method") != Some("S256") {
            return Err((
                "invalid_request",
                "Only the S256 code_challenge_method is supported; plain is refused.",
            ));
        }
        let well_formed = challenge.len() == 43
            && challenge
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !well_formed {
            return Err((
                "invalid_request",
                "The code_challenge is not an S256 challenge.",
            ));
        }
        let resource = ctx.resource();
        if let Some(asked) = query.get("resource")
            && asked.trim_end_matches('/') != resource
        {
            return Err((
                "invalid_target",
                "The resource is not this server's MCP endpoint.",
            ));
        }
        let scopes = match query.get("scope") {
            Some(text) if !text.trim().is_empty() => {
                let scopes = scope_list(text);
                if scopes.iter().any(|s| !ctx.scopes.contains(s)) {
                    return Err((
                        "invalid_scope",
                        "A requested scope is not one this server knows.",
                    ));
                }
                Some(scopes)
            }
            _ => None,
        };
        Ok(Checked {
            challenge: challenge.to_owned(),
            resource,
            scopes,
        })
    }

    /// Stores the request and sends the person to sign in.
    fn begin(
        &self,
        ctx: &Context<'_>,
        client: &Client,
        redirect_uri: &str,
        state: Option<&str>,
        checked: Checked,
    ) -> Reply {
        let (Some(id), Some(csrf)) = (random_id("req_"), random_id("")) else {
            return unavailable_page();
        };
        let now = self.clock.unix_secs();
        let ttl = self.config.request_ttl.as_secs();
        let stored = self.store.insert_auth_request(&NewAuthRequest {
            id: &id,
            csrf: &csrf,
            client_id: &client.id,
            client_name: client.name.as_deref(),
            redirect_uri,
            state,
            code_challenge: &checked.challenge,
            scopes: checked.scopes.as_deref(),
            resource: &checked.resource,
            now,
            expires_at: now + secs(self.config.request_ttl),
        });
        if let Err(e) = stored {
            tracing::warn!(error = %e, "cannot store an authorization request");
            return unavailable_page();
        }
        let cookie = self.request_cookie(ctx, &id, ttl);
        if let Some(identity) = self.login_identity() {
            let callback = format!("{}/oauth/callback", ctx.issuer);
            let started = identity.begin_login(&callback).map_err(|e| match e {
                IdentityError::Unavailable(why) => why,
                IdentityError::Invalid(reason) => reason.to_owned(),
            });
            return match started {
                Ok(login) => {
                    let noted = self.store.begin_request_login(
                        &id,
                        &login.state,
                        &login.nonce,
                        &login.verifier,
                    );
                    match noted {
                        Ok(_) => Reply::Redirect {
                            location: login.url,
                            cookie: Some(cookie),
                        },
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot store an authorization request");
                            unavailable_page()
                        }
                    }
                }
                Err(why) => {
                    tracing::warn!(cause = %why, "cannot send a person to the identity provider");
                    unavailable_page()
                }
            };
        }
        Reply::Page {
            status: 200,
            page: Page::SignIn {
                request: id,
                csrf,
                client: client.label(),
                failed: false,
            },
            cookie: Some(cookie),
            form_targets: Vec::new(),
        }
    }

    /// The request a form or the provider's answer belongs to: it must be alive and the
    /// browser must hold its cookie.
    pub(super) fn live_request(
        &self,
        ctx: &Context<'_>,
        id: &str,
    ) -> Result<AuthRequest, Box<Reply>> {
        if ctx.cookie(REQUEST_COOKIE) != Some(id) {
            return Err(Box::new(Reply::error_page(
                400,
                "invalid_request",
                "This sign-in was started in another browser, or its cookie is gone. Start \
                 again from the application.",
            )));
        }
        match self.store.auth_request(id, self.clock.unix_secs()) {
            Ok(Some(request)) => Ok(request),
            Ok(None) => Err(Box::new(expired_page())),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read an authorization request");
                Err(Box::new(unavailable_page()))
            }
        }
    }

    /// Someone signed in: the code at once when they consented to this client for these
    /// scopes before, the consent page otherwise.
    pub(super) fn signed_in(
        &self,
        ctx: &Context<'_>,
        request: AuthRequest,
        who: SignedIn,
    ) -> Reply {
        let back = Return {
            redirect_uri: &request.redirect_uri,
            state: request.state.as_deref(),
            issuer: ctx.issuer,
        };
        let asked = request
            .scopes
            .clone()
            .unwrap_or_else(|| who.held_scopes.clone());
        let granted: Vec<String> = asked
            .iter()
            .filter(|s| who.held_scopes.contains(s))
            .cloned()
            .collect();
        if granted.is_empty() {
            let _ = self.store.end_auth_request(&request.id);
            return back.error(
                "invalid_scope",
                "The person who signed in holds none of the scopes the client asked for.",
            );
        }
        if let Err(e) = self.store.set_request_signed_in(&request.id, &who) {
            tracing::warn!(error = %e, "cannot store an authorization request");
            return unavailable_page();
        }
        let remembered = self
            .store
            .standing_grant(&who.principal_id, &request.client_id)
            .ok()
            .flatten()
            .is_some_and(|grant| granted.iter().all(|s| grant.scopes.contains(s)));
        if remembered {
            return self.grant_code(ctx, &request, &who, &granted);
        }
        let not_held = asked
            .iter()
            .filter(|s| !who.held_scopes.contains(s))
            .cloned()
            .collect();
        let client = self.client(&request.client_id).ok();
        Reply::Page {
            status: 200,
            page: Page::Consent {
                request: request.id.clone(),
                csrf: request.csrf.clone(),
                client: request
                    .client_name
                    .clone()
                    .unwrap_or_else(|| request.client_id.clone()),
                client_id: request.client_id.clone(),
                redirect_host: redirect_host(&request.redirect_uri),
                loopback_only: client.as_ref().is_some_and(Client::loopback_only),
                person: who.label,
                granted,
                not_held,
            },
            cookie: None,
            form_targets: form_target(&request.redirect_uri).into_iter().collect(),
        }
    }

    /// A form a person posted for a request: from this origin, for a live request whose
    /// cookie the browser holds, with the request's token.
    pub(super) fn posted_form(
        &self,
        ctx: &Context<'_>,
        body: &[u8],
    ) -> Result<(Form, AuthRequest), Box<Reply>> {
        let form = Form::parse(body);
        if !ctx.same_origin_post() {
            return Err(Box::new(forbidden_page()));
        }
        let request = self.live_request(ctx, form.get("request"))?;
        if !super::core::same_token(form.get("csrf"), &request.csrf) {
            return Err(Box::new(forbidden_page()));
        }
        Ok((form, request))
    }

    /// `POST /oauth/consent`: the person's answer.
    pub fn consent(&self, ctx: &Context<'_>, body: &[u8]) -> Reply {
        let (form, request) = match self.posted_form(ctx, body) {
            Ok(posted) => posted,
            Err(reply) => return *reply,
        };
        let Some(who) = request.signed_in.clone() else {
            return forbidden_page();
        };
        let back = Return {
            redirect_uri: &request.redirect_uri,
            state: request.state.as_deref(),
            issuer: ctx.issuer,
        };
        if form.get("decision") != "allow" {
            let _ = self.store.end_auth_request(&request.id);
            return back.error("access_denied", "The person declined.");
        }
        let asked = request
            .scopes
            .clone()
            .unwrap_or_else(|| who.held_scopes.clone());
        let granted: Vec<String> = asked
            .into_iter()
            .filter(|s| who.held_scopes.contains(s))
            .collect();
        let Some(grant_id) = random_id("g_") else {
            return unavailable_page();
        };
        let recorded = self.store.consent(&NewGrant {
            id: &grant_id,
            principal_id: &who.principal_id,
            principal_label: &who.label,
            client_id: &request.client_id,
            client_name: request.client_name.as_deref(),
            scopes: &granted,
            now: self.clock.unix_secs(),
        });
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "cannot record a consent");
            return unavailable_page();
        }
        self.grant_code(ctx, &request, &who, &granted)
    }

    /// Ends the request with a code for `scopes` under the person's standing grant.
    fn grant_code(
        &self,
        ctx: &Context<'_>,
        request: &AuthRequest,
        who: &SignedIn,
        scopes: &[String],
    ) -> Reply {
        let back = Return {
            redirect_uri: &request.redirect_uri,
            state: request.state.as_deref(),
            issuer: ctx.issuer,
        };
        // Two answers to one request (a double post): only the first goes on.
        match self.store.end_auth_request(&request.id) {
            Ok(true) => {}
            Ok(false) => return expired_page(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot end an authorization request");
                return unavailable_page();
            }
        }
        let grant = match self
            .store
            .standing_grant(&who.principal_id, &request.client_id)
        {
            Ok(Some(grant)) => grant,
            Ok(None) => return back.error("access_denied", "The consent was revoked."),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read a consent");
                return unavailable_page();
            }
        };
        let Some(code) = random_secret("tg_ac_") else {
            return unavailable_page();
        };
        let now = self.clock.unix_secs();
        let stored = self.store.insert_code(&NewCode {
            code_hash: &crate::store::oauth::secret_digest(&code),
            grant_id: &grant.id,
            client_id: &request.client_id,
            redirect_uri: &request.redirect_uri,
            code_challenge: &request.code_challenge,
            scopes,
            resource: &request.resource,
            now,
            expires_at: now + secs(self.config.code_ttl),
        });
        if let Err(e) = stored {
            tracing::warn!(error = %e, "cannot store a code");
            return back.error("temporarily_unavailable", "Try again later.");
        }
        Reply::Redirect {
            location: back.with(&[("code", &code)]),
            cookie: Some(self.request_cookie(ctx, "", 0)),
        }
    }
}

/// What the request checks found.
struct Checked {
    challenge: String,
    resource: String,
    scopes: Option<Vec<String>>,
}

/// A form's fields (the first value of each).
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    pub(super) fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
    }

    pub(super) fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The host a redirect URI sends the person to (its scheme for a private-use scheme).
fn redirect_host(uri: &str) -> String {
    match url::Url::parse(uri) {
        Ok(url) => match url.host_str() {
            Some(host) => host.to_owned(),
            None => format!("{}:", url.scheme()),
        },
        Err(_) => uri.to_owned(),
    }
}

/// What a consent form's CSP must allow it to be redirected to.
fn form_target(uri: &str) -> Option<String> {
    let url = url::Url::parse(uri).ok()?;
    match url.scheme() {
        "http" | "https" => origin_of(uri),
        scheme => Some(format!("{scheme}:")),
    }
}

fn client_refusal_page(refusal: &ClientRefusal) -> Reply {
    match refusal {
        ClientRefusal::Unknown => Reply::error_page(
            400,
            "invalid_client",
            "This application is not known here: its registration expired or never existed. \
             Connect it again.",
        ),
        ClientRefusal::Document(err) => Reply::error_page(
            400,
            "invalid_client",
            format!("The application's metadata document cannot be used: {err}."),
        ),
        ClientRefusal::Unavailable => unavailable_page(),
    }
}

pub(super) fn unavailable_page() -> Reply {
    Reply::error_page(
        503,
        "temporarily_unavailable",
        "The server cannot complete the sign-in right now. Try again in a minute.",
    )
}

pub(super) fn expired_page() -> Reply {
    Reply::error_page(
        400,
        "invalid_request",
        "This sign-in expired or was already completed. Start again from the application.",
    )
}

pub(super) fn forbidden_page() -> Reply {
    Reply::error_page(
        403,
        "access_denied",
        "This form was not sent from the sign-in page. Start again from the application.",
    )
}
