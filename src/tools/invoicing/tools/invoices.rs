//! Invoice tools: `search_invoices`, `get_invoice`, `create_invoice`, `update_invoice`,
//! `issue_invoice`, `delete_invoice`, `void_invoice`.
//!
//! Drafts are freely editable. Issuing assigns the next number of the series and freezes the
//! invoice; from then on it is only paid, sent, or voided (which creates the rectifying
//! invoice in series `R`).

use std::sync::Arc;

use crate::store::Conn;
use serde_json::{Map, Value, json};

use super::{Args, db_failure, invalid_format, not_found, output, page, today, tool};
use crate::catalog::{ErrorKind, Expect, McpError, Suggestion};
use crate::clock::Clock;
use crate::store::invoicing::{self as db, InvoiceFilter};
use crate::tools::invoicing::date::Date;
use crate::tools::invoicing::guardrails;
use crate::tools::invoicing::model::{
    ClientId, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, Line, LinePricing, Totals,
};
use crate::tools::invoicing::money;
use crate::tools::invoicing::schemas as s;
use crate::tools::invoicing::{SCOPE_INVOICES_READ, SCOPE_INVOICES_VOID, SCOPE_INVOICES_WRITE};
use crate::tools::{Book, Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec};

/// The series of rectifying invoices (Spanish law wants them in a separate series).
pub const RECTIFYING_SERIES: &str = "R";
/// Default payment term when an invoice is issued without a due date (days; Ley 3/2004).
pub const DEFAULT_PAYMENT_TERM_DAYS: i64 = 30;
/// Most payments `get_invoice` lists (`list_payments` pages through any number).
const MAX_PAYMENTS_SHOWN: usize = 1_000;

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(search_spec(), None, search_invoices),
        tool(get_spec(), None, get_invoice),
        tool(
            create_spec(),
            Some(guardrails::create_invoice),
            create_invoice,
        ),
        tool(
            update_spec(),
            Some(guardrails::update_invoice),
            update_invoice,
        ),
        tool(issue_spec(), Some(guardrails::issue_invoice), issue_invoice),
        tool(
            delete_spec(),
            Some(guardrails::delete_invoice),
            delete_invoice,
        ),
        tool(void_spec(), Some(guardrails::void_invoice), void_invoice),
    ]
}

fn invoice_id_prop(what: &str) -> Value {
    s::id("inv_", what)
}

fn search_spec() -> ToolSpec {
    let mut p = Map::new();
    p.insert("status".into(), s::invoice_status());
    p.insert(
        "client_id".into(),
        s::id("cli_", "Only this client's invoices."),
    );
    p.insert("date_from".into(), s::date("Issued on or after this date"));
    p.insert("date_to".into(), s::date("Issued on or before this date"));
    p.insert(
        "overdue".into(),
        json!({ "type": "boolean", "description": "true: only issued invoices with a balance whose due date has passed." }),
    );
    s::pagination(&mut p, "inv_");
    ToolSpec {
        name: "search_invoices".into(),
        title: "Search invoices".into(),
        description: "List invoices newest first, filtered by status (draft, issued, paid, \
            void), client, issue-date range or overdue. Returns a page {data, has_more, \
            next_cursor} of summaries without lines; pass next_cursor as starting_after for \
            the next page, and call get_invoice for the lines."
            .into(),
        category: Category::Read,
        scope: SCOPE_INVOICES_READ.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(Value::Object(p), &[]),
        output_schema: Some(s::page_out(s::invoice_summary_out())),
    }
}

fn get_spec() -> ToolSpec {
    ToolSpec {
        name: "get_invoice".into(),
        title: "Get an invoice".into(),
        description: "Read one invoice with its lines, VAT breakdown, totals (integer cents), \
            balance and payments."
            .into(),
        category: Category::Read,
        scope: SCOPE_INVOICES_READ.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(
            json!({ "invoice_id": invoice_id_prop("The invoice's id.") }),
            &["invoice_id"],
        ),
        output_schema: Some(s::invoice_detail_out()),
    }
}

