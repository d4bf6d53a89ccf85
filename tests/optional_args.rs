//! `null` means absent, and idempotency keys as agents use them (issue 15), over stdio and
//! HTTP: every built-in tool takes an explicit `null` for each optional argument, at any
//! depth, as if it were left out, while a `null` for a required one is refused naming it;
//! `{"x": null}` and `{}` are one operation under one key; a call refused before its tool
//! acted (argument validation, the tool's own check of a value, a guardrail) leaves its key
//! free for the corrected call, while a business failure of a tool that ran is stored and
//! replayed.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, assert_error, assert_tool_error, modern_meta};

/// The handshake revision of the stdio sessions.
const VERSION: &str = "2025-11-25";
/// The `_meta` flag of a replayed result.
const REPLAY: &str = "dev.tollgate/idempotentReplay";
/// The `_meta` entry that carries an idempotency key.
const KEY_META: &str = "dev.tollgate/idempotencyKey";

/// How a test reaches the server.
enum Link {
    /// A `tollgate stdio` session on the handshake era.
    Stdio(StdioServer),
    /// `tollgate serve`, called statelessly (2026-07-28) with the admin key.
    Http(HttpServer, String),
}

/// A fresh database and one transport to it.
struct Wire {
    link: Link,
    next_id: i64,
    // Dropped last: the server's files live in it.
    _db: TestDb,
}

impl Wire {
    /// A fresh database over each transport, stdio first.
    fn both() -> [Wire; 2] {
        [Wire::stdio(), Wire::http()]
    }

    fn stdio() -> Wire {
        let db = TestDb::new();
        let mut server = StdioServer::start(&db, &[]);
        server.initialize(VERSION);
        Wire {
            link: Link::Stdio(server),
            next_id: 0,
            _db: db,
        }
    }

    fn http() -> Wire {
        let db = TestDb::new();
        let token = db.admin_key.clone().expect("init prints an admin key");
        let server = HttpServer::start(&db, &[]);
        Wire {
            link: Link::Http(server, token),
            next_id: 0,
            _db: db,
        }
    }

    fn name(&self) -> &'static str {
        match self.link {
            Link::Stdio(_) => "stdio",
            Link::Http(..) => "http",
        }
    }

    /// The response to `method` with `params` (whose `_meta`, if any, is kept).
    fn request(&mut self, method: &str, mut params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        match &mut self.link {
            Link::Stdio(server) => server.request(method, params),
            Link::Http(server, token) => {
                let mut meta = modern_meta();
                if let Some(given) = params.get("_meta").and_then(Value::as_object) {
                    for (name, value) in given {
                        meta[name] = value.clone();
                    }
                }
                params["_meta"] = meta;
                let auth = format!("Bearer {token}");
                let tool = params["name"].as_str().unwrap_or_default().to_owned();
                let mut headers = vec![
                    ("Authorization", auth.as_str()),
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", method),
                ];
                if !tool.is_empty() {
                    headers.push(("Mcp-Name", tool.as_str()));
                }
                let body =
                    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
                server.post_mcp(&headers, &body).json()
            }
        }
    }

    /// The response to a call of `name`, with `key` in `_meta` when given.
    fn call_with_meta_key(&mut self, name: &str, arguments: Value, key: Option<&str>) -> Value {
        let mut params = json!({ "name": name, "arguments": arguments });
        if let Some(key) = key {
            params["_meta"] = json!({ KEY_META: key });
        }
        self.request("tools/call", params)
    }

    /// The response to a call of `name`.
    fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.call_with_meta_key(name, arguments, None)
    }

    /// A call that must succeed, fresh (not replayed): its `structuredContent`.
    fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let response = self.call(name, arguments);
        fresh_success(&response, name)
    }

    /// The input schema of every listed tool, by name.
    fn input_schemas(&mut self) -> Map<String, Value> {
        let listed = self.request("tools/list", json!({}));
        listed["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|tool| {
                let name = tool["name"].as_str().expect("name").to_owned();
                (name, tool["inputSchema"].clone())
            })
            .collect()
    }

    /// A client with a tax id and an e-mail (so it can get full invoices, and be sent them).
    fn client(&mut self, name: &str) -> String {
        let created = self.ok(
            "create_client",
            json!({ "name": name, "tax_id": "B12345674", "email": "billing@example.com" }),
        );
        id_of(&created)
    }

    /// A draft of one line (1 × 10 000 cents at 21 % VAT) for `client`.
    fn draft(&mut self, client: &str) -> String {
        id_of(&self.ok("create_invoice", draft_args(client, 21)))
    }
}

