//! Conformance fixtures that ask the client for input: sampling and elicitation as
//! server-to-client requests on the handshake era, and the multi-round
//! `input_required` results of 2026-07-28 (including the diagnostic tools the suite's
//! `server-stateless` scenario looks for). Part of the `conformance` pack, never on by
//! default; names and payloads follow the suite's scenarios.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::catalog::McpError;
use crate::tools::{
    Category, FnTool, Idempotency, InputContext, Prompt, PromptArgument, PromptReply, PromptSpec,
    Tool, ToolContext, ToolFn, ToolOutput, ToolSpec,
};

/// A fixture of this module: each asks the client and waits for the answer.
fn tool(
    name: &'static str,
    title: &'static str,
    description: &'static str,
    schema: Value,
    run: ToolFn,
) -> FnTool {
    let spec = ToolSpec {
        name: name.into(),
        title: title.into(),
        description: description.into(),
        category: Category::Read,
        scope: crate::tools::conformance::SCOPE.into(),
        idempotency: Idempotency::NotApplicable,
        input_schema: schema,
        output_schema: None,
    };
    FnTool::new(spec, run).waiting_and_logging(true, false)
}

fn no_arguments() -> Value {
    json!({ "type": "object", "properties": {}, "additionalProperties": false })
}

fn one_string(name: &str, description: &str) -> Value {
    json!({
        "type": "object",
        "properties": { name: { "type": "string", "description": description } },
        "required": [name],
        "additionalProperties": false,
    })
}

/// The fixtures of this module.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        tool(
            "test_sampling",
            "Conformance: sampling",
            "Conformance-suite fixture. Asks the client's model to answer `prompt` (sampling/createMessage) and returns the answer.",
            one_string("prompt", "The prompt to send to the client's model"),
            sampling,
        ),
        tool(
            "test_elicitation",
            "Conformance: elicitation",
            "Conformance-suite fixture. Asks the user, through the client, for a username and an email (elicitation/create) and returns the answer.",
            one_string("message", "The message to show the user"),
            elicitation,
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Conformance: elicitation defaults",
            "Conformance-suite fixture. Elicits a form whose fields all carry default values (SEP-1034).",
            no_arguments(),
            elicitation_defaults,
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Conformance: elicitation enums",
            "Conformance-suite fixture. Elicits a form with every enum shape of SEP-1330.",
            no_arguments(),
            elicitation_enums,
        ),
        tool(
            "test_input_required_result_elicitation",
            "Conformance: input required (elicitation)",
            "Conformance-suite fixture (2026-07-28). Asks for the user's name with an input_required result, then greets them.",
            no_arguments(),
            mrtr_elicitation,
        ),
        tool(
            "test_input_required_result_sampling",
            "Conformance: input required (sampling)",
            "Conformance-suite fixture (2026-07-28). Asks the client's model a question with an input_required result.",
            no_arguments(),
            mrtr_sampling,
        ),
        tool(
            "test_input_required_result_list_roots",
            "Conformance: input required (roots)",
            "Conformance-suite fixture (2026-07-28). Asks for the client's roots with an input_required result.",
            no_arguments(),
            mrtr_roots,
        ),
        tool(
            "test_input_required_result_request_state",
            "Conformance: input required with state",
            "Conformance-suite fixture (2026-07-28). Asks for a confirmation and carries a signed requestState.",
            no_arguments(),
            mrtr_request_state,
        ),
        tool(
            "test_input_required_result_multiple_inputs",
            "Conformance: several inputs",
            "Conformance-suite fixture (2026-07-28). Asks for elicitation, sampling and roots at once.",
            no_arguments(),
            mrtr_multiple,
        ),
        tool(
            "test_input_required_result_multi_round",
            "Conformance: two rounds",
            "Conformance-suite fixture (2026-07-28). Asks two questions in two rounds, with a new requestState each time.",
            no_arguments(),
            mrtr_multi_round,
        ),
        tool(
            "test_input_required_result_tampered_state",
            "Conformance: tampered state",
            "Conformance-suite fixture (2026-07-28). Refuses a requestState that was altered by the client.",
            no_arguments(),
            mrtr_request_state,
        ),
        tool(
            "test_input_required_result_capabilities",
            "Conformance: capability-aware input",
            "Conformance-suite fixture (2026-07-28). Asks only for inputs the client declared it can give.",
            no_arguments(),
            mrtr_capabilities,
        ),
        tool(
            "test_missing_capability",
            "Conformance: missing capability",
            "Conformance-suite diagnostic (2026-07-28). Needs the client's sampling capability and refuses with -32021 without it.",
            no_arguments(),
            missing_capability,
        ),
        tool(
            "test_streaming_elicitation",
            "Conformance: elicitation without server requests",
            "Conformance-suite diagnostic (2026-07-28). Elicits through an input_required result, never through a request on the response stream.",
            no_arguments(),
            mrtr_elicitation,
        ),
        tool(
            "test_logging_tool",
            "Conformance: logging only when asked",
            "Conformance-suite diagnostic (2026-07-28). Logs one message, which is sent only when the request asked for a log level.",
            no_arguments(),
            logging_tool,
        )
        .waiting_and_logging(true, true),
    ]
    .into_iter()
    .map(|tool| Arc::new(tool) as Arc<dyn Tool>)
    .collect()
}

