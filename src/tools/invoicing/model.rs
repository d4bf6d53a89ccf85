//! The invoicing domain types: opaque ids, statuses, clients, invoices with their lines,
//! payments, and how each renders in a tool result.
//!
//! Ids are a type prefix and a UUID v7 (`inv_0192…`): opaque to callers, time-ordered, and
//! typed here so a client id cannot be passed where an invoice id is expected.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::money::{LineAmounts, LinePricing, Totals};
use crate::catalog::McpError;

/// The last (millisecond, counter) handed out, so ids made by one process in the same
/// millisecond still sort in creation order (RFC 9562 §6.2, method 1).
static LAST_UUID_TICK: Mutex<(u64, u16)> = Mutex::new((0, 0));

/// A random UUID v7 in its canonical text form.
fn uuid_v7() -> Result<String, McpError> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let (ms, counter) = {
        let mut last = LAST_UUID_TICK.lock().unwrap_or_else(|e| e.into_inner());
        *last = if now_ms > last.0 {
            (now_ms, 0)
        } else if last.1 < 0x0fff {
            (last.0, last.1 + 1)
        } else {
            // Counter exhausted within one millisecond: borrow the next one.
            (last.0 + 1, 0)
        };
        *last
    };
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| {
        tracing::error!(cause = %e, "the OS random generator failed");
        McpError::internal()
    })?;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    b[6] = 0x70 | ((counter >> 8) as u8 & 0x0f);
    b[7] = (counter & 0xff) as u8;
    b[8] = 0x80 | (random[0] & 0x3f);
    b[9..].copy_from_slice(&random[1..]);
    let hex = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// Whether `text` is a lowercase canonical UUID v7.
