//! Guided workflows as MCP prompts: each tells the model which tools to call, in which
//! order, with which keys, and what to do with the errors it may meet.
//!
//! - `issue_invoice_for_client` — find or register the client, draft, review, issue, send;
//! - `register_client_by_tax_id` — validate the tax id, avoid duplicates, create;
//! - `chase_overdue_invoices` — list overdue invoices and queue reminders.
//!
//! The prompts read the store for what makes the text concrete (the overdue count,
//! client-name completions); they never write. Each declares what it reads, so the guards
//! charge and check it as the read tool serving the same data
//! ([`DataAccess`]):
//!
//! | read | data | as |
//! |---|---|---|
//! | `prompts/get chase_overdue_invoices` | overdue count and total owed | `search_invoices` (`invoices:read`) |
//! | `completion/complete issue_invoice_for_client.client` | client names, matched on name, tax id or e-mail | `search_clients` (`clients:read`) |
//!
//! Everything else is text built from the arguments (the tax id check is a checksum, not a
//! lookup) and needs only authentication.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::date::Date;
use super::guardrails::LEGAL_VAT_RATES_RULE;
use super::money;
use super::taxid::TaxId;
use super::{SCOPE_CLIENTS_READ, SCOPE_INVOICES_READ};
use crate::clock::Clock;
use crate::store::Store;
use crate::store::invoicing::{self as db, InvoiceFilter};
use crate::tools::{Book, DataAccess, Prompt, PromptArgument, PromptSpec};

/// Most completion values offered for a client name.
const MAX_COMPLETIONS: usize = 20;
/// Most overdue invoices counted into the chase prompt.
const MAX_OVERDUE_COUNTED: usize = 1_000;

type RenderFn = fn(&Store, &Clock, Book, &Map<String, Value>) -> Vec<Value>;
type CompleteFn = fn(&Store, Book, &str, &str) -> Vec<String>;

struct Workflow {
    spec: PromptSpec,
    store: Store,
    clock: Clock,
    render: RenderFn,
    complete: CompleteFn,
}

impl Prompt for Workflow {
    fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    fn messages(&self, book: Book, args: &Map<String, Value>) -> Vec<Value> {
        (self.render)(&self.store, &self.clock, book, args)
    }

    fn complete(&self, book: Book, argument: &str, value: &str) -> Vec<String> {
        (self.complete)(&self.store, book, argument, value)
    }
}

/// The invoicing workflows, reading `store`; "today" is the date of `clock`.
pub fn all(store: Store, clock: Clock) -> Vec<Arc<dyn Prompt>> {
    vec![
        Arc::new(Workflow {
            spec: issue_spec(),
            store: store.clone(),
            clock: clock.clone(),
            render: render_issue,
            complete: complete_client,
        }),
        Arc::new(Workflow {
            spec: register_spec(),
            store: store.clone(),
            clock: clock.clone(),
            render: render_register,
            complete: |_, _, _, _| Vec::new(),
        }),
        Arc::new(Workflow {
            spec: chase_spec(),
            store,
            clock,
            render: render_chase,
            complete: complete_tone,
        }),
    ]
}

/// What reading clients needs: the guards of `search_clients`.
const READS_CLIENTS: DataAccess = DataAccess {
    scope: SCOPE_CLIENTS_READ,
    as_tool: "search_clients",
};
/// What reading invoices needs: the guards of `search_invoices`.
const READS_INVOICES: DataAccess = DataAccess {
    scope: SCOPE_INVOICES_READ,
    as_tool: "search_invoices",
};

fn argument(name: &'static str, description: &'static str, required: bool) -> PromptArgument {
    PromptArgument {
        name,
        description,
        required,
        completes_from: None,
    }
}

fn arg<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn user_text(text: String) -> Value {
    json!({ "role": "user", "content": { "type": "text", "text": text } })
}

