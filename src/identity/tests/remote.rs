//! Fetching from a provider on 127.0.0.1: discovery, the refetch of an unknown key and its
//! throttle, the last keys kept while the provider is away, and introspection.

use super::*;

const AUDIENCE: &str = "https://tollgate.example.com/mcp";

/// A provider whose answers the test can change: the JWKS, and per opaque token the
/// introspection answer.
#[derive(Default)]
struct Provided {
    jwks: Value,
    metadata: Option<Value>,
    introspection: BTreeMap<String, Value>,
}

fn provider(provided: &Arc<Mutex<Provided>>) -> TestServer {
    let provided = Arc::clone(provided);
    TestServer::start(move |request| {
        let provided = provided.lock().expect("provided");
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/jwks") => (200, provided.jwks.to_string()),
            ("GET", "/realms/acme/.well-known/openid-configuration") => match &provided.metadata {
                Some(metadata) => (200, metadata.to_string()),
                None => (404, "{}".to_owned()),
            },
            ("POST", "/introspect") => {
                let form: BTreeMap<String, String> =
                    form_urlencoded::parse(request.body.as_bytes())
                        .into_owned()
                        .collect();
                let token = form.get("token").cloned().unwrap_or_default();
                let answer = provided.introspection.get(&token).cloned();
                (200, answer.unwrap_or(json!({"active": false})).to_string())
            }
            _ => (404, "{}".to_owned()),
        }
    })
}

fn claims(issuer: &str) -> Value {
    json!({"iss": issuer, "aud": AUDIENCE, "sub": "ana", "iat": NOW, "exp": NOW + 3600})
}

fn online(toml: &str) -> (Identity, ManualClock, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::at_unix_secs(NOW);
    let identity =
        Identity::start(&issuers_of(dir.path(), toml), clock.clock()).expect("identity starts");
    (identity, clock, dir)
}

fn issuer_toml(issuer: &str, extra: &str) -> String {
    format!(
        "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{issuer}\"\naudience = \"{AUDIENCE}\"\n{extra}"
    )
}

#[test]
fn an_unknown_kid_refetches_once_per_30_s_and_the_last_keys_outlive_the_provider() {
    let (first, second, third) = (Signer::es256("a"), Signer::es256("b"), Signer::es256("c"));
    let provided = Arc::new(Mutex::new(Provided {
        jwks: jwks(&[&first]),
        ..Provided::default()
    }));
    let mut server = provider(&provided);
    let issuer = server.url("/realms/acme");
    let toml = issuer_toml(
        &issuer,
        &format!("jwks_uri = \"{}\"\n", server.url("/jwks")),
    );
    let (identity, clock, _dir) = online(&toml);
    assert_eq!(server.hits("/jwks"), 1, "the keys are fetched at start");
    assert!(identity.verify(&first.sign(&claims(&issuer))).is_ok());
    assert_eq!(server.hits("/jwks"), 1, "a known key needs no fetch");

    let by_second = second.sign(&claims(&issuer));
    assert_eq!(
        identity.verify(&by_second).err(),
        Some(IdentityError::Invalid("unknown_key"))
    );
    assert_eq!(
        server.hits("/jwks"),
        2,
        "an unknown kid fetches the keys again"
    );
    provided.lock().expect("provided").jwks = jwks(&[&first, &second]);
    clock.set_unix_secs(NOW + 29);
    assert_eq!(
        identity.verify(&by_second).err(),
        Some(IdentityError::Invalid("unknown_key"))
    );
    assert_eq!(server.hits("/jwks"), 2, "not again within 30 s");
    clock.set_unix_secs(NOW + 30);
    assert!(identity.verify(&by_second).is_ok());
    assert_eq!(server.hits("/jwks"), 3);

    server.stop();
    assert!(
        identity.verify(&first.sign(&claims(&issuer))).is_ok(),
        "keys kept"
    );
    clock.set_unix_secs(NOW + 61);
    let by_third = third.sign(&claims(&issuer));
    let Err(IdentityError::Unavailable(why)) = identity.verify(&by_third) else {
        panic!("a refetch that fails is unavailability");
    };
    assert!(
        why.starts_with("issuer corp: the signing keys could not be fetched: "),
        "{why}"
    );
    assert!(!why.contains(&by_third));
    assert!(
        identity.verify(&by_second).is_ok(),
        "the last keys that worked are kept"
    );
    assert_eq!(
        identity.verify(&by_third).err(),
        Some(IdentityError::Invalid("unknown_key"))
    );
}

