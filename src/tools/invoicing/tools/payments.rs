//! Payment tools: `record_payment` and `list_payments`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::invoices::load;
use super::{Args, db_failure, output, page, today, tool};
use crate::catalog::{ErrorKind, Expect, McpError, Suggestion};
use crate::store::invoicing as db;
use crate::tools::invoicing::model::{
    Invoice, InvoiceId, InvoiceStatus, Payment, PaymentId, PaymentMethod,
};
use crate::tools::invoicing::money;
use crate::tools::invoicing::schemas as s;
use crate::tools::invoicing::{SCOPE_INVOICES_READ, SCOPE_PAYMENTS_WRITE};
use crate::tools::{Category, Idempotency, Tool, ToolContext, ToolOutput, ToolSpec};

pub(super) fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(record_spec(), None, record_payment),
        tool(list_spec(), None, list_payments),
    ]
}

fn record_spec() -> ToolSpec {
    ToolSpec {
        name: "record_payment".into(),
        title: "Record a payment".into(),
        description: concat!(
            "Record money received against an issued invoice, in integer cents of \
                the invoice's currency. The amount may not exceed the balance still owed; when the \
                balance reaches zero the invoice becomes paid. Requires an idempotency_key: \
                retrying with the same key never records the payment twice.",
            " ",
            s::reuse_key!()
        )
        .into(),
        category: Category::Write,
        scope: SCOPE_PAYMENTS_WRITE.into(),
        idempotency: Idempotency::Required,
        input_schema: s::object_with_key(
            json!({
                "invoice_id": s::id("inv_", "The invoice paid."),
                "amount_cents": { "type": "integer", "minimum": 1, "maximum": s::MAX_PAYMENT_CENTS,
                                  "description": "Amount received, in cents (121.00 EUR = 12100)." },
                "paid_on": s::date("When the money arrived; default today"),
                "method": { "type": "string", "enum": PaymentMethod::WORDS, "default": "transfer" },
                "reference": s::text(200, "Bank reference or receipt number."),
            }),
            &["invoice_id", "amount_cents"],
            true,
        ),
        output_schema: Some(json!({
            "type": "object",
            "properties": { "payment": s::payment_out(), "invoice": s::invoice_summary_out() },
            "required": ["payment", "invoice"],
        })),
    }
}

fn list_spec() -> ToolSpec {
    let mut p = Map::new();
    p.insert(
        "invoice_id".into(),
        s::id("inv_", "Only this invoice's payments."),
    );
    s::pagination(&mut p, "pay_");
    ToolSpec {
        name: "list_payments".into(),
        title: "List payments".into(),
        description: "List recorded payments newest first, optionally of one invoice. Returns a \
            page {data, has_more, next_cursor}; pass next_cursor as starting_after for the next \
            page."
            .into(),
        category: Category::Read,
        // Payments are part of an invoice's record: reading them needs the invoice read scope.
        scope: SCOPE_INVOICES_READ.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: s::object(Value::Object(p), &[]),
        output_schema: Some(s::page_out(s::payment_out())),
    }
}

/// Why `invoice` cannot take a payment of `amount` cents, if it cannot.
fn payable(invoice: &Invoice, amount: i64) -> Result<(), McpError> {
    match invoice.status {
        InvoiceStatus::Draft => {
            return Err(McpError::new(ErrorKind::InvoiceNotIssued)
                .param("invoice_id")
                .detail("invoice_id", invoice.id.as_str())
                .detail("status", "draft")
                .suggest(Suggestion::IssueFirst));
        }
        InvoiceStatus::Void => {
            return Err(McpError::new(ErrorKind::InvoiceVoid)
                .param("invoice_id")
                .detail("invoice_id", invoice.id.as_str())
                .detail(
                    "rectified_by_id",
                    invoice.rectified_by_id.as_ref().map(InvoiceId::as_str),
                ));
        }
        InvoiceStatus::Issued | InvoiceStatus::Paid => {}
    }
    let balance = invoice.balance_cents();
    if amount > balance {
        return Err(McpError::new(ErrorKind::PaymentExceedsBalance)
            .param("amount_cents")
            .detail("amount_cents", amount)
            .detail("balance_cents", balance.max(0)));
    }
    Ok(())
}

fn record_payment(
    ctx: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let id = args.id("invoice_id", InvoiceId::parse)?;
    let amount = args
        .int("amount_cents")
        .ok_or_else(|| McpError::missing("amount_cents", Expect::Cents))?;
    let paid_on = args
        .date("paid_on")?
        .map_or_else(|| today(ctx.clock), |d| d.to_string());
    let method = args
        .str("method")
        .and_then(PaymentMethod::parse)
        .unwrap_or(PaymentMethod::Transfer);
    ctx.commit(|tx| {
        let mut invoice = load(tx, ctx.book, &id)?;
        payable(&invoice, amount)?;
        let payment = Payment {
            id: PaymentId::generate(),
            invoice_id: id.clone(),
            amount_cents: amount,
            currency: invoice.currency.clone(),
            paid_on: paid_on.clone(),
            method,
            reference: args.text("reference"),
        };
        db::insert_payment(tx, ctx.book.as_str(), &payment, ctx.clock.unix_secs()).map_err(db_failure)?;
        invoice.paid_cents += amount;
        if invoice.balance_cents() <= 0 {
            invoice.status = InvoiceStatus::Paid;
        }
        let summary = format!(
            "Recorded {} on invoice {}; balance now {} ({}).",
            money::display(amount, &invoice.currency),
            invoice.number.as_deref().unwrap_or_default(),
            money::display(invoice.balance_cents(), &invoice.currency),
            invoice.status.as_str()
        );
        let value =
            json!({ "payment": payment.to_json(), "invoice": invoice.to_json(false, &today(ctx.clock)) });
        Ok(output(summary, value))
    })
}

fn list_payments(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let invoice = args.opt_id("invoice_id", InvoiceId::parse)?;
    let after = args.opt_id("starting_after", PaymentId::parse)?;
    let limit = args.limit();
    let rows = ctx
        .store
        .with_conn(|c| {
            if let Some(id) = &invoice
                && db::invoice(c, ctx.book.as_str(), id)?.is_none()
            {
                return Ok(None);
            }
            Ok(Some(db::payments(
                c,
                ctx.book.as_str(),
                invoice.as_ref(),
                after.as_ref(),
                limit + 1,
            )?))
        })
        .map_err(db_failure)?
        .ok_or_else(|| {
            super::not_found(
                ErrorKind::InvoiceNotFound,
                "invoice_id",
                invoice.as_ref().map_or("", InvoiceId::as_str),
            )
        })?;
    let value = page(rows, limit, |p| p.id.as_str(), Payment::to_json);
    let count = value["data"].as_array().map_or(0, Vec::len);
    Ok(output(format!("{count} payment(s)."), value))
}
