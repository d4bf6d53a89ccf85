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

/// The pages a reader follows links through.
fn pages() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// GitHub's anchor of a heading: lowercase, spaces to `-`, other punctuation dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect::<String>()
        .to_lowercase()
}

/// The anchors of a page's headings (outside fenced blocks).
fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor_of(line.trim_start_matches('#')));
        }
    }
    found
}

/// The targets of a page's markdown links `[text](target)` (outside fenced blocks).
fn link_targets(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut targets = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail.find(')').unwrap_or(tail.len());
            targets.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    targets
}

#[test]
fn the_anchor_of_a_heading_is_githubs() {
    assert_eq!(
        anchor_of(" The operator's console"),
        "the-operators-console"
    );
    assert_eq!(anchor_of("HTTP status on `/mcp`"), "http-status-on-mcp");
    assert_eq!(
        anchor_of("Authentication, proxies and sessions"),
        "authentication-proxies-and-sessions"
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and ![x](y.png)\n```\n[n](no)\n```"),
        ["b.md#c", "y.png"]
    );
}

/// Every relative link of README.md, ARCHITECTURE.md and docs/*.md names a file that exists,
/// and a `#fragment` a heading of that page.
#[test]
fn every_link_of_the_documentation_leads_somewhere() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("dir");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((&target, ""));
            let linked = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            if !linked.exists() {
                broken.push(format!("{}: {target}: no such file", page.display()));
                continue;
            }
            if !fragment.is_empty() {
                let linked_text = std::fs::read_to_string(&linked).unwrap_or_default();
                if !anchors(&linked_text).iter().any(|a| a == fragment) {
                    broken.push(format!("{}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// docs/backends.md shows the example configuration that a test checks with
/// `backends check` (tests/backends_config.rs), as it is in docs/examples/backends.toml.
#[test]
fn the_backends_page_shows_the_checked_example_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/backends.md")).expect("page");
    let example =
        std::fs::read_to_string(root.join("docs/examples/backends.toml")).expect("example");
    assert!(
        page.contains(&format!("```toml\n{example}```")),
        "docs/backends.md must show docs/examples/backends.toml verbatim in a toml block"
    );
}
