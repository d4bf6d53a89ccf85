"""What an mcp-use agent's model receives when a tollgate tool call fails, and mcp-use calling
every built-in tool with its optional arguments left out.

`MCPClient.from_dict` (a `url` server over Streamable HTTP, or a `command` server over stdio)
and `MCPAgent`, whose own loop is LangChain's `create_agent`, driven by a scripted chat model
(`lc_scripted.ScriptedChatModel`) that makes the scripted tool calls and records what each
next turn is given. The HTTP server gets the key as `auth` (mcp-use's bearer-token setting);
with only an `Authorization` header mcp-use first tries OAuth discovery.

Measured behaviour of mcp-use 1.7.1:

- Every failure reaches the model as the JSON of mcp-use's `format_error`:
  `{"error": <exception class>, "details": <message>, "stack": <a Python traceback>,
  "code": "UNKNOWN", "tool": <name>, ...}`. For an `isError` result `details` is the result's
  text (the hint); for a JSON-RPC error it is the error's message, the bare string code
  (`"rate_limited"`): `data` and its hint never reach the model. The run goes on.
- mcp-use's tools validate their arguments client-side (a Pydantic model made from the input
  schema) and then send every optional argument the model left out as `null`.

A tool the key's `tools/list` does not show (a scope it lacks, a tool outside the plan, a
retired name) is simulated as an agent whose tool list predates the change: the tool for that
name is converted by the agent's own adapter from the tool's declaration (as a full-scope key
saw it, or the retired tool's former declaration) and added to the agent's tools.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from harness import CHANNELS, TRANSPORTS, Received, Tollgate, fill
from langchain_core.messages import BaseMessage
from lc_scripted import FINAL_ANSWER, ScriptedChatModel, last_tool_message, text_of, tool_messages
from mcp.types import Tool as MCPTool
from mcp_use import MCPAgent, MCPClient
from scenarios import SCENARIOS, SUCCESS, Scenario

FRAMEWORK = "mcp-use"
SERVER = "tollgate"

# Bounds one agent run on a busy machine.
RUN_TIMEOUT = 120

LINE = {"description": "Consulting", "quantity": 1, "unit_price_cents": 10000, "vat_rate": 21}


def client_config(tg: Tollgate, token: str, transport: str) -> dict[str, Any]:
    """`MCPClient.from_dict`'s configuration for `transport`, carrying `token`."""
    if transport == "http":
        server = {"url": tg.http_url, "auth": token}
    else:
        stdio = tg.stdio(token)
        server = {"command": stdio["command"], "args": stdio["args"], "env": stdio["env"]}
    return {"mcpServers": {SERVER: server}}


class SentArguments:
    """Records the arguments mcp-use sends with each `tools/call` (the connector's call) and
    the `CallToolResult` it got back; the calls themselves are unchanged."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.results: list[tuple[str, Any]] = []

    def wrap(self, connector: Any) -> None:
        """Puts the recorder around `connector.call_tool`, which mcp-use's tools call."""
        original = connector.call_tool

        async def call_tool(name: str, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, dict(arguments)))
            result = await original(name, arguments, *args, **kwargs)
            self.results.append((name, result))
            return result

        connector.call_tool = call_tool


async def run_agent(
    tg: Tollgate,
    token: str,
    transport: str,
    script: list[Any],
    unlisted: tuple[str, ...] = (),
    max_steps: int = 5,
    record_calls: bool = False,
) -> tuple[ScriptedChatModel, BaseException | None, SentArguments]:
    """One `MCPAgent.run` with the scripted model; the model, what the run raised, and (with
    `record_calls`) what mcp-use sent. Unrecorded runs leave mcp-use's call path untouched, so
    the traceback the model receives is mcp-use's own."""
    client = MCPClient.from_dict(client_config(tg, token, transport))
    model = ScriptedChatModel(script=script)
    agent = MCPAgent(llm=model, client=client, max_steps=max_steps, memory_enabled=False)
    sent = SentArguments()
    try:
        await asyncio.wait_for(agent.initialize(), RUN_TIMEOUT)
        connector = client.get_session(SERVER).connector
        if record_calls:
            sent.wrap(connector)
        listed = {tool.name for tool in agent._tools}
        for name in unlisted:
            assert name not in listed, f"{name} is listed; the scenario expects it hidden"
            former = MCPTool.model_validate(tg.declaration(name))
            agent._tools.append(agent.adapter._convert_tool(former, connector))
        if unlisted:
            agent._agent_executor = agent._create_agent()
        try:
            output = await asyncio.wait_for(agent.run("Call the tool."), RUN_TIMEOUT)
        except Exception as error:  # noqa: BLE001 - what the run raised is the measurement
            return model, error, sent
        assert output == FINAL_ANSWER
        return model, None, sent
    finally:
        await client.close_all_sessions()


