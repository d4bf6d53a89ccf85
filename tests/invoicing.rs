//! The invoicing back office over stdio (issue 6): every business rule and fiscal guardrail
//! with its exact code and fields, the idempotency family (required, invalid, replay,
//! reused, per-credential, concurrent), exports, prompts, resources and the demo data.
//!
//! Every successful result is also checked against the tool's declared `outputSchema`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Barrier};

use serde_json::{Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, assert_error, assert_tool_error, modern_meta};

/// The handshake revision the tests speak.
const VERSION: &str = "2025-11-25";

/// A stdio session that knows every tool's output schema.
struct Session {
    server: StdioServer,
    output_schemas: HashMap<String, jsonschema::Validator>,
}

impl Session {
    fn start(db: &TestDb) -> Session {
        Self::with_token(
            db,
            db.admin_key.as_deref().expect("init prints an admin key"),
        )
    }

    fn with_token(db: &TestDb, token: &str) -> Session {
        let mut server = StdioServer::start_with_token(db, Some(token), &[]);
        server.initialize(VERSION);
        let listed = server.request("tools/list", json!({}));
        let tools = listed["result"]["tools"].as_array().expect("tools").clone();
        let output_schemas = tools
            .iter()
            .filter(|t| t.get("outputSchema").is_some())
            .map(|t| {
                let name = t["name"].as_str().expect("name").to_owned();
                let validator =
                    jsonschema::validator_for(&t["outputSchema"]).expect("output schema compiles");
                (name, validator)
            })
            .collect();
        Session {
            server,
            output_schemas,
        }
    }

    /// The raw response of a call.
    fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.server.call_tool(name, arguments)
    }

    /// A call that must succeed: returns its `structuredContent`, checked against the schema.
    fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let response = self.call(name, arguments);
        let result = &response["result"];
        assert_eq!(result["isError"], json!(false), "{name} failed: {response}");
        let structured = result["structuredContent"].clone();
        if let Some(validator) = self.output_schemas.get(name) {
            let errors: Vec<String> = validator
                .iter_errors(&structured)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{name} output breaks its schema: {errors:?}\n{structured}"
            );
        }
        assert_eq!(
            result["content"][1]["text"]
                .as_str()
                .map(|t| serde_json::from_str::<Value>(t).ok()),
            Some(Some(structured.clone())),
            "JSON text block of {name}"
        );
        structured
    }

    fn client(&mut self, name: &str, tax_id: Option<&str>, email: Option<&str>) -> String {
        let mut args = json!({ "name": name });
        if let Some(tax_id) = tax_id {
            args["tax_id"] = json!(tax_id);
        }
        if let Some(email) = email {
            args["email"] = json!(email);
        }
        self.ok("create_client", args)["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    fn draft(&mut self, args: Value) -> String {
        self.ok("create_invoice", args)["id"]
            .as_str()
            .expect("id")
            .to_owned()
    }

    /// A draft of one line: 1 × `unit` cents at 21 % VAT.
    fn simple_draft(&mut self, client: &str, unit: i64) -> String {
        self.draft(json!({ "client_id": client, "lines": [
            { "description": "Consulting", "quantity": 1, "unit_price_cents": unit, "vat_rate": 21 } ] }))
    }

    fn issue(&mut self, invoice: &str, date: &str, key: &str) -> Value {
        self.ok(
            "issue_invoice",
            json!({ "invoice_id": invoice, "issue_date": date, "idempotency_key": key }),
        )
    }
}

