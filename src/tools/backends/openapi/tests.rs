//! The OpenAPI backend against documents written here and a REST backend served by the
//! test on 127.0.0.1 (a few lines of `std::net::TcpListener`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::thread;

use serde_json::json;

use super::*;
use crate::config::{DEFAULT_ERROR_ID_POINTERS, DEFAULT_ERROR_MESSAGE_POINTERS};
use crate::telemetry::TraceFields;
use crate::tools::Category;

const PETS: &str = r##"
openapi: 3.0.3
info: {title: Pets, version: "1"}
servers: [{url: "http://127.0.0.1:{port}/v1", variables: {port: {default: "9"}}}]
paths:
  /pets/{petId}:
    parameters:
      - {name: petId, in: path, required: true, schema: {type: integer}}
    get:
      operationId: getPetById
      summary: Find a pet by id
      parameters:
        - {name: X-Trace, in: header, schema: {type: string}}
        - {name: X-Api-Key, in: header, schema: {type: string}}
      responses:
        "200": {description: ok, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
    delete:
      operationId: deletePet
      responses: {"204": {description: gone}}
  /pets:
    get:
      operationId: findPetsByStatus
      parameters:
        - {name: status, in: query, schema: {type: array, items: {type: string}}}
      responses:
        "200": {description: ok, content: {application/json: {schema: {type: array, items: {$ref: "#/components/schemas/Pet"}}}}}
    post:
      operationId: addPet
      requestBody:
        required: true
        content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}
      responses:
        "201": {description: made, content: {application/json: {schema: {$ref: "#/components/schemas/Pet"}}}}
  /tags:
    put:
      operationId: replace-tags
      requestBody:
        content: {application/json: {schema: {type: array, items: {type: string}}}}
      responses: {"200": {description: ok}}
components:
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        id: {type: integer, format: int64}
        name: {type: string}
        tag: {type: string, nullable: true}
        category: {$ref: "#/components/schemas/Category"}
    Category:
      type: object
      properties: {name: {type: string}}
"##;

