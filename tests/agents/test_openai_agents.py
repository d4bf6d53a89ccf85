"""openai-agents (0.24.0): what the model's next turn receives after one MCP tool call.

The SDK's own loop (`Runner.run`) drives an `Agent` whose model is the SDK's `ScriptedModel`
(a `Model` subclass): its first turn calls one tool, its second records the input it is
given and answers. The MCP clients are the SDK's `MCPServerStreamableHttp` and
`MCPServerStdio`.

A tool the key's `tools/list` does not show (a scope it lacks, a tool outside the plan, a
retired name) is added to the listed tools the SDK converts, built from the declaration an
older tool list had: an agent whose tool list predates the change.

With the `jsonrpc` channel a guard failure reaches the SDK as an MCP error, which its
default `failure_error_function` turns into one fixed sentence for every failure.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as mcp_types
import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.testing import ScriptedModel, assistant_message, function_call

from harness import CHANNELS, TRANSPORTS, Received, Tollgate
from scenarios import SCENARIOS, STRICT_CREATE_INVOICE, SUCCESS, Scenario

FRAMEWORK = "openai-agents"

# What the SDK's default failure_error_function gives the model for any tool exception.
GENERIC_FAILURE = "An error occurred while running the tool. Please try again."

pytestmark = pytest.mark.anyio


class _StaleToolList:
    """An MCP server whose tool list also has `stale` declarations (an older list)."""

    stale: tuple[dict, ...] = ()

    async def list_tools(self, *args: Any, **kwargs: Any) -> list[mcp_types.Tool]:
        tools = list(await super().list_tools(*args, **kwargs))  # type: ignore[misc]
        listed = {tool.name for tool in tools}
        return tools + [mcp_types.Tool.model_validate(d) for d in self.stale if d["name"] not in listed]


class HttpServer(_StaleToolList, MCPServerStreamableHttp):
    """`MCPServerStreamableHttp` with a possibly stale tool list."""


class StdioServer(_StaleToolList, MCPServerStdio):
    """`MCPServerStdio` with a possibly stale tool list."""


def _server(tollgate: Tollgate, scenario: Scenario, token: str, transport: str) -> Any:
    if transport == "http":
        server: Any = HttpServer(
            params={"url": tollgate.http_url, "headers": tollgate.headers(token)}, name="tollgate"
        )
    else:
        server = StdioServer(params=tollgate.stdio(token), name="tollgate")
    if not scenario.listed:
        server.stale = (tollgate.declaration(scenario.tool),)
    return server


def _output_text(output: Any) -> str:
    """A `function_call_output` item's output as text (a string or a list of text parts)."""
    if isinstance(output, str):
        return output
    return "\n".join(part.get("text", json.dumps(part)) for part in output)


async def _drive(
    tollgate: Tollgate,
    scenario: Scenario,
    channel: str,
    transport: str,
    arguments: dict | None = None,
    mcp_config: dict | None = None,
) -> tuple[Received, ScriptedModel]:
    """Runs the agent: one call of the scenario's tool, then a turn that records its input."""
    token = tollgate.prepare_call(scenario, channel)
    call = arguments if arguments is not None else tollgate.arguments(scenario, channel)
    model = ScriptedModel(
        [[function_call(scenario.tool, call, call_id="call-1")], [assistant_message("done")]]
    )
    received = Received()
    with anyio.fail_after(60):
        async with _server(tollgate, scenario, token, transport) as server:
            agent = Agent(
                name="bookkeeper",
                instructions="Use the invoicing tools.",
                model=model,
                mcp_servers=[server],
                mcp_config=mcp_config or {},
            )
            try:
                await Runner.run(agent, "Do the task.")
            except Exception as error:  # the run aborted: that is what is measured
                received.raised = error
                return received, model
    outputs = [
        item
        for item in model.calls[1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert len(outputs) == 1, f"expected one tool output in the second turn, got {outputs}"
    received.text = _output_text(outputs[0]["output"])
    return received, model


CASES = [
    pytest.param(s, ch, tr, id=f"{s.name}-{ch}-{tr}") for s in SCENARIOS for ch in CHANNELS for tr in TRANSPORTS
]


@pytest.mark.parametrize("scenario,channel,transport", CASES)
async def test_what_the_model_receives(tollgate, observe, scenario, channel, transport):
    """tool_result (and any failure inside a tool): the model reads the specific sentence.
    jsonrpc: a guard failure becomes the SDK's fixed sentence; the run goes on."""
    received, _ = await _drive(tollgate, scenario, channel, transport)
    observe(FRAMEWORK, scenario, channel, transport, received)
    if channel == "tool_result" or not scenario.is_guard:
        tollgate.assert_specific(received, scenario)
    else:
        assert received.raised is None, received.describe()
        assert received.text == GENERIC_FAILURE


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_plain_read_succeeds(tollgate, observe, transport):
    """The model receives the client's data."""
    received, _ = await _drive(tollgate, SUCCESS, "jsonrpc", transport)
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, received)
    tollgate.assert_specific(received, SUCCESS)


def _strict_call(schema: dict, values: Any) -> Any:
    """What a strict-mode model sends: `values`, and null for every property it leaves unset."""
    if isinstance(values, list):
        return [_strict_call(schema.get("items", {}), v) for v in values]
    if not isinstance(values, dict):
        return values
    schema = _object_branch(schema)
    return {
        name: _strict_call(sub, values[name]) if name in values else None
        for name, sub in schema.get("properties", {}).items()
    }


def _object_branch(schema: dict) -> dict:
    """The object alternative of a nullable schema (`anyOf: [{...}, {type: null}]`)."""
    for alternative in schema.get("anyOf", []):
        if alternative.get("type") == "object" or "properties" in alternative:
            return alternative
    return schema


def _admits_null(schema: dict) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_admits_null(alternative) for alternative in schema.get("anyOf", []))


