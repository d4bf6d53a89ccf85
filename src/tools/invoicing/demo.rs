//! Sample data for a sandbox company (`tollgate init --demo`): clients with valid Spanish
//! tax ids, invoices in every state (paid, overdue, partly paid, voided with its
//! rectifying invoice, simplified, draft) and their payments, dated relative to today so
//! "overdue" means something whenever the demo is created.
//!
//! Everything goes through the same pricing and SQL as the tools, in one transaction; a
//! database that already has clients is left alone.

use super::date::Date;
use super::model::{
    Client, ClientId, Invoice, InvoiceKind, InvoiceStatus, Line, LinePricing, Payment, PaymentId,
    PaymentMethod, Totals,
};
use super::tools::rectifying_for;
use crate::catalog::McpError;
use crate::clock::Clock;
use crate::store::invoicing as db;
use crate::store::{Store, StoreError};
use crate::tools::Book;

/// What the demo created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seeded {
    /// Clients created.
    pub clients: usize,
    /// Invoices created (rectifying ones included).
    pub invoices: usize,
    /// Payments recorded.
    pub payments: usize,
}

/// Why seeding failed.
#[derive(Debug)]
pub enum DemoError {
    /// The database refused a write.
    Store(StoreError),
    /// The database already holds clients; nothing was written.
    NotEmpty,
    /// The sample data broke a rule (a bug in the sample data).
    Invalid(McpError),
}

impl std::fmt::Display for DemoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DemoError::Store(e) => write!(f, "cannot write the demo data: {e}"),
            DemoError::NotEmpty => {
                f.write_str("the database already has clients; demo data not added")
            }
            DemoError::Invalid(e) => write!(f, "the demo data is invalid: {e}"),
        }
    }
}

impl std::error::Error for DemoError {}

impl From<StoreError> for DemoError {
    fn from(e: StoreError) -> Self {
        DemoError::Store(e)
    }
}

impl From<McpError> for DemoError {
    fn from(e: McpError) -> Self {
        DemoError::Invalid(e)
    }
}

/// (name, tax id, e-mail, address).
const CLIENTS: [(&str, Option<&str>, Option<&str>, &str); 5] = [
    (
        "Talleres Mecánicos Ebro S.L.",
        Some("B12345674"),
        Some("facturas@talleresebro.example"),
        "Calle del Ebro 12, 50001 Zaragoza",
    ),
    (
        "Lucía Fernández Ruiz",
        Some("12345678Z"),
        Some("lucia@fernandezdiseno.example"),
        "Calle de Alcalá 200, 28028 Madrid",
    ),
    (
        "Oliver Bennett",
        Some("X1234567L"),
        Some("oliver.bennett@example.com"),
        "Avenida del Puerto 45, 46023 Valencia",
    ),
    (
        "Asociación Cultural La Ribera",
        Some("G12345674"),
        None,
        "Calle Betis 30, 41010 Sevilla",
    ),
    (
        "Frutas del Sur S.A.",
        Some("A58818501"),
        Some("administracion@frutasdelsur.example"),
        "Polígono Mercasevilla, nave 7, 41020 Sevilla",
    ),
];

/// Fills one book of the database with the sample data (`init --demo` fills the live book;
/// the sandbox of test keys can be reset to it).
pub fn seed(store: &Store, book: Book) -> Result<Seeded, DemoError> {
    let mut outcome: Result<Seeded, DemoError> = Err(DemoError::NotEmpty);
    let written = store.in_transaction(|tx| {
        outcome = fill(tx, book);
        match &outcome {
            Ok(_) => Ok(()),
            Err(_) => Err(StoreError::RolledBack),
        }
    });
    match written {
        Ok(()) | Err(StoreError::RolledBack) => outcome,
        Err(e) => Err(DemoError::Store(e)),
    }
}