fn ids(values: &Value) -> Vec<String> {
    values["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v["id"].as_str().expect("id").to_owned())
        .collect()
}

fn assert_guardrail(response: &Value, rule: &str, subcode: &str) {
    assert_error(
        response,
        -32008,
        "mcp_guardrail_violation",
        422,
        3301,
        false,
    );
    let data = &response["error"]["data"];
    assert_eq!(data["rule_id"], json!(rule), "{response}");
    assert_eq!(data["subcode"], json!(subcode), "{response}");
    assert_eq!(
        data["guardrail_uri"],
        json!(format!("tollgate://guardrails/{rule}")),
        "{response}"
    );
}

fn envelope(response: &Value) -> &Value {
    &response["result"]["_meta"]["dev.tollgate/error"]
}

fn payment_rows(db: &TestDb, invoice: &str) -> i64 {
    db.sql_i64(&format!(
        "SELECT count(*) FROM payments WHERE invoice_id = '{invoice}'"
    ))
}

/// An issued invoice of 1 × 100.00 EUR + 21 % VAT = 121.00 EUR.
fn issued_121(s: &mut Session, key: &str) -> String {
    let client = s.client("Acme SL", Some("B12345674"), Some("billing@acme.example"));
    let invoice = s.simple_draft(&client, 10_000);
    s.issue(&invoice, "2025-06-02", key);
    invoice
}

#[test]
fn tools_declare_scope_category_policy_and_closed_schemas() {
    use tollgate::tools::{Category as C, Idempotency as I};
    let expected = [
        ("search_clients", "clients:read", C::Read, I::NotApplicable),
        ("get_client", "clients:read", C::Read, I::NotApplicable),
        ("create_client", "clients:write", C::Write, I::Optional),
        ("update_client", "clients:write", C::Write, I::Optional),
        (
            "delete_client",
            "clients:delete",
            C::Destructive,
            I::Optional,
        ),
        (
            "search_invoices",
            "invoices:read",
            C::Read,
            I::NotApplicable,
        ),
        ("get_invoice", "invoices:read", C::Read, I::NotApplicable),
        ("create_invoice", "invoices:write", C::Write, I::Optional),
        ("update_invoice", "invoices:write", C::Write, I::Optional),
        ("issue_invoice", "invoices:write", C::Write, I::Required),
        (
            "delete_invoice",
            "invoices:write",
            C::Destructive,
            I::Optional,
        ),
        ("void_invoice", "invoices:void", C::Destructive, I::Required),
        ("record_payment", "payments:write", C::Write, I::Required),
        ("list_payments", "invoices:read", C::Read, I::NotApplicable),
        ("send_invoice", "invoices:send", C::Send, I::Required),
        (
            "export_invoices",
            "reports:generate",
            C::Generate,
            I::NotApplicable,
        ),
    ];
    let tools = tollgate::tools::invoicing::tools();
    let declared: BTreeSet<&str> = tools.iter().map(|t| &*t.spec().name).collect();
    assert_eq!(declared, expected.iter().map(|e| e.0).collect());
    for (name, scope, category, policy) in expected {
        let spec = tools
            .iter()
            .find(|t| t.spec().name == name)
            .expect("tool")
            .spec();
        assert_eq!(
            (&*spec.scope, spec.category, spec.idempotency),
            (scope, category, policy),
            "{name}"
        );
    }

    let db = TestDb::new();
    let mut s = Session::start(&db);
    let listed = s.server.request("tools/list", json!({}));
    for tool in listed["result"]["tools"].as_array().expect("tools") {
        let name = tool["name"].as_str().expect("name");
        let (_, _, category, policy) = expected
            .iter()
            .find(|e| e.0 == name)
            .expect("only invoicing tools");
        let input = &tool["inputSchema"];
        assert_eq!(input["additionalProperties"], json!(false), "{name}");
        let has_key = input["properties"].get("idempotency_key").is_some();
        assert_eq!(
            has_key,
            *policy != I::NotApplicable,
            "{name} declares idempotency_key"
        );
        assert!(
            tool["outputSchema"].is_object(),
            "{name} has an output schema"
        );
        assert!(
            tool["title"].is_string() && tool["description"].as_str().is_some_and(|d| d.len() > 40),
            "{name}"
        );
        let read_only = matches!(category, C::Read | C::Generate);
        assert_eq!(
            tool["annotations"]["readOnlyHint"],
            json!(read_only),
            "{name}"
        );
        assert_eq!(
            tool["annotations"]["destructiveHint"],
            json!(*category == C::Destructive),
            "{name}"
        );
    }
}

#[test]
fn clients_have_unique_checksum_valid_tax_ids() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let created = s.ok(
        "create_client",
        json!({ "name": "Lucía Fernández", "tax_id": "12345678-z", "email": "lucia@example.com" }),
    );
    assert_eq!(created["tax_id"], json!("12345678Z"));
    assert_eq!(created["tax_id_kind"], json!("nif"));
    let lucia = created["id"].as_str().expect("id").to_owned();

    let response = s.call(
        "create_client",
        json!({ "name": "Typo", "tax_id": "12345678A" }),
    );
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("tax_id"));
    assert_eq!(
        envelope(&response)["details"]["reason"],
        json!("checksum_mismatch")
    );
    let response = s.call("create_client", json!({ "name": "Typo", "tax_id": "1234" }));
    assert_eq!(
        envelope(&response)["details"]["reason"],
        json!("unrecognised_format")
    );

    let response = s.call(
        "create_client",
        json!({ "name": "Again", "tax_id": "ES12345678Z" }),
    );
    assert_tool_error(&response, "tax_id_already_exists", 409, 3102);
    assert_eq!(envelope(&response)["param"], json!("tax_id"));
    assert_eq!(
        envelope(&response)["details"]["existing_resource_id"],
        json!(lucia)
    );

    let response = s.call(
        "create_client",
        json!({ "name": "Mail", "email": "not-an-address" }),
    );
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("email"));

    let nie = s.client("Oliver Bennett", Some("X1234567L"), None);
    let response = s.call(
        "update_client",
        json!({ "client_id": nie, "tax_id": "12345678Z" }),
    );
    assert_tool_error(&response, "tax_id_already_exists", 409, 3102);
    assert_eq!(
        envelope(&response)["details"]["existing_resource_id"],
        json!(lucia)
    );
    let updated = s.ok(
        "update_client",
        json!({ "client_id": nie, "email": "oliver@example.com" }),
    );
    assert_eq!(
        (updated["tax_id"].clone(), updated["email"].clone()),
        (json!("X1234567L"), json!("oliver@example.com"))
    );

    let missing = "cli_01900000-0000-7000-8000-000000000000";
    let response = s.call("get_client", json!({ "client_id": missing }));
    assert_tool_error(&response, "client_not_found", 404, 3101);
    assert_eq!(envelope(&response)["param"], json!("client_id"));
    let response = s.call("get_client", json!({ "client_id": "lucia" }));
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("client_id"));

    let found = s.ok("search_clients", json!({ "query": "bennett" }));
    assert_eq!(ids(&found), vec![nie.clone()]);
    let first = s.ok("search_clients", json!({ "limit": 1 }));
    assert_eq!(
        (first["has_more"].clone(), ids(&first)),
        (json!(true), vec![nie.clone()])
    );
    let second = s.ok(
        "search_clients",
        json!({ "limit": 1, "starting_after": first["next_cursor"] }),
    );
    assert_eq!(
        (second["has_more"].clone(), ids(&second)),
        (json!(false), vec![lucia])
    );
}

#[test]
fn an_issued_invoice_cannot_be_modified() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme SL", Some("B12345674"), None);
    let draft = s.ok("create_invoice", json!({ "client_id": client, "lines": [
        { "description": "Hours", "quantity": 2, "unit_price_cents": 5000, "discount_percent": 10, "vat_rate": 21 },
        { "description": "Book", "quantity": 1, "unit_price_cents": 1999, "vat_rate": 4, "withholding_rate": 0 } ] }));
    // 2 × 50.00 − 10 % = 90.00 + 18.90 VAT; 19.99 + 0.80 VAT (0.7996 rounds half away).
    assert_eq!(draft["subtotal_cents"], json!(10_999));
    assert_eq!(draft["vat_cents"], json!(1_970));
    assert_eq!(draft["total_cents"], json!(12_969));
    assert_eq!(draft["lines"][1]["vat_cents"], json!(80));
    assert_eq!(
        draft["vat_breakdown"],
        json!([
        { "vat_rate": 21, "base_cents": 9_000, "vat_cents": 1_890 },
        { "vat_rate": 4, "base_cents": 1_999, "vat_cents": 80 } ])
    );
    let id = draft["id"].as_str().expect("id").to_owned();
    let updated = s.ok(
        "update_invoice",
        json!({ "invoice_id": id, "notes": "PO 4411", "due_date": "2025-07-31" }),
    );
    assert_eq!(updated["notes"], json!("PO 4411"));

    let issued = s.issue(&id, "2025-07-01", "issue-1");
    assert_eq!(
        (issued["number"].clone(), issued["status"].clone()),
        (json!("F-000001"), json!("issued"))
    );
    assert_eq!(
        issued["recipient"],
        json!({ "name": "Acme SL", "tax_id": "B12345674" })
    );

    let response = s.call(
        "update_invoice",
        json!({ "invoice_id": id, "notes": "changed" }),
    );
    assert_tool_error(&response, "invoice_cannot_be_modified", 422, 3103);
    assert_eq!(envelope(&response)["param"], json!("status"));
    assert_eq!(envelope(&response)["details"]["status"], json!("issued"));
    assert_eq!(
        response["result"]["content"][0]["text"],
        json!(
            "Invoice F-000001 is issued, and only a draft can be modified; to correct an issued invoice, void it with void_invoice and create a new one."
        )
    );
    let response = s.call(
        "issue_invoice",
        json!({ "invoice_id": id, "idempotency_key": "issue-2" }),
    );
    assert_tool_error(&response, "invoice_cannot_be_modified", 422, 3103);

    let response = s.call(
        "update_invoice",
        json!({ "invoice_id": "inv_01900000-0000-7000-8000-000000000000", "notes": "x" }),
    );
    assert_tool_error(&response, "invoice_not_found", 404, 3101);
    assert_eq!(envelope(&response)["param"], json!("invoice_id"));
    let response = s.call(
        "create_invoice",
        json!({ "client_id": client, "due_date": "2025-02-30",
        "lines": [{ "description": "x", "quantity": 1, "unit_price_cents": 1, "vat_rate": 21 }] }),
    );
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("due_date"));
}

