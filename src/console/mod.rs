//! The operator's console: server-rendered pages under `/console` on the HTTP listener.
//!
//! An operator signs in with an API key that holds the `admin` scope (a key holding only
//! `approve` signs in to the Approvals page alone); the key is exchanged
//! for a session cookie (`session`), every form carries that sign-in's CSRF token, and
//! every change made here is written to the audit log under the operator's credential
//! before the page says it is done. Pages read and change state through the same
//! functions as the command line (`guards::auth` keys and clients, `guards::ratelimit`
//! limits and usage, the identity provider's users and their blocks in `users`, the OAuth
//! front door's grants and registered clients in `grants`, the audit log) and are rendered
//! from the templates in `templates/` with HTML autoescaping, in the company's language
//! (`i18n`). They work with JavaScript off; the one script copies a new
//! secret to the clipboard. Nothing is loaded from anywhere but this server.
//!
//! The transport hands a [`Request`] in and writes the [`Response`] out; it has already
//! applied the `Host`/`Origin` policy of `/mcp`. Here a form post must also come from this
//! very origin (`Origin` equal to `Host`, and no cross-site `Sec-Fetch-Site`).

mod approvals;
mod audit_log;
mod backends;
mod charts;
mod credentials;
pub mod front_door;
mod grants;
mod i18n;
mod latency;
mod names;
mod pages;
mod pins;
pub mod session;
mod users;

use std::sync::Arc;

use minijinja::Environment;
use serde_json::{Value, json};

use self::i18n::Texts;
use self::session::{Sessions, Signed, Started, random_token, same_token};
use crate::catalog::{ErrorKind, McpError};
use crate::config::{Config, Locale};
use crate::guards::auth::{CredentialError, KnownScopes, Principal, is_approver, is_operator};
use crate::protocol::dispatch::Server;
use crate::store::{StoreError, store_failure};

/// The cookie that names a sign-in.
pub const SESSION_COOKIE: &str = "tollgate_console";
/// The cookie that pairs the sign-in form with the browser that loaded it.
pub const SIGN_IN_COOKIE: &str = "tollgate_console_signin";
/// The Content-Security-Policy of every page: this server's own stylesheet and script,
/// no inline code, no frames, forms only to here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; \
     script-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";
/// The longest form body read (the audit filter is a GET; forms here are small).
const MAX_FORM_BYTES: usize = 16 * 1024;

/// The methods the console answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET` (and `HEAD`, answered as `GET`).
    Get,
    /// `POST`: a form.
    Post,
    /// Anything else: refused.
    Other,
}

/// One request as the transport read it.
pub struct Request<'a> {
    /// The method.
    pub method: Method,
    /// The path, without the query.
    pub path: &'a str,
    /// The query string, without `?`.
    pub query: &'a str,
    /// Headers, names lowercase.
    pub headers: &'a [(String, String)],
    /// The body (a form post's fields).
    pub body: &'a [u8],
    /// Who is asking, as the authentication failure throttle counts it (`http:<address>`).
    pub source: &'a str,
}

impl Request<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?.split(';').find_map(|pair| {
            let (n, v) = pair.trim().split_once('=')?;
            (n == name).then_some(v)
        })
    }

    /// The query's fields.
    fn query_fields(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(self.query.as_bytes())
            .into_owned()
            .collect()
    }
}

/// What the transport writes back.
#[derive(Debug)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// Headers besides the length.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    fn new(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        let mut response = Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body,
        };
        for (name, value) in [
            ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
            ("X-Frame-Options", "DENY"),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "same-origin"),
            ("Cache-Control", "no-store"),
        ] {
            response.headers.push((name.into(), value.into()));
        }
        response
    }

    fn html(status: u16, page: String) -> Response {
        Response::new(status, "text/html; charset=utf-8", page.into_bytes())
    }

    fn redirect(to: &str) -> Response {
        let mut response = Response::new(303, "text/plain; charset=utf-8", Vec::new());
        response.headers.push(("Location".into(), to.into()));
        response
    }

    fn with_header(mut self, name: &str, value: String) -> Response {
        self.headers.push((name.into(), value));
        self
    }
}

