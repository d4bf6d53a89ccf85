//! PostgreSQL going away under load: a node keeps answering every call (a success, or the
//! retryable `backend_unavailable` in the channel the catalog gives it), never exits, and
//! serves again by itself once the server is back; nothing a call was told is committed is
//! lost. The server here is a private one of the test's own (`tests/postgres/cluster.sh`),
//! so stopping it disturbs no other test; it runs in the suite's PostgreSQL pass (when
//! `TOLLGATE_TEST_POSTGRES` is set).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::util::{HttpServer, READ_TIMEOUT, TestDb};

/// A private PostgreSQL server, stopped and removed on drop.
struct Cluster {
    dir: PathBuf,
    url: String,
}

impl Cluster {
    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/cluster.sh")
    }

    fn run(&self, what: &str) {
        let out = Command::new("bash")
            .arg(Self::script())
            .arg(what)
            .arg(&self.dir)
            .output()
            .expect("run cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("tollgate-pgfault-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(Self::script())
            .arg("start")
            .arg(&dir)
            .output()
            .expect("run cluster.sh");
        assert!(
            out.status.success(),
            "cluster.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Cluster { dir, url }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(Self::script())
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// What one call got: `Ok(name)` for a client created, `Err(code)` for a refusal.
fn outcome(response: &Value) -> Result<String, String> {
    match crate::util::refusal_code(response) {
        Some(code) => Err(code),
        None => Ok(response["result"]["structuredContent"]["name"]
            .as_str()
            .expect("name")
            .to_owned()),
    }
}

#[test]
fn a_postgres_restart_under_load_is_answered_retryably_and_the_node_recovers_by_itself() {
    if crate::util::postgres_server().is_none() {
        eprintln!("runs in the PostgreSQL pass (TOLLGATE_TEST_POSTGRES)");
        return;
    }
    let cluster = Cluster::start();
    let db = TestDb::on_postgres(&cluster.url);
    let token = db.admin_key.clone().expect("admin key");
    let id = token.split('_').nth(2).expect("id").to_owned();
    db.limit_per_minute(&id, "write", 100_000);
    let server = Arc::new(HttpServer::start_with_env(
        &db,
        &[],
        &[("TOLLGATE_STORE_BUSY_TIMEOUT_MS", "500")],
    ));

    // Writers: each call creates a client with a name of its own; a success is a promise
    // that the row is committed.
    let stop = Arc::new(AtomicBool::new(false));
    let unavailable = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(Vec::<Result<String, String>>::new()));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (server, token, stop) = (Arc::clone(&server), token.clone(), Arc::clone(&stop));
            let (unavailable, answered) = (Arc::clone(&unavailable), Arc::clone(&answered));
            std::thread::spawn(move || {
                // Bounded: at most this many calls per writer, whatever happens.
                for n in 0..5000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("W{w}-{n}");
                    let response = server.modern_tool_call(
                        &token,
                        "create_client",
                        &json!({"name": name, "idempotency_key": name}),
                    );
                    assert!(
                        response.status == 200 || response.status == 503,
                        "status {}",
                        response.status
                    );
                    let got = outcome(&response.json());
                    if got.is_err() {
                        unavailable.fetch_add(1, Ordering::SeqCst);
                    }
                    answered.lock().expect("answers").push(got);
                }
            })
        })
        .collect();

    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + READ_TIMEOUT * 3;
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let successes = || {
        answered
            .lock()
            .expect("answers")
            .iter()
            .filter(|a| a.is_ok())
            .count()
    };
    wait_for("calls to succeed before the restart", &|| successes() >= 30);
    cluster.run("pause");
    wait_for("calls to be refused while PostgreSQL is down", &|| {
        unavailable.load(Ordering::SeqCst) >= 5
    });
    let health = server.get("/healthz");
    assert_eq!(
        health.status,
        503,
        "{}",
        String::from_utf8_lossy(&health.body)
    );
    assert_eq!(health.json()["reason"], json!("database_unreachable"));
    assert_eq!(health.json()["store"], json!("postgres"));
    let before_resume = successes();
    cluster.run("resume");
    wait_for("the node to serve again by itself", &|| {
        successes() >= before_resume + 30
    });
    stop.store(true, Ordering::SeqCst);
    for writer in writers {
        writer.join().expect("writer");
    }
    assert_eq!(server.get("/healthz").status, 200);

    let answered = answered.lock().expect("answers");
    let refusals: BTreeSet<&String> = answered.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        refusals.iter().all(|code| *code == "backend_unavailable"),
        "every refusal is the retryable backend_unavailable: {refusals:?}"
    );
    // Nothing committed is lost, nothing ran twice.
    let promised: BTreeSet<&String> = answered.iter().filter_map(|a| a.as_ref().ok()).collect();
    let stored: Vec<String> = db
        .sql_rows("SELECT name FROM clients WHERE name LIKE 'W%'")
        .into_iter()
        .map(|row| row[0].clone().expect("name"))
        .collect();
    let stored_set: BTreeSet<&String> = stored.iter().collect();
    assert_eq!(stored.len(), stored_set.len(), "no client created twice");
    assert!(
        promised.is_subset(&stored_set),
        "every success is committed: missing {:?}",
        promised.difference(&stored_set).collect::<Vec<_>>()
    );
    // PostgreSQL's own integrity check (amcheck): every B-tree index of the schema agrees
    // with itself and with its table's rows (`heapallindexed`).
    db.sql("CREATE EXTENSION IF NOT EXISTS amcheck");
    let checked = db.sql_i64(
        "SELECT count(bt_index_check(c.oid, true)) FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE a.amname = 'btree' AND n.nspname = 'public'",
    );
    assert!(checked >= 10, "{checked} indexes checked");
    // The process never exited; the CLI's health check agrees.
    let check = db.run(&["healthcheck"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    println!(
        "[postgres faults] {} calls answered, {} successes, {} backend_unavailable during the \
         restart; {checked} indexes pass amcheck",
        answered.len(),
        promised.len(),
        answered.len() - promised.len()
    );
}
