//! `tollgate backup` and `tollgate restore` against a database a running `tollgate stdio`
//! keeps writing (every guarded call adds an audit row and bumps rate counters). The
//! files are then read with plain SQLite, not through tollgate.

// Without the fixtures, the tests that need them are compiled out (`cargo test
// --features conformance-pack` runs them), and so may some of their helpers.
#![cfg_attr(not(feature = "conformance-pack"), allow(unused_imports, dead_code))]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::util::{StdioServer, TestDb};

/// Calls the harness makes before the backup starts; all of them must be in the copy.
const CALLS_BEFORE: usize = 20;
/// Upper bound on the calls made while the backup runs (they stop when it ends).
const MAX_CALLS_DURING: usize = 5000;

#[cfg(feature = "conformance-pack")]
fn started(db: &TestDb) -> StdioServer {
    let mut server = StdioServer::start(db, &["--conformance-pack"]);
    server.initialize("2025-11-25");
    server
}

fn call_ok(server: &mut StdioServer) {
    let response = server.call_tool("test_simple_text", json!({}));
    assert!(
        response.get("error").is_none(),
        "unexpected error: {response}"
    );
    assert_ne!(
        response["result"]["isError"],
        json!(true),
        "tool error: {response}"
    );
}

fn sqlite(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
        .expect("open with plain SQLite")
}

fn integrity(path: &Path) -> String {
    sqlite(path)
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check")
}

fn audited_calls(path: &Path) -> i64 {
    sqlite(path)
        .query_row(
            "SELECT count(*) FROM audit_log WHERE tool = 'test_simple_text'",
            [],
            |r| r.get(0),
        )
        .expect("count audit rows")
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(".tollgate-staging"))
        .collect()
}

#[cfg(feature = "conformance-pack")]
#[test]
fn backup_while_serving_is_complete_and_restores() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "backup and restore copy an SQLite file");
    // The default 120 reads a minute would refuse the load below.
    let out = db.run(&[
        "limits",
        "set",
        "--plan",
        "pro",
        "--category",
        "read",
        "--per-minute",
        "1000000",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let mut server = started(&db);
    for _ in 0..CALLS_BEFORE {
        call_ok(&mut server);
    }
    let backup_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&backup_done);
    let busy = std::thread::spawn(move || {
        let mut calls = 0;
        while !done.load(Ordering::SeqCst) && calls < MAX_CALLS_DURING {
            call_ok(&mut server);
            calls += 1;
        }
        (server, calls)
    });
    let backup = db.dir.path().join("backup.db");
    let report = db.run_json(&["backup", backup.to_str().expect("utf-8"), "--json"]);
    backup_done.store(true, Ordering::SeqCst);
    let (mut server, calls_during) = busy.join().expect("calls during the backup");

    assert_eq!(report["path"], json!(backup));
    assert_eq!(report["integrity_check"], json!("ok"));
    assert_eq!(
        report["schema_version"],
        json!(tollgate::store::SCHEMA_VERSION)
    );
    let size = std::fs::metadata(&backup).expect("backup file").len();
    assert_eq!(report["bytes"], json!(size));
    assert_eq!(integrity(&backup), "ok");
    let in_backup = audited_calls(&backup);
    assert!(
        in_backup >= CALLS_BEFORE as i64,
        "the backup holds {in_backup} of the {CALLS_BEFORE} calls made before it began"
    );
    assert!(in_backup <= (CALLS_BEFORE + calls_during) as i64);

    // More calls after the backup: the restore must take them away again.
    for _ in 0..5 {
        call_ok(&mut server);
    }

    // A running server holds the database: the restore refuses, even with --force.
    let out = db.run(&["restore", backup.to_str().expect("utf-8"), "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        format!(
            "tollgate: restore failed: database {} is in use by another process; stop it \
             first (e.g. `systemctl stop tollgate`) and run the restore again\n",
            db.path.display()
        )
    );
    assert!(server.close().success());
    assert_eq!(
        audited_calls(&db.path),
        (CALLS_BEFORE + calls_during + 5) as i64
    );

    // Without --force an existing database is never replaced.
    let out = db.run(&["restore", backup.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "tollgate: restore failed: database {} exists; stop the service and pass --force \
             to replace it with the backup\n",
            db.path.display()
        )
    );

    let restored = db.run_json(&[
        "restore",
        backup.to_str().expect("utf-8"),
        "--force",
        "--json",
    ]);
    assert_eq!(restored["database"], json!(db.path));
    assert_eq!(restored["replaced"], json!(true));
    assert_eq!(restored["integrity_check"], json!("ok"));
    assert_eq!(
        restored["schema_version"],
        json!(tollgate::store::SCHEMA_VERSION)
    );
    assert_eq!(
        restored["backup_schema_version"],
        json!(tollgate::store::SCHEMA_VERSION)
    );
    assert_eq!(integrity(&db.path), "ok");
    assert_eq!(audited_calls(&db.path), in_backup);
    assert!(leftovers(db.dir.path()).is_empty());

    // The restored database serves again.
    let mut server = started(&db);
    call_ok(&mut server);
    assert!(server.close().success());
    assert_eq!(audited_calls(&db.path), in_backup + 1);
}

#[test]
fn backup_never_overwrites_an_existing_file() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "backup and restore copy an SQLite file");
    let target = db.dir.path().join("taken.db");
    std::fs::write(&target, b"keep me").expect("write");
    let out = db.run(&["backup", target.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "tollgate: backup failed: backup target {} already exists; backups never \
             overwrite: choose a new file name\n",
            target.display()
        )
    );
    assert_eq!(std::fs::read(&target).expect("read"), b"keep me");
    assert!(leftovers(db.dir.path()).is_empty());
}

#[test]
fn backup_prints_a_human_summary() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "backup and restore copy an SQLite file");
    let target = db.dir.path().join("human.db");
    let out = db.run(&["backup", target.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    let size = std::fs::metadata(&target).expect("backup").len();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "backup written to {}: {size} bytes, schema version {}, integrity_check ok\n",
            target.display(),
            tollgate::store::SCHEMA_VERSION
        )
    );
}

#[test]
fn restore_refuses_a_file_that_is_not_a_database() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "backup and restore copy an SQLite file");
    let junk = db.dir.path().join("notes.txt");
    std::fs::write(&junk, b"these are not invoices").expect("write");
    let before = std::fs::read(&db.path).expect("read db");
    let out = db.run(&["restore", junk.to_str().expect("utf-8"), "--force"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr_of(&out),
        format!(
            "tollgate: restore failed: {} is not a usable tollgate database: it is not an \
             SQLite database\n",
            junk.display()
        )
    );
    assert_eq!(std::fs::read(&db.path).expect("read db"), before);
    assert!(leftovers(db.dir.path()).is_empty());
}

#[test]
fn restore_creates_a_missing_database() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "backup and restore copy an SQLite file");
    let backup = db.dir.path().join("b.db");
    db.run_json(&["backup", backup.to_str().expect("utf-8"), "--json"]);
    let fresh = db.dir.path().join("elsewhere").join("new.db");
    let out = std::process::Command::new(crate::util::bin())
        .arg("--database")
        .arg(&fresh)
        .args(["restore", backup.to_str().expect("utf-8"), "--json"])
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .output()
        .expect("run restore");
    assert!(out.status.success(), "{}", stderr_of(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["replaced"], json!(false));
    assert_eq!(integrity(&fresh), "ok");
}