#[test]
fn issued_invoices_are_voided_never_deleted() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme SL", Some("B12345674"), None);
    let draft = s.simple_draft(&client, 1_000);
    let deleted = s.ok("delete_invoice", json!({ "invoice_id": draft }));
    assert_eq!(deleted, json!({ "id": draft, "deleted": true }));
    assert_tool_error(
        &s.call("get_invoice", json!({ "invoice_id": draft })),
        "invoice_not_found",
        404,
        3101,
    );

    let invoice = s.simple_draft(&client, 1_000);
    s.issue(&invoice, "2025-05-05", "k-issue");
    let response = s.call("delete_invoice", json!({ "invoice_id": invoice }));
    assert_guardrail(&response, "issued-invoice-immutable", "invoice_issued");
    assert_eq!(response["error"]["data"]["param"], json!("invoice_id"));
    let uri = response["error"]["data"]["guardrail_uri"]
        .as_str()
        .expect("uri")
        .to_owned();
    let read = s.server.request("resources/read", json!({ "uri": uri }));
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["mimeType"], json!("text/markdown"));
    assert!(
        contents["text"]
            .as_str()
            .expect("text")
            .contains("void_invoice"),
        "{read}"
    );

    s.ok(
        "void_invoice",
        json!({ "invoice_id": invoice, "reason": "Wrong client", "idempotency_key": "k-void" }),
    );
    let response = s.call("delete_invoice", json!({ "invoice_id": invoice }));
    assert_guardrail(&response, "issued-invoice-immutable", "invoice_void");
    assert_eq!(
        s.ok("get_invoice", json!({ "invoice_id": invoice }))["status"],
        json!("void")
    );
}

#[test]
fn voiding_creates_one_rectifying_invoice() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    s.ok(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 2_100, "idempotency_key": "pay" }),
    );
    let voided = s.ok(
        "void_invoice",
        json!({ "invoice_id": invoice, "reason": "Duplicate order", "idempotency_key": "void-1" }),
    );
    let (original, rectifying) = (&voided["invoice"], &voided["rectifying_invoice"]);
    assert_eq!(original["status"], json!("void"));
    assert_eq!(original["void_reason"], json!("Duplicate order"));
    assert_eq!(original["rectified_by_id"], rectifying["id"]);
    assert_eq!(rectifying["kind"], json!("rectifying"));
    assert_eq!(rectifying["status"], json!("issued"));
    assert_eq!(rectifying["number"], json!("R-000001"));
    assert_eq!(rectifying["rectifies_id"], json!(invoice));
    assert_eq!(
        (
            rectifying["subtotal_cents"].clone(),
            rectifying["vat_cents"].clone(),
            rectifying["total_cents"].clone()
        ),
        (json!(-10_000), json!(-2_100), json!(-12_100))
    );
    assert_eq!(rectifying["lines"][0]["unit_price_cents"], json!(-10_000));

    let response = s.call(
        "void_invoice",
        json!({ "invoice_id": invoice, "reason": "again", "idempotency_key": "void-2" }),
    );
    assert_guardrail(&response, "no-double-void", "invoice_already_void");
    assert_eq!(response["error"]["data"]["param"], json!("invoice_id"));
    let rectifying_id = rectifying["id"].as_str().expect("id");
    let response = s.call(
        "void_invoice",
        json!({ "invoice_id": rectifying_id, "reason": "undo", "idempotency_key": "void-3" }),
    );
    assert_guardrail(&response, "no-double-void", "rectifying_invoice");
    let read = s.server.request(
        "resources/read",
        json!({ "uri": "tollgate://guardrails/no-double-void" }),
    );
    assert!(
        read["result"]["contents"][0]["text"]
            .as_str()
            .expect("guide")
            .starts_with("# "),
        "{read}"
    );

    let client = s.ok("get_invoice", json!({ "invoice_id": invoice }))["client_id"]
        .as_str()
        .expect("client")
        .to_owned();
    let draft = s.simple_draft(&client, 500);
    let response = s.call(
        "void_invoice",
        json!({ "invoice_id": draft, "reason": "not needed", "idempotency_key": "void-4" }),
    );
    assert_tool_error(&response, "invoice_not_issued", 422, 3107);
    assert_eq!(envelope(&response)["param"], json!("invoice_id"));

    let response = s.call(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 100, "idempotency_key": "pay-void" }),
    );
    assert_tool_error(&response, "invoice_void", 422, 3108);
    assert_eq!(
        envelope(&response)["details"]["rectified_by_id"],
        json!(rectifying_id)
    );
    let response = s.call(
        "send_invoice",
        json!({ "invoice_id": invoice, "idempotency_key": "send-void" }),
    );
    assert_tool_error(&response, "invoice_void", 422, 3108);
}

#[test]
fn vat_rates_come_from_the_legal_set() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme SL", Some("B12345674"), None);
    let lines = json!([
        { "description": "Ok", "quantity": 1, "unit_price_cents": 100, "vat_rate": 10 },
        { "description": "Made-up rate", "quantity": 1, "unit_price_cents": 100, "vat_rate": 7 } ]);
    let response = s.call(
        "create_invoice",
        json!({ "client_id": client, "lines": lines }),
    );
    assert_guardrail(&response, "legal-vat-rates", "vat_rate_not_allowed");
    let data = &response["error"]["data"];
    assert_eq!(data["param"], json!("lines.1.vat_rate"));
    assert_eq!(data["details"]["vat_rate"], json!(7));
    assert_eq!(data["details"]["allowed_rates"], json!([21, 10, 4, 0]));
    assert_eq!(data["details"]["country"], json!("ES"));

    let draft = s.simple_draft(&client, 100);
    let response = s.call("update_invoice", json!({ "invoice_id": draft, "lines": [
        { "description": "Reduced by mistake", "quantity": 1, "unit_price_cents": 100, "vat_rate": 5 } ] }));
    assert_guardrail(&response, "legal-vat-rates", "vat_rate_not_allowed");
    assert_eq!(
        response["error"]["data"]["param"],
        json!("lines.0.vat_rate")
    );
    for rate in [21, 10, 4, 0] {
        s.ok("update_invoice", json!({ "invoice_id": draft, "lines": [
            { "description": "Legal", "quantity": 1, "unit_price_cents": 100, "vat_rate": rate } ] }));
    }
}

