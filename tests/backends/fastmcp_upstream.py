"""A FastMCP server (from PyPI) used as an upstream MCP server behind tollgate, over stdio
(or over Streamable HTTP at `/mcp` on a loopback port).

Its tools cover each outcome tollgate must map: one that succeeds with structured content,
one that raises, one that returns `isError: true` itself, one that answers with a JSON-RPC
error, one that is slow (and writes `CANCEL_MARKER` when its request is cancelled), one that
reports progress, one that adds a tool and sends `notifications/tools/list_changed`, and one
that answers with the W3C trace context its request carried in `params._meta`; a resource, a
resource template and a prompt, and a tool that adds a resource and sends
`notifications/resources/list_changed`.

    python fastmcp_upstream.py             # stdio
    python fastmcp_upstream.py http PORT   # Streamable HTTP on 127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from fastmcp import Context, FastMCP
from fastmcp.server.middleware import Middleware
from fastmcp.tools import Tool
from fastmcp.tools.base import ToolResult
from mcp.shared.exceptions import MCPError
from mcp.types import ResourceListChangedNotification, TextContent, ToolListChangedNotification

mcp = FastMCP("fastmcp-upstream", mask_error_details=False)


@mcp.tool(annotations={"readOnlyHint": True})
def greet(name: str) -> dict:
    """Greets someone."""
    return {"greeting": f"Hello, {name}!"}


@mcp.tool
def explode(reason: str) -> str:
    """Raises an exception with the given reason."""
    raise ValueError(f"exploded: {reason}")


@mcp.tool
def refuse(reason: str) -> ToolResult:
    """Returns a tool result with isError set."""
    return ToolResult(content=[TextContent(type="text", text=f"refused: {reason}")], is_error=True)


class RpcFailure(Middleware):
    """Answers a call of `rpc_fail` with a JSON-RPC error (a tool's own exception would
    become an `isError` result)."""

    async def on_call_tool(self, context, call_next):
        if context.message.name == "rpc_fail":
            raise MCPError(-32042, "the ledger is locked")
        return await call_next(context)


mcp.add_middleware(RpcFailure())


@mcp.tool
def rpc_fail() -> str:
    """Answers with a JSON-RPC error (see RpcFailure)."""
    return "unreachable"


@mcp.tool(annotations={"readOnlyHint": True})
async def slow(seconds: float) -> str:
    """Sleeps; records in CANCEL_MARKER when its request is cancelled."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        marker = os.environ.get("CANCEL_MARKER")
        if marker:
            Path(marker).write_text("cancelled")
        raise
    return f"slept {seconds}"


@mcp.tool(annotations={"readOnlyHint": True})
async def count(steps: int, ctx: Context) -> str:
    """Reports progress once per step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await asyncio.sleep(0.05)
    return f"counted {steps}"


@mcp.tool
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool named `name` and tells the client its list of tools changed."""

    def added() -> str:
        return f"{name} is here"

    mcp.add_tool(Tool.from_function(added, name=name, description="A tool added at run time."))
    await ctx.send_notification(ToolListChangedNotification())
    return f"added {name}"


@mcp.tool(annotations={"readOnlyHint": True})
def trace_meta(ctx: Context) -> dict:
    """The `traceparent` and `tracestate` of this request's `_meta` (null when absent)."""
    request = ctx.request_context
    meta = (request.meta if request is not None else None) or {}
    return {"traceparent": meta.get("traceparent"), "tracestate": meta.get("tracestate")}


@mcp.resource("notes://shelf/readme", mime_type="text/plain", description="How the shelf is organised.")
def readme() -> str:
    return "Aisle 1: bolts. Aisle 2: nuts."


@mcp.resource("notes://shelf/aisle/{number}", mime_type="text/plain", description="One aisle's notes.")
def aisle(number: str) -> str:
    return f"Notes of aisle {number}."


@mcp.prompt(name="restock-plan", description="Plans a restock of one SKU.")
def restock_plan(sku: str) -> str:
    return f"Plan a restock of {sku}: check stock, then order what is missing."


@mcp.tool
async def add_note(name: str, ctx: Context) -> str:
    """Adds a resource `notes://shelf/<name>` and tells the client its list of resources changed."""

    def note() -> str:
        return f"the {name} note"

    mcp.resource(f"notes://shelf/{name}", mime_type="text/plain", description="A note added at run time.")(note)
    await ctx.send_notification(ResourceListChangedNotification())
    return f"added {name}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), path="/mcp", show_banner=False)
    else:
        mcp.run(show_banner=False)
