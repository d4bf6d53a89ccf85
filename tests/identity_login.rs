//! Signing a person in at a real OpenID Provider nobody here wrote (`oidc-provider`, started
//! by [`crate::idp`]) through tollgate's identity API: the authorization URL it builds is
//! followed as a browser would (login page, consent), and the code that comes back is
//! exchanged and its ID token checked. The provider checks the PKCE verifier, the redirect
//! URI and the client's secret; tollgate checks the ID token and its `nonce`.

use tollgate::clock::Clock;
use tollgate::config::{Config, Overrides};
use tollgate::identity::{Identity, IdentityError};

use crate::idp::{Idp, IdpClient, IdpOptions};

/// tollgate's callback, as registered at the provider (never connected to: the browser's
/// last redirect is read, not followed).
const CALLBACK: &str = "http://127.0.0.1:9/oauth/callback";

/// The identity of a configuration trusting `idp`, signing people in as its client
/// `tollgate-login` (a confidential client), with the secret file in `dir`.
fn identity_for(idp: &Idp, client: &IdpClient, dir: &std::path::Path) -> Identity {
    std::fs::write(dir.join("login.secret"), &client.secret).expect("write the secret");
    let path = dir.join("config.toml");
    let toml = format!(
        "[[auth.issuers]]\nname = \"test\"\nissuer = \"{}\"\naudience = \"https://tollgate.test/mcp\"\n\
         [auth.issuers.login]\nclient_id = \"{}\"\nclient_secret_file = \"login.secret\"\n",
        idp.issuer(),
        client.id
    );
    std::fs::write(&path, toml).expect("write the configuration");
    let config = Config::load(Some(&path), &[], &Overrides::default()).expect("loads");
    Identity::start(&config.auth.issuers, Clock::System).expect("identity starts")
}

#[test]
fn a_person_signs_in_at_the_provider_and_their_id_token_is_checked() {
    let client = IdpClient::jwt("tollgate-login").redirect_uris(&[CALLBACK]);
    let idp = Idp::start(&IdpOptions::new(vec![client.clone()]));
    let dir = tempfile::tempdir().expect("temp dir");
    let identity = identity_for(&idp, &client, dir.path());
    assert_eq!(identity.login_issuer(), Some("test"));

    let start = identity.begin_login(CALLBACK).expect("a sign-in starts");
    assert!(
        start.url.starts_with(&format!("{}/auth?", idp.issuer())),
        "{}",
        start.url
    );
    let back = idp.sign_in(&start.url, "ana");
    assert_eq!(back.get("state"), Some(&start.state), "{back:?}");
    let code = back.get("code").expect("a code");
    let person = identity
        .finish_login(code, CALLBACK, &start.verifier, &start.nonce)
        .expect("signed in");
    assert_eq!(person.issuer_name, "test");
    assert_eq!(person.issuer, idp.issuer());
    assert_eq!(person.subject, "ana");
    assert_eq!(person.client_id, None);

    // A code is good once.
    assert_eq!(
        identity
            .finish_login(code, CALLBACK, &start.verifier, &start.nonce)
            .err(),
        Some(IdentityError::Invalid("login_refused"))
    );
}

#[test]
fn the_provider_checks_the_verifier_and_tollgate_the_nonce() {
    let client = IdpClient::jwt("tollgate-login").redirect_uris(&[CALLBACK]);
    let idp = Idp::start(&IdpOptions::new(vec![client.clone()]));
    let dir = tempfile::tempdir().expect("temp dir");
    let identity = identity_for(&idp, &client, dir.path());

    let (first, second) = (
        identity.begin_login(CALLBACK).expect("a sign-in starts"),
        identity.begin_login(CALLBACK).expect("another starts"),
    );
    let back = idp.sign_in(&first.url, "ana");
    assert_eq!(
        identity
            .finish_login(&back["code"], CALLBACK, &second.verifier, &first.nonce)
            .err(),
        Some(IdentityError::Invalid("login_refused")),
        "the verifier of another sign-in does not match the challenge"
    );
    let back = idp.sign_in(&first.url, "ana");
    assert_eq!(
        identity
            .finish_login(&back["code"], CALLBACK, &first.verifier, &second.nonce)
            .err(),
        Some(IdentityError::Invalid("nonce")),
        "the ID token carries the nonce of the sign-in it answers"
    );
}
