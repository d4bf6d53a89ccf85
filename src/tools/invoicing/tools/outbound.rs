//! Tools that hand invoices to the outside: `send_invoice` (to the outbox) and
//! `export_invoices` (a CSV of a period, as an embedded resource).
//!
//! No mail ever leaves the machine from tollgate: `send_invoice` writes the message to the
//! `outbox` table, where a mail relay or an integration picks up `pending` rows.

use std::sync::Arc;

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::invoices::load;
use super::{Args, db_failure, output, tool};
use crate::catalog::{ErrorKind, Expect, McpError, Suggestion};
use crate::store::invoicing as db;
use crate::tools::csv;
use crate::tools::invoicing::model::{
    Invoice, InvoiceId, InvoiceStatus, LineAmounts, OutboxId, Totals,
};
use crate::tools::invoicing::money;
use crate::tools::invoicing::schemas as s;
use crate::tools::invoicing::{SCOPE_INVOICES_SEND, SCOPE_REPORTS_GENERATE};
use crate::tools::{Book, Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec};

/// Rows between two progress notifications of an export.
const PROGRESS_EVERY: usize = 50;

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(send_spec(), None, send_invoice),
        tool(export_spec(), None, export_invoices),
    ]
}

fn send_spec() -> ToolSpec {
    ToolSpec {
        name: "send_invoice".into(),
        title: "Send an invoice".into(),
        description: concat!(
            "Queue an issued invoice for e-mail to the client's address (or to `to`). \
                The message goes to tollgate's outbox, from which the company's mail relay \
                delivers it; nothing is sent directly from here. Fails if neither the client nor \
                the call gives an address. Requires an idempotency_key so a retry never sends twice.",
            " ",
            s::reuse_key!()
        ).into(),
        category: Category::Send,
        scope: SCOPE_INVOICES_SEND.into(),
        idempotency: Idempotency::Required,
        input_schema: s::object_with_key(
            json!({
                "invoice_id": s::id("inv_", "The issued invoice to send."),
                "to": { "type": "string", "maxLength": 254,
                        "description": "Recipient address; default: the client's e-mail." },
                "message": s::text(2000, "Text added above the invoice summary."),
            }),
            &["invoice_id"],
            true,
        ),
        output_schema: Some(json!({
            "type": "object",
            "properties": {
                "outbox_id": { "type": "string" },
                "invoice_id": { "type": "string" },
                "number": { "type": "string" },
                "recipient": { "type": "string" },
                "status": { "const": "queued" },
            },
            "required": ["outbox_id", "invoice_id", "number", "recipient", "status"],
        })),
    }
}

fn export_spec() -> ToolSpec {
    ToolSpec {
        name: "export_invoices".into(),
        title: "Export invoices to CSV".into(),
        description: "Export the invoices issued in a period (drafts excluded, voided and \
            rectifying ones included) as CSV for the accountant: one row per invoice with \
            amounts in decimal euros. The CSV comes back as an embedded text/csv resource; \
            send a progressToken to get progress notifications on large periods."
            .into(),
        category: Category::Generate,
        scope: SCOPE_REPORTS_GENERATE.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(
            json!({
                "from": s::date("First issue date included"),
                "to": s::date("Last issue date included"),
                "status": { "type": "string", "enum": ["issued", "paid", "void"] },
            }),
            &["from", "to"],
        ),
        output_schema: Some(json!({
            "type": "object",
            "properties": {
                "from": { "type": "string" },
                "to": { "type": "string" },
                "count": { "type": "integer" },
                "uri": { "type": "string" },
                "mime_type": { "const": "text/csv" },
                "subtotal_cents": { "type": "integer" },
                "vat_cents": { "type": "integer" },
                "withholding_cents": { "type": "integer" },
                "total_cents": { "type": "integer" },
            },
            "required": ["from", "to", "count", "uri", "mime_type", "subtotal_cents",
                         "vat_cents", "withholding_cents", "total_cents"],
        })),
    }
}