fn line(
    description: &str,
    quantity: i64,
    unit: i64,
    discount: i64,
    vat: i64,
    withholding: i64,
) -> Result<Line, McpError> {
    let pricing = LinePricing {
        quantity,
        unit_price_cents: unit,
        discount_percent: discount,
        vat_rate: vat,
        withholding_rate: withholding,
    };
    let amounts = pricing.amounts().map_err(|_| McpError::internal())?;
    Ok(Line {
        description: description.to_owned(),
        pricing,
        amounts,
    })
}

/// One sample invoice, issued on `issued` days from today unless it is a draft.
struct Sample {
    client: usize,
    kind: InvoiceKind,
    issued: Option<i64>,
    due_in: i64,
    lines: Vec<Line>,
    paid: Vec<(i64, i64, PaymentMethod)>,
    void_after: Option<i64>,
}

fn samples() -> Result<Vec<Sample>, McpError> {
    Ok(vec![
        Sample {
            client: 0,
            kind: InvoiceKind::Full,
            issued: Some(-75),
            due_in: 30,
            lines: vec![
                line(
                    "Revisión y mantenimiento de flota (10 vehículos)",
                    10,
                    18_000,
                    10,
                    21,
                    0,
                )?,
                line(
                    "Recambios: filtros y pastillas de freno",
                    24,
                    2_350,
                    0,
                    21,
                    0,
                )?,
            ],
            paid: vec![(-50, 0, PaymentMethod::Transfer)],
            void_after: None,
        },
        Sample {
            client: 1,
            kind: InvoiceKind::Full,
            issued: Some(-40),
            due_in: 30,
            lines: vec![
                line("Diseño de identidad corporativa", 1, 120_000, 0, 21, 15)?,
                line("Horas de consultoría de marca", 6, 6_000, 0, 21, 15)?,
            ],
            paid: Vec::new(),
            void_after: None,
        },
        Sample {
            client: 2,
            kind: InvoiceKind::Full,
            issued: Some(-20),
            due_in: 30,
            lines: vec![line(
                "Clases de español (paquete de 10 horas)",
                2,
                25_000,
                5,
                21,
                0,
            )?],
            paid: vec![(-5, 20_000, PaymentMethod::Card)],
            void_after: None,
        },
        Sample {
            client: 0,
            kind: InvoiceKind::Full,
            issued: Some(-15),
            due_in: 30,
            lines: vec![line("Neumáticos (precio equivocado)", 8, 11_000, 0, 21, 0)?],
            paid: Vec::new(),
            void_after: Some(-10),
        },
        Sample {
            client: 3,
            kind: InvoiceKind::Simplified,
            issued: Some(-5),
            due_in: 0,
            lines: vec![line(
                "Catering para la jornada cultural",
                40,
                650,
                0,
                10,
                0,
            )?],
            paid: vec![(-5, 0, PaymentMethod::Cash)],
            void_after: None,
        },
        Sample {
            client: 4,
            kind: InvoiceKind::Full,
            issued: None,
            due_in: 30,
            lines: vec![
                line("Fruta de temporada (cajas de 10 kg)", 120, 1_450, 3, 4, 0)?,
                line("Transporte refrigerado", 1, 18_000, 0, 21, 0)?,
            ],
            paid: Vec::new(),
            void_after: None,
        },
    ])
}

