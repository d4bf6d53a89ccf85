//! The `conformance` pack: fixture tools, resources and prompts named exactly as the
//! official MCP conformance suite (`@modelcontextprotocol/conformance`) expects, so the
//! suite — and the benchmarks, which drive the same fixtures — can run against tollgate.
//!
//! The pack is compiled in only with the `conformance-pack` cargo feature, and registered
//! only when an operator enables it; it is never on by default. Every tool needs the
//! `conformance:use` scope and takes no idempotency key; none reads or changes business
//! data. One resource can change: `test_update_watched_resource` gives
//! `test://watched-resource` a new revision and tells every session subscribed to it. Names, texts, MIME types and argument names follow the suite's own
//! scenarios (`src/scenarios/server/*.ts`) and its reference server
//! (`examples/servers/typescript/everything-server.ts`); the image and audio payloads are
//! real, minimal files (a 1×1 PNG and a short silent WAV).
//!
//! The fixtures that ask the client for input (sampling, elicitation, the 2026-07-28
//! multi-round `input_required` results) live in `conformance_input`.

mod input;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::thread;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::catalog::{ErrorKind, McpError};
use crate::tools::{
    Category, FnTool, Idempotency, LogLevel, Prompt, PromptArgument, PromptSpec, ResourceBody,
    ResourceProvider, ResourceSpec, Tool, ToolContext, ToolFn, ToolOutput, ToolSpec, text_block,
};

/// The scope a credential needs to see and call the conformance tools.
pub const SCOPE: &str = "conformance:use";

/// The pause between the steps of the logging and progress tools (the suite expects ~50 ms).
const STEP_PAUSE: Duration = Duration::from_millis(50);

/// A valid 1×1 PNG: one opaque red pixel, 8-bit RGB, every chunk CRC correct.
#[rustfmt::skip]
const PNG_1X1: &[u8] = &[
    // Signature.
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a,
    // IHDR: width 1, height 1, bit depth 8, colour type 2 (RGB), no interlace.
    0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00,
    0x90, 0x77, 0x53, 0xde,
    // IDAT: zlib stream of the single scanline [filter 0, 0xff, 0x00, 0x00].
    0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54,
    0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01, 0x01, 0x00,
    0xf7, 0x03, 0x41, 0x43,
    // IEND.
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
];

/// Sample rate of the fixture clip (mono, 16-bit PCM).
const WAV_SAMPLE_RATE: u32 = 8_000;
/// Number of samples in the fixture clip (1 ms of silence).
const WAV_SAMPLES: u32 = 8;

static PNG_BASE64: LazyLock<String> = LazyLock::new(|| STANDARD.encode(PNG_1X1));
static WAV_BASE64: LazyLock<String> = LazyLock::new(|| STANDARD.encode(wav_bytes()));

/// A complete, valid WAV file: RIFF header, PCM `fmt ` chunk and `data` chunk of silence.
fn wav_bytes() -> Vec<u8> {
    const CHANNELS: u16 = 1;
    const BITS: u16 = 16;
    let block_align = CHANNELS * BITS / 8;
    let data_len = WAV_SAMPLES * u32::from(block_align);
    let mut out = Vec::with_capacity(44 + data_len as usize);
    out.extend_from_slice(b"RIFF");
    // The RIFF size counts everything after this field: "WAVE" + fmt chunk + data chunk.
    out.extend_from_slice(&(36 + data_len).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes()); // PCM
    out.extend_from_slice(&CHANNELS.to_le_bytes());
    out.extend_from_slice(&WAV_SAMPLE_RATE.to_le_bytes());
    out.extend_from_slice(&(WAV_SAMPLE_RATE * u32::from(block_align)).to_le_bytes());
    out.extend_from_slice(&block_align.to_le_bytes());
    out.extend_from_slice(&BITS.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&data_len.to_le_bytes());
    out.resize(out.len() + data_len as usize, 0);
    out
}

// ---- Documents (readable resources, also embedded by tools) ---------------------------