#[test]
fn a_provider_never_reached_leaves_tokens_undecided_not_refused() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let issuer = format!("http://127.0.0.1:{port}/realms/acme");
    let (identity, _clock, _dir) = online(&issuer_toml(&issuer, ""));
    let token = Signer::es256("a").sign(&claims(&issuer));
    let Err(IdentityError::Unavailable(why)) = identity.verify(&token) else {
        panic!("no keys and no provider: undecided");
    };
    assert!(why.contains("openid-configuration"), "{why}");
    assert!(why.contains("oauth-authorization-server"), "{why}");
    assert!(!why.contains(&token));
    assert_eq!(
        identity.verify(&token).err(),
        Some(IdentityError::Unavailable(why)),
        "within 30 s the last failure is told again without a fetch"
    );
}

#[test]
fn discovery_finds_the_keys_and_checks_the_issuer_it_names() {
    let key = Signer::es256("a");
    let provided = Arc::new(Mutex::new(Provided {
        jwks: jwks(&[&key]),
        ..Provided::default()
    }));
    let server = provider(&provided);
    let issuer = server.url("/realms/acme");
    provided.lock().expect("provided").metadata =
        Some(json!({"issuer": issuer, "jwks_uri": server.url("/jwks")}));
    let (identity, _clock, _dir) = online(&issuer_toml(&issuer, "preset = \"keycloak\"\n"));
    assert!(identity.verify(&key.sign(&claims(&issuer))).is_ok());
    assert_eq!(
        server.hits("/realms/acme/.well-known/openid-configuration"),
        1
    );
    assert_eq!(server.hits("/jwks"), 1);

    // Metadata that speaks for another issuer is not believed.
    let other = Arc::new(Mutex::new(Provided {
        jwks: jwks(&[&key]),
        ..Provided::default()
    }));
    let server = provider(&other);
    let issuer = server.url("/realms/acme");
    other.lock().expect("provided").metadata =
        Some(json!({"issuer": "https://evil.example.com", "jwks_uri": server.url("/jwks")}));
    let (identity, _clock, _dir) = online(&issuer_toml(&issuer, ""));
    let Err(IdentityError::Unavailable(why)) = identity.verify(&key.sign(&claims(&issuer))) else {
        panic!("keys from another issuer's metadata are not used");
    };
    assert!(
        why.contains("names the issuer \"https://evil.example.com\""),
        "{why}"
    );
    assert_eq!(server.hits("/jwks"), 0);
}

#[test]
fn keycloak_is_not_asked_for_an_rfc_8414_document() {
    let provided = Arc::new(Mutex::new(Provided::default()));
    let server = provider(&provided);
    let issuer = server.url("/realms/acme");
    let (_identity, _clock, _dir) = online(&issuer_toml(&issuer, "preset = \"keycloak\"\n"));
    let asked: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(asked, ["/realms/acme/.well-known/openid-configuration"]);
    let (_identity, _clock, _dir) = online(&issuer_toml(&issuer, ""));
    assert_eq!(
        server.hits("/.well-known/oauth-authorization-server/realms/acme"),
        1,
        "without the preset, RFC 8414 is the second place asked"
    );
}