/// A form's fields, by name.
struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Form {
        Form(form_urlencoded::parse(body).into_owned().collect())
    }

    /// The field, trimmed; empty when absent.
    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.trim())
    }

    /// Every field named `name` (a group of checkboxes), trimmed, in the form's order.
    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.trim())
            .collect()
    }
}

/// The signed-in operator a page is rendered for.
struct Operator {
    /// The session id (the cookie's value).
    session: String,
    signed: Signed,
    principal: Principal,
}

/// The console of one server.
pub struct Console {
    server: Arc<Server>,
    sessions: Sessions,
    templates: Environment<'static>,
    /// `Secure` on the cookies: the public base URL is `https://`.
    secure: bool,
    /// The scopes a credential made here may hold (the configured backends' included).
    scopes: KnownScopes,
    /// Whether the OAuth front door (`[oauth_server]`) is on: the grants page says when
    /// it is not.
    front_door: bool,
}

impl Console {
    /// The console of `server`, set up from `[console]` and `[http]`; `None` when it is
    /// turned off.
    pub fn new(server: Arc<Server>, config: &Config) -> Option<Console> {
        if !config.console.enabled {
            return None;
        }
        let secure = config
            .http
            .public_base_url
            .as_deref()
            .is_some_and(|u| u.to_ascii_lowercase().starts_with("https://"));
        let sessions = Sessions::new(server.clock().clone(), config.console.idle_timeout);
        let templates = pages::templates(server.locale());
        Some(Console {
            server,
            sessions,
            templates,
            secure,
            scopes: KnownScopes::new(&config.backends, config.tools.conformance_pack),
            front_door: config.oauth_server.enabled,
        })
    }

    /// Serves one request under `/console`.
    pub fn handle(&self, request: &Request<'_>) -> Response {
        if let Some(asset) = pages::asset(request.path) {
            return match request.method {
                Method::Get => {
                    let mut response = Response::new(200, asset.0, asset.1.as_bytes().to_vec());
                    response.headers.retain(|(n, _)| n != "Cache-Control");
                    response.with_header("Cache-Control", "private, max-age=300".into())
                }
                _ => self.refusal(request, 405),
            };
        }
        if request.method == Method::Other {
            return self.refusal(request, 405);
        }
        if request.method == Method::Post && !same_origin(request) {
            return self.refusal(request, 403);
        }
        match (request.method, request.path) {
            (Method::Get, "/console/sign-in") => self.sign_in_page(None, 200),
            (Method::Post, "/console/sign-in") => self.sign_in(request),
            _ => match self.operator(request) {
                Some(operator) => self.signed_in(request, &operator),
                None => Response::redirect("/console/sign-in"),
            },
        }
    }

    /// The routes behind the sign-in.
    fn signed_in(&self, request: &Request<'_>, operator: &Operator) -> Response {
        if request.method == Method::Post {
            if request.body.len() > MAX_FORM_BYTES {
                return self.refusal(request, 413);
            }
            let form = Form::parse(request.body);
            if !same_token(form.get("csrf"), &operator.signed.csrf) {
                return self.refusal(request, 403);
            }
            if request.path == "/console/sign-out" {
                self.sessions.end(&operator.session);
                return Response::redirect("/console/sign-in")
                    .with_header("Set-Cookie", self.cookie(SESSION_COOKIE, "", 0));
            }
            if !self.may_open(operator, request.path) {
                return self.refusal(request, 403);
            }
            return pages::post(self, request, operator, &form)
                .unwrap_or_else(|| self.refusal(request, 404));
        }
        if !self.may_open(operator, request.path) {
            return Response::redirect(approvals::PATH);
        }
        pages::get(self, request, operator).unwrap_or_else(|| self.refusal(request, 404))
    }

