//! Every refusal, each provoked by a token crafted for it; none of them shows the token.

use super::*;

const ISSUER: &str = "https://idp.example.com/realms/acme";
const AUDIENCE: &str = "https://tollgate.example.com/mcp";

fn corp() -> String {
    format!(
        "[[auth.issuers]]\nname = \"corp\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n\
         jwks_file = \"keys.json\"\nalgorithms = [\"ES256\", \"EdDSA\"]\n"
    )
}

fn claims() -> Value {
    json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "ana", "iat": NOW, "exp": NOW + 300,
           "scope": "invoices:read"})
}

/// `claims()` with `changes` laid over it (a null removes the claim).
fn claims_with(changes: Value) -> Value {
    let mut claims = claims();
    for (name, value) in changes.as_object().expect("an object") {
        match value {
            Value::Null => claims.as_object_mut().expect("object").remove(name),
            _ => claims
                .as_object_mut()
                .expect("object")
                .insert(name.clone(), value.clone()),
        };
    }
    claims
}

/// Verifies `token` and checks it is refused with `reason`, without the token in the error.
fn refused(identity: &Identity, token: &str, reason: &'static str) {
    let error = identity.verify(token).expect_err("refused");
    assert_eq!(error, IdentityError::Invalid(reason), "{token}");
    assert!(!format!("{error:?}").contains(token));
}

#[test]
fn a_good_token_passes_and_expires_on_the_injected_clock() {
    let key = Signer::es256("k1");
    let (identity, clock, _dir) = offline(&corp(), &[&key]);
    let token = key.sign(&claims());
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.scopes, ["invoices:read"]);
    assert_eq!(verified.expires_at, NOW + 300);
    // exp + skew (60 s) is the last second before the refusal.
    clock.set_unix_secs(NOW + 359);
    assert!(identity.verify(&token).is_ok());
    clock.set_unix_secs(NOW + 360);
    refused(&identity, &token, "expired");
}

#[test]
fn times_in_the_future_beyond_the_skew_are_not_yet_valid() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(), &[&key]);
    refused(
        &identity,
        &key.sign(&claims_with(json!({"nbf": NOW + 61}))),
        "not_yet_valid",
    );
    refused(
        &identity,
        &key.sign(&claims_with(json!({"iat": NOW + 61}))),
        "not_yet_valid",
    );
    assert!(
        identity
            .verify(&key.sign(&claims_with(json!({"nbf": NOW + 60}))))
            .is_ok()
    );
    refused(
        &identity,
        &key.sign(&claims_with(json!({"exp": NOW - 61}))),
        "expired",
    );
    refused(
        &identity,
        &key.sign(&claims_with(json!({"exp": null}))),
        "malformed",
    );
    refused(
        &identity,
        &key.sign(&claims_with(json!({"exp": "soon"}))),
        "malformed",
    );
}

#[test]
fn unsigned_and_hmac_tokens_are_bad_signatures() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(), &[&key]);
    let payload = b64(claims().to_string().as_bytes());
    let none = format!("{}.{payload}.", b64(br#"{"alg":"none","typ":"JWT"}"#));
    refused(&identity, &none, "bad_signature");
    // HS256 keyed with the public key: the classic confusion attack.
    let header = b64(br#"{"alg":"HS256","typ":"JWT","kid":"k1"}"#);
    let input = format!("{header}.{payload}");
    let secret = jsonwebtoken::EncodingKey::from_secret(key.jwk.to_string().as_bytes());
    let mac =
        jsonwebtoken::crypto::sign(input.as_bytes(), &secret, Algorithm::HS256).expect("hmac");
    refused(&identity, &format!("{input}.{mac}"), "bad_signature");
    // An algorithm the issuer does not allow, and one the named key cannot do.
    let es384 = json!({"alg": "ES384", "kid": "k1"});
    refused(
        &identity,
        &key.sign_with_header(&es384, &claims()),
        "bad_signature",
    );
    let eddsa = json!({"alg": "EdDSA", "kid": "k1"});
    refused(
        &identity,
        &key.sign_with_header(&eddsa, &claims()),
        "bad_signature",
    );
}

#[test]
fn a_tampered_payload_or_another_key_is_a_bad_signature() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(), &[&key]);
    let token = key.sign(&claims());
    let parts: Vec<&str> = token.split('.').collect();
    let forged = b64(claims_with(json!({"scope": "invoices:write"}))
        .to_string()
        .as_bytes());
    let tampered = format!("{}.{forged}.{}", parts[0], parts[2]);
    refused(&identity, &tampered, "bad_signature");
    let impostor = Signer::es256("k1");
    refused(&identity, &impostor.sign(&claims()), "bad_signature");
    // Without a kid, every key of the algorithm is tried.
    let no_kid = json!({"alg": "ES256"});
    assert!(
        identity
            .verify(&key.sign_with_header(&no_kid, &claims()))
            .is_ok()
    );
    refused(
        &identity,
        &impostor.sign_with_header(&no_kid, &claims()),
        "bad_signature",
    );
}