/// Writes the sample data into `book` inside the caller's transaction; refuses a book that
/// already has clients.
pub fn fill(tx: &crate::store::Tx<'_>, book: Book) -> Result<Seeded, DemoError> {
    let existing = db::search_clients(tx, book.as_str(), None, None, 1)?;
    if !existing.is_empty() {
        return Err(DemoError::NotEmpty);
    }
    // Seeding is an operator's command: dated by the time it runs.
    let clock = Clock::System;
    let (now, today) = (clock.unix_secs(), Date::today(&clock));
    let mut seeded = Seeded::default();
    let mut clients = Vec::new();
    for (name, tax_id, email, address) in CLIENTS {
        let client = Client {
            id: ClientId::generate(),
            name: name.to_owned(),
            tax_id: tax_id.map(str::to_owned),
            email: email.map(str::to_owned),
            address: Some(address.to_owned()),
        };
        db::insert_client(tx, book.as_str(), &client, now)?;
        clients.push(client);
        seeded.clients += 1;
    }
    for sample in samples()? {
        let client = &clients[sample.client];
        let invoice = insert_sample(tx, book, client, &sample, (today, now))?;
        seeded.invoices += 1;
        for (days, amount, method) in &sample.paid {
            let amount = if *amount == 0 {
                invoice.totals.total_cents
            } else {
                *amount
            };
            let payment = Payment {
                id: PaymentId::generate(),
                invoice_id: invoice.id.clone(),
                amount_cents: amount,
                currency: invoice.currency.clone(),
                paid_on: today.add_days(*days).to_string(),
                method: *method,
                reference: Some(format!(
                    "DEMO-{}",
                    invoice.number.as_deref().unwrap_or_default()
                )),
            };
            db::insert_payment(tx, book.as_str(), &payment, now)?;
            seeded.payments += 1;
        }
        if let Some(days) = sample.void_after {
            let date = today.add_days(days).to_string();
            let reason = "Wrong unit price on the tyres; reissued with the agreed price.";
            let mut rectifying = rectifying_for(&invoice, reason, date.clone())?;
            rectifying.number = Some(db::next_number(tx, book.as_str(), "R", &date)?);
            db::insert_invoice(tx, book.as_str(), &rectifying, now)?;
            db::mark_void(tx, book.as_str(), &invoice.id, reason, &rectifying.id, now)?;
            seeded.invoices += 1;
        }
    }
    Ok(seeded)
}

fn insert_sample(
    tx: &crate::store::Tx<'_>,
    book: Book,
    client: &Client,
    sample: &Sample,
    (today, now): (Date, i64),
) -> Result<Invoice, DemoError> {
    let amounts: Vec<_> = sample.lines.iter().map(|l| l.amounts).collect();
    let totals = Totals::sum(&amounts).map_err(|_| McpError::internal())?;
    let series = if sample.kind == InvoiceKind::Simplified {
        "S"
    } else {
        "F"
    };
    let issue_date = sample.issued.map(|d| today.add_days(d));
    let mut invoice = Invoice {
        issue_date: issue_date.map(|d| d.to_string()),
        due_date: issue_date.map(|d| d.add_days(sample.due_in).to_string()),
        ..Invoice::new_draft(
            client.id.clone(),
            client.name.clone(),
            sample.kind,
            series.to_owned(),
            sample.lines.clone(),
            totals,
        )
    };
    if let Some(date) = &invoice.issue_date {
        invoice.number = Some(db::next_number(tx, book.as_str(), series, date)?);
        invoice.status = InvoiceStatus::Issued;
        invoice.recipient_name = Some(client.name.clone());
        invoice.recipient_tax_id = client.tax_id.clone();
    }
    db::insert_invoice(tx, book.as_str(), &invoice, now)?;
    Ok(invoice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    #[test]
    fn demo_seeds_every_state_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("demo.db"), &opts).expect("open");
        let seeded = seed(&store, Book::Live).expect("seed");
        assert_eq!(
            seeded,
            Seeded {
                clients: 5,
                invoices: 7,
                payments: 3
            }
        );
        let statuses: Vec<(String, i64)> = store
            .sql_read(|c| {
                let mut stmt = c.prepare(
                    "SELECT status, count(*) FROM invoices GROUP BY status ORDER BY status",
                )?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect::<Result<_, _>>()
            })
            .expect("count");
        let expect = [("draft", 1), ("issued", 3), ("paid", 2), ("void", 1)];
        let expect: Vec<(String, i64)> =
            expect.iter().map(|(s, n)| ((*s).to_owned(), *n)).collect();
        assert_eq!(statuses, expect);
        assert!(matches!(seed(&store, Book::Live), Err(DemoError::NotEmpty)));
        for (_, tax_id, _, _) in CLIENTS {
            let tax_id = tax_id.expect("demo clients have tax ids");
            assert!(
                super::super::taxid::TaxId::parse(tax_id).is_ok(),
                "{tax_id}"
            );
        }
    }
}
