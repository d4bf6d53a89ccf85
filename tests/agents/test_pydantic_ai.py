"""pydantic-ai (2.68.0): what the model's next turn receives after one MCP tool call.

The framework's own loop (`Agent.run`) drives a `FunctionModel` whose first turn calls one
tool and whose second records the messages it is given. The MCP client is `MCPToolset` (on
the FastMCP client): a URL with `headers=` over HTTP, a `StdioTransport` over stdio.

A tool the key's `tools/list` does not show (a scope it lacks, a tool outside the plan, a
retired name) is added to the listed tools the toolset converts, built from the declaration
an older tool list had: an agent whose tool list predates the change.

A failed call becomes `ModelRetry`: the model reads `{"error": <message>}` in a retried
tool return. For an `isError` result the message is the result's text; for a JSON-RPC error
it is the exception's message, the bare string `code`. (The default `max_retries=1` ends the
run on a second consecutive failure of the same tool; these agents call it once.)
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as mcp_types
import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from harness import CHANNELS, TRANSPORTS, Received, Tollgate
from scenarios import SCENARIOS, SUCCESS, Scenario

FRAMEWORK = "pydantic-ai"

pytestmark = pytest.mark.anyio


class StaleToolset(MCPToolset):
    """`MCPToolset` whose tool list also has `stale` declarations (an older list)."""

    stale: tuple[dict, ...] = ()

    async def list_tools(self) -> list[mcp_types.Tool]:
        tools = list(await super().list_tools())
        listed = {tool.name for tool in tools}
        return tools + [mcp_types.Tool.model_validate(d) for d in self.stale if d["name"] not in listed]


def _toolset(tollgate: Tollgate, scenario: Scenario, token: str, transport: str) -> StaleToolset:
    if transport == "http":
        toolset = StaleToolset(tollgate.http_url, headers=tollgate.headers(token))
    else:
        params = tollgate.stdio(token)
        toolset = StaleToolset(
            StdioTransport(command=params["command"], args=params["args"], env=params["env"], cwd=params["cwd"])
        )
    if not scenario.listed:
        toolset.stale = (tollgate.declaration(scenario.tool),)
    return toolset


def _tool_return_text(request: ModelMessage, call_id: str) -> str:
    """What the model is sent for the tool call `call_id` (the part's model rendering)."""
    assert isinstance(request, ModelRequest), request
    parts = [p for p in request.parts if getattr(p, "tool_call_id", None) == call_id]
    assert len(parts) == 1, f"expected one part for {call_id}, got {request.parts}"
    part = parts[0]
    rendered = part.model_response_str() if hasattr(part, "model_response_str") else part.model_response()
    return rendered if isinstance(rendered, str) else json.dumps(rendered)


async def _drive(tollgate: Tollgate, scenario: Scenario, channel: str, transport: str) -> Received:
    """Runs the agent: one call of the scenario's tool, then a turn that records its input."""
    token = tollgate.prepare_call(scenario, channel)
    arguments = tollgate.arguments(scenario, channel)
    turns: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns.append(list(messages))
        if len(turns) == 1:
            return ModelResponse(parts=[ToolCallPart(scenario.tool, arguments, tool_call_id="call-1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[_toolset(tollgate, scenario, token, transport)])
    received = Received()
    with anyio.fail_after(60):
        try:
            await agent.run("Do the task.")
        except Exception as error:  # the run aborted: that is what is measured
            received.raised = error
            return received
    assert len(turns) == 2, f"expected two model turns, got {len(turns)}"
    received.text = _tool_return_text(turns[1][-1], "call-1")
    return received


CASES = [
    pytest.param(s, ch, tr, id=f"{s.name}-{ch}-{tr}") for s in SCENARIOS for ch in CHANNELS for tr in TRANSPORTS
]


@pytest.mark.parametrize("scenario,channel,transport", CASES)
async def test_what_the_model_receives(tollgate, observe, scenario, channel, transport):
    """tool_result (and any failure inside a tool): the model reads the specific sentence.
    jsonrpc: a guard failure reaches the model as the bare code, `{"error":"<code>"}`."""
    received = await _drive(tollgate, scenario, channel, transport)
    observe(FRAMEWORK, scenario, channel, transport, received)
    if channel == "tool_result" or not scenario.is_guard:
        tollgate.assert_specific(received, scenario)
        assert received.text.startswith('{"error":'), received.text
    else:
        assert received.raised is None, received.describe()
        assert received.text == json.dumps({"error": scenario.code}, separators=(",", ":"))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_plain_read_succeeds(tollgate, observe, transport):
    """The model receives the client's data."""
    received = await _drive(tollgate, SUCCESS, "jsonrpc", transport)
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, received)
    tollgate.assert_specific(received, SUCCESS)


@pytest.mark.parametrize("channel", CHANNELS)
async def test_a_second_consecutive_failure_of_one_tool_ends_the_run(tollgate, observe, channel):
    """pydantic-ai's own limit, measured: with the default `max_retries=1` the second
    consecutive failure of the same tool ends the run (`UnexpectedModelBehavior`), in either
    channel. The first failure never does (the tests above)."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    scenario = next(s for s in SCENARIOS if s.name == "rate_limit")
    token = tollgate.prepare_call(scenario, channel)
    arguments = tollgate.arguments(scenario, channel)
    calls = 0

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        if calls <= 2:
            return ModelResponse(parts=[ToolCallPart(scenario.tool, arguments, tool_call_id=f"call-{calls}")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model), toolsets=[_toolset(tollgate, scenario, token, "http")])
    with anyio.fail_after(60):
        with pytest.raises(UnexpectedModelBehavior) as raised:
            await agent.run("Do the task.")
    observe(FRAMEWORK, "second_failure", channel, "http", Received(raised=raised.value))
    assert calls == 2