fn ensure_sendable(invoice: &Invoice) -> Result<(), McpError> {
    match invoice.status {
        InvoiceStatus::Issued | InvoiceStatus::Paid => Ok(()),
        InvoiceStatus::Draft => Err(McpError::new(ErrorKind::InvoiceNotIssued)
            .param("invoice_id")
            .detail("invoice_id", invoice.id.as_str())
            .detail("status", "draft")
            .suggest(Suggestion::IssueBeforeSending)),
        InvoiceStatus::Void => Err(McpError::new(ErrorKind::InvoiceVoid)
            .param("invoice_id")
            .detail("invoice_id", invoice.id.as_str())
            .detail(
                "rectified_by_id",
                invoice.rectified_by_id.as_ref().map(|i| i.as_str()),
            )),
    }
}

fn message_body(invoice: &Invoice, intro: Option<&str>) -> String {
    let mut body = String::new();
    if let Some(intro) = intro {
        body.push_str(intro);
        body.push_str("\n\n");
    }
    let number = invoice.number.as_deref().unwrap_or_default();
    body.push_str(&format!(
        "Invoice {number}\nIssue date: {}\nDue date: {}\nTotal: {}\nBalance due: {}\n",
        invoice.issue_date.as_deref().unwrap_or_default(),
        invoice.due_date.as_deref().unwrap_or_default(),
        money::display(invoice.totals.total_cents, &invoice.currency),
        money::display(invoice.balance_cents(), &invoice.currency),
    ));
    for line in &invoice.lines {
        body.push_str(&format!(
            "- {} x {} @ {}: {}\n",
            line.pricing.quantity,
            line.description,
            money::display(line.pricing.unit_price_cents, &invoice.currency),
            money::display(line.amounts.total_cents, &invoice.currency),
        ));
    }
    body
}

fn send_invoice(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let to = args.email("to")?;
    let intro = args.text("message");
    ctx.commit(|tx| {
        let invoice = load(tx, ctx.book, &id)?;
        ensure_sendable(&invoice)?;
        let client_email = db::client(tx, ctx.book.as_str(), &invoice.client_id)
            .map_err(db_failure)?
            .and_then(|c| c.email);
        let Some(recipient) = to.clone().or(client_email) else {
            return Err(McpError::new(ErrorKind::RecipientHasNoEmail)
                .param("to")
                .detail("client_id", invoice.client_id.as_str())
                .suggest(Suggestion::AddEmailOrPassTo));
        };
        let number = invoice.number.clone().unwrap_or_default();
        let outbox_id = OutboxId::generate();
        let subject = format!("Invoice {number}");
        let body = message_body(&invoice, intro.as_deref());
        let message = db::OutboxMessage {
            recipient: &recipient,
            subject: &subject,
            body: &body,
        };
        db::insert_outbox(
            tx,
            ctx.book.as_str(),
            &outbox_id,
            &id,
            &message,
            ctx.clock.unix_secs(),
        )
        .map_err(db_failure)?;
        let value = json!({
            "outbox_id": outbox_id.as_str(),
            "invoice_id": id.as_str(),
            "number": number,
            "recipient": recipient,
            "status": "queued",
        });
        Ok(output(
            format!("Invoice {number} queued for {recipient} (outbox {outbox_id})."),
            value,
        ))
    })
}

const CSV_HEADER: &str = "number,issue_date,due_date,status,kind,client,client_tax_id,currency,\
    subtotal,vat,withholding,total,paid,rectifies\n";

fn csv_row(invoice: &Invoice, numbers: &HashMap<InvoiceId, String>) -> String {
    let t = &invoice.totals;
    let name = invoice
        .recipient_name
        .as_deref()
        .unwrap_or(&invoice.client_name);
    let fields = [
        csv::field(invoice.number.as_deref().unwrap_or_default()),
        invoice.issue_date.clone().unwrap_or_default(),
        invoice.due_date.clone().unwrap_or_default(),
        invoice.status.as_str().to_owned(),
        invoice.kind.as_str().to_owned(),
        csv::field(name),
        csv::field(invoice.recipient_tax_id.as_deref().unwrap_or_default()),
        invoice.currency.clone(),
        money::decimal(t.subtotal_cents),
        money::decimal(t.vat_cents),
        money::decimal(t.withholding_cents),
        money::decimal(t.total_cents),
        money::decimal(invoice.paid_cents),
        invoice
            .rectifies_id
            .as_ref()
            .and_then(|id| numbers.get(id))
            .cloned()
            .unwrap_or_default(),
    ];
    let mut row = fields.join(",");
    row.push('\n');
    row
}