/// The contents of a fixed document.
enum Body {
    Text(&'static str),
    Blob(&'static [u8]),
}

/// A fixed, readable document of the pack.
struct Document {
    uri: &'static str,
    name: &'static str,
    title: &'static str,
    description: &'static str,
    mime_type: &'static str,
    body: Body,
}

const STATIC_TEXT: Document = Document {
    uri: "test://static-text",
    name: "static-text",
    title: "Static Text Resource",
    description: "A static text resource for conformance testing.",
    mime_type: "text/plain",
    body: Body::Text("This is the content of the static text resource."),
};

const STATIC_BINARY: Document = Document {
    uri: "test://static-binary",
    name: "static-binary",
    title: "Static Binary Resource",
    description: "A static binary resource (a 1x1 PNG image) for conformance testing.",
    mime_type: "image/png",
    body: Body::Blob(PNG_1X1),
};

/// How many times `test_update_watched_resource` changed `test://watched-resource` in this
/// process (its text names the revision from the first change on).
static WATCHED_REVISION: AtomicU64 = AtomicU64::new(0);

/// The text of `test://watched-resource` at its current revision.
fn watched_text() -> String {
    match WATCHED_REVISION.load(Ordering::Relaxed) {
        0 => "Watched resource content".to_owned(),
        n => format!("Watched resource content (revision {n})"),
    }
}

const WATCHED: Document = Document {
    uri: "test://watched-resource",
    name: "watched-resource",
    title: "Watched Resource",
    description: "A text resource clients may subscribe to, for conformance testing; \
                  test_update_watched_resource changes it.",
    mime_type: "text/plain",
    // Read through `watched_text`, which follows the revision.
    body: Body::Text("Watched resource content"),
};

const EMBEDDED: Document = Document {
    uri: "test://embedded-resource",
    name: "embedded-resource",
    title: "Embedded Resource",
    description: "The text resource that test_embedded_resource embeds in its result.",
    mime_type: "text/plain",
    body: Body::Text("This is an embedded resource content."),
};

const MIXED: Document = Document {
    uri: "test://mixed-content-resource",
    name: "mixed-content-resource",
    title: "Mixed Content Resource",
    description: "The JSON resource that test_multiple_content_types embeds in its result.",
    mime_type: "application/json",
    body: Body::Text(r#"{"test":"data","value":123}"#),
};

static DOCUMENTS: [&Document; 5] = [&STATIC_TEXT, &STATIC_BINARY, &WATCHED, &EMBEDDED, &MIXED];

impl Document {
    fn spec(&self) -> ResourceSpec {
        ResourceSpec {
            uri: self.uri.to_owned(),
            name: self.name.to_owned(),
            title: self.title.to_owned(),
            description: self.description.to_owned(),
            mime_type: self.mime_type.to_owned(),
        }
    }

    fn resource_body(&self) -> ResourceBody {
        match self.body {
            Body::Text(text) => ResourceBody::Text(text.to_owned()),
            Body::Blob(bytes) => ResourceBody::Blob(bytes.to_vec()),
        }
    }

    /// The document as a `resource` content block (embedded resource).
    fn embedded_block(&self) -> Value {
        let mut resource = json!({ "uri": self.uri, "mimeType": self.mime_type });
        match self.body {
            Body::Text(text) => resource["text"] = json!(text),
            Body::Blob(bytes) => resource["blob"] = json!(STANDARD.encode(bytes)),
        }
        json!({ "type": "resource", "resource": resource })
    }
}

/// An `image` content block carrying the fixture PNG.
fn image_block() -> Value {
    json!({ "type": "image", "data": PNG_BASE64.as_str(), "mimeType": "image/png" })
}

// ---- Tools ------------------------------------------------------------------------------

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
    tools.extend(crate::tools::conformance::input::tools());
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

// ---- Resources --------------------------------------------------------------------------

/// The fixed documents: `test://static-text`, `test://static-binary`,
/// `test://watched-resource` and the two resources the tools embed.
struct FixtureDocuments;

impl ResourceProvider for FixtureDocuments {
    fn list(&self) -> Vec<ResourceSpec> {
        DOCUMENTS.iter().map(|doc| doc.spec()).collect()
    }

    fn read(&self, uri: &str) -> Option<(String, ResourceBody)> {
        let doc = DOCUMENTS.iter().find(|doc| doc.uri == uri)?;
        let body = match doc.uri {
            uri if uri == WATCHED.uri => ResourceBody::Text(watched_text()),
            _ => doc.resource_body(),
        };
        Some((doc.mime_type.to_owned(), body))
    }

    fn changing(&self) -> &[&'static str] {
        &[WATCHED.uri]
    }
}

const TEMPLATE_URI: &str = "test://template/{id}/data";
const TEMPLATE_PREFIX: &str = "test://template/";
const TEMPLATE_SUFFIX: &str = "/data";

/// The resource template `test://template/{id}/data`, readable for any single-segment id.
struct DataTemplate;

impl DataTemplate {
    /// The `{id}` of a concrete URI of this template, when `uri` is one.
    fn id_of(uri: &str) -> Option<&str> {
        let id = uri
            .strip_prefix(TEMPLATE_PREFIX)?
            .strip_suffix(TEMPLATE_SUFFIX)?;
        let single_segment = !id.is_empty() && !id.contains(['/', '?', '#']);
        single_segment.then_some(id)
    }
}

impl ResourceProvider for DataTemplate {
    fn list(&self) -> Vec<ResourceSpec> {
        Vec::new()
    }

    fn templates(&self) -> Vec<Value> {
        vec![json!({
            "uriTemplate": TEMPLATE_URI,
            "name": "template",
            "title": "Resource Template",
            "description": "A resource template with parameter substitution: reading \
                            test://template/<id>/data returns a JSON document naming <id>.",
            "mimeType": "application/json",
        })]
    }

    fn read(&self, uri: &str) -> Option<(String, ResourceBody)> {
        let id = Self::id_of(uri)?;
        // The suite compares this text; keys stay in this order (serde_json preserve_order).
        let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") })
            .to_string();
        Some(("application/json".to_owned(), ResourceBody::Text(text)))
    }
}

/// The fixture documents and the `test://template/{id}/data` template.
pub fn resources() -> Vec<Arc<dyn ResourceProvider>> {
    vec![Arc::new(FixtureDocuments), Arc::new(DataTemplate)]
}

// ---- Prompts ----------------------------------------------------------------------------

type RenderFn = fn(&Map<String, Value>) -> Vec<Value>;
type CompleteFn = fn(&str, &str) -> Vec<String>;

/// A fixture prompt: a declaration, its renderer and its argument completer.
struct FixturePrompt {
    spec: PromptSpec,
    render: RenderFn,
    complete: CompleteFn,
}

impl Prompt for FixturePrompt {
    fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    fn messages(&self, _book: crate::tools::Book, args: &Map<String, Value>) -> Vec<Value> {
        (self.render)(args)
    }

    fn complete(&self, _book: crate::tools::Book, argument: &str, value: &str) -> Vec<String> {
        (self.complete)(argument, value)
    }
}

fn no_completions(_: &str, _: &str) -> Vec<String> {
    Vec::new()
}

/// A string argument; required ones are checked by the dispatcher before rendering.
fn argument<'a>(args: &'a Map<String, Value>, name: &str) -> &'a str {
    args.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn user_message(content: Value) -> Value {
    json!({ "role": "user", "content": content })
}

fn user_text(text: &str) -> Value {
    user_message(json!({ "type": "text", "text": text }))
}

fn required(name: &'static str, description: &'static str) -> PromptArgument {
    PromptArgument {
        name,
        description,
        required: true,
        completes_from: None,
    }
}

fn simple_prompt() -> FixturePrompt {
    FixturePrompt {
        spec: PromptSpec {
            name: "test_simple_prompt",
            title: "Simple Test Prompt",
            description: "Conformance-suite fixture: a prompt without arguments.",
            reads: None,
            arguments: Vec::new(),
        },
        render: |_| vec![user_text("This is a simple prompt for testing.")],
        complete: no_completions,
    }
}

fn prompt_with_arguments() -> FixturePrompt {
    FixturePrompt {
        spec: PromptSpec {
            name: "test_prompt_with_arguments",
            title: "Prompt With Arguments",
            description: "Conformance-suite fixture: a prompt with two required arguments.",
            reads: None,
            arguments: vec![
                required("arg1", "First test argument"),
                required("arg2", "Second test argument"),
            ],
        },
        render: render_with_arguments,
        complete: complete_arguments,
    }
}

fn render_with_arguments(args: &Map<String, Value>) -> Vec<Value> {
    let (arg1, arg2) = (argument(args, "arg1"), argument(args, "arg2"));
    vec![user_text(&format!(
        "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
    ))]
}

/// Suggestions offered for `arg1` of `test_prompt_with_arguments`.
const ARG1_SUGGESTIONS: [&str; 7] = [
    "hello",
    "help",
    "paris",
    "park",
    "test",
    "testValue1",
    "world",
];

/// Completes `arg1` with the suggestions that start with `value`, ignoring ASCII case.
fn complete_arguments(argument: &str, value: &str) -> Vec<String> {
    if argument != "arg1" {
        return Vec::new();
    }
    let prefix = value.to_ascii_lowercase();
    ARG1_SUGGESTIONS
        .iter()
        .filter(|s| s.to_ascii_lowercase().starts_with(&prefix))
        .map(|s| (*s).to_owned())
        .collect()
}

fn prompt_with_embedded_resource() -> FixturePrompt {
    FixturePrompt {
        spec: PromptSpec {
            name: "test_prompt_with_embedded_resource",
            title: "Prompt With Embedded Resource",
            description: "Conformance-suite fixture: a prompt that embeds a resource.",
            reads: None,
            arguments: vec![required("resourceUri", "URI of the resource to embed")],
        },
        render: render_embedded_resource,
        complete: no_completions,
    }
}

fn render_embedded_resource(args: &Map<String, Value>) -> Vec<Value> {
    let resource = json!({
        "uri": argument(args, "resourceUri"),
        "mimeType": "text/plain",
        "text": "Embedded resource content for testing.",
    });
    vec![
        user_message(json!({ "type": "resource", "resource": resource })),
        user_text("Please process the embedded resource above."),
    ]
}

fn prompt_with_image() -> FixturePrompt {
    FixturePrompt {
        spec: PromptSpec {
            name: "test_prompt_with_image",
            title: "Prompt With Image",
            description: "Conformance-suite fixture: a prompt that includes an image.",
            reads: None,
            arguments: Vec::new(),
        },
        render: |_| {
            vec![
                user_message(image_block()),
                user_text("Please analyze the image above."),
            ]
        },
        complete: no_completions,
    }
}

/// The fixture prompts, in the suite's names.
pub fn prompts() -> Vec<Arc<dyn Prompt>> {
    let mut prompts: Vec<Arc<dyn Prompt>> = vec![
        Arc::new(simple_prompt()),
        Arc::new(prompt_with_arguments()),
        Arc::new(prompt_with_embedded_resource()),
        Arc::new(prompt_with_image()),
    ];
    prompts.extend(crate::tools::conformance::input::prompts());
    prompts
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::config::Locale;
    use crate::store::{Store, StoreOptions};
    use crate::tools::{ClientLink, Registry, Resolution};

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

    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffff_u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn be32(bytes: &[u8]) -> u32 {
        u32::from_be_bytes(bytes.try_into().expect("4 bytes"))
    }

    fn le32(bytes: &[u8]) -> u32 {
        u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
    }

    #[test]
    fn png_and_wav_start_with_their_magic_numbers() {
        assert_eq!(&PNG_1X1[..8], b"\x89PNG\r\n\x1a\n");
        let wav = wav_bytes();
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..16], b"WAVEfmt ");
    }

