//! What the model reads: the hint of each failure kind is one sentence with the specifics
//! needed to act (the argument and value at fault and what is accepted, the seconds to wait
//! and the bucket, the scope, the plan, the rule and its guide, the replacement tool, the id
//! not found and the tool that finds it), the same over stdio and HTTP, in English and in
//! Spanish, and equal to `data.hint` or to the text of the `isError` result.

use serde_json::{Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, assert_error, assert_tool_error};

const VERSION: &str = "2025-06-18";
const MISSING_INVOICE: &str = "inv_01900000-0000-7000-8000-000000000000";

/// One way of reaching the server: a stdio process or an HTTP session.
enum Wire {
    Stdio(StdioServer),
    Http {
        server: HttpServer,
        token: String,
        session: String,
        next_id: i64,
    },
}

impl Wire {
    fn stdio(db: &TestDb, token: &str) -> Wire {
        let mut server = StdioServer::start_with_token(db, Some(token), &[]);
        server.initialize(VERSION);
        Wire::Stdio(server)
    }

    fn http(db: &TestDb, token: &str) -> Wire {
        let server = HttpServer::start(db, &[]);
        let session = server.open_session(VERSION, token);
        Wire::Http {
            server,
            token: token.to_owned(),
            session,
            next_id: 2,
        }
    }

    /// Both wires of `token`, one after the other.
    fn both(db: &TestDb, token: &str) -> [Wire; 2] {
        [Wire::stdio(db, token), Wire::http(db, token)]
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        match self {
            Wire::Stdio(server) => server.call_tool(tool, arguments),
            Wire::Http {
                server,
                token,
                session,
                next_id,
            } => {
                *next_id += 1;
                let auth = format!("Bearer {token}");
                let body = json!({"jsonrpc": "2.0", "id": *next_id, "method": "tools/call",
                                  "params": {"name": tool, "arguments": arguments}});
                let response = server.post_mcp(
                    &[
                        ("Authorization", auth.as_str()),
                        ("Mcp-Session-Id", session.as_str()),
                        ("MCP-Protocol-Version", VERSION),
                    ],
                    &body,
                );
                assert_eq!(
                    response.status,
                    200,
                    "{}",
                    String::from_utf8_lossy(&response.body)
                );
                match response.header("content-type") {
                    Some(t) if t.starts_with("text/event-stream") => response
                        .sse_messages()
                        .into_iter()
                        .find(|m| m.get("id").is_some())
                        .expect("a response on the stream"),
                    _ => response.json(),
                }
            }
        }
    }

    fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.call(tool, arguments);
        assert_eq!(response["result"]["isError"], json!(false), "{response}");
        response["result"]["structuredContent"].clone()
    }
}

/// A database in `locale` ("en" or "es").
fn db_in(locale: &str) -> TestDb {
    let db = TestDb::new();
    let out = db.run(&["company", "set", "--locale", locale]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    db
}

fn admin(db: &TestDb) -> String {
    db.admin_key.clone().expect("init prints an admin key")
}

/// The hint of a JSON-RPC error response.
fn rpc_hint(response: &Value) -> &str {
    response["error"]["data"]["hint"]
        .as_str()
        .unwrap_or_default()
}

/// The text of an `isError` result, which is also its envelope's hint.
fn result_text(response: &Value) -> &str {
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        response["result"]["_meta"]["dev.tollgate/error"]["hint"],
        json!(text),
        "{response}"
    );
    text
}

/// Runs `check` over stdio and HTTP in both locales.
fn in_both_locales_and_wires(check: impl Fn(&str, &TestDb, &mut Wire)) {
    for locale in ["en", "es"] {
        let db = db_in(locale);
        for mut wire in Wire::both(&db, &admin(&db)) {
            check(locale, &db, &mut wire);
        }
    }
}

fn pick<'a>(locale: &str, en: &'a str, es: &'a str) -> &'a str {
    if locale == "es" { es } else { en }
}

#[test]
fn an_invoice_not_found_names_the_id_and_the_tool_that_finds_it() {
    in_both_locales_and_wires(|locale, _, wire| {
        let response = wire.call("get_invoice", json!({ "invoice_id": MISSING_INVOICE }));
        assert_tool_error(&response, "invoice_not_found", 404, 3101);
        let expected = pick(
            locale,
            "No invoice has the id \"inv_01900000-0000-7000-8000-000000000000\" given in `invoice_id`; find the right one with search_invoices.",
            "Ninguna factura tiene el identificador \"inv_01900000-0000-7000-8000-000000000000\" indicado en `invoice_id`; busque la correcta con search_invoices.",
        );
        assert_eq!(result_text(&response), expected);
    });
}

