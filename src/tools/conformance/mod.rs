//! The `conformance` pack: fixture tools, resources and prompts named exactly as the
//! official MCP conformance suite (`@modelcontextprotocol/conformance`) expects, so the
//! suite — and the benchmarks, which drive the same fixtures — can run against tollgate.
//!
//! The pack is compiled in only with the `conformance-pack` cargo feature, and registered
//! only when an operator enables it; it is never on by default. Every tool needs the
//! `conformance:use` scope and takes no idempotency key; none reads or changes business
//! data. One resource can change: `test_update_watched_resource` gives
//! `test://watched-resource` a new revision and tells every session subscribed to it.
//! Names, texts, MIME types and argument names follow the suite's own scenarios
//! (`src/scenarios/server/*.ts`) and its reference server
//! (`examples/servers/typescript/everything-server.ts`).
//!
//! Here: the fixture tools. Beside them: [`resources`] (the documents and the template),
//! [`prompts`], `media` (the image and audio payloads: real, minimal files) and `input`
//! (the fixtures that ask the client for input: sampling, elicitation, the 2026-07-28
//! multi-round `input_required` results).

mod input;
mod media;
mod prompts;
mod resources;

pub use prompts::prompts;
pub use resources::resources;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::tools::{
    Category, FnTool, Idempotency, LogLevel, Tool, ToolContext, ToolFn, ToolOutput, ToolSpec,
    text_block,
};

use media::{WAV_BASE64, image_block};
use resources::{EMBEDDED, MIXED, WATCHED, WATCHED_REVISION};

/// The scope a credential needs to see and call the conformance tools.
pub const SCOPE: &str = "conformance:use";

/// The pause between the steps of the logging and progress tools (the suite expects ~50 ms).
const STEP_PAUSE: Duration = Duration::from_millis(50);

/// One row of the tool table: everything but the parts every fixture shares.
struct ToolEntry {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    category: Category,
    input_schema: fn() -> Value,
    run: ToolFn,
    /// Pauses between its steps (see [`Tool::waits`]).
    waits: bool,
    /// Sends log messages (see [`Tool::logs`]).
    logs: bool,
}

impl ToolEntry {
    fn build(&self) -> Arc<dyn Tool> {
        let spec = ToolSpec {
            name: self.name.into(),
            title: self.title.into(),
            description: self.description.into(),
            category: self.category,
            scope: SCOPE.into(),
            idempotency: Idempotency::NotApplicable,
            input_schema: (self.input_schema)(),
            output_schema: None,
        };
        Arc::new(FnTool::new(spec, self.run).waiting_and_logging(self.waits, self.logs))
    }
}

