"""The official Python MCP client (`mcp==2.3.0`) against `tollgate stdio`, on both eras.

For each connection mode — `legacy` (the `initialize` handshake), `2026-07-28` (stateless,
per-request `_meta`) and `auto` (probes `server/discover`, falls back to `initialize`) —
the client lists the tools, calls a conformance fixture tool, reads a fixture resource, and
receives a protocol error through its own error type. The client validates every result
against the negotiated revision's schema, so a result it returns was accepted; the raw wire
messages are also recorded to check what tollgate actually sent (e.g. `resultType`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCRequest, JSONRPCResponse

pytestmark = pytest.mark.anyio

SIMPLE_TEXT = "This is a simple text response for testing."
STATIC_TEXT = "This is the content of the static text resource."

# mode -> protocol version the connection must end up on.
MODES = {
    "legacy": "2025-11-25",
    "2026-07-28": "2026-07-28",
    "auto": "2026-07-28",
}


class Wire:
    """What went over stdio: the method of each request id, and each raw response."""

    def __init__(self) -> None:
        self.methods: dict[Any, str] = {}
        self.responses: list[JSONRPCResponse | JSONRPCError] = []

    def results_of(self, method: str) -> list[dict[str, Any]]:
        """The raw `result` objects of every successful response to `method`."""
        return [r.result for r in self.responses if isinstance(r, JSONRPCResponse) and self.methods.get(r.id) == method]


class _RecordingRead:
    """Read side of the transport that notes each response before the client sees it."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    def _note(self, item: Any) -> Any:
        if isinstance(item, SessionMessage) and isinstance(item.message, JSONRPCResponse | JSONRPCError):
            self._wire.responses.append(item.message)
        return item

    async def receive(self) -> Any:
        return self._note(await self._inner.receive())

    def __aiter__(self) -> _RecordingRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RecordingWrite:
    """Write side of the transport that notes the method of each request id."""

    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner = inner
        self._wire = wire

    async def send(self, item: SessionMessage) -> None:
        if isinstance(item.message, JSONRPCRequest):
            self._wire.methods[item.message.id] = item.message.method
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@asynccontextmanager
async def recording_stdio(params: StdioServerParameters, wire: Wire) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's own stdio transport, with both directions recorded into `wire`."""
    async with stdio_client(params) as (read, write):
        yield _RecordingRead(read, wire), _RecordingWrite(write, wire)


def _tool_names(listing: Any) -> list[str]:
    return [tool.name for tool in listing.tools]


@pytest.mark.parametrize("mode", list(MODES))
async def test_client_lists_calls_and_reads_on_each_era(mode: str, tollgate_db, stdio_params) -> None:
    wire = Wire()
    params = stdio_params(tollgate_db, "--conformance-pack")
    async with Client(recording_stdio(params, wire), mode=mode, read_timeout_seconds=30) as client:
        assert client.protocol_version == MODES[mode]

        listing = await client.list_tools()
        assert "test_simple_text" in _tool_names(listing)
        assert len(_tool_names(listing)) == len(set(_tool_names(listing)))

        called = await client.call_tool("test_simple_text", {})
        assert called.is_error is False
        assert [(c.type, c.text) for c in called.content] == [("text", SIMPLE_TEXT)]

        read = await client.read_resource("test://static-text")
        assert len(read.contents) == 1
        assert read.contents[0].uri == "test://static-text"
        assert read.contents[0].mime_type == "text/plain"
        assert read.contents[0].text == STATIC_TEXT

    for method in ("tools/list", "tools/call", "resources/read"):
        assert wire.results_of(method), f"no raw {method} result recorded"
        for raw in wire.results_of(method):
            if MODES[mode] == "2026-07-28":
                assert raw.get("resultType") == "complete", (method, raw)
                server_info = raw["_meta"]["io.modelcontextprotocol/serverInfo"]
                assert server_info["name"] == "tollgate", (method, raw)
            else:
                assert "resultType" not in raw, (method, raw)
    if MODES[mode] == "2026-07-28":
        for method in ("tools/list", "resources/read"):
            for raw in wire.results_of(method):
                assert isinstance(raw["ttlMs"], int) and raw["ttlMs"] >= 0, (method, raw)
                assert raw["cacheScope"] in ("public", "private"), (method, raw)


async def test_legacy_handshake_reports_server_info(tollgate_db, stdio_params) -> None:
    async with Client(stdio_params(tollgate_db), mode="legacy", read_timeout_seconds=30) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_info is not None
        assert client.server_info.name == "tollgate"
        assert client.server_capabilities.tools is not None


async def test_auto_mode_discovers_the_modern_era(tollgate_db, stdio_params) -> None:
    wire = Wire()
    params = stdio_params(tollgate_db)
    async with Client(recording_stdio(params, wire), mode="auto", read_timeout_seconds=30) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == "tollgate"
    discovered = wire.results_of("server/discover")
    assert len(discovered) == 1, wire.methods
    assert discovered[0]["resultType"] == "complete"
    assert "2026-07-28" in discovered[0]["supportedVersions"]
    assert "initialize" not in wire.methods.values(), "auto must not fall back on a modern server"


@pytest.mark.parametrize("mode", list(MODES))
async def test_unknown_tool_surfaces_the_catalog_error(mode: str, tollgate_db, stdio_params) -> None:
    params = stdio_params(tollgate_db, "--conformance-pack")
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("no_such_tool", {})
        error = raised.value
        assert error.code == -32602
        assert error.message == "unknown_tool"
        assert error.data["code"] == "unknown_tool"
        assert error.data["http_status"] == 404
        assert error.data["error_code"] == 1005
        assert error.data["retryable"] is False
        assert error.data["details"] == {"name": "no_such_tool"}
        # The connection survives a protocol error.
        again = await client.call_tool("test_simple_text", {})
        assert again.content[0].text == SIMPLE_TEXT


@pytest.mark.parametrize("mode", list(MODES))
async def test_retired_tool_names_its_replacement(mode: str, tollgate_db, stdio_params) -> None:
    async with Client(stdio_params(tollgate_db), mode=mode, read_timeout_seconds=30) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("list_invoices", {})
        assert raised.value.code == -32602
        assert raised.value.data["code"] == "tool_retired"
        assert raised.value.data["replacement"] == "search_invoices"
