//! The copy on both engines: SQLite to SQLite always, SQLite to PostgreSQL when
//! `TOLLGATE_TEST_POSTGRES` names a server; and the table list against both schemas.

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};

use super::checksum::hash_cell;
use super::transfer::tables_with_rows;
use super::*;
use crate::store::sql::{Owned, args};
use crate::store::testing::{Scratch, stores};

/// A fresh SQLite store (the source of every copy here).
fn sqlite_source() -> Scratch {
    stores().swap_remove(0)
}

/// A row in every table, with a rectification chain (an invoice voided by a rectifying
/// invoice, itself voided by a second), a blob, a real and NULLs.
fn fill(store: &Store) {
    store
        .in_transaction(|tx| {
            tx.batch(
                "INSERT INTO server_secrets VALUES
                     ('request_state', x'000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1fff', 1700000000);
                 UPDATE plans SET hourly_call_limit = 777, excluded_tools = '[\"export_invoices\"]'
                     WHERE slug = 'pro';
                 INSERT INTO plans (slug, name, rank) VALUES ('custom', 'Custom', 9);
                 INSERT INTO company VALUES (1, 'Acme SL', 'B12345674', 'custom', 'es', 'ES', 'test', 1700000001);
                 INSERT INTO oauth_clients VALUES ('agentapp', 'Agent app', '$argon2id$v=19$c', '[\"invoices:read\"]', 50, 1700000002, NULL);
                 INSERT INTO credentials (public_id, kind, mode, name, secret_hash, scopes, client_id,
                     expires_at, created_at, revoked_at, last_used_at, read_per_minute,
                     previous_secret_hash, previous_secret_expires_at, guard_channel)
                   VALUES ('Abcdef012', 'api_key', 'live', 'admin', '$argon2id$v=19$a', '[\"*\"]', NULL,
                     NULL, 1700000003, NULL, 1700000100, 30, '$argon2id$v=19$old', 1700009999, 'tool_result'),
                          ('Tok0000001', 'oauth_access', 'live', 'token', 'sha-hash', '[]', 'agentapp',
                     1700090000, 1700000004, NULL, NULL, NULL, NULL, NULL, NULL),
                          ('abc00000x', 'api_key', 'test', 'Ümlaut', '$argon2id$v=19$z', '[]', NULL,
                     NULL, 1700000005, 1700000006, NULL, NULL, NULL, NULL, NULL);
                 INSERT INTO users VALUES ('u0123456789abcdef01234567', 'https://idp.example.com',
                     'alice', 'Alice', 'portal', 1700000007, 1700000008, NULL, 5, NULL, NULL, NULL, NULL);
                 INSERT INTO rate_counters VALUES ('cred', 'Abcdef012:read', 1700000040, 3),
                     ('cred', 'Abcdef012:read', 1700000100, 1), ('plan', 'company', 1699999200, 12);
                 INSERT INTO idempotency_keys VALUES
                     ('Abcdef012', 'k-1', 'create_client', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
                      'completed', NULL, '{\"content\":[]}', 1700000010, 1700086410),
                     ('Abcdef012', 'k-2', 'create_client', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',
                      'in_flight', 'node-1', NULL, 1700000011, 1700086411);
                 INSERT INTO audit_log (id, at, request_id, credential_id, client_id, tool, outcome,
                     duration_us, transport, calls, source, backend, entry) VALUES
                     (5, 1700000000123, 'r1', 'Abcdef012', NULL, 'search_clients', 'ok', 812, 'stdio', 1, NULL, NULL, NULL),
                     (9, 1700000000456, 'r2', NULL, NULL, 'tools/call', 'invalid_token', 3, 'http', 4, '127.0.0.1', 'crm', 'InvalidToken');
                 INSERT INTO tool_pins VALUES ('wh', 'lookup', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', '{\"name\":\"lookup\"}',
                     'approved', 1700000030, 1700000030, 'first use'),
                     ('wh', 'lookup', 'bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', '{\"name\":\"lookup\",\"description\":\"x\"}',
                     'pending', 1700000040, NULL, NULL);
                 INSERT INTO approvals VALUES ('apr_1', 'Abcdef012', 'record_payment',
                     'cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc', 'k1', 'large',
                     '{\"amount_cents\":2000000}', 0, 'approved', 1700000050000, 1700086450000,
                     1700000060000, 'cli:ops', NULL);
                 INSERT INTO faults VALUES (3, 'search_clients', NULL, 'timeout', 0.25, 2, NULL, 1700000020),
                     (7, 'create_client', 'Abcdef012', 'rate_limited', 1.0, NULL, 30, 1700000021);
                 INSERT INTO clients VALUES ('live', 'cli_1', 'Client One', 'B12345674', 'a@example.com', NULL, 1, 2),
                     ('test', 'cli_1', 'Sandbox One', NULL, NULL, 'Calle 1', 3, 4);
                 INSERT INTO invoice_series VALUES ('live', 'F', 1, '2026-01-10'), ('live', 'R', 2, '2026-01-12');
                 INSERT INTO invoices (book, id, client_id, kind, status, series, number, issue_date,
                     currency, gross_cents, discount_cents, subtotal_cents, vat_cents,
                     withholding_cents, total_cents, paid_cents, rectifies_id, void_reason,
                     created_at, updated_at)
                   VALUES ('live', 'inv_c', 'cli_1', 'full', 'issued', 'F', 'F-000001', '2026-01-10',
                     'EUR', 100, 0, 100, 21, 0, 121, 0, NULL, NULL, 1, 1),
                          ('live', 'inv_b', 'cli_1', 'rectifying', 'issued', 'R', 'R-000001', '2026-01-11',
                     'EUR', -100, 0, -100, -21, 0, -121, 0, 'inv_c', NULL, 2, 2),
                          ('live', 'inv_a', 'cli_1', 'rectifying', 'issued', 'R', 'R-000002', '2026-01-12',
                     'EUR', 100, 0, 100, 21, 0, 121, 0, 'inv_b', NULL, 3, 3),
                          ('live', 'inv_d', 'cli_1', 'full', 'draft', 'F', NULL, NULL,
                     'EUR', 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 4, 4);
                 UPDATE invoices SET status = 'void', void_reason = 'typo', rectified_by_id = 'inv_b'
                     WHERE id = 'inv_c';
                 UPDATE invoices SET status = 'void', void_reason = 'again', rectified_by_id = 'inv_a'
                     WHERE id = 'inv_b';
                 INSERT INTO invoice_lines VALUES ('live', 'inv_c', 1, 'Work', 1, 100, 0, 21, 0, 100, 0, 100, 21, 0, 121),
                     ('live', 'inv_c', 2, 'More', 2, 0, 0, 21, 0, 0, 0, 0, 0, 0, 0);
                 INSERT INTO payments VALUES ('live', 'pay_1', 'inv_a', 5, 'EUR', '2026-01-13', 'transfer', NULL, 5);
                 INSERT INTO outbox VALUES ('live', 'out_1', 'inv_a', 'a@example.com', 'Invoice', 'Hi', 'delivered', 6),
                     ('live', 'out_2', 'inv_a', 'a@example.com', 'Invoice', 'Again', 'pending', 7);
                 INSERT INTO http_sessions VALUES ('5f1c0e9a-session', 'key:Abcdef012', '2025-06-18',
                     '{\"elicitation\":{}}', 'info', 1700000000500, 1700000000900);
                 INSERT INTO oauth_registrations VALUES ('dcr_1', NULL, 'Host', NULL,
                     '[\"http://127.0.0.1/cb\"]', '[\"authorization_code\"]', 'none', 'native',
                     'http:127.0.0.1', 1700000030, NULL);
                 INSERT INTO oauth_requests (id, csrf, client_id, redirect_uri, code_challenge,
                     resource, created_at, expires_at) VALUES ('req_1', 'c', 'dcr_1',
                     'http://127.0.0.1/cb', 'ch', 'http://t/mcp', 1700000031, 1700000631);
                 INSERT INTO oauth_grants VALUES ('g_1', 'u0123456789abcdef01234567', 'Alice',
                     'dcr_1', 'Host', '[\"invoices:read\"]', 1700000032, 1700000032, NULL, NULL);
                 INSERT INTO oauth_codes VALUES ('h1', 'g_1', 'dcr_1', 'http://127.0.0.1/cb', 'ch',
                     '[]', 'http://t/mcp', 1700000092, 1700000033, 'f_1');
                 INSERT INTO oauth_families VALUES ('f_1', 'g_1', 'dcr_1', '[]', 'http://t/mcp',
                     1700000033, 1702592033, NULL, NULL);
                 INSERT INTO oauth_tokens VALUES ('h2', 'access', 'f_1', 1700000033, 1700000933,
                     NULL, NULL, NULL), ('h3', 'refresh', 'f_1', 1700000033, 1702592033, NULL,
                     NULL, NULL);",
            )
        })
        .expect("fill the source");
}

/// The rows [`fill`] leaves in each table, in [`TABLES`] order.
const FILLED: &[(&str, u64)] = &[
    ("server_secrets", 1),
    ("plans", 5),
    ("company", 1),
    ("oauth_clients", 1),
    ("credentials", 3),
    ("users", 1),
    ("rate_counters", 3),
    ("idempotency_keys", 2),
    ("audit_log", 2),
    ("tool_pins", 2),
    ("approvals", 1),
    ("faults", 2),
    ("clients", 2),
    ("invoice_series", 2),
    ("invoices", 4),
    ("invoice_lines", 2),
    ("payments", 1),
    ("outbox", 2),
    ("http_sessions", 1),
    ("oauth_registrations", 1),
    ("oauth_requests", 1),
    ("oauth_grants", 1),
    ("oauth_codes", 1),
    ("oauth_families", 1),
    ("oauth_tokens", 2),
];

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn the_table_list_is_the_sqlite_schema() {
    let scratch = sqlite_source();
    let conn_tables: BTreeSet<String> = scratch
        .store
        .with_conn(|c| {
            c.query_all(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
                args![],
                |row| row.get(0),
            )
        })
        .expect("tables")
        .into_iter()
        .collect();
    let listed: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
    assert_eq!(conn_tables, listed, "every table is copied, and only those");
    for table in TABLES {
        let columns: Vec<(String, String, i64)> = scratch
            .store
            .with_conn(|c| {
                c.query_all(
                    "SELECT name, type, pk FROM pragma_table_info(?1) ORDER BY cid",
                    args![table.name],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
            })
            .expect("columns");
        let found: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
        assert_eq!(found, names(table.columns), "columns of {}", table.name);
        let mut key: Vec<&(String, String, i64)> = columns.iter().filter(|c| c.2 > 0).collect();
        key.sort_by_key(|c| c.2);
        let key: Vec<(String, bool)> = key.iter().map(|c| (c.0.clone(), c.1 == "TEXT")).collect();
        let listed: Vec<(String, bool)> = table
            .key
            .iter()
            .map(|k| (k.name.to_owned(), k.text))
            .collect();
        assert_eq!(key, listed, "primary key of {}", table.name);
    }
}

#[test]
fn the_table_list_is_the_postgres_schema() {
    let Some(scratch) = stores().into_iter().nth(1) else {
        eprintln!("TOLLGATE_TEST_POSTGRES is not set: the PostgreSQL schema is not checked");
        return;
    };
    let store = &scratch.store;
    let tables: BTreeSet<String> = store
        .with_conn(|c| {
            c.query_all(
                "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name <> 'tollgate_schema'",
                args![],
                |row| row.get(0),
            )
        })
        .expect("tables")
        .into_iter()
        .collect();
    let listed: BTreeSet<String> = TABLES.iter().map(|t| t.name.to_owned()).collect();
    assert_eq!(tables, listed, "every table is copied, and only those");
    for table in TABLES {
        let columns: Vec<(String, String, bool)> = store
            .with_conn(|c| {
                c.query_all(
                    "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT), \
                     CAST(is_identity AS TEXT) = 'YES' FROM information_schema.columns \
                     WHERE table_schema = current_schema() AND CAST(table_name AS TEXT) = ?1 \
                     ORDER BY ordinal_position",
                    args![table.name],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
                )
            })
            .expect("columns");
        let found: Vec<String> = columns.iter().map(|c| c.0.clone()).collect();
        assert_eq!(found, names(table.columns), "columns of {}", table.name);
        let identity = columns.iter().any(|c| c.0 == "id" && c.2);
        assert_eq!(identity, table.identity, "identity of {}", table.name);
        let key: Vec<String> = store
            .with_conn(|c| {
                c.query_all(
                    "SELECT CAST(k.column_name AS TEXT) \
                     FROM information_schema.table_constraints t \
                     JOIN information_schema.key_column_usage k \
                       ON k.constraint_name = t.constraint_name \
                      AND k.table_schema = t.table_schema \
                     WHERE t.constraint_type = 'PRIMARY KEY' \
                       AND t.table_schema = current_schema() \
                       AND CAST(t.table_name AS TEXT) = ?1 \
                     ORDER BY k.ordinal_position",
                    args![table.name],
                    |row| row.get(0),
                )
            })
            .expect("key");
        let listed: Vec<String> = table.key.iter().map(|k| k.name.to_owned()).collect();
        assert_eq!(key, listed, "primary key of {}", table.name);
        for k in table.key {
            let ty = columns.iter().find(|c| c.0 == k.name).map(|c| c.1.as_str());
            assert_eq!(ty == Some("text"), k.text, "{}.{}", table.name, k.name);
        }
    }
}

fn rows_of(report: &CopyReport) -> Vec<(&str, u64)> {
    report
        .tables
        .iter()
        .map(|t| (t.table, t.target_rows))
        .collect()
}

#[test]
fn a_copy_carries_every_row_verifies_and_refuses_a_second_without_replace() {
    let source = sqlite_source();
    fill(&source.store);
    // The target is PostgreSQL when a server is configured, and SQLite always.
    for target in stores() {
        let report = copy_installation(&source.store, &target.store, false).expect("copy");
        assert!(report.verified(), "{report:?}");
        assert!(!report.replaced);
        assert_eq!(rows_of(&report), FILLED);
        for check in &report.tables {
            assert_eq!(check.source_rows, check.target_rows, "{}", check.table);
            assert_eq!(check.source_sha256, check.target_sha256, "{}", check.table);
            assert_eq!(check.source_sha256.len(), 64);
        }
        // The next id the target assigns follows the copied ones.
        let next = target
            .store
            .in_transaction(|tx| {
                tx.insert_returning_id(
                    "INSERT INTO audit_log (at, request_id, tool, outcome, duration_us, \
                     transport) VALUES (1, 'r3', 'x', 'ok', 1, 'stdio')",
                    args![],
                )
            })
            .expect("an audit row");
        assert_eq!(next, 10);
        let fault = target
            .store
            .in_transaction(|tx| {
                tx.insert_returning_id(
                    "INSERT INTO faults (tool, code, probability, created_at) \
                     VALUES ('x', 'timeout', 1.0, 1)",
                    args![],
                )
            })
            .expect("a fault");
        assert_eq!(fault, 8);

        let again = copy_installation(&source.store, &target.store, false)
            .expect_err("the target holds an installation");
        let mut held: Vec<(&str, u64)> = FILLED
            .iter()
            .copied()
            .filter(|(t, _)| *t != "plans")
            .collect();
        for (table, rows) in &mut held {
            if *table == "audit_log" || *table == "faults" {
                *rows += 1;
            }
        }
        assert!(
            matches!(&again, CopyError::TargetNotEmpty(tables) if *tables == held),
            "{again:?}"
        );
        assert!(again.to_string().starts_with(
            "the target already holds an installation (server_secrets: 1, company: 1, "
        ));

        let replaced = copy_installation(&source.store, &target.store, true).expect("replace");
        assert!(replaced.verified(), "{replaced:?}");
        assert!(replaced.replaced);
        assert_eq!(rows_of(&replaced), FILLED);
        assert_eq!(replaced.tables, report.tables);
    }
}

#[test]
fn a_changed_cell_changes_only_its_tables_checksum() {
    let scratch = sqlite_source();
    fill(&scratch.store);
    let before = scratch.store.with_conn(checksums).expect("checksums");
    scratch
        .store
        .in_transaction(|tx| {
            tx.execute(
                "UPDATE rate_counters SET count = 4 WHERE window_start = 1700000040",
                args![],
            )
        })
        .expect("change a counter");
    let after = scratch.store.with_conn(checksums).expect("checksums");
    let changed: Vec<&str> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b != a)
        .map(|(b, _)| b.table)
        .collect();
    assert_eq!(changed, ["rate_counters"]);
    assert_eq!(after[6].rows, 3);
    // An integer and the same digits as text are different cells.
    let mut int = Sha256::new();
    hash_cell(&mut int, &Owned::Int(1));
    let mut txt = Sha256::new();
    hash_cell(&mut txt, &Owned::Text("1".to_owned()));
    assert_ne!(int.finalize(), txt.finalize());
}

#[test]
fn a_failed_copy_leaves_the_target_as_it_was() {
    let source = sqlite_source();
    fill(&source.store);
    // A payment of an invoice that does not exist, written with the checks off: the
    // target refuses it, after every earlier table was already inserted.
    let path = source.store.path().expect("an SQLite source").to_path_buf();
    let raw = rusqlite::Connection::open(&path).expect("raw open");
    raw.execute_batch(
        "PRAGMA foreign_keys = OFF;
         INSERT INTO payments VALUES ('live', 'pay_9', 'inv_gone', 5, 'EUR', '2026-01-13',
             'cash', NULL, 9);",
    )
    .expect("a dangling payment");
    drop(raw);
    for target in stores() {
        let err = copy_installation(&source.store, &target.store, false)
            .expect_err("the dangling payment is refused");
        assert!(matches!(err, CopyError::Store(_)), "{err:?}");
        let held = target.store.with_conn(tables_with_rows).expect("counts");
        assert_eq!(held, [], "nothing was committed");
        let plans: Vec<String> = target
            .store
            .with_conn(|c| {
                c.query_all("SELECT slug FROM plans ORDER BY rank", args![], |r| {
                    r.get(0)
                })
            })
            .expect("plans");
        assert_eq!(plans, ["free", "starter", "pro", "enterprise"]);
    }
}
