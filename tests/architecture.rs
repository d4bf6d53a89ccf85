//! The layering of `src/`, checked against the source: what ARCHITECTURE.md states as
//! rules, enforced here so that a change that breaks one fails in CI instead of in review.
//!
//! - A module may `use crate::X` only for an `X` in its own top-level folder or in a lower
//!   layer of [`LAYERS`]; so there is no import cycle between top-level modules either
//!   (checked as such too, in case the order is ever edited into one).
//! - No file holds more than [`MAX_LINES`] lines before its tests (the first
//!   `#[cfg(test)]` module).
//! - SQLite (`rusqlite`, `r2d2`) and PostgreSQL (`postgres`) are named only in
//!   `src/store/`, the HTTP listener
//!   (`tiny_http`) only in `src/transport/`.
//! - Every top-level module appears in ARCHITECTURE.md's code map.
//!
//! The source is read as text: comments are skipped, code is matched on `crate::` paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest layer first. A module may import from its own
/// entry and the entries before it, never from one after it.
const LAYERS: &[&str] = &[
    "clock",     // the one clock
    "config",    // settings: file, environment, flags
    "catalog",   // the error catalog every layer reports through
    "store",     // the database: the only code that holds SQL
    "tools",     // tool declarations, their context, the packs
    "guards",    // the chain around a call, its steps, audit and metrics
    "protocol",  // JSON-RPC, revisions and eras, the dispatcher
    "console",   // the operator's console: its pages, sign-ins and forms
    "transport", // stdio, Streamable HTTP, sessions, OAuth endpoints
    "ops",       // the command line and the operator's commands
];

/// The longest a source file may be before its tests.
const MAX_LINES: usize = 900;

/// Crates that only one layer may name, and that layer.
const CONFINED: &[(&str, &str)] = &[
    ("rusqlite", "store"),
    ("r2d2", "store"),
    ("r2d2_sqlite", "store"),
    ("postgres", "store"),
    ("tiny_http", "transport"),
];