fn draft_fields() -> Map<String, Value> {
    let mut p = Map::new();
    p.insert("client_id".into(), s::id("cli_", "The client billed."));
    p.insert("kind".into(), s::invoice_kind());
    p.insert("series".into(), s::series());
    p.insert(
        "issue_date".into(),
        s::date("Planned issue date; default: the day it is issued"),
    );
    p.insert(
        "due_date".into(),
        s::date("Payment due date; default: 30 days after issue"),
    );
    p.insert(
        "notes".into(),
        s::text(2000, "Free text printed on the invoice."),
    );
    p.insert("lines".into(), s::lines());
    p.insert(
        "currency".into(),
        json!({ "type": "string", "enum": s::CURRENCIES, "default": "EUR" }),
    );
    p
}

fn create_spec() -> ToolSpec {
    ToolSpec {
        name: "create_invoice".into(),
        title: "Create a draft invoice".into(),
        description: concat!(
            "Create a draft invoice for a client: lines with quantity, unit price in \
                integer cents, optional discount percent, VAT rate (Spain: 21, 10, 4 or 0) and \
                optional withholding. Totals are computed exactly per line. A draft has no number \
                and no legal effect until issue_invoice; it can be changed with update_invoice.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_INVOICES_WRITE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(
            Value::Object(draft_fields()),
            &["client_id", "lines"],
            false,
        ),
        output_schema: Some(s::invoice_out()),
    }
}

