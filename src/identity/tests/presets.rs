//! Each preset against a token laid out as its provider issues it: the user, the client
//! and the scopes its documentation promises.

use super::*;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const APP_ID: &str = "6e74172b-be56-4843-9ff4-e66a39bb12e3";

fn entra() -> String {
    format!(
        r#"
[[auth.issuers]]
name = "entra"
preset = "entra"
tenant = "{TENANT}"
audience = ["api://tollgate", "{APP_ID}"]
jwks_file = "keys.json"
[auth.issuers.roles]
"Invoices.Approve" = ["invoices:approve"]
"Invoices.Write" = ["invoices:write"]
"#
    )
}

#[test]
fn entra_v2_tokens_name_the_object_id_and_map_scp_and_roles() {
    let key = Signer::es256("entra-key");
    let (identity, _clock, _dir) = offline(&entra(), &[&key]);
    let token = key.sign(&json!({
        "aud": APP_ID,
        "iss": format!("https://login.microsoftonline.com/{TENANT}/v2.0"),
        "iat": NOW - 10, "nbf": NOW - 10, "exp": NOW + 3600,
        "azp": "0a7c94a0-0c4e-4f95-ad03-d3b5b8e4c5a1", "azpacr": "1",
        "name": "Ana Ruiz", "oid": "9f1c2a8e-0000-4c3e-8d4e-111111111111",
        "preferred_username": "ana@contoso.com",
        "roles": ["Invoices.Approve"],
        "scp": "invoices:read Invoices.Write",
        "sub": "pairwise-subject-for-this-app",
        "tid": TENANT, "ver": "2.0",
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.issuer_name, "entra");
    assert_eq!(
        verified.issuer,
        format!("https://login.microsoftonline.com/{TENANT}/v2.0")
    );
    assert_eq!(verified.subject, "9f1c2a8e-0000-4c3e-8d4e-111111111111");
    assert_eq!(verified.display_name.as_deref(), Some("ana@contoso.com"));
    assert_eq!(
        verified.client_id.as_deref(),
        Some("0a7c94a0-0c4e-4f95-ad03-d3b5b8e4c5a1")
    );
    assert_eq!(
        verified.scopes,
        ["invoices:approve", "invoices:read", "invoices:write"]
    );
    // Reused as long as it verifies: up to the 60 s skew past `exp`.
    assert_eq!(
        (verified.expires_at, verified.cache_until),
        (NOW + 3600, NOW + 3660)
    );
}

#[test]
fn entra_v1_tokens_are_accepted_under_the_canonical_issuer() {
    let key = Signer::es256("entra-key");
    let (identity, _clock, _dir) = offline(&entra(), &[&key]);
    let token = key.sign(&json!({
        "aud": "api://tollgate",
        "iss": format!("https://sts.windows.net/{TENANT}/"),
        "iat": NOW, "nbf": NOW, "exp": NOW + 3600,
        "appid": "0a7c94a0-0c4e-4f95-ad03-d3b5b8e4c5a1", "appidacr": "1",
        "name": "Ana Ruiz", "oid": "9f1c2a8e-0000-4c3e-8d4e-111111111111",
        "roles": ["Invoices.Write"], "scp": "user_impersonation",
        "sub": "another-pairwise-subject", "tid": TENANT,
        "unique_name": "ana@contoso.com", "upn": "ana.ruiz@contoso.com", "ver": "1.0",
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(
        verified.issuer,
        format!("https://login.microsoftonline.com/{TENANT}/v2.0")
    );
    assert_eq!(verified.subject, "9f1c2a8e-0000-4c3e-8d4e-111111111111");
    assert_eq!(
        verified.display_name.as_deref(),
        Some("ana.ruiz@contoso.com")
    );
    assert_eq!(
        verified.client_id.as_deref(),
        Some("0a7c94a0-0c4e-4f95-ad03-d3b5b8e4c5a1")
    );
    assert_eq!(verified.scopes, ["invoices:write"]);
    // The metadata names the canonical issuer only: the v1 one has no metadata of its own.
    assert_eq!(
        identity.issuer_urls(),
        [format!("https://login.microsoftonline.com/{TENANT}/v2.0")]
    );
}

#[test]
fn keycloak_realm_and_client_roles_map_through_the_table() {
    let key = Signer::es256("kc-key");
    let (identity, _clock, _dir) = offline(
        r#"
[[auth.issuers]]
name = "keycloak"
preset = "keycloak"
issuer = "https://sso.acme.example/realms/acme"
client = "tollgate.api"
audience = "tollgate.api"
jwks_file = "keys.json"
[auth.issuers.roles]
invoice-clerks = ["invoices:read", "invoices:write"]
approver = ["invoices:approve"]
"#,
        &[&key],
    );
    let token = key.sign(&json!({
        "exp": NOW + 300, "iat": NOW, "jti": "onrtac:1",
        "iss": "https://sso.acme.example/realms/acme",
        "aud": ["tollgate.api", "account"],
        "sub": "f3b2c1d0-1111-2222-3333-444455556666", "typ": "Bearer",
        "azp": "agent-cli", "sid": "abc",
        "realm_access": {"roles": ["offline_access", "uma_authorization", "invoice-clerks"]},
        "resource_access": {
            "tollgate.api": {"roles": ["approver"]},
            "account": {"roles": ["manage-account", "view-profile"]},
        },
        "scope": "openid profile email",
        "email_verified": true, "preferred_username": "ana", "email": "ana@acme.example",
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.subject, "f3b2c1d0-1111-2222-3333-444455556666");
    assert_eq!(verified.display_name.as_deref(), Some("ana"));
    assert_eq!(verified.client_id.as_deref(), Some("agent-cli"));
    assert_eq!(
        verified.scopes,
        ["invoices:approve", "invoices:read", "invoices:write"]
    );
}

#[test]
fn okta_scp_and_groups_map_and_the_client_is_cid() {
    let key = Signer::es256("okta-key");
    let (identity, _clock, _dir) = offline(
        r#"
[[auth.issuers]]
name = "okta"
preset = "okta"
issuer = "https://acme.okta.com/oauth2/default"
audience = "api://default"
jwks_file = "keys.json"
[auth.issuers.roles]
Finance = ["invoices:write"]
"#,
        &[&key],
    );
    let token = key.sign(&json!({
        "ver": 1, "jti": "AT.x", "iss": "https://acme.okta.com/oauth2/default",
        "aud": "api://default", "iat": NOW, "exp": NOW + 3600,
        "cid": "0oa1agentclient", "uid": "00u1ana",
        "scp": ["openid", "invoices:read"], "auth_time": NOW - 60,
        "sub": "ana@acme.example", "groups": ["Everyone", "Finance"],
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.subject, "ana@acme.example");
    assert_eq!(verified.client_id.as_deref(), Some("0oa1agentclient"));
    assert_eq!(verified.scopes, ["invoices:read", "invoices:write"]);
}

#[test]
fn auth0_permissions_and_scope_grant_tool_scopes_but_never_star_or_admin() {
    let key = Signer::es256("auth0-key");
    let (identity, _clock, _dir) = offline(
        r#"
[[auth.issuers]]
name = "auth0"
preset = "auth0"
issuer = "https://acme.eu.auth0.com/"
audience = "https://tollgate.example.com/mcp"
jwks_file = "keys.json"
[auth.issuers.roles]
"read:reports" = ["reports:read"]
"#,
        &[&key],
    );
    let token = key.sign(&json!({
        "iss": "https://acme.eu.auth0.com/", "sub": "auth0|64f0c0ffee",
        "aud": ["https://tollgate.example.com/mcp", "https://acme.eu.auth0.com/userinfo"],
        "iat": NOW, "exp": NOW + 86400, "azp": "AgentClientId123",
        "scope": "openid profile invoices:read * admin",
        "permissions": ["invoices:read", "invoices:write", "read:reports", "admin"],
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.subject, "auth0|64f0c0ffee");
    assert_eq!(verified.client_id.as_deref(), Some("AgentClientId123"));
    assert_eq!(
        verified.scopes,
        [
            "invoices:read",
            "invoices:write",
            "read:reports",
            "reports:read"
        ]
    );
}

#[test]
fn authentik_groups_map_and_eddsa_keys_verify() {
    let key = Signer::ed25519("authentik-key");
    let (identity, _clock, _dir) = offline(
        r#"
[[auth.issuers]]
name = "authentik"
preset = "authentik"
issuer = "https://auth.acme.example/application/o/tollgate/"
audience = "Xb5s0tollgateclient"
jwks_file = "keys.json"
[auth.issuers.roles]
"authentik Admins" = ["admin"]
Finance = ["invoices:read"]
"#,
        &[&key],
    );
    let token = key.sign(&json!({
        "iss": "https://auth.acme.example/application/o/tollgate/",
        "sub": "8d2b1f0e5c4a39b7", "aud": "Xb5s0tollgateclient",
        "exp": NOW + 600, "iat": NOW, "auth_time": NOW,
        "acr": "goauthentik.io/providers/oauth2/default", "azp": "Xb5s0tollgateclient",
        "email": "ana@acme.example", "email_verified": true, "name": "Ana Ruiz",
        "given_name": "Ana Ruiz", "preferred_username": "ana", "nickname": "ana",
        "groups": ["authentik Admins", "Finance"], "scope": "openid email profile",
    }));
    let verified = identity.verify(&token).expect("accepted");
    assert_eq!(verified.subject, "8d2b1f0e5c4a39b7");
    assert_eq!(verified.display_name.as_deref(), Some("ana"));
    assert_eq!(verified.scopes, ["admin", "invoices:read"]);
}