/// The arguments of a one-line draft at `vat_rate`.
fn draft_args(client: &str, vat_rate: i64) -> Value {
    json!({ "client_id": client, "lines": [
        { "description": "Consulting", "quantity": 1, "unit_price_cents": 10_000,
          "vat_rate": vat_rate } ] })
}

fn id_of(structured: &Value) -> String {
    structured["id"].as_str().expect("id").to_owned()
}

/// Whether a response is a replay of a stored result.
fn is_replay(response: &Value) -> bool {
    response["result"]["_meta"][REPLAY] == json!(true)
}

/// Asserts a successful, freshly run call; gives its `structuredContent`.
fn fresh_success(response: &Value, name: &str) -> Value {
    assert!(response.get("error").is_none(), "{name}: {response}");
    assert_eq!(
        response["result"]["isError"],
        json!(false),
        "{name}: {response}"
    );
    assert!(!is_replay(response), "{name} was replayed: {response}");
    response["result"]["structuredContent"].clone()
}

/// Asserts a replay of `first` (same result, marked as a replay).
fn assert_replay_of(response: &Value, first: &Value) {
    assert!(is_replay(response), "not a replay: {response}");
    assert_eq!(
        response["result"]["structuredContent"], first["result"]["structuredContent"],
        "{response}"
    );
    assert_eq!(response["result"]["isError"], first["result"]["isError"]);
    assert_eq!(response["result"]["content"], first["result"]["content"]);
}

/// `given` (the required arguments, valid) with every optional property of `schema` that
/// it leaves out set to `null`, at every depth the schema describes.
fn nulls_for(schema: &Value, given: &Value) -> Value {
    let Some(properties) = schema["properties"].as_object() else {
        return given.clone();
    };
    let required: BTreeSet<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Map::new();
    for (name, property) in properties {
        let value = match given.get(name) {
            Some(Value::Array(items)) => Value::Array(
                items
                    .iter()
                    .map(|item| nulls_for(&property["items"], item))
                    .collect(),
            ),
            Some(value) => nulls_for(property, value),
            None => {
                assert!(!required.contains(name.as_str()), "{name} is required");
                Value::Null
            }
        };
        out.insert(name.clone(), value);
    }
    let given_names: BTreeSet<&str> = given
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert!(
        given_names.is_subset(&properties.keys().map(String::as_str).collect()),
        "{given}"
    );
    Value::Object(out)
}

#[test]
fn every_built_in_tool_takes_null_for_each_optional_argument() {
    for mut wire in Wire::both() {
        let transport = wire.name();
        let schemas = wire.input_schemas();
        assert_eq!(schemas.len(), 16, "{transport}");
        let billed = wire.client("Billed SL");
        let mut called = BTreeSet::new();
        // Every optional argument null, the required ones valid; `key` (in `_meta`) for
        // the tools that require one, whose `idempotency_key` argument is then null too.
        let mut call = |wire: &mut Wire, name: &str, required: Value, key: Option<&str>| {
            let arguments = nulls_for(&schemas[name], &required);
            assert!(
                arguments["idempotency_key"].is_null(),
                "{transport} {name}: {arguments}"
            );
            let response = wire.call_with_meta_key(name, arguments, key);
            called.insert(name.to_owned());
            fresh_success(&response, &format!("{transport} {name}"))
        };

        call(&mut wire, "search_clients", json!({}), None);
        call(
            &mut wire,
            "get_client",
            json!({ "client_id": billed }),
            None,
        );
        let bare = call(&mut wire, "create_client", json!({ "name": "Bare" }), None);
        assert_eq!(bare["tax_id"], Value::Null);
        let bare = id_of(&bare);
        let kept = call(
            &mut wire,
            "update_client",
            json!({ "client_id": bare }),
            None,
        );
        assert_eq!(kept["name"], json!("Bare"), "null leaves a field as it is");

        let line = json!({ "description": "Consulting", "quantity": 2,
                           "unit_price_cents": 5_000, "vat_rate": 21 });
        let draft = call(
            &mut wire,
            "create_invoice",
            json!({ "client_id": billed, "lines": [line] }),
            None,
        );
        assert_eq!(draft["lines"][0]["discount_percent"], json!(0));
        assert_eq!(draft["kind"], json!("full"));
        let invoice = id_of(&draft);
        call(
            &mut wire,
            "update_invoice",
            json!({ "invoice_id": invoice }),
            None,
        );
        let issued = call(
            &mut wire,
            "issue_invoice",
            json!({ "invoice_id": invoice }),
            Some("nulls-issue"),
        );
        assert_eq!(issued["status"], json!("issued"));
        call(&mut wire, "search_invoices", json!({}), None);
        call(
            &mut wire,
            "get_invoice",
            json!({ "invoice_id": invoice }),
            None,
        );
        let paid = call(
            &mut wire,
            "record_payment",
            json!({ "invoice_id": invoice, "amount_cents": 100 }),
            Some("nulls-pay"),
        );
        assert_eq!(paid["payment"]["method"], json!("transfer"));
        call(&mut wire, "list_payments", json!({}), None);
        let sent = call(
            &mut wire,
            "send_invoice",
            json!({ "invoice_id": invoice }),
            Some("nulls-send"),
        );
        assert_eq!(sent["recipient"], json!("billing@example.com"));
        call(
            &mut wire,
            "export_invoices",
            json!({ "from": "2000-01-01", "to": "2999-12-31" }),
            None,
        );
        call(
            &mut wire,
            "void_invoice",
            json!({ "invoice_id": invoice, "reason": "Wrong customer" }),
            Some("nulls-void"),
        );
        let spare = wire.draft(&billed);
        call(
            &mut wire,
            "delete_invoice",
            json!({ "invoice_id": spare }),
            None,
        );
        call(
            &mut wire,
            "delete_client",
            json!({ "client_id": bare }),
            None,
        );

        let listed: BTreeSet<String> = schemas.keys().cloned().collect();
        assert_eq!(
            called, listed,
            "{transport}: every built-in tool was called"
        );
    }
}