const TOOL_TABLE: [ToolEntry; 10] = [
    ToolEntry {
        name: "test_simple_text",
        title: "Conformance: simple text",
        description: "Conformance-suite fixture. Returns one fixed text block. Takes no \
                      arguments, reads and changes nothing; only useful for protocol tests \
                      and benchmarks.",
        category: Category::Read,
        input_schema: no_arguments,
        run: simple_text,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_image_content",
        title: "Conformance: image content",
        description: "Conformance-suite fixture. Returns one image block: a 1x1 red PNG, \
                      base64-encoded. Takes no arguments; only useful for protocol tests.",
        category: Category::Read,
        input_schema: no_arguments,
        run: image_content,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_audio_content",
        title: "Conformance: audio content",
        description: "Conformance-suite fixture. Returns one audio block: a 1 ms silent WAV, \
                      base64-encoded. Takes no arguments; only useful for protocol tests.",
        category: Category::Read,
        input_schema: no_arguments,
        run: audio_content,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_embedded_resource",
        title: "Conformance: embedded resource",
        description: "Conformance-suite fixture. Returns one embedded text resource \
                      (test://embedded-resource). Takes no arguments; only useful for \
                      protocol tests.",
        category: Category::Read,
        input_schema: no_arguments,
        run: embedded_resource,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_multiple_content_types",
        title: "Conformance: mixed content",
        description: "Conformance-suite fixture. Returns a text block, an image block and an \
                      embedded JSON resource in one result. Takes no arguments; only useful \
                      for protocol tests.",
        category: Category::Read,
        input_schema: no_arguments,
        run: multiple_content_types,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_tool_with_logging",
        title: "Conformance: logging during a call",
        description: "Conformance-suite fixture. Sends three info-level log notifications \
                      about 50 ms apart, then returns a confirmation text. Takes no \
                      arguments; only useful for protocol tests.",
        category: Category::Generate,
        input_schema: no_arguments,
        run: tool_with_logging,
        waits: true,
        logs: true,
    },
    ToolEntry {
        name: "test_error_handling",
        title: "Conformance: tool error",
        description: "Conformance-suite fixture. Always fails with an isError result, to \
                      test how errors inside a tool are reported. Takes no arguments; do not \
                      retry it.",
        category: Category::Read,
        input_schema: no_arguments,
        run: error_handling,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_tool_with_progress",
        title: "Conformance: progress during a call",
        description: "Conformance-suite fixture. Reports progress 0, 50 and 100 of 100 about \
                      50 ms apart when the request carries a progressToken, then returns a \
                      confirmation text. Takes no arguments; only useful for protocol tests.",
        category: Category::Generate,
        input_schema: no_arguments,
        run: tool_with_progress,
        waits: true,
        logs: false,
    },
    ToolEntry {
        name: "json_schema_2020_12_tool",
        title: "Conformance: JSON Schema 2020-12 input",
        description: "Conformance-suite fixture whose input schema uses JSON Schema 2020-12 \
                      features ($schema, $defs, $anchor, allOf/anyOf, if/then/else). Pass a \
                      name, an optional address {street, city}, a contactMethod ('phone' or \
                      'email') and the matching phone or email; it echoes the arguments.",
        category: Category::Read,
        input_schema: json_schema_2020_12,
        run: echo_json_schema_arguments,
        waits: false,
        logs: false,
    },
    ToolEntry {
        name: "test_update_watched_resource",
        title: "Conformance: change the watched resource",
        description: "Conformance fixture. Gives test://watched-resource a new revision \
                      (its text names it) and sends notifications/resources/updated to every \
                      session subscribed to it. Takes no arguments; changes no business data.",
        category: Category::Write,
        input_schema: no_arguments,
        run: update_watched_resource,
        waits: false,
        logs: false,
    },
];

/// The fixture tools, in the suite's names.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = TOOL_TABLE.iter().map(ToolEntry::build).collect();
    tools.extend(input::tools());
    tools
}

/// The input schema of a tool that takes no arguments.
fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

/// The suite's JSON Schema 2020-12 fixture (SEP-1613, SEP-2106), kept verbatim because the
/// suite checks that each keyword survives `tools/list`.
fn json_schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } }
            }
        },
        "properties": {
            "name": { "type": "string" },
            "address": { "$ref": "#/$defs/address" },
            "contactMethod": { "type": "string", "enum": ["phone", "email"] },
            "phone": { "type": "string" },
            "email": { "type": "string" }
        },
        "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
        "if": {
            "properties": { "contactMethod": { "const": "phone" } },
            "required": ["contactMethod"]
        },
        "then": { "required": ["phone"] },
        "else": { "required": ["email"] },
        "additionalProperties": false
    })
}

fn simple_text(_: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    Ok(ToolOutput::text(
        "This is a simple text response for testing.",
    ))
}

fn content(blocks: Vec<Value>) -> ToolOutput {
    ToolOutput {
        input_required: None,
        content: blocks,
        structured: None,
    }
}

fn image_content(_: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    Ok(content(vec![image_block()]))
}

fn audio_content(_: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let audio = json!({ "type": "audio", "data": WAV_BASE64.as_str(), "mimeType": "audio/wav" });
    Ok(content(vec![audio]))
}

