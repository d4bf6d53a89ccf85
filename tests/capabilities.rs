//! What the server announces is what it does: without a resource that can change there is
//! no `resources.subscribe` and `resources/subscribe` is an unknown method, and without a
//! tool that logs no `logging` and no `logging/setLevel`; with the
//! conformance fixtures (whose `test://watched-resource` a tool changes) a subscribed
//! session is sent `notifications/resources/updated`, over stdio and over HTTP. A build
//! without the `conformance-pack` feature refuses `--conformance-pack` in every form.

use serde_json::{Value, json};

use crate::util::{StdioServer, TestDb, assert_error, modern_meta};

/// `resources/subscribe` and `resources/unsubscribe` on `uri`, as `params`.
fn subscription_requests(uri: &str) -> [(&'static str, Value); 2] {
    [
        ("resources/subscribe", json!({ "uri": uri })),
        ("resources/unsubscribe", json!({ "uri": uri })),
    ]
}

#[test]
fn without_a_tool_that_logs_logging_is_neither_announced_nor_answered() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &[]);
    let result = server.initialize("2025-11-25");
    assert_eq!(result["capabilities"].get("logging"), None, "{result}");
    let response = server.request("logging/setLevel", json!({"level": "debug"}));
    assert_error(&response, -32601, "method_not_found", 404, 1003, false);
    assert_eq!(
        response["error"]["data"]["details"]["method"],
        json!("logging/setLevel"),
        "{response}"
    );
    let discover = server.request("server/discover", json!({ "_meta": modern_meta() }));
    assert_eq!(
        discover["result"]["capabilities"].get("logging"),
        None,
        "{discover}"
    );
}

#[test]
fn without_a_changing_resource_subscribe_is_neither_announced_nor_answered() {
    let db = TestDb::new();
    let mut server = StdioServer::start(&db, &[]);
    let result = server.initialize("2025-11-25");
    let caps = &result["capabilities"];
    assert_eq!(caps["resources"], json!({"listChanged": false}), "{result}");
    let guide = server.request("resources/list", json!({}))["result"]["resources"][0]["uri"]
        .as_str()
        .expect("the built-in guides are listed")
        .to_owned();
    for (method, params) in subscription_requests(&guide) {
        let response = server.request(method, params);
        assert_error(&response, -32601, "method_not_found", 404, 1003, false);
        assert_eq!(
            response["error"]["data"]["details"]["method"],
            json!(method),
            "{response}"
        );
    }
    let discover = server.request("server/discover", json!({ "_meta": modern_meta() }));
    assert_eq!(
        discover["result"]["capabilities"]["resources"],
        json!({"listChanged": false}),
        "{discover}"
    );
}

/// The three ways to ask for the pack, each refused by a build without it (exit 2, and a
/// message naming the feature), before anything is served.
#[cfg(not(feature = "conformance-pack"))]
#[test]
fn a_build_without_the_fixtures_refuses_every_way_to_ask_for_them() {
    let db = TestDb::new();
    let config = db.dir.path().join("pack.toml");
    std::fs::write(&config, "[tools]\nconformance_pack = true\n").expect("write config");
    let config = config.to_str().expect("utf-8 path").to_owned();
    // The arguments, and an environment variable to set.
    type Ask<'a> = (Vec<&'a str>, Option<(&'a str, &'a str)>);
    let asks: [Ask<'_>; 5] = [
        (vec!["stdio", "--conformance-pack"], None),
        (
            vec!["serve", "--conformance-pack", "--listen", "127.0.0.1:9"],
            None,
        ),
        (vec!["stdio"], Some(("TOLLGATE_CONFORMANCE_PACK", "true"))),
        (vec!["--config", config.as_str(), "stdio"], None),
        (vec!["--config", config.as_str(), "check-config"], None),
    ];
    for (args, env) in asks {
        let mut command = db.command(&args);
        if let Some((name, value)) = env {
            command.env(name, value);
        }
        let out = command
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tollgate");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("this build of tollgate does not carry it")
                && stderr.contains("--features conformance-pack"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing is served");
    }
}

#[cfg(feature = "conformance-pack")]
mod with_the_pack {
    use serde_json::{Value, json};

    use super::subscription_requests;
    use crate::util::{HttpServer, StdioServer, TestDb, assert_error, modern_meta};

    const WATCHED: &str = "test://watched-resource";

