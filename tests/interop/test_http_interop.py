"""The official Python MCP client (`mcp==2.3.0`) against `tollgate serve` over Streamable HTTP.

On both eras (`mode="legacy"`: `initialize` + `Mcp-Session-Id`; `mode="2026-07-28"`:
stateless, per-request `_meta`), each with a bearer token from `tollgate key create`, the
client lists tools, calls a conformance fixture tool, and meets the three guard errors a
caller must be able to branch on: `-32001 invalid_token` (bad token), `-32005
insufficient_scope` (a key without `conformance:use`) and `-32006 rate_limited` (a key
allowed one `read` call per minute). Each must surface as `mcp.MCPError` whose `.code` and
`.data["code"]` are readable.

The bearer token travels the way the 2.3.0 client documents it: `streamable_http_client(url,
http_client=httpx2.AsyncClient(headers={"Authorization": …}))` (the SDK has no `headers=`
argument of its own). A response hook records the HTTP status of every POST, so the tests
also pin which status carried each error: in the default `compatible` mode 401 for
`-32001` and 200 for the others; in `semantic` mode 403 and 429 — which this client
handles just as well (it parses a JSON-RPC error body at any status).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

SIMPLE_TEXT = "This is a simple text response for testing."

# mode -> the protocol version the connection must end up on.
MODES = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}


class StatusLog:
    """The HTTP status of each response, with the JSON-RPC method of its request."""

    def __init__(self) -> None:
        self.entries: list[tuple[str | None, int]] = []

    async def on_response(self, response: httpx2.Response) -> None:
        method = None
        request = response.request
        if request.method == "POST":
            try:
                method = json.loads(request.content).get("method")
            except (ValueError, AttributeError):
                method = None
        self.entries.append((method, response.status_code))

    def statuses_of(self, method: str) -> list[int]:
        return [status for m, status in self.entries if m == method]


@asynccontextmanager
async def http_client(url: str, token: str | None, mode: str, log: StatusLog) -> AsyncIterator[Client]:
    """A connected `Client` whose every request carries `Authorization: Bearer <token>`."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(30), event_hooks={"response": [log.on_response]}
    ) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=30) as client:
            assert client.protocol_version == MODES[mode]
            yield client


