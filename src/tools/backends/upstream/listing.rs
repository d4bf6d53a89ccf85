//! What of an upstream's list of tools is offered, and in what shape.
//!
//! The upstream decides how many tools it lists and how large each one is; the gate decides
//! what it passes on to its own clients, whose hosts refuse or choke on what MCP itself does
//! not forbid. Each tool becomes an [`Operation`] named after the upstream's name made safe
//! (`get-sum` → `get_sum`), unless:
//!
//! - it comes after the first `max_tools` offered (and paging stops there);
//! - its safe name is empty, taken by an earlier tool, or longer than
//!   [`TOOL_NAME_MAX_CHARS`] (64) after the backend's prefix;
//! - its input schema is not an object, or its input or output schema serializes to more
//!   than `max_schema_bytes`.
//!
//! A tool left out is counted by reason (shown on `/healthz`, `/metrics` and by
//! `tollgate backends check`) and logged once. A description longer than
//! [`DESCRIPTION_MAX_BYTES`] is cut there (the tool stays: its name and schema are what a
//! model needs to call it), and so is a title longer than [`TITLE_MAX_BYTES`].

use std::collections::{BTreeMap, HashMap, HashSet};

use rmcp::model::{Tool as UpstreamTool, ToolAnnotations};
use serde::Serialize;
use serde_json::Value;

use crate::config::McpBackend;
use crate::tools::Category;
use crate::tools::backends::pins::{Hold, Pins, Presented};
use crate::tools::backends::{LeftOutReason, Operation, TOOL_NAME_MAX_CHARS, snake_case};

/// The longest tool description offered, in bytes; a longer one is cut, ending with `…`.
pub(super) const DESCRIPTION_MAX_BYTES: usize = 4096;
/// The longest tool title offered, in bytes; a longer one is cut, ending with `…`.
pub(super) const TITLE_MAX_BYTES: usize = 256;
/// How many tools left out for a reason of their own a listing names (the rest are counted).
const LEFT_OUT_NAMED: usize = 32;
/// How much of a left-out tool's name is shown and logged, in characters.
const NAME_SHOWN_CHARS: usize = 80;
/// How many left-out names are logged once each; past them, they are only counted.
const LOGGED_NAMES_MAX: usize = 1024;

/// How much of an upstream's list is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    /// Tools past this many offered are left out.
    pub(super) max_tools: usize,
    /// A tool whose input or output schema serializes to more bytes is left out.
    pub(super) max_schema_bytes: usize,
}

impl Limits {
    /// The limits `config` sets.
    pub(super) fn of(config: &McpBackend) -> Limits {
        Limits {
            max_tools: config.max_tools,
            max_schema_bytes: config.max_schema_bytes,
        }
    }
}

/// The operations offered now, the upstream's own name of each, and what was left out.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Listing {
    pub(super) operations: Vec<Operation>,
    /// Operation name → the upstream's name.
    pub(super) names: HashMap<String, String>,
    /// Tools left out, by reason.
    pub(super) left_out: BTreeMap<LeftOutReason, usize>,
    /// The first tools left out for a reason of their own, by shown name.
    pub(super) left_out_tools: Vec<(String, LeftOutReason)>,
    /// Descriptions cut to [`DESCRIPTION_MAX_BYTES`].
    pub(super) descriptions_cut: usize,
    /// Every operation within the limits with its definition as presented, the held ones
    /// included (with pinning; empty without).
    pub(super) candidates: Vec<(Operation, Presented)>,
    /// The operations held until an operator decides, with their state.
    pub(super) held: Vec<(String, &'static str)>,
}

impl Listing {
    fn leave_out(&mut self, tool: &UpstreamTool, reason: LeftOutReason) {
        *self.left_out.entry(reason).or_default() += 1;
        if reason != LeftOutReason::TooManyTools && self.left_out_tools.len() < LEFT_OUT_NAMED {
            self.left_out_tools.push((shown_name(&tool.name), reason));
        }
    }
}