#[test]
fn a_null_for_a_required_argument_is_refused_naming_it() {
    for mut wire in Wire::both() {
        let response = wire.call("get_client", json!({ "client_id": null }));
        assert_tool_error(&response, "validation_error", 400, 2001);
        let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["param"], json!("client_id"), "{response}");

        let client = wire.client("Required SL");
        let mut args = draft_args(&client, 21);
        args["lines"][0]["quantity"] = Value::Null;
        let response = wire.call("create_invoice", args);
        assert_tool_error(&response, "validation_error", 400, 2001);
        let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["param"], json!("lines.0.quantity"), "{response}");
    }
}

#[test]
fn a_null_and_a_left_out_argument_are_one_operation_under_one_key() {
    for mut wire in Wire::both() {
        // A tool without guardrails: the claim answers the retry.
        let with_null = json!({ "name": "Once SL", "email": null, "idempotency_key": "once-1" });
        let first = wire.call("create_client", with_null.clone());
        fresh_success(&first, "create_client");
        let left_out = wire.call(
            "create_client",
            json!({ "name": "Once SL", "idempotency_key": "once-1" }),
        );
        assert_replay_of(&left_out, &first);
        let again = wire.call("create_client", with_null);
        assert_replay_of(&again, &first);
        let other = wire.call(
            "create_client",
            json!({ "name": "Once SL", "email": "once@example.com", "idempotency_key": "once-1" }),
        );
        assert_error(&other, -32007, "idempotency_key_reused", 409, 3201, false);

        // A tool with guardrails: the replay step answers it, before the rules.
        let client = wire.client("Drafted SL");
        let mut args = draft_args(&client, 21);
        args["idempotency_key"] = json!("once-2");
        let first = wire.call("create_invoice", args.clone());
        fresh_success(&first, "create_invoice");
        args["notes"] = Value::Null;
        args["lines"][0]["discount_percent"] = Value::Null;
        let with_nulls = wire.call("create_invoice", args);
        assert_replay_of(&with_nulls, &first);
        let drafts = wire.ok("search_invoices", json!({ "client_id": client }));
        assert_eq!(drafts["data"].as_array().map(Vec::len), Some(1));
    }
}

