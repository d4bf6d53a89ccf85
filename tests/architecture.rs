//! The structure of `src/`, checked against the source: what ARCHITECTURE.md states as
//! rules, enforced here so that a change that breaks one fails in CI instead of in review.
//!
//! - A module may import from its own top-level folder or from a lower layer of
//!   [`LAYERS`], never from a higher one.
//! - Inside every folder (and between the top-level modules), the entries — its files other
//!   than `mod.rs`, and its sub-folders — import one another without a cycle: they form a
//!   tree (a directed acyclic graph) of imports. `mod.rs` is the folder's face: it declares
//!   and re-exports its children, and a child may use what it holds.
//! - No file holds more than [`MAX_LINES`] lines before its tests (the first `#[cfg(test)]`
//!   module); a file that is itself a test module (`#[cfg(test)] mod tests;`) is exempt.
//! - SQLite (`rusqlite`, `r2d2`) and PostgreSQL (`postgres`) are named only in
//!   `src/store/`, the HTTP listener (`tiny_http`) only in `src/transport/`.
//! - Every top-level module appears in ARCHITECTURE.md's code map, and every path that
//!   ARCHITECTURE.md names exists.
//!
//! The source is read as text, comments skipped. An import is any path through `crate::`,
//! `super::` or `self::`, in a `use` (grouped `use crate::{a::X, b::{Y, Z}}` included) or
//! inline in code; it is resolved to the longest module of `src/` it names. Each rule is a
//! function from the sources to the violations it finds, and the tests at the end break each
//! rule on purpose on a small made-up tree, so that no check can pass vacuously.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, lowest layer first. A module may import from its own
/// entry and the entries before it, never from one after it.
const LAYERS: &[&str] = &[
    "clock",     // the one clock
    "config",    // settings: file, environment, flags
    "catalog",   // the error catalog every layer reports through
    "telemetry", // OpenTelemetry spans, their export, the latency histograms
    "identity",  // tokens of the company's identity providers, verified
    "store",     // the database: the only code that holds SQL
    "tools",     // tool declarations, their context, the packs
    "guards",    // the chain around a call, its steps, audit and metrics
    "oauth",     // the OAuth authorization server: client ID metadata documents
    "protocol",  // JSON-RPC, revisions and eras, the dispatcher
    "console",   // the operator's console: its pages, sign-ins and forms
    "transport", // stdio, Streamable HTTP, sessions, OAuth endpoints
    "ops",       // the command line and the operator's commands
];

/// The longest a source file may be before its tests.
const MAX_LINES: usize = 700;

/// Crates that only one layer may name, and that layer.
const CONFINED: &[(&str, &str)] = &[
    ("rusqlite", "store"),
    ("r2d2", "store"),
    ("r2d2_sqlite", "store"),
    ("postgres", "store"),
    ("tiny_http", "transport"),
];

/// Where the paths ARCHITECTURE.md names may start: a backticked text beginning with one of
/// these is taken as a path of the repository.
const PATH_ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "docs/",
    "packaging/",
    "vendor/",
    ".ci/",
];

/// One source file.
struct Source {
    /// Its path relative to `src/`.
    rel: String,
    /// Its module path: `guards/auth/mod.rs` is `["guards", "auth"]`.
    module: Vec<String>,
    /// Its code, comments removed, lines kept (so an offset gives a line number).
    code: String,
    /// The byte offset where its tests begin (the code's length when it has none).
    tests_at: usize,
    /// Its number of lines before its tests.
    length_before_tests: usize,
    /// Whether the whole file is a test module (`#[cfg(test)] mod tests;` in its parent).
    is_test_module: bool,
}

impl Source {
    /// A source made of a path and its text.
    fn new(rel: &str, text: &str) -> Self {
        let module = module_of(rel);
        let raw: Vec<&str> = text.lines().collect();
        let test_line = raw
            .windows(2)
            .position(|w| w[0].trim_start().starts_with("#[cfg(test)]") && opens_module(w[1]))
            .filter(|&at| !raw[at].starts_with(char::is_whitespace));
        let mut in_block = false;
        let lines: Vec<String> = raw.iter().map(|l| code_of(l, &mut in_block)).collect();
        let tests_at = test_line.map_or_else(
            || lines.iter().map(|l| l.len() + 1).sum(),
            |at| lines[..at].iter().map(|l| l.len() + 1).sum(),
        );
        Self {
            rel: rel.to_owned(),
            module,
            code: lines.join("\n"),
            tests_at,
            length_before_tests: test_line.unwrap_or(raw.len()),
            is_test_module: false,
        }
    }

    fn top(&self) -> &str {
        &self.module[0]
    }

