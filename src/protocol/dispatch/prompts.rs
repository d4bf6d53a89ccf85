//! The prompt methods: `prompts/get` and `completion/complete`. What they answer may read
//! business data (a prompt's or an argument's [`DataAccess`] declaration): such a request
//! passes the guard chain as a read of that data ([`Guards::read_data`]), is charged and
//! audited, and answers with the rate budget; any other needs only authentication.
//!
//! [`Guards::read_data`]: crate::guards::Guards::read_data

use serde_json::{Map, Value, json};

use super::tool_call::{input_params, mark, name_and_arguments};
use super::{Answer, Env, Server};
use crate::catalog::McpError;
use crate::guards::auth::Principal;
use crate::guards::{DataRead, META_RATELIMIT, ReadThrough, RunRead};
use crate::protocol::jsonrpc::Request;
use crate::protocol::revisions::{Era, client_capabilities};
use crate::tools::{Book, InputContext, PromptReply, PromptSpec, ToolSpec};

/// Most completion values one answer carries.
const MAX_COMPLETIONS: usize = 100;

impl Server {
    /// `prompts/get`. A prompt whose messages read business data passes the guard chain
    /// ([`Guards::read_data`](crate::guards::Guards::read_data)); any other (or an
    /// unknown name) needs only authentication. Required arguments are checked once the
    /// caller is admitted, as a tool's arguments are validated after its guards.
    pub(super) fn get_prompt(
        &self,
        req: &Request,
        era: Era,
        env: &Env<'_>,
    ) -> Result<Answer, McpError> {
        let (name, args) = name_and_arguments(req)?;
        let args = args.clone();
        let (responses, request_state) = input_params(req)?;
        let client_capabilities = client_capabilities(req, era, env.session);
        let registry = self.registry();
        let prompt = registry.prompt(name);
        if prompt.is_none()
            && let Some((subject, operation, held)) = self.backends().prompt(name)
        {
            return self.get_upstream_prompt(req, env, (name, &operation), &subject, held, &args);
        }
        let render = |principal: &Principal| {
            let prompt = prompt.ok_or_else(|| {
                McpError::invalid_params("name").detail("reason", "unknown_prompt")
            })?;
            check_required_arguments(prompt.spec(), &args)?;
            let input = InputContext {
                responses,
                request_state,
                client_capabilities: &client_capabilities,
                state_key: &self.state_key,
            };
            let book = Book::from(principal.mode);
            Ok(match prompt.get(book, &args, &input)? {
                PromptReply::Messages(messages) => json!({
                    "description": prompt.spec().description,
                    "messages": messages,
                }),
                PromptReply::InputRequired(request) => request.into_result(),
            })
        };
        match prompt.and_then(|p| p.spec().reads) {
            Some(access) => self.read_data(
                req,
                &format!("prompts/get {name}"),
                ReadThrough::Declared(access),
                env,
                &render,
            ),
            None => render(&self.authenticate(env)?).map(Answer::uncharged),
        }
    }

