//! Several nodes on one database: two `tollgate serve` processes and one `tollgate stdio`
//! process share the store, as a company's nodes behind a load balancer share its
//! PostgreSQL server (these tests run on it when `TOLLGATE_TEST_POSTGRES` is set, and on
//! one SQLite file otherwise — the guarantees are the same). Each test sends a bounded
//! load from several threads and checks what every guarantee says across nodes: rate
//! limits admit exactly their limit, an idempotency key runs its call once, invoice numbers
//! stay gapless and ordered, a revocation applies on the next call everywhere, and a call
//! held for approval on every node is one approval and, approved, runs once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier, Mutex};

use serde_json::{Value, json};

use crate::util::{HttpServer, StdioServer, TestDb, refusal_code as refusal};

/// A valid Spanish CIF, so full invoices can be issued to the client.
const TAX_ID: &str = "B12345674";

/// One node a test talks to: an HTTP node (stateless era, one request per call) or the
/// stdio process (one line per call, one caller at a time).
#[derive(Clone)]
enum Node {
    Http(Arc<HttpServer>),
    Stdio(Arc<Mutex<StdioServer>>),
}

impl Node {
    /// The JSON-RPC response to a `tools/call`.
    fn call(&self, token: &str, tool: &str, args: &Value) -> Value {
        match self {
            Node::Http(server) => server.modern_tool_call(token, tool, args).json(),
            Node::Stdio(server) => server
                .lock()
                .expect("stdio node")
                .call_tool(tool, args.clone()),
        }
    }
}

/// Two HTTP nodes and one stdio node on `db`, the stdio node calling as `token`.
fn three_nodes(db: &TestDb, token: &str, extra: &[&str]) -> Vec<Node> {
    let a = HttpServer::start(db, extra);
    let b = HttpServer::start(db, extra);
    let mut stdio = StdioServer::start_with_token(db, Some(token), extra);
    stdio.initialize("2025-11-25");
    vec![
        Node::Http(Arc::new(a)),
        Node::Http(Arc::new(b)),
        Node::Stdio(Arc::new(Mutex::new(stdio))),
    ]
}

fn admin(db: &TestDb) -> String {
    db.admin_key.clone().expect("init prints an admin key")
}

fn public_id(token: &str) -> String {
    token.split('_').nth(2).expect("public id").to_owned()
}

/// Runs `calls` calls spread over `nodes` from `threads` threads started together; returns
/// every response.
fn spread<F>(nodes: &[Node], threads: usize, calls: usize, call: F) -> Vec<Value>
where
    F: Fn(&Node, usize) -> Value + Send + Sync + 'static,
{
    let call = Arc::new(call);
    let start = Arc::new(Barrier::new(threads));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let nodes = nodes.to_vec();
            let call = Arc::clone(&call);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                (t..calls)
                    .step_by(threads)
                    .map(|n| call(&nodes[n % nodes.len()], n))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect()
}