fn update_spec() -> ToolSpec {
    let mut p = draft_fields();
    p.remove("currency");
    p.insert("invoice_id".into(), invoice_id_prop("The draft to change."));
    ToolSpec {
        name: "update_invoice".into(),
        title: "Update a draft invoice".into(),
        description: concat!(
            "Change a draft: client, kind, series, dates, notes, or all its lines \
                (lines replaces the whole list). Fields left out keep their value. Only drafts can \
                change: an issued invoice is fixed (void it instead).",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_INVOICES_WRITE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(Value::Object(p), &["invoice_id"], false),
        output_schema: Some(s::invoice_out()),
    }
}

fn issue_spec() -> ToolSpec {
    ToolSpec {
        name: "issue_invoice".into(),
        title: "Issue an invoice".into(),
        description: concat!(
            "Issue a draft: it gets the next consecutive number of its series (e.g. \
                F-000001) and becomes a legal record that can no longer be edited or deleted. \
                The issue date (default: the draft's planned date, else today) may not be earlier \
                than the series' last one; a full invoice needs the client's tax id. Requires an \
                idempotency_key so a retry never issues twice.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_INVOICES_WRITE.into(),
        idempotency: Idempotency::Required,
        input_schema: s::object_with_key(
            json!({
                "invoice_id": invoice_id_prop("The draft to issue."),
                "issue_date": s::date("Issue date; default: the draft's planned date, else today"),
            }),
            &["invoice_id"],
            true,
        ),
        output_schema: Some(s::invoice_out()),
    }
}

fn delete_spec() -> ToolSpec {
    ToolSpec {
        name: "delete_invoice".into(),
        title: "Delete a draft invoice".into(),
        description: concat!(
            "Delete a draft invoice. Issued, paid or voided invoices are legal \
                records and are never deleted: use void_invoice to cancel an issued one.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Destructive,
        // A draft is a working document: deleting it needs the right to edit invoices, not
        // the right to cancel legal records (`invoices:void`).
        scope: SCOPE_INVOICES_WRITE.into(),
        idempotency: Idempotency::Optional,
        input_schema: s::object_with_key(
            json!({ "invoice_id": invoice_id_prop("The draft to delete.") }),
            &["invoice_id"],
            false,
        ),
        output_schema: Some(s::deleted_out()),
    }
}

fn void_spec() -> ToolSpec {
    ToolSpec {
        name: "void_invoice".into(),
        title: "Void an issued invoice".into(),
        description: concat!(
            "Cancel an issued (or paid) invoice: it becomes void and a rectifying \
                invoice with the negated amounts is issued in series R. A reason is required. An \
                invoice is voided only once, and a rectifying invoice is never voided. Requires an \
                idempotency_key.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Destructive,
        scope: SCOPE_INVOICES_VOID.into(),
        idempotency: Idempotency::Required,
        input_schema: s::object_with_key(
            json!({
                "invoice_id": invoice_id_prop("The issued invoice to void."),
                "reason": json!({ "type": "string", "minLength": 3, "maxLength": 500,
                                  "description": "Why it is voided (printed on the rectifying invoice)." }),
            }),
            &["invoice_id", "reason"],
            true,
        ),
        output_schema: Some(s::void_out()),
    }
}

// ---- Bodies -------------------------------------------------------------------------------------

fn describe(invoice: &Invoice) -> String {
    let label = match &invoice.number {
        Some(number) => format!("Invoice {number}"),
        None => "Draft invoice".to_owned(),
    };
    format!(
        "{label} ({}, {}) for {}: total {}, balance {}, id {}.",
        invoice.status.as_str(),
        invoice.kind.as_str(),
        invoice.client_name,
        money::display(invoice.totals.total_cents, &invoice.currency),
        money::display(invoice.balance_cents(), &invoice.currency),
        invoice.id
    )
}

fn invoice_output(prefix: &str, invoice: &Invoice, clock: &Clock) -> ToolOutput {
    output(
        format!("{prefix}{}", describe(invoice)),
        invoice.to_json(true, &today(clock)),
    )
}

/// Loads an invoice or fails with `invoice_not_found`.
pub(super) fn load(conn: &Conn<'_>, book: Book, id: &InvoiceId) -> Result<Invoice, McpError> {
    db::invoice(conn, book.as_str(), id)
        .map_err(db_failure)?
        .ok_or_else(|| not_found(ErrorKind::InvoiceNotFound, "invoice_id", id.as_str()))
}

fn search_invoices(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let client_id = args.opt_id("client_id", ClientId::parse)?;
    let after = args.opt_id("starting_after", InvoiceId::parse)?;
    let today = today(ctx.clock);
    let filter = InvoiceFilter {
        status: args.str("status").and_then(InvoiceStatus::parse),
        client_id: client_id.as_ref(),
        date_from: args.date("date_from")?.map(|d| d.to_string()),
        date_to: args.date("date_to")?.map(|d| d.to_string()),
        overdue_on: (args.bool("overdue") == Some(true)).then(|| today.clone()),
    };
    let limit = args.limit();
    let rows = ctx
        .store
        .with_conn(|c| {
            db::search_invoices(c, ctx.book.as_str(), &filter, after.as_ref(), limit + 1)
        })
        .map_err(db_failure)?;
    let value = page(rows, limit, |i| i.id.as_str(), |i| i.to_json(false, &today));
    let count = value["data"].as_array().map_or(0, Vec::len);
    Ok(output(format!("{count} invoice(s) found."), value))
}

fn get_invoice(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let (invoice, payments) = ctx
        .store
        .with_conn(|c| {
            let Some(invoice) = db::invoice(c, ctx.book.as_str(), &id)? else {
                return Ok(None);
            };
            let payments = db::payments(c, ctx.book.as_str(), Some(&id), None, MAX_PAYMENTS_SHOWN)?;
            Ok(Some((invoice, payments)))
        })
        .map_err(db_failure)?
        .ok_or_else(|| not_found(ErrorKind::InvoiceNotFound, "invoice_id", id.as_str()))?;
    let mut value = invoice.to_json(true, &today(ctx.clock));
    value["payments"] = payments.iter().map(|p| p.to_json()).collect();
    Ok(output(describe(&invoice), value))
}

/// `series` from the arguments, refusing the reserved rectifying series.
fn series_arg(args: &Map<String, Value>) -> Result<Option<String>, McpError> {
    match args.str("series") {
        Some(RECTIFYING_SERIES) => {
            Err(
                McpError::validation("series", "reserved", Expect::Named("ordinary_series"))
                    .detail("reason", "reserved_for_rectifying_invoices"),
            )
        }
        other => Ok(other.map(str::to_owned)),
    }
}

fn default_series(kind: InvoiceKind) -> &'static str {
    match kind {
        InvoiceKind::Simplified => "S",
        InvoiceKind::Full | InvoiceKind::Rectifying => "F",
    }
}

/// Issue and due dates in order, when both are known.
fn check_due_after_issue(issue: Option<&str>, due: Option<&str>) -> Result<(), McpError> {
    match (issue, due) {
        (Some(issue), Some(due)) if due < issue => {
            Err(
                McpError::validation("due_date", "order", Expect::Named("due_on_or_after_issue"))
                    .detail("reason", "due_date_before_issue_date"),
            )
        }
        _ => Ok(()),
    }
}

/// Re-checks the VAT rates of `lines` inside the transaction (the country might differ from
/// what the guardrail saw only if the company changed in between; cheap to be sure).
fn recheck_vat(conn: &Conn<'_>, lines: &[Line]) -> Result<(), McpError> {
    let country = db::company_country(conn).map_err(db_failure)?;
    for (i, line) in lines.iter().enumerate() {
        guardrails::check_vat_rate(&country, i, line.pricing.vat_rate)?;
    }
    Ok(())
}

fn ensure_client(conn: &Conn<'_>, book: Book, id: &ClientId) -> Result<String, McpError> {
    db::client(conn, book.as_str(), id)
        .map_err(db_failure)?
        .map(|c| c.name)
        .ok_or_else(|| not_found(ErrorKind::ClientNotFound, "client_id", id.as_str()))
}

fn create_invoice(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let client_id = args.id("client_id", ClientId::parse)?;
    let kind = args
        .str("kind")
        .and_then(InvoiceKind::parse)
        .unwrap_or(InvoiceKind::Full);
    let series = series_arg(args)?.unwrap_or_else(|| default_series(kind).to_owned());
    let issue_date = args.date("issue_date")?.map(|d| d.to_string());
    let due_date = args.date("due_date")?.map(|d| d.to_string());
    check_due_after_issue(issue_date.as_deref(), due_date.as_deref())?;
    let Some((lines, totals)) = args.lines()? else {
        return Err(McpError::missing("lines", Expect::Named("lines")));
    };
    ctx.commit(|tx| {
        let client_name = ensure_client(tx, ctx.book, &client_id)?;
        recheck_vat(tx, &lines)?;
        guardrails::check_simplified_ceiling(kind, &totals)?;
        let invoice = Invoice {
            issue_date: issue_date.clone(),
            due_date: due_date.clone(),
            currency: args.str("currency").unwrap_or("EUR").to_owned(),
            notes: args.text("notes"),
            ..Invoice::new_draft(
                client_id.clone(),
                client_name,
                kind,
                series.clone(),
                lines.clone(),
                totals,
            )
        };
        db::insert_invoice(tx, ctx.book.as_str(), &invoice, ctx.clock.unix_secs())
            .map_err(db_failure)?;
        Ok(invoice_output("Created ", &invoice, ctx.clock))
    })
}

/// `invoice_cannot_be_modified` for anything but a draft.
fn ensure_draft(invoice: &Invoice) -> Result<(), McpError> {
    if invoice.status == InvoiceStatus::Draft {
        return Ok(());
    }
    Err(McpError::new(ErrorKind::InvoiceCannotBeModified)
        .param("status")
        .detail("status", invoice.status.as_str())
        .detail("number", invoice.number.clone()))
}

fn update_invoice(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let client_id = args.opt_id("client_id", ClientId::parse)?;
    let series = series_arg(args)?;
    let issue_date = args.date("issue_date")?.map(|d| d.to_string());
    let due_date = args.date("due_date")?.map(|d| d.to_string());
    let new_lines = args.lines()?;
    ctx.commit(|tx| {
        let mut invoice = load(tx, ctx.book, &id)?;
        ensure_draft(&invoice)?;
        if let Some(client_id) = &client_id {
            invoice.client_name = ensure_client(tx, ctx.book, client_id)?;
            invoice.client_id = client_id.clone();
        }
        if let Some(kind) = args.str("kind").and_then(InvoiceKind::parse) {
            invoice.kind = kind;
        }
        invoice.series = series.clone().unwrap_or(invoice.series);
        invoice.issue_date = issue_date.clone().or(invoice.issue_date);
        invoice.due_date = due_date.clone().or(invoice.due_date);
        if args.has("notes") {
            invoice.notes = args.text("notes");
        }
        if let Some((lines, totals)) = &new_lines {
            recheck_vat(tx, lines)?;
            invoice.lines = lines.clone();
            invoice.totals = *totals;
        }
        check_due_after_issue(invoice.issue_date.as_deref(), invoice.due_date.as_deref())?;
        guardrails::check_simplified_ceiling(invoice.kind, &invoice.totals)?;
        db::save_draft(tx, ctx.book.as_str(), &invoice, ctx.clock.unix_secs())
            .map_err(db_failure)?;
        Ok(invoice_output("Updated ", &invoice, ctx.clock))
    })
}

fn issue_invoice(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let requested = args.date("issue_date")?.map(|d| d.to_string());
    ctx.commit(|tx| {
        let mut invoice = load(tx, ctx.book, &id)?;
        ensure_draft(&invoice)?;
        let client = db::client(tx, ctx.book.as_str(), &invoice.client_id)
            .map_err(db_failure)?
            .ok_or_else(McpError::internal)?;
        let issue_date = guardrails::issue_date_for(&invoice, requested.as_deref(), ctx.clock);
        let last = db::series_last_issue_date(tx, ctx.book.as_str(), &invoice.series)
            .map_err(db_failure)?;
        // Guardrails again, inside the transaction that takes the number: two concurrent
        // issues of one series are serialised here, so neither can jump backwards.
        guardrails::check_issue(&invoice, &client, &issue_date, last.as_deref())?;
        let due_date = match invoice.due_date.take() {
            Some(due) => due,
            None => Date::parse(&issue_date)
                .map(|d| d.add_days(DEFAULT_PAYMENT_TERM_DAYS).to_string())
                .ok_or_else(|| {
                    invalid_format(
                        "issue_date",
                        "expected_yyyy_mm_dd",
                        Expect::Named("date"),
                        &issue_date,
                    )
                })?,
        };
        check_due_after_issue(Some(&issue_date), Some(&due_date))?;
        invoice.number = Some(
            db::next_number(tx, ctx.book.as_str(), &invoice.series, &issue_date)
                .map_err(db_failure)?,
        );
        invoice.status = InvoiceStatus::Issued;
        invoice.issue_date = Some(issue_date);
        invoice.due_date = Some(due_date);
        invoice.recipient_name = Some(client.name.clone());
        invoice.recipient_tax_id = client.tax_id.clone();
        db::mark_issued(tx, ctx.book.as_str(), &invoice, ctx.clock.unix_secs())
            .map_err(db_failure)?;
        Ok(invoice_output("Issued ", &invoice, ctx.clock))
    })
}

fn delete_invoice(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    ctx.commit(|tx| {
        let invoice = load(tx, ctx.book, &id)?;
        guardrails::check_deletable(&invoice)?;
        db::delete_draft(tx, ctx.book.as_str(), &id).map_err(db_failure)?;
        Ok(output(
            format!("Deleted draft invoice {id} for {}.", invoice.client_name),
            json!({ "id": id.as_str(), "deleted": true }),
        ))
    })
}

/// The rectifying invoice cancelling `original`: same client and lines with negated prices.
pub(crate) fn rectifying_for(
    original: &Invoice,
    reason: &str,
    issue_date: String,
) -> Result<Invoice, McpError> {
    let lines = original
        .lines
        .iter()
        .map(|line| {
            let pricing = LinePricing {
                unit_price_cents: -line.pricing.unit_price_cents,
                ..line.pricing
            };
            let amounts = pricing.amounts().map_err(|_| McpError::internal())?;
            Ok(Line {
                description: line.description.clone(),
                pricing,
                amounts,
            })
        })
        .collect::<Result<Vec<_>, McpError>>()?;
    let amounts: Vec<_> = lines.iter().map(|l| l.amounts).collect();
    let totals = Totals::sum(&amounts).map_err(|_| McpError::internal())?;
    let number = original.number.as_deref().unwrap_or_default();
    Ok(Invoice {
        status: InvoiceStatus::Issued,
        due_date: Some(issue_date.clone()),
        issue_date: Some(issue_date),
        currency: original.currency.clone(),
        notes: Some(format!("Rectifies invoice {number}: {reason}")),
        recipient_name: original.recipient_name.clone(),
        recipient_tax_id: original.recipient_tax_id.clone(),
        rectifies_id: Some(original.id.clone()),
        ..Invoice::new_draft(
            original.client_id.clone(),
            original.client_name.clone(),
            InvoiceKind::Rectifying,
            RECTIFYING_SERIES.to_owned(),
            lines,
            totals,
        )
    })
}

fn void_invoice(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let reason = args.text("reason").ok_or_else(|| {
        McpError::validation("reason", "blank", Expect::Named("non_blank"))
            .detail("reason", "blank")
    })?;
    ctx.commit(|tx| {
        let mut invoice = load(tx, ctx.book, &id)?;
        guardrails::check_voidable(&invoice)?;
        if invoice.status == InvoiceStatus::Draft {
            return Err(McpError::new(ErrorKind::InvoiceNotIssued)
                .param("invoice_id")
                .detail("invoice_id", invoice.id.as_str())
                .detail("status", "draft")
                .suggest(Suggestion::DeleteTheDraft));
        }
        let last = db::series_last_issue_date(tx, ctx.book.as_str(), RECTIFYING_SERIES)
            .map_err(db_failure)?;
        let date = [Some(today(ctx.clock)), last, invoice.issue_date.clone()]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or_else(|| today(ctx.clock));
        let mut rectifying = rectifying_for(&invoice, &reason, date.clone())?;
        rectifying.number = Some(
            db::next_number(tx, ctx.book.as_str(), RECTIFYING_SERIES, &date).map_err(db_failure)?,
        );
        let now = ctx.clock.unix_secs();
        db::insert_invoice(tx, ctx.book.as_str(), &rectifying, now).map_err(db_failure)?;
        db::mark_void(tx, ctx.book.as_str(), &id, &reason, &rectifying.id, now)
            .map_err(db_failure)?;
        invoice.status = InvoiceStatus::Void;
        invoice.void_reason = Some(reason.clone());
        invoice.rectified_by_id = Some(rectifying.id.clone());
        let today = today(ctx.clock);
        let value = json!({
            "invoice": invoice.to_json(true, &today),
            "rectifying_invoice": rectifying.to_json(true, &today),
        });
        let summary = format!(
            "Voided invoice {} ({}); rectifying invoice {} issued for {}.",
            invoice.number.as_deref().unwrap_or_default(),
            invoice.id,
            rectifying.number.as_deref().unwrap_or_default(),
            money::display(rectifying.totals.total_cents, &rectifying.currency)
        );
        Ok(output(summary, value))
    })
}