#[test]
fn a_simplified_invoice_stays_within_400_eur_with_vat() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Walk-in customer", None, None);
    let line = |unit: i64| json!([{ "description": "Sale", "quantity": 1, "unit_price_cents": unit, "vat_rate": 21 }]);
    // 330.58 + 21 % (69.4218 → 69.42) = 400.00 exactly: allowed.
    let at_ceiling = s.ok(
        "create_invoice",
        json!({ "client_id": client, "kind": "simplified", "lines": line(33_058) }),
    );
    assert_eq!(at_ceiling["total_cents"], json!(40_000));
    assert_eq!(at_ceiling["series"], json!("S"));
    // 330.59 + 69.42 = 400.01: refused.
    let response = s.call(
        "create_invoice",
        json!({ "client_id": client, "kind": "simplified", "lines": line(33_059) }),
    );
    assert_guardrail(
        &response,
        "simplified-invoice-ceiling",
        "total_above_ceiling",
    );
    let details = &response["error"]["data"]["details"];
    assert_eq!(
        (
            details["total_with_vat_cents"].clone(),
            details["ceiling_cents"].clone()
        ),
        (json!(40_001), json!(40_000))
    );

    let big = s.draft(json!({ "client_id": client, "lines": line(50_000) }));
    let response = s.call(
        "update_invoice",
        json!({ "invoice_id": big, "kind": "simplified" }),
    );
    assert_guardrail(
        &response,
        "simplified-invoice-ceiling",
        "total_above_ceiling",
    );
    let response = s.call(
        "update_invoice",
        json!({ "invoice_id": at_ceiling["id"], "lines": line(40_000) }),
    );
    assert_guardrail(
        &response,
        "simplified-invoice-ceiling",
        "total_above_ceiling",
    );
}

#[test]
fn a_full_invoice_needs_the_client_tax_id() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Consumer without NIF", None, None);
    let invoice = s.simple_draft(&client, 2_000);
    let response = s.call(
        "issue_invoice",
        json!({ "invoice_id": invoice, "idempotency_key": "k1" }),
    );
    assert_guardrail(&response, "full-invoice-tax-id", "client_tax_id_missing");
    assert_eq!(
        response["error"]["data"]["details"]["client_id"],
        json!(client)
    );
    let read = s.server.request(
        "resources/read",
        json!({ "uri": "tollgate://guardrails/full-invoice-tax-id" }),
    );
    assert!(
        read["result"]["contents"][0]["text"]
            .as_str()
            .expect("guide")
            .contains("update_client")
    );
    assert_eq!(
        s.ok("get_invoice", json!({ "invoice_id": invoice }))["status"],
        json!("draft"),
        "the refused call wrote nothing"
    );

    s.ok(
        "update_invoice",
        json!({ "invoice_id": invoice, "kind": "simplified", "series": "S" }),
    );
    let issued = s.issue(&invoice, "2025-04-01", "k2");
    assert_eq!(
        (
            issued["number"].clone(),
            issued["recipient"]["tax_id"].clone()
        ),
        (json!("S-000001"), Value::Null)
    );

    let other = s.simple_draft(&client, 2_000);
    s.ok(
        "update_client",
        json!({ "client_id": client, "tax_id": "Z7654321H" }),
    );
    let issued = s.issue(&other, "2025-04-01", "k3");
    assert_eq!(issued["recipient"]["tax_id"], json!("Z7654321H"));
}

#[test]
fn issue_dates_never_go_backwards_within_a_series() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme SL", Some("B12345674"), None);
    let (a, b, c) = (
        s.simple_draft(&client, 100),
        s.simple_draft(&client, 200),
        s.simple_draft(&client, 300),
    );
    assert_eq!(s.issue(&a, "2025-03-10", "a")["number"], json!("F-000001"));
    let response = s.call(
        "issue_invoice",
        json!({ "invoice_id": b, "issue_date": "2025-03-01", "idempotency_key": "b1" }),
    );
    assert_guardrail(
        &response,
        "issue-date-order",
        "issue_date_before_last_in_series",
    );
    let data = &response["error"]["data"];
    assert_eq!(data["param"], json!("issue_date"));
    assert_eq!(
        data["details"],
        json!({ "series": "F", "issue_date": "2025-03-01", "last_issue_date": "2025-03-10" })
    );
    assert_eq!(
        s.issue(&b, "2025-03-10", "b2")["number"],
        json!("F-000002"),
        "the same day is fine"
    );
    // The draft's planned date is used when the call gives none.
    s.ok(
        "update_invoice",
        json!({ "invoice_id": c, "issue_date": "2025-02-01" }),
    );
    let response = s.call(
        "issue_invoice",
        json!({ "invoice_id": c, "idempotency_key": "c1" }),
    );
    assert_guardrail(
        &response,
        "issue-date-order",
        "issue_date_before_last_in_series",
    );
    s.ok("update_invoice", json!({ "invoice_id": c, "series": "B" }));
    let issued = s.ok(
        "issue_invoice",
        json!({ "invoice_id": c, "idempotency_key": "c2" }),
    );
    assert_eq!(
        (
            issued["number"].clone(),
            issued["issue_date"].clone(),
            issued["due_date"].clone()
        ),
        (json!("B-000001"), json!("2025-02-01"), json!("2025-03-03")),
        "another series, 30-day default term"
    );
    let d = s.simple_draft(&client, 1);
    let response = s.call("update_invoice", json!({ "invoice_id": d, "series": "R" }));
    assert_tool_error(&response, "validation_error", 400, 2001);
    assert_eq!(envelope(&response)["param"], json!("series"));
}