    /// `completion/complete`. Values are offered only for arguments the prompt declares;
    /// an argument whose completions read business data passes the guard chain
    /// ([`Guards::read_data`](crate::guards::Guards::read_data)); any other, and
    /// `ref/resource` (no resource here has completable parameters), needs only
    /// authentication.
    pub(super) fn complete(&self, req: &Request, env: &Env<'_>) -> Result<Answer, McpError> {
        let reference = object_param(req, "ref")?;
        let argument = object_param(req, "argument")?;
        let arg_name = argument.get("name").and_then(Value::as_str).unwrap_or("");
        let arg_value = argument.get("value").and_then(Value::as_str).unwrap_or("");
        match reference.get("type").and_then(Value::as_str) {
            Some("ref/prompt") => {}
            Some("ref/resource") => {
                self.authenticate(env)?;
                return Ok(Answer::uncharged(completion_result(Vec::new())));
            }
            _ => return Err(McpError::invalid_params("ref.type")),
        }
        let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
        let registry = self.registry();
        let prompt = registry.prompt(name);
        if prompt.is_none()
            && let Some((subject, operation, None)) = self.backends().prompt(name)
        {
            let backend = backend_of(name, &operation)?;
            let values = |_: &Principal| {
                self.backends()
                    .complete_prompt(backend, &operation, (arg_name, arg_value))
                    .map(completion_result)
            };
            let audit_name = format!("completion/complete {name}.{arg_name}");
            let through = ReadThrough::Subject(&subject);
            return self.read_data(req, &audit_name, through, env, &values);
        }
        let declared = prompt.and_then(|p| p.spec().arguments.iter().find(|a| a.name == arg_name));
        let values = |principal: &Principal| {
            let prompt = prompt.ok_or_else(|| McpError::invalid_params("ref.name"))?;
            let values = match declared {
                Some(_) => prompt.complete(Book::from(principal.mode), arg_name, arg_value),
                None => Vec::new(),
            };
            Ok(completion_result(values))
        };
        match declared.and_then(|a| a.completes_from) {
            Some(access) => {
                let audit_name = format!("completion/complete {name}.{arg_name}");
                self.read_data(
                    req,
                    &audit_name,
                    ReadThrough::Declared(access),
                    env,
                    &values,
                )
            }
            None => values(&self.authenticate(env)?).map(Answer::uncharged),
        }
    }

    /// `prompts/get` of an upstream's prompt (`name` in full, `operation` after the
    /// backend's prefix): a read of its backend's prompts through the guard chain, the
    /// arguments passed on as they are (the upstream checks them). A held prompt is refused
    /// once the caller is known, and never reaches the upstream.
    fn get_upstream_prompt(
        &self,
        req: &Request,
        env: &Env<'_>,
        (name, operation): (&str, &str),
        subject: &ToolSpec,
        held: Option<&'static str>,
        args: &Map<String, Value>,
    ) -> Result<Answer, McpError> {
        if let Some(state) = held {
            self.authenticate(env)?;
            return Err(McpError::prompt_under_review(name, state));
        }
        let backend = backend_of(name, operation)?;
        let get = |_: &Principal| self.backends().get_prompt(backend, operation, args);
        self.read_data(
            req,
            &format!("prompts/get {name}"),
            ReadThrough::Subject(subject),
            env,
            &get,
        )
    }

    /// Runs a request that reads business data through the guard chain.
    pub(super) fn read_data(
        &self,
        req: &Request,
        audit_name: &str,
        through: ReadThrough<'_>,
        env: &Env<'_>,
        run: &RunRead<'_>,
    ) -> Result<Answer, McpError> {
        let request_id = req.id.clone().unwrap_or(Value::Null);
        let read = DataRead {
            audit_name,
            through,
            request_id: &request_id,
        };
        let (mut result, budget) =
            self.guards
                .read_data(&self.registry(), &read, &env.caller(), run)?;
        mark(&mut result, META_RATELIMIT, budget.to_meta());
        Ok(Answer {
            result,
            budget: Some(budget),
            refusal: None,
        })
    }
}

/// The backend of the upstream prompt `name`, offered as `operation` after its prefix.
fn backend_of<'n>(name: &'n str, operation: &str) -> Result<&'n str, McpError> {
    name.strip_suffix(operation)
        .and_then(|b| b.strip_suffix('_'))
        .ok_or_else(McpError::internal)
}

/// The object parameter `name`, or `invalid_params` naming it.
fn object_param<'r>(req: &'r Request, name: &str) -> Result<&'r Map<String, Value>, McpError> {
    req.params
        .get(name)
        .and_then(Value::as_object)
        .ok_or_else(|| McpError::invalid_params(name))
}

/// `invalid_params` naming the first required argument of `spec` that `args` lacks.
fn check_required_arguments(spec: &PromptSpec, args: &Map<String, Value>) -> Result<(), McpError> {
    for arg in spec.arguments.iter().filter(|a| a.required) {
        if !args.get(arg.name).is_some_and(Value::is_string) {
            return Err(McpError::invalid_params(arg.name).detail("reason", "missing_argument"));
        }
    }
    Ok(())
}

