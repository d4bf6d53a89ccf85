//! Tokens from the company's identity provider, against a real OpenID Provider nobody here
//! wrote (`oidc-provider`, started by [`crate::idp`]): JWT access tokens (client
//! credentials with a resource indicator) and opaque ones (introspection). A token reaches
//! the tools its roles map to and no other; each refusal names its reason; the provider's
//! key rotation, its absence and a revoked opaque token behave as an operator expects; each
//! user is a principal of its own (counters, block, audit) over HTTP and stdio.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::idp::{INTROSPECTOR_ID, Idp, IdpClient, IdpOptions};
use crate::util::{HttpServer, StdioServer, TestDb, modern_meta};

/// The resource (audience) tollgate's issuers are configured with.
const AUDIENCE: &str = "https://tollgate.test/mcp";

/// A configuration trusting `idp` for `AUDIENCE`: the role `invoice-readers` grants
/// `invoices:read`, and opaque tokens are introspected without a cache.
fn config_for(idp: &Idp) -> String {
    format!(
        "[[auth.issuers]]\n\
         name = \"test\"\n\
         issuer = \"{issuer}\"\n\
         audience = \"{AUDIENCE}\"\n\
         [auth.issuers.roles]\n\
         \"invoice-readers\" = [\"invoices:read\"]\n\
         [auth.issuers.introspection]\n\
         client_id = \"{INTROSPECTOR_ID}\"\n\
         client_secret_file = \"{secret}\"\n\
         cache_secs = 0\n",
        issuer = idp.issuer(),
        secret = idp.introspection_secret_file().display(),
    )
}

/// The provider with two users: `clerk` (the role `invoice-readers`, and `clients:read`
/// as a scope) and `auditor` (the same role), plus an opaque-token client.
fn provider() -> Idp {
    Idp::start(&IdpOptions::new(vec![
        IdpClient::jwt("clerk")
            .scopes(&["clients:read", "clients:write"])
            .roles(&["invoice-readers"]),
        IdpClient::jwt("auditor").roles(&["invoice-readers"]),
        IdpClient::jwt("stale")
            .roles(&["invoice-readers"])
            .time_shift_secs(7200),
        IdpClient::jwt("early")
            .roles(&["invoice-readers"])
            .time_shift_secs(-7200),
        IdpClient::opaque("robot").scopes(&["clients:read"]),
    ]))
}

/// The JSON-RPC error of a response, or the envelope of an `isError` result.
fn error_of(response: &Value) -> &Value {
    &response["error"]
}

/// `details.reason` of a refusal.
fn reason(response: &Value) -> &Value {
    &response["error"]["data"]["details"]["reason"]
}

/// The id of the provider user `subject` (as `tollgate users list` shows it).
fn user_id(db: &TestDb, subject: &str) -> String {
    let rows = db.sql_rows(&format!("SELECT id FROM users WHERE subject = '{subject}'"));
    rows.first()
        .and_then(|row| row[0].clone())
        .unwrap_or_else(|| panic!("no user {subject}"))
}

