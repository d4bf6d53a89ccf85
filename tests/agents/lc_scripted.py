"""A scripted LangChain chat model for the langchain-mcp-adapters and mcp-use tests: no LLM,
no network.

Both frameworks run their agent loop on `langchain.agents.create_agent`, which needs a
`BaseChatModel` whose `bind_tools` works. `ScriptedChatModel` answers each model turn from a
script: turn N emits the N-th scripted tool call (a fixed `{"name", "args"}` or a function of
the messages the turn was given, so a later call can use an id an earlier result returned),
and once the script is spent it answers with plain text, which ends the run. Every turn's
input is recorded in `turns`, so a test reads exactly what the model received after its tool
call. `bound_tools` holds the tool names the framework bound (what the model was offered).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Union

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

# One scripted tool call: {"name": ..., "args": {...}}, or a function of the turn's input.
Step = Union[dict[str, Any], Callable[[list[BaseMessage]], dict[str, Any]]]

FINAL_ANSWER = "done"


class ScriptedChatModel(BaseChatModel):
    """A chat model that makes the scripted tool calls, one per turn, then answers text."""

    script: list[Any] = Field(default_factory=list)
    turns: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[str] = Field(default_factory=list)
    bound_schemas: dict[str, dict] = Field(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        """Records the offered tools (as the OpenAI function schema a real model would get)."""
        for tool in tools:
            converted = convert_to_openai_tool(tool)["function"]
            self.bound_tools.append(converted["name"])
            self.bound_schemas[converted["name"]] = converted.get("parameters", {})
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.turns.append(list(messages))
        index = len(self.turns) - 1
        if index < len(self.script):
            step = self.script[index]
            call = step(list(messages)) if callable(step) else step
            message = AIMessage(
                content="",
                tool_calls=[
                    {"name": call["name"], "args": dict(call["args"]), "id": f"call_{index + 1}", "type": "tool_call"}
                ],
            )
        else:
            message = AIMessage(content=FINAL_ANSWER)
        return ChatResult(generations=[ChatGeneration(message=message)])


def tool_messages(turn: Sequence[BaseMessage]) -> list[ToolMessage]:
    """The tool results among a turn's input messages."""
    return [m for m in turn if isinstance(m, ToolMessage)]


def last_tool_message(model: ScriptedChatModel) -> ToolMessage:
    """The tool result the latest model turn received (the run must have reached it)."""
    assert len(model.turns) >= 2, f"the model was called {len(model.turns)} time(s): no turn after the tool call"
    found = tool_messages(model.turns[-1])
    assert found, f"the last model turn received no tool result: {model.turns[-1]!r}"
    return found[-1]


def text_of(message: ToolMessage) -> str:
    """The text of a tool result as the model reads it (text blocks joined; a string as is)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(block.get("text", ""))
        else:
            parts.append(json.dumps(block, ensure_ascii=False))
    return "\n".join(parts)
