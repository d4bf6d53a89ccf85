//! The conformance pack's prompts, in the suite's names: one without arguments, one with
//! two required arguments (and completions for the first), one embedding a resource and one
//! with an image.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::media::image_block;
use crate::tools::{Book, Prompt, PromptArgument, PromptSpec};

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

    fn messages(&self, _book: Book, args: &Map<String, Value>) -> Vec<Value> {
        (self.render)(args)
    }

    fn complete(&self, _book: Book, argument: &str, value: &str) -> Vec<String> {
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
    prompts.extend(super::input::prompts());
    prompts
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    use super::*;
    use crate::tools::Registry;
    use crate::tools::conformance::media::PNG_1X1;

    fn registry() -> Registry {
        Registry::new(Vec::new(), &[], Vec::new(), prompts()).expect("prompts only")
    }

    fn decode(data: &Value) -> Vec<u8> {
        STANDARD
            .decode(data.as_str().expect("base64 string"))
            .expect("valid base64")
    }

    fn render(name: &str, args: Value) -> Vec<Value> {
        let registry = registry();
        let prompt = registry.prompt(name).expect("prompt exists");
        prompt.messages(Book::Live, args.as_object().expect("object"))
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
            prompt.complete(Book::Live, "arg1", "par"),
            ["paris", "park"]
        );
        assert_eq!(
            prompt.complete(Book::Live, "arg1", "TE"),
            ["test", "testValue1"]
        );
        assert_eq!(
            prompt.complete(Book::Live, "arg1", "").len(),
            ARG1_SUGGESTIONS.len()
        );
        assert!(prompt.complete(Book::Live, "arg1", "zzz").is_empty());
        assert!(prompt.complete(Book::Live, "arg2", "").is_empty());
        let simple = registry
            .prompt("test_simple_prompt")
            .expect("prompt exists");
        assert!(simple.complete(Book::Live, "arg1", "").is_empty());
    }
}