def create_key(run_tollgate, db, scopes: str) -> dict[str, Any]:
    """`tollgate key create --json`: the printed `id` and `token`."""
    done = run_tollgate("--database", str(db.path), "key", "create", "--name", "interop", "--scopes", scopes, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def one_read_per_minute_key(run_tollgate, db) -> dict[str, Any]:
    """A `conformance:use` key whose `read` bucket allows one call per minute."""
    key = create_key(run_tollgate, db, "conformance:use")
    done = run_tollgate(
        "--database", str(db.path), "limits", "set", "--credential", key["id"], "--category", "read", "--per-minute", "1"
    )
    assert done.returncode == 0, done.stderr
    return key


async def refusal_past_one_a_minute(client) -> tuple[MCPError, int]:
    """The refusal of a call past a one-call-per-minute allowance, and how many calls were
    admitted on the way to it. Windows are fixed and start on the minute, so the call after
    an admitted one may fall in the next window and be admitted too; the one after that
    cannot (its window already holds a call). A limiter that did not count admits both,
    and the test fails."""
    for admitted in range(2):
        try:
            await client.call_tool("test_simple_text", {})
        except MCPError as error:
            return error, admitted
    pytest.fail("two calls past a one-call-per-minute allowance were both admitted")


def assert_catalog_error(error: MCPError, rpc_code: int, code: str, http_status: int) -> None:
    """The JSON-RPC code and the catalog envelope are both readable from the exception."""
    assert error.code == rpc_code, error
    assert error.message == code
    assert isinstance(error.data, dict), error.data
    assert error.data["code"] == code
    assert error.data["http_status"] == http_status
    assert isinstance(error.data["hint"], str) and error.data["hint"]


@pytest.mark.parametrize("mode", list(MODES))
async def test_lists_and_calls_with_a_bearer_token(mode: str, tollgate_db, serve_http) -> None:
    server = serve_http(tollgate_db, "--conformance-pack")
    log = StatusLog()
    async with http_client(server.url, tollgate_db.admin_key, mode, log) as client:
        listing = await client.list_tools()
        names = [tool.name for tool in listing.tools]
        assert "test_simple_text" in names
        called = await client.call_tool("test_simple_text", {})
        assert called.is_error is False
        assert [(c.type, c.text) for c in called.content] == [("text", SIMPLE_TEXT)]
    assert log.statuses_of("tools/call") == [200]


@pytest.mark.parametrize("mode", list(MODES))
async def test_bad_token_surfaces_invalid_token(mode: str, tollgate_db, serve_http) -> None:
    server = serve_http(tollgate_db, "--conformance-pack")
    log = StatusLog()
    bad = "tg_live_0000000000000000_not-a-secret"
    if mode == "legacy" and os.environ.get("TG_FRONT_DOOR") == "on":
        # With the OAuth front door on, /mcp opens no session for a refused credential:
        # the handshake itself is answered invalid_token with its 401 challenge, so that a
        # host signs its person in before it has a session it could not use afterwards.
        with pytest.raises(BaseException) as raised:
            async with http_client(server.url, bad, mode, log):
                pass
        # The client's task group may wrap the refusal in an exception group.
        refusal = raised.value
        while isinstance(refusal, BaseExceptionGroup):
            refusal = refusal.exceptions[0]
        assert isinstance(refusal, MCPError), repr(raised.value)
        assert_catalog_error(refusal, -32001, "invalid_token", 401)
        assert log.statuses_of("initialize") == [401]
        return
    async with http_client(server.url, bad, mode, log) as client:
        with pytest.raises(MCPError) as raised:
            await client.list_tools()
        assert_catalog_error(raised.value, -32001, "invalid_token", 401)
        assert raised.value.data["error_code"] == 1101
        assert raised.value.data["retryable"] is False
    # The only non-200 status of the default mode: the client still reads the body.
    assert log.statuses_of("tools/list") == [401]


@pytest.mark.parametrize("mode", list(MODES))
async def test_missing_scope_surfaces_insufficient_scope(mode: str, tollgate_db, serve_http, run_tollgate) -> None:
    server = serve_http(tollgate_db, "--conformance-pack")
    reader = create_key(run_tollgate, tollgate_db, "invoices:read")
    log = StatusLog()
    async with http_client(server.url, reader["token"], mode, log) as client:
        listing = await client.list_tools()
        assert "test_simple_text" not in [tool.name for tool in listing.tools]
        with pytest.raises(MCPError) as raised:
            await client.call_tool("test_simple_text", {})
        assert_catalog_error(raised.value, -32005, "insufficient_scope", 403)
        assert raised.value.data["required_scope"] == "conformance:use"
        assert raised.value.data["provided_scopes"] == ["invoices:read"]
    assert log.statuses_of("tools/call") == [200]


@pytest.mark.parametrize("mode", list(MODES))
async def test_rate_limit_surfaces_rate_limited_with_retry_after(
    mode: str, tollgate_db, serve_http, run_tollgate
) -> None:
    server = serve_http(tollgate_db, "--conformance-pack")
    key = one_read_per_minute_key(run_tollgate, tollgate_db)
    log = StatusLog()
    async with http_client(server.url, key["token"], mode, log) as client:
        first = await client.call_tool("test_simple_text", {})
        assert first.content[0].text == SIMPLE_TEXT
        refusal, admitted = await refusal_past_one_a_minute(client)
        assert_catalog_error(refusal, -32006, "rate_limited", 429)
        data = refusal.data
        assert data["retryable"] is True
        assert data["bucket"] == "read"
        assert data["limit"] == 1
        assert isinstance(data["retry_after"], int) and 1 <= data["retry_after"] <= 60
    assert log.statuses_of("tools/call") == [200] * (2 + admitted)


@pytest.mark.parametrize("mode", list(MODES))
async def test_semantic_statuses_reach_the_caller_too(mode: str, tollgate_db, serve_http, run_tollgate) -> None:
    """With `[http] error_status = "semantic"` the guard errors travel with 403 and 429;
    this client still surfaces the JSON-RPC error with its data."""
    server = serve_http(tollgate_db, "--conformance-pack", config='[http]\nerror_status = "semantic"\n')
    reader = create_key(run_tollgate, tollgate_db, "invoices:read")
    limited = one_read_per_minute_key(run_tollgate, tollgate_db)
    log = StatusLog()
    async with http_client(server.url, reader["token"], mode, log) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("test_simple_text", {})
        assert_catalog_error(raised.value, -32005, "insufficient_scope", 403)
    async with http_client(server.url, limited["token"], mode, log) as client:
        await client.call_tool("test_simple_text", {})
        refusal, admitted = await refusal_past_one_a_minute(client)
        assert_catalog_error(refusal, -32006, "rate_limited", 429)
        assert refusal.data["retry_after"] >= 1
    assert log.statuses_of("tools/call") == [403, 200] + [200] * admitted + [429]