fn issue_spec() -> PromptSpec {
    PromptSpec {
        name: "issue_invoice_for_client",
        title: "Issue an invoice for a client",
        description: "Find (or register) the client, draft the invoice, review it, issue it and \
            optionally send it, with idempotency keys on every step that cannot be undone.",
        reads: None,
        arguments: vec![
            PromptArgument {
                completes_from: Some(READS_CLIENTS),
                ..argument("client", "The client's name or tax id.", true)
            },
            argument(
                "items",
                "What to bill (free text: items, quantities, prices).",
                false,
            ),
            argument(
                "send",
                "\"yes\" to e-mail the invoice after issuing it.",
                false,
            ),
        ],
    }
}

fn render_issue(_: &Store, _: &Clock, _: Book, args: &Map<String, Value>) -> Vec<Value> {
    let client = arg(args, "client").unwrap_or("the client");
    let items = arg(args, "items").unwrap_or("ask the user what to bill");
    let send = arg(args, "send").is_some_and(|s| s.eq_ignore_ascii_case("yes"));
    let mut steps = format!(
        "Issue an invoice for {client:?}. Items: {items}.\n\n\
         1. Call search_clients with query {client:?}. If several match, ask which one; if \
         none, ask for the tax id and register it (create_client).\n\
         2. Call create_invoice with the client_id and one line per item: quantity (whole \
         units), unit_price_cents (integer cents before VAT: 12.50 EUR = 1250), vat_rate (a \
         legal rate, see the embedded guide) and withholding_rate only for professional \
         services subject to IRPF. Use kind \"simplified\" only for consumers without tax id \
         and totals up to 400.00 EUR with VAT.\n\
         3. Show the user the draft's lines and totals (get_invoice) and ask for confirmation; \
         fix it with update_invoice if needed.\n\
         4. Call issue_invoice with the invoice_id and a new idempotency_key (a UUID). If the \
         call fails with a network error, retry with the SAME key; never issue twice.\n"
    );
    if send {
        steps.push_str(
            "5. Call send_invoice with the invoice_id and another new idempotency_key. If the \
             client has no e-mail, ask for it and add it with update_client.\n",
        );
    }
    steps.push_str(
        "\nIf a call is refused with mcp_guardrail_violation, read the resource at \
         error.data.guardrail_uri, explain it to the user and correct the arguments. Amounts \
         are always integer cents; dates are YYYY-MM-DD.",
    );
    let guide = json!({
        "role": "user",
        "content": { "type": "resource", "resource": {
            "uri": LEGAL_VAT_RATES_RULE.uri(),
            "mimeType": "text/markdown",
            "text": LEGAL_VAT_RATES_RULE.guide,
        }},
    });
    vec![user_text(steps), guide]
}

fn complete_client(store: &Store, book: Book, argument: &str, value: &str) -> Vec<String> {
    if argument != "client" {
        return Vec::new();
    }
    let query = (!value.trim().is_empty()).then(|| value.trim().to_owned());
    let found = store.with_conn(|c| {
        db::search_clients(c, book.as_str(), query.as_deref(), None, MAX_COMPLETIONS)
    });
    match found {
        Ok(clients) => clients.into_iter().map(|c| c.name).collect(),
        Err(e) => {
            tracing::warn!(cause = %e, "client completion failed");
            Vec::new()
        }
    }
}

fn register_spec() -> PromptSpec {
    PromptSpec {
        name: "register_client_by_tax_id",
        title: "Register a client by tax id",
        description: "Check a Spanish NIF/NIE/CIF, make sure the client is not registered \
            already, and create it.",
        reads: None,
        arguments: vec![
            argument("tax_id", "The client's NIF, NIE or CIF.", true),
            argument("name", "The client's legal name, if known.", false),
            argument("email", "Where to send invoices, if known.", false),
        ],
    }
}

