//! The invoicing tables on both engines: every test runs on SQLite, and on PostgreSQL too
//! when `TOLLGATE_TEST_POSTGRES` names a server.

use super::model::{
    Client, ClientId, Invoice, InvoiceId, InvoiceKind, InvoiceStatus, Line, LineAmounts,
    LinePricing, OutboxId, Payment, PaymentId, PaymentMethod, Totals,
};
use super::*;
use crate::store::testing::stores;
use crate::store::{Store, Tx};

const LIVE: &str = "live";
const TEST: &str = "test";

fn cli(id: &str) -> ClientId {
    ClientId::from_db(id.to_owned())
}

fn inv(id: &str) -> InvoiceId {
    InvoiceId::from_db(id.to_owned())
}

fn out(id: &str) -> OutboxId {
    OutboxId::from_db(id.to_owned())
}

fn a_client(id: &str, name: &str, tax_id: Option<&str>) -> Client {
    Client {
        id: cli(id),
        name: name.into(),
        tax_id: tax_id.map(Into::into),
        email: Some(format!(
            "{}@example.com",
            name.to_lowercase().replace(' ', ".")
        )),
        address: None,
    }
}

fn a_line(description: &str, unit_price_cents: i64) -> Line {
    let net = 2 * unit_price_cents;
    Line {
        description: description.into(),
        pricing: LinePricing {
            quantity: 2,
            unit_price_cents,
            discount_percent: 0,
            vat_rate: 21,
            withholding_rate: 0,
        },
        amounts: LineAmounts {
            gross_cents: net,
            discount_cents: 0,
            net_cents: net,
            vat_cents: net * 21 / 100,
            withholding_cents: 0,
            total_cents: net + net * 21 / 100,
        },
    }
}

fn totals(subtotal: i64) -> Totals {
    Totals {
        gross_cents: subtotal,
        discount_cents: 0,
        subtotal_cents: subtotal,
        vat_cents: subtotal * 21 / 100,
        withholding_cents: 0,
        total_cents: subtotal + subtotal * 21 / 100,
    }
}

fn a_draft(id: &str, client: &Client, lines: Vec<Line>) -> Invoice {
    let subtotal = lines.iter().map(|l| l.amounts.net_cents).sum();
    Invoice {
        id: inv(id),
        notes: Some("first".into()),
        series: "A".into(),
        ..Invoice::new_draft(
            client.id.clone(),
            client.name.clone(),
            InvoiceKind::Full,
            String::new(),
            lines,
            totals(subtotal),
        )
    }
}

