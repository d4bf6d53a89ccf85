//! The SQLite file under tollgate: a file whose schema was altered (a trigger, a view)
//! is refused by `restore` and by every command that opens it; a file moved away or
//! replaced under a running server is reported by `/healthz` and takes no more writes;
//! `tollgate healthcheck` finds a damaged file; a read-only file is named as such when a
//! server starts on it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use serde_json::{Value, json};

use crate::util::{
    HttpServer, READ_TIMEOUT, StdioServer, TestDb, TinyDisk, assert_error, assert_tool_error,
    free_port,
};

/// A trigger that undoes every revocation of a key.
const KEEP_ALIVE: &str = "CREATE TRIGGER keep_alive AFTER UPDATE OF revoked_at ON credentials
    BEGIN UPDATE credentials SET revoked_at = NULL WHERE public_id = new.public_id; END;";

/// A trigger that deletes every audit row as it is written.
const FORGET: &str = "CREATE TRIGGER forget AFTER INSERT ON audit_log
    BEGIN DELETE FROM audit_log; END;";

/// A view beside tollgate's tables.
const VIEW: &str = "CREATE VIEW active_keys AS SELECT public_id FROM credentials
    WHERE revoked_at IS NULL;";

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn run_sql(path: &Path, sql: &str) {
    Connection::open(path)
        .and_then(|c| c.execute_batch(sql))
        .expect("run SQL on the file");
}

/// What `tollgate` says of a file altered by `what` (`trigger "x" on table "t"`).
fn altered_reason(what: &str) -> String {
    format!(
        "{what} is not part of a tollgate database of schema version {}: the file was \
         altered, or is not tollgate's",
        tollgate::store::SCHEMA_VERSION
    )
}