/// The audit rows (tool, outcome, client) of `principal`, once there are `count`: calls are
/// audited by a writer thread a few milliseconds after they are answered. Bounded: 100
/// looks.
fn audit_rows_of(db: &TestDb, principal: &str, count: usize) -> Vec<Vec<Option<String>>> {
    let query = format!(
        "SELECT tool, outcome, client_id FROM audit_log WHERE credential_id = '{principal}' \
         ORDER BY id"
    );
    for _ in 0..100 {
        let rows = db.sql_rows(&query);
        if rows.len() >= count {
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("the audit log never held {count} rows of {principal}");
}

fn call(server: &HttpServer, token: &str, tool: &str) -> Value {
    server.modern_tool_call(token, tool, &json!({})).json()
}

#[test]
fn a_providers_token_reaches_the_tools_its_roles_and_scopes_map_to_and_no_other() {
    let idp = provider();
    let db = TestDb::new();
    let server = HttpServer::start_with_config(&db, &config_for(&idp), &[]);
    let token = idp.client_credentials_token("clerk", "clients:read", AUDIENCE);

    let listed: Vec<String> = server
        .modern_tools_list(&token)
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect();
    assert!(listed.contains(&"search_invoices".to_owned()), "{listed:?}");
    assert!(listed.contains(&"search_clients".to_owned()), "{listed:?}");
    assert!(!listed.contains(&"create_client".to_owned()), "{listed:?}");

    for tool in ["search_invoices", "search_clients"] {
        let answer = call(&server, &token, tool);
        assert!(answer["result"].is_object(), "{tool}: {answer}");
    }
    // clients:write is grantable but was not requested: the token does not carry it.
    let refused = call(&server, &token, "create_client");
    assert_eq!(error_of(&refused)["code"], -32005, "{refused}");
    assert_eq!(refused["error"]["data"]["code"], "insufficient_scope");
    assert_eq!(refused["error"]["data"]["required_scope"], "clients:write");

    // The audit log names the user and the OAuth client the token was issued to.
    let clerk = user_id(&db, "clerk");
    let rows = audit_rows_of(&db, &clerk, 3);
    let seen: Vec<(String, String, String)> = rows
        .into_iter()
        .map(|r| {
            (
                r[0].clone().unwrap_or_default(),
                r[1].clone().unwrap_or_default(),
                r[2].clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        seen.contains(&(
            "create_client".into(),
            "insufficient_scope".into(),
            "test:clerk".into()
        )),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(tool, outcome, _)| tool == "search_invoices" && outcome == "ok"),
        "{seen:?}"
    );
}

/// The token with its payload replaced by `claims` (the signature kept).
fn with_payload(token: &str, claims: &Value) -> String {
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    parts[1] = URL_SAFE_NO_PAD.encode(claims.to_string());
    parts.join(".")
}

#[test]
fn each_bad_token_is_refused_invalid_token_with_its_reason() {
    let idp = provider();
    let stranger = Idp::start(&IdpOptions::new(vec![
        IdpClient::jwt("clerk").roles(&["invoice-readers"]),
    ]));
    let db = TestDb::new();
    let server =
        HttpServer::start_with_config(&db, &config_for(&idp), &[("TOLLGATE_HTTP_METRICS", "true")]);
    let good = idp.client_credentials_token("clerk", "clients:read", AUDIENCE);
    let (header, claims) = crate::idp::jwt_parts(&good);

    let mut tampered = claims.clone();
    tampered["scope"] = json!("clients:read clients:write clients:delete");
    let mut unsigned_header = header.clone();
    unsigned_header["alg"] = json!("none");
    let alg_none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(unsigned_header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
    );
    let cases = [
        (
            idp.client_credentials_token("clerk", "clients:read", "https://other.test/mcp"),
            "wrong_audience",
        ),
        (
            stranger.client_credentials_token("clerk", "", AUDIENCE),
            "untrusted_issuer",
        ),
        (
            idp.client_credentials_token("stale", "", AUDIENCE),
            "expired",
        ),
        (
            idp.client_credentials_token("early", "", AUDIENCE),
            "not_yet_valid",
        ),
        (alg_none, "bad_signature"),
        (with_payload(&good, &tampered), "bad_signature"),
        // The shape of a JWT whose parts are not JSON.
        ("x.y.z".to_owned(), "malformed"),
        // Not a JWT: the provider's introspection decides, and knows nothing of it.
        ("not-a-token-at-all".to_owned(), "inactive"),
    ];
    for (token, why) in &cases {
        let answer = call(&server, token, "search_invoices");
        assert_eq!(error_of(&answer)["code"], -32001, "{why}: {answer}");
        assert_eq!(answer["error"]["data"]["code"], "invalid_token", "{answer}");
        assert_eq!(reason(&answer), why, "{answer}");
        // The token never comes back, not even in part.
        assert!(!answer.to_string().contains(token.as_str()), "{answer}");
    }
    // The good token still works, and no token reached the log.
    assert!(call(&server, &good, "search_invoices")["result"].is_object());
    let log = server.log_text();
    for (token, _) in &cases {
        // A part too short to be told from ordinary text ("x.y.z" ends in "z") proves
        // nothing either way.
        let signature = token.rsplit('.').next().unwrap_or_default();
        assert!(
            signature.len() < 12 || !log.contains(signature),
            "a token in the log: {signature}"
        );
    }
    assert!(!log.contains(good.as_str()));
    // Verifications are counted by issuer and outcome; users and tokens are no labels.
    let metrics = String::from_utf8(server.get("/metrics").body).expect("utf-8");
    for line in [
        "tollgate_identity_verifications_total{issuer=\"test\",outcome=\"accepted\"} 1",
        "tollgate_identity_verifications_total{issuer=\"-\",outcome=\"wrong_audience\"} 1",
        "tollgate_identity_verifications_total{issuer=\"-\",outcome=\"bad_signature\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

#[test]
fn a_new_signing_key_is_fetched_when_a_token_names_it() {
    let mut idp = provider();
    let db = TestDb::new();
    let server = HttpServer::start_with_config(&db, &config_for(&idp), &[]);
    let first = idp.client_credentials_token("clerk", "", AUDIENCE);
    assert!(call(&server, &first, "search_invoices")["result"].is_object());
    let old_kid = idp.signing_kid();
    idp.restart_with_new_key();
    assert_ne!(idp.signing_kid(), old_kid);
    let rotated = idp.client_credentials_token("auditor", "", AUDIENCE);
    let answer = call(&server, &rotated, "search_invoices");
    assert!(
        answer["result"].is_object(),
        "a token under the new key: {answer}"
    );
}

#[test]
fn a_stopped_provider_leaves_held_keys_working_and_answers_the_rest_as_unavailable() {
    let mut idp = provider();
    let db = TestDb::new();
    let server = HttpServer::start_with_config(&db, &config_for(&idp), &[]);
    let first = idp.client_credentials_token("clerk", "", AUDIENCE);
    assert!(call(&server, &first, "search_invoices")["result"].is_object());
    // Minted under the key tollgate holds, presented only once the provider is gone.
    let unseen = idp.client_credentials_token("auditor", "", AUDIENCE);
    idp.restart_with_new_key();
    let needs_provider = idp.client_credentials_token("auditor", "", AUDIENCE);
    let opaque = idp.opaque_token("robot", "clients:read", AUDIENCE);
    idp.stop();

    let answer = call(&server, &unseen, "search_invoices");
    assert!(answer["result"].is_object(), "verified offline: {answer}");
    // A key tollgate never saw, and an opaque token, need the provider: retryable, and
    // never called invalid.
    for token in [&needs_provider, &opaque] {
        let answer = call(&server, token, "search_invoices");
        assert_eq!(error_of(&answer)["code"], -32603, "{answer}");
        assert_eq!(answer["error"]["data"]["code"], "backend_unavailable");
        assert_eq!(answer["error"]["data"]["retryable"], true, "{answer}");
        // Why the provider could not be asked is the operator's: no endpoint reaches the
        // caller.
        assert!(!answer.to_string().contains("127.0.0.1"), "{answer}");
    }
    // The first token, verified before, still works from the cache.
    assert!(call(&server, &first, "search_invoices")["result"].is_object());
}

#[test]
fn an_opaque_token_is_introspected_and_refused_once_the_provider_says_inactive() {
    let idp = provider();
    let db = TestDb::new();
    let server = HttpServer::start_with_config(&db, &config_for(&idp), &[]);
    let token = idp.opaque_token("robot", "clients:read", AUDIENCE);
    let answer = call(&server, &token, "search_clients");
    assert!(answer["result"].is_object(), "{answer}");
    let refused = call(&server, &token, "search_invoices");
    assert_eq!(refused["error"]["data"]["code"], "insufficient_scope");

    idp.revoke(&token);
    let answer = call(&server, &token, "search_clients");
    assert_eq!(error_of(&answer)["code"], -32001, "{answer}");
    assert_eq!(reason(&answer), "inactive", "{answer}");
}

#[test]
fn each_user_has_counters_of_its_own_over_http_and_stdio_and_a_block_applies_next_call() {
    let idp = provider();
    let db = TestDb::new();
    let config = config_for(&idp);
    let server = HttpServer::start_with_config(&db, &config, &[]);
    let clerk = idp.client_credentials_token("clerk", "", AUDIENCE);
    let auditor = idp.client_credentials_token("auditor", "", AUDIENCE);
    for _ in 0..3 {
        assert!(call(&server, &clerk, "search_invoices")["result"].is_object());
    }
    assert!(call(&server, &auditor, "search_invoices")["result"].is_object());

    let config_path = db.dir.path().join("tollgate.toml");
    let mut stdio = StdioServer::start_with_token(
        &db,
        Some(&clerk),
        &["--config", config_path.to_str().expect("utf-8")],
    );
    stdio.initialize("2025-06-18");
    let answer = stdio.call_tool("search_invoices", json!({}));
    assert!(answer["result"].is_object(), "{answer}");
    drop(stdio);

    let (clerk_id, auditor_id) = (user_id(&db, "clerk"), user_id(&db, "auditor"));
    assert_ne!(clerk_id, auditor_id);
    let charged = |id: &str| {
        db.sql_i64(&format!(
            "SELECT COALESCE(SUM(count), 0) FROM rate_counters \
             WHERE bucket = 'read' AND key = '{id}'"
        ))
    };
    assert_eq!(charged(&clerk_id), 4, "three HTTP calls and one over stdio");
    assert_eq!(charged(&auditor_id), 1);

    // An override of the user's own: none of its reads are left, the other user's stand.
    let set = db.run(&[
        "limits",
        "set",
        "--user",
        "auditor",
        "--category",
        "read",
        "--per-minute",
        "0",
    ]);
    assert!(set.status.success(), "{set:?}");
    let refused = call(&server, &auditor, "search_invoices");
    assert_eq!(
        refused["error"]["data"]["code"], "rate_limited",
        "{refused}"
    );
    assert!(call(&server, &clerk, "search_invoices")["result"].is_object());

    // Blocked by the operator: refused on the very next call, with the user named.
    let block = db.run(&["users", "block", "clerk"]);
    assert!(block.status.success(), "{block:?}");
    let blocked = call(&server, &clerk, "search_invoices");
    assert_eq!(error_of(&blocked)["code"], -32002, "{blocked}");
    assert_eq!(blocked["error"]["data"]["code"], "user_blocked");
    assert_eq!(blocked["error"]["data"]["details"]["user"], "clerk");
    let auth = format!("Bearer {clerk}");
    let listing = server
        .post_mcp(
            &[
                ("Authorization", auth.as_str()),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/list"),
            ],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                    "params": {"_meta": modern_meta()}}),
        )
        .json();
    assert_eq!(
        listing["error"]["data"]["code"], "user_blocked",
        "{listing}"
    );
    let unblock = db.run(&["users", "unblock", "clerk"]);
    assert!(unblock.status.success(), "{unblock:?}");
    assert!(call(&server, &clerk, "search_invoices")["result"].is_object());
}

#[test]
fn the_metadata_names_the_provider_and_api_keys_work_as_before() {
    let idp = provider();
    let db = TestDb::new();
    let server = HttpServer::start_with_config(&db, &config_for(&idp), &[]);
    let metadata = server
        .get("/.well-known/oauth-protected-resource/mcp")
        .json();
    let servers = metadata["authorization_servers"]
        .as_array()
        .expect("authorization_servers");
    assert_eq!(servers[0], idp.issuer(), "{metadata}");
    assert!(
        metadata["scopes_supported"]
            .as_array()
            .is_some_and(|s| s.contains(&json!("invoices:read")))
    );
    let unauthenticated = server.post_mcp(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                "params": {"_meta": modern_meta()}}),
    );
    let challenge = unauthenticated
        .header("www-authenticate")
        .expect("a challenge");
    assert!(challenge.contains("resource_metadata="), "{challenge}");

    let admin = db.admin_key.clone().expect("admin key");
    assert!(call(&server, &admin, "search_invoices")["result"].is_object());
}

#[test]
fn a_policy_rule_naming_a_role_covers_the_tokens_that_carry_it_and_no_other() {
    let idp = provider();
    let db = TestDb::new();
    let config = format!(
        "{}\n[[policy.rules]]\nname = \"readers_do_not_list_clients\"\n\
         tools = [\"search_clients\"]\nwho = {{ roles = [\"invoice-readers\"] }}\n\
         condition = \"'invoice-readers' in caller.roles\"\neffect = \"deny\"\n",
        config_for(&idp)
    );
    let server = HttpServer::start_with_config(&db, &config, &[]);
    let clerk = idp.client_credentials_token("clerk", "clients:read", AUDIENCE);
    let refused = call(&server, &clerk, "search_clients");
    assert_eq!(error_of(&refused)["code"], -32009, "{refused}");
    assert_eq!(refused["error"]["data"]["code"], "policy_denied");
    assert_eq!(
        refused["error"]["data"]["rule_id"],
        "readers_do_not_list_clients"
    );
    // The same scope without the role: the rule does not cover it.
    let robot = idp.opaque_token("robot", "clients:read", AUDIENCE);
    let answer = call(&server, &robot, "search_clients");
    assert!(answer["result"].is_object(), "{answer}");
}
