//! Sign-in at the provider: the authorization URL, and the code exchanged at a token
//! endpoint on 127.0.0.1 that answers with an ID token signed here; every refusal of the
//! ID token, the provider's own refusal, and a provider that is away or slow.

use std::time::Duration;

use super::*;

const ISSUER: &str = "https://idp.example.com/realms/acme";
const AUTHORIZE: &str = "https://idp.example.com/realms/acme/protocol/openid-connect/auth";
const CALLBACK: &str = "https://tollgate.example.com/oauth/callback";
const CODE: &str = "the-one-time-code";

/// An offline issuer (keys in `keys.json`) with `login` whose token endpoint is
/// `token_endpoint`; `extra` is added to the login table.
fn corp(token_endpoint: &str, extra: &str) -> String {
    format!(
        "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{ISSUER}\"\n\
         audience = \"https://tollgate.example.com/mcp\"\njwks_file = \"keys.json\"\n\
         algorithms = [\"ES256\"]\n\
         [auth.issuers.roles]\nclerks = [\"invoices:read\", \"invoices:write\"]\n\
         [auth.issuers.login]\nclient_id = \"tollgate\"\n\
         authorization_endpoint = \"{AUTHORIZE}\"\ntoken_endpoint = \"{token_endpoint}\"\n{extra}"
    )
}

/// The claims of a good ID token for the sign-in that sent `nonce`.
fn id_claims(nonce: &str) -> Value {
    json!({"iss": ISSUER, "aud": "tollgate", "sub": "ana", "preferred_username": "ana@acme",
           "roles": ["clerks", "visitors"], "nonce": nonce, "iat": NOW, "exp": NOW + 300})
}

/// `claims` with `changes` laid over it (a null removes the claim).
fn changed(mut claims: Value, changes: Value) -> Value {
    let object = claims.as_object_mut().expect("an object");
    for (name, value) in changes.as_object().expect("an object") {
        match value {
            Value::Null => object.remove(name),
            _ => object.insert(name.clone(), value.clone()),
        };
    }
    claims
}

/// A token endpoint answering every POST to `/token` with the status and body in `answer`.
fn token_endpoint(answer: &Arc<Mutex<(u16, Value)>>) -> TestServer {
    let answer = Arc::clone(answer);
    TestServer::start(
        move |request| match (request.method.as_str(), request.path.as_str()) {
            ("POST", "/token") => {
                let (status, body) = answer.lock().expect("answer").clone();
                (status, body.to_string())
            }
            _ => (404, "{}".to_owned()),
        },
    )
}

fn answering(id_token: &str) -> (u16, Value) {
    (
        200,
        json!({"access_token": "at-not-for-tollgate", "token_type": "Bearer", "expires_in": 300,
               "id_token": id_token}),
    )
}

/// The form of a request, as pairs in order.
fn form_of(request: &Request) -> Vec<(String, String)> {
    form_urlencoded::parse(request.body.as_bytes())
        .into_owned()
        .collect()
}

fn query_of(url: &str) -> BTreeMap<String, String> {
    url::Url::parse(url)
        .expect("a URL")
        .query_pairs()
        .into_owned()
        .collect()
}

