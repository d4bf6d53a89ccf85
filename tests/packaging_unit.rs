//! The packaged service unit lets the upstreams the README shows run: a Node.js MCP server
//! (V8 compiles code at run time) started by tollgate under the restrictions of
//! `packaging/tollgate.service` that a process can apply by itself
//! (`tests/packaging/unit_restrictions.py`: `NoNewPrivileges`, `MemoryDenyWriteExecute`)
//! lists its tools. The same with `MemoryDenyWriteExecute=yes` added kills it, which shows
//! the helper really applies what the unit says.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::{TestDb, bin};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// `tollgate backends check --json` with a Node upstream, under `unit`'s restrictions.
fn check_under(unit: &Path, db: &TestDb) -> Output {
    let config = db.dir.path().join("node.toml");
    std::fs::write(
        &config,
        format!(
            "[[backends]]\nname = \"nodeup\"\nkind = \"mcp\"\ncommand = \"node\"\nargs = [{:?}]\n",
            repo("tests/backends/fixtures/node_upstream.js")
        ),
    )
    .expect("write config");
    Command::new("python3")
        .arg(repo("tests/packaging/unit_restrictions.py"))
        .arg(unit)
        .arg("--")
        .arg(bin())
        .arg("--database")
        .arg(db.database_arg())
        .arg("--config")
        .arg(&config)
        .args(["backends", "check", "--json"])
        .env("RUST_LOG", "warn")
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .output()
        .expect("python3 and node are needed by this test (the CI machine has both)")
}

fn report(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "not JSON: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_node_upstream_runs_under_the_packaged_units_restrictions() {
    let db = TestDb::new();
    let unit = repo("packaging/tollgate.service");
    let out = check_under(&unit, &db);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unit_restrictions: applied NoNewPrivileges"),
        "{stderr}"
    );
    assert!(out.status.success(), "{stderr}");
    let backend = &report(&out)["backends"][0];
    assert_eq!(backend["state"], "ready", "{backend}");
    assert_eq!(backend["tools"][0]["name"], "nodeup_echo", "{backend}");

    // The control: the setting this unit leaves out kills the same upstream.
    let text = std::fs::read_to_string(&unit).expect("unit");
    let denying = db.dir.path().join("denying.service");
    std::fs::write(
        &denying,
        text.replace("[Service]\n", "[Service]\nMemoryDenyWriteExecute=yes\n"),
    )
    .expect("write unit");
    let out = check_under(&denying, &db);
    if out.status.code() == Some(3) {
        eprintln!(
            "this kernel cannot apply MemoryDenyWriteExecute (Linux 6.3+): control skipped: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("MemoryDenyWriteExecute"), "{stderr}");
    let backend = &report(&out)["backends"][0];
    assert_eq!(backend["state"], "down", "{backend}");
}