/// The operations of an upstream's `tools`, within `limits`.
pub(super) fn listing_of(tools: &[UpstreamTool], limits: Limits) -> Listing {
    let mut listing = Listing::default();
    for tool in tools {
        if listing.operations.len() >= limits.max_tools {
            listing.leave_out(tool, LeftOutReason::TooManyTools);
            continue;
        }
        match operation_of(tool, &listing.names, limits) {
            Ok((operation, cut)) => {
                listing.descriptions_cut += usize::from(cut);
                listing
                    .names
                    .insert(operation.name.clone(), tool.name.to_string());
                listing.operations.push(operation);
            }
            Err(reason) => listing.leave_out(tool, reason),
        }
    }
    listing
}

impl Listing {
    /// Notes each operation's definition as `tools` present it, then keeps offered only
    /// those `pins` approve.
    pub(super) fn pin(&mut self, tools: &[UpstreamTool], pins: &Pins) {
        self.candidates = self
            .operations
            .iter()
            .filter_map(|op| {
                let upstream = self.names.get(&op.name)?;
                let tool = tools.iter().find(|t| t.name == upstream.as_str())?;
                Some((op.clone(), Presented::of(&op.name, tool)))
            })
            .collect();
        self.apply(pins);
    }

    /// Sorts the candidates into offered and held by the decisions in the store now.
    pub(super) fn apply(&mut self, pins: &Pins) {
        let holds = self.holds(pins);
        self.sort(holds);
    }

    /// What the decisions in the store say of each candidate now. A store that cannot be
    /// read holds them all: nothing unapproved is offered.
    pub(super) fn holds(&self, pins: &Pins) -> Vec<Hold> {
        holds_of(pins, &self.presented().collect::<Vec<_>>())
    }

    /// Each candidate's definition as presented, in order.
    pub(super) fn presented(&self) -> impl Iterator<Item = &Presented> {
        self.candidates.iter().map(|(_, p)| p)
    }

    /// Whether `holds` (one per candidate) are the ones the listing is sorted by now: the
    /// same tools held, in the same states (the others are the offered ones).
    pub(super) fn sorted_by(&self, holds: &[Hold]) -> bool {
        let expected = self
            .candidates
            .iter()
            .zip(holds)
            .filter_map(|((op, _), hold)| match hold {
                Hold::Offered => None,
                Hold::Held(state) => Some((op.name.as_str(), *state)),
            });
        expected.eq(self
            .held
            .iter()
            .map(|(name, state)| (name.as_str(), *state)))
    }

    /// Offers the candidates `holds` says are offered and holds the others.
    pub(super) fn sort(&mut self, holds: Vec<Hold>) {
        self.operations.clear();
        self.held.clear();
        for ((op, _), hold) in self.candidates.iter().zip(holds) {
            match hold {
                Hold::Offered => self.operations.push(op.clone()),
                Hold::Held(state) => self.held.push((op.name.clone(), state)),
            }
        }
    }
}

/// What the decisions in the store say of each of `presented` (tools' and prompts'
/// definitions) now: nothing is read for none, and a store that cannot be read holds them
/// all, for nothing unapproved is offered.
pub(super) fn holds_of(pins: &Pins, presented: &[&Presented]) -> Vec<Hold> {
    if presented.is_empty() {
        return Vec::new();
    }
    review_off_runtime(pins, presented).unwrap_or_else(|e| {
        tracing::warn!(
            backend = %pins.backend,
            error = %e,
            "cannot read the approved definitions; the backend's tools and prompts are held"
        );
        vec![Hold::Held(crate::store::pins::PENDING); presented.len()]
    })
}

/// [`Pins::review`], on a thread of its own when called on the outbound runtime (a list
/// that arrives with a connection or `list_changed`): the store's PostgreSQL client blocks
/// on a runtime of its own, which cannot run inside another.
fn review_off_runtime(pins: &Pins, presented: &[&Presented]) -> Result<Vec<Hold>, String> {
    if tokio::runtime::Handle::try_current().is_err() {
        return pins.review(presented).map_err(|e| e.to_string());
    }
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("tollgate-pins".to_owned())
            .spawn_scoped(scope, || pins.review(presented).map_err(|e| e.to_string()))
            .map_err(|e| format!("cannot start a thread to read the approved definitions: {e}"))?
            .join()
            .map_err(|_| "reading the approved definitions panicked".to_owned())?
    })
}

