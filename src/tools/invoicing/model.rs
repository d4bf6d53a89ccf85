//! How the invoicing model renders in a tool result, and the model itself for the tools:
//! the types are the store's ([`crate::store::invoicing::model`]), re-exported here so the
//! tools name one model, the one the tables are read into.

use serde_json::{Value, json};

pub use crate::store::invoicing::model::{
    Client, ClientId, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, Line, LineAmounts,
    LinePricing, OutboxId, Payment, PaymentId, PaymentMethod, Totals, id_pattern,
};

impl Client {
    /// The client in a tool result.
    pub fn to_json(&self) -> Value {
        let kind = self
            .tax_id
            .as_deref()
            .and_then(|t| super::taxid::TaxId::parse(t).ok())
            .map(|t| t.kind().as_str());
        json!({
            "id": self.id.as_str(),
            "name": self.name,
            "tax_id": self.tax_id,
            "tax_id_kind": kind,
            "email": self.email,
            "address": self.address,
        })
    }
}

impl Line {
    /// The line in a tool result (`position` is 1-based).
    pub fn to_json(&self, position: usize) -> Value {
        let (p, a) = (&self.pricing, &self.amounts);
        json!({
            "position": position,
            "description": self.description,
            "quantity": p.quantity,
            "unit_price_cents": p.unit_price_cents,
            "discount_percent": p.discount_percent,
            "vat_rate": p.vat_rate,
            "withholding_rate": p.withholding_rate,
            "gross_cents": a.gross_cents,
            "discount_cents": a.discount_cents,
            "net_cents": a.net_cents,
            "vat_cents": a.vat_cents,
            "withholding_cents": a.withholding_cents,
            "total_cents": a.total_cents,
        })
    }
}

impl Invoice {
    /// The invoice in a tool result; lines and the VAT breakdown only when `full`.
    pub fn to_json(&self, full: bool, today: &str) -> Value {
        let t = &self.totals;
        let mut out = json!({
            "id": self.id.as_str(),
            "number": self.number,
            "status": self.status.as_str(),
            "kind": self.kind.as_str(),
            "series": self.series,
            "client_id": self.client_id.as_str(),
            "client_name": self.client_name,
            "issue_date": self.issue_date,
            "due_date": self.due_date,
            "currency": self.currency,
            "gross_cents": t.gross_cents,
            "discount_cents": t.discount_cents,
            "subtotal_cents": t.subtotal_cents,
            "vat_cents": t.vat_cents,
            "withholding_cents": t.withholding_cents,
            "total_cents": t.total_cents,
            "paid_cents": self.paid_cents,
            "balance_cents": self.balance_cents(),
            "overdue": self.is_overdue(today),
            "rectifies_id": self.rectifies_id.as_ref().map(InvoiceId::as_str),
            "rectified_by_id": self.rectified_by_id.as_ref().map(InvoiceId::as_str),
        });
        if full {
            out["notes"] = json!(self.notes);
            out["void_reason"] = json!(self.void_reason);
            out["recipient"] = match &self.recipient_name {
                Some(name) => json!({ "name": name, "tax_id": self.recipient_tax_id }),
                None => Value::Null,
            };
            let lines: Vec<Value> = self
                .lines
                .iter()
                .enumerate()
                .map(|(i, l)| l.to_json(i + 1))
                .collect();
            out["lines"] = Value::Array(lines);
            out["vat_breakdown"] = Value::Array(self.vat_breakdown());
        }
        out
    }

    /// Taxable base and VAT per rate, highest rate first.
    pub fn vat_breakdown(&self) -> Vec<Value> {
        let mut rates: Vec<(i64, i64, i64)> = Vec::new();
        for line in &self.lines {
            let rate = line.pricing.vat_rate;
            match rates.iter_mut().find(|(r, _, _)| *r == rate) {
                Some(entry) => {
                    entry.1 += line.amounts.net_cents;
                    entry.2 += line.amounts.vat_cents;
                }
                None => rates.push((rate, line.amounts.net_cents, line.amounts.vat_cents)),
            }
        }
        rates.sort_by_key(|r| std::cmp::Reverse(r.0));
        rates
            .into_iter()
            .map(|(rate, base, vat)| json!({ "vat_rate": rate, "base_cents": base, "vat_cents": vat }))
            .collect()
    }
}

impl Payment {
    /// The payment in a tool result.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id.as_str(),
            "invoice_id": self.invoice_id.as_str(),
            "amount_cents": self.amount_cents,
            "currency": self.currency,
            "paid_on": self.paid_on,
            "method": self.method.as_str(),
            "reference": self.reference,
        })
    }
}
