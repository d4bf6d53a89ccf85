"""llama-index-tools-mcp (0.6.0, llama-index-core 0.14): what the model's next turn receives
after one MCP tool call.

The framework's own loop (`FunctionAgent.run`) drives a `MockFunctionCallingLLM` whose
response generator calls one tool on its first turn and records the messages it is given on
the second. The tools are `McpToolSpec(BasicMCPClient(...)).to_tool_list_async()`; the client
opens a new MCP session per call (over stdio: a new server process per call).

A tool the key's `tools/list` does not show (a scope it lacks, a tool outside the plan, a
retired name) is added to the listed tools the spec converts, built from the declaration an
older tool list had: an agent whose tool list predates the change.

The model receives the tool's output as text: for a result (`isError` or not) the repr of
the whole `CallToolResult` (`_meta`, content, structured content); for a JSON-RPC error the
message of the exception that escaped the client's task group.
"""

from __future__ import annotations

import re
from typing import Any

import anyio
import mcp.types as mcp_types
import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole, MockFunctionCallingLLM
from llama_index.tools.mcp import BasicMCPClient, McpToolSpec

from harness import CHANNELS, TRANSPORTS, Received, Tollgate
from scenarios import SCENARIOS, SUCCESS, Scenario

FRAMEWORK = "llama-index"

# What the model reads when the MCP client raises: the task group's own message.
TASK_GROUP_FAILURE = "unhandled errors in a TaskGroup (1 sub-exception)"

pytestmark = pytest.mark.anyio


class StaleToolSpec(McpToolSpec):
    """`McpToolSpec` whose tool list also has `stale` declarations (an older list)."""

    stale: tuple[dict, ...] = ()

    async def fetch_tools(self) -> list[Any]:
        tools = list(await super().fetch_tools())
        listed = {tool.name for tool in tools}
        return tools + [mcp_types.Tool.model_validate(d) for d in self.stale if d["name"] not in listed]


def _client(tollgate: Tollgate, token: str, transport: str) -> BasicMCPClient:
    if transport == "http":
        return BasicMCPClient(tollgate.http_url, headers=tollgate.headers(token))
    params = tollgate.stdio(token)
    return BasicMCPClient(params["command"], args=params["args"], env=params["env"])


async def _drive(tollgate: Tollgate, scenario: Scenario, channel: str, transport: str) -> Received:
    """Runs the agent: one call of the scenario's tool, then a turn that records its input."""
    token = tollgate.prepare_call(scenario, channel)
    arguments = tollgate.arguments(scenario, channel)
    spec = StaleToolSpec(_client(tollgate, token, transport))
    if not scenario.listed:
        spec.stale = (tollgate.declaration(scenario.tool),)
    turns: list[list[ChatMessage]] = []

    def respond(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        turns.append(list(messages))
        if len(turns) == 1:
            call = ToolCallBlock(tool_call_id="call-1", tool_name=scenario.tool, tool_kwargs=arguments)
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    received = Received()
    with anyio.fail_after(60):
        tools = await spec.to_tool_list_async()
        agent = FunctionAgent(tools=tools, llm=MockFunctionCallingLLM(response_generator=respond))
        try:
            await agent.run(user_msg="Do the task.")
        except Exception as error:  # the run aborted: that is what is measured
            received.raised = error
            return received
    assert len(turns) == 2, f"expected two model turns, got {len(turns)}"
    outputs = [m for m in turns[1] if m.role == MessageRole.TOOL]
    assert len(outputs) == 1, f"expected one tool message, got {outputs}"
    received.text = outputs[0].content or ""
    return received


def _content_text(rendered: str) -> str:
    """The `text='…'` of the content blocks in a `CallToolResult` repr."""
    blocks = re.findall(r"TextContent\(type='text', text=(?P<q>['\"])(.*?)(?P=q), annotations", rendered)
    assert blocks, f"no text content in {rendered}"
    return "\n".join(text for _, text in blocks)


def _for_the_table(received: Received) -> Received:
    """The repr of a result, shortened to what tells it apart: its flag and its text."""
    if received.text is None or "TextContent(" not in received.text:
        return received
    flag = "is_error=True" if "is_error=True" in received.text else "is_error=False"
    return Received(text=f"CallToolResult repr (_meta, content, {flag}); text: {_content_text(received.text)}")


CASES = [
    pytest.param(s, ch, tr, id=f"{s.name}-{ch}-{tr}") for s in SCENARIOS for ch in CHANNELS for tr in TRANSPORTS
]


@pytest.mark.parametrize("scenario,channel,transport", CASES)
async def test_what_the_model_receives(tollgate, observe, scenario, channel, transport):
    """tool_result (and any failure inside a tool): the model reads the specific sentence
    (inside the result's repr). jsonrpc: a guard failure reaches the model as the task
    group's message, with nothing of the error in it; the run goes on."""
    received = await _drive(tollgate, scenario, channel, transport)
    observe(FRAMEWORK, scenario, channel, transport, _for_the_table(received))
    if channel == "tool_result" or not scenario.is_guard:
        tollgate.assert_specific(received, scenario)
        assert "is_error=True" in received.text, received.text
        # The sentence itself, not only the envelope in the repr's `meta`, names the specifics.
        tollgate.assert_mentions(_content_text(received.text), scenario)
    else:
        assert received.raised is None, received.describe()
        assert received.text == TASK_GROUP_FAILURE


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_plain_read_succeeds(tollgate, observe, transport):
    """The model receives the client's data."""
    received = await _drive(tollgate, SUCCESS, "jsonrpc", transport)
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, _for_the_table(received))
    tollgate.assert_specific(received, SUCCESS)