/// The operation `tool` becomes and whether its description was cut, or why it is left out.
fn operation_of(
    tool: &UpstreamTool,
    taken: &HashMap<String, String>,
    limits: Limits,
) -> Result<(Operation, bool), LeftOutReason> {
    let name = safe_name(&tool.name).ok_or(LeftOutReason::NameUnusable)?;
    if name.chars().count() > TOOL_NAME_MAX_CHARS {
        return Err(LeftOutReason::NameTooLong);
    }
    if taken.contains_key(&name) {
        return Err(LeftOutReason::NameTaken);
    }
    if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(LeftOutReason::InputSchemaNotObject);
    }
    let fits = |schema: &serde_json::Map<String, Value>| {
        serialized_within(schema, limits.max_schema_bytes)
    };
    if !fits(tool.input_schema.as_ref()) || tool.output_schema.as_deref().is_some_and(|s| !fits(s))
    {
        return Err(LeftOutReason::SchemaTooLarge);
    }
    let description = tool.description.as_deref().unwrap_or_default();
    let (description, cut) = cut_to(description, DESCRIPTION_MAX_BYTES);
    let title = tool
        .title
        .as_deref()
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.as_deref()))
        .map(|title| cut_to(title, TITLE_MAX_BYTES).0);
    let operation = Operation {
        name,
        title,
        description,
        category: category_of(tool.annotations.as_ref()),
        input_schema: Value::Object(tool.input_schema.as_ref().clone()),
        output_schema: tool
            .output_schema
            .as_ref()
            .map(|s| Value::Object(s.as_ref().clone())),
    };
    Ok((operation, cut))
}

/// Whether `value` serializes to at most `max` bytes; stops writing once it is past them.
fn serialized_within<T: Serialize + ?Sized>(value: &T, max: usize) -> bool {
    /// A sink that takes `max` bytes and refuses the next.
    struct Budget(usize);
    impl std::io::Write for Budget {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self
                .0
                .checked_sub(buf.len())
                .ok_or_else(|| std::io::Error::other("over the limit"))?;
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Budget(max), value).is_ok()
}

/// `text` cut to at most `max` bytes at a character boundary, ending with `…` when cut;
/// and whether it was.
fn cut_to(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}…", &text[..end]), true)
}

/// A left-out tool's name as shown and logged: at most [`NAME_SHOWN_CHARS`] characters
/// (then `…`), control characters replaced.
fn shown_name(name: &str) -> String {
    let mut shown: String = name
        .chars()
        .take(NAME_SHOWN_CHARS)
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect();
    if name.chars().nth(NAME_SHOWN_CHARS).is_some() {
        shown.push('…');
    }
    shown
}

/// An upstream tool's name as a tool-name suffix: as it is when it is already lower-case
/// letters, digits and `_`, otherwise in snake case; `None` when nothing is left.
pub(super) fn safe_name(name: &str) -> Option<String> {
    let safe = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let name = if safe {
        name.to_owned()
    } else {
        snake_case(name)
    };
    (!name.is_empty()).then_some(name)
}

/// The default category of an upstream tool: `readOnlyHint` → read, `destructiveHint` →
/// destructive, anything else write.
pub(super) fn category_of(annotations: Option<&ToolAnnotations>) -> Category {
    match annotations {
        Some(a) if a.read_only_hint == Some(true) => Category::Read,
        Some(a) if a.destructive_hint == Some(true) => Category::Destructive,
        _ => Category::Write,
    }
}

/// What was already logged about tools left out, so that each is logged once.
#[derive(Debug, Default)]
pub(super) struct Logged {
    names: HashSet<(String, LeftOutReason)>,
    too_many: usize,
}