#[test]
fn audience_issuer_and_key_must_be_known() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(), &[&key]);
    let other_aud = claims_with(json!({"aud": ["https://other.example.com", "account"]}));
    refused(&identity, &key.sign(&other_aud), "wrong_audience");
    refused(
        &identity,
        &key.sign(&claims_with(json!({"aud": null}))),
        "wrong_audience",
    );
    let listed = claims_with(json!({"aud": ["account", AUDIENCE]}));
    assert!(identity.verify(&key.sign(&listed)).is_ok());
    let elsewhere = claims_with(json!({"iss": "https://evil.example.com/realms/acme"}));
    refused(&identity, &key.sign(&elsewhere), "untrusted_issuer");
    refused(
        &identity,
        &key.sign(&claims_with(json!({"iss": null}))),
        "untrusted_issuer",
    );
    // A key file is all there is: an unknown kid is unknown at once.
    refused(
        &identity,
        &Signer::es256("k2").sign(&claims()),
        "unknown_key",
    );
}

#[test]
fn shapes_types_and_subjects_that_do_not_fit_are_malformed() {
    let key = Signer::es256("k1");
    let (identity, _clock, _dir) = offline(&corp(), &[&key]);
    for typ in ["at+jwt", "application/at+jwt", "JWT", "AT+JWT"] {
        let header = json!({"alg": "ES256", "kid": "k1", "typ": typ});
        assert!(
            identity
                .verify(&key.sign_with_header(&header, &claims()))
                .is_ok(),
            "{typ}"
        );
    }
    let dpop = json!({"alg": "ES256", "kid": "k1", "typ": "dpop+jwt"});
    refused(
        &identity,
        &key.sign_with_header(&dpop, &claims()),
        "malformed",
    );
    refused(
        &identity,
        &key.sign(&claims_with(json!({"sub": null}))),
        "malformed",
    );
    let header = b64(br#"{"alg":"ES256","kid":"k1"}"#);
    refused(
        &identity,
        &format!("{header}.{}.sig", b64(b"not json")),
        "malformed",
    );
    refused(
        &identity,
        &format!("{header}.{}.sig", b64(b"[1,2]")),
        "malformed",
    );
    refused(
        &identity,
        &format!("{}.{}.sig", b64(b"{"), b64(b"{}")),
        "malformed",
    );
    // Not a JWT, and no issuer introspects: nothing can vouch for it.
    refused(&identity, "an-opaque-token-0123456789", "malformed");
    refused(&identity, "a.b", "malformed");
}

#[test]
fn the_generated_keys_and_an_ed25519_issuer_round_trip() {
    let ec = Signer::es256("ec");
    let ed = Signer::ed25519("ed");
    let (identity, _clock, _dir) = offline(&corp(), &[&ec, &ed]);
    assert!(identity.verify(&ec.sign(&claims())).is_ok());
    assert!(identity.verify(&ed.sign(&claims())).is_ok());
    assert!(!identity.is_empty());
    let none = Identity::start(&[], crate::clock::Clock::System).expect("starts");
    assert!(none.is_empty());
    assert!(none.issuer_urls().is_empty());
}

#[test]
fn a_key_file_that_cannot_be_read_fails_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let issuers = issuers_of(dir.path(), &corp());
    let clock = ManualClock::at_unix_secs(NOW).clock();
    let Err(missing) = Identity::start(&issuers, clock.clone()) else {
        panic!("a missing key file is refused");
    };
    assert!(missing.starts_with("issuer corp: jwks_file "), "{missing}");
    assert!(missing.contains("cannot read it"), "{missing}");
    std::fs::write(
        dir.path().join("keys.json"),
        r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
    )
    .expect("write");
    let Err(useless) = Identity::start(&issuers, clock) else {
        panic!("a key file without a public key is refused");
    };
    assert!(useless.contains("none of the 1 keys"), "{useless}");
}