#[cfg(feature = "conformance-pack")]
#[test]
fn rate_limits_admit_exactly_the_limit_across_nodes_and_refusals_still_count() {
    const LIMIT: i64 = 25;
    const CALLS: usize = 90;
    let db = TestDb::new();
    let token = admin(&db);
    let id = public_id(&token);
    let out = db.run(&[
        "limits",
        "set",
        "--credential",
        &id,
        "--category",
        "read",
        "--per-minute",
        &LIMIT.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nodes = three_nodes(&db, &token, &["--conformance-pack"]);
    let caller = token.clone();
    let responses = spread(&nodes, 6, CALLS, move |node, _| {
        node.call(&caller, "test_simple_text", &json!({}))
    });
    assert_eq!(responses.len(), CALLS);
    let admitted = responses.iter().filter(|r| refusal(r).is_none()).count();
    let refused: BTreeSet<String> = responses.iter().filter_map(refusal).collect();
    assert!(
        refused.iter().all(|code| code == "rate_limited"),
        "only the rate limit refuses: {refused:?}"
    );
    // The credential's read windows: every call was charged, refused or not, and each
    // window admitted exactly its limit of what it was charged (a window edge inside the
    // run splits the load in two windows; each still admits at most the limit).
    let windows: Vec<(i64, i64)> = db
        .sql_rows(&format!(
            "SELECT CAST(window_start AS TEXT), CAST(count AS TEXT) FROM rate_counters \
             WHERE bucket = 'read' AND key = '{id}' ORDER BY window_start"
        ))
        .into_iter()
        .map(|row| {
            let n = |i: usize| {
                row[i]
                    .as_deref()
                    .expect("cell")
                    .parse::<i64>()
                    .expect("int")
            };
            (n(0), n(1))
        })
        .collect();
    let charged: i64 = windows.iter().map(|(_, count)| count).sum();
    assert_eq!(
        charged, CALLS as i64,
        "every call consumed quota: {windows:?}"
    );
    let allowed: i64 = windows.iter().map(|(_, count)| (*count).min(LIMIT)).sum();
    assert_eq!(
        admitted as i64, allowed,
        "exactly the limit admitted per window across three processes: {windows:?}"
    );
    println!(
        "[multinode] {CALLS} calls over 3 nodes, limit {LIMIT}/min: {admitted} admitted, \
         windows {windows:?}"
    );
}

#[test]
fn one_idempotency_key_sent_to_every_node_at_once_runs_its_call_once() {
    const KEYS: usize = 12;
    let db = TestDb::new();
    let token = admin(&db);
    db.limit_per_minute(&public_id(&token), "write", 100_000);
    let nodes = three_nodes(&db, &token, &[]);
    let results = Arc::new(Mutex::new(Vec::new()));
    let start = Arc::new(Barrier::new(nodes.len()));
    let workers: Vec<_> = nodes
        .iter()
        .cloned()
        .map(|node| {
            let token = token.clone();
            let results = Arc::clone(&results);
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait();
                for key in 0..KEYS {
                    let args = json!({"name": format!("Once {key}"),
                                      "idempotency_key": format!("once-{key}")});
                    let response = node.call(&token, "create_client", &args);
                    results.lock().expect("results").push((key, response));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    let results = results.lock().expect("results");
    let mut created: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (key, response) in results.iter() {
        match refusal(response).as_deref() {
            None => {
                let id = response["result"]["structuredContent"]["id"]
                    .as_str()
                    .expect("client id")
                    .to_owned();
                created.entry(*key).or_default().insert(id);
            }
            // Another node holds the key at that moment: retryable, nothing ran.
            Some("idempotency_key_in_use") => {}
            Some(other) => panic!("key {key}: unexpected {other}: {response}"),
        }
    }
    for key in 0..KEYS {
        let ids = created.get(&key).cloned().unwrap_or_default();
        assert!(
            ids.len() <= 1,
            "key {key} answered with two clients: {ids:?}"
        );
        let rows = db.sql_i64(&format!(
            "SELECT count(*) FROM clients WHERE name = 'Once {key}'"
        ));
        assert_eq!(rows, 1, "key {key} ran its call exactly once");
    }
    // A retry now gets the recorded result on any node.
    for node in &nodes {
        let again = node.call(
            &token,
            "create_client",
            &json!({"name": "Once 0", "idempotency_key": "once-0"}),
        );
        assert!(refusal(&again).is_none(), "{again}");
    }
    assert_eq!(
        db.sql_i64("SELECT count(*) FROM clients WHERE name LIKE 'Once %'"),
        KEYS as i64
    );
}

#[test]
fn invoices_issued_on_every_node_at_once_get_gapless_ordered_numbers() {
    const INVOICES: usize = 24;
    let db = TestDb::new();
    let token = admin(&db);
    db.limit_per_minute(&public_id(&token), "write", 100_000);
    let nodes = three_nodes(&db, &token, &[]);
    let client = nodes[0].call(
        &token,
        "create_client",
        &json!({"name": "Acme", "tax_id": TAX_ID, "idempotency_key": "acme"}),
    );
    let client = client["result"]["structuredContent"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("client: {client}"))
        .to_owned();
    let mut drafts = Vec::new();
    for n in 0..INVOICES {
        let draft = nodes[n % nodes.len()].call(
            &token,
            "create_invoice",
            &json!({"client_id": client, "idempotency_key": format!("draft-{n}"), "lines": [
                {"description": "Consulting", "quantity": 1, "unit_price_cents": 10_000,
                 "vat_rate": 21}]}),
        );
        drafts.push(
            draft["result"]["structuredContent"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("draft: {draft}"))
                .to_owned(),
        );
    }
    let drafts = Arc::new(drafts);
    let caller = token.clone();
    let issued = spread(&nodes, 6, INVOICES, move |node, n| {
        node.call(
            &caller,
            "issue_invoice",
            &json!({"invoice_id": drafts[n], "idempotency_key": format!("issue-{n}")}),
        )
    });
    let mut numbers: Vec<String> = issued
        .iter()
        .map(|r| {
            r["result"]["structuredContent"]["number"]
                .as_str()
                .unwrap_or_else(|| panic!("issue: {r}"))
                .to_owned()
        })
        .collect();
    numbers.sort();
    let expected: Vec<String> = (1..=INVOICES).map(|n| format!("F-{n:06}")).collect();
    assert_eq!(numbers, expected, "gapless, one number each");
    // In issue-date order: a later number never has an earlier date.
    let dates: Vec<String> = db
        .sql_rows("SELECT issue_date FROM invoices WHERE number IS NOT NULL ORDER BY number")
        .into_iter()
        .map(|row| row[0].clone().expect("date"))
        .collect();
    assert_eq!(dates.len(), INVOICES);
    assert!(dates.windows(2).all(|w| w[0] <= w[1]), "{dates:?}");
}

#[test]
fn a_key_revoked_through_the_cli_is_refused_on_every_node_on_the_next_call() {
    let db = TestDb::new();
    let key = db.create_key("agent", "clients:read", &[]);
    let nodes = three_nodes(&db, &key.token, &[]);
    for node in &nodes {
        let ok = node.call(&key.token, "search_clients", &json!({"query": "x"}));
        assert!(refusal(&ok).is_none(), "{ok}");
    }
    let out = db.run(&["key", "revoke", &key.id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for node in &nodes {
        let refused = node.call(&key.token, "search_clients", &json!({"query": "x"}));
        assert_eq!(
            refusal(&refused).as_deref(),
            Some("invalid_token"),
            "{refused}"
        );
        assert_eq!(
            refused["error"]["data"]["details"]["reason"],
            json!("revoked"),
            "{refused}"
        );
    }
}

#[test]
fn a_call_held_on_every_node_at_once_is_one_approval_and_once_approved_runs_once() {
    let db = TestDb::new();
    let token = admin(&db);
    db.limit_per_minute(&public_id(&token), "write", 100_000);
    let config = db.dir.path().join("policy.toml");
    std::fs::write(
        &config,
        "[[policy.rules]]\nname = \"big\"\ntools = [\"create_client\"]\n\
         condition = \"args.name.startsWith('Big')\"\neffect = \"require_approval\"\n",
    )
    .expect("config");
    let nodes = three_nodes(&db, &token, &["--config", config.to_str().expect("utf-8")]);
    let args = json!({"name": "Big Across", "idempotency_key": "across-1"});
    let call = {
        let (token, args) = (token.clone(), args.clone());
        move |node: &Node, _: usize| node.call(&token, "create_client", &args)
    };
    let held = spread(&nodes, 6, 18, call.clone());
    let ids: BTreeSet<String> = held
        .iter()
        .map(|response| {
            assert_eq!(
                refusal(response).as_deref(),
                Some("approval_required"),
                "{response}"
            );
            let data = match response.get("error") {
                Some(error) => &error["data"],
                None => &response["result"]["_meta"]["dev.tollgate/error"],
            };
            data["approval_id"]
                .as_str()
                .expect("approval_id")
                .to_owned()
        })
        .collect();
    assert_eq!(
        ids.len(),
        1,
        "one approval for one call on every node: {ids:?}"
    );
    assert_eq!(db.sql_i64("SELECT count(*) FROM approvals"), 1);
    let id = ids.into_iter().next().expect("the approval");
    let out = db.run(&["approvals", "approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Approved: the retries on every node at once run the call once; the others are told
    // the key is in use, or get its result replayed.
    for response in spread(&nodes, 6, 18, call) {
        match refusal(&response).as_deref() {
            None | Some("idempotency_key_in_use") => {}
            Some(other) => panic!("unexpected {other}: {response}"),
        }
    }
    assert_eq!(
        db.sql_i64("SELECT count(*) FROM clients WHERE name = 'Big Across'"),
        1,
        "ran exactly once"
    );
}