fn embedded_resource(_: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    Ok(content(vec![EMBEDDED.embedded_block()]))
}

fn multiple_content_types(
    _: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    Ok(content(vec![
        json!({ "type": "text", "text": "Multiple content types test:" }),
        image_block(),
        MIXED.embedded_block(),
    ]))
}

/// Runs `steps` one after another, [`STEP_PAUSE`] apart, and stops before the next step once
/// the caller has cancelled; returns how many steps ran.
fn run_paced(ctx: &ToolContext<'_>, steps: usize, mut step: impl FnMut(usize)) -> usize {
    for i in 0..steps {
        if i > 0 {
            thread::sleep(STEP_PAUSE);
        }
        if ctx.is_cancelled() {
            return i;
        }
        step(i);
    }
    steps
}

fn cancelled_after(done: usize, total: usize) -> ToolOutput {
    ToolOutput::text(format!(
        "Stopped after {done} of {total} steps: the request was cancelled."
    ))
}

const LOG_MESSAGES: [&str; 3] = [
    "Tool execution started",
    "Tool processing data",
    "Tool execution completed",
];

fn tool_with_logging(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let done = run_paced(ctx, LOG_MESSAGES.len(), |i| {
        ctx.log(LogLevel::Info, json!(LOG_MESSAGES[i]));
    });
    if done < LOG_MESSAGES.len() {
        return Ok(cancelled_after(done, LOG_MESSAGES.len()));
    }
    Ok(ToolOutput::text("Tool with logging executed successfully"))
}

const PROGRESS_TOTAL: f64 = 100.0;
const PROGRESS_STEPS: [f64; 3] = [0.0, 50.0, 100.0];

fn tool_with_progress(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let done = run_paced(ctx, PROGRESS_STEPS.len(), |i| {
        let step = PROGRESS_STEPS[i];
        let message = format!("Completed step {step} of {PROGRESS_TOTAL}");
        ctx.progress(step, Some(PROGRESS_TOTAL), Some(&message));
    });
    if done < PROGRESS_STEPS.len() {
        return Ok(cancelled_after(done, PROGRESS_STEPS.len()));
    }
    Ok(ToolOutput::text(
        "Progress tool finished: reported 0, 50 and 100 of 100.",
    ))
}

/// Always an `isError` result. The suite checks only `isError: true` and a non-empty text;
/// the catalog's `adapter_error` is the nearest entry for "the backend answered with an
/// error", and `details.original_error` says the failure is deliberate.
fn error_handling(_: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    Err(McpError::new(ErrorKind::AdapterError)
        .detail("original_error", "conformance_intentional_error"))
}

fn echo_json_schema_arguments(
    _: &ToolContext<'_>,
    args: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let echoed = Value::Object(args.clone());
    Ok(ToolOutput::text(format!(
        "JSON Schema 2020-12 tool called with: {echoed}"
    )))
}

