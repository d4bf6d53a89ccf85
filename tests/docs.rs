//! Documentation generated from the code stays in sync with it: `docs/errors.md` is the
//! output of `tollgate errors --format markdown`, byte for byte.

use std::path::Path;

use crate::util::bin;

/// The command that regenerates the page, quoted in the failure message.
const REGENERATE: &str = "cargo run -q -- errors --format markdown > docs/errors.md";

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
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/errors.md differs from `tollgate errors --format markdown` (first at line {}); \
             regenerate it with `{REGENERATE}` and commit the result",
            line + 1
        );
    }
}
