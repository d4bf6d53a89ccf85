use super::*;
use crate::store::Store;
use crate::store::testing::stores;

fn scopes(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// A consent of `principal` to `client` for `invoices:read` and `clients:read`.
fn consent(store: &Store, principal: &str, client: &str, now: i64) -> Grant {
    store
        .consent(&NewGrant {
            id: &format!("g-{principal}-{client}-{now}"),
            principal_id: principal,
            principal_label: "Ana",
            client_id: client,
            client_name: Some("Host"),
            scopes: &scopes(&["invoices:read", "clients:read"]),
            now,
        })
        .expect("consent")
}

/// A code under `grant`, taken, and its family issued with access `a<n>` and refresh
/// `r<n>` (hashes written plainly).
fn issue(store: &Store, grant: &Grant, n: u32, now: i64) {
    let code = format!("code{n}");
    store
        .insert_code(&NewCode {
            code_hash: &code,
            grant_id: &grant.id,
            client_id: &grant.client_id,
            redirect_uri: "http://127.0.0.1/cb",
            code_challenge: "c",
            scopes: &grant.scopes,
            resource: "https://t.example/mcp",
            now,
            expires_at: now + 60,
        })
        .expect("code");
    assert!(matches!(
        store.take_code(&code, now).expect("take"),
        CodeExchange::Taken(_)
    ));
    assert!(
        store
            .issue_family(&IssuedFamily {
                family_id: &format!("f{n}"),
                grant_id: &grant.id,
                client_id: &grant.client_id,
                scopes: &grant.scopes,
                resource: "https://t.example/mcp",
                access: (&format!("a{n}"), now + 600),
                refresh: (&format!("r{n}"), now + 86_400),
                code_hash: &code,
                now,
            })
            .expect("family")
    );
}

#[test]
fn a_code_is_taken_once_and_a_second_exchange_revokes_what_the_first_issued() {
    for scratch in stores() {
        let store = &scratch.store;
        let grant = consent(store, "u1", "client-a", 100);
        issue(store, &grant, 1, 100);
        let standing = store.access_standing("a1").expect("read").expect("token");
        assert!(!standing.revoked);
        assert_eq!(standing.principal_id, "u1");
        assert_eq!(standing.scopes, grant.scopes);

        assert_eq!(
            store.take_code("code1", 101).expect("again"),
            CodeExchange::Reused
        );
        assert!(
            store
                .access_standing("a1")
                .expect("read")
                .expect("token")
                .revoked
        );
        assert_eq!(
            store.take_code("nope", 101).expect("unknown"),
            CodeExchange::Unknown
        );
    }
}

#[test]
fn a_refresh_token_rotates_once_and_its_reuse_revokes_the_family() {
    for scratch in stores() {
        let store = &scratch.store;
        let grant = consent(store, "u1", "client-a", 100);
        issue(store, &grant, 1, 100);
        let rotate = |presented: &str, client: &str, n: &str, asked: Option<&[String]>| {
            store
                .rotate_refresh(&Rotation {
                    presented,
                    client_id: client,
                    scopes: asked,
                    access: (&format!("a{n}"), 800),
                    refresh: &format!("r{n}"),
                    now: 200,
                })
                .expect("rotate")
        };
        assert_eq!(rotate("r1", "client-b", "x", None), RefreshOutcome::Invalid);
        let widened = scopes(&["invoices:write"]);
        assert_eq!(
            rotate("r1", "client-a", "y", Some(&widened)),
            RefreshOutcome::ScopeWidened
        );
        let narrowed = scopes(&["invoices:read"]);
        match rotate("r1", "client-a", "2", Some(&narrowed)) {
            RefreshOutcome::Rotated {
                scopes,
                family_expires_at,
                ..
            } => {
                assert_eq!(scopes, narrowed);
                assert_eq!(family_expires_at, 100 + 86_400);
            }
            other => panic!("not rotated: {other:?}"),
        }
        let next = store.access_standing("a2").expect("read").expect("token");
        assert_eq!(
            next.scopes, narrowed,
            "the narrowed token carries fewer scopes"
        );
        // The first refresh token again: the whole family goes, the new pair too.
        assert_eq!(rotate("r1", "client-a", "3", None), RefreshOutcome::Reused);
        assert!(
            store
                .access_standing("a2")
                .expect("read")
                .expect("token")
                .revoked
        );
        assert_eq!(rotate("r2", "client-a", "4", None), RefreshOutcome::Invalid);
    }
}

#[test]
fn a_revoked_grant_refuses_its_tokens_and_a_new_consent_starts_a_new_grant() {
    for scratch in stores() {
        let store = &scratch.store;
        let grant = consent(store, "u1", "client-a", 100);
        issue(store, &grant, 1, 100);
        assert_eq!(store.grants().expect("list").len(), 1);
        assert!(store.revoke_grant(&grant.id, 150).expect("revoke"));
        assert!(!store.revoke_grant(&grant.id, 151).expect("twice"));
        assert!(
            store
                .access_standing("a1")
                .expect("read")
                .expect("token")
                .revoked
        );
        assert!(
            store
                .standing_grant("u1", "client-a")
                .expect("read")
                .is_none()
        );

        let again = consent(store, "u1", "client-a", 200);
        assert_ne!(again.id, grant.id);
        assert!(
            store.access_standing("a1").expect("read").is_none(),
            "old grant gone"
        );
        // A later consent adds scopes to the standing grant.
        let more = store
            .consent(&NewGrant {
                id: "unused",
                principal_id: "u1",
                principal_label: "Ana",
                client_id: "client-a",
                client_name: None,
                scopes: &scopes(&["payments:write"]),
                now: 300,
            })
            .expect("more");
        assert_eq!(more.id, again.id);
        assert_eq!(
            more.scopes,
            scopes(&["invoices:read", "clients:read", "payments:write"])
        );
    }
}

#[test]
fn revocation_by_a_client_reaches_only_its_own_tokens() {
    for scratch in stores() {
        let store = &scratch.store;
        let grant = consent(store, "u1", "client-a", 100);
        issue(store, &grant, 1, 100);
        assert_eq!(
            store.revoke_issued("a1", "client-b", 120).expect("r"),
            Revocation::NotFound
        );
        assert!(
            !store
                .access_standing("a1")
                .expect("read")
                .expect("token")
                .revoked
        );
        assert_eq!(
            store.revoke_issued("a1", "client-a", 120).expect("r"),
            Revocation::Revoked
        );
        assert!(
            store
                .access_standing("a1")
                .expect("read")
                .expect("token")
                .revoked
        );
        // A refresh token takes its family with it.
        issue(store, &grant, 2, 130);
        assert_eq!(
            store.revoke_issued("r2", "client-a", 140).expect("r"),
            Revocation::Revoked
        );
        assert!(
            store
                .access_standing("a2")
                .expect("read")
                .expect("token")
                .revoked
        );
    }
}

#[test]
fn registrations_are_bounded_and_unused_ones_expire() {
    for scratch in stores() {
        let store = &scratch.store;
        let registration = |id: &str, at: i64| Registration {
            client_id: id.to_owned(),
            secret_hash: None,
            client_name: Some("Host".into()),
            client_uri: None,
            redirect_uris: scopes(&["http://127.0.0.1/cb"]),
            grant_types: scopes(&["authorization_code", "refresh_token"]),
            auth_method: "none".into(),
            application_type: Some("native".into()),
            created_at: at,
            last_used_at: None,
        };
        let insert = |id: &str, at: i64| {
            store
                .insert_registration(&NewRegistration {
                    registration: &registration(id, at),
                    source: "http:127.0.0.1",
                    max_clients: 2,
                    unused_before: at - 1000,
                })
                .expect("insert")
        };
        assert!(insert("c1", 100));
        assert!(insert("c2", 200));
        assert!(!insert("c3", 300), "full");
        assert_eq!(store.registrations().expect("list").len(), 2);
        // c1 found while young, gone once unused past the bound.
        assert!(store.registration("c1", 0).expect("read").is_some());
        assert!(store.registration("c1", 101).expect("read").is_none());
        // Past the bound the unused ones make room.
        assert!(insert("c4", 1_150));
        let left: Vec<String> = store
            .registrations()
            .expect("list")
            .into_iter()
            .map(|r| r.client_id)
            .collect();
        assert_eq!(left, ["c4", "c2"]);
        // Deleting a client revokes its grants and their tokens; an unknown id changes
        // nothing, not even the grants of a client by that id that never registered.
        let grant = consent(store, "u1", "c2", 1_150);
        issue(store, &grant, 7, 1_150);
        let unregistered = consent(store, "u1", "https://host.example/client.json", 1_150);
        assert_eq!(
            store.delete_registration("c2", 1_200).expect("delete"),
            Some(1)
        );
        assert_eq!(store.delete_registration("c2", 1_200).expect("twice"), None);
        assert_eq!(
            store
                .delete_registration(&unregistered.client_id, 1_200)
                .expect("unknown"),
            None
        );
        assert_eq!(
            store
                .grant(&grant.id)
                .expect("read")
                .expect("grant")
                .revoked_at,
            Some(1_200)
        );
        assert!(
            store
                .access_standing("a7")
                .expect("read")
                .expect("token")
                .revoked
        );
        let standing = store.grant(&unregistered.id).expect("read").expect("grant");
        assert_eq!(standing.revoked_at, None);
    }
}

#[test]
fn a_request_takes_its_provider_answer_once_and_ends_once() {
    for scratch in stores() {
        let store = &scratch.store;
        let asked = scopes(&["invoices:read"]);
        store
            .insert_auth_request(&NewAuthRequest {
                id: "req1",
                csrf: "tok",
                client_id: "client-a",
                client_name: None,
                redirect_uri: "http://127.0.0.1/cb",
                state: Some("xyz"),
                code_challenge: "c",
                scopes: Some(&asked),
                resource: "https://t.example/mcp",
                now: 100,
                expires_at: 700,
            })
            .expect("insert");
        assert!(
            store
                .begin_request_login("req1", "ls", "n", "v")
                .expect("login")
        );
        let taken = store
            .take_request_login("ls", 200)
            .expect("take")
            .expect("found");
        assert_eq!(taken.login_nonce.as_deref(), Some("n"));
        assert_eq!(taken.scopes.as_deref(), Some(asked.as_slice()));
        assert!(
            store
                .take_request_login("ls", 200)
                .expect("again")
                .is_none()
        );
        let who = SignedIn {
            principal_id: "u1".into(),
            label: "Ana".into(),
            held_scopes: asked.clone(),
        };
        assert!(
            store
                .set_request_signed_in("req1", &who)
                .expect("signed in")
        );
        let request = store
            .auth_request("req1", 300)
            .expect("read")
            .expect("found");
        assert_eq!(request.signed_in, Some(who));
        assert_eq!(request.login_nonce, None, "the sign-in secrets are cleared");
        assert!(
            store.auth_request("req1", 701).expect("read").is_none(),
            "expired"
        );
        assert!(store.end_auth_request("req1").expect("end"));
        assert!(!store.end_auth_request("req1").expect("twice"));
    }
}
