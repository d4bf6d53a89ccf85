//! Handshake-era sessions behind a load balancer without stickiness: two `tollgate serve`
//! nodes on one database, a session opened on one and used on the other.
//!
//! Both nodes on one SQLite file already share sessions only through the store (neither
//! sees the other's memory). When `TOLLGATE_TEST_POSTGRES` names a PostgreSQL server (a URL
//! without a database), the harness gives the test a fresh database there instead, dropped
//! afterwards, and the same runs on PostgreSQL.

use serde_json::{Value, json};

use crate::util::{HttpResponse, HttpServer, TestDb, assert_error, http_request};

const VERSION: &str = "2025-11-25";

/// A handshake-era POST naming session `sid`, as `token`.
fn post(node: &HttpServer, sid: &str, token: &str, body: &Value) -> HttpResponse {
    let auth = format!("Bearer {token}");
    node.post_mcp(
        &[
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", sid),
            ("MCP-Protocol-Version", VERSION),
        ],
        body,
    )
}

/// `DELETE /mcp` of session `sid`, as `token`.
fn delete(node: &HttpServer, sid: &str, token: &str) -> HttpResponse {
    let auth = format!("Bearer {token}");
    http_request(
        node.addr,
        "DELETE",
        "/mcp",
        &[("Authorization", auth.as_str()), ("Mcp-Session-Id", sid)],
        b"",
    )
}

fn tools_list(id: i64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

fn assert_session_not_found(response: &HttpResponse, id: i64) {
    assert_eq!(
        response.status,
        404,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let body = response.json();
    assert_error(&body, -32600, "session_not_found", 404, 1015, false);
    assert_eq!(body["id"], json!(id), "{body}");
}

/// Opens a session on node A and uses, probes and ends it on node B.
fn a_session_opened_on_one_node_is_served_by_the_other(db: &TestDb) {
    let admin = db.admin_key.clone().expect("admin key");
    let other = db.create_key("other", "invoices:read", &[]);
    let a = HttpServer::start(db, &[]);
    let b = HttpServer::start(db, &[]);
    let sid = a.open_session(VERSION, &admin);

    let list = post(&b, &sid, &admin, &tools_list(2));
    assert_eq!(list.status, 200, "{}", String::from_utf8_lossy(&list.body));
    let tools = list.json()["result"]["tools"].clone();
    assert!(
        tools
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "search_invoices")),
        "{tools}"
    );
    let call = post(
        &b,
        &sid,
        &admin,
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "search_invoices", "arguments": {}}}),
    );
    assert_eq!(call.status, 200, "{}", String::from_utf8_lossy(&call.body));
    let result = &call.json()["result"];
    assert_eq!(result["isError"], json!(false), "{result}");
    assert_eq!(result["structuredContent"]["data"], json!([]), "{result}");

    // Another credential on B gets exactly what an unknown id gets, on either node.
    let stranger = post(&b, &sid, &other.token, &tools_list(4));
    assert_session_not_found(&stranger, 4);
    let unknown = post(&b, &"0".repeat(32), &other.token, &tools_list(4));
    assert_eq!(stranger.json(), unknown.json());
    let stranger_delete = delete(&b, &sid, &other.token);
    assert_eq!(stranger_delete.status, 404);
    assert_eq!(
        stranger_delete.json(),
        delete(&a, &"0".repeat(32), &other.token).json()
    );
    // The session survived the stranger's attempts.
    assert_eq!(post(&a, &sid, &admin, &tools_list(5)).status, 200);

    // Ended on B, it is gone on A, which opened it and held it.
    let ended = delete(&b, &sid, &admin);
    assert_eq!(ended.status, 204);
    assert!(ended.body.is_empty());
    assert_session_not_found(&post(&a, &sid, &admin, &tools_list(6)), 6);
    assert_session_not_found(&post(&b, &sid, &admin, &tools_list(7)), 7);
    assert_eq!(delete(&a, &sid, &admin).status, 404);
}

#[test]
fn two_nodes_on_one_database_share_handshake_sessions() {
    let db = TestDb::new();
    a_session_opened_on_one_node_is_served_by_the_other(&db);
}