    fn updated(uri: &str) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": uri}})
    }

    fn watched_text(server: &mut StdioServer) -> String {
        let read = server.request("resources/read", json!({ "uri": WATCHED }));
        read["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{read}"))
            .to_owned()
    }

    #[test]
    fn the_fixtures_that_log_bring_the_logging_capability_on_both_eras() {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &["--conformance-pack"]);
        let result = server.initialize("2025-11-25");
        assert_eq!(result["capabilities"]["logging"], json!({}), "{result}");
        let set = server.request("logging/setLevel", json!({"level": "warning"}));
        assert_eq!(set["result"], json!({}), "{set}");
        let discover = server.request("server/discover", json!({ "_meta": modern_meta() }));
        assert_eq!(
            discover["result"]["capabilities"]["logging"],
            json!({}),
            "{discover}"
        );
    }

    #[test]
    fn subscribe_is_announced_on_the_handshake_era_only() {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &["--conformance-pack"]);
        let result = server.initialize("2025-11-25");
        assert_eq!(
            result["capabilities"]["resources"],
            json!({"subscribe": true, "listChanged": false}),
            "{result}"
        );
        let discover = server.request("server/discover", json!({ "_meta": modern_meta() }));
        assert_eq!(
            discover["result"]["capabilities"]["resources"],
            json!({"listChanged": false}),
            "{discover}"
        );
    }

    #[test]
    fn a_subscribed_stdio_session_is_told_of_each_change_until_it_unsubscribes() {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &["--conformance-pack"]);
        server.initialize("2025-11-25");
        let before = watched_text(&mut server);

        let subscribed = server.request("resources/subscribe", json!({ "uri": WATCHED }));
        assert_eq!(subscribed["result"], json!({}), "{subscribed}");
        let call = server.call_tool("test_update_watched_resource", json!({}));
        assert_eq!(call["result"]["isError"], json!(false), "{call}");
        assert_eq!(server.notifications, vec![updated(WATCHED)]);
        let after = watched_text(&mut server);
        assert_ne!(before, after);
        assert!(
            after.starts_with("Watched resource content (revision "),
            "{after}"
        );

        server.notifications.clear();
        let unsubscribed = server.request("resources/unsubscribe", json!({ "uri": WATCHED }));
        assert_eq!(unsubscribed["result"], json!({}), "{unsubscribed}");
        server.call_tool("test_update_watched_resource", json!({}));
        server.request("ping", json!({}));
        assert!(
            server.notifications.is_empty(),
            "{:?}",
            server.notifications
        );
    }

    #[test]
    fn subscriptions_to_static_and_unknown_resources() {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &["--conformance-pack"]);
        server.initialize("2025-11-25");
        // A resource that never changes may be subscribed to; it is never updated.
        for (method, params) in subscription_requests("test://static-text") {
            assert_eq!(server.request(method, params)["result"], json!({}));
        }
        let unknown = server.request("resources/subscribe", json!({ "uri": "test://nope" }));
        assert_error(&unknown, -32602, "resource_not_found", 404, 1007, false);
        assert_eq!(
            unknown["error"]["data"]["uri"],
            json!("test://nope"),
            "{unknown}"
        );
        let missing = server.request("resources/subscribe", json!({}));
        assert_error(&missing, -32602, "invalid_params", 400, 1004, false);
    }

    /// The messages of one request on session `sid`: the SSE events, or the one JSON body.
    fn exchange(
        server: &HttpServer,
        auth: &str,
        sid: &str,
        id: u64,
        method: &str,
        params: Value,
    ) -> Vec<Value> {
        let reply = server.post_mcp(
            &[
                ("Authorization", auth),
                ("Mcp-Session-Id", sid),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        if reply
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"))
        {
            reply.sse_messages()
        } else {
            vec![reply.json()]
        }
    }

    #[test]
    fn an_http_session_learns_of_a_change_made_by_another_on_its_next_request() {
        let db = TestDb::new();
        let server = HttpServer::start(&db, &["--conformance-pack"]);
        let auth = format!("Bearer {}", db.admin_key.as_deref().expect("admin key"));
        let token = db.admin_key.as_deref().expect("admin key");
        let (changer, watcher, bystander) = (
            server.open_session("2025-11-25", token),
            server.open_session("2025-11-25", token),
            server.open_session("2025-11-25", token),
        );
        let subscribed = exchange(
            &server,
            &auth,
            &watcher,
            2,
            "resources/subscribe",
            json!({ "uri": WATCHED }),
        );
        assert_eq!(
            subscribed,
            vec![json!({"jsonrpc": "2.0", "id": 2, "result": {}})]
        );

        let call = exchange(
            &server,
            &auth,
            &changer,
            3,
            "tools/call",
            json!({"name": "test_update_watched_resource", "arguments": {}}),
        );
        assert_eq!(call.len(), 1, "the changer is not subscribed: {call:?}");
        assert_eq!(call[0]["id"], json!(3), "{call:?}");

        let pong = exchange(&server, &auth, &bystander, 4, "ping", json!({}));
        assert_eq!(pong, vec![json!({"jsonrpc": "2.0", "id": 4, "result": {}})]);

        let next = exchange(&server, &auth, &watcher, 5, "ping", json!({}));
        assert_eq!(
            next,
            vec![
                updated(WATCHED),
                json!({"jsonrpc": "2.0", "id": 5, "result": {}})
            ],
            "the update comes first, once"
        );
        let again = exchange(&server, &auth, &watcher, 6, "ping", json!({}));
        assert_eq!(
            again,
            vec![json!({"jsonrpc": "2.0", "id": 6, "result": {}})]
        );
    }

    #[test]
    fn the_stateless_era_has_no_subscriptions() {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &["--conformance-pack"]);
        for (method, mut params) in subscription_requests(WATCHED) {
            params["_meta"] = modern_meta();
            let response = server.request(method, params);
            assert_error(&response, -32601, "method_not_found", 404, 1003, false);
        }
    }
}