fn text_of(value: &Value) -> String {
    value
        .pointer("/content/text")
        .and_then(Value::as_str)
        .map_or_else(|| value.to_string(), str::to_owned)
}

fn sampling(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let prompt = args
        .get("prompt")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let answer = ctx.ask_client(
        "sampling/createMessage",
        "sampling",
        sampling_params(prompt, 100),
    )?;
    Ok(ToolOutput::text(format!(
        "LLM response: {}",
        text_of(&answer)
    )))
}

fn sampling_params(prompt: &str, max_tokens: u32) -> Value {
    json!({
        "messages": [{ "role": "user", "content": { "type": "text", "text": prompt } }],
        "maxTokens": max_tokens,
    })
}

fn elicit_answer(ctx: &ToolContext<'_>, params: Value) -> Result<ToolOutput, McpError> {
    let answer = ctx.ask_client("elicitation/create", "elicitation", params)?;
    let action = answer
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let content = answer.get("content").cloned().unwrap_or(Value::Null);
    Ok(ToolOutput::text(format!(
        "User response: action={action}, content={content}"
    )))
}

fn elicitation(ctx: &ToolContext<'_>, args: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let message = args
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    elicit_answer(
        ctx,
        json!({
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "username": { "type": "string", "description": "User's response" },
                    "email": { "type": "string", "description": "User's email address" },
                },
                "required": ["username", "email"],
            },
        }),
    )
}

fn elicitation_defaults(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    elicit_answer(
        ctx,
        json!({
            "message": "Please review and update the form fields with defaults",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "description": "User name", "default": "John Doe" },
                    "age": { "type": "integer", "description": "User age", "default": 30 },
                    "score": { "type": "number", "description": "User score", "default": 95.5 },
                    "status": { "type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active" },
                    "verified": { "type": "boolean", "description": "Verification status", "default": true },
                },
                "required": [],
            },
        }),
    )
}

fn elicitation_enums(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    elicit_answer(
        ctx,
        json!({
            "message": "Please select options from the enum fields",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "untitledSingle": { "type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"] },
                    "titledSingle": { "type": "string", "description": "Select one option with titles", "oneOf": [
                        { "const": "value1", "title": "First Option" },
                        { "const": "value2", "title": "Second Option" },
                        { "const": "value3", "title": "Third Option" },
                    ] },
                    "legacyEnum": { "type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"] },
                    "untitledMulti": { "type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3, "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
                    "titledMulti": { "type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3, "items": { "anyOf": [
                        { "const": "value1", "title": "First Choice" },
                        { "const": "value2", "title": "Second Choice" },
                        { "const": "value3", "title": "Third Choice" },
                    ] } },
                },
                "required": [],
            },
        }),
    )
}

fn elicit_request(message: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": { "type": "object", "properties": properties, "required": required },
        },
    })
}