    /// Whether `operator` may open `path`: an `admin` sign-in every page, an `approve`
    /// one the Approvals page alone (and signing out).
    fn may_open(&self, operator: &Operator, path: &str) -> bool {
        is_operator(&operator.principal.scopes) || path.starts_with(approvals::PATH)
    }

    /// The operator the request's session cookie names, checked again now: the key still
    /// active and still holding `admin`. A sign-in whose key lost either ends here.
    fn operator(&self, request: &Request<'_>) -> Option<Operator> {
        let session = request.cookie(SESSION_COOKIE)?.to_owned();
        let signed = self.sessions.get(&session)?;
        let auth = self.server.guards().authenticator();
        match auth.principal_for_public_id(&signed.credential_id) {
            Ok(principal) if is_approver(&principal.scopes) => Some(Operator {
                session,
                signed,
                principal,
            }),
            _ => {
                self.sessions.end(&session);
                None
            }
        }
    }

    /// `POST /console/sign-in`: the key exchanged for a session cookie. A wrong key counts
    /// against the source in the same failure throttle as MCP authentication.
    fn sign_in(&self, request: &Request<'_>) -> Response {
        let texts = self.texts();
        if request.body.len() > MAX_FORM_BYTES {
            return self.refusal(request, 413);
        }
        let form = Form::parse(request.body);
        let paired = request
            .cookie(SIGN_IN_COOKIE)
            .is_some_and(|c| !c.is_empty() && same_token(c, form.get("csrf")));
        if !paired {
            return self.sign_in_page(Some(texts.get("sign_in_expired")), 403);
        }
        let auth = self.server.guards().authenticator();
        let principal = match auth.authenticate(Some(form.get("key")), request.source) {
            Ok(principal) => principal,
            Err(err) if err.kind() == ErrorKind::RateLimited => {
                let wait = err
                    .fields()
                    .get("retry_after")
                    .and_then(Value::as_i64)
                    .unwrap_or(60);
                let message = texts
                    .get("sign_in_throttled")
                    .replace("{s}", &wait.to_string());
                return self
                    .sign_in_page(Some(&message), 429)
                    .with_header("Retry-After", wait.to_string());
            }
            Err(err) if err.kind() == ErrorKind::BackendUnavailable => {
                let status = err.kind().spec().http_status;
                return self.sign_in_page(Some(&err.hint(self.locale())), status);
            }
            Err(err) => {
                tracing::warn!(
                    source = request.source,
                    code = err.kind().spec().code,
                    "a console sign-in was refused"
                );
                return self.sign_in_page(Some(texts.get("sign_in_wrong")), 401);
            }
        };
        if !is_approver(&principal.scopes) {
            tracing::warn!(
                source = request.source,
                credential = %principal.credential_id,
                "a console sign-in was refused: the key has no admin scope"
            );
            return self.sign_in_page(Some(texts.get("sign_in_not_admin")), 403);
        }
        let session = match self.sessions.start(&principal.credential_id) {
            Some(Started::Session(session, _)) => session,
            Some(Started::Full) => {
                tracing::warn!(
                    source = request.source,
                    credential = %principal.credential_id,
                    capacity = session::CAPACITY,
                    "a console sign-in was refused: every sign-in this node keeps is in use"
                );
                return self.sign_in_page(Some(texts.get("sign_in_full")), 503);
            }
            None => return self.refusal(request, 500),
        };
        self.record(
            &principal,
            "sign_in",
            &principal.credential_id,
            request.source,
        );
        let idle = self.sessions.idle().as_secs();
        let home = if is_operator(&principal.scopes) {
            "/console"
        } else {
            approvals::PATH
        };
        Response::redirect(home)
            .with_header("Set-Cookie", self.cookie(SESSION_COOKIE, &session, idle))
            .with_header("Set-Cookie", self.cookie(SIGN_IN_COOKIE, "", 0))
    }

