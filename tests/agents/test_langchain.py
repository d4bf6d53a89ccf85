"""What a LangChain agent's model receives when a tollgate tool call fails.

langchain-mcp-adapters' `MultiServerMCPClient` (over Streamable HTTP and over stdio) turns
tollgate's tools into LangChain tools; `langchain.agents.create_agent` runs its own agent loop
(a LangGraph `ToolNode`) with a scripted chat model (`lc_scripted.ScriptedChatModel`) that
makes one tool call and then records what its next turn is given.

Measured behaviour of langchain-mcp-adapters 0.3.2 with langchain 1.5 / langgraph 1.2:

- An `isError` result becomes a `ToolMessage(status="error")` whose text is the result's
  text: the model reads the hint.
- A JSON-RPC error escapes the tool as `McpError`; the ToolNode re-raises it, so the agent
  run aborts and the model gets no next turn. The host sees the error's code, its message
  (the string code) and `data`.

So in the default channel (`jsonrpc`) a guard failure ends a LangChain agent's run, and with
`guard_channel = "tool_result"` every failure reaches the model as a sentence it can act on.

A tool the key's `tools/list` does not show (a scope it lacks, a tool outside the plan, a
retired name) is simulated as an agent whose tool list predates the change: the LangChain tool
for that name is built by the adapter's own `convert_mcp_tool_to_langchain_tool` from the
tool's declaration (as a full-scope key saw it, or the retired tool's former declaration) and
added to the tools `get_tools()` returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from harness import CHANNELS, TRANSPORTS, Received, Tollgate
from langchain.agents import create_agent
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.tools import convert_mcp_tool_to_langchain_tool
from lc_scripted import FINAL_ANSWER, ScriptedChatModel, last_tool_message, text_of
from mcp.shared.exceptions import McpError
from mcp.types import Tool as MCPTool
from scenarios import SCENARIOS, SUCCESS, Scenario

FRAMEWORK = "langchain"
SERVER = "tollgate"

# Bounds one agent run (a handshake, one tool call, two model turns) on a busy machine.
RUN_TIMEOUT = 60

LINE = {"description": "Consulting", "quantity": 1, "unit_price_cents": 10000, "vat_rate": 21}


def connection(tg: Tollgate, token: str, transport: str) -> dict[str, Any]:
    """The adapter's connection config for `transport`, carrying `token`."""
    if transport == "http":
        return {"transport": "streamable_http", "url": tg.http_url, "headers": tg.headers(token)}
    return {"transport": "stdio", **tg.stdio(token)}


async def agent_tools(tg: Tollgate, scenario: Scenario, token: str, transport: str) -> list[Any]:
    """The tools the agent gets: `get_tools()`, plus the scenario's tool when it is not listed."""
    conn = connection(tg, token, transport)
    tools = await MultiServerMCPClient({SERVER: conn}).get_tools()
    names = {tool.name for tool in tools}
    if scenario.listed:
        assert scenario.tool in names, f"{scenario.tool} is not listed for this key: {sorted(names)}"
        return tools
    assert scenario.tool not in names, f"{scenario.tool} is listed; the scenario expects it hidden"
    former = MCPTool.model_validate(tg.declaration(scenario.tool))
    return [*tools, convert_mcp_tool_to_langchain_tool(None, former, connection=conn, server_name=SERVER)]


async def run_agent(
    tg: Tollgate, scenario: Scenario, channel: str, transport: str
) -> tuple[ScriptedChatModel, Received]:
    """One agent run whose model calls the scenario's tool once: the model, and what its next
    turn received for the call (or what the run raised instead)."""
    token = tg.prepare_call(scenario, channel)
    tools = await agent_tools(tg, scenario, token, transport)
    model = ScriptedChatModel(script=[{"name": scenario.tool, "args": tg.arguments(scenario, channel)}])
    agent = create_agent(model=model, tools=tools)
    received = Received()
    try:
        result = await asyncio.wait_for(
            agent.ainvoke({"messages": [{"role": "user", "content": f"Call {scenario.tool}."}]}), RUN_TIMEOUT
        )
    except Exception as error:  # noqa: BLE001 - what the run raised is the measurement
        received.raised = error
        return model, received
    assert result["messages"][-1].content == FINAL_ANSWER
    received.text = text_of(last_tool_message(model))
    return model, received


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_failure_reaches_the_model_or_aborts(
    tollgate: Tollgate, observe: Any, scenario: Scenario, channel: str, transport: str
) -> None:
    """tool_result: the run goes on and the next turn reads the specific sentence.
    jsonrpc: an isError failure reads the same; a guard failure aborts the run with McpError,
    whose `data.hint` is the specific sentence only the host sees."""
    model, received = asyncio.run(run_agent(tollgate, scenario, channel, transport))
    observe(FRAMEWORK, scenario, channel, transport, received)
    if channel == "jsonrpc" and scenario.is_guard:
        raised = received.raised
        assert isinstance(raised, McpError), f"expected the run to abort with McpError, got {received.describe()}"
        assert len(model.turns) == 1, "the model got a turn after the aborted tool call"
        error = raised.error
        assert (error.code, error.message) == (scenario.jsonrpc_code, scenario.code)
        assert error.data["code"] == scenario.code
        tollgate.assert_mentions(error.data["hint"], scenario)
        return
    tollgate.assert_specific(received, scenario)
    assert len(model.turns) == 2
    message = last_tool_message(model)
    assert (message.name, message.status) == (scenario.tool, "error")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_plain_read_reaches_the_model(tollgate: Tollgate, observe: Any, transport: str) -> None:
    """A successful call: the next turn reads the client's data; the model was offered every
    tool the key lists."""
    model, received = asyncio.run(run_agent(tollgate, SUCCESS, "jsonrpc", transport))
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, received)
    tollgate.assert_specific(received, SUCCESS)
    assert last_tool_message(model).status == "success"
    listed = {tool["name"] for tool in tollgate.list_tools(tollgate.token(SUCCESS, "jsonrpc"))}
    assert set(model.bound_tools) == listed


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_corrected_retry_with_the_same_key_runs(tollgate: Tollgate, observe: Any, transport: str) -> None:
    """The model's call fails validation; it fixes the argument and retries with the same
    idempotency key, and the invoice is created (the refusal left no record under the key)."""
    key = f"agents-corrected-retry-{transport}"
    call = {"client_id": tollgate.ids["client_id"], "lines": [dict(LINE)], "idempotency_key": key}
    script = [
        {"name": "create_invoice", "args": {**call, "due_date": "31/12/2026"}},
        {"name": "create_invoice", "args": {**call, "due_date": "2026-12-31"}},
    ]
    token = tollgate.token(SUCCESS, "jsonrpc")
    model = ScriptedChatModel(script=script)
    tools = asyncio.run(MultiServerMCPClient({SERVER: connection(tollgate, token, transport)}).get_tools())
    agent = create_agent(model=model, tools=tools)
    result = asyncio.run(asyncio.wait_for(agent.ainvoke({"messages": [("user", "Invoice it.")]}), RUN_TIMEOUT))
    assert result["messages"][-1].content == FINAL_ANSWER
    refused, created = [m for m in result["messages"] if m.type == "tool"]
    observe(FRAMEWORK, "fix_and_retry_same_key", "jsonrpc", transport, Received(text=text_of(created)))
    assert refused.status == "error" and "due_date" in text_of(refused), text_of(refused)
    assert created.status == "success", text_of(created)
    assert "draft" in text_of(created) and "2026-12-31" in text_of(created), text_of(created)