#[test]
fn payments_never_exceed_the_balance() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let paid = s.ok(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 10_000, "paid_on": "2025-06-10",
        "method": "card", "reference": "TPV-1", "idempotency_key": "p1" }),
    );
    assert_eq!(paid["payment"]["amount_cents"], json!(10_000));
    assert_eq!(
        (
            paid["invoice"]["balance_cents"].clone(),
            paid["invoice"]["status"].clone()
        ),
        (json!(2_100), json!("issued"))
    );
    let response = s.call(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 3_000, "idempotency_key": "p2" }),
    );
    assert_tool_error(&response, "payment_exceeds_balance", 422, 3104);
    assert_eq!(envelope(&response)["param"], json!("amount_cents"));
    assert_eq!(
        envelope(&response)["details"],
        json!({ "amount_cents": 3_000, "balance_cents": 2_100 })
    );
    let settled = s.ok(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 2_100, "idempotency_key": "p3" }),
    );
    assert_eq!(
        (
            settled["invoice"]["balance_cents"].clone(),
            settled["invoice"]["status"].clone()
        ),
        (json!(0), json!("paid"))
    );
    let response = s.call(
        "record_payment",
        json!({ "invoice_id": invoice, "amount_cents": 1, "idempotency_key": "p4" }),
    );
    assert_eq!(envelope(&response)["details"]["balance_cents"], json!(0));
    assert_eq!(payment_rows(&db, &invoice), 2);
    let listed = s.ok("list_payments", json!({ "invoice_id": invoice }));
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        s.ok("get_invoice", json!({ "invoice_id": invoice }))["payments"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    let client = s.ok("get_invoice", json!({ "invoice_id": invoice }))["client_id"].clone();
    let draft = s.draft(json!({ "client_id": client, "lines": [{ "description": "x", "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 }] }));
    let response = s.call(
        "record_payment",
        json!({ "invoice_id": draft, "amount_cents": 1, "idempotency_key": "p5" }),
    );
    assert_tool_error(&response, "invoice_not_issued", 422, 3107);
    let response = s.call(
        "list_payments",
        json!({ "invoice_id": "inv_01900000-0000-7000-8000-000000000000" }),
    );
    assert_tool_error(&response, "invoice_not_found", 404, 3101);
}

#[test]
fn a_client_with_invoices_cannot_be_deleted() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let busy = s.client("Busy SL", Some("B12345674"), None);
    s.simple_draft(&busy, 100);
    let response = s.call("delete_client", json!({ "client_id": busy }));
    assert_tool_error(&response, "client_has_invoices", 422, 3105);
    assert_eq!(envelope(&response)["param"], json!("client_id"));
    assert_eq!(envelope(&response)["details"]["invoice_count"], json!(1));
    let idle = s.client("Idle SL", None, None);
    assert_eq!(
        s.ok("delete_client", json!({ "client_id": idle })),
        json!({ "id": idle, "deleted": true })
    );
    assert_tool_error(
        &s.call("delete_client", json!({ "client_id": idle })),
        "client_not_found",
        404,
        3101,
    );
    let detail = s.ok("get_client", json!({ "client_id": busy }));
    assert_eq!(
        (
            detail["invoice_count"].clone(),
            detail["outstanding_cents"].clone()
        ),
        (json!(1), json!(0))
    );
}

#[test]
fn sending_needs_an_address_and_only_queues_to_the_outbox() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("No Mail SL", Some("B12345674"), None);
    let draft = s.simple_draft(&client, 1_000);
    let response = s.call(
        "send_invoice",
        json!({ "invoice_id": draft, "idempotency_key": "s0" }),
    );
    assert_tool_error(&response, "invoice_not_issued", 422, 3107);
    s.issue(&draft, "2025-01-15", "i1");
    let response = s.call(
        "send_invoice",
        json!({ "invoice_id": draft, "idempotency_key": "s1" }),
    );
    assert_tool_error(&response, "recipient_has_no_email", 422, 3106);
    assert_eq!(envelope(&response)["param"], json!("to"));
    let response = s.call(
        "send_invoice",
        json!({ "invoice_id": draft, "to": "nope", "idempotency_key": "s2" }),
    );
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("to"));
    let sent = s.ok("send_invoice", json!({ "invoice_id": draft, "to": "ap@nomail.example", "message": "Thanks!", "idempotency_key": "s3" }));
    assert_eq!(
        (
            sent["status"].clone(),
            sent["recipient"].clone(),
            sent["number"].clone()
        ),
        (
            json!("queued"),
            json!("ap@nomail.example"),
            json!("F-000001")
        )
    );
    let rows = db.sql_rows("SELECT recipient, subject, body, state FROM outbox");
    assert_eq!(rows.len(), 1, "one outbox row");
    let cell = |i: usize| rows[0][i].clone().expect("not null");
    let (recipient, subject, body, state) = (cell(0), cell(1), cell(2), cell(3));
    assert_eq!(
        (recipient.as_str(), subject.as_str(), state.as_str()),
        ("ap@nomail.example", "Invoice F-000001", "pending")
    );
    assert!(
        body.starts_with("Thanks!\n\nInvoice F-000001") && body.contains("Total: 12.10 EUR"),
        "{body}"
    );
}

#[test]
fn idempotency_keys_are_required_and_well_formed() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    for tool in [
        "issue_invoice",
        "void_invoice",
        "record_payment",
        "send_invoice",
    ] {
        let response = s.call(
            tool,
            json!({ "invoice_id": invoice, "amount_cents": 1, "reason": "because" }),
        );
        assert_error(
            &response,
            -32007,
            "idempotency_key_required",
            400,
            2002,
            false,
        );
        assert_eq!(
            response["error"]["data"]["param"],
            json!("idempotency_key"),
            "{tool}"
        );
    }
    let long = "k".repeat(256);
    for (key, reason) in [
        (json!(""), "empty"),
        (json!(long), "too_long"),
        (json!("clé-1"), "not_printable_ascii"),
        (json!(7), "not_a_string"),
    ] {
        let response = s.call(
            "record_payment",
            json!({ "invoice_id": invoice, "amount_cents": 1, "idempotency_key": key }),
        );
        assert_error(
            &response,
            -32007,
            "idempotency_key_invalid",
            400,
            2003,
            false,
        );
        assert_eq!(
            response["error"]["data"]["details"]["reason"],
            json!(reason)
        );
    }
    let two_keys = s.server.request(
        "tools/call",
        json!({ "name": "record_payment",
        "arguments": { "invoice_id": invoice, "amount_cents": 1, "idempotency_key": "a" },
        "_meta": { "dev.tollgate/idempotencyKey": "b" } }),
    );
    assert_error(
        &two_keys,
        -32007,
        "idempotency_key_invalid",
        400,
        2003,
        false,
    );
    assert_eq!(
        two_keys["error"]["data"]["details"]["reason"],
        json!("conflicting_keys")
    );
    assert_eq!(payment_rows(&db, &invoice), 0, "refused calls pay nothing");
    // The key in `_meta` alone is honoured, and agreeing sources are one key.
    let by_meta = s.server.request("tools/call", json!({ "name": "record_payment",
        "arguments": { "invoice_id": invoice, "amount_cents": 100 }, "_meta": { "dev.tollgate/idempotencyKey": "m-1" } }));
    assert_eq!(by_meta["result"]["isError"], json!(false), "{by_meta}");
    let both = s.server.request(
        "tools/call",
        json!({ "name": "record_payment",
        "arguments": { "invoice_id": invoice, "amount_cents": 100, "idempotency_key": "m-1" },
        "_meta": { "dev.tollgate/idempotencyKey": "m-1" } }),
    );
    assert_eq!(
        both["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true),
        "{both}"
    );
    assert_eq!(payment_rows(&db, &invoice), 1);
}

#[test]
fn a_retried_payment_replays_and_never_pays_twice() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let args =
        json!({ "invoice_id": invoice, "amount_cents": 5_000, "idempotency_key": "pay-7f3a" });
    let first = s.call("record_payment", args.clone());
    assert_eq!(first["result"]["isError"], json!(false), "{first}");
    assert!(
        first["result"]["_meta"]
            .get("dev.tollgate/idempotentReplay")
            .is_none()
    );
    let again = s.call("record_payment", args.clone());
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true),
        "{again}"
    );
    assert_eq!(
        again["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    assert_eq!(again["result"]["content"], first["result"]["content"]);
    assert_eq!(payment_rows(&db, &invoice), 1);

    let mut other = args.clone();
    other["amount_cents"] = json!(6_000);
    let response = s.call("record_payment", other);
    assert_error(
        &response,
        -32007,
        "idempotency_key_reused",
        409,
        3201,
        false,
    );
    let response = s.call(
        "send_invoice",
        json!({ "invoice_id": invoice, "idempotency_key": "pay-7f3a" }),
    );
    assert_error(
        &response,
        -32007,
        "idempotency_key_reused",
        409,
        3201,
        false,
    );
    assert_eq!(payment_rows(&db, &invoice), 1);

    // A business-rule failure is a completed answer too: replayed, not re-run.
    let too_much =
        json!({ "invoice_id": invoice, "amount_cents": 999_999, "idempotency_key": "pay-big" });
    let refused = s.call("record_payment", too_much.clone());
    assert_tool_error(&refused, "payment_exceeds_balance", 422, 3104);
    let replayed = s.call("record_payment", too_much);
    assert_tool_error(&replayed, "payment_exceeds_balance", 422, 3104);
    assert_eq!(
        replayed["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true)
    );

    // Issuing with a repeated key returns the same number, once.
    let client = s.ok("get_invoice", json!({ "invoice_id": invoice }))["client_id"].clone();
    let draft = s.draft(json!({ "client_id": client, "lines": [{ "description": "x", "quantity": 1, "unit_price_cents": 100, "vat_rate": 21 }] }));
    let issue = json!({ "invoice_id": draft, "issue_date": "2025-06-03", "idempotency_key": "issue-again" });
    let first = s.call("issue_invoice", issue.clone());
    let second = s.call("issue_invoice", issue);
    assert_eq!(
        first["result"]["structuredContent"]["number"],
        json!("F-000002")
    );
    assert_eq!(
        second["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    assert_eq!(
        second["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true)
    );
}

#[test]
fn keys_belong_to_their_credential() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let args =
        json!({ "invoice_id": invoice, "amount_cents": 1_000, "idempotency_key": "shared-name" });
    s.ok("record_payment", args.clone());
    let second_key = db.run_json(&[
        "key",
        "create",
        "--name",
        "second agent",
        "--scopes",
        "*",
        "--json",
    ]);
    let mut other = Session::with_token(&db, second_key["token"].as_str().expect("token"));
    let response = other.call("record_payment", args);
    assert!(
        response["result"]["_meta"]
            .get("dev.tollgate/idempotentReplay")
            .is_none(),
        "{response}"
    );
    assert_eq!(
        payment_rows(&db, &invoice),
        2,
        "another credential's key is a different key"
    );
}

/// Sends every request at once (the stdio server runs them concurrently) and collects the
/// responses by id.
fn pipelined(server: &mut StdioServer, requests: &[Value]) -> Vec<Value> {
    for (i, arguments) in requests.iter().enumerate() {
        server.send(
            &json!({ "jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call",
            "params": { "name": "record_payment", "arguments": arguments } }),
        );
    }
    let mut answers = vec![Value::Null; requests.len()];
    for _ in requests {
        let response = server.recv_response();
        let i = response["id"]
            .as_u64()
            .and_then(|id| usize::try_from(id - 1000).ok())
            .expect("id");
        answers[i] = response;
    }
    answers
}

#[test]
fn concurrent_payments_with_one_key_pay_once() {
    const ROUNDS: usize = 12;
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme SL", Some("B12345674"), None);
    let invoices: Vec<String> = (0..ROUNDS)
        .map(|i| {
            let id = s.simple_draft(&client, 10_000);
            s.issue(&id, "2025-06-01", &format!("issue-{i}"));
            id
        })
        .collect();
    let requests: Vec<Value> = invoices
        .iter()
        .enumerate()
        .map(|(i, invoice)| json!({ "invoice_id": invoice, "amount_cents": 4_000, "idempotency_key": format!("concurrent-{i}") }))
        .collect();
    let token = db.admin_key.clone().expect("admin key");
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (requests, barrier) = (requests.clone(), barrier.clone());
            let mut server = StdioServer::start_with_token(&db, Some(&token), &[]);
            server.initialize(VERSION);
            std::thread::spawn(move || {
                barrier.wait();
                pipelined(&mut server, &requests)
            })
        })
        .collect();
    let answers: Vec<Vec<Value>> = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .collect();
    let mut in_use = 0;
    for (i, invoice) in invoices.iter().enumerate() {
        assert_eq!(
            payment_rows(&db, invoice),
            1,
            "round {i}: exactly one payment"
        );
        let pair = [&answers[0][i], &answers[1][i]];
        let ran = pair
            .iter()
            .filter(|r| {
                r["result"]["isError"] == json!(false)
                    && r["result"]["_meta"]
                        .get("dev.tollgate/idempotentReplay")
                        .is_none()
            })
            .count();
        assert_eq!(ran, 1, "round {i}: exactly one call ran: {pair:?}");
        for answer in pair {
            if answer.get("error").is_some() {
                assert_error(answer, -32007, "idempotency_key_in_use", 409, 3202, true);
                in_use += 1;
            } else {
                assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
            }
        }
    }
    eprintln!(
        "{ROUNDS} contested keys: {in_use} answered idempotency_key_in_use, the rest replayed"
    );
}

/// The credential id (public id) inside a `tg_live_<id>_<secret>` token.
fn credential_id(token: &str) -> String {
    token.split('_').nth(2).expect("public id").to_owned()
}

#[test]
fn a_key_held_by_a_running_call_is_in_use_until_its_lease_ends() {
    use tollgate::guards::idempotency::{Claim, Ledger};
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let args = json!({ "invoice_id": invoice, "amount_cents": 500, "idempotency_key": "held" });
    // Another process has claimed the key and is still running (or was killed mid-call).
    let store = tollgate::store::Store::open_database(
        &db.database(),
        &tollgate::store::StoreOptions::default(),
    )
    .expect("open");
    let tools = tollgate::tools::invoicing::tools();
    let spec = tools
        .iter()
        .find(|t| t.spec().name == "record_payment")
        .expect("tool")
        .spec();
    let holder = tollgate::guards::auth::Principal {
        credential_id: credential_id(db.admin_key.as_deref().expect("key")),
        client_id: None,
        scopes: vec!["*".to_owned()],
        mode: tollgate::guards::auth::Mode::Live,
        guard_channel: None,
        installation: tollgate::guards::auth::Mode::Live,
        roles: Vec::new(),
    };
    let map = args.as_object().expect("object").clone();
    let claim = Ledger::new(store.clone(), tollgate::clock::Clock::System).claim(
        &holder,
        spec,
        &map,
        Some("held".to_owned()),
    );
    assert!(
        matches!(claim, Ok(Claim::Fresh(_))),
        "the test holds the key"
    );

    let response = s.call("record_payment", args.clone());
    assert_error(&response, -32007, "idempotency_key_in_use", 409, 3202, true);
    assert_eq!(response["error"]["data"]["retry_after"], json!(1));
    assert_eq!(payment_rows(&db, &invoice), 0);

    // The holder never committed; once its lease has run out the key is free again.
    db.sql(&format!(
        "UPDATE idempotency_keys SET expires_at = {} WHERE key = 'held'",
        crate::util::unix_now() - 1
    ));
    s.ok("record_payment", args.clone());
    let again = s.call("record_payment", args);
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true)
    );
    assert_eq!(payment_rows(&db, &invoice), 1);
}