    /// The sign-in form, with a fresh pairing token (cookie and hidden field).
    fn sign_in_page(&self, error: Option<&str>, status: u16) -> Response {
        let Some(token) = random_token() else {
            return Response::html(500, String::new());
        };
        let page = self.render(
            "sign_in.html",
            "sign_in",
            None,
            json!({"error": error, "csrf": token}),
        );
        Response::html(status, page)
            .with_header("Set-Cookie", self.cookie(SIGN_IN_COOKIE, &token, 600))
    }

    /// A `Set-Cookie` value scoped to the console.
    fn cookie(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!(
            "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        )
    }

    /// The texts of the company's language.
    fn texts(&self) -> &'static Texts {
        i18n::texts(self.server.locale())
    }

    fn locale(&self) -> Locale {
        self.server.locale()
    }

    /// The page that asks `op` to confirm a change before it is made: `confirm.html` with
    /// `fields` (`question`, the `action` the form posts to, and `back`, `id` or `rotate`
    /// as the change has them).
    fn confirm(&self, op: &Operator, fields: Value) -> Response {
        Response::html(
            200,
            self.render("confirm.html", "confirm", Some(op), fields),
        )
    }

    /// Renders `template` with the page's `data` and what every page has (texts,
    /// language, navigation, the operator and the CSRF token).
    fn render(
        &self,
        template: &str,
        page: &str,
        operator: Option<&Operator>,
        data: Value,
    ) -> String {
        let texts = self.texts();
        let mut context = json!({
            "page": page,
            "title": texts.get(page),
            "operator": operator.map(|o| self.operator_shown(o)),
            "csrf": operator.map(|o| o.signed.csrf.clone()),
        });
        if let (Value::Object(all), Value::Object(own)) = (&mut context, data) {
            all.extend(own);
        }
        match self
            .templates
            .get_template(template)
            .and_then(|t| t.render(minijinja::value::Serde(&context)))
        {
            Ok(html) => html,
            Err(e) => {
                tracing::error!(template, error = %e, "a console page could not be rendered");
                String::from(
                    "<!doctype html><title>tollgate</title><p>The page could not be rendered; the server log says why.</p>",
                )
            }
        }
    }

    /// The signed-in operator as the frame shows it: the key's name, its id in the
    /// `title` (the id alone when the keys cannot be read now).
    fn operator_shown(&self, op: &Operator) -> Value {
        let id = op.principal.credential_id.as_str();
        let name = self.server.store().api_keys().ok().and_then(|keys| {
            keys.into_iter()
                .find(|k| k.public_id == id && !k.name.trim().is_empty())
                .map(|k| k.name)
        });
        json!({"id": id, "name": name.as_deref().unwrap_or(id),
               "admin": is_operator(&op.principal.scopes)})
    }

    /// A plain page for a refused request (`status` says why).
    fn refusal(&self, request: &Request<'_>, status: u16) -> Response {
        let texts = self.texts();
        let key = match status {
            403 => "refused_forbidden",
            404 => "refused_not_found",
            405 => "refused_method",
            413 => "refused_too_large",
            _ => "refused_internal",
        };
        if status == 403 {
            tracing::warn!(
                path = request.path,
                source = request.source,
                "a console form was refused (cross-origin or without its CSRF token)"
            );
        }
        let page = self.render(
            "refused.html",
            "refused",
            None,
            json!({"message": texts.get(key)}),
        );
        Response::html(status, page)
    }

    /// The server's time, unix seconds.
    fn now_secs(&self) -> i64 {
        self.server.clock().unix_secs()
    }

    /// The page of a failure the operator can do nothing about on the form (`message` says
    /// what happened), with `status`.
    fn failed(&self, op: &Operator, status: u16, message: String) -> Response {
        let page = self.render(
            "refused.html",
            "refused",
            Some(op),
            json!({"message": message}),
        );
        Response::html(status, page)
    }

    /// The page of a storage failure, as the catalog answers it everywhere else
    /// (`backend_unavailable` while it may pass, `internal_error` otherwise): its HTTP
    /// status and its hint in the company's language.
    fn store_failed(&self, op: &Operator, e: StoreError) -> Response {
        self.catalog_failed(op, &store_failure(e, false))
    }