impl Logged {
    /// Logs what `listing` left out that was not logged before: each named tool once, and
    /// the number left out past `max_tools` when it changed.
    pub(super) fn log_new(&mut self, backend: &str, listing: &Listing, limits: Limits) {
        for (name, reason) in &listing.left_out_tools {
            let key = (name.clone(), *reason);
            if self.names.len() >= LOGGED_NAMES_MAX || self.names.contains(&key) {
                continue;
            }
            tracing::warn!(
                backend,
                tool = %name,
                reason = reason.as_str(),
                max_name_chars = TOOL_NAME_MAX_CHARS,
                max_schema_bytes = limits.max_schema_bytes,
                "upstream tool left out"
            );
            self.names.insert(key);
        }
        let too_many = listing
            .left_out
            .get(&LeftOutReason::TooManyTools)
            .copied()
            .unwrap_or(0);
        if too_many != self.too_many {
            self.too_many = too_many;
            if too_many > 0 {
                tracing::warn!(
                    backend,
                    left_out = too_many,
                    max_tools = limits.max_tools,
                    "upstream tools left out: the upstream lists more than max_tools"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        max_tools: 256,
        max_schema_bytes: 1024,
    };

    fn tool(value: Value) -> UpstreamTool {
        serde_json::from_value(value).expect("a tool")
    }

    fn named(name: &str) -> UpstreamTool {
        tool(json!({"name": name, "inputSchema": {"type": "object"}}))
    }

    #[test]
    fn names_are_made_safe_and_kept_when_they_already_are() {
        for (given, safe) in [
            ("echo", Some("echo")),
            ("get_sum_2", Some("get_sum_2")),
            ("get-sum", Some("get_sum")),
            (
                "trigger-long-running-operation",
                Some("trigger_long_running_operation"),
            ),
            ("listFiles", Some("list_files")),
            ("fs.read", Some("fs_read")),
            ("---", None),
        ] {
            assert_eq!(safe_name(given).as_deref(), safe, "{given}");
        }
    }

    #[test]
    fn the_category_comes_from_the_annotations() {
        let hints =
            |value: Value| -> ToolAnnotations { serde_json::from_value(value).expect("hints") };
        assert_eq!(category_of(None), Category::Write);
        assert_eq!(
            category_of(Some(&hints(json!({"readOnlyHint": true})))),
            Category::Read
        );
        assert_eq!(
            category_of(Some(&hints(
                json!({"readOnlyHint": true, "destructiveHint": true})
            ))),
            Category::Read
        );
        assert_eq!(
            category_of(Some(&hints(json!({"destructiveHint": true})))),
            Category::Destructive
        );
        assert_eq!(
            category_of(Some(&hints(
                json!({"readOnlyHint": false, "destructiveHint": false})
            ))),
            Category::Write
        );
    }

    #[test]
    fn a_listing_maps_back_to_the_upstream_names_and_leaves_out_what_cannot_be_offered() {
        let tools = [
            tool(
                json!({"name": "get-sum", "title": "Get Sum", "description": "Adds.",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}},
                "outputSchema": {"type": "object"},
                "annotations": {"readOnlyHint": true}}),
            ),
            tool(json!({"name": "get_sum", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "odd", "inputSchema": {"type": "array"}})),
            tool(json!({"name": "---", "inputSchema": {"type": "object"}})),
            tool(json!({"name": "wipe", "inputSchema": {"type": "object"},
                "annotations": {"title": "Wipe it", "destructiveHint": true}})),
        ];
        let listing = listing_of(&tools, LIMITS);
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["get_sum", "wipe"]);
        assert_eq!(listing.names["get_sum"], "get-sum");
        let sum = &listing.operations[0];
        assert_eq!(sum.title.as_deref(), Some("Get Sum"));
        assert_eq!(sum.description, "Adds.");
        assert_eq!(sum.category, Category::Read);
        assert_eq!(sum.output_schema, Some(json!({"type": "object"})));
        assert_eq!(listing.operations[1].title.as_deref(), Some("Wipe it"));
        assert_eq!(listing.operations[1].category, Category::Destructive);
        assert_eq!(
            listing.left_out,
            BTreeMap::from([
                (LeftOutReason::NameUnusable, 1),
                (LeftOutReason::NameTaken, 1),
                (LeftOutReason::InputSchemaNotObject, 1),
            ])
        );
        assert_eq!(
            listing.left_out_tools,
            [
                ("get_sum".to_owned(), LeftOutReason::NameTaken),
                ("odd".to_owned(), LeftOutReason::InputSchemaNotObject),
                ("---".to_owned(), LeftOutReason::NameUnusable),
            ]
        );
    }