#[test]
fn a_verify_from_inside_an_async_runtime_still_waits_for_the_fetch() {
    let (first, second) = (Signer::es256("a"), Signer::es256("b"));
    let provided = Arc::new(Mutex::new(Provided {
        jwks: jwks(&[&first]),
        ..Provided::default()
    }));
    let server = provider(&provided);
    let issuer = server.url("/realms/acme");
    let toml = issuer_toml(
        &issuer,
        &format!("jwks_uri = \"{}\"\n", server.url("/jwks")),
    );
    let (identity, _clock, _dir) = online(&toml);
    provided.lock().expect("provided").jwks = jwks(&[&first, &second]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let token = second.sign(&claims(&issuer));
    let verified = runtime.block_on(async { identity.verify(&token) });
    assert_eq!(verified.expect("accepted").subject, "ana");
    assert_eq!(server.hits("/jwks"), 2);
}

fn introspecting(server: &TestServer, issuer: &str, extra: &str) -> String {
    issuer_toml(
        issuer,
        &format!(
            "jwks_uri = \"{}\"\n{extra}[auth.issuers.introspection]\nclient_id = \"tollgate gw\"\n\
             client_secret_file = \"secret\"\n",
            server.url("/jwks")
        ),
    )
}

#[test]
fn an_opaque_token_is_introspected_with_the_client_credentials() {
    let provided = Arc::new(Mutex::new(Provided {
        jwks: jwks(&[&Signer::es256("a")]),
        ..Provided::default()
    }));
    let server = provider(&provided);
    let issuer = server.url("/realms/acme");
    provided.lock().expect("provided").metadata = Some(json!({
        "issuer": issuer, "introspection_endpoint": server.url("/introspect"),
    }));
    let toml = introspecting(
        &server,
        &issuer,
        "[auth.issuers.roles]\nclerks = [\"invoices:write\"]\n",
    );
    let (identity, _clock, _dir) = online(&toml);
    provided.lock().expect("provided").introspection.insert(
        "opaque-long-lived".to_owned(),
        json!({"active": true, "sub": "ana", "scope": "invoices:read openid", "roles": ["clerks"],
               "client_id": "agent", "exp": NOW + 3600, "aud": AUDIENCE, "iss": issuer}),
    );
    let verified = identity.verify("opaque-long-lived").expect("active");
    assert_eq!(verified.subject, "ana");
    assert_eq!(verified.client_id.as_deref(), Some("agent"));
    assert_eq!(verified.scopes, ["invoices:read", "invoices:write"]);
    assert_eq!(
        (verified.expires_at, verified.cache_until),
        (NOW + 3600, NOW + 60)
    );

    let request = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/introspect")
        .expect("introspected");
    assert_eq!(
        request.body,
        "token=opaque-long-lived&token_type_hint=access_token"
    );
    let basic = base64::engine::general_purpose::STANDARD.encode("tollgate+gw:s3cret");
    assert_eq!(request.headers["authorization"], format!("Basic {basic}"));

    provided.lock().expect("provided").introspection.insert(
        "opaque-short".to_owned(),
        json!({"active": true, "sub": "bo", "exp": NOW + 20}),
    );
    let verified = identity.verify("opaque-short").expect("active");
    assert_eq!(
        (verified.expires_at, verified.cache_until),
        (NOW + 20, NOW + 20)
    );
    // A client-credentials token: no `sub`, so its client is the caller.
    provided.lock().expect("provided").introspection.insert(
        "opaque-of-a-service".to_owned(),
        json!({"active": true, "scope": "invoices:read", "client_id": "nightly-export",
               "exp": NOW + 3600, "iss": issuer}),
    );
    let service = identity.verify("opaque-of-a-service").expect("active");
    assert_eq!(service.subject, "nightly-export");
    assert_eq!(service.client_id.as_deref(), Some("nightly-export"));
}

#[test]
fn introspection_refusals_inactive_wrong_audience_and_unreachable() {
    let provided = Arc::new(Mutex::new(Provided::default()));
    let mut server = provider(&provided);
    let issuer = server.url("/realms/acme");
    let endpoint = format!("endpoint = \"{}\"\n", server.url("/introspect"));
    let toml = introspecting(&server, &issuer, "").replace(
        "[auth.issuers.introspection]\n",
        &format!("[auth.issuers.introspection]\n{endpoint}"),
    );
    let (identity, _clock, _dir) = online(&toml);
    assert_eq!(
        identity.verify("opaque-revoked").err(),
        Some(IdentityError::Invalid("inactive"))
    );
    provided.lock().expect("provided").introspection.insert(
        "opaque-elsewhere".to_owned(),
        json!({"active": true, "sub": "ana", "aud": "https://other.example.com"}),
    );
    assert_eq!(
        identity.verify("opaque-elsewhere").err(),
        Some(IdentityError::Invalid("wrong_audience"))
    );
    provided.lock().expect("provided").introspection.insert(
        "opaque-other-issuer".to_owned(),
        json!({"active": true, "sub": "ana", "iss": "https://evil.example.com"}),
    );
    assert_eq!(
        identity.verify("opaque-other-issuer").err(),
        Some(IdentityError::Invalid("inactive"))
    );
    server.stop();
    let Err(IdentityError::Unavailable(why)) = identity.verify("opaque-secret-value") else {
        panic!("an unreachable introspection endpoint leaves the token undecided");
    };
    assert!(
        why.starts_with("issuer corp: introspection: POST "),
        "{why}"
    );
    assert!(!why.contains("opaque-secret-value"), "{why}");
}