#[test]
fn a_call_refused_by_validation_leaves_its_key_for_the_corrected_call() {
    for mut wire in Wire::both() {
        let client = wire.client("Corrected SL");
        let invoice = wire.draft(&client);
        wire.ok(
            "issue_invoice",
            json!({ "invoice_id": invoice, "idempotency_key": "fix-issue" }),
        );

        // The input schema refuses the amount.
        let wrong =
            json!({ "invoice_id": invoice, "amount_cents": "100", "idempotency_key": "fix-1" });
        let refused = wire.call("record_payment", wrong.clone());
        assert_tool_error(&refused, "validation_error", 400, 2001);
        let corrected =
            json!({ "invoice_id": invoice, "amount_cents": 100, "idempotency_key": "fix-1" });
        let ran = wire.call("record_payment", corrected.clone());
        fresh_success(&ran, "record_payment");
        assert_replay_of(&wire.call("record_payment", corrected), &ran);
        // The key now belongs to the payment that ran: the wrong arguments are another
        // operation.
        let reused = wire.call("record_payment", wrong);
        assert_error(&reused, -32007, "idempotency_key_reused", 409, 3201, false);
        let payments = wire.ok("list_payments", json!({ "invoice_id": invoice }));
        assert_eq!(payments["data"].as_array().map(Vec::len), Some(1));

        // A required argument left out, then given.
        let missing = wire.call(
            "void_invoice",
            json!({ "invoice_id": invoice, "idempotency_key": "fix-2" }),
        );
        assert_tool_error(&missing, "missing_required_field", 400, 2002);
        let voided = wire.call(
            "void_invoice",
            json!({ "invoice_id": invoice, "reason": "Wrong customer", "idempotency_key": "fix-2" }),
        );
        fresh_success(&voided, "void_invoice");

        // The tool's own check of a value (a tax id's check letter).
        let typo = wire.call(
            "create_client",
            json!({ "name": "Typo SL", "tax_id": "12345678A", "idempotency_key": "fix-3" }),
        );
        assert_tool_error(&typo, "invalid_format", 400, 2003);
        let fixed = json!({ "name": "Typo SL", "tax_id": "12345678Z", "idempotency_key": "fix-3" });
        let ran = wire.call("create_client", fixed.clone());
        assert_eq!(
            fresh_success(&ran, "create_client")["tax_id"],
            json!("12345678Z")
        );
        assert_replay_of(&wire.call("create_client", fixed), &ran);
    }
}

#[test]
fn a_call_refused_by_a_guardrail_leaves_its_key_for_the_corrected_call() {
    for mut wire in Wire::both() {
        let client = wire.client("Guarded SL");
        let mut wrong = draft_args(&client, 7);
        wrong["idempotency_key"] = json!("vat-1");
        let refused = wire.call("create_invoice", wrong.clone());
        assert_error(
            &refused,
            -32008,
            "mcp_guardrail_violation",
            422,
            3301,
            false,
        );
        assert_eq!(
            refused["error"]["data"]["rule_id"],
            json!("legal-vat-rates"),
            "{refused}"
        );
        let mut corrected = draft_args(&client, 21);
        corrected["idempotency_key"] = json!("vat-1");
        let ran = wire.call("create_invoice", corrected.clone());
        fresh_success(&ran, "create_invoice");
        assert_replay_of(&wire.call("create_invoice", corrected), &ran);
        // The refused arguments are still refused by the rule, before the key is looked
        // at; other valid arguments under the key that ran are another operation.
        let again = wire.call("create_invoice", wrong);
        assert_error(&again, -32008, "mcp_guardrail_violation", 422, 3301, false);
        let mut other = draft_args(&client, 10);
        other["idempotency_key"] = json!("vat-1");
        let reused = wire.call("create_invoice", other);
        assert_error(&reused, -32007, "idempotency_key_reused", 409, 3201, false);
    }
}

#[test]
fn a_business_failure_of_a_tool_that_ran_is_stored_and_replayed() {
    for mut wire in Wire::both() {
        let missing = "inv_0190a0a0-a0a0-7000-8000-00000000dead";
        let args =
            json!({ "invoice_id": missing, "amount_cents": 100, "idempotency_key": "biz-1" });
        let first = wire.call("record_payment", args.clone());
        assert_tool_error(&first, "invoice_not_found", 404, 3101);
        assert!(!is_replay(&first), "{first}");
        let again = wire.call("record_payment", args);
        assert_tool_error(&again, "invoice_not_found", 404, 3101);
        assert_replay_of(&again, &first);

        let client = wire.client("Stored SL");
        let invoice = wire.draft(&client);
        let other = wire.call(
            "record_payment",
            json!({ "invoice_id": invoice, "amount_cents": 100, "idempotency_key": "biz-1" }),
        );
        assert_error(&other, -32007, "idempotency_key_reused", 409, 3201, false);
    }
}