def formatted_error(text: str) -> dict[str, Any]:
    """mcp-use's `format_error` JSON, as the model receives it."""
    received = json.loads(text)
    assert isinstance(received, dict) and {"error", "details", "stack", "code", "tool"} <= set(received), text
    return received


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_failure_reaches_the_model(
    tollgate: Tollgate, observe: Any, scenario: Scenario, channel: str, transport: str
) -> None:
    """The run never aborts. tool_result, and an isError failure in either channel: `details`
    is the specific sentence. jsonrpc guard failure: `details` is the bare string code."""
    token = tollgate.prepare_call(scenario, channel)
    call = {"name": scenario.tool, "args": tollgate.arguments(scenario, channel)}
    unlisted = () if scenario.listed else (scenario.tool,)
    model, raised, _ = asyncio.run(run_agent(tollgate, token, transport, [call], unlisted))
    received = Received(raised=raised)
    if raised is None:
        received.text = text_of(last_tool_message(model))
    observe(FRAMEWORK, scenario, channel, transport, received)
    assert raised is None, f"the agent run aborted: {received.describe()}"
    assert len(model.turns) == 2
    assert last_tool_message(model).name == scenario.tool
    error = formatted_error(received.text)
    assert error["tool"] == scenario.tool
    assert error["code"] == "UNKNOWN"
    assert "Traceback (most recent call last)" in error["stack"]
    if channel == "jsonrpc" and scenario.is_guard:
        assert (error["error"], error["details"]) == ("McpError", scenario.code)
        return
    assert error["error"] == "RuntimeError"
    tollgate.assert_mentions(error["details"], scenario)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_plain_read_reaches_the_model(tollgate: Tollgate, observe: Any, transport: str) -> None:
    """A successful call: the next turn reads the client's data."""
    call = {"name": SUCCESS.tool, "args": tollgate.arguments(SUCCESS)}
    model, raised, _ = asyncio.run(run_agent(tollgate, tollgate.token(SUCCESS, "jsonrpc"), transport, [call]))
    received = Received(raised=raised, text=None if raised else text_of(last_tool_message(model)))
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, received)
    tollgate.assert_specific(received, SUCCESS)


def _id_from_last_result(prefix: str) -> Callable[[list[BaseMessage]], str]:
    """Reads the id (`cli_…`/`inv_…`) the latest tool result returned, as a model would."""

    def read(messages: list[BaseMessage]) -> str:
        text = text_of(tool_messages(messages)[-1])
        found = re.search(rf'"id"\s*:\s*"({prefix}_[0-9a-f-]+)"', text)
        assert found, f"no {prefix}_ id in the last tool result: {text}"
        return found.group(1)

    return read


