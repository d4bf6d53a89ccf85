//! The operator's side of backends: mistakes in `[[backends]]` refused before anything
//! starts, `tollgate backends check` reporting each tool or each problem, and a server
//! that refuses to start on a name clash instead of shadowing a tool.

use serde_json::{Value, json};

use crate::util::{RestBackend, TestDb};

fn write(db: &TestDb, name: &str, text: &str) -> String {
    let path = db.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_owned()
}

/// A one-operation document whose operation is `operation_id` at GET /thing.
fn document(operation_id: &str) -> String {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "T", "version": "1"},
        "paths": {"/thing": {"get": {"operationId": operation_id, "summary": "Read the thing.",
            "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}}}}
    })
    .to_string()
}

#[test]
fn a_mistake_in_a_backend_entry_is_refused_with_what_to_fix() {
    let db = TestDb::new();
    let cases = [
        (
            "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"x.json\"\nauth = { header = \"X-Key\", value = \"inline-secret\" }\n",
            "unknown field `value`",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"grpc\"\n",
            "`kind` \"grpc\" is not one of openapi, mcp",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"mcp\"\n",
            "`command` (stdio) or `url` (Streamable HTTP) is required",
        ),
        (
            "[[backends]]\nname = \"crm\"\nkind = \"mcp\"\ncommand = \"x\"\n[backends.tools.other_tool]\nenabled = false\n",
            "starts with `crm_`",
        ),
    ];
    for (text, expected) in cases {
        let config = write(&db, "bad.toml", text);
        let out = db.run(&["--config", &config, "check-config"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
        assert!(!stderr.contains("inline-secret"), "{stderr}");
    }
}

#[test]
fn backends_check_lists_each_tool_with_its_category_scope_and_idempotency() {
    let db = TestDb::new();
    let backend = RestBackend::start(|_| (200, vec![], b"{}".to_vec()));
    write(&db, "t.json", &document("getThing"));
    let config = write(
        &db,
        "t.toml",
        &format!(
            "[[backends]]\nname = \"inv\"\nkind = \"openapi\"\nspec = \"t.json\"\nbase_url = \"{}\"\n[backends.tools.inv_get_thing]\nscope = \"inv:things\"\n",
            backend.url()
        ),
    );
    let out = db.run(&["--config", &config, "backends", "check", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["problems"], json!([]));
    assert_eq!(
        report["backends"][0]["tools"],
        json!([{"name": "inv_get_thing", "category": "read", "scope": "inv:things", "idempotency": "none"}])
    );
    assert!(backend.received().is_empty(), "checking calls no operation");
}

#[test]
fn a_tool_named_like_a_built_in_one_fails_the_check_and_the_start() {
    let db = TestDb::new();
    let backend = RestBackend::start(|_| (200, vec![], b"{}".to_vec()));
    // Backend `create` with operation `client`: `create_client` is a built-in tool.
    write(&db, "t.json", &document("client"));
    let config = write(
        &db,
        "t.toml",
        &format!(
            "[[backends]]\nname = \"create\"\nkind = \"openapi\"\nspec = \"t.json\"\nbase_url = \"{}\"\n[backends.tools.create_nothing]\nenabled = false\n",
            backend.url()
        ),
    );
    let out = db.run(&["--config", &config, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "problem: backend create: the tool create_client is already named by the built-in tools"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("the override [backends.tools.create_nothing] names no tool"),
        "{stderr}"
    );
    let out = db.run(&["--config", &config, "serve", "--listen", "127.0.0.1:0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("create_client"), "{stderr}");
}

#[test]
fn a_backend_that_cannot_be_opened_is_a_problem_and_the_server_does_not_start() {
    let db = TestDb::new();
    let config = write(
        &db,
        "t.toml",
        "[[backends]]\nname = \"crm\"\nkind = \"openapi\"\nspec = \"missing.json\"\nbase_url = \"http://127.0.0.1:9\"\n",
    );
    let out = db.run(&["--config", &config, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("problem: backend crm:"), "{stderr}");
    let out = db.run(&["--config", &config, "serve", "--listen", "127.0.0.1:0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend crm"));
}