    /// The line number (from 1) of a byte offset of the code.
    fn line_at(&self, offset: usize) -> usize {
        self.code[..offset].matches('\n').count() + 1
    }

    /// The code before the tests.
    fn code_before_tests(&self) -> &str {
        &self.code[..self.tests_at.min(self.code.len())]
    }
}

/// The module path of a file of `src/`.
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel.split('/').map(str::to_owned).collect();
    let file = parts.pop().expect("a file name");
    if file != "mod.rs" {
        parts.push(file.trim_end_matches(".rs").to_owned());
    }
    parts
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

/// The sources of `src/`, without `lib.rs` and `main.rs` (the crate's roots, which only
/// declare the modules and run the command line).
fn sources() -> Vec<Source> {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let sources = files
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
            let text = std::fs::read_to_string(&path).expect("read source");
            Some(Source::new(&rel, &text))
        })
        .collect();
    mark_test_modules(sources)
}

/// Marks the files that are test modules: those declared as `#[cfg(test)] mod name;` (a
/// declaration, not an inline module) by their parent.
fn mark_test_modules(mut sources: Vec<Source>) -> Vec<Source> {
    let mut test_modules = BTreeSet::new();
    for source in &sources {
        let lines: Vec<&str> = source.code.lines().collect();
        for pair in lines.windows(2) {
            if pair[0].trim() == "#[cfg(test)]" && opens_module(pair[1]) {
                let declared = pair[1].trim();
                if let Some(name) = declared
                    .trim_end_matches(';')
                    .rsplit(' ')
                    .next()
                    .filter(|_| declared.ends_with(';'))
                {
                    let mut module = source.module.clone();
                    module.push(name.to_owned());
                    test_modules.insert(module);
                }
            }
        }
    }
    for source in &mut sources {
        source.is_test_module = test_modules.contains(&source.module);
    }
    sources
}

/// Whether a line opens a module (`mod tests {`, `pub(crate) mod testing;`): after a
/// `#[cfg(test)]`, where a file's test code begins.
fn opens_module(line: &str) -> bool {
    let line = line.trim_start();
    let rest = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub(super) "))
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    rest.starts_with("mod ")
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

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `word` stands at `at` in `code` as a whole word.
fn word_at(code: &str, at: usize, word: &str) -> bool {
    code[at..].starts_with(word)
        && code[..at].chars().next_back().is_none_or(|c| !is_ident(c))
        && code[at + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_ident(c))
}

/// Expands a use tree (whitespace removed) into its paths: `a::{b,c::{d,e}}` gives
/// `a::b`, `a::c::d`, `a::c::e`; `self` inside braces names the prefix itself.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.split(" as ").next().unwrap_or(tree).to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(expand_use_tree)
        .map(|p| {
            if p == "self" {
                prefix.trim_end_matches("::").to_owned()
            } else {
                format!("{prefix}{p}")
            }
        })
        .collect()
}

/// Every path a piece of code names that starts at `crate`, `super` or `self`, with the
/// offset where it is written: the paths of `use` items (grouped ones expanded) and the
/// paths written inline.
fn named_paths(code: &str) -> Vec<(usize, String)> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if !word_at(code, at, "use") {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            continue;
        };
        let tree: String = code[at + 4..at + end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace(" ::", "::")
            .replace(":: ", "::")
            .replace(", ", ",")
            .replace("{ ", "{")
            .replace(" }", "}")
            .replace(",}", "}");
        // A `use` in a string or a sentence is no use item: a tree has only these.
        let is_tree = tree
            .chars()
            .all(|c| is_ident(c) || matches!(c, ':' | '{' | '}' | ',' | '*' | ' '))
            && tree.matches('{').count() == tree.matches('}').count();
        if is_tree {
            paths.extend(expand_use_tree(&tree).into_iter().map(|p| (at, p)));
        }
    }
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(root) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| is_ident(c) || c == ':') {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            if path.len() > root.len() {
                paths.push((at, path));
            }
        }
    }
    paths
}