def every_tool_script(tg: Tollgate, transport: str) -> list[Any]:
    """Calls of all 16 built-in tools with their required arguments only (and the key the
    four tools that cannot be undone require), each using what an earlier call returned."""
    remembered: dict[str, str] = {}

    def call(name: str, args: dict[str, Any], remember: tuple[str, str] | None = None) -> Any:
        def step(messages: list[BaseMessage]) -> dict[str, Any]:
            if remember is not None:
                # The id the previous call created, for this and later calls.
                remembered[remember[0]] = _id_from_last_result(remember[1])(messages)
            return {"name": name, "args": fill(args, {**tg.ids, **remembered})}

        step.given = tuple(args)
        return step

    key = f"every-tool-{transport}"
    return [
        call("search_clients", {}),
        call("get_client", {"client_id": "{client_id}"}),
        call("create_client", {"name": f"Null Means Absent {transport} S.L."}),
        call("update_client", {"client_id": "{new_client}"}, remember=("new_client", "cli")),
        call("create_invoice", {"client_id": "{client_id}", "lines": [LINE]}),
        call("update_invoice", {"invoice_id": "{paid}"}, remember=("paid", "inv")),
        call("issue_invoice", {"invoice_id": "{paid}", "idempotency_key": f"{key}-issue-paid"}),
        call("get_invoice", {"invoice_id": "{paid}"}),
        call("send_invoice", {"invoice_id": "{paid}", "idempotency_key": f"{key}-send"}),
        call("record_payment", {"invoice_id": "{paid}", "amount_cents": 100, "idempotency_key": f"{key}-pay"}),
        call("list_payments", {}),
        call("create_invoice", {"client_id": "{client_id}", "lines": [LINE]}),
        call("delete_invoice", {"invoice_id": "{deleted}"}, remember=("deleted", "inv")),
        call("create_invoice", {"client_id": "{client_id}", "lines": [LINE]}),
        call(
            "issue_invoice",
            {"invoice_id": "{voided}", "idempotency_key": f"{key}-issue-voided"},
            remember=("voided", "inv"),
        ),
        call(
            "void_invoice",
            {"invoice_id": "{voided}", "reason": "Issued by mistake", "idempotency_key": f"{key}-void"},
        ),
        call("search_invoices", {}),
        call("export_invoices", {"from": "2026-01-01", "to": "2026-12-31"}),
        call("delete_client", {"client_id": "{new_client}"}),
    ]



@pytest.fixture(scope="module")
def whole_plan(tmp_path_factory: pytest.TempPathFactory):
    """A server whose plan has every built-in tool (the shared one excludes one for the plan
    scenario), with the full-scope key of the success scenario."""
    server = Tollgate.start(tmp_path_factory.mktemp("tollgate-whole-plan"), scenarios=(SUCCESS,))
    yield server
    server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_built_in_tool_runs_with_its_optional_arguments_left_out(
    whole_plan: Tollgate, observe: Any, transport: str
) -> None:
    """The model gives only the required arguments; mcp-use sends `null` for every optional
    one it left out (its schema default where the schema declares one), and no call is
    refused for it."""
    tollgate = whole_plan
    script = every_tool_script(tollgate, transport)
    token = tollgate.token(SUCCESS, "jsonrpc")
    # mcp-use's graph takes four steps per tool call; its recursion limit is twice max_steps.
    model, raised, sent = asyncio.run(
        run_agent(tollgate, token, transport, script, max_steps=3 * len(script), record_calls=True)
    )
    refused = [(name, result.content[0].text) for name, result in sent.results if result.isError]
    summary = f"{len(sent.results)} calls of {len({n for n, _ in sent.calls})} tools, {len(refused)} refused"
    summary += "".join(f"; {name}: {text}" for name, text in refused)
    # A refused call also ends the script early (the next call needs what it would have made).
    received = Received(raised=None if refused else raised, text=summary)
    observe(FRAMEWORK, "all_tools_optional_arguments_left_out", "jsonrpc", transport, received)
    assert not refused, f"calls refused: {refused}"
    assert raised is None, f"the agent run aborted: {raised!r}"
    declared = {tool["name"]: tool["inputSchema"] for tool in tollgate.list_tools(token)}
    assert len(declared) == 16
    assert {name for name, _ in sent.calls} == set(declared), "not every built-in tool was called"
    assert len(sent.calls) == len(script)
    nulls_sent = 0
    for (name, arguments), step in zip(sent.calls, script):
        properties = declared[name].get("properties", {})
        left_out = set(properties) - set(step.given)
        assert set(arguments) == set(properties), f"{name}: mcp-use sent {arguments}"
        for arg in left_out:
            expected = properties[arg].get("default")
            assert arguments[arg] == expected, f"{name}: mcp-use sent {arg}={arguments[arg]!r}"
            nulls_sent += expected is None
    assert nulls_sent > 0
    received = tool_messages(model.turns[-1])
    assert len(received) == len(script)
    assert [m.status for m in received] == ["success"] * len(script)