/// One source file: its path relative to `src/`, its top-level module and its code lines
/// (comments removed), numbered from 1.
struct Source {
    rel: String,
    top: String,
    lines: Vec<(usize, String)>,
    length_before_tests: usize,
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line with its `//` comment removed, and whether a `/* */` comment is
/// still open after it. String literals are not parsed: a `//` inside one cuts the line
/// short, which can only hide a path, never invent one.
fn code_of(line: &str, in_block: &mut bool) -> String {
    let mut out = String::new();
    let mut rest = line;
    loop {
        if *in_block {
            match rest.find("*/") {
                Some(end) => {
                    rest = &rest[end + 2..];
                    *in_block = false;
                }
                None => return out,
            }
        }
        let line_comment = rest.find("//");
        let block_comment = rest.find("/*");
        match (line_comment, block_comment) {
            (Some(l), Some(b)) if b < l => {
                out.push_str(&rest[..b]);
                rest = &rest[b + 2..];
                *in_block = true;
            }
            (Some(l), _) => {
                out.push_str(&rest[..l]);
                return out;
            }
            (None, Some(b)) => {
                out.push_str(&rest[..b]);
                rest = &rest[b + 2..];
                *in_block = true;
            }
            (None, None) => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

fn sources() -> Vec<Source> {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path
                .strip_prefix(&root)
                .expect("under src")
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "lib.rs" || rel == "main.rs" {
                return None;
            }
            let top = rel
                .split('/')
                .next()
                .expect("a first component")
                .trim_end_matches(".rs")
                .to_owned();
            let text = std::fs::read_to_string(&path).expect("read source");
            let raw: Vec<&str> = text.lines().collect();
            let length_before_tests = raw
                .windows(2)
                .position(|w| w[0].starts_with("#[cfg(test)]") && is_module(w[1]))
                .unwrap_or(raw.len());
            let mut in_block = false;
            let lines = raw
                .iter()
                .enumerate()
                .map(|(i, line)| (i + 1, code_of(line, &mut in_block)))
                .collect();
            Some(Source {
                rel,
                top,
                lines,
                length_before_tests,
            })
        })
        .collect()
}

/// Whether a line opens a module (`mod tests {`, `pub(crate) mod testing {`): after a
/// `#[cfg(test)]`, where a file's test code begins.
fn is_module(line: &str) -> bool {
    let rest = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    rest.starts_with("mod ")
}

/// The top-level modules a line names through `crate::`.
fn crate_paths(code: &str) -> Vec<String> {
    code.match_indices("crate::")
        .filter(|(at, _)| {
            // `tollgate::crate::` does not exist; exclude identifiers ending in "crate".
            code[..*at]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
        .map(|(at, m)| {
            code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

/// Whether a line names `krate` as a path root (`krate::`, `use krate`, `extern crate`).
fn names_crate(code: &str, krate: &str) -> bool {
    code.match_indices(krate).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + krate.len()..];
        before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
            && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

fn rank(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == top)
}

#[test]
fn every_module_is_in_a_layer() {
    let unknown: BTreeSet<String> = sources()
        .into_iter()
        .map(|s| s.top)
        .filter(|top| rank(top).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "top-level modules that are in no layer: {unknown:?}; put the code in a layer's \
         folder, or add the module to LAYERS here and to ARCHITECTURE.md"
    );
}

#[test]
fn imports_only_run_down_the_layers() {
    let mut upward = Vec::new();
    for source in sources() {
        let Some(own) = rank(&source.top) else {
            continue;
        };
        for (number, code) in &source.lines {
            for target in crate_paths(code) {
                match rank(&target) {
                    Some(r) if r > own => upward.push(format!(
                        "src/{}:{number}: {} imports {target}, a higher layer",
                        source.rel, source.top
                    )),
                    _ => {}
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that run up the layers ({}):\n{}\nmove the item down to the layer that \
         owns it, or invert the dependency (a trait in the lower layer)",
        LAYERS.join(" < "),
        upward.join("\n")
    );
}

/// Every cycle of a directed graph, each once (written from its smallest node).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().expect("non-empty path");
            for next in edges.get(last).into_iter().flatten() {
                if next == start {
                    found.push(format!("{} → {start}", path.join(" → ")));
                } else if next > start && !path.contains(next) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    found
}

#[test]
fn no_cycle_between_top_level_modules() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for source in sources() {
        for (_, code) in &source.lines {
            for target in crate_paths(code) {
                if target != source.top && rank(&target).is_some() {
                    edges.entry(source.top.clone()).or_default().insert(target);
                }
            }
        }
    }
    let cycles = cycles(&edges);
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_source_file_is_longer_than_the_limit_before_its_tests() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|s| s.length_before_tests > MAX_LINES)
        .map(|s| format!("src/{}: {} lines", s.rel, s.length_before_tests))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines before their tests (split them by concern):\n{}",
        long.join("\n")
    );
}

#[test]
fn confined_crates_are_named_only_in_their_layer() {
    let mut outside = Vec::new();
    for source in sources() {
        for (krate, layer) in CONFINED {
            if source.top == *layer {
                continue;
            }
            for (number, code) in &source.lines {
                if names_crate(code, krate) {
                    outside.push(format!(
                        "src/{}:{number}: names `{krate}`, which only src/{layer}/ may use",
                        source.rel
                    ));
                }
            }
        }
    }
    assert!(outside.is_empty(), "{}", outside.join("\n"));
}

#[test]
fn architecture_md_maps_every_top_level_module() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    let map = std::fs::read_to_string(&path).expect("read ARCHITECTURE.md");
    let missing: Vec<&str> = LAYERS
        .iter()
        .copied()
        .filter(|layer| {
            let dir = format!("`src/{layer}/`");
            let file = format!("`src/{layer}.rs`");
            !map.contains(&dir) && !map.contains(&file)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md does not map {missing:?} (write `src/<module>/` or `src/<module>.rs`)"
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The scanners themselves: a check that cannot fail is no check.
    let mut in_block = false;
    assert_eq!(
        code_of("use crate::ops::cli; // crate::x", &mut in_block),
        "use crate::ops::cli; "
    );
    assert_eq!(code_of("a /* crate::x", &mut in_block), "a ");
    assert!(in_block);
    assert_eq!(code_of("still */ b", &mut in_block), " b");
    assert_eq!(
        crate_paths("use crate::guards::auth::{Mode}; crate::store::x()"),
        ["guards", "store"]
    );
    assert!(crate_paths("my_crate::x").is_empty());
    assert!(names_crate("use rusqlite::Connection;", "rusqlite"));
    assert!(names_crate("fn f(t: &rusqlite::Transaction)", "rusqlite"));
    assert!(!names_crate("let rusqlite_free = 1;", "rusqlite"));
    assert!(!names_crate("r2d2_sqlite::X", "r2d2"));
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
            .iter()
            .fold(BTreeMap::new(), |mut g, (from, to)| {
                g.entry(from.to_string())
                    .or_insert_with(BTreeSet::new)
                    .insert(to.to_string());
                g
            });
    assert_eq!(cycles(&graph), ["a → b → c → a"]);
    assert!(is_module("mod tests {") && is_module("pub(crate) mod testing {"));
    assert!(!is_module("fn tests() {"));
    assert_eq!(rank("clock"), Some(0));
    assert!(rank("ops") > rank("store"));
    let sources = sources();
    assert!(
        sources
            .iter()
            .any(|s| s.rel == "store/mod.rs"
                && s.lines.iter().any(|(_, c)| names_crate(c, "rusqlite"))),
        "the scanner no longer finds rusqlite in the store"
    );
}