/// A `completion/complete` result: the first [`MAX_COMPLETIONS`] values, and how many
/// there are.
fn completion_result(values: Vec<String>) -> Value {
    let total = values.len();
    let values: Vec<String> = values.into_iter().take(MAX_COMPLETIONS).collect();
    json!({ "completion": { "values": values, "total": total, "hasMore": total > MAX_COMPLETIONS } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::dispatch::testing::{Fixture, request};
    use crate::protocol::revisions::{LATEST_LEGACY, Session};

    #[test]
    fn completions_are_cut_at_one_hundred_and_say_so() {
        let many: Vec<String> = (0..150).map(|i| format!("v{i}")).collect();
        let result = completion_result(many);
        let completion = &result["completion"];
        assert_eq!(completion["values"].as_array().map(Vec::len), Some(100));
        assert_eq!(completion["values"][99], json!("v99"));
        assert_eq!(completion["total"], json!(150));
        assert_eq!(completion["hasMore"], json!(true));
        let few = completion_result(vec!["a".into()]);
        assert_eq!(few["completion"]["hasMore"], json!(false));
    }

    #[test]
    fn the_first_missing_required_argument_is_named() {
        let fx = Fixture::invoicing();
        let registry = fx.server.registry();
        let spec = registry
            .prompts()
            .iter()
            .map(|p| p.spec())
            .find(|s| s.arguments.iter().any(|a| a.required))
            .expect("a prompt with a required argument");
        let required = spec.arguments.iter().find(|a| a.required).expect("one");
        let err = check_required_arguments(spec, &Map::new()).expect_err("missing");
        assert_eq!(err.fields()["param"], json!(required.name));
        assert_eq!(err.fields()["details"]["reason"], json!("missing_argument"));
        let mut wrong = Map::new();
        wrong.insert(required.name.to_owned(), json!(5));
        assert!(
            check_required_arguments(spec, &wrong).is_err(),
            "not a string"
        );
    }

    #[test]
    fn an_unknown_prompt_is_invalid_params_once_the_caller_is_known() {
        let fx = Fixture::invoicing();
        let session = Session::new();
        let get = request("prompts/get", json!({ "name": "no_such_prompt" }));
        let era = Era::Legacy(LATEST_LEGACY);
        let stranger = fx.env(&session, Some("tg_live_nobody_secret"));
        let err = fx
            .server
            .get_prompt(&get, era, &stranger)
            .err()
            .expect("refused");
        assert_eq!(err.kind(), crate::catalog::ErrorKind::InvalidToken);
        let known = fx.env(&session, Some(&fx.token));
        let err = fx
            .server
            .get_prompt(&get, era, &known)
            .err()
            .expect("refused");
        assert_eq!(err.fields()["param"], json!("name"));
        assert_eq!(err.fields()["details"]["reason"], json!("unknown_prompt"));
    }

    #[test]
    fn a_completion_reference_must_name_its_kind() {
        let fx = Fixture::invoicing();
        let session = Session::new();
        let env = fx.env(&session, Some(&fx.token));
        let bad = request(
            "completion/complete",
            json!({ "ref": { "type": "ref/other" }, "argument": { "name": "a", "value": "" } }),
        );
        let err = fx.server.complete(&bad, &env).err().expect("refused");
        assert_eq!(err.fields()["param"], json!("ref.type"));
        let resource = request(
            "completion/complete",
            json!({ "ref": { "type": "ref/resource", "uri": "x" }, "argument": { "name": "a", "value": "" } }),
        );
        let answer = fx.server.complete(&resource, &env).expect("answered");
        assert_eq!(answer.result, completion_result(Vec::new()));
        assert!(answer.budget.is_none(), "nothing was read, nothing charged");
    }
}