/// The module of `src/` a path names from `module` (the one of the file it is written in):
/// `crate::`, `super::` and `self::` resolved, then the longest known module it starts with.
/// `None` for a path outside the crate, or one naming no module of `src/` but the root.
fn resolve(module: &[String], path: &str, modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segments = path.split("::").filter(|s| !s.is_empty()).peekable();
    let mut at: Vec<String> = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super" | "self") => module.to_vec(),
        _ => return None,
    };
    while let Some(&segment) = segments.peek() {
        match segment {
            "super" => {
                at.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    let full: Vec<String> = at.into_iter().chain(segments.map(str::to_owned)).collect();
    (1..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// Every import of every source, resolved: (source index, offset, module imported).
fn imports(sources: &[Source]) -> Vec<(usize, usize, Vec<String>)> {
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut found = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        for (at, path) in named_paths(&source.code) {
            if let Some(target) = resolve(&source.module, &path, &modules) {
                found.push((index, at, target));
            }
        }
    }
    found
}

fn rank(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == top)
}

/// Top-level modules that are in no layer.
fn modules_in_no_layer(sources: &[Source]) -> Vec<String> {
    let unknown: BTreeSet<&str> = sources
        .iter()
        .map(Source::top)
        .filter(|top| rank(top).is_none())
        .collect();
    unknown.into_iter().map(str::to_owned).collect()
}

/// Imports that run up the layers.
fn upward_imports(sources: &[Source]) -> Vec<String> {
    imports(sources)
        .into_iter()
        .filter_map(|(index, at, target)| {
            let source = &sources[index];
            let (own, theirs) = (rank(source.top())?, rank(&target[0])?);
            (theirs > own).then(|| {
                format!(
                    "src/{}:{}: {} imports {}, a higher layer",
                    source.rel,
                    source.line_at(at),
                    source.top(),
                    target.join("::")
                )
            })
        })
        .collect()
}

/// The import graph of each folder (`""` for `src/` itself): for every folder, an edge
/// from one of its entries to another when code before the tests of a file in the first
/// imports the second. Imports of the folder's own `mod.rs`, and by it, are left out.
fn folder_graphs(sources: &[Source]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    for source in sources.iter().filter(|s| !s.is_test_module) {
        for (_, path) in named_paths(source.code_before_tests()) {
            let Some(target) = resolve(&source.module, &path, &modules) else {
                continue;
            };
            let from = &source.module;
            let common = from.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < from.len() && common < target.len() {
                graphs
                    .entry(from[..common].join("/"))
                    .or_default()
                    .entry(from[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    graphs
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

/// The import cycles inside each folder, and between the top-level modules.
fn folder_cycles(sources: &[Source]) -> Vec<String> {
    folder_graphs(sources)
        .iter()
        .flat_map(|(folder, graph)| {
            let folder = if folder.is_empty() {
                "src/".to_owned()
            } else {
                format!("src/{folder}/")
            };
            cycles(graph)
                .into_iter()
                .map(move |cycle| format!("{folder}: {cycle}"))
        })
        .collect()
}

/// Files longer than the limit before their tests.
fn long_files(sources: &[Source], limit: usize) -> Vec<String> {
    sources
        .iter()
        .filter(|s| !s.is_test_module && s.length_before_tests > limit)
        .map(|s| format!("src/{}: {} lines", s.rel, s.length_before_tests))
        .collect()
}

/// Whether a line of code names `krate` as a path root (`krate::`, `use krate`).
fn names_crate(code: &str, krate: &str) -> bool {
    code.match_indices(krate).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + krate.len()..];
        before.is_none_or(|c| !(is_ident(c) || c == ':'))
            && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

/// Confined crates named outside their layer.
fn confined_crates_outside(sources: &[Source]) -> Vec<String> {
    let mut outside = Vec::new();
    for source in sources {
        for (krate, layer) in CONFINED {
            if source.top() == *layer {
                continue;
            }
            for (number, code) in source.code.lines().enumerate() {
                if names_crate(code, krate) {
                    outside.push(format!(
                        "src/{}:{}: names `{krate}`, which only src/{layer}/ may use",
                        source.rel,
                        number + 1
                    ));
                }
            }
        }
    }
    outside
}

/// Top-level modules ARCHITECTURE.md does not map.
fn unmapped_layers(map: &str) -> Vec<&'static str> {
    LAYERS
        .iter()
        .copied()
        .filter(|layer| {
            !map.contains(&format!("`src/{layer}/`")) && !map.contains(&format!("`src/{layer}.rs`"))
        })
        .collect()
}

/// The repository paths a document names in backticks, as written, with a `:line` or
/// `::item` suffix removed.
fn named_repository_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| PATH_ROOTS.iter().any(|root| quoted.starts_with(root)))
        .filter(|quoted| !quoted.contains(char::is_whitespace) && !quoted.contains('*'))
        .map(|quoted| {
            let end = quoted.find(':').unwrap_or(quoted.len());
            quoted[..end].to_owned()
        })
        .collect()
}

/// The paths a document names that do not exist under `root`.
fn missing_paths(text: &str, root: &Path) -> Vec<String> {
    let mut missing: Vec<String> = named_repository_paths(text)
        .into_iter()
        .filter(|path| !root.join(path).exists())
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

fn architecture_md() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    std::fs::read_to_string(&path).expect("read ARCHITECTURE.md")
}

#[test]
fn every_module_is_in_a_layer() {
    let unknown = modules_in_no_layer(&sources());
    assert!(
        unknown.is_empty(),
        "top-level modules that are in no layer: {unknown:?}; put the code in a layer's \
         folder, or add the module to LAYERS here and to ARCHITECTURE.md"
    );
}

#[test]
fn imports_only_run_down_the_layers() {
    let upward = upward_imports(&sources());
    assert!(
        upward.is_empty(),
        "imports that run up the layers ({}):\n{}\nmove the item down to the layer that \
         owns it, or invert the dependency (a trait in the lower layer)",
        LAYERS.join(" < "),
        upward.join("\n")
    );
}

#[test]
fn no_import_cycle_inside_a_folder_or_between_top_level_modules() {
    let cycles = folder_cycles(&sources());
    assert!(
        cycles.is_empty(),
        "import cycles between the entries of a folder (move the shared item to the file \
         that owns it, or to the folder's mod.rs):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn no_source_file_is_longer_than_the_limit_before_its_tests() {
    let long = long_files(&sources(), MAX_LINES);
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines before their tests (split them by concern):\n{}",
        long.join("\n")
    );
}

#[test]
fn confined_crates_are_named_only_in_their_layer() {
    let outside = confined_crates_outside(&sources());
    assert!(outside.is_empty(), "{}", outside.join("\n"));
}

#[test]
fn architecture_md_maps_every_top_level_module_and_names_only_real_paths() {
    let map = architecture_md();
    let unmapped = unmapped_layers(&map);
    assert!(
        unmapped.is_empty(),
        "ARCHITECTURE.md does not map {unmapped:?} (write `src/<module>/` or `src/<module>.rs`)"
    );
    let named = named_repository_paths(&map);
    assert!(
        named.len() > LAYERS.len(),
        "ARCHITECTURE.md names only {} paths: the scanner no longer sees its code map",
        named.len()
    );
    let missing = missing_paths(&map, Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// A made-up tree, from (path under `src/`, text) pairs.
fn tree(files: &[(&str, &str)]) -> Vec<Source> {
    mark_test_modules(
        files
            .iter()
            .map(|(rel, text)| Source::new(rel, text))
            .collect(),
    )
}

#[test]
fn the_scanner_reads_comments_grouped_imports_and_relative_paths() {
    let mut in_block = false;
    assert_eq!(
        code_of("use crate::ops::cli; // crate::x", &mut in_block),
        "use crate::ops::cli; "
    );
    assert_eq!(code_of("a /* crate::x", &mut in_block), "a ");
    assert!(in_block);
    assert_eq!(code_of("still */ b", &mut in_block), " b");
    assert_eq!(
        expand_use_tree("crate::{a::X,b::{self,Y,c::Z}}"),
        ["crate::a::X", "crate::b", "crate::b::Y", "crate::b::c::Z"]
    );
    let code = "use crate::{\n    guards::auth::Mode,\n    store::{Store, audit},\n};\nfn f() { super::super::clock::now(); self::x::y(); }";
    let named: Vec<String> = named_paths(code).into_iter().map(|(_, p)| p).collect();
    for expected in [
        "crate::guards::auth::Mode",
        "crate::store::Store",
        "crate::store::audit",
        "super::super::clock::now",
        "self::x::y",
    ] {
        assert!(
            named.iter().any(|p| p == expected),
            "{expected} in {named:?}"
        );
    }
    assert!(named_paths("my_crate::x(); reuse crate_x;").is_empty());
    assert!(named_paths("let s = \"to use {x}, as }{ \"; let t = 1;").is_empty());
    let modules: BTreeSet<Vec<String>> = [
        vec!["clock"],
        vec!["guards"],
        vec!["guards", "auth"],
        vec!["guards", "auth", "cache"],
    ]
    .into_iter()
    .map(|m| m.into_iter().map(str::to_owned).collect())
    .collect();
    let from: Vec<String> = vec!["guards".into(), "auth".into(), "cache".into()];
    assert_eq!(
        resolve(&from, "super::super::super::clock::now", &modules),
        Some(vec!["clock".to_owned()])
    );
    assert_eq!(
        resolve(&from, "super::Authenticator", &modules),
        Some(vec!["guards".to_owned(), "auth".to_owned()])
    );
    assert_eq!(resolve(&from, "std::io", &modules), None);
    assert!(names_crate("use rusqlite::Connection;", "rusqlite"));
    assert!(names_crate("fn f(t: &rusqlite::Transaction)", "rusqlite"));
    assert!(!names_crate("let rusqlite_free = 1;", "rusqlite"));
    assert!(!names_crate("r2d2_sqlite::X", "r2d2"));
    assert_eq!(module_of("guards/auth/mod.rs"), ["guards", "auth"]);
    assert_eq!(module_of("clock.rs"), ["clock"]);
}

#[test]
fn each_rule_fails_when_broken_on_purpose() {
    // An upward import hidden in a grouped use.
    let upward = tree(&[
        ("store/mod.rs", "use crate::{clock::Clock, guards::Chain};"),
        ("clock.rs", ""),
        ("guards/mod.rs", ""),
    ]);
    assert_eq!(
        upward_imports(&upward),
        ["src/store/mod.rs:1: store imports guards, a higher layer"]
    );
    // A module in no layer.
    assert_eq!(modules_in_no_layer(&tree(&[("misc.rs", "")])), ["misc"]);
    // A cycle between two files of one folder, one side through `super::`; the folder's
    // mod.rs, which uses both, makes none; the same import in a test module makes none.
    let cyclic = tree(&[
        (
            "guards/mod.rs",
            "mod a; mod b;\npub use a::X; use self::b::Y;",
        ),
        ("guards/a.rs", "use super::b::Y;\npub struct X;"),
        (
            "guards/b.rs",
            "pub struct Y;\nfn f() { crate::guards::a::X; }",
        ),
        ("clock.rs", ""),
    ]);
    assert_eq!(folder_cycles(&cyclic), ["src/guards/: a → b → a"]);
    let acyclic = tree(&[
        ("guards/mod.rs", "mod a; mod b;\npub use a::X;"),
        ("guards/a.rs", "use super::b::Y;\npub struct X;"),
        (
            "guards/b.rs",
            "pub struct Y;\n#[cfg(test)]\nmod tests {\n    use super::super::a::X;\n}",
        ),
    ]);
    assert!(folder_cycles(&acyclic).is_empty());
    // A cycle between two sub-folders of a folder, and between two top-level modules.
    let nested = tree(&[
        (
            "tools/backends/up/call.rs",
            "use crate::tools::backends::rest::R;",
        ),
        (
            "tools/backends/rest/mod.rs",
            "use super::super::backends::up::call::C;",
        ),
        ("clock.rs", "use crate::config::X;"),
        ("config/mod.rs", "use crate::clock::Clock;"),
    ]);
    assert_eq!(
        folder_cycles(&nested),
        [
            "src/: clock → config → clock",
            "src/tools/backends/: rest → up → rest"
        ]
    );
    // A long file; its tests do not count, nor does a file that is a test module.
    let body = "fn f() {}\n".repeat(12);
    let long = tree(&[
        (
            "a.rs",
            &format!("{body}#[cfg(test)]\nmod tests {{\n{body}}}\n"),
        ),
        ("b.rs", &format!("{body}{body}")),
        ("c/mod.rs", "#[cfg(test)]\nmod tests;\n"),
        ("c/tests.rs", &format!("{body}{body}")),
    ]);
    assert_eq!(long_files(&long, 20), ["src/b.rs: 24 lines"]);
    // A confined crate named outside its layer.
    let confined = tree(&[("tools/x.rs", "fn f(c: &rusqlite::Connection) {}")]);
    assert_eq!(
        confined_crates_outside(&confined),
        ["src/tools/x.rs:1: names `rusqlite`, which only src/store/ may use"]
    );
    // ARCHITECTURE.md naming a path that is not there, and missing a layer.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = "`src/clock.rs` and `src/nowhere.rs:12`, `tests/architecture.rs`, `cargo test`";
    assert_eq!(missing_paths(text, root), ["src/nowhere.rs"]);
    assert!(unmapped_layers(text).contains(&"ops"));
}

#[test]
fn the_scanner_sees_the_real_tree() {
    let sources = sources();
    assert!(
        sources
            .iter()
            .any(|s| s.rel == "store/mod.rs" && s.code.lines().any(|c| names_crate(c, "rusqlite"))),
        "the scanner no longer finds rusqlite in the store"
    );
    assert!(
        sources
            .iter()
            .any(|s| s.rel == "tools/backends/openapi/tests.rs" && s.is_test_module),
        "the scanner no longer recognises a file that is a test module"
    );
    let graphs = folder_graphs(&sources);
    assert!(
        graphs.get("").is_some_and(|top| top.len() >= 5),
        "the scanner no longer sees the imports between top-level modules"
    );
    assert!(
        graphs.len() >= 10,
        "the scanner sees imports inside only {} folders",
        graphs.len()
    );
}
