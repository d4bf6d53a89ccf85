//! The pages of the OAuth front door a person sees while an application signs them in:
//! sign-in with a personal key, consent, and the page of a request that cannot go on. They
//! share the console's stylesheet, its Content-Security-Policy (with the client's redirect
//! origin added to `form-action`, since the consent form's answer redirects there), its
//! words in both languages, and its CSRF discipline (every form carries its request's token
//! and must come from this origin; [`crate::oauth`] checks both).

use minijinja::Environment;
use serde_json::json;

use super::i18n::texts;
use super::{CONTENT_SECURITY_POLICY, Response};
use crate::config::Locale;
use crate::oauth::{Page, Reply};

/// The front door's pages, in the server's language.
pub struct FrontDoor {
    templates: Environment<'static>,
    locale: Locale,
}

/// The stylesheet, by its front-door path: `(content type, body)`.
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    let name = path.strip_prefix("/oauth/static/")?;
    super::pages::asset(&format!("/console/static/{name}"))
}

impl FrontDoor {
    /// The pages in `locale`.
    pub fn new(locale: Locale) -> FrontDoor {
        FrontDoor {
            templates: super::pages::templates(locale),
            locale,
        }
    }

    /// The HTTP answer of a front-door [`Reply`] that is a page or a redirect (`None` for
    /// JSON, which the transport writes itself).
    pub fn response(&self, reply: &Reply) -> Option<Response> {
        let (mut response, cookie, form_targets) = match reply {
            Reply::Page {
                status,
                page,
                cookie,
                form_targets,
            } => (
                Response::html(*status, self.render(page)),
                cookie,
                form_targets.as_slice(),
            ),
            Reply::Redirect { location, cookie } => {
                let mut response = Response::new(302, "text/plain; charset=utf-8", Vec::new());
                response.headers.push(("Location".into(), location.clone()));
                (response, cookie, &[][..])
            }
            Reply::Json { .. } => return None,
        };
        let policy = CONTENT_SECURITY_POLICY.replace(
            "form-action 'self'",
            &std::iter::once("form-action 'self'".to_owned())
                .chain(form_targets.iter().filter(|t| is_source(t)).cloned())
                .collect::<Vec<_>>()
                .join(" "),
        );
        let redirect = matches!(reply, Reply::Redirect { .. });
        for (name, value) in &mut response.headers {
            match name.as_str() {
                "Content-Security-Policy" => value.clone_from(&policy),
                // The code in a redirect's URL never leaks to the next site in a Referer.
                // A page keeps the console's `same-origin`: under `no-referrer` a browser
                // sends `Origin: null` with the page's own form posts, which the
                // same-origin check of those posts must refuse.
                "Referrer-Policy" if redirect => *value = "no-referrer".to_owned(),
                _ => {}
            }
        }
        if let Some(cookie) = cookie {
            response.headers.push(("Set-Cookie".into(), cookie.clone()));
        }
        Some(response)
    }

    fn render(&self, page: &Page) -> String {
        let words = texts(self.locale);
        let context = match page {
            Page::SignIn {
                request,
                csrf,
                client,
                failed,
            } => json!({
                "kind": "sign_in", "title": words.get("fd_sign_in"), "request": request,
                "csrf": csrf, "client": client, "failed": failed,
            }),
            Page::Consent {
                request,
                csrf,
                client,
                client_id,
                redirect_host,
                loopback_only,
                person,
                granted,
                not_held,
            } => json!({
                "kind": "consent", "title": words.get("fd_consent"), "request": request,
                "csrf": csrf, "client": client, "client_id": client_id,
                "redirect_host": redirect_host, "loopback_only": loopback_only,
                "person": person, "granted": granted, "not_held": not_held,
            }),
            Page::Error { error, description } => json!({
                "kind": "error", "title": words.get("fd_error"), "error": error,
                "message": words.get(&format!("fd_error_{error}")), "description": description,
            }),
        };
        match self
            .templates
            .get_template("front_door.html")
            .and_then(|t| t.render(minijinja::value::Serde(&context)))
        {
            Ok(html) => html,
            Err(e) => {
                tracing::error!(error = %e, "a front-door page could not be rendered");
                String::from(
                    "<!doctype html><title>tollgate</title><p>The page could not be rendered; the server log says why.</p>",
                )
            }
        }
    }
}

/// Whether `target` may stand in a CSP source list as is: an origin, or a scheme.
fn is_source(target: &str) -> bool {
    !target.is_empty()
        && target.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b':' | b'/' | b'.' | b'-' | b'+' | b'[' | b']')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consent() -> Reply {
        Reply::Page {
            status: 200,
            page: Page::Consent {
                request: "req_1".into(),
                csrf: "tok".into(),
                client: "Claude <b>".into(),
                client_id: "https://claude.ai/oauth/client.json".into(),
                redirect_host: "claude.ai".into(),
                loopback_only: false,
                person: "Ana".into(),
                granted: vec!["invoices:read".into()],
                not_held: vec!["payments:write".into()],
            },
            cookie: None,
            form_targets: vec!["https://claude.ai".into(), "x; script-src *".into()],
        }
    }

    #[test]
    fn the_consent_page_names_the_client_escaped_and_lets_its_form_redirect_there_only() {
        for (locale, allow) in [(Locale::En, "Allow"), (Locale::Es, "Permitir")] {
            let response = FrontDoor::new(locale).response(&consent()).expect("page");
            let html = String::from_utf8(response.body).expect("utf-8");
            assert!(html.contains("Claude &lt;b&gt;"), "escaped");
            assert!(html.contains("claude.ai"));
            assert!(html.contains("payments:write"));
            assert!(html.contains(allow), "{locale:?}");
            let csp = response
                .headers
                .iter()
                .find(|(n, _)| n == "Content-Security-Policy")
                .map(|(_, v)| v.clone())
                .expect("csp");
            assert!(
                csp.contains("form-action 'self' https://claude.ai;"),
                "{csp}"
            );
            assert!(
                !csp.contains("script-src *"),
                "a target is never spliced in raw"
            );
            // Its forms' posts carry their true `Origin` (under no-referrer: `null`).
            assert!(
                response
                    .headers
                    .contains(&("Referrer-Policy".into(), "same-origin".into()))
            );
            assert!(html.contains("<meta name=\"referrer\" content=\"same-origin\">"));
        }
    }

    #[test]
    fn a_redirect_carries_its_cookie_and_no_referrer() {
        let reply = Reply::Redirect {
            location: "http://127.0.0.1:9/cb?code=x".into(),
            cookie: Some("tollgate_oauth=; Max-Age=0".into()),
        };
        let response = FrontDoor::new(Locale::En)
            .response(&reply)
            .expect("redirect");
        assert_eq!(response.status, 302);
        assert!(
            response
                .headers
                .contains(&("Location".into(), "http://127.0.0.1:9/cb?code=x".into()))
        );
        assert!(
            response
                .headers
                .contains(&("Referrer-Policy".into(), "no-referrer".into()))
        );
        assert!(response.headers.iter().any(|(n, _)| n == "Set-Cookie"));
        assert!(asset("/oauth/static/console.css").is_some());
        assert!(asset("/oauth/static/../x").is_none());
    }
}
