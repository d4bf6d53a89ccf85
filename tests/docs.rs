//! Documentation generated from the code stays in sync with it: `docs/errors.md` is the
//! output of `tollgate errors --format markdown`, and `docs/scopes.md` that of `tollgate
//! tools --format markdown` on a new database with no backends, byte for byte.

use std::path::Path;

use crate::util::{TestDb, bin};

/// The command that regenerates the page, quoted in the failure message.
const REGENERATE: &str = "cargo run -q -- errors --format markdown > docs/errors.md";

/// The commands that regenerate `docs/scopes.md`.
const REGENERATE_SCOPES: &str = "cargo run -q -- --database /tmp/scopes-doc.db init > /dev/null \
    && cargo run -q -- --database /tmp/scopes-doc.db tools --format markdown > docs/scopes.md \
    && rm /tmp/scopes-doc.db*";

/// Panics with the first differing line unless `committed` (the file at `name`) is
/// `generated`.
fn assert_same(name: &str, committed: &str, generated: &str, regenerate: &str) {
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "{name} differs from the generated page (first at line {}); regenerate it with \
             `{regenerate}` and commit the result",
            line + 1
        );
    }
}

#[test]
fn docs_scopes_md_is_the_generated_list_of_tools_and_scopes() {
    let db = TestDb::new();
    let out = db.run(&["tools", "--format", "markdown"]);
    assert!(
        out.status.success(),
        "tollgate tools failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("UTF-8 markdown");
    assert!(generated.contains("| `void_invoice` | `invoices:void` | destructive |"));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/scopes.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with `{REGENERATE_SCOPES}`",
            path.display()
        )
    });
    assert_same("docs/scopes.md", &committed, &generated, REGENERATE_SCOPES);
}

#[test]
fn docs_errors_md_is_the_generated_catalog() {
    let out = std::process::Command::new(bin())
        .args(["errors", "--format", "markdown"])
        .env_remove("TOLLGATE_CONFIG")
        .env_remove("TOLLGATE_TEST_POSTGRES")
        .output()
        .expect("run tollgate errors");
    assert!(
        out.status.success(),
        "tollgate errors failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("UTF-8 markdown");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/errors.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; generate it with `{REGENERATE}`",
            path.display()
        )
    });
    assert_same("docs/errors.md", &committed, &generated, REGENERATE);
}