fn write<T>(store: &Store, f: impl FnOnce(&Tx<'_>) -> DbResult<T>) -> T {
    store.in_transaction(f).expect("write")
}

fn read<T>(store: &Store, f: impl FnOnce(&Conn<'_>) -> DbResult<T>) -> T {
    store.with_conn(f).expect("read")
}

/// Issues draft `inv` of `book` on `date` with the series' next number; gives it.
fn issue(store: &Store, book: &str, draft: &mut Invoice, date: &str) -> String {
    write(store, |tx| {
        draft.number = Some(next_number(tx, book, &draft.series, date)?);
        draft.issue_date = Some(date.into());
        draft.due_date = Some("2026-02-01".into());
        draft.recipient_name = Some(draft.client_name.clone());
        mark_issued(tx, book, draft, 200)
    });
    draft.status = InvoiceStatus::Issued;
    draft.number.clone().expect("number")
}

fn ids(rows: &[Invoice]) -> Vec<&str> {
    rows.iter().map(|r| r.id.as_str()).collect()
}

#[test]
fn clients_are_created_found_searched_updated_and_deleted() {
    for scratch in stores() {
        let store = &scratch.store;
        let acme = a_client("cli_1", "ACME Corp", Some("B12345678"));
        let bolt = a_client("cli_2", "Bolt 100%", None);
        let cog = a_client("cli_3", "Cog_works", Some("B87654321"));
        write(store, |tx| {
            for c in [&acme, &bolt, &cog] {
                insert_client(tx, LIVE, c, 100)?;
            }
            insert_client(tx, TEST, &a_client("cli_9", "Sandbox", None), 100)
        });
        assert_eq!(
            read(store, |c| client(c, LIVE, &cli("cli_1"))),
            Some(acme.clone())
        );
        assert_eq!(read(store, |c| client(c, TEST, &cli("cli_1"))), None);
        assert_eq!(
            read(store, |c| client_with_tax_id(c, LIVE, "B87654321")),
            Some(cli("cli_3"))
        );
        assert_eq!(
            read(store, |c| client_with_tax_id(c, TEST, "B87654321")),
            None
        );

        let search = |query: Option<&str>, after: Option<&str>, limit: usize| -> Vec<String> {
            let after = after.map(cli);
            read(store, |c| {
                search_clients(c, LIVE, query, after.as_ref(), limit)
            })
            .into_iter()
            .map(|c| c.id.to_string())
            .collect()
        };
        assert_eq!(search(None, None, 10), ["cli_3", "cli_2", "cli_1"]);
        assert_eq!(search(None, None, 2), ["cli_3", "cli_2"]);
        assert_eq!(search(None, Some("cli_2"), 2), ["cli_1"]);
        // ASCII case is ignored on both engines; `%` and `_` are literal.
        assert_eq!(search(Some("acme"), None, 10), ["cli_1"]);
        assert_eq!(search(Some("b1234"), None, 10), ["cli_1"]);
        assert_eq!(search(Some("100%"), None, 10), ["cli_2"]);
        assert_eq!(search(Some("g_w"), None, 10), ["cli_3"]);
        assert_eq!(search(Some("g%w"), None, 10), Vec::<String>::new());
        assert_eq!(search(Some("bolt.100"), None, 10), ["cli_2"]);

        let renamed = Client {
            name: "Acme Holdings".into(),
            address: Some("Calle Mayor 1".into()),
            ..acme.clone()
        };
        write(store, |tx| update_client(tx, LIVE, &renamed, 300));
        assert_eq!(
            read(store, |c| client(c, LIVE, &cli("cli_1"))),
            Some(renamed)
        );
        assert_eq!(
            read(store, |c| client_activity(c, LIVE, &cli("cli_1"))),
            (0, 0)
        );
        write(store, |tx| delete_client(tx, LIVE, &cli("cli_2")));
        assert_eq!(read(store, |c| client(c, LIVE, &cli("cli_2"))), None);
        assert_eq!(search(None, None, 10), ["cli_3", "cli_1"]);
        assert_eq!(read(store, company_country), "ES", "before `init`");
    }
}

#[test]
fn invoices_are_drafted_issued_and_voided_with_gapless_numbers() {
    for scratch in stores() {
        let store = &scratch.store;
        let acme = a_client("cli_1", "Acme", None);
        let mut draft = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
        write(store, |tx| {
            insert_client(tx, LIVE, &acme, 100)?;
            insert_invoice(tx, LIVE, &draft, 100)
        });
        assert_eq!(
            read(store, |c| invoice(c, LIVE, &inv("inv_1"))),
            Some(draft.clone())
        );
        assert_eq!(read(store, |c| invoice(c, TEST, &inv("inv_1"))), None);

        draft.lines = vec![a_line("Design", 1500), a_line("Build", 500)];
        draft.totals = totals(4000);
        draft.notes = None;
        write(store, |tx| save_draft(tx, LIVE, &draft, 150));
        assert_eq!(
            read(store, |c| invoice(c, LIVE, &inv("inv_1"))),
            Some(draft.clone())
        );
        assert_eq!(
            read(store, |c| invoice_number(c, LIVE, &inv("inv_1"))),
            None
        );
        assert_eq!(read(store, |c| series_last_issue_date(c, LIVE, "A")), None);

        let mut second = a_draft("inv_2", &acme, vec![a_line("Support", 300)]);
        let mut third = a_draft("inv_3", &acme, vec![a_line("Hosting", 100)]);
        let doomed = a_draft("inv_4", &acme, vec![a_line("Typo", 1)]);
        write(store, |tx| {
            insert_invoice(tx, LIVE, &second, 160)?;
            insert_invoice(tx, LIVE, &third, 160)?;
            insert_invoice(tx, LIVE, &doomed, 160)
        });
        assert_eq!(issue(store, LIVE, &mut draft, "2026-01-10"), "A-000001");
        assert_eq!(issue(store, LIVE, &mut second, "2026-01-10"), "A-000002");
        assert_eq!(issue(store, LIVE, &mut third, "2026-01-12"), "A-000003");
        assert_eq!(
            read(store, |c| series_last_issue_date(c, LIVE, "A")),
            Some("2026-01-12".into())
        );
        // A number taken in a transaction that rolls back is not used up.
        let rolled_back = store.in_transaction(|tx| {
            next_number(tx, LIVE, "A", "2026-01-13")?;
            Err::<(), _>(StoreError::RolledBack)
        });
        assert!(matches!(rolled_back, Err(StoreError::RolledBack)));
        // The series keeps its latest date even when handed an earlier one.
        assert_eq!(
            write(store, |tx| next_number(tx, LIVE, "A", "2026-01-01")),
            "A-000004"
        );
        assert_eq!(
            read(store, |c| series_last_issue_date(c, LIVE, "A")),
            Some("2026-01-12".into())
        );
        // Each book and each series numbers on its own.
        assert_eq!(
            write(store, |tx| next_number(tx, TEST, "A", "2026-01-01")),
            "A-000001"
        );
        assert_eq!(
            write(store, |tx| next_number(tx, LIVE, "B", "2026-01-01")),
            "B-000001"
        );
        assert_eq!(
            read(store, |c| invoice_number(c, LIVE, &inv("inv_2"))),
            Some("A-000002".into())
        );
        assert_eq!(
            read(store, |c| invoice(c, LIVE, &inv("inv_1"))),
            Some(draft.clone())
        );

        write(store, |tx| delete_draft(tx, LIVE, &inv("inv_1")));
        assert!(
            read(store, |c| invoice(c, LIVE, &inv("inv_1"))).is_some(),
            "issued stays"
        );
        write(store, |tx| delete_draft(tx, LIVE, &inv("inv_4")));
        assert_eq!(read(store, |c| invoice(c, LIVE, &inv("inv_4"))), None);

        let rectifying = Invoice {
            kind: InvoiceKind::Rectifying,
            status: InvoiceStatus::Issued,
            number: Some("R-000001".into()),
            issue_date: Some("2026-01-20".into()),
            rectifies_id: Some(inv("inv_2")),
            ..a_draft("inv_5", &acme, vec![a_line("Refund", 300)])
        };
        write(store, |tx| {
            insert_invoice(tx, LIVE, &rectifying, 400)?;
            mark_void(tx, LIVE, &inv("inv_2"), "wrong amount", &inv("inv_5"), 400)
        });
        let voided = read(store, |c| invoice(c, LIVE, &inv("inv_2"))).expect("voided");
        assert_eq!(voided.status, InvoiceStatus::Void);
        assert_eq!(voided.void_reason.as_deref(), Some("wrong amount"));
        assert_eq!(voided.rectified_by_id, Some(inv("inv_5")));
        assert_eq!(voided.number.as_deref(), Some("A-000002"));

        let search = |filter: InvoiceFilter<'_>, after: Option<&str>, limit: usize| {
            let after = after.map(inv);
            read(store, |c| {
                search_invoices(c, LIVE, &filter, after.as_ref(), limit)
            })
        };
        let all = search(InvoiceFilter::default(), None, 10);
        assert_eq!(ids(&all), ["inv_5", "inv_3", "inv_2", "inv_1"]);
        assert!(
            all.iter().all(|i| i.lines.is_empty()),
            "summaries have no lines"
        );
        assert_eq!(
            ids(&search(InvoiceFilter::default(), Some("inv_3"), 1)),
            ["inv_2"]
        );
        let only = |status| InvoiceFilter {
            status: Some(status),
            ..InvoiceFilter::default()
        };
        assert_eq!(ids(&search(only(InvoiceStatus::Void), None, 10)), ["inv_2"]);
        assert_eq!(
            ids(&search(only(InvoiceStatus::Issued), None, 10)),
            ["inv_5", "inv_3", "inv_1"]
        );
        let acme_id = cli("cli_1");
        let dated = InvoiceFilter {
            date_from: Some("2026-01-11".into()),
            date_to: Some("2026-01-12".into()),
            client_id: Some(&acme_id),
            ..InvoiceFilter::default()
        };
        assert_eq!(ids(&search(dated, None, 10)), ["inv_3"]);
        let overdue = InvoiceFilter {
            overdue_on: Some("2026-02-02".into()),
            ..InvoiceFilter::default()
        };
        assert_eq!(ids(&search(overdue, None, 10)), ["inv_3", "inv_1"]);

        let exported = read(store, |c| {
            invoices_issued_between(c, LIVE, "2026-01-01", "2026-01-31", None)
        });
        assert_eq!(ids(&exported), ["inv_1", "inv_2", "inv_3", "inv_5"]);
        let exported = read(store, |c| {
            invoices_issued_between(
                c,
                LIVE,
                "2026-01-11",
                "2026-01-31",
                Some(InvoiceStatus::Issued),
            )
        });
        assert_eq!(ids(&exported), ["inv_3", "inv_5"]);
        assert_eq!(
            read(store, |c| client_activity(c, LIVE, &cli("cli_1"))).0,
            4
        );
    }
}

fn a_payment(id: &str, invoice_id: &str, amount_cents: i64) -> Payment {
    Payment {
        id: PaymentId::from_db(id.to_owned()),
        invoice_id: inv(invoice_id),
        amount_cents,
        currency: "EUR".into(),
        paid_on: "2026-01-15".into(),
        method: PaymentMethod::Transfer,
        reference: Some(format!("ref {id}")),
    }
}

#[test]
fn payments_settle_an_invoice_and_list_newest_first() {
    for scratch in stores() {
        let store = &scratch.store;
        let acme = a_client("cli_1", "Acme", None);
        let mut first = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
        let mut second = a_draft("inv_2", &acme, vec![a_line("Build", 500)]);
        write(store, |tx| {
            insert_client(tx, LIVE, &acme, 100)?;
            insert_invoice(tx, LIVE, &first, 100)?;
            insert_invoice(tx, LIVE, &second, 100)
        });
        issue(store, LIVE, &mut first, "2026-01-10");
        issue(store, LIVE, &mut second, "2026-01-10");
        // 2 000 + 21% = 2 420 and 1 000 + 21% = 1 210.
        assert_eq!(
            read(store, |c| client_activity(c, LIVE, &cli("cli_1"))),
            (2, 3630)
        );
        write(store, |tx| {
            insert_payment(tx, LIVE, &a_payment("pay_1", "inv_1", 420), 300)
        });
        let paid = read(store, |c| invoice(c, LIVE, &inv("inv_1"))).expect("invoice");
        assert_eq!((paid.status, paid.paid_cents), (InvoiceStatus::Issued, 420));
        assert_eq!(
            read(store, |c| client_activity(c, LIVE, &cli("cli_1"))),
            (2, 3210)
        );
        write(store, |tx| {
            insert_payment(tx, LIVE, &a_payment("pay_2", "inv_1", 2000), 301)?;
            insert_payment(tx, LIVE, &a_payment("pay_3", "inv_2", 10), 302)
        });
        let paid = read(store, |c| invoice(c, LIVE, &inv("inv_1"))).expect("invoice");
        assert_eq!((paid.status, paid.paid_cents), (InvoiceStatus::Paid, 2420));
        assert_eq!(
            read(store, |c| client_activity(c, LIVE, &cli("cli_1"))),
            (2, 1200)
        );

        let list = |invoice_id: Option<&str>, after: Option<&str>, limit: usize| {
            let (of, after) = (
                invoice_id.map(inv),
                after.map(|a| PaymentId::from_db(a.into())),
            );
            read(store, |c| {
                payments(c, LIVE, of.as_ref(), after.as_ref(), limit)
            })
            .into_iter()
            .map(|p| p.id.to_string())
            .collect::<Vec<_>>()
        };
        assert_eq!(list(None, None, 10), ["pay_3", "pay_2", "pay_1"]);
        assert_eq!(list(Some("inv_1"), None, 10), ["pay_2", "pay_1"]);
        assert_eq!(list(Some("inv_1"), Some("pay_2"), 10), ["pay_1"]);
        assert_eq!(list(None, Some("pay_3"), 1), ["pay_2"]);
        assert_eq!(
            read(store, |c| payments(c, LIVE, Some(&inv("inv_2")), None, 10)),
            [a_payment("pay_3", "inv_2", 10)]
        );
        assert!(read(store, |c| payments(c, TEST, None, None, 10)).is_empty());
    }
}

fn outbox_states(store: &Store) -> Vec<(String, String, String)> {
    read(store, |c| {
        c.query_all(
            "SELECT book, id, state FROM outbox ORDER BY book, id",
            args![],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    })
}

#[test]
fn the_outbox_queues_live_mail_and_sandboxes_test_mail() {
    for scratch in stores() {
        let store = &scratch.store;
        let acme = a_client("cli_1", "Acme", None);
        let draft = a_draft("inv_1", &acme, vec![a_line("Design", 1000)]);
        let message = OutboxMessage {
            recipient: "acme@example.com",
            subject: "Invoice",
            body: "Attached.",
        };
        write(store, |tx| {
            for book in [LIVE, TEST] {
                insert_client(tx, book, &acme, 100)?;
                insert_invoice(tx, book, &draft, 100)?;
            }
            Ok(())
        });
        let queued = write(store, |tx| {
            Ok([
                insert_outbox(tx, LIVE, &out("out_1"), &inv("inv_1"), &message, 500)?,
                insert_outbox(tx, TEST, &out("out_2"), &inv("inv_1"), &message, 501)?,
            ])
        });
        assert_eq!(queued, [500, 501]);
        assert_eq!(
            outbox_states(store),
            [
                ("live".into(), "out_1".into(), "pending".into()),
                ("test".into(), "out_2".into(), "sandboxed".into()),
            ]
        );
    }
}

/// A live book with every table filled: two clients, a series, an issued invoice with
/// its rectification, a draft, lines, a payment and a queued message.
fn fill_live(store: &Store) {
    let acme = a_client("cli_1", "Acme", Some("B12345678"));
    let bolt = a_client("cli_2", "Bolt", None);
    let mut issued = a_draft(
        "inv_1",
        &acme,
        vec![a_line("Design", 1000), a_line("Build", 10)],
    );
    let draft = a_draft("inv_2", &bolt, vec![a_line("Support", 300)]);
    write(store, |tx| {
        insert_client(tx, LIVE, &acme, 100)?;
        insert_client(tx, LIVE, &bolt, 100)?;
        insert_invoice(tx, LIVE, &issued, 100)?;
        insert_invoice(tx, LIVE, &draft, 100)
    });
    issue(store, LIVE, &mut issued, "2026-01-10");
    let rectifying = Invoice {
        kind: InvoiceKind::Rectifying,
        status: InvoiceStatus::Issued,
        number: Some("A-000002".into()),
        issue_date: Some("2026-01-11".into()),
        rectifies_id: Some(inv("inv_1")),
        ..a_draft("inv_3", &acme, vec![a_line("Refund", 1)])
    };
    write(store, |tx| {
        assert_eq!(next_number(tx, LIVE, "A", "2026-01-11")?, "A-000002");
        insert_invoice(tx, LIVE, &rectifying, 300)?;
        mark_void(tx, LIVE, &inv("inv_1"), "wrong client", &inv("inv_3"), 300)?;
        insert_payment(tx, LIVE, &a_payment("pay_1", "inv_3", 5), 300)?;
        let message = OutboxMessage {
            recipient: "acme@example.com",
            subject: "Invoice",
            body: "Attached.",
        };
        insert_outbox(tx, LIVE, &out("out_1"), &inv("inv_3"), &message, 300).map(|_| ())
    });
}

fn counts(store: &Store, book: &str) -> Vec<(&'static str, i64)> {
    read(store, |c| book_counts(c, book))
}

#[test]
fn the_sandbox_is_a_copy_of_the_live_book_and_resets_to_empty() {
    for scratch in stores() {
        let store = &scratch.store;
        assert!(read(store, |c| book_is_empty(c, LIVE)));
        fill_live(store);
        let live = vec![
            ("outbox", 1),
            ("payments", 1),
            ("invoice_lines", 4),
            ("invoices", 3),
            ("invoice_series", 1),
            ("clients", 2),
        ];
        assert_eq!(counts(store, LIVE), live);
        assert!(!read(store, |c| book_is_empty(c, LIVE)));
        assert!(read(store, |c| book_is_empty(c, TEST)));

        let copied = write(store, copy_live_into_test);
        assert_eq!(
            copied,
            [
                ("clients", 2),
                ("invoice_series", 1),
                ("invoices", 3),
                ("invoice_lines", 4),
                ("payments", 1),
            ]
        );
        let mut test = live.clone();
        test[0].1 = 0; // the outbox is never copied
        assert_eq!(counts(store, TEST), test);
        for id in ["inv_1", "inv_2", "inv_3"] {
            assert_eq!(
                read(store, |c| invoice(c, TEST, &inv(id))),
                read(store, |c| invoice(c, LIVE, &inv(id)))
            );
        }
        assert_eq!(
            read(store, |c| payments(c, TEST, None, None, 10)),
            read(store, |c| payments(c, LIVE, None, None, 10))
        );
        // Numbering in the sandbox goes on from the live book's.
        assert_eq!(
            write(store, |tx| next_number(tx, TEST, "A", "2026-01-12")),
            "A-000003"
        );
        assert_eq!(
            write(store, |tx| next_number(tx, LIVE, "A", "2026-01-12")),
            "A-000003"
        );

        write(store, clear_test_book);
        assert!(read(store, |c| book_is_empty(c, TEST)));
        assert_eq!(counts(store, LIVE), live);
        assert_eq!(read(store, |c| series_last_issue_date(c, TEST, "A")), None);
        assert_eq!(write(store, copy_live_into_test)[2], ("invoices", 3));
    }
}