#[test]
fn export_returns_an_embedded_csv_and_reports_progress() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let client = s.client("Acme, S.L.", Some("B12345674"), None);
    let a = s.simple_draft(&client, 10_000);
    s.issue(&a, "2025-03-01", "a");
    let b = s.simple_draft(&client, 5_000);
    s.issue(&b, "2025-03-31", "b");
    s.ok(
        "void_invoice",
        json!({ "invoice_id": b, "reason": "duplicate", "idempotency_key": "v" }),
    );
    let outside = s.simple_draft(&client, 1);
    s.issue(&outside, "2025-04-01", "c");
    s.simple_draft(&client, 1);

    let response = s.server.request("tools/call", json!({ "name": "export_invoices",
        "arguments": { "from": "2025-03-01", "to": "2025-03-31" }, "_meta": { "progressToken": "exp-1" } }));
    let result = &response["result"];
    assert_eq!(result["isError"], json!(false), "{response}");
    assert_eq!(result["structuredContent"]["count"], json!(2));
    assert_eq!(result["structuredContent"]["total_cents"], json!(18_150));
    let resource = &result["content"][2]["resource"];
    assert_eq!(result["content"][2]["type"], json!("resource"));
    assert_eq!(resource["mimeType"], json!("text/csv"));
    assert_eq!(
        resource["uri"],
        json!("tollgate://exports/invoices-2025-03-01-2025-03-31.csv")
    );
    let csv = resource["text"].as_str().expect("csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "{csv}");
    assert!(rows[0].starts_with("number,issue_date,due_date,status"));
    assert_eq!(
        rows[1],
        "F-000001,2025-03-01,2025-03-31,issued,full,\"Acme, S.L.\",B12345674,EUR,100.00,21.00,0.00,121.00,0.00,"
    );
    assert!(
        rows[2].starts_with("F-000002,2025-03-31,2025-04-30,void,"),
        "{csv}"
    );
    let progress: Vec<&Value> = s
        .server
        .notifications
        .iter()
        .filter(|n| {
            n["method"] == json!("notifications/progress")
                && n["params"]["progressToken"] == json!("exp-1")
        })
        .collect();
    assert_eq!(
        progress.first().map(|n| n["params"]["progress"].clone()),
        Some(json!(0.0))
    );
    assert_eq!(
        progress.last().map(|n| (
            n["params"]["progress"].clone(),
            n["params"]["total"].clone()
        )),
        Some((json!(2.0), json!(2.0)))
    );

    let response = s.call(
        "export_invoices",
        json!({ "from": "2025-04-01", "to": "2025-03-01" }),
    );
    assert_tool_error(&response, "validation_error", 400, 2001);
    assert_eq!(envelope(&response)["param"], json!("to"));
}