#[test]
fn the_authorization_url_has_every_parameter_and_the_s256_challenge_of_the_verifier() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(
        &corp(
            "https://idp.example.com/token",
            "scopes = [\"openid\", \"groups\"]\n",
        ),
        &[&key],
    );
    assert_eq!(identity.login_issuer(), Some("corp"));
    let start = identity.begin_login(CALLBACK).expect("a sign-in starts");
    assert!(
        start.url.starts_with(&format!("{AUTHORIZE}?")),
        "{}",
        start.url
    );
    let query = query_of(&start.url);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        <sha2::Sha256 as sha2::Digest>::digest(start.verifier.as_bytes()),
    );
    let expected: BTreeMap<String, String> = [
        ("response_type", "code"),
        ("client_id", "tollgate"),
        ("redirect_uri", CALLBACK),
        ("scope", "openid groups"),
        ("state", &start.state),
        ("nonce", &start.nonce),
        ("code_challenge", &challenge),
        ("code_challenge_method", "S256"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(query, expected);
    for word in [&start.state, &start.nonce, &start.verifier] {
        assert_eq!(word.len(), 43, "256 random bits, base64url");
        assert!(
            word.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }
    assert!(!start.url.contains(&start.verifier));
    assert!(!format!("{start:?}").contains(&start.verifier));
    let again = identity.begin_login(CALLBACK).expect("another sign-in");
    assert_ne!(again.state, start.state);
    assert_ne!(again.nonce, start.nonce);
    assert_ne!(again.verifier, start.verifier);
}

#[test]
fn without_login_there_is_no_issuer_to_sign_in_at() {
    let key = Signer::es256("k1");
    let toml = format!(
        "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{ISSUER}\"\naudience = \"x\"\n\
         jwks_file = \"keys.json\"\n"
    );
    let (identity, _clock, _dir) = offline(&toml, &[&key]);
    assert_eq!(identity.login_issuer(), None);
    let Err(IdentityError::Unavailable(why)) = identity.begin_login(CALLBACK) else {
        panic!("no issuer has login");
    };
    assert!(why.contains("[auth.issuers.login]"), "{why}");
    assert!(matches!(
        identity.finish_login(CODE, CALLBACK, "v", "n"),
        Err(IdentityError::Unavailable(_))
    ));
}

#[test]
fn a_good_id_token_is_the_person_with_the_scopes_of_their_roles() {
    let key = Signer::es256("k1");
    let answer = Arc::new(Mutex::new((0, Value::Null)));
    let server = token_endpoint(&answer);
    let (identity, _clock, _dir) = offline(&corp(&server.url("/token"), ""), &[&key]);
    let start = identity.begin_login(CALLBACK).expect("a sign-in starts");
    *answer.lock().expect("answer") = answering(&key.sign(&id_claims(&start.nonce)));

    let person = identity
        .finish_login(CODE, CALLBACK, &start.verifier, &start.nonce)
        .expect("signed in");
    assert_eq!(person.issuer_name, "corp");
    assert_eq!(person.issuer, ISSUER);
    assert_eq!(person.subject, "ana");
    assert_eq!(person.display_name.as_deref(), Some("ana@acme"));
    assert_eq!(person.client_id, None, "signed in through tollgate");
    assert_eq!(person.scopes, ["invoices:read", "invoices:write"]);
    assert_eq!(
        (person.expires_at, person.cache_until),
        (NOW + 300, NOW + 300)
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let form = form_of(&requests[0]);
    let expected: Vec<(String, String)> = [
        ("grant_type", "authorization_code"),
        ("code", CODE),
        ("redirect_uri", CALLBACK),
        ("code_verifier", &start.verifier),
        ("client_id", "tollgate"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(form, expected, "a public client names itself in the form");
    assert_eq!(requests[0].headers.get("authorization"), None);
    assert_eq!(
        requests[0].headers["content-type"],
        "application/x-www-form-urlencoded"
    );
}

#[test]
fn a_confidential_client_authenticates_with_http_basic() {
    let key = Signer::es256("k1");
    let answer = Arc::new(Mutex::new((200, Value::Null)));
    let server = token_endpoint(&answer);
    let toml = corp(&server.url("/token"), "client_secret_file = \"secret\"\n")
        .replace("client_id = \"tollgate\"", "client_id = \"tollgate gw\"");
    let (identity, _clock, _dir) = offline(&toml, &[&key]);
    let claims = changed(id_claims("n-1"), json!({"aud": "tollgate gw"}));
    *answer.lock().expect("answer") = answering(&key.sign(&claims));
    let person = identity
        .finish_login(CODE, CALLBACK, "the-verifier", "n-1")
        .expect("signed in");
    assert_eq!(person.subject, "ana");
    let request = &server.requests()[0];
    let basic = base64::engine::general_purpose::STANDARD.encode("tollgate+gw:s3cret");
    assert_eq!(request.headers["authorization"], format!("Basic {basic}"));
    let names: Vec<String> = form_of(request).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        names,
        ["grant_type", "code", "redirect_uri", "code_verifier"]
    );
}

#[test]
fn an_id_token_is_refused_for_each_of_its_faults() {
    let (key, stranger) = (Signer::es256("k1"), Signer::es256("k1"));
    let answer = Arc::new(Mutex::new((200, Value::Null)));
    let server = token_endpoint(&answer);
    let (identity, clock, _dir) = offline(&corp(&server.url("/token"), ""), &[&key]);
    let nonce = "n-42";
    let refused = |token: String, reason: &'static str| {
        *answer.lock().expect("answer") = answering(&token);
        let error = identity
            .finish_login(CODE, CALLBACK, "the-verifier", nonce)
            .expect_err("refused");
        assert_eq!(error, IdentityError::Invalid(reason), "{token}");
        let shown = format!("{error:?}");
        assert!(!shown.contains(&token) && !shown.contains(CODE));
    };
    let good = id_claims(nonce);
    refused(
        key.sign(&changed(good.clone(), json!({"nonce": "n-43"}))),
        "nonce",
    );
    refused(
        key.sign(&changed(good.clone(), json!({"nonce": null}))),
        "nonce",
    );
    refused(
        key.sign(&changed(good.clone(), json!({"aud": "another-client"}))),
        "wrong_audience",
    );
    refused(
        key.sign(&changed(
            good.clone(),
            json!({"aud": ["tollgate", "api"], "azp": "api"}),
        )),
        "wrong_audience",
    );
    refused(
        key.sign(&changed(
            good.clone(),
            json!({"iss": "https://evil.example.com"}),
        )),
        "untrusted_issuer",
    );
    refused(stranger.sign(&good), "bad_signature");
    let access_token_type = json!({"alg": "ES256", "typ": "at+jwt", "kid": "k1"});
    refused(key.sign_with_header(&access_token_type, &good), "malformed");
    refused("not.a.jwt".to_owned(), "malformed");
    // Expired: `exp` plus the skew (60 s) has passed.
    clock.set_unix_secs(NOW + 360);
    refused(key.sign(&good), "expired");
    clock.set_unix_secs(NOW + 359);
    *answer.lock().expect("answer") = answering(&key.sign(&good));
    assert!(identity.finish_login(CODE, CALLBACK, "v", nonce).is_ok());
}

#[test]
fn the_providers_refusal_is_invalid_and_its_failures_are_unavailable() {
    let answer = Arc::new(Mutex::new((
        400,
        json!({"error": "invalid_grant", "error_description": "Code not valid"}),
    )));
    let server = token_endpoint(&answer);
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(&server.url("/token"), ""), &[&key]);
    let finish = || identity.finish_login(CODE, CALLBACK, "the-verifier", "n");
    assert_eq!(
        finish().err(),
        Some(IdentityError::Invalid("login_refused"))
    );
    *answer.lock().expect("answer") = (401, json!({"error": "invalid_client"}));
    assert_eq!(
        finish().err(),
        Some(IdentityError::Invalid("login_refused"))
    );
    *answer.lock().expect("answer") = (200, json!({"access_token": "at", "token_type": "Bearer"}));
    assert_eq!(finish().err(), Some(IdentityError::Invalid("no_id_token")));
    for (status, body) in [(500, json!({"error": "server_error"})), (400, json!({}))] {
        *answer.lock().expect("answer") = (status, body);
        let Err(IdentityError::Unavailable(why)) = finish() else {
            panic!("HTTP {status} is no OAuth refusal");
        };
        assert!(
            why.starts_with("issuer corp: sign-in: http://127.0.0.1:"),
            "{why}"
        );
        assert!(
            why.ends_with(&format!("/token answered HTTP {status}")),
            "{why}"
        );
    }
}

#[test]
fn a_token_endpoint_that_is_down_or_silent_leaves_the_sign_in_unavailable() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let key = Signer::es256("k1");
    let toml = corp(&format!("http://127.0.0.1:{closed}/token"), "");
    let (identity, _clock, _dir) = offline(&toml, &[&key]);
    let Err(IdentityError::Unavailable(why)) =
        identity.finish_login(CODE, CALLBACK, "the-verifier", "n")
    else {
        panic!("nothing listens");
    };
    assert!(
        why.starts_with("issuer corp: sign-in: POST http://127.0.0.1:"),
        "{why}"
    );
    assert!(
        !why.contains(CODE) && !why.contains("the-verifier"),
        "{why}"
    );

    // Connections are taken by the kernel's backlog and never answered.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("address").port();
    let toml = corp(&format!("http://127.0.0.1:{port}/token"), "");
    let (identity, _clock, _dir) = offline_within(&toml, &[&key], Duration::from_millis(300));
    let Err(IdentityError::Unavailable(why)) =
        identity.finish_login(CODE, CALLBACK, "the-verifier", "n")
    else {
        panic!("no answer within the deadline");
    };
    assert!(why.starts_with("issuer corp: sign-in: "), "{why}");
    assert!(!why.contains(CODE), "{why}");
    drop(silent);
}

#[test]
fn the_endpoints_come_from_the_providers_discovery_document() {
    let key = Signer::es256("k1");
    let issuer = Arc::new(Mutex::new(String::new()));
    let nonce = Arc::new(Mutex::new(String::new()));
    let jwk_set = jwks(&[&key]);
    let server = {
        let (issuer, nonce) = (Arc::clone(&issuer), Arc::clone(&nonce));
        TestServer::start(move |request| {
            let issuer = issuer.lock().expect("issuer").clone();
            let base = issuer.trim_end_matches("/realms/acme").to_owned();
            match (request.method.as_str(), request.path.as_str()) {
                ("GET", "/realms/acme/.well-known/openid-configuration") => (
                    200,
                    json!({"issuer": issuer, "jwks_uri": format!("{base}/jwks"),
                           "authorization_endpoint": format!("{base}/authorize?tenant=acme"),
                           "token_endpoint": format!("{base}/token")})
                    .to_string(),
                ),
                ("GET", "/jwks") => (200, jwk_set.to_string()),
                ("POST", "/token") => {
                    let nonce = nonce.lock().expect("nonce").clone();
                    let claims = changed(id_claims(&nonce), json!({"iss": issuer}));
                    (200, answering(&key.sign(&claims)).1.to_string())
                }
                _ => (404, "{}".to_owned()),
            }
        })
    };
    *issuer.lock().expect("issuer") = server.url("/realms/acme");
    let dir = tempfile::tempdir().expect("temp dir");
    let toml = format!(
        "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{}\"\naudience = \"x\"\n\
         [auth.issuers.login]\nclient_id = \"tollgate\"\n",
        server.url("/realms/acme")
    );
    let identity = Identity::start(
        &issuers_of(dir.path(), &toml),
        ManualClock::at_unix_secs(NOW).clock(),
    )
    .expect("identity starts");
    let start = identity.begin_login(CALLBACK).expect("a sign-in starts");
    assert!(
        start
            .url
            .starts_with(&server.url("/authorize?tenant=acme&response_type=code&")),
        "{}",
        start.url
    );
    assert_eq!(query_of(&start.url)["scope"], "openid profile email");
    *nonce.lock().expect("nonce") = start.nonce.clone();
    let person = identity
        .finish_login(CODE, CALLBACK, &start.verifier, &start.nonce)
        .expect("signed in");
    assert_eq!(person.subject, "ana");
    assert_eq!(
        server.hits("/realms/acme/.well-known/openid-configuration"),
        1,
        "the document is read once, at start"
    );
}