#[test]
fn a_validation_failure_lists_every_bad_argument_with_what_it_must_be() {
    in_both_locales_and_wires(|locale, _, wire| {
        let response = wire.call(
            "create_invoice",
            json!({ "lines": [{ "description": "Work", "quantity": 1,
                                "unit_price_cents": "12.50", "vat_rate": 21 }],
                    "colour": "blue" }),
        );
        assert_tool_error(&response, "missing_required_field", 400, 2002);
        let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["param"], json!("client_id"), "{response}");
        let errors = envelope["details"]["errors"]
            .as_array()
            .expect("details.errors");
        let params: Vec<&str> = errors.iter().filter_map(|e| e["param"].as_str()).collect();
        assert_eq!(
            params,
            ["client_id", "lines.0.unit_price_cents", "colour"],
            "{response}"
        );
        assert_eq!(errors[1]["reason"], json!("type"));
        assert_eq!(errors[1]["expected"], json!("an integer number of cents"));
        assert_eq!(errors[1]["value"], json!("12.50"));
        let expected = pick(
            locale,
            "Fix these arguments and call again: `client_id` is missing: it must be a client id as returned by search_clients (cli_…); `lines.0.unit_price_cents` (\"12.50\") has the wrong type: it must be an integer number of cents; `colour` is not an argument of this tool: it must be left out (the tool's arguments are client_id, kind, series, issue_date, due_date, notes, lines, currency, idempotency_key).",
            "Corrija estos argumentos y vuelva a llamar: `client_id` falta: debe ser un identificador de cliente como los que devuelve search_clients (cli_…); `lines.0.unit_price_cents` (\"12.50\") tiene un tipo incorrecto: debe ser un número entero de céntimos; `colour` no es un argumento de esta herramienta: debe ser omitido (los argumentos de la herramienta son client_id, kind, series, issue_date, due_date, notes, lines, currency, idempotency_key).",
        );
        assert_eq!(result_text(&response), expected);
    });
}

#[test]
fn a_tax_id_with_a_wrong_check_letter_says_so_and_what_is_accepted() {
    in_both_locales_and_wires(|locale, _, wire| {
        let response = wire.call(
            "create_client",
            json!({ "name": "Ana Pérez", "tax_id": "12345678A" }),
        );
        assert_tool_error(&response, "invalid_format", 400, 2003);
        let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["param"], json!("tax_id"));
        assert_eq!(envelope["details"]["reason"], json!("checksum_mismatch"));
        let expected = pick(
            locale,
            "Fix these arguments and call again: `tax_id` (\"12345678A\") has a control character that does not match its digits: it must be a Spanish NIF (8 digits and a letter), NIE (X, Y or Z, 7 digits and a letter) or CIF (a letter, 7 digits and a control character) whose control character matches its digits.",
            "Corrija estos argumentos y vuelva a llamar: `tax_id` (\"12345678A\") tiene un carácter de control que no corresponde a sus dígitos: debe ser un NIF español (8 dígitos y una letra), NIE (X, Y o Z, 7 dígitos y una letra) o CIF (una letra, 7 dígitos y un carácter de control) cuyo carácter de control corresponda a sus dígitos.",
        );
        assert_eq!(result_text(&response), expected);
    });
}

#[test]
fn a_rate_limit_names_the_bucket_its_limit_and_the_seconds_to_wait() {
    for locale in ["en", "es"] {
        let db = db_in(locale);
        let key = db.create_key("reader", "clients:read", &[]);
        db.limit_per_minute(&key.id, "read", 1);
        for mut wire in Wire::both(&db, &key.token) {
            let mut response = wire.call("search_clients", json!({}));
            if response.get("error").is_none() {
                response = wire.call("search_clients", json!({}));
            }
            assert_error(&response, -32006, "rate_limited", 429, 3001, true);
            let wait = response["error"]["data"]["retry_after"]
                .as_u64()
                .expect("retry_after");
            let expected = match locale {
                "es" => format!(
                    "Demasiadas llamadas: se agotó el límite \"read\" de 1; espere {} antes de volver a llamar.",
                    if wait == 1 {
                        "1 segundo".to_owned()
                    } else {
                        format!("{wait} segundos")
                    }
                ),
                _ => format!(
                    "Too many calls: the \"read\" limit of 1 is used up; wait {} before calling again.",
                    if wait == 1 {
                        "1 second".to_owned()
                    } else {
                        format!("{wait} seconds")
                    }
                ),
            };
            assert_eq!(rpc_hint(&response), expected);
        }
    }
}