/// Runs `cmd` (stdin closed) to its exit, which must come within [`READ_TIMEOUT`]: a
/// server that starts instead of refusing fails the test rather than hanging it.
fn run_to_exit(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    let deadline = Instant::now() + READ_TIMEOUT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("tollgate did not exit: {}", stderr_of(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `serve`, `stdio` and `healthcheck` on `db`: each must refuse (exit 2) and say `reason`.
fn assert_every_open_refuses(db: &TestDb, reason: &str) {
    let listen = format!("127.0.0.1:{}", free_port());
    let token = db.admin_key.clone().expect("admin key");
    for args in [
        vec!["serve", "--listen", listen.as_str()],
        vec!["stdio"],
        vec!["healthcheck"],
    ] {
        let mut cmd = db.command(&args);
        cmd.env("TOLLGATE_TOKEN", &token);
        let out = run_to_exit(cmd);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains(&format!("tollgate: not a tollgate database: {reason}\n")),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
}

// ---- A schema that is not tollgate's ----------------------------------------------------

#[test]
fn restore_refuses_a_backup_carrying_a_trigger_or_a_view_and_leaves_the_database_alone() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "restore replaces an SQLite file");
    let before = std::fs::read(&db.path).expect("read the database");
    for (name, sql, what) in [
        (
            "trigger.db",
            KEEP_ALIVE,
            "trigger \"keep_alive\" on table \"credentials\"",
        ),
        (
            "audit.db",
            FORGET,
            "trigger \"forget\" on table \"audit_log\"",
        ),
        ("view.db", VIEW, "view \"active_keys\""),
    ] {
        let backup = db.dir.path().join(name);
        let backup_str = backup.to_str().expect("utf-8");
        assert!(db.run(&["backup", backup_str]).status.success());
        run_sql(&backup, sql);
        let out = db.run(&["restore", backup_str, "--force"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
        assert_eq!(
            stderr_of(&out),
            format!(
                "tollgate: restore failed: {} is not a usable tollgate database: {}\n",
                backup.display(),
                altered_reason(what)
            )
        );
        assert_eq!(
            std::fs::read(&db.path).expect("read"),
            before,
            "{name}: the database was touched"
        );
    }
    assert!(db.run(&["healthcheck"]).status.success());
}

#[test]
fn serve_stdio_and_healthcheck_refuse_a_database_carrying_a_trigger_or_a_view() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the schema check of an SQLite file");
    run_sql(&db.path, FORGET);
    assert_every_open_refuses(
        &db,
        &altered_reason("trigger \"forget\" on table \"audit_log\""),
    );
    run_sql(&db.path, &format!("DROP TRIGGER forget; {VIEW}"));
    assert_every_open_refuses(&db, &altered_reason("view \"active_keys\""));
    run_sql(&db.path, "DROP VIEW active_keys;");
    // An index of tollgate's name, defined otherwise.
    run_sql(
        &db.path,
        "DROP INDEX audit_log_by_credential;
         CREATE INDEX audit_log_by_credential ON audit_log (credential_id);",
    );
    assert_every_open_refuses(
        &db,
        &format!(
            "index \"audit_log_by_credential\" on table \"audit_log\" is not defined as in \
             schema version {}: the file was altered",
            tollgate::store::SCHEMA_VERSION
        ),
    );
}

fn assert_revoked(db: &TestDb, token: &str) {
    let mut server = StdioServer::start_with_token(db, Some(token), &[]);
    server.initialize("2025-11-25");
    let response = server.call_tool("search_clients", json!({}));
    assert_error(&response, -32001, "invalid_token", 401, 1101, false);
    assert_eq!(
        response["error"]["data"]["details"]["reason"],
        json!("revoked"),
        "{response}"
    );
}

#[test]
fn a_trigger_that_undoes_revocations_gets_no_command_to_run_and_a_revocation_holds() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the schema check of an SQLite file");
    let key = db.create_key("agent", "*", &[]);

    // Through a restore: refused, the database stays as it was.
    let backup = db.dir.path().join("keep-alive.db");
    let backup_str = backup.to_str().expect("utf-8");
    assert!(db.run(&["backup", backup_str]).status.success());
    run_sql(&backup, KEEP_ALIVE);
    let out = db.run(&["restore", backup_str, "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));

    // Put into the file by hand: `key revoke` refuses rather than print "Revoked" for a
    // revocation the trigger would undo, and no server starts to accept the key.
    run_sql(&db.path, KEEP_ALIVE);
    let reason = altered_reason("trigger \"keep_alive\" on table \"credentials\"");
    let out = db.run(&["key", "revoke", &key.id]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert_eq!(
        stderr_of(&out),
        format!("tollgate: not a tollgate database: {reason}\n")
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut cmd = db.command(&["stdio"]);
    cmd.env("TOLLGATE_TOKEN", &key.token);
    let out = run_to_exit(cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));

    // Without the trigger, the revocation is made and holds.
    run_sql(&db.path, "DROP TRIGGER keep_alive;");
    let out = db.run(&["key", "revoke", &key.id]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("Revoked key {}; its next call is refused.\n", key.id)
    );
    assert_eq!(
        db.sql_i64(&format!(
            "SELECT count(*) FROM credentials WHERE public_id = '{}' AND revoked_at IS NOT NULL",
            key.id
        )),
        1
    );
    assert_revoked(&db, &key.token);
}

// ---- The file moved away or replaced under a running server ----------------------------

/// A tool call that writes (`create_client`) by the admin key, over HTTP.
fn create_client(server: &HttpServer, db: &TestDb, name: &str) -> Value {
    let token = db.admin_key.as_deref().expect("admin key");
    server
        .modern_tool_call(token, "create_client", &json!({ "name": name }))
        .json()
}

/// Refused as the catalog refuses an unavailable store: by a guard (JSON-RPC) or by the
/// tool (a tool result).
fn assert_backend_unavailable(response: &Value) {
    if response.get("error").is_some() {
        assert_error(response, -32603, "backend_unavailable", 503, 4002, true);
    } else {
        assert_tool_error(response, "backend_unavailable", 503, 4002);
    }
}

fn assert_unhealthy(server: &HttpServer, reason: &str) {
    let health = server.get("/healthz");
    assert_eq!(
        health.status,
        503,
        "{}",
        String::from_utf8_lossy(&health.body)
    );
    assert_eq!(
        health.json(),
        json!({"status": "unavailable", "store": "sqlite", "code": "backend_unavailable",
               "reason": reason})
    );
}

fn clients_named(path: &Path, name: &str) -> i64 {
    let conn = Connection::open(path).expect("open");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy");
    conn.query_row(
        "SELECT count(*) FROM clients WHERE name = ?1",
        [name],
        |r| r.get(0),
    )
    .expect("count")
}

#[test]
fn a_database_moved_away_under_a_server_is_reported_and_takes_no_write() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the file of an SQLite store");
    let server = HttpServer::start(&db, &[]);
    let first = create_client(&server, &db, "Before the move");
    assert_eq!(first["result"]["isError"], json!(false), "{first}");

    let away = db.dir.path().join("moved.db");
    std::fs::rename(&db.path, &away).expect("move the database away");
    assert_unhealthy(&server, "database_moved");
    assert_backend_unavailable(&create_client(&server, &db, "After the move"));

    // Put back, the file (with the WAL the server kept writing) holds no row of the
    // refused call, and the server is healthy again.
    std::fs::rename(&away, &db.path).expect("move it back");
    assert_eq!(server.get("/healthz").status, 200);
    assert_eq!(clients_named(&db.path, "Before the move"), 1);
    assert_eq!(clients_named(&db.path, "After the move"), 0);
}

#[test]
fn a_database_replaced_under_a_server_is_reported_and_takes_no_write() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the file of an SQLite store");
    let other = TestDb::new();
    let server = HttpServer::start(&db, &[]);

    // `install`, `rsync` and `cp --remove-destination` put a new file at the path.
    let staged: PathBuf = db.dir.path().join("incoming.db");
    std::fs::copy(&other.path, &staged).expect("copy another database beside it");
    std::fs::rename(&staged, &db.path).expect("put it at the database's path");
    assert_unhealthy(&server, "database_replaced");
    assert_backend_unavailable(&create_client(&server, &db, "After the swap"));
    drop(server);
    assert_eq!(clients_named(&db.path, "After the swap"), 0);

    let out = db.run(&["healthcheck"]);
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn healthcheck_fails_on_a_damaged_copy_through_quick_check() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the file of an SQLite store");
    assert!(db.run(&["healthcheck"]).status.success());
    let (page_size, root): (i64, i64) = Connection::open(&db.path)
        .and_then(|c| {
            let size = c.query_row("PRAGMA page_size", [], |r| r.get(0))?;
            let root = c.query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'plans'",
                [],
                |r| r.get(0),
            )?;
            Ok((size, root))
        })
        .expect("where the plans are");
    // The plans' page no longer says what kind of page it is; the schema (page 1) is
    // intact, so the file still opens.
    let mut bytes = std::fs::read(&db.path).expect("read");
    let offset = usize::try_from((root - 1) * page_size).expect("offset");
    bytes[offset] = 0xff;
    std::fs::write(&db.path, &bytes).expect("damage the copy");

    let out = db.run(&["healthcheck"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains(&format!(
            "tollgate: PRAGMA quick_check of {}",
            db.path.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.ends_with(&format!(
            "tollgate: unhealthy: {}: the database file is damaged (PRAGMA quick_check found \
             problems); restore a backup (database_corrupt)\n",
            db.path.display()
        )),
        "{stderr}"
    );
}

// ---- A read-only database ---------------------------------------------------------------

/// The database file bound read-only over itself (root), unmounted on drop.
struct ReadOnlyFile(PathBuf);

impl ReadOnlyFile {
    fn bind(path: &Path) -> Option<ReadOnlyFile> {
        let mount = |args: &[&str]| {
            Command::new("mount")
                .args(args)
                .arg(path)
                .arg(path)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !mount(&["--bind"]) {
            return None;
        }
        let bound = ReadOnlyFile(path.to_path_buf());
        let remounted = Command::new("mount")
            .args(["-o", "remount,ro,bind"])
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        remounted.then_some(bound)
    }
}

impl Drop for ReadOnlyFile {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Whether this process can no longer open `path` for writing.
fn write_denied(path: &Path) -> bool {
    std::fs::OpenOptions::new().write(true).open(path).is_err()
}

fn assert_start_says_read_only(db: &TestDb) {
    let expected = format!(
        "tollgate: the database {} is read-only: tollgate needs to write to it (check the \
         file's and its directory's permissions, or the file system's mount options)\n",
        db.path.display()
    );
    let listen = format!("127.0.0.1:{}", free_port());
    for args in [vec!["serve", "--listen", listen.as_str()], vec!["stdio"]] {
        let mut cmd = db.command(&args);
        cmd.env(
            "TOLLGATE_TOKEN",
            db.admin_key.as_deref().expect("admin key"),
        );
        let out = run_to_exit(cmd);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).ends_with(&expected),
            "{args:?}: {}",
            stderr_of(&out)
        );
    }
}

#[test]
fn a_server_starting_on_a_read_only_file_says_so_and_names_it() {
    let db = TestDb::new();
    crate::sqlite_only!(db, "the file of an SQLite store");
    // Root writes through any mode: a read-only bind mount stops it; anyone else, 0400.
    let bound = ReadOnlyFile::bind(&db.path);
    if bound.is_none() {
        std::fs::set_permissions(
            &db.path,
            std::os::unix::fs::PermissionsExt::from_mode(0o400),
        )
        .expect("chmod");
    }
    if !write_denied(&db.path) {
        println!("[store_file] cannot make the file read-only here: not tested");
        return;
    }
    assert_start_says_read_only(&db);
    drop(bound);
}

#[test]
fn a_server_starting_on_a_read_only_file_system_says_so_and_names_it() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let Some(disk) = TinyDisk::mount(scratch.path(), "16m") else {
        println!("[store_file] cannot mount a tmpfs here (not root?): not tested");
        return;
    };
    let db = TestDb::init_in(&disk.mount);
    let remounted = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&disk.mount)
        .status()
        .expect("run mount");
    assert!(remounted.success());
    assert_start_says_read_only(&db);
}