    /// The page of `err`: its HTTP status and its hint in the company's language.
    fn catalog_failed(&self, op: &Operator, err: &McpError) -> Response {
        self.failed(op, err.kind().spec().http_status, err.hint(self.locale()))
    }

    /// A listing of credentials that could not be read: the store's failure as the
    /// catalog answers it, anything else an internal error (logged).
    fn read_failed(&self, op: &Operator, e: CredentialError) -> Response {
        if let CredentialError::Store(e) = e {
            return self.store_failed(op, e);
        }
        tracing::error!(cause = %e, "a console page failed");
        self.catalog_failed(op, &McpError::internal())
    }

    /// The page of a change that was made but could not be audited.
    fn not_audited(&self, op: &Operator) -> Response {
        let status = ErrorKind::InternalError.spec().http_status;
        self.failed(op, status, self.texts().get("not_audited").to_owned())
    }

    /// Writes the audit row of a change made in the console, under the operator's
    /// credential, before the page reports it.
    fn record(&self, operator: &Principal, action: &str, target: &str, source: &str) -> bool {
        let written = crate::guards::audit::record_operator_change(
            self.server.store(),
            self.server.clock(),
            operator,
            &format!("console:{action}"),
            target,
            source,
        );
        if let Err(e) = &written {
            tracing::error!(action, error = %e, "a console change could not be audited");
        }
        written.is_ok()
    }
}

/// A page showing a form again: 422 when it says what was wrong with the last post.
fn form_status(error: &Option<String>) -> u16 {
    if error.is_some() { 422 } else { 200 }
}

/// Whether a form post comes from the page's own origin: an `Origin` (browsers send one
/// on every form post) naming the `Host` it was sent to, and no `Sec-Fetch-Site` that says
/// another site. A request without `Origin` is not a browser's form and still needs the
/// CSRF token, which only the console's own pages hold.
fn same_origin(request: &Request<'_>) -> bool {
    if let Some(site) = request.header("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return false;
    }
    match (request.header("origin"), request.header("host")) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            let origin = origin.trim_end_matches('/').to_ascii_lowercase();
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            authority == Some(host.to_ascii_lowercase().as_str())
        }
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(headers: &'a [(String, String)]) -> Request<'a> {
        Request {
            method: Method::Post,
            path: "/console/limits/credential",
            query: "",
            headers,
            body: b"",
            source: "http:127.0.0.1",
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_form_post_must_come_from_the_origin_it_is_sent_to() {
        let same = headers(&[
            ("host", "127.0.0.1:8787"),
            ("origin", "http://127.0.0.1:8787"),
        ]);
        assert!(same_origin(&request(&same)));
        let other_port = headers(&[
            ("host", "127.0.0.1:8787"),
            ("origin", "http://127.0.0.1:3000"),
        ]);
        assert!(!same_origin(&request(&other_port)));
        let other_site = headers(&[
            ("host", "127.0.0.1:8787"),
            ("origin", "https://evil.example"),
        ]);
        assert!(!same_origin(&request(&other_site)));
        let cross = headers(&[("host", "127.0.0.1:8787"), ("sec-fetch-site", "cross-site")]);
        assert!(!same_origin(&request(&cross)));
        let no_origin = headers(&[("host", "127.0.0.1:8787")]);
        assert!(same_origin(&request(&no_origin)));
        let no_host = headers(&[("origin", "http://127.0.0.1:8787")]);
        assert!(!same_origin(&request(&no_host)));
    }

    #[test]
    fn cookies_are_read_by_name_from_the_header() {
        let h = headers(&[("cookie", "a=1; tollgate_console=abc; b=2")]);
        let r = request(&h);
        assert_eq!(r.cookie(SESSION_COOKIE), Some("abc"));
        assert_eq!(r.cookie("b"), Some("2"));
        assert_eq!(r.cookie("c"), None);
    }
}