fn runtime() -> tokio::runtime::Runtime {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

fn env(runtime: &tokio::runtime::Runtime) -> BackendEnv {
    BackendEnv {
        strict: true,
        runtime: runtime.handle().clone(),
        changed: Arc::new(|_| {}),
        // Every document here is a file: no copy is read or written.
        copies: Copies::beside(Path::new("/nonexistent"), false),
        clock: crate::clock::Clock::System,
        store: None,
    }
}

fn config(spec: &Path, base_url: Option<String>, auth: Option<BackendAuth>) -> BackendConfig {
    BackendConfig {
        name: "shop".into(),
        kind: BackendKind::OpenApi(OpenApiBackend {
            spec: SpecSource::File(spec.to_owned()),
            base_url,
            auth,
            max_response_bytes: 2048,
            error_id_pointers: DEFAULT_ERROR_ID_POINTERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            error_message_pointers: DEFAULT_ERROR_MESSAGE_POINTERS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }),
        timeout: Duration::from_millis(500),
        limits: crate::config::BackendLimits::default(),
        tools: Default::default(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

fn open_problem(doc: &str) -> String {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("dir");
    let spec = write(dir.path(), "doc.yaml", doc);
    match open(&config(&spec, None, None), &env(&rt)) {
        Ok(_) => panic!("opened"),
        Err(problem) => problem.message,
    }
}

#[test]
fn every_operation_becomes_a_tool_with_its_schemas() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("dir");
    let spec = write(dir.path(), "pets.yaml", PETS);
    let key = write(dir.path(), "key", "k-123\n");
    let auth = BackendAuth::Header {
        name: "X-Api-Key".into(),
        value_file: key,
    };
    let backend = open(&config(&spec, None, Some(auth)), &env(&rt)).expect("open");
    assert_eq!(backend.health(), Health::Ready);
    let ops = backend.operations();
    let names: Vec<(&str, Category)> = ops.iter().map(|o| (o.name.as_str(), o.category)).collect();
    assert_eq!(
        names,
        [
            ("get_pet_by_id", Category::Read),
            ("delete_pet", Category::Destructive),
            ("find_pets_by_status", Category::Read),
            ("add_pet", Category::Write),
            ("replace_tags", Category::Write),
        ]
    );
    let get = &ops[0];
    assert_eq!(get.title.as_deref(), Some("Find a pet by id"));
    assert_eq!(get.input_schema["required"], json!(["petId"]));
    let props = get.input_schema["properties"].as_object().expect("props");
    assert!(props.contains_key("X-Trace"));
    assert!(
        !props.contains_key("X-Api-Key"),
        "the credential header is never an argument"
    );
    let output = get.output_schema.as_ref().expect("object output");
    assert_eq!(output["type"], "object");
    assert_eq!(
        output["properties"]["tag"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(output["properties"]["category"]["$ref"], "#/$defs/Category");
    assert!(jsonschema::validator_for(output).is_ok());
    assert_eq!(ops[1].description, "DELETE /pets/{petId}");
    assert_eq!(
        ops[2].output_schema, None,
        "an array answer declares no output schema"
    );
    let add = &ops[3];
    assert_eq!(add.input_schema["required"], json!(["name"]));
    assert_eq!(
        add.input_schema["properties"]["category"]["$ref"],
        "#/$defs/Category"
    );
    let validator = jsonschema::validator_for(&add.input_schema).expect("compiles");
    assert!(validator.is_valid(&json!({"name": "Rex", "category": {"name": "dogs"}})));
    assert!(!validator.is_valid(&json!({"category": {"name": "dogs"}})));
    assert_eq!(ops[4].input_schema["properties"]["body"]["type"], "array");
}

#[test]
fn what_the_document_gets_wrong_is_named_for_the_operator() {
    let base = "openapi: 3.1.0\ninfo: {title: t, version: '1'}\nservers: [{url: 'http://h'}]\n";
    let no_id = format!("{base}paths:\n  /pets/{{id}}:\n    get:\n      responses: {{}}\n");
    assert_eq!(
        open_problem(&no_id),
        "operation GET /pets/{id} has no operationId; add one to the document"
    );
    let twice = format!(
        "{base}paths:\n  /a:\n    get: {{operationId: listPets, responses: {{}}}}\n  /b:\n    get: {{operationId: list_pets, responses: {{}}}}\n"
    );
    assert!(open_problem(&twice).contains("another operation is also named list_pets"));
    let dangling = format!(
        "{base}paths:\n  /a:\n    post:\n      operationId: make\n      requestBody: {{content: {{application/json: {{schema: {{$ref: '#/components/schemas/Gone'}}}}}}}}\n      responses: {{}}\n"
    );
    let problem = open_problem(&dangling);
    assert!(
        problem.contains("POST /a (make)") && problem.contains("names no schema"),
        "{problem}"
    );
    let relative =
        "openapi: 3.1.0\ninfo: {title: t, version: '1'}\nservers: [{url: '/api'}]\npaths: {}\n";
    assert!(open_problem(relative).contains("is relative; set base_url"));
    assert!(open_problem("swagger: '2.0'\n").contains("is not an OpenAPI 3.0 or 3.1 document"));
}

#[test]
fn a_missing_credential_file_is_a_problem() {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("dir");
    let spec = write(dir.path(), "pets.yaml", PETS);
    let auth = BackendAuth::Bearer {
        token_file: dir.path().join("absent"),
    };
    let err = OpenApi::open(&config(&spec, None, Some(auth)), &env(&rt)).expect_err("problem");
    assert!(
        err.message.contains("cannot read the secret file"),
        "{}",
        err.message
    );
}

/// What the test server does with one connection.
enum Reply {
    /// Answers this raw response.
    Raw(String),
    /// Closes the connection without answering.
    Drop,
    /// Keeps the connection open and never answers (until the client goes).
    Hold,
}

/// Serves one connection with `reply`; sends the raw request it read back.
fn serve_once(reply: Reply) -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let request = read_request(&stream);
        let _ = tx.send(request);
        let mut stream = stream;
        match reply {
            Reply::Raw(text) => {
                let _ = stream.write_all(text.as_bytes());
            }
            Reply::Drop => {}
            Reply::Hold => {
                let mut sink = Vec::new();
                let _ = stream.read_to_end(&mut sink);
            }
        }
    });
    (port, rx)
}

fn read_request(stream: &TcpStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
    head + &String::from_utf8_lossy(&body)
}

fn respond(status: &str, headers: &str, body: &str) -> Reply {
    Reply::Raw(format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n{headers}\r\n{body}",
        body.len()
    ))
}

struct Harness {
    _rt: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
    backend: OpenApi,
}

impl Harness {
    fn on(port: u16) -> Harness {
        let rt = runtime();
        let dir = tempfile::tempdir().expect("dir");
        let spec = write(dir.path(), "pets.yaml", PETS);
        let key = write(dir.path(), "key", "k-123\n");
        let auth = BackendAuth::Header {
            name: "X-Api-Key".into(),
            value_file: key,
        };
        let base = Some(format!("http://127.0.0.1:{port}/v1"));
        let backend = OpenApi::open(&config(&spec, base, Some(auth)), &env(&rt)).expect("open");
        Harness {
            _rt: rt,
            _dir: dir,
            backend,
        }
    }

    fn call(
        &self,
        op: &str,
        args: Value,
        key: Option<&str>,
        cancelled: bool,
    ) -> Result<ToolOutput, McpError> {
        let Value::Object(args) = args else {
            panic!("object")
        };
        let call = Invocation {
            idempotency_key: key,
            timeout: Duration::from_millis(300),
            trace: &TraceFields::default(),
        };
        self.backend.invoke(op, &args, call, &|| cancelled, 0)
    }
}

fn details(err: &McpError) -> &Value {
    &err.fields()["details"]
}

#[test]
fn a_get_sends_the_credential_and_no_key_and_its_object_is_structured() {
    let (port, seen) = serve_once(respond(
        "200 OK",
        "content-type: application/json\r\n",
        r#"{"id":7,"name":"Rex"}"#,
    ));
    let h = Harness::on(port);
    let out = h
        .call(
            "get_pet_by_id",
            json!({"petId": 7, "X-Trace": "t1"}),
            Some("key-9"),
            false,
        )
        .expect("ok");
    assert_eq!(out.structured, Some(json!({"id": 7, "name": "Rex"})));
    let request = seen.recv().expect("request").to_ascii_lowercase();
    assert!(
        request.starts_with("get /v1/pets/7 http/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("x-api-key: k-123\r\n"));
    assert!(request.contains("x-trace: t1\r\n"));
    assert!(!request.contains("idempotency-key"));
}

#[test]
fn a_post_forwards_the_idempotency_key_and_its_json_body() {
    let (port, seen) = serve_once(respond(
        "201 Created",
        "content-type: application/json\r\n",
        r#"{"id":1,"name":"Rex"}"#,
    ));
    let h = Harness::on(port);
    h.call("add_pet", json!({"name": "Rex"}), Some("key-9"), false)
        .expect("ok");
    let request = seen.recv().expect("request");
    assert!(
        request.starts_with("POST /v1/pets HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains("idempotency-key: key-9\r\n")
    );
    assert!(request.ends_with("\r\n\r\n{\"name\":\"Rex\"}"), "{request}");
}

#[test]
fn an_error_answer_keeps_the_backends_own_id_and_message() {
    let (port, _seen) = serve_once(respond(
        "409 Conflict",
        "content-type: application/json\r\n",
        r#"{"error":{"code":"PET_EXISTS","message":"a pet with this name exists"}}"#,
    ));
    let h = Harness::on(port);
    let err = h
        .call("add_pet", json!({"name": "Rex"}), None, false)
        .expect_err("409");
    assert_eq!(err.kind(), ErrorKind::BackendConflict);
    assert_eq!(
        details(&err),
        &json!({"backend": "shop", "status": 409, "original_error": "PET_EXISTS",
                "message": "a pet with this name exists"})
    );
}

#[test]
fn a_204_is_a_short_text_result() {
    let (port, seen) = serve_once(respond("204 No Content", "", ""));
    let h = Harness::on(port);
    let out = h
        .call("delete_pet", json!({"petId": 3}), Some("k"), false)
        .expect("ok");
    assert_eq!(out.content[0]["text"], "204 No Content");
    assert!(
        seen.recv()
            .expect("request")
            .starts_with("DELETE /v1/pets/3 ")
    );
}

#[test]
fn a_refused_connection_is_backend_unavailable_and_the_health_says_so() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::ToolBackendUnavailable);
    assert_eq!(
        details(&err),
        &json!({"backend": "shop", "reason": "connection refused"})
    );
    assert_eq!(
        h.backend.health(),
        Health::Down("connection refused".into())
    );
}

#[test]
fn a_connection_dropped_before_the_answer_is_backend_unavailable() {
    let (port, _seen) = serve_once(Reply::Drop);
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("dropped");
    assert_eq!(err.kind(), ErrorKind::ToolBackendUnavailable);
    assert_eq!(
        details(&err)["reason"],
        "connection closed before the response"
    );
}

#[test]
fn no_answer_within_the_deadline_is_a_timeout_and_a_cancellation_stops_the_wait() {
    let (port, _seen) = serve_once(Reply::Hold);
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("slow");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(
        details(&err),
        &json!({"backend": "shop", "timeout_ms": 300})
    );
    let (port, _seen) = serve_once(Reply::Hold);
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, true)
        .expect_err("cancelled");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert_eq!(
        details(&err),
        &json!({"backend": "shop", "reason": "cancelled"})
    );
    assert_eq!(h.backend.health(), Health::Ready);
}

#[test]
fn an_oversized_body_is_refused_whether_announced_or_streamed() {
    let big = "x".repeat(4096);
    let (port, _seen) = serve_once(respond("200 OK", "", &big));
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("large");
    assert_eq!(err.kind(), ErrorKind::AdapterError);
    assert_eq!(details(&err)["reason"], "response_too_large");
    let chunked = format!(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
        big.len()
    );
    let (port, _seen) = serve_once(Reply::Raw(chunked));
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("large");
    assert_eq!(details(&err)["reason"], "response_too_large");
}

#[test]
fn a_redirect_is_not_followed() {
    let (port, _seen) = serve_once(respond(
        "301 Moved Permanently",
        "location: http://127.0.0.1:1/\r\n",
        "",
    ));
    let h = Harness::on(port);
    let err = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect_err("redirect");
    assert_eq!(err.kind(), ErrorKind::AdapterError);
    assert_eq!(
        details(&err),
        &json!({"backend": "shop", "status": 301, "reason": "redirect not followed"})
    );
}

#[test]
fn the_credential_is_never_printed() {
    let (port, _seen) = serve_once(Reply::Drop);
    let h = Harness::on(port);
    assert!(!format!("{:?}", h.backend).contains("k-123"));
}

#[test]
fn a_backend_that_repeats_the_credential_is_not_repeated() {
    let (port, _seen) = serve_once(respond(
        "422 Unprocessable Entity",
        "content-type: application/json\r\n",
        r#"{"error":{"code":"bad k-123","message":"refused for key k-123"}}"#,
    ));
    let h = Harness::on(port);
    let err = h
        .call("add_pet", json!({"name": "Rex"}), None, false)
        .expect_err("422");
    assert_eq!(details(&err)["message"], "refused for key <redacted>");
    assert_eq!(details(&err)["original_error"], "bad <redacted>");
    let (port, _seen) = serve_once(respond("200 OK", "", r#"{"id":1,"name":"k-123"}"#));
    let h = Harness::on(port);
    let out = h
        .call("get_pet_by_id", json!({"petId": 1}), None, false)
        .expect("ok");
    assert_eq!(out.structured, Some(json!({"id": 1, "name": "<redacted>"})));
    assert!(
        !out.content[0]["text"]
            .as_str()
            .expect("text")
            .contains("k-123")
    );
}

#[test]
fn a_tls_failure_is_backend_unavailable() {
    let (port, _seen) = serve_once(respond("200 OK", "", "{}"));
    let rt = runtime();
    let dir = tempfile::tempdir().expect("dir");
    let spec = write(dir.path(), "pets.yaml", PETS);
    let base = Some(format!("https://127.0.0.1:{port}/v1"));
    let backend = OpenApi::open(&config(&spec, base, None), &env(&rt)).expect("open");
    let Value::Object(args) = json!({"petId": 1}) else {
        panic!("object")
    };
    let err = backend
        .invoke(
            "get_pet_by_id",
            &args,
            Invocation {
                idempotency_key: None,
                timeout: Duration::from_secs(5),
                trace: &TraceFields::default(),
            },
            &|| false,
            0,
        )
        .expect_err("tls");
    assert_eq!(err.kind(), ErrorKind::ToolBackendUnavailable);
    assert_eq!(details(&err)["reason"], "TLS handshake failed");
}

#[test]
fn a_body_that_is_not_json_is_a_problem_unless_the_tool_is_disabled() {
    let doc = "openapi: 3.1.0\ninfo: {title: t, version: '1'}\nservers: [{url: 'http://h'}]\npaths:\n  /pet/{id}/image:\n    post:\n      operationId: uploadFile\n      parameters: [{name: id, in: path, required: true, schema: {type: integer}}]\n      requestBody: {content: {application/octet-stream: {schema: {type: string, format: binary}}}}\n      responses: {}\n";
    let problem = open_problem(doc);
    assert!(
        problem.starts_with("operation POST /pet/{id}/image (upload_file): its request body is application/octet-stream"),
        "{problem}"
    );
    let rt = runtime();
    let dir = tempfile::tempdir().expect("dir");
    let spec = write(dir.path(), "doc.yaml", doc);
    let mut config = config(&spec, None, None);
    config.tools.insert(
        "shop_upload_file".into(),
        crate::config::ToolOverride {
            enabled: Some(false),
            ..Default::default()
        },
    );
    let backend = OpenApi::open(&config, &env(&rt)).expect("opens");
    assert!(backend.operations().is_empty());
    assert_eq!(
        backend.operation_names(),
        ["upload_file"],
        "the disabled operation still exists"
    );
    assert!(
        crate::tools::backends::unmatched_overrides(&config, &backend.operation_names()).is_empty(),
        "an override that disables an operation names it"
    );
}

/// A backend whose document is fetched from `url`, its copies kept under `state`.
fn open_from_url(
    url: &str,
    state: &Path,
    rt: &tokio::runtime::Runtime,
) -> Result<OpenApi, BackendProblem> {
    let mut config = config(Path::new("unused"), None, None);
    if let BackendKind::OpenApi(openapi) = &mut config.kind {
        openapi.spec = SpecSource::Url(crate::config::SpecUrl::parse(url).expect("url"));
    }
    let env = BackendEnv {
        copies: Copies::beside(state, true),
        clock: crate::clock::ManualClock::at_unix_secs(1_800_000_000).clock(),
        ..env(rt)
    };
    OpenApi::open(&config, &env)
}

#[test]
fn a_document_fetched_from_a_url_is_kept_and_opens_the_backend_when_the_url_fails() {
    let rt = runtime();
    let state = tempfile::tempdir().expect("dir");
    let (port, _) = serve_once(respond(
        "200 OK",
        "content-type: application/yaml\r\n",
        PETS,
    ));
    let url = format!("http://127.0.0.1:{port}/openapi.yaml");
    let fresh = open_from_url(&url, state.path(), &rt).expect("fetched");
    assert_eq!(fresh.operations().len(), 5);
    assert!(fresh.warnings().is_empty(), "{:?}", fresh.warnings());
    // The port is closed now: the last good copy opens the backend, and says so.
    let stale = open_from_url(&url, state.path(), &rt).expect("from the copy");
    assert_eq!(stale.operations(), fresh.operations());
    assert_eq!(
        stale.warnings(),
        [format!(
            "cannot fetch the OpenAPI document at {url}: connection refused; the backend opened \
             from its last good copy, fetched 0 s ago (2027-01-15T08:00:00Z)"
        )]
    );
}

#[test]
fn a_fetched_text_that_is_not_a_document_falls_back_on_the_copy_and_leaves_it() {
    let rt = runtime();
    let state = tempfile::tempdir().expect("dir");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/openapi", listener.local_addr().expect("addr"));
    let swagger = "{\"swagger\": \"2.0\"}";
    let server = thread::spawn(move || {
        for body in [PETS, swagger, swagger] {
            let (mut stream, _) = listener.accept().expect("accept");
            read_request(&stream);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(reply.as_bytes()).expect("reply");
        }
    });
    open_from_url(&url, state.path(), &rt).expect("fetched");
    for _ in 0..2 {
        let stale = open_from_url(&url, state.path(), &rt).expect("from the copy");
        assert_eq!(stale.operations().len(), 5, "the copy was not replaced");
        assert_eq!(
            stale.warnings(),
            [format!(
                "{url} is not an OpenAPI 3.0 or 3.1 document (its `openapi` is \"\"); the backend \
                 opened from its last good copy, fetched 0 s ago (2027-01-15T08:00:00Z)"
            )]
        );
    }
    server.join().expect("served");
    let fresh_state = tempfile::tempdir().expect("dir");
    let problem = open_from_url(&url, fresh_state.path(), &rt).expect_err("no copy");
    assert!(
        problem.message.starts_with(&format!(
            "cannot fetch the OpenAPI document at {url}: connection refused"
        )),
        "{}",
        problem.message
    );
}

#[test]
fn a_document_past_the_cap_is_refused_whether_announced_or_streamed() {
    let rt = runtime();
    let state = tempfile::tempdir().expect("dir");
    let cap = MAX_DOCUMENT_BYTES as usize;
    let announced = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        cap + 1
    );
    let streamed = format!(
        "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n{{\"openapi\": \"3.1.0\", \"x\": \"{}\"}}",
        "a".repeat(cap)
    );
    for reply in [announced, streamed] {
        let (port, _) = serve_once(Reply::Raw(reply));
        let url = format!("http://127.0.0.1:{port}/openapi.json");
        let problem = open_from_url(&url, state.path(), &rt).expect_err("too large");
        assert_eq!(
            problem.message,
            format!(
                "cannot fetch the OpenAPI document at {url}: the document is larger than 8 MiB \
                 (8388608 bytes), the most tollgate fetches; save it to a file and name the file \
                 in `spec`"
            )
        );
    }
}

#[test]
fn a_document_url_that_redirects_or_fails_is_named_with_its_answer() {
    let rt = runtime();
    let state = tempfile::tempdir().expect("dir");
    let (port, _) = serve_once(respond(
        "301 Moved Permanently",
        "location: https://erp.example.com/openapi.json\r\n",
        "",
    ));
    let url = format!("http://127.0.0.1:{port}/openapi.json");
    let problem = open_from_url(&url, state.path(), &rt).expect_err("redirect");
    assert_eq!(
        problem.message,
        format!(
            "cannot fetch the OpenAPI document at {url}: it answered 301 Moved Permanently towards \
             \"https://erp.example.com/openapi.json\", and redirects are not followed: set `spec` \
             to the document's own URL"
        )
    );
    let (port, request) = serve_once(respond("404 Not Found", "", "{}"));
    let url = format!("http://127.0.0.1:{port}/openapi.json");
    let problem = open_from_url(&url, state.path(), &rt).expect_err("404");
    assert_eq!(
        problem.message,
        format!("cannot fetch the OpenAPI document at {url}: it answered 404 Not Found")
    );
    let request = request.recv().expect("request").to_ascii_lowercase();
    assert!(
        request.starts_with("get /openapi.json http/1.1"),
        "{request}"
    );
    assert!(!request.contains("authorization"), "{request}");
}