    #[test]
    fn tools_past_max_tools_are_counted_but_not_named() {
        let tools: Vec<_> = (0..10).map(|i| named(&format!("t{i}"))).collect();
        let listing = listing_of(
            &tools,
            Limits {
                max_tools: 3,
                ..LIMITS
            },
        );
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["t0", "t1", "t2"]);
        assert_eq!(
            listing.left_out,
            BTreeMap::from([(LeftOutReason::TooManyTools, 7)])
        );
        assert!(listing.left_out_tools.is_empty());
    }

    #[test]
    fn a_tool_left_out_does_not_take_a_place_under_max_tools() {
        let long = "n".repeat(TOOL_NAME_MAX_CHARS + 1);
        let tools = [named(&long), named("a"), named("b"), named("c")];
        let listing = listing_of(
            &tools,
            Limits {
                max_tools: 2,
                ..LIMITS
            },
        );
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            listing.left_out,
            BTreeMap::from([
                (LeftOutReason::NameTooLong, 1),
                (LeftOutReason::TooManyTools, 1),
            ])
        );
    }

    #[test]
    fn a_name_longer_than_64_after_the_prefix_is_left_out_and_shown_shortened() {
        let at_limit = "a".repeat(TOOL_NAME_MAX_CHARS);
        // 100 characters whose snake case is 128 long: the safe name is what is measured.
        let camel = "aB".repeat(50);
        let huge = format!("x{}", "y".repeat(5005));
        let listing = listing_of(&[named(&at_limit), named(&camel), named(&huge)], LIMITS);
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, [at_limit.as_str()]);
        assert_eq!(
            listing.left_out,
            BTreeMap::from([(LeftOutReason::NameTooLong, 2)])
        );
        let (shown, reason) = &listing.left_out_tools[1];
        assert_eq!(*reason, LeftOutReason::NameTooLong);
        assert_eq!(shown.chars().count(), NAME_SHOWN_CHARS + 1);
        assert!(shown.starts_with("xyyy") && shown.ends_with('…'), "{shown}");
        assert_eq!(shown_name("bad\nname"), "bad\u{FFFD}name");
    }

    #[test]
    fn a_schema_over_max_schema_bytes_leaves_the_tool_out() {
        let padding = "p".repeat(LIMITS.max_schema_bytes);
        let big_input = tool(json!({"name": "big_in",
            "inputSchema": {"type": "object", "description": padding}}));
        let big_output = tool(json!({"name": "big_out", "inputSchema": {"type": "object"},
            "outputSchema": {"type": "object", "description": padding}}));
        let small = "p".repeat(LIMITS.max_schema_bytes - 100);
        let fits = tool(json!({"name": "fits",
            "inputSchema": {"type": "object", "description": small}}));
        let listing = listing_of(&[big_input, big_output, fits], LIMITS);
        let names: Vec<_> = listing.operations.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["fits"]);
        assert_eq!(
            listing.left_out,
            BTreeMap::from([(LeftOutReason::SchemaTooLarge, 2)])
        );
        assert!(serialized_within(&json!({"a": 1}), 7));
        assert!(!serialized_within(&json!({"a": 1}), 6));
    }

    #[test]
    fn a_long_description_or_title_is_cut_at_a_character_boundary() {
        let description = format!("{}é tail", "d".repeat(DESCRIPTION_MAX_BYTES - 4));
        let title = "T".repeat(TITLE_MAX_BYTES * 2);
        let listing = listing_of(
            &[tool(json!({"name": "wordy", "title": title,
                "description": description, "inputSchema": {"type": "object"}}))],
            LIMITS,
        );
        let wordy = &listing.operations[0];
        assert!(wordy.description.len() <= DESCRIPTION_MAX_BYTES);
        assert!(wordy.description.ends_with("dd…"), "{}", wordy.description);
        let title = wordy.title.as_deref().expect("a title");
        assert!(title.len() <= TITLE_MAX_BYTES && title.ends_with('…'));
        assert_eq!(listing.descriptions_cut, 1);
        assert_eq!(cut_to("short", 10), ("short".to_owned(), false));
        assert_eq!(cut_to("ééé", 6), ("ééé".to_owned(), false));
        assert_eq!(cut_to("ééé", 5), ("é…".to_owned(), true));
        assert_eq!(cut_to("ééé", 4), ("…".to_owned(), true));
    }
}