#[test]
fn invoices_are_searched_by_status_client_dates_and_overdue() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let acme = s.client("Acme SL", Some("B12345674"), None);
    let other = s.client("Other SL", Some("A58818501"), None);
    let overdue = s.simple_draft(&acme, 100);
    s.ok(
        "update_invoice",
        json!({ "invoice_id": overdue, "due_date": "2025-02-01" }),
    );
    s.issue(&overdue, "2025-01-02", "1");
    let paid = s.simple_draft(&acme, 100);
    s.ok(
        "update_invoice",
        json!({ "invoice_id": paid, "due_date": "2025-02-01" }),
    );
    s.issue(&paid, "2025-01-03", "2");
    s.ok(
        "record_payment",
        json!({ "invoice_id": paid, "amount_cents": 121, "idempotency_key": "p" }),
    );
    let draft = s.simple_draft(&other, 100);

    assert_eq!(
        ids(&s.ok("search_invoices", json!({ "overdue": true }))),
        vec![overdue.clone()]
    );
    let found = s.ok("search_invoices", json!({ "overdue": true }));
    assert_eq!(found["data"][0]["overdue"], json!(true));
    assert_eq!(
        ids(&s.ok("search_invoices", json!({ "status": "paid" }))),
        vec![paid.clone()]
    );
    assert_eq!(
        ids(&s.ok("search_invoices", json!({ "client_id": other }))),
        vec![draft.clone()]
    );
    assert_eq!(
        ids(&s.ok(
            "search_invoices",
            json!({ "date_from": "2025-01-03", "date_to": "2025-12-31" })
        )),
        vec![paid.clone()]
    );
    let page1 = s.ok("search_invoices", json!({ "limit": 2 }));
    assert_eq!(
        (ids(&page1), page1["has_more"].clone()),
        (vec![draft, paid], json!(true))
    );
    let page2 = s.ok(
        "search_invoices",
        json!({ "limit": 2, "starting_after": page1["next_cursor"] }),
    );
    assert_eq!(
        (
            ids(&page2),
            page2["has_more"].clone(),
            page2["next_cursor"].clone()
        ),
        (vec![overdue], json!(false), Value::Null)
    );
    let response = s.call("search_invoices", json!({ "date_from": "01/01/2025" }));
    assert_tool_error(&response, "invalid_format", 400, 2003);
    assert_eq!(envelope(&response)["param"], json!("date_from"));
}