fn sampling_request(prompt: &str, max_tokens: u32) -> Value {
    json!({ "method": "sampling/createMessage", "params": sampling_params(prompt, max_tokens) })
}

fn roots_request() -> Value {
    json!({ "method": "roots/list", "params": {} })
}

/// The accepted content of an elicitation answer, when it is one.
fn accepted(answer: Option<&Value>) -> Option<&Map<String, Value>> {
    let answer = answer?.as_object()?;
    (answer.get("action").and_then(Value::as_str) == Some("accept"))
        .then(|| answer.get("content").and_then(Value::as_object))
        .flatten()
}

fn requests(entries: &[(&str, Value)]) -> Map<String, Value> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn name_request() -> Value {
    elicit_request(
        "What is your name?",
        json!({ "name": { "type": "string" } }),
        &["name"],
    )
}

fn mrtr_elicitation(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let name = accepted(ctx.input.response("user_name"))
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    match name {
        Some(name) => Ok(ToolOutput::text(format!("Hello, {name}!"))),
        None => Ok(ToolOutput::input_required(
            ctx.input
                .ask(requests(&[("user_name", name_request())]), None),
        )),
    }
}

fn mrtr_sampling(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    match ctx.input.response("capital_question") {
        Some(answer) if answer.get("content").is_some() => Ok(ToolOutput::text(format!(
            "The model answered: {}",
            text_of(answer)
        ))),
        _ => Ok(ToolOutput::input_required(ctx.input.ask(
            requests(&[(
                "capital_question",
                sampling_request("What is the capital of France?", 100),
            )]),
            None,
        ))),
    }
}

fn mrtr_roots(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    match ctx
        .input
        .response("client_roots")
        .and_then(|r| r.get("roots"))
        .and_then(Value::as_array)
    {
        Some(roots) => Ok(ToolOutput::text(format!(
            "The client has {} root(s).",
            roots.len()
        ))),
        None => Ok(ToolOutput::input_required(
            ctx.input
                .ask(requests(&[("client_roots", roots_request())]), None),
        )),
    }
}

fn confirm_request() -> Value {
    elicit_request(
        "Please confirm",
        json!({ "ok": { "type": "boolean" } }),
        &["ok"],
    )
}

fn mrtr_request_state(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    let state = ctx.input.state()?;
    let confirmed = accepted(ctx.input.response("confirm"))
        .and_then(|c| c.get("ok"))
        .and_then(Value::as_bool);
    match (state, confirmed) {
        (Some(state), Some(ok)) if state.get("step") == Some(&json!("confirm")) => {
            Ok(ToolOutput::text(format!("state-ok: confirmed={ok}")))
        }
        _ => Ok(ToolOutput::input_required(ctx.input.ask(
            requests(&[("confirm", confirm_request())]),
            Some(&json!({ "step": "confirm" })),
        ))),
    }
}

fn mrtr_multiple(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let state = ctx.input.state()?;
    let name = accepted(ctx.input.response("user_name"))
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    let greeting = ctx
        .input
        .response("greeting")
        .filter(|g| g.get("content").is_some());
    let roots = ctx
        .input
        .response("client_roots")
        .and_then(|r| r.get("roots"));
    match (state, name, greeting, roots) {
        (Some(_), Some(name), Some(greeting), Some(_)) => Ok(ToolOutput::text(format!(
            "Hello, {name}! Greeting: {}",
            text_of(greeting)
        ))),
        _ => Ok(ToolOutput::input_required(ctx.input.ask(
            requests(&[
                ("user_name", name_request()),
                ("greeting", sampling_request("Generate a greeting", 50)),
                ("client_roots", roots_request()),
            ]),
            Some(&json!({ "step": "all" })),
        ))),
    }
}

