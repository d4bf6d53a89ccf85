"""fastmcp (4.2.3) `Client`: what a host that embeds it gets from one tool call.

fastmcp has no agent loop: the host decides what its model reads. So this measures the two
ways a host calls a tool — `call_tool(..., raise_on_error=False)`, which returns `isError`
results instead of raising, and the default `call_tool(...)`, which raises `ToolError(text)`
for them — over HTTP (`Client(url, auth=BearerAuth(token))`) and stdio (`StdioTransport`).

A JSON-RPC error (a guard failure in the `jsonrpc` channel) raises `MCPError` either way,
with the code, the string code as its message and the envelope in `.data` (the specific
sentence in `.data["hint"]`): only host code sees it. In the `tool_result` channel the same
failure is an `isError` result whose text is the sentence and whose
`_meta["dev.tollgate/error"]` is the envelope plus the JSON-RPC code it would have had.
fastmcp calls a name whether or not it was listed, so no stale tool list is needed here.
"""

from __future__ import annotations

from typing import Any

import anyio
import fastmcp
import pytest
from fastmcp.client.auth import BearerAuth
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError
from mcp.shared.exceptions import MCPError

from harness import CHANNELS, TRANSPORTS, Received, Tollgate
from scenarios import SCENARIOS, SUCCESS, Scenario

FRAMEWORK = "fastmcp"

ERROR_META = "dev.tollgate/error"

pytestmark = pytest.mark.anyio


def _client(tollgate: Tollgate, token: str, transport: str) -> fastmcp.Client:
    if transport == "http":
        return fastmcp.Client(tollgate.http_url, auth=BearerAuth(token))
    params = tollgate.stdio(token)
    return fastmcp.Client(
        StdioTransport(command=params["command"], args=params["args"], env=params["env"], cwd=params["cwd"])
    )


async def _call(tollgate: Tollgate, scenario: Scenario, channel: str, transport: str, **options: Any) -> tuple[Any, BaseException | None]:
    """One `call_tool` of the scenario; the result, or the exception it raised."""
    token = tollgate.prepare_call(scenario, channel)
    with anyio.fail_after(60):
        async with _client(tollgate, token, transport) as client:
            try:
                return await client.call_tool(scenario.tool, tollgate.arguments(scenario, channel), **options), None
            except Exception as error:
                return None, error


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if getattr(block, "text", None) is not None)


def _assert_jsonrpc_error(tollgate: Tollgate, scenario: Scenario, error: BaseException | None) -> None:
    """The JSON-RPC error as today's wire has it, with the specific sentence in data.hint."""
    assert isinstance(error, MCPError), f"expected MCPError, got {error!r}"
    assert error.code == scenario.jsonrpc_code
    assert error.message == scenario.code
    assert isinstance(error.data, dict) and error.data["code"] == scenario.code
    tollgate.assert_mentions(error.data["hint"], scenario)


CASES = [
    pytest.param(s, ch, tr, id=f"{s.name}-{ch}-{tr}") for s in SCENARIOS for ch in CHANNELS for tr in TRANSPORTS
]


@pytest.mark.parametrize("scenario,channel,transport", CASES)
async def test_call_tool_without_raising(tollgate, observe, scenario, channel, transport):
    """`raise_on_error=False`: an isError result comes back with the sentence and envelope;
    a JSON-RPC error still raises `MCPError`."""
    result, error = await _call(tollgate, scenario, channel, transport, raise_on_error=False)
    received = Received(text=_text(result) if result is not None else None, raised=error)
    observe(f"{FRAMEWORK} (raise_on_error=False)", scenario, channel, transport, received)
    if channel == "jsonrpc" and scenario.is_guard:
        _assert_jsonrpc_error(tollgate, scenario, error)
        return
    assert error is None, f"the call raised {error!r}"
    assert result.is_error
    tollgate.assert_mentions(received.text, scenario)
    envelope = result.meta[ERROR_META]
    assert envelope["code"] == scenario.code
    assert envelope["hint"] == received.text
    if scenario.is_guard:
        assert envelope["jsonrpc_code"] == scenario.jsonrpc_code


@pytest.mark.parametrize("scenario,channel,transport", CASES)
async def test_call_tool_raising(tollgate, observe, scenario, channel, transport):
    """The default call: an isError result raises `ToolError` whose message is the sentence
    (the envelope is lost to the host); a JSON-RPC error raises `MCPError` with `.data`."""
    result, error = await _call(tollgate, scenario, channel, transport)
    observe(f"{FRAMEWORK} (raising)", scenario, channel, transport, Received(raised=error))
    assert result is None, f"the call returned {result!r}"
    if channel == "jsonrpc" and scenario.is_guard:
        _assert_jsonrpc_error(tollgate, scenario, error)
        return
    assert isinstance(error, ToolError), f"expected ToolError, got {error!r}"
    tollgate.assert_mentions(str(error), scenario)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_plain_read_succeeds(tollgate, observe, transport):
    """The host receives the client's data."""
    result, error = await _call(tollgate, SUCCESS, "jsonrpc", transport)
    assert error is None, f"the call raised {error!r}"
    received = Received(text=_text(result))
    observe(FRAMEWORK, SUCCESS, "jsonrpc", transport, received)
    assert not result.is_error
    tollgate.assert_specific(received, SUCCESS)