fn is_uuid_v7(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            14 => c == b'7',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// The JSON Schema `pattern` of an id with `prefix`.
pub fn id_pattern(prefix: &str) -> String {
    format!(
        "^{prefix}[0-9a-f]{{8}}-[0-9a-f]{{4}}-7[0-9a-f]{{3}}-[89ab][0-9a-f]{{3}}-[0-9a-f]{{12}}$"
    )
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// A fresh id.
            pub fn generate() -> Result<Self, McpError> {
                Ok(Self(format!("{}{}", $prefix, uuid_v7()?)))
            }

            /// Accepts only a well-formed id of this type.
            #[allow(dead_code)] // not every id type is taken from arguments
            pub fn parse(text: &str) -> Option<Self> {
                text.strip_prefix($prefix)
                    .filter(|rest| is_uuid_v7(rest))
                    .map(|_| Self(text.to_owned()))
            }

            /// Wraps an id read back from the database.
            #[allow(dead_code)] // not every id type is read back
            pub(crate) fn from_db(text: String) -> Self {
                Self(text)
            }

            /// The text form.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// Id of a client (`cli_…`).
    ClientId,
    "cli_"
);
id_type!(
    /// Id of an invoice (`inv_…`).
    InvoiceId,
    "inv_"
);
id_type!(
    /// Id of a payment (`pay_…`).
    PaymentId,
    "pay_"
);
id_type!(
    /// Id of an outbox message (`out_…`).
    OutboxId,
    "out_"
);

macro_rules! word_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value's word, in declaration order (for schemas).
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            /// The word stored and sent.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $word,)+ }
            }

            /// Parses a word.
            pub fn parse(word: &str) -> Option<Self> {
                match word { $($word => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

word_enum!(
    /// Where an invoice is in its life.
    InvoiceStatus {
        /// Editable working document; no number, no legal effect.
        Draft => "draft",
        /// Numbered legal record awaiting (full) payment.
        Issued => "issued",
        /// Issued and fully paid.
        Paid => "paid",
        /// Cancelled by a rectifying invoice.
        Void => "void",
    }
);

word_enum!(
    /// Which kind of invoice (Spanish Reglamento de facturación, RD 1619/2012).
    InvoiceKind {
        /// Complete invoice (art. 6): needs the recipient's tax id.
        Full => "full",
        /// Simplified invoice (art. 7), up to a legal ceiling.
        Simplified => "simplified",
        /// Rectifying invoice (art. 15), created by voiding another.
        Rectifying => "rectifying",
    }
);

word_enum!(
    /// How a payment was made.
    PaymentMethod {
        /// Bank transfer.
        Transfer => "transfer",
        /// Card.
        Card => "card",
        /// Cash.
        Cash => "cash",
        /// Direct debit.
        DirectDebit => "direct_debit",
        /// Anything else.
        Other => "other",
    }
);

/// A client of the company.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Id.
    pub id: ClientId,
    /// Legal or trade name.
    pub name: String,
    /// Normalised, checksum-valid NIF/NIE/CIF.
    pub tax_id: Option<String>,
    /// Where invoices are sent.
    pub email: Option<String>,
    /// Postal address.
    pub address: Option<String>,
}

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

/// One line of an invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// What was sold.
    pub description: String,
    /// Quantity, price and rates.
    pub pricing: LinePricing,
    /// The computed amounts.
    pub amounts: LineAmounts,
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

/// An invoice. `lines` is empty when loaded as a summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoice {
    /// Id.
    pub id: InvoiceId,
    /// The client billed.
    pub client_id: ClientId,
    /// The client's current name (joined, for people reading results).
    pub client_name: String,
    /// Full, simplified or rectifying.
    pub kind: InvoiceKind,
    /// Life-cycle status.
    pub status: InvoiceStatus,
    /// Numbering series code.
    pub series: String,
    /// `<series>-<000001>`, assigned at issue.
    pub number: Option<String>,
    /// Issue date (planned while a draft).
    pub issue_date: Option<String>,
    /// Payment due date.
    pub due_date: Option<String>,
    /// ISO 4217 code.
    pub currency: String,
    /// Free text printed on the invoice.
    pub notes: Option<String>,
    /// Sums of the lines.
    pub totals: Totals,
    /// Sum of recorded payments.
    pub paid_cents: i64,
    /// Recipient name as it was at issue.
    pub recipient_name: Option<String>,
    /// Recipient tax id as it was at issue.
    pub recipient_tax_id: Option<String>,
    /// For a rectifying invoice: the invoice it cancels.
    pub rectifies_id: Option<InvoiceId>,
    /// For a voided invoice: the rectifying invoice that cancelled it.
    pub rectified_by_id: Option<InvoiceId>,
    /// Why it was voided.
    pub void_reason: Option<String>,
    /// The lines, when loaded in full.
    pub lines: Vec<Line>,
}

impl Invoice {
    /// A new draft in EUR with a fresh id: no number, dates, notes, payments or recipient
    /// snapshot yet. Callers set what differs with struct update syntax.
    pub fn new_draft(
        client_id: ClientId,
        client_name: String,
        kind: InvoiceKind,
        series: String,
        lines: Vec<Line>,
        totals: Totals,
    ) -> Result<Invoice, McpError> {
        Ok(Invoice {
            id: InvoiceId::generate()?,
            client_id,
            client_name,
            kind,
            status: InvoiceStatus::Draft,
            series,
            number: None,
            issue_date: None,
            due_date: None,
            currency: "EUR".to_owned(),
            notes: None,
            totals,
            paid_cents: 0,
            recipient_name: None,
            recipient_tax_id: None,
            rectifies_id: None,
            rectified_by_id: None,
            void_reason: None,
            lines,
        })
    }

    /// Amount still owed (`total − paid`).
    pub fn balance_cents(&self) -> i64 {
        self.totals.total_cents - self.paid_cents
    }

    /// Issued, unpaid and past its due date on `today`.
    pub fn is_overdue(&self, today: &str) -> bool {
        self.status == InvoiceStatus::Issued
            && self.balance_cents() > 0
            && self.due_date.as_deref().is_some_and(|due| due < today)
    }

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

/// A payment received against an invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    /// Id.
    pub id: PaymentId,
    /// The invoice paid.
    pub invoice_id: InvoiceId,
    /// Amount in cents (positive).
    pub amount_cents: i64,
    /// The invoice's currency.
    pub currency: String,
    /// When the money arrived.
    pub paid_on: String,
    /// How.
    pub method: PaymentMethod,
    /// Bank reference or similar.
    pub reference: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_prefixed_uuid_v7_and_parse_back() {
        let id = InvoiceId::generate().expect("id");
        assert!(id.as_str().starts_with("inv_"));
        assert_eq!(InvoiceId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(
            ClientId::parse(id.as_str()),
            None,
            "a client id is not an invoice id"
        );
        let schema = json!({ "type": "string", "pattern": id_pattern("inv_") });
        let validator = jsonschema::validator_for(&schema).expect("pattern compiles");
        assert!(validator.is_valid(&json!(id.as_str())));
        assert_eq!(InvoiceId::parse("inv_123"), None);
        assert_eq!(
            InvoiceId::parse("inv_0192F0C0-0000-7000-8000-000000000000"),
            None
        );
    }

    #[test]
    fn ids_from_one_process_sort_in_creation_order() {
        let ids: Vec<String> = (0..500)
            .map(|_| PaymentId::generate().expect("id").0)
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }

    #[test]
    fn words_round_trip() {
        for word in InvoiceStatus::WORDS {
            assert_eq!(
                InvoiceStatus::parse(word).map(InvoiceStatus::as_str),
                Some(*word)
            );
        }
        assert_eq!(
            PaymentMethod::parse("direct_debit"),
            Some(PaymentMethod::DirectDebit)
        );
        assert_eq!(InvoiceKind::parse("proforma"), None);
    }
}