fn update_watched_resource(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let revision = WATCHED_REVISION.fetch_add(1, Ordering::Relaxed) + 1;
    ctx.resource_changed(WATCHED.uri);
    Ok(content(vec![text_block(format!(
        "{} is now at revision {revision}.",
        WATCHED.uri
    ))]))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::media::{PNG_1X1, wav_bytes};
    use super::*;
    use crate::config::Locale;
    use crate::store::{Store, StoreOptions};
    use crate::tools::{ClientLink, Registry, Resolution, ResourceBody};

    /// What a tool told its client.
    #[derive(Debug, Clone, PartialEq)]
    enum Sent {
        Progress {
            token: Value,
            progress: f64,
            total: Option<f64>,
        },
        Log(LogLevel, Value),
        Updated(String),
    }

    /// Records everything a tool sends its client; it cannot be asked anything.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Sent>>);

    impl ClientLink for Recorder {
        fn progress(&self, token: &Value, progress: f64, total: Option<f64>, _: Option<&str>) {
            self.record(Sent::Progress {
                token: token.clone(),
                progress,
                total,
            });
        }
        fn log(&self, level: LogLevel, data: Value) {
            self.record(Sent::Log(level, data));
        }
        fn resource_updated(&self, uri: &str) {
            self.record(Sent::Updated(uri.to_owned()));
        }
        fn can_ask(&self, _: &str) -> bool {
            false
        }
        fn ask(
            &self,
            _: &str,
            _: Value,
            _: &dyn Fn() -> Option<McpError>,
        ) -> Result<Value, McpError> {
            Err(McpError::internal())
        }
    }

    impl Recorder {
        fn record(&self, sent: Sent) {
            self.0.lock().expect("recorder lock").push(sent);
        }

        fn sent(&self) -> Vec<Sent> {
            self.0.lock().expect("recorder lock").clone()
        }
    }

    /// How a test call is made.
    struct Call {
        progress_token: Option<Value>,
        log_level: Option<LogLevel>,
        cancelled: bool,
    }

    const PLAIN: Call = Call {
        progress_token: None,
        log_level: None,
        cancelled: false,
    };

    /// Calls tool `name` with `args`; returns its outcome and what it sent its client.
    fn call_with(name: &str, args: Value, how: Call) -> (Result<ToolOutput, McpError>, Vec<Sent>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = StoreOptions {
            create: true,
            ..StoreOptions::default()
        };
        let store = Store::open(&dir.path().join("t.db"), &opts).expect("store");
        let recorder = Recorder::default();
        let cancelled = AtomicBool::new(how.cancelled);
        let ctx = ToolContext {
            store: &store,
            book: crate::tools::Book::Live,
            locale: Locale::En,
            clock: &crate::clock::Clock::System,
            progress_token: how.progress_token,
            log_level: how.log_level,
            client: &recorder,
            cancelled: &cancelled,
            commit_hook: None,
            input: crate::tools::InputContext {
                responses: None,
                request_state: None,
                client_capabilities: &Value::Null,
                state_key: &crate::tools::request_state::StateKey::new(vec![0; 32]),
            },
            meta: None,
        };
        let tool = tools()
            .into_iter()
            .find(|t| t.spec().name == name)
            .expect("tool exists");
        let args = args.as_object().cloned().unwrap_or_default();
        let outcome = tool.call(&ctx, &args);
        (outcome, recorder.sent())
    }

    fn call(name: &str) -> ToolOutput {
        call_with(name, json!({}), PLAIN).0.expect("tool succeeds")
    }

    fn decode(data: &Value) -> Vec<u8> {
        STANDARD
            .decode(data.as_str().expect("base64 string"))
            .expect("valid base64")
    }

    #[test]
    fn simple_text_returns_the_suite_text() {
        let out = call("test_simple_text");
        assert_eq!(
            out.content,
            [json!({ "type": "text", "text": "This is a simple text response for testing." })]
        );
        assert!(out.structured.is_none());
    }

    #[test]
    fn image_content_is_a_base64_png() {
        let out = call("test_image_content");
        assert_eq!(out.content.len(), 1);
        assert_eq!(out.content[0]["type"], "image");
        assert_eq!(out.content[0]["mimeType"], "image/png");
        assert_eq!(decode(&out.content[0]["data"]), PNG_1X1);
    }

    #[test]
    fn audio_content_is_a_base64_wav() {
        let out = call("test_audio_content");
        assert_eq!(out.content.len(), 1);
        assert_eq!(out.content[0]["type"], "audio");
        assert_eq!(out.content[0]["mimeType"], "audio/wav");
        let bytes = decode(&out.content[0]["data"]);
        assert_eq!(&bytes[..4], b"RIFF");
        assert_eq!(&bytes[8..12], b"WAVE");
        assert_eq!(bytes, wav_bytes());
    }

    #[test]
    fn embedded_resource_is_the_suite_text_resource() {
        let out = call("test_embedded_resource");
        assert_eq!(
            out.content,
            [json!({ "type": "resource", "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            }})]
        );
    }

    #[test]
    fn multiple_content_types_gives_text_image_and_json_resource() {
        let out = call("test_multiple_content_types");
        let kinds: Vec<&str> = out
            .content
            .iter()
            .map(|c| c["type"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(kinds, ["text", "image", "resource"]);
        assert_eq!(out.content[0]["text"], "Multiple content types test:");
        assert_eq!(decode(&out.content[1]["data"]), PNG_1X1);
        let resource = &out.content[2]["resource"];
        assert_eq!(resource["uri"], "test://mixed-content-resource");
        assert_eq!(resource["mimeType"], "application/json");
        let parsed: Value =
            serde_json::from_str(resource["text"].as_str().unwrap_or_default()).expect("json");
        assert_eq!(parsed, json!({ "test": "data", "value": 123 }));
    }

    #[test]
    fn logging_tool_sends_three_info_messages() {
        let how = Call {
            log_level: Some(LogLevel::Debug),
            ..PLAIN
        };
        let (out, sent) = call_with("test_tool_with_logging", json!({}), how);
        let out = out.expect("tool succeeds");
        assert_eq!(
            out.content[0]["text"],
            "Tool with logging executed successfully"
        );
        let expected: Vec<Sent> = LOG_MESSAGES
            .iter()
            .map(|text| Sent::Log(LogLevel::Info, json!(text)))
            .collect();
        assert_eq!(sent, expected);
    }

    #[test]
    fn logging_tool_is_silent_without_logging_and_above_the_level() {
        let (out, sent) = call_with("test_tool_with_logging", json!({}), PLAIN);
        assert!(out.is_ok());
        assert!(sent.is_empty());
        let how = Call {
            log_level: Some(LogLevel::Warning),
            ..PLAIN
        };
        let (_, sent) = call_with("test_tool_with_logging", json!({}), how);
        assert!(sent.is_empty());
    }

    #[test]
    fn progress_tool_reports_0_50_100_of_100_for_the_token() {
        let how = Call {
            progress_token: Some(json!("progress-test-1")),
            ..PLAIN
        };
        let (out, sent) = call_with("test_tool_with_progress", json!({}), how);
        assert!(out.is_ok());
        let expected: Vec<Sent> = [0.0, 50.0, 100.0]
            .into_iter()
            .map(|progress| Sent::Progress {
                token: json!("progress-test-1"),
                progress,
                total: Some(100.0),
            })
            .collect();
        assert_eq!(sent, expected);
    }

    #[test]
    fn progress_tool_without_token_sends_nothing_and_stops_when_cancelled() {
        let (out, sent) = call_with("test_tool_with_progress", json!({}), PLAIN);
        assert!(out.is_ok());
        assert!(sent.is_empty());
        let how = Call {
            progress_token: Some(json!(7)),
            cancelled: true,
            ..PLAIN
        };
        let (out, sent) = call_with("test_tool_with_progress", json!({}), how);
        assert!(sent.is_empty());
        let text = out.expect("result").content[0]["text"].clone();
        assert_eq!(
            text,
            "Stopped after 0 of 3 steps: the request was cancelled."
        );
    }

    #[test]
    fn error_tool_fails_with_a_catalog_tool_error() {
        let (out, sent) = call_with("test_error_handling", json!({}), PLAIN);
        assert!(sent.is_empty());
        let err = out.expect_err("always fails");
        assert_eq!(err.kind(), ErrorKind::AdapterError);
        let result = err.to_tool_result(Locale::En);
        assert_eq!(result["isError"], true);
        assert!(
            !result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
        let envelope = &result["_meta"]["dev.tollgate/error"];
        assert_eq!(envelope["code"], "adapter_error");
        assert_eq!(
            envelope["details"]["original_error"],
            "conformance_intentional_error"
        );
    }

    #[test]
    fn json_schema_tool_keeps_the_2020_12_keywords() {
        let tool = tools()
            .into_iter()
            .find(|t| t.spec().name == "json_schema_2020_12_tool")
            .expect("tool exists");
        let schema = &tool.spec().to_list_entry()["inputSchema"];
        assert_eq!(
            schema["$schema"],
            "https://json-schema.org/draft/2020-12/schema"
        );
        assert_eq!(schema["$defs"]["address"]["$anchor"], "addressDef");
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema["allOf"][0]["anyOf"].is_array());
        assert!(schema["if"].is_object() && schema["then"].is_object());
        assert!(schema["else"].is_object());
        let args = json!({ "name": "Ada", "email": "ada@example.com" });
        let (out, _) = call_with("json_schema_2020_12_tool", args, PLAIN);
        assert_eq!(
            out.expect("echo").content[0]["text"],
            r#"JSON Schema 2020-12 tool called with: {"name":"Ada","email":"ada@example.com"}"#
        );
    }

    fn registry() -> Registry {
        Registry::new(tools(), &[], resources(), prompts()).expect("schemas compile")
    }

    #[test]
    fn every_schema_compiles_and_rejects_unknown_arguments() {
        let registry = registry();
        for tool in registry.tools() {
            assert!(
                tool.validate(&json!({ "bogus": 1 })).is_err(),
                "{}",
                tool.spec().name
            );
        }
        let Resolution::Tool(tool) = registry.resolve("json_schema_2020_12_tool") else {
            panic!("json_schema_2020_12_tool not registered");
        };
        assert!(tool.validate(&json!({ "email": "a@b.c" })).is_ok());
        assert!(
            tool.validate(&json!({ "contactMethod": "phone", "email": "a@b.c" }))
                .is_err()
        );
        assert!(
            tool.validate(&json!({ "phone": "1", "address": { "city": 3 } }))
                .is_err()
        );
    }

    #[test]
    fn every_tool_declares_the_shared_policy() {
        let all = tools();
        assert_eq!(
            all.len(),
            TOOL_TABLE.len() + crate::tools::conformance::input::tools().len()
        );
        let mut names: Vec<&str> = all.iter().map(|t| &*t.spec().name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "tool names are unique");
        for tool in &all {
            let spec = tool.spec();
            assert_eq!(spec.scope, SCOPE);
            assert_eq!(spec.idempotency, Idempotency::NotApplicable);
            assert_eq!(spec.input_schema["type"], "object");
            assert_eq!(spec.input_schema["additionalProperties"], false);
            assert!(!spec.title.is_empty() && !spec.description.is_empty());
            assert!(spec.name.len() <= 64);
        }
    }

    fn read_text(uri: &str) -> (String, String) {
        match registry().read_resource(uri) {
            Some((mime, ResourceBody::Text(text))) => (mime, text),
            other => panic!("{uri}: expected text, got {:?}", other.map(|(m, _)| m)),
        }
    }

    #[test]
    fn updating_the_watched_resource_changes_it_and_tells_the_client_once() {
        let before = read_text(WATCHED.uri).1;
        let (out, sent) = call_with("test_update_watched_resource", json!({}), PLAIN);
        let text = out.expect("updated").content[0]["text"].clone();
        let revision = text
            .as_str()
            .and_then(|t| t.strip_prefix("test://watched-resource is now at revision "))
            .and_then(|t| t.strip_suffix('.'))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("the result names the revision");
        assert_eq!(sent, [Sent::Updated(WATCHED.uri.to_owned())]);
        let after = read_text(WATCHED.uri).1;
        assert_ne!(before, after);
        assert_eq!(
            after,
            format!("Watched resource content (revision {revision})")
        );
        let changing = registry();
        assert!(changing.has_changing_resources());
        assert!(changing.resource_changes(WATCHED.uri));
        assert!(!changing.resource_changes("test://static-text"));
    }
}