def _optional_properties_not_nullable(strict: dict, original: dict, path: str = "") -> list[str]:
    """Paths of properties that are optional in `original` but do not admit null in `strict`."""
    strict, original = _object_branch(strict), _object_branch(original)
    found = []
    required = set(original.get("required", []))
    for name, sub in original.get("properties", {}).items():
        strict_sub = strict.get("properties", {}).get(name, {})
        where = f"{path}{name}"
        if name not in required and not _admits_null(strict_sub):
            found.append(where)
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
            found += _optional_properties_not_nullable(
                strict_sub.get("items", {}), sub["items"], f"{where}.0."
            )
    return found


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_strict_mode_agent_creates_an_invoice_with_only_the_required_arguments(tollgate, observe, transport):
    """`convert_schemas_to_strict=True` makes every property required; a strict model then
    sends null for each optional one it does not set. The schema must say null is allowed,
    and the server must treat that null as absent: the draft invoice is created."""
    scenario = STRICT_CREATE_INVOICE
    declaration = tollgate.declaration(scenario.tool)["inputSchema"]
    probe = ScriptedModel([[assistant_message("nothing to do")]])
    async with _server(tollgate, scenario, tollgate.token(scenario, "jsonrpc"), transport) as server:
        agent = Agent(
            name="lister", model=probe, mcp_servers=[server], mcp_config={"convert_schemas_to_strict": True}
        )
        await Runner.run(agent, "List your tools.")
    tool = next(t for t in probe.calls[0].tools if t.name == scenario.tool)
    assert tool.strict_json_schema, "the SDK could not convert create_invoice's schema to strict mode"
    strict = tool.params_json_schema
    assert _optional_properties_not_nullable(strict, declaration) == []

    arguments = _strict_call(strict, tollgate.arguments(scenario))
    assert arguments["idempotency_key"] is None and arguments["lines"][0]["discount_percent"] is None
    received, _ = await _drive(
        tollgate, scenario, "jsonrpc", transport, arguments=arguments, mcp_config={"convert_schemas_to_strict": True}
    )
    observe(FRAMEWORK, scenario, "jsonrpc", transport, received)
    tollgate.assert_specific(received, scenario)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_refused_argument_fixed_and_retried_with_the_same_key_runs(tollgate, observe, transport):
    """The model sends a malformed date with an idempotency key, reads what is wrong, and
    sends the corrected call with the same key: the refused call left no record under the
    key, so the corrected one creates the invoice (it is not `idempotency_key_reused`)."""
    scenario = STRICT_CREATE_INVOICE
    key = f"agents-fix-and-retry-{transport}"
    corrected = {**tollgate.arguments(scenario), "idempotency_key": key}
    refused = {**corrected, "due_date": "31/12/2026"}
    model = ScriptedModel(
        [
            [function_call(scenario.tool, refused, call_id="call-1")],
            [function_call(scenario.tool, corrected, call_id="call-2")],
            [assistant_message("done")],
        ]
    )
    with anyio.fail_after(60):
        async with _server(tollgate, scenario, tollgate.token(scenario, "jsonrpc"), transport) as server:
            agent = Agent(name="bookkeeper", model=model, mcp_servers=[server])
            await Runner.run(agent, "Create the invoice.")
    outputs = {
        item["call_id"]: _output_text(item["output"])
        for item in model.calls[2].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    observe(FRAMEWORK, "fix_and_retry_same_key", "jsonrpc", transport, Received(text=outputs.get("call-2")))
    tollgate.assert_mentions(outputs["call-2"], scenario)
    assert "due_date" in outputs["call-1"] and "YYYY-MM-DD" in outputs["call-1"], outputs["call-1"]