fn render_register(_: &Store, _: &Clock, _: Book, args: &Map<String, Value>) -> Vec<Value> {
    let raw = arg(args, "tax_id").unwrap_or_default();
    let check = match TaxId::parse(raw) {
        Ok(id) => format!(
            "tollgate checked it: {} is a valid {} (checksum correct).",
            id,
            id.kind().as_str().to_uppercase()
        ),
        Err(e) => format!(
            "tollgate checked it: {raw:?} is NOT a valid Spanish tax id ({}). Ask the user to \
             re-read it before going on; do not invent one.",
            e.reason().replace('_', " ")
        ),
    };
    let name = arg(args, "name").map_or("ask the user for the legal name".to_owned(), |n| {
        format!("{n:?}")
    });
    let email = arg(args, "email").map_or(
        "ask for it (invoices cannot be sent without one)".to_owned(),
        |e| format!("{e:?}"),
    );
    let text = format!(
        "Register the client with tax id {raw:?}. {check}\n\n\
         1. Call search_clients with query set to the tax id. If a client comes back, it is \
         already registered: show it and stop.\n\
         2. Otherwise call create_client with tax_id, name ({name}) and email ({email}).\n\
         3. If create_client answers tax_id_already_exists, the client exists: use \
         error.data.details.existing_resource_id with get_client instead of creating another.\n\
         4. If it answers invalid_format with param \"tax_id\", the id failed the checksum: \
         ask the user to correct it."
    );
    vec![user_text(text)]
}

fn chase_spec() -> PromptSpec {
    PromptSpec {
        name: "chase_overdue_invoices",
        title: "Chase overdue invoices",
        description: "List the issued invoices whose due date has passed and queue a payment \
            reminder for each (send_invoice with a message), one idempotency key per invoice \
            and day.",
        reads: Some(READS_INVOICES),
        arguments: vec![argument(
            "tone",
            "friendly (default), firm, or final_notice.",
            false,
        )],
    }
}

/// How many invoices are overdue today and how much they owe.
fn overdue_summary(store: &Store, clock: &Clock, book: Book) -> String {
    let today = Date::today(clock).to_string();
    let filter = InvoiceFilter {
        overdue_on: Some(today.clone()),
        ..InvoiceFilter::default()
    };
    match store
        .with_conn(|c| db::search_invoices(c, book.as_str(), &filter, None, MAX_OVERDUE_COUNTED))
    {
        Ok(invoices) => {
            let owed: i64 = invoices.iter().map(|i| i.balance_cents()).sum();
            format!(
                "As of {today} there are {} overdue invoice(s), {} owed in total.",
                invoices.len(),
                money::display(owed, "EUR")
            )
        }
        Err(e) => {
            tracing::warn!(cause = %e, "overdue summary failed");
            format!("As of {today}, list them to see how many there are.")
        }
    }
}

fn render_chase(store: &Store, clock: &Clock, book: Book, args: &Map<String, Value>) -> Vec<Value> {
    let tone = arg(args, "tone").unwrap_or("friendly");
    let today = Date::today(clock);
    let text = format!(
        "Chase the overdue invoices. {}\n\n\
         1. Call search_invoices with overdue: true (limit 100); follow next_cursor while \
         has_more is true.\n\
         2. For each invoice, call send_invoice with its invoice_id, a {tone} reminder in \
         message (number, amount due from balance_cents, days past due_date), and \
         idempotency_key \"chase-<invoice_id>-{today}\" so a retry today never sends twice.\n\
         3. If send_invoice answers recipient_has_no_email, note the client and go on; list \
         those clients at the end so the user can add their e-mail (update_client).\n\
         4. Finish with a table: number, client, balance, days overdue, reminder queued or not.",
        overdue_summary(store, clock, book)
    );
    vec![user_text(text)]
}

fn complete_tone(_: &Store, _: Book, argument: &str, value: &str) -> Vec<String> {
    if argument != "tone" {
        return Vec::new();
    }
    ["friendly", "firm", "final_notice"]
        .iter()
        .filter(|t| t.starts_with(value))
        .map(|t| (*t).to_owned())
        .collect()
}