#[test]
fn guides_and_workflows_are_listed_and_readable() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let listed = s.server.request("resources/list", json!({}));
    let uris: BTreeSet<String> = listed["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().expect("uri").to_owned())
        .collect();
    let rules = [
        "full-invoice-tax-id",
        "issue-date-order",
        "issued-invoice-immutable",
        "legal-vat-rates",
        "no-double-void",
        "simplified-invoice-ceiling",
    ];
    for rule in rules {
        let uri = format!("tollgate://guardrails/{rule}");
        assert!(uris.contains(&uri), "{uri} listed");
        let read = s.server.request("resources/read", json!({ "uri": uri }));
        let text = read["result"]["contents"][0]["text"]
            .as_str()
            .expect("markdown");
        assert!(text.contains(&format!("`{rule}`")), "{rule}: {text}");
    }
    let prompts = s.server.request("prompts/list", json!({}));
    let names: BTreeSet<&str> = prompts["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert!(
        names.is_superset(
            &[
                "chase_overdue_invoices",
                "issue_invoice_for_client",
                "register_client_by_tax_id"
            ]
            .into()
        ),
        "{names:?}"
    );
    let got = s.server.request(
        "prompts/get",
        json!({ "name": "register_client_by_tax_id", "arguments": { "tax_id": "B12345675" } }),
    );
    let text = got["result"]["messages"][0]["content"]["text"]
        .as_str()
        .expect("text");
    assert!(
        text.contains("NOT a valid Spanish tax id (checksum mismatch)"),
        "{text}"
    );
    let got = s.server.request(
        "prompts/get",
        json!({ "name": "issue_invoice_for_client", "arguments": { "client": "Acme" } }),
    );
    let messages = got["result"]["messages"].as_array().expect("messages");
    assert!(
        messages[0]["content"]["text"]
            .as_str()
            .expect("text")
            .contains("issue_invoice")
    );
    assert_eq!(
        messages[1]["content"]["resource"]["uri"],
        json!("tollgate://guardrails/legal-vat-rates")
    );
    s.client("Acme Iberia SL", Some("B12345674"), None);
    let completion = s.server.request(
        "completion/complete",
        json!({
        "ref": { "type": "ref/prompt", "name": "issue_invoice_for_client" },
        "argument": { "name": "client", "value": "acme" } }),
    );
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["Acme Iberia SL"])
    );
}

#[test]
fn init_demo_fills_a_realistic_sandbox() {
    let db = TestDb::with_init_args(&["--demo"]);
    let mut s = Session::start(&db);
    let clients = s.ok("search_clients", json!({ "limit": 100 }));
    assert_eq!(clients["data"].as_array().map(Vec::len), Some(5));
    let overdue = s.ok("search_invoices", json!({ "overdue": true }));
    assert_eq!(overdue["data"].as_array().map(Vec::len), Some(1));
    let void = s.ok("search_invoices", json!({ "status": "void" }));
    let voided = s.ok(
        "get_invoice",
        json!({ "invoice_id": void["data"][0]["id"] }),
    );
    let rectifying = s.ok(
        "get_invoice",
        json!({ "invoice_id": voided["rectified_by_id"] }),
    );
    assert_eq!(
        (
            rectifying["number"].clone(),
            rectifying["total_cents"].clone()
        ),
        (
            json!("R-000001"),
            json!(-voided["total_cents"].as_i64().expect("total"))
        )
    );
    let drafts = s.ok("search_invoices", json!({ "status": "draft" }));
    let draft = drafts["data"][0]["id"].as_str().expect("draft").to_owned();
    let issued = s.ok(
        "issue_invoice",
        json!({ "invoice_id": draft, "idempotency_key": "demo-issue" }),
    );
    assert_eq!(issued["number"], json!("F-000005"));
}

/// Needs the guard chain to look up a completed key before the guardrails (see
/// `Ledger::completed_result`): the first void's own effect (the invoice is void) trips the
/// no-double-void guardrail on the retry, which must replay instead.
#[test]
fn a_retried_void_replays_instead_of_tripping_the_guardrail() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let args =
        json!({ "invoice_id": invoice, "reason": "Wrong amount", "idempotency_key": "void-once" });
    let first = s.call("void_invoice", args.clone());
    let again = s.call("void_invoice", args);
    assert_eq!(
        again["result"]["structuredContent"], first["result"]["structuredContent"],
        "{again}"
    );
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true)
    );
}

/// A 2026-07-28 `tools/call` of `record_payment` over HTTP with extra headers.
fn http_payment(
    server: &HttpServer,
    token: &str,
    id: i64,
    arguments: Value,
    extra: &[(&str, &str)],
) -> Value {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "record_payment"),
        ("Authorization", auth.as_str()),
    ];
    headers.extend_from_slice(extra);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "record_payment", "arguments": arguments, "_meta": modern_meta() } });
    let response = server.post_mcp(&headers, &body);
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    response.json()
}

#[test]
fn the_http_idempotency_key_header_is_honoured_bare_or_quoted() {
    let db = TestDb::new();
    let mut s = Session::start(&db);
    let invoice = issued_121(&mut s, "issue");
    let token = db.admin_key.clone().expect("admin key");
    let server = HttpServer::start(&db, &[]);
    let args = json!({ "invoice_id": invoice, "amount_cents": 700 });
    let first = http_payment(
        &server,
        &token,
        1,
        args.clone(),
        &[("Idempotency-Key", "\"pay-h1\"")],
    );
    assert_eq!(first["result"]["isError"], json!(false), "{first}");
    let again = http_payment(
        &server,
        &token,
        2,
        args.clone(),
        &[("Idempotency-Key", "pay-h1")],
    );
    assert_eq!(
        again["result"]["_meta"]["dev.tollgate/idempotentReplay"],
        json!(true),
        "{again}"
    );
    assert_eq!(
        again["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    let mut with_arg = args.clone();
    with_arg["idempotency_key"] = json!("pay-other");
    let conflict = http_payment(
        &server,
        &token,
        3,
        with_arg,
        &[("Idempotency-Key", "pay-h1")],
    );
    assert_error(
        &conflict,
        -32007,
        "idempotency_key_invalid",
        400,
        2003,
        false,
    );
    assert_eq!(
        conflict["error"]["data"]["details"]["reason"],
        json!("conflicting_keys")
    );
    let malformed = http_payment(
        &server,
        &token,
        4,
        args,
        &[("Idempotency-Key", "\"unterminated")],
    );
    assert_error(
        &malformed,
        -32007,
        "idempotency_key_invalid",
        400,
        2003,
        false,
    );
    assert_eq!(
        malformed["error"]["data"]["details"]["reason"],
        json!("malformed_header")
    );
    assert_eq!(payment_rows(&db, &invoice), 1);
}