#[test]
fn a_missing_scope_is_named_with_the_scopes_held() {
    for locale in ["en", "es"] {
        let db = db_in(locale);
        let key = db.create_key("reader", "invoices:read", &[]);
        for mut wire in Wire::both(&db, &key.token) {
            let response = wire.call("create_client", json!({ "name": "Acme" }));
            assert_error(&response, -32005, "insufficient_scope", 403, 1105, false);
            let expected = pick(
                locale,
                "This tool needs the scope \"clients:write\", and the credential has invoices:read; ask the operator for a credential with \"clients:write\".",
                "Esta herramienta necesita el permiso \"clients:write\", y la credencial tiene invoices:read; pida al operador una credencial con \"clients:write\".",
            );
            assert_eq!(rpc_hint(&response), expected);
        }
    }
}

#[test]
fn a_tool_outside_the_plan_names_the_plan_that_includes_it() {
    for locale in ["en", "es"] {
        let db = db_in(locale);
        assert!(db.run(&["plan", "set", "free"]).status.success());
        for mut wire in Wire::both(&db, &admin(&db)) {
            let response = wire.call(
                "export_invoices",
                json!({ "from": "2026-01-01", "to": "2026-01-31" }),
            );
            assert_error(&response, -32004, "plan_upgrade_required", 403, 1104, false);
            let expected = pick(
                locale,
                "The tool export_invoices is not included in the company's plan \"free\"; the plan \"pro\" includes it, and the account owner can upgrade to it; call another tool meanwhile.",
                "La herramienta export_invoices no está incluida en el plan \"free\" de la empresa; el plan \"pro\" la incluye y el titular de la cuenta puede cambiar a él; mientras tanto, use otra herramienta.",
            );
            assert_eq!(rpc_hint(&response), expected);
        }
    }
}

#[test]
fn the_vat_guardrail_names_the_rate_sent_and_the_legal_ones() {
    in_both_locales_and_wires(|locale, _, wire| {
        let client = wire.ok("create_client", json!({ "name": "Acme SL" }));
        let response = wire.call(
            "create_invoice",
            json!({ "client_id": client["id"], "lines": [
                { "description": "Work", "quantity": 1, "unit_price_cents": 1000, "vat_rate": 21 },
                { "description": "Books", "quantity": 1, "unit_price_cents": 1000, "vat_rate": 7 } ] }),
        );
        assert_error(
            &response,
            -32008,
            "mcp_guardrail_violation",
            422,
            3301,
            false,
        );
        let expected = pick(
            locale,
            "The VAT rate 7 in `lines.1.vat_rate` is not a legal rate in ES; use one of 21, 10, 4, 0 (rule legal-vat-rates, guide tollgate://guardrails/legal-vat-rates).",
            "El tipo de IVA 7 de `lines.1.vat_rate` no es un tipo legal en ES; use uno de 21, 10, 4, 0 (regla legal-vat-rates, guía tollgate://guardrails/legal-vat-rates).",
        );
        assert_eq!(rpc_hint(&response), expected);
    });
}

