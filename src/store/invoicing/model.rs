//! The invoicing model: the one set of types the invoicing tables are read into and
//! written from, and the invoicing tools work on — opaque ids, the words of kinds,
//! statuses and methods, clients, invoices with their lines and amounts, payments.
//!
//! Plain data and the rules that need nothing else (an invoice's balance, whether it is
//! overdue). How the amounts are computed is `tools::invoicing::money`'s; how each type
//! renders in a tool result is `tools::invoicing::model`'s. Field names are the names of
//! the columns and of the JSON fields: an invoice's taxable base is `subtotal_cents`, a
//! line's is `net_cents`, in the table, the struct and the tool result alike.
//!
//! Ids are a type prefix and a UUID v7 (`inv_0192…`): opaque to callers, time-ordered, and
//! typed so a client id cannot be passed where an invoice id is expected.

use uuid::{Uuid, Variant};

/// Whether `text` is a lowercase, hyphenated UUID v7 (the only form an id carries).
fn is_uuid_v7(text: &str) -> bool {
    Uuid::parse_str(text).is_ok_and(|uuid| {
        uuid.get_version_num() == 7
            && uuid.get_variant() == Variant::RFC4122
            && uuid.hyphenated().to_string() == text
    })
}

/// The JSON Schema `pattern` of an id with `prefix`: what `parse` accepts, no more.
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
            /// A fresh id. Ids made by one process sort in the order they were made
            /// (`Uuid::now_v7` keeps a counter within the millisecond).
            pub fn generate() -> Self {
                Self(format!("{}{}", $prefix, Uuid::now_v7().hyphenated()))
            }

            /// Accepts only a well-formed id of this type.
            #[allow(dead_code)] // not every id type is taken from arguments
            pub fn parse(text: &str) -> Option<Self> {
                text.strip_prefix($prefix)
                    .filter(|rest| is_uuid_v7(rest))
                    .map(|_| Self(text.to_owned()))
            }

            /// Wraps an id read back from the database (or written by a test).
            pub(in crate::store) fn from_db(text: String) -> Self {
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

/// What a line says: quantity, price and rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePricing {
    /// Whole units.
    pub quantity: i64,
    /// Price of one unit in cents (negative on rectifying lines).
    pub unit_price_cents: i64,
    /// Discount on the line, whole percent (0–100).
    pub discount_percent: i64,
    /// VAT rate, whole percent.
    pub vat_rate: i64,
    /// Income-tax withholding rate (IRPF), whole percent.
    pub withholding_rate: i64,
}

/// The amounts of one line, in cents, each rounded once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineAmounts {
    /// `quantity × unit price`.
    pub gross_cents: i64,
    /// The discount taken off `gross`.
    pub discount_cents: i64,
    /// Taxable base: `gross − discount`.
    pub net_cents: i64,
    /// VAT on `net`.
    pub vat_cents: i64,
    /// Withholding on `net`.
    pub withholding_cents: i64,
    /// `net + vat − withholding`.
    pub total_cents: i64,
}

/// The totals of an invoice: sums of its lines' rounded amounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Sum of the lines' gross amounts.
    pub gross_cents: i64,
    /// Sum of the lines' discounts.
    pub discount_cents: i64,
    /// Taxable base: sum of the lines' net amounts.
    pub subtotal_cents: i64,
    /// Sum of the lines' VAT.
    pub vat_cents: i64,
    /// Sum of the lines' withholding.
    pub withholding_cents: i64,
    /// Amount due: `subtotal + vat − withholding`.
    pub total_cents: i64,
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
    ) -> Invoice {
        Invoice {
            id: InvoiceId::generate(),
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
        }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_are_prefixed_uuid_v7_and_parse_back() {
        let id = InvoiceId::generate();
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
    fn only_the_canonical_form_of_a_uuid_v7_is_an_id() {
        let canonical = "0192f0c0-0000-7000-8000-000000000000";
        assert!(InvoiceId::parse(&format!("inv_{canonical}")).is_some());
        for other in [
            "0192f0c0000070008000000000000000",              // simple form
            "{0192f0c0-0000-7000-8000-000000000000}",        // braced
            "urn:uuid:0192f0c0-0000-7000-8000-000000000000", // URN
            "0192f0c0-0000-4000-8000-000000000000",          // version 4
            "0192f0c0-0000-7000-c000-000000000000",          // another variant
        ] {
            assert_eq!(InvoiceId::parse(&format!("inv_{other}")), None, "{other}");
        }
    }

    #[test]
    fn ids_from_one_process_sort_in_creation_order() {
        let ids: Vec<String> = (0..500).map(|_| PaymentId::generate().0).collect();
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
