//! The authorization server on a scratch store, without a listener: what the black-box
//! tests (tests/oauth_server.rs) cannot reach cheaply.

use crate::clock::ManualClock;
use crate::config::{Locale, OAuthServerConfig};
use crate::guards::auth::Authenticator;
use crate::guards::auth::testing::fresh;
use crate::store::oauth::{NewRegistration, Registration};

use super::*;

const REDIRECT: &str = "http://127.0.0.1:9/cb";

fn server() -> (
    tempfile::TempDir,
    AuthorizationServer,
    Authenticator,
    ManualClock,
) {
    let (dir, store) = fresh("pro");
    let clock = ManualClock::at_unix_secs(1_800_000_000);
    let config = OAuthServerConfig {
        enabled: true,
        ..OAuthServerConfig::default()
    };
    store
        .insert_registration(&NewRegistration {
            registration: &Registration {
                client_id: "tgc_1".into(),
                secret_hash: None,
                client_name: Some("Host".into()),
                client_uri: None,
                redirect_uris: vec![REDIRECT.into()],
                grant_types: vec!["authorization_code".into()],
                auth_method: "none".into(),
                application_type: None,
                created_at: clock.clock().unix_secs(),
                last_used_at: None,
            },
            source: "test",
            max_clients: 10,
            unused_before: 0,
        })
        .expect("register");
    let auth = Authenticator::new(store.clone(), clock.clock());
    let server = AuthorizationServer::start(config, store, clock.clock(), None).expect("start");
    (dir, server, auth, clock)
}

fn context<'a>(auth: &'a Authenticator, scopes: &'a [String]) -> Context<'a> {
    Context {
        issuer: "http://127.0.0.1:8787",
        source: "http:192.0.2.7",
        auth,
        locale: Locale::En,
        scopes,
        headers: &[],
    }
}

const QUERY: &str = "response_type=code&client_id=tgc_1&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb\
     &code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256";

#[test]
fn authorization_requests_past_the_limit_of_a_source_are_refused_until_the_minute_ends() {
    let (_dir, server, auth, clock) = server();
    let scopes = supported_scopes(&[]);
    let ctx = context(&auth, &scopes);
    for _ in 0..super::authorize::AUTHORIZE_PER_MINUTE {
        match server.authorize(&ctx, QUERY) {
            Reply::Page {
                status: 200,
                page: Page::SignIn { .. },
                ..
            } => {}
            other => panic!("not the sign-in page: {other:?}"),
        }
    }
    match server.authorize(&ctx, QUERY) {
        Reply::Page {
            status,
            page: Page::Error { error, .. },
            ..
        } => {
            assert_eq!((status, error), (429, "temporarily_unavailable"));
        }
        other => panic!("not refused: {other:?}"),
    }
    clock.advance(std::time::Duration::from_secs(60));
    assert!(matches!(
        server.authorize(&ctx, QUERY),
        Reply::Page { status: 200, .. }
    ));
}

#[test]
fn metadata_describes_the_front_door_only_when_it_is_on() {
    let (_dir, server, _auth, _clock) = server();
    let metadata = server.authorization_server_metadata("https://mcp.example.com", &[]);
    assert_eq!(
        metadata["authorization_endpoint"],
        "https://mcp.example.com/oauth/authorize"
    );
    assert_eq!(
        metadata["registration_endpoint"],
        "https://mcp.example.com/oauth/register"
    );
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        serde_json::json!(["S256"])
    );
    let prm = server.protected_resource_metadata(
        "https://mcp.example.com",
        &[],
        &["https://idp.example.com".to_owned()],
    );
    assert_eq!(prm["authorization_servers"][0], "https://mcp.example.com");
    assert_eq!(prm["authorization_servers"][1], "https://idp.example.com");

    let (_dir2, store) = fresh("pro");
    let off = AuthorizationServer::start(
        OAuthServerConfig::default(),
        store,
        crate::clock::Clock::System,
        None,
    )
    .expect("start");
    let metadata = off.authorization_server_metadata("https://mcp.example.com", &[]);
    assert!(metadata.get("authorization_endpoint").is_none());
    assert_eq!(
        metadata["grant_types_supported"],
        serde_json::json!(["client_credentials"])
    );
    let prm = off.protected_resource_metadata(
        "https://mcp.example.com",
        &[],
        &["https://idp.example.com".to_owned()],
    );
    assert_eq!(prm["authorization_servers"][0], "https://idp.example.com");
}

#[test]
fn with_registration_off_the_endpoint_is_not_advertised_nor_served() {
    let (_dir, store) = fresh("pro");
    let config = OAuthServerConfig {
        enabled: true,
        registration: false,
        ..OAuthServerConfig::default()
    };
    let server = AuthorizationServer::start(config, store, crate::clock::Clock::System, None)
        .expect("start");
    assert!(!server.registration_open());
    let metadata = server.authorization_server_metadata("https://mcp.example.com", &[]);
    assert!(
        metadata.get("registration_endpoint").is_none(),
        "{metadata}"
    );
    assert_eq!(metadata["client_id_metadata_document_supported"], true);
}
