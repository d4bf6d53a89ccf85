//! Arguments checked against a tool's declared input schema before it runs. A failure is
//! an `isError` result naming the argument at fault, never a JSON-RPC error (SEP-1303: the
//! model must be able to read it and correct itself).

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use crate::catalog::{ErrorKind, McpError};
use crate::tools::{Tool, ToolSpec};

/// A tool together with its input validator, compiled on the tool's first call.
pub struct RegisteredTool {
    /// The implementation.
    pub tool: Arc<dyn Tool>,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

/// Compiles `tool`'s input schema.
fn compile(tool: &dyn Tool) -> Result<jsonschema::Validator, String> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(&tool.spec().input_schema)
        .map_err(|e| format!("tool {}: {e}", tool.spec().name))
}

impl RegisteredTool {
    /// `tool`, its validator not compiled yet.
    pub fn new(tool: Arc<dyn Tool>) -> RegisteredTool {
        RegisteredTool {
            tool,
            validator: OnceLock::new(),
        }
    }

    /// Compiles the validator now, if it is not yet; the error names the tool.
    pub fn compile_now(&self) -> Result<(), String> {
        match self.validator.get_or_init(|| compile(self.tool.as_ref())) {
            Ok(_) => Ok(()),
            Err(cause) => Err(cause.clone()),
        }
    }

    /// The declaration.
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// Checks `args` against the input schema; the first failure becomes an `isError`
    /// catalog error naming the argument at fault.
    pub fn validate(&self, args: &Value) -> Result<(), McpError> {
        let validator = match self.validator.get_or_init(|| compile(self.tool.as_ref())) {
            Ok(validator) => validator,
            Err(cause) => {
                tracing::error!(%cause, "a tool's input schema does not compile");
                return Err(McpError::internal());
            }
        };
        match validator.iter_errors(args).next() {
            None => Ok(()),
            Some(err) => Err(schema_error_to_catalog(&err)),
        }
    }
}

fn schema_error_to_catalog(err: &jsonschema::ValidationError<'_>) -> McpError {
    use jsonschema::error::ValidationErrorKind as K;
    let path = err.instance_path.as_str().trim_start_matches('/');
    let param = |child: &str| match (path.is_empty(), child.is_empty()) {
        (true, _) => child.to_owned(),
        (false, true) => path.replace('/', "."),
        (false, false) => format!("{}.{child}", path.replace('/', ".")),
    };
    match &err.kind {
        K::Required { property } => McpError::new(ErrorKind::MissingRequiredField)
            .param(param(property.as_str().unwrap_or_default())),
        K::AdditionalProperties { unexpected } => McpError::validation(&param(
            unexpected.first().map(String::as_str).unwrap_or_default(),
        ))
        .detail("reason", "unexpected_argument"),
        K::Format { .. } | K::Pattern { .. } => {
            McpError::new(ErrorKind::InvalidFormat).param(param(""))
        }
        _ => McpError::validation(&param("")).detail("reason", err.kind_name()),
    }
}

trait KindName {
    fn kind_name(&self) -> String;
}

impl KindName for jsonschema::ValidationError<'_> {
    /// A short, safe description of the failed keyword (never the instance value).
    fn kind_name(&self) -> String {
        self.schema_path
            .as_str()
            .rsplit('/')
            .next()
            .unwrap_or("schema")
            .to_owned()
    }
}