    #[test]
    fn png_is_well_formed_with_correct_chunk_crcs() {
        let mut rest = &PNG_1X1[8..];
        let mut kinds = Vec::new();
        while !rest.is_empty() {
            let len = be32(&rest[..4]) as usize;
            let (kind_and_body, crc) = (&rest[4..8 + len], be32(&rest[8 + len..12 + len]));
            assert_eq!(crc32(kind_and_body), crc, "chunk {:?}", &kind_and_body[..4]);
            kinds.push(kind_and_body[..4].to_vec());
            rest = &rest[12 + len..];
        }
        assert_eq!(
            kinds,
            [b"IHDR".to_vec(), b"IDAT".to_vec(), b"IEND".to_vec()]
        );
        // IHDR: 1x1, 8-bit RGB.
        assert_eq!(&PNG_1X1[16..26], &[0, 0, 0, 1, 0, 0, 0, 1, 8, 2]);
    }

    #[test]
    fn wav_header_sizes_match_the_file() {
        let wav = wav_bytes();
        assert_eq!(le32(&wav[4..8]) as usize, wav.len() - 8);
        assert_eq!(le32(&wav[16..20]), 16, "PCM fmt chunk");
        assert_eq!(u16::from_le_bytes([wav[20], wav[21]]), 1, "PCM format tag");
        assert_eq!(le32(&wav[24..28]), WAV_SAMPLE_RATE);
        assert_eq!(&wav[36..40], b"data");
        assert_eq!(le32(&wav[40..44]) as usize, wav.len() - 44);
        assert_eq!(wav.len(), 44 + 2 * WAV_SAMPLES as usize);
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

    #[test]
    fn resources_list_the_fixture_documents() {
        let uris: Vec<String> = registry().resources().into_iter().map(|r| r.uri).collect();
        assert_eq!(
            uris,
            [
                "test://embedded-resource",
                "test://mixed-content-resource",
                "test://static-binary",
                "test://static-text",
                "test://watched-resource",
            ]
        );
        for spec in registry().resources() {
            assert!(!spec.name.is_empty() && !spec.description.is_empty());
            assert!(!spec.title.is_empty() && !spec.mime_type.is_empty());
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

    #[test]
    fn static_resources_read_with_the_suite_contents() {
        let text = read_text("test://static-text");
        assert_eq!(text.0, "text/plain");
        assert_eq!(text.1, "This is the content of the static text resource.");
        let watched = read_text("test://watched-resource");
        assert_eq!(watched.0, "text/plain");
        assert!(
            watched.1.starts_with("Watched resource content"),
            "{}",
            watched.1
        );
        match registry().read_resource("test://static-binary") {
            Some((mime, ResourceBody::Blob(bytes))) => {
                assert_eq!(mime, "image/png");
                assert_eq!(bytes, PNG_1X1);
            }
            _ => panic!("static-binary is not a blob"),
        }
        assert!(registry().read_resource("test://nonexistent").is_none());
    }

    #[test]
    fn template_read_for_id_123_is_the_exact_json() {
        let (mime, text) = read_text("test://template/123/data");
        assert_eq!(mime, "application/json");
        assert_eq!(
            text,
            r#"{"id":"123","templateTest":true,"data":"Data for ID: 123"}"#
        );
        for bad in [
            "test://template//data",
            "test://template/1/2/data",
            "test://template/123",
            "test://template/123/data/x",
        ] {
            assert!(registry().read_resource(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn template_is_listed_with_all_fields() {
        let templates = registry().resource_templates();
        assert_eq!(templates.len(), 1);
        let t = &templates[0];
        assert_eq!(t["uriTemplate"], "test://template/{id}/data");
        assert_eq!(t["name"], "template");
        assert_eq!(t["mimeType"], "application/json");
        assert!(t["title"].is_string() && t["description"].is_string());
    }

    fn render(name: &str, args: Value) -> Vec<Value> {
        let registry = registry();
        let prompt = registry.prompt(name).expect("prompt exists");
        prompt.messages(crate::tools::Book::Live, args.as_object().expect("object"))
    }

    #[test]
    fn prompts_render_the_suite_messages() {
        assert_eq!(
            render("test_simple_prompt", json!({})),
            [json!({ "role": "user", "content": { "type": "text",
                "text": "This is a simple prompt for testing." } })]
        );
        let with_args = render(
            "test_prompt_with_arguments",
            json!({ "arg1": "hello", "arg2": "world" }),
        );
        assert_eq!(
            with_args[0]["content"]["text"],
            "Prompt with arguments: arg1='hello', arg2='world'"
        );
        let embedded = render(
            "test_prompt_with_embedded_resource",
            json!({ "resourceUri": "test://example-resource" }),
        );
        assert_eq!(embedded[0]["content"]["type"], "resource");
        assert_eq!(
            embedded[0]["content"]["resource"]["uri"],
            "test://example-resource"
        );
        assert_eq!(embedded[0]["content"]["resource"]["mimeType"], "text/plain");
        assert_eq!(
            embedded[1]["content"]["text"],
            "Please process the embedded resource above."
        );
        let image = render("test_prompt_with_image", json!({}));
        assert_eq!(image[0]["content"]["mimeType"], "image/png");
        assert_eq!(decode(&image[0]["content"]["data"]), PNG_1X1);
        assert_eq!(
            image[1]["content"]["text"],
            "Please analyze the image above."
        );
    }

    #[test]
    fn prompt_arguments_are_declared_required() {
        let registry = registry();
        let declared = |name: &str| -> Vec<(&'static str, bool)> {
            let prompt = registry.prompt(name).expect("prompt exists");
            prompt
                .spec()
                .arguments
                .iter()
                .map(|a| (a.name, a.required))
                .collect()
        };
        assert_eq!(
            declared("test_prompt_with_arguments"),
            [("arg1", true), ("arg2", true)]
        );
        assert_eq!(
            declared("test_prompt_with_embedded_resource"),
            [("resourceUri", true)]
        );
        assert!(declared("test_simple_prompt").is_empty());
        assert!(declared("test_prompt_with_image").is_empty());
    }

    #[test]
    fn completion_filters_arg1_by_prefix() {
        let registry = registry();
        let prompt = registry
            .prompt("test_prompt_with_arguments")
            .expect("prompt exists");
        assert_eq!(
            prompt.complete(crate::tools::Book::Live, "arg1", "par"),
            ["paris", "park"]
        );
        assert_eq!(
            prompt.complete(crate::tools::Book::Live, "arg1", "TE"),
            ["test", "testValue1"]
        );
        assert_eq!(
            prompt.complete(crate::tools::Book::Live, "arg1", "").len(),
            ARG1_SUGGESTIONS.len()
        );
        assert!(
            prompt
                .complete(crate::tools::Book::Live, "arg1", "zzz")
                .is_empty()
        );
        assert!(
            prompt
                .complete(crate::tools::Book::Live, "arg2", "")
                .is_empty()
        );
        let simple = registry
            .prompt("test_simple_prompt")
            .expect("prompt exists");
        assert!(
            simple
                .complete(crate::tools::Book::Live, "arg1", "")
                .is_empty()
        );
    }
}