fn mrtr_multi_round(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    let state = ctx.input.state()?;
    let round = state
        .as_ref()
        .and_then(|s| s.get("round"))
        .and_then(Value::as_u64);
    let step1 = accepted(ctx.input.response("step1"))
        .and_then(|c| c.get("name"))
        .and_then(Value::as_str);
    let step2 = accepted(ctx.input.response("step2"))
        .and_then(|c| c.get("color"))
        .and_then(Value::as_str);
    match (round, step1, step2) {
        (Some(2), _, Some(color)) => {
            let name = state
                .as_ref()
                .and_then(|s| s.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            Ok(ToolOutput::text(format!("{name} likes {color}.")))
        }
        (Some(1), Some(name), _) => Ok(ToolOutput::input_required(ctx.input.ask(
            requests(&[(
                "step2",
                elicit_request(
                    "Step 2: What is your favorite color?",
                    json!({ "color": { "type": "string" } }),
                    &["color"],
                ),
            )]),
            Some(&json!({ "round": 2, "name": name })),
        ))),
        _ => Ok(ToolOutput::input_required(ctx.input.ask(
            requests(&[(
                "step1",
                elicit_request(
                    "Step 1: What is your name?",
                    json!({ "name": { "type": "string" } }),
                    &["name"],
                ),
            )]),
            Some(&json!({ "round": 1 })),
        ))),
    }
}

fn mrtr_capabilities(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    if ctx.input.response("sample_input").is_some() || ctx.input.response("user_name").is_some() {
        return Ok(ToolOutput::text(
            "Thanks: the declared inputs were received.",
        ));
    }
    let mut asks = Vec::new();
    if ctx.input.client_supports("elicitation") {
        asks.push(("user_name", name_request()));
    }
    if ctx.input.client_supports("sampling") {
        asks.push(("sample_input", sampling_request("Sample request", 50)));
    }
    if asks.is_empty() {
        return Err(McpError::missing_client_capability(
            json!({ "sampling": {} }),
        ));
    }
    Ok(ToolOutput::input_required(
        ctx.input.ask(requests(&asks), None),
    ))
}

fn missing_capability(
    ctx: &ToolContext<'_>,
    _: &Map<String, Value>,
) -> Result<ToolOutput, McpError> {
    if !ctx.input.client_supports("sampling") {
        return Err(McpError::missing_client_capability(
            json!({ "sampling": {} }),
        ));
    }
    Ok(ToolOutput::text("The client declared sampling."))
}

fn logging_tool(ctx: &ToolContext<'_>, _: &Map<String, Value>) -> Result<ToolOutput, McpError> {
    ctx.log(crate::tools::LogLevel::Info, json!("test_logging_tool ran"));
    Ok(ToolOutput::text("Logged one message at info level."))
}

/// The prompt that asks for input before it can render (2026-07-28).
struct ContextPrompt {
    spec: PromptSpec,
}

impl Prompt for ContextPrompt {
    fn spec(&self) -> &PromptSpec {
        &self.spec
    }

    fn messages(&self, _book: crate::tools::Book, _args: &Map<String, Value>) -> Vec<Value> {
        vec![
            json!({ "role": "user", "content": { "type": "text", "text": "Use the default context." } }),
        ]
    }

    fn get(
        &self,
        _book: crate::tools::Book,
        _args: &Map<String, Value>,
        input: &InputContext<'_>,
    ) -> Result<PromptReply, McpError> {
        match accepted(input.response("user_context"))
            .and_then(|c| c.get("context"))
            .and_then(Value::as_str)
        {
            Some(context) => Ok(PromptReply::Messages(vec![json!({
                "role": "user",
                "content": { "type": "text", "text": format!("Use this context: {context}") },
            })])),
            None => Ok(PromptReply::InputRequired(input.ask(
                requests(&[(
                    "user_context",
                    elicit_request(
                        "What context should the prompt use?",
                        json!({ "context": { "type": "string" } }),
                        &["context"],
                    ),
                )]),
                None,
            ))),
        }
    }
}

/// The prompts of this module.
pub fn prompts() -> Vec<Arc<dyn Prompt>> {
    vec![Arc::new(ContextPrompt {
        spec: PromptSpec {
            name: "test_input_required_result_prompt",
            title: "Conformance: prompt needing input",
            description: "Conformance-suite fixture (2026-07-28). Asks for context with an input_required result before rendering.",
            reads: None,
            arguments: Vec::<PromptArgument>::new(),
        },
    })]
}
