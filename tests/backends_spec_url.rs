//! An OpenAPI backend whose `spec` is a URL: the document fetched at start from a server
//! the test runs on 127.0.0.1 (its tools listed and called), a document past the size cap
//! refused naming the cap, the last good copy opening the backend when the document server
//! is gone (with a warning naming the URL), and plain http:// to another machine refused
//! when the configuration is read.

use std::process::Output;

use serde_json::{Value, json};

use crate::util::{HttpServer, RestBackend, TestDb};

/// One read operation, `getThing` at GET /things/{id}.
fn document() -> Vec<u8> {
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Things", "version": "1"},
        "paths": {"/things/{id}": {"get": {
            "operationId": "getThing",
            "summary": "Read a thing.",
            "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"type": "object"}}}}}
        }}}
    })
    .to_string()
    .into_bytes()
}

/// Serves `body` at /openapi.json (404 elsewhere).
fn document_server(body: Vec<u8>) -> RestBackend {
    RestBackend::start(move |req| match req.target.as_str() {
        "/openapi.json" => (200, vec![], body.clone()),
        _ => (404, vec![], b"{}".to_vec()),
    })
}

/// The API itself: every thing exists.
fn api() -> RestBackend {
    RestBackend::start(|req| {
        let id = req.target.trim_start_matches("/things/");
        (200, vec![], json!({"id": id}).to_string().into_bytes())
    })
}

/// Writes the configuration of backend `things` (document at `spec`, API at `base_url`)
/// beside `db`; its path.
fn config(db: &TestDb, spec: &str, base_url: &str) -> String {
    let path = db.dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        format!(
            "[[backends]]\nname = \"things\"\nkind = \"openapi\"\nspec = \"{spec}\"\nbase_url = \"{base_url}\"\n"
        ),
    )
    .expect("write config");
    path.to_str().expect("utf-8").to_owned()
}

/// `tollgate <args>` in the database's scratch directory (where the last good copies are
/// kept whichever store the suite runs on).
fn run_in_scratch_dir(db: &TestDb, args: &[&str]) -> Output {
    db.command(args)
        .current_dir(db.dir.path())
        .output()
        .expect("run tollgate")
}

fn tool_names(server: &HttpServer, token: &str) -> Vec<String> {
    server
        .modern_tools_list(token)
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|name| name.starts_with("things_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_document_at_a_loopback_url_opens_the_backend_and_its_tools_are_called() {
    let db = TestDb::new();
    let (documents, api) = (document_server(document()), api());
    let url = format!("{}/openapi.json", documents.url());
    let path = config(&db, &url, &api.url());
    let server = HttpServer::start_in_scratch_dir(&db, &["--config", &path], &[]);
    let admin = db.admin_key.clone().expect("admin key");
    assert_eq!(tool_names(&server, &admin), ["things_get_thing"]);
    let reply = server
        .modern_tool_call(&admin, "things_get_thing", &json!({"id": "t-7"}))
        .json();
    assert_eq!(reply["result"]["isError"], json!(false), "{reply}");
    assert_eq!(reply["result"]["structuredContent"], json!({"id": "t-7"}));
    let fetched = documents.received();
    assert_eq!(fetched.len(), 1, "fetched once, at start");
    assert_eq!(fetched[0].method, "GET");
    let copies: Vec<_> = std::fs::read_dir(db.dir.path().join("backend-documents"))
        .expect("the copies' directory")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert!(
        copies.len() == 1 && copies[0].starts_with("things-") && copies[0].ends_with(".json"),
        "{copies:?}"
    );
}

#[test]
fn a_document_past_the_size_cap_is_refused_naming_the_cap() {
    let db = TestDb::new();
    let documents = document_server(vec![b' '; 8 * 1024 * 1024 + 1]);
    let url = format!("{}/openapi.json", documents.url());
    let path = config(&db, &url, "http://127.0.0.1:9");
    let expected = format!(
        "backend things: cannot fetch the OpenAPI document at {url}: the document is larger than \
         8 MiB (8388608 bytes), the most tollgate fetches; save it to a file and name the file in \
         `spec`"
    );
    let out = run_in_scratch_dir(&db, &["--config", &path, "backends", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("problem: {expected}")), "{stderr}");
    let out = run_in_scratch_dir(
        &db,
        &["--config", &path, "serve", "--listen", "127.0.0.1:0"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&expected), "{stderr}");
}

#[test]
fn with_the_document_server_gone_the_last_good_copy_opens_the_backend() {
    let db = TestDb::new();
    let (documents, api) = (document_server(document()), api());
    let addr = documents.addr;
    let url = format!("{}/openapi.json", documents.url());
    let path = config(&db, &url, &api.url());
    let admin = db.admin_key.clone().expect("admin key");
    let mut first = HttpServer::start_in_scratch_dir(&db, &["--config", &path], &[]);
    assert_eq!(tool_names(&first, &admin), ["things_get_thing"]);
    first.terminate();
    drop(documents);
    // The listener closes once its thread sees the stop flag.
    while std::net::TcpStream::connect(addr).is_ok() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let warning = format!(
        "cannot fetch the OpenAPI document at {url}: connection refused; the backend opened \
         from its last good copy, fetched "
    );
    let second = HttpServer::start_in_scratch_dir(&db, &["--config", &path], &[]);
    assert_eq!(tool_names(&second, &admin), ["things_get_thing"]);
    let reply = second
        .modern_tool_call(&admin, "things_get_thing", &json!({"id": "t-8"}))
        .json();
    assert_eq!(reply["result"]["structuredContent"], json!({"id": "t-8"}));
    let log = second.log_once_it_contains(&warning);
    let line = log
        .lines()
        .find(|l| l.contains(&warning))
        .unwrap_or_else(|| panic!("no warning in the log: {log}"));
    assert!(line.contains("WARN") && line.contains("things"), "{line}");
    let out = run_in_scratch_dir(&db, &["--config", &path, "backends", "check", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["problems"], json!([]));
    let warnings = report["warnings"].as_array().expect("warnings");
    assert!(
        warnings.len() == 1
            && warnings[0]
                .as_str()
                .is_some_and(|w| w.starts_with(&format!("backend things: {warning}"))),
        "{warnings:?}"
    );
    assert_eq!(report["backends"][0]["state"], "ready");
}

#[test]
fn plain_http_to_another_machine_is_refused_when_the_configuration_is_read() {
    let db = TestDb::new();
    let path = config(
        &db,
        "http://erp.internal:8080/openapi.json",
        "http://127.0.0.1:9",
    );
    for command in [&["check-config"][..], &["backends", "check"], &["serve"]] {
        let mut args = vec!["--config", path.as_str()];
        args.extend_from_slice(command);
        let out = run_in_scratch_dir(&db, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains(
                "backends[0] (things): `spec` http://erp.internal:8080/openapi.json: plain http:// \
                 is accepted only to this machine (127.0.0.1, ::1, localhost), because whoever can \
                 change the document on its way decides which operations tollgate offers and where \
                 their arguments and the backend's credential go; serve the document over \
                 https://, or save it to a file and name the file in `spec`"
            ),
            "{command:?}: {stderr}"
        );
    }
}
