//! Prompt declarations: their arguments, the business data their messages or completions
//! read ([`DataAccess`]), and what `prompts/get` answers.

use serde_json::{Map, Value};

use crate::catalog::McpError;
use crate::tools::{Book, InputContext, InputRequired};

/// The business data a prompt's messages, or the completions of one of its arguments, read:
/// the data the read tool `as_tool` serves, under its `scope`.
///
/// Such a `prompts/get` or `completion/complete` passes the guard chain as a call of
/// `as_tool` would: it charges the `read` rate buckets, needs `scope` and a plan that
/// includes `as_tool`, and leaves an audit row ([`crate::guards::Guards::read_data`]). The
/// registry refuses a declaration whose `as_tool` is not a registered read tool of that
/// scope, so the two cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataAccess {
    /// The scope the data needs (the scope of `as_tool`).
    pub scope: &'static str,
    /// The read tool serving the same data; the plan check looks for this name.
    pub as_tool: &'static str,
}

/// A prompt argument declaration.
#[derive(Debug, Clone)]
pub struct PromptArgument {
    /// Name.
    pub name: &'static str,
    /// What to pass.
    pub description: &'static str,
    /// Whether `prompts/get` refuses a call without it.
    pub required: bool,
    /// The business data its completions read (`None`: they read none, e.g. a fixed list
    /// of choices, and need only authentication).
    pub completes_from: Option<DataAccess>,
}

/// Everything declared about one prompt.
#[derive(Debug, Clone)]
pub struct PromptSpec {
    /// Name.
    pub name: &'static str,
    /// Human title.
    pub title: &'static str,
    /// What the workflow does.
    pub description: &'static str,
    /// The business data its messages read (`None`: pure text, which needs only
    /// authentication and is listed to every credential).
    pub reads: Option<DataAccess>,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
}

/// A prompt implementation.
pub trait Prompt: Send + Sync {
    /// Its declaration.
    fn spec(&self) -> &PromptSpec;
    /// The messages for these arguments (required ones are checked before this runs),
    /// with the business data of `book` where the text quotes it.
    fn messages(&self, book: Book, args: &Map<String, Value>) -> Vec<Value>;
    /// The prompt for these arguments; a prompt that needs more input from the client
    /// (2026-07-28) answers `Ok(PromptReply::InputRequired(..))`.
    fn get(
        &self,
        book: Book,
        args: &Map<String, Value>,
        _input: &InputContext<'_>,
    ) -> Result<PromptReply, McpError> {
        Ok(PromptReply::Messages(self.messages(book, args)))
    }

    /// Completion values for one argument, given its partial value, from `book`.
    fn complete(&self, _book: Book, _argument: &str, _value: &str) -> Vec<String> {
        Vec::new()
    }
}

/// What `prompts/get` answers.
pub enum PromptReply {
    /// The prompt's messages.
    Messages(Vec<Value>),
    /// A request for more input first.
    InputRequired(InputRequired),
}