/// The invoices of the period, and the numbers of the invoices their rectifying ones cancel.
fn period(
    conn: &crate::store::Conn<'_>,
    book: Book,
    from: &str,
    to: &str,
    status: Option<InvoiceStatus>,
) -> db::DbResult<(Vec<Invoice>, HashMap<InvoiceId, String>)> {
    let invoices = db::invoices_issued_between(conn, book.as_str(), from, to, status)?;
    let mut numbers = HashMap::new();
    for id in invoices.iter().filter_map(|i| i.rectifies_id.as_ref()) {
        if let Some(number) = db::invoice_number(conn, book.as_str(), id)? {
            numbers.insert(id.clone(), number);
        }
    }
    Ok((invoices, numbers))
}

/// The CSV text, reporting progress every [`PROGRESS_EVERY`] rows when asked to.
fn render_csv(
    ctx: &ToolContext<'_>,
    invoices: &[Invoice],
    numbers: &HashMap<InvoiceId, String>,
) -> String {
    let total = invoices.len();
    let as_progress = |n: usize| n as f64;
    ctx.progress(0.0, Some(as_progress(total)), Some("Exporting invoices"));
    let mut csv = String::from(CSV_HEADER);
    for (i, invoice) in invoices.iter().enumerate() {
        csv.push_str(&csv_row(invoice, numbers));
        let done = i + 1;
        if done % PROGRESS_EVERY == 0 || done == total {
            ctx.progress(as_progress(done), Some(as_progress(total)), None);
        }
    }
    csv
}

fn export_invoices(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let from = args
        .date("from")?
        .ok_or_else(|| McpError::missing("from", Expect::Named("date")))?;
    let to = args
        .date("to")?
        .ok_or_else(|| McpError::missing("to", Expect::Named("date")))?;
    if to < from {
        return Err(
            McpError::validation("to", "order", Expect::Named("to_on_or_after_from"))
                .detail("reason", "period_ends_before_it_starts"),
        );
    }
    let status = args.str("status").and_then(InvoiceStatus::parse);
    let (from, to) = (from.to_string(), to.to_string());
    let (invoices, numbers) = ctx
        .store
        .with_conn(|c| period(c, ctx.book, &from, &to, status))
        .map_err(db_failure)?;
    let total = invoices.len();
    let csv = render_csv(ctx, &invoices, &numbers);
    let sums = Totals::sum(
        &invoices
            .iter()
            .map(|i| line_of(&i.totals))
            .collect::<Vec<_>>(),
    )
    .map_err(|_| McpError::internal())?;
    let uri = format!("tollgate://exports/invoices-{from}-{to}.csv");
    let value = json!({
        "from": from,
        "to": to,
        "count": total,
        "uri": uri,
        "mime_type": "text/csv",
        "subtotal_cents": sums.subtotal_cents,
        "vat_cents": sums.vat_cents,
        "withholding_cents": sums.withholding_cents,
        "total_cents": sums.total_cents,
    });
    let summary = format!(
        "Exported {total} invoice(s) issued {from} to {to}: total {}.",
        money::display(sums.total_cents, "EUR"),
    );
    let mut out = output(summary, value);
    out.content.push(json!({
        "type": "resource",
        "resource": { "uri": uri, "mimeType": "text/csv", "text": csv },
    }));
    Ok(out)
}

/// An invoice's totals as one "line", to reuse the checked summation.
fn line_of(t: &Totals) -> LineAmounts {
    LineAmounts {
        gross_cents: t.gross_cents,
        discount_cents: t.discount_cents,
        net_cents: t.subtotal_cents,
        vat_cents: t.vat_cents,
        withholding_cents: t.withholding_cents,
        total_cents: t.total_cents,
    }
}