#[test]
fn idempotency_hints_say_to_reuse_the_key_for_a_retry_and_pick_a_new_one_otherwise() {
    in_both_locales_and_wires(|locale, _, wire| {
        let response = wire.call("issue_invoice", json!({ "invoice_id": MISSING_INVOICE }));
        assert_error(
            &response,
            -32007,
            "idempotency_key_required",
            400,
            2002,
            false,
        );
        let expected = pick(
            locale,
            "issue_invoice cannot be undone, so it needs an idempotency key: pass `idempotency_key` with a new value for this operation (for example a UUID), and send the same value again if you retry it.",
            "issue_invoice no se puede deshacer, así que necesita una clave de idempotencia: envíe `idempotency_key` con un valor nuevo para esta operación (por ejemplo un UUID) y repita el mismo valor si la reintenta.",
        );
        assert_eq!(rpc_hint(&response), expected);

        let key = format!("void-{locale}-{}", std::process::id());
        let first = wire.call(
            "void_invoice",
            json!({ "invoice_id": MISSING_INVOICE, "reason": "typo", "idempotency_key": key }),
        );
        assert_tool_error(&first, "invoice_not_found", 404, 3101);
        let response = wire.call(
            "send_invoice",
            json!({ "invoice_id": MISSING_INVOICE, "idempotency_key": key }),
        );
        assert_error(
            &response,
            -32007,
            "idempotency_key_reused",
            409,
            3201,
            false,
        );
        let expected = pick(
            locale,
            "This `idempotency_key` was already used for another call (first with void_invoice): if you are retrying that same operation, send exactly its arguments again; for a new operation, pick a new key.",
            "Este `idempotency_key` ya se usó en otra llamada (primero con void_invoice): si reintenta esa misma operación, envíe exactamente sus argumentos; para una operación nueva, elija una clave nueva.",
        );
        assert_eq!(rpc_hint(&response), expected);
    });
}

#[test]
fn retired_and_unknown_tools_name_the_tool_and_what_to_call() {
    in_both_locales_and_wires(|locale, _, wire| {
        let response = wire.call("list_invoices", json!({}));
        assert_error(&response, -32602, "tool_retired", 410, 1006, false);
        let expected = pick(
            locale,
            "The tool \"list_invoices\" was retired; call search_invoices instead.",
            "La herramienta \"list_invoices\" se retiró; llame a search_invoices en su lugar.",
        );
        assert_eq!(rpc_hint(&response), expected);
        let response = wire.call("create_invoices", json!({}));
        assert_error(&response, -32602, "unknown_tool", 404, 1005, false);
        let expected = pick(
            locale,
            "No tool is named \"create_invoices\"; call tools/list to see the tools you can use.",
            "Ninguna herramienta se llama \"create_invoices\"; llame a tools/list para ver las disponibles.",
        );
        assert_eq!(rpc_hint(&response), expected);
    });
}

#[test]
fn tollgate_errors_prints_the_templates_in_both_locales() {
    let db = TestDb::new();
    let entries = db.run_json(&["errors", "--format", "json"]);
    let rate = entries
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["code"] == "rate_limited")
        .expect("rate_limited");
    assert_eq!(
        rate["hint"]["en"],
        json!(
            "Too many calls: the {bucket:q} limit of {limit} is used up; wait {retry_after:seconds} before calling again."
        )
    );
    let guardrail = entries
        .as_array()
        .expect("a list")
        .iter()
        .find(|e| e["code"] == "mcp_guardrail_violation")
        .expect("guardrail");
    assert!(
        guardrail["subcodes"]["vat_rate_not_allowed"]["es"].is_string(),
        "{guardrail}"
    );
}

#[test]
fn a_long_list_of_bad_arguments_shows_five_and_counts_the_rest() {
    in_both_locales_and_wires(|locale, _, wire| {
        let mut args = json!({ "name": "Acme" });
        for i in 1..=8 {
            args[format!("extra_{i}")] = json!(i);
        }
        let response = wire.call("create_client", args);
        assert_tool_error(&response, "validation_error", 400, 2001);
        let envelope = &response["result"]["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["param"], json!("extra_1"), "{response}");
        assert_eq!(envelope["details"]["reason"], json!("unexpected_argument"));
        assert_eq!(
            envelope["details"]["errors"].as_array().map(Vec::len),
            Some(8)
        );
        let text = result_text(&response);
        let (start, end) = match locale {
            "es" => (
                "Los argumentos no cumplen el esquema de entrada de la herramienta: `extra_1` no es un argumento de esta herramienta: debe ser omitido (los argumentos de la herramienta son ",
                "; y 3 más.",
            ),
            _ => (
                "The arguments do not match the tool's input schema: `extra_1` is not an argument of this tool: it must be left out (the tool's arguments are ",
                "; and 3 more.",
            ),
        };
        assert!(text.starts_with(start) && text.ends_with(end), "{text}");
        assert_eq!(text.matches("extra_").count(), 5, "{text}");
    });
}
