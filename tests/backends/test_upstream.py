"""Upstream MCP servers nobody here wrote, behind `tollgate serve`, driven through the
official Python SDK client (`mcp` 2.3.0, handshake era over Streamable HTTP):

- `@modelcontextprotocol/server-everything` (npm) over stdio (`node index.js stdio`, which
  tollgate starts and restarts) and over Streamable HTTP (`node index.js streamableHttp`
  on a free port, `PORT`): its tools under the prefix, calls, a tool that raises, a call
  past the deadline, progress relayed, and the upstream killed mid-session then restarted;
- a FastMCP server (PyPI, `fastmcp_upstream.py`): a tool that raises, one that returns
  `isError`, a JSON-RPC error, progress, a cancellation forwarded to it, a call past the
  deadline cancelled upstream, and a tool added at run time
  (`notifications/tools/list_changed`) offered by the gate.

A secret header of an HTTP upstream never reaches a response, `/healthz` or the log.

Every failure is asserted on the catalog envelope in `_meta["dev.tollgate/error"]`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

FASTMCP_UPSTREAM = Path(__file__).resolve().parent / "fastmcp_upstream.py"
WAIT = 30.0


@asynccontextmanager
async def connect(server, token: str) -> AsyncIterator[Client]:
    """A handshake-era client of the gate with `token`."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(server.url, http_client=http), mode="legacy", read_timeout_seconds=60) as client:
            yield client


def envelope(result) -> dict[str, Any]:
    """The catalog envelope of an `isError` result."""
    assert result.is_error is True, result
    dumped = result.model_dump(by_alias=True)
    error = dumped["_meta"]["dev.tollgate/error"]
    assert dumped["content"][0]["text"] == error["hint"]
    assert "{" not in error["hint"], error["hint"]
    return error


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def stdio_backend(name: str, command: str, args: list[str], env: dict[str, str] | None = None, timeout_ms: int = 20000) -> str:
    # A JSON string is a TOML basic string.
    quoted = ", ".join(json.dumps(a) for a in args)
    lines = [
        "[[backends]]",
        f'name = "{name}"',
        'kind = "mcp"',
        f'command = "{command}"',
        f"args = [{quoted}]",
        f"timeout_ms = {timeout_ms}",
    ]
    if env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }")
    return "\n".join(lines) + "\n\n"


def http_backend(name: str, url: str, timeout_ms: int = 20000) -> str:
    return f'[[backends]]\nname = "{name}"\nkind = "mcp"\nurl = "{url}"\ntimeout_ms = {timeout_ms}\n\n'


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(check, what: str, timeout: float = WAIT):
    """Polls `check()` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.2)
        return probe.connect_ex(("127.0.0.1", port)) == 0


class EverythingHttp:
    """server-everything over Streamable HTTP on a free loopback port."""

    def __init__(self, everything_js: Path, port: int, log: Path) -> None:
        self.everything_js = everything_js
        self.port = port
        self.log = log
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                ["node", str(self.everything_js), "streamableHttp"],
                env={**os.environ, "PORT": str(self.port)},
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
            )
        wait_for(lambda: port_open(self.port), "server-everything to listen")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def everything_http(everything_js, tmp_path):
    server = EverythingHttp(everything_js, free_port(), tmp_path / "everything-http.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture(params=["stdio", "http"])
def everything_gate(request, everything_js, serve_http, tollgate_db, tmp_path):
    """The gate with server-everything as `ev` (deadline 20 s) and `evq` (deadline 1 s)."""
    if request.param == "stdio":
        args = [str(everything_js), "stdio"]
        config = stdio_backend("ev", "node", args) + stdio_backend("evq", "node", args, timeout_ms=1000)
        upstream = None
    else:
        upstream = EverythingHttp(everything_js, free_port(), tmp_path / "everything-http.log")
        upstream.start()
        config = http_backend("ev", upstream.url) + http_backend("evq", upstream.url, timeout_ms=1000)
    yield serve_http(tollgate_db, config=config)
    if upstream is not None:
        upstream.kill()


async def test_everything_tools_are_listed_with_the_prefix_and_called(everything_gate, tollgate_db) -> None:
    async with connect(everything_gate, tollgate_db.admin_key) as client:
        listing = await client.list_tools()
        tools = {tool.name: tool for tool in listing.tools}
        for name in ("ev_echo", "ev_get_sum", "ev_trigger_long_running_operation", "evq_get_sum"):
            assert name in tools, sorted(tools)
        assert tools["ev_get_sum"].annotations.read_only_hint is True
        assert tools["ev_gzip_file_as_resource"].annotations.read_only_hint is False
        summed = await client.call_tool("ev_get_sum", {"a": 2, "b": 3})
        assert summed.is_error is False
        assert text_of(summed) == "The sum of 2 and 3 is 5."
        echoed = await client.call_tool("ev_echo", {"message": "hi"})
        assert text_of(echoed) == "Echo: hi"


async def test_everything_a_tool_that_raises_is_an_adapter_error(everything_gate, tollgate_db) -> None:
    async with connect(everything_gate, tollgate_db.admin_key) as client:
        failed = await client.call_tool("ev_gzip_file_as_resource", {"data": "ftp://example.invalid/x.txt"})
    error = envelope(failed)
    assert error["code"] == "adapter_error"
    assert error["error_code"] == 4001
    assert error["retryable"] is False
    assert error["details"]["backend"] == "ev"
    assert "original_error" not in error["details"]
    assert "Unsupported URL protocol" in error["details"]["message"]
    assert error["hint"].startswith("The business backend ev answered with an error: ")


async def test_everything_a_call_past_the_deadline_is_a_timeout(everything_gate, tollgate_db) -> None:
    async with connect(everything_gate, tollgate_db.admin_key) as client:
        late = await client.call_tool("evq_trigger_long_running_operation", {"duration": 5, "steps": 5})
        error = envelope(late)
        assert error["code"] == "timeout"
        assert error["error_code"] == 3002
        assert error["retryable"] is True
        assert error["details"] == {"backend": "evq", "timeout_ms": 1000}
        # The upstream was told to stop; the session goes on serving.
        after = await client.call_tool("evq_get_sum", {"a": 1, "b": 1})
        assert text_of(after) == "The sum of 1 and 1 is 2."


async def test_everything_progress_is_relayed_to_the_caller(everything_gate, tollgate_db) -> None:
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with connect(everything_gate, tollgate_db.admin_key) as client:
        done = await client.call_tool(
            "ev_trigger_long_running_operation", {"duration": 1, "steps": 4}, progress_callback=on_progress
        )
    assert done.is_error is False
    assert text_of(done) == "Long running operation completed. Duration: 1 seconds, Steps: 4."
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]


async def test_everything_over_stdio_killed_mid_session_then_restarted(everything_js, serve_http, tollgate_db, tmp_path) -> None:
    # While the gate file is away the upstream cannot start again, so the outage lasts
    # until the test puts it back.
    gate_file = tmp_path / "upstream-may-start"
    gate_file.write_text("yes")
    script = 'test -f "$UPSTREAM_GATE" || exit 3; exec node "$EVERYTHING" stdio'
    config = stdio_backend("ev", "sh", ["-c", script], env={"UPSTREAM_GATE": str(gate_file), "EVERYTHING": str(everything_js)})
    server = serve_http(tollgate_db, config=config)
    first = wait_for(lambda: children_of(server.process.pid), "the upstream child")[0]
    async with connect(server, tollgate_db.admin_key) as client:
        started = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        outcome: dict[str, Any] = {}

        async def long_call() -> None:
            outcome["result"] = await client.call_tool(
                "ev_trigger_long_running_operation", {"duration": 20, "steps": 40}, progress_callback=on_progress
            )

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(long_call)
            with anyio.fail_after(WAIT):
                await started.wait()
            gate_file.unlink()
            os.kill(first, 9)
        lost = envelope(outcome["result"])
        assert lost["code"] == "backend_unavailable"
        assert lost["error_code"] == 4002
        assert lost["retryable"] is True
        assert lost["details"] == {"backend": "ev", "reason": "connection lost"}

        wait_for(lambda: not children_of(server.process.pid) or children_of(server.process.pid) != [first], "the child to go")
        refused = await client.call_tool("ev_get_sum", {"a": 1, "b": 2})
        error = envelope(refused)
        assert error["code"] == "backend_unavailable"
        assert error["details"] == {"backend": "ev", "reason": "not connected"}
        assert error["hint"] == "The business backend ev cannot be reached right now (not connected); retry with backoff."

        gate_file.write_text("yes")
        deadline = time.monotonic() + WAIT
        while True:
            again = await client.call_tool("ev_get_sum", {"a": 1, "b": 2})
            if not again.is_error:
                break
            assert envelope(again)["code"] == "backend_unavailable"
            assert time.monotonic() < deadline, "the upstream was not restarted"
            await anyio.sleep(0.1)
        assert text_of(again) == "The sum of 1 and 2 is 3."
    assert children_of(server.process.pid) != [first]


async def test_everything_over_http_killed_then_restarted(everything_http, serve_http, tollgate_db) -> None:
    server = serve_http(tollgate_db, config=http_backend("ev", everything_http.url))
    async with connect(server, tollgate_db.admin_key) as client:
        ok = await client.call_tool("ev_get_sum", {"a": 2, "b": 2})
        assert text_of(ok) == "The sum of 2 and 2 is 4."
        everything_http.kill()
        refused = await client.call_tool("ev_get_sum", {"a": 2, "b": 2})
        error = envelope(refused)
        assert error["code"] == "backend_unavailable"
        assert error["error_code"] == 4002
        assert error["retryable"] is True
        assert error["details"]["backend"] == "ev"
        assert error["details"]["reason"] in ("connection lost", "not connected")
        everything_http.start()
        deadline = time.monotonic() + WAIT
        while True:
            again = await client.call_tool("ev_get_sum", {"a": 2, "b": 2})
            if not again.is_error:
                break
            assert envelope(again)["code"] == "backend_unavailable"
            assert time.monotonic() < deadline, "the session was not reopened"
            await anyio.sleep(0.2)
        assert text_of(again) == "The sum of 2 and 2 is 4."


@pytest.fixture
def fastmcp_gate(serve_http, tollgate_db, tmp_path):
    marker = tmp_path / "cancelled"
    config = stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)], env={"CANCEL_MARKER": str(marker)})
    server = serve_http(tollgate_db, config=config)
    return server, marker


async def test_fastmcp_results_and_failures(fastmcp_gate, tollgate_db) -> None:
    server, _ = fastmcp_gate
    async with connect(server, tollgate_db.admin_key) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"fm_greet", "fm_explode", "fm_refuse", "fm_rpc_fail", "fm_slow", "fm_count"} <= names

        greeted = await client.call_tool("fm_greet", {"name": "Ada"})
        assert greeted.is_error is False
        assert greeted.structured_content == {"greeting": "Hello, Ada!"}

        raised = envelope(await client.call_tool("fm_explode", {"reason": "boom"}))
        assert raised["code"] == "adapter_error"
        assert raised["error_code"] == 4001
        assert raised["retryable"] is False
        assert "original_error" not in raised["details"]
        assert "exploded: boom" in raised["details"]["message"]

        refused = envelope(await client.call_tool("fm_refuse", {"reason": "closed books"}))
        assert refused["code"] == "adapter_error"
        assert refused["details"] == {"backend": "fm", "message": "refused: closed books"}
        assert refused["hint"] == "The business backend fm answered with an error: refused: closed books; the call did not complete."

        rpc = envelope(await client.call_tool("fm_rpc_fail", {}))
        assert rpc["code"] == "adapter_error"
        assert rpc["error_code"] == 4001
        assert rpc["retryable"] is False
        assert rpc["details"]["original_error"] == {"code": -32042, "message": "the ledger is locked"}
        assert rpc["details"]["message"] == "the ledger is locked"
        assert rpc["hint"] == "The business backend fm answered with error -32042: the ledger is locked; the call did not complete."


async def test_fastmcp_progress_is_relayed(fastmcp_gate, tollgate_db) -> None:
    server, _ = fastmcp_gate
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with connect(server, tollgate_db.admin_key) as client:
        done = await client.call_tool("fm_count", {"steps": 3}, progress_callback=on_progress)
    assert text_of(done) == "counted 3"
    # The gate relays an upstream's progress at most four times a second, the newest value
    # winning and always last before the result: steps 50 ms apart reach the caller as the
    # first and the last (the middle one is superseded), in order, never repeated.
    steps = [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert seen, "no progress was relayed"
    assert all(item in steps for item in seen), seen
    assert seen == sorted(set(seen)), seen
    assert seen[-1] == (3, 3, "step 3"), seen


async def test_fastmcp_a_cancellation_is_forwarded_to_the_upstream(fastmcp_gate, tollgate_db) -> None:
    server, marker = fastmcp_gate
    async with connect(server, tollgate_db.admin_key) as client:
        with anyio.move_on_after(1.5) as scope:
            await client.call_tool("fm_slow", {"seconds": 60})
        assert scope.cancelled_caught
        wait_for(marker.exists, "the upstream to see the cancellation")
        assert marker.read_text() == "cancelled"
        # The session goes on serving.
        greeted = await client.call_tool("fm_greet", {"name": "again"})
        assert greeted.structured_content == {"greeting": "Hello, again!"}


async def test_a_secret_header_never_leaves_towards_the_caller_or_the_log(everything_http, serve_http, tollgate_db, tmp_path) -> None:
    secret = "Bearer sekrit-upstream-header-5d1e"
    secret_file = tmp_path / "upstream.auth"
    secret_file.write_text(secret + "\n")
    config = (
        '[log]\nlevel = "debug"\n\n'
        f'[[backends]]\nname = "ev"\nkind = "mcp"\nurl = "{everything_http.url}"\n'
        f'headers = {{ "Authorization" = {{ file = {json.dumps(str(secret_file))} }}, "X-Tenant" = "acme" }}\n'
    )
    server = serve_http(tollgate_db, config=config)
    seen: list[str] = []
    async with connect(server, tollgate_db.admin_key) as client:
        seen.append(str(await client.list_tools()))
        seen.append(str(await client.call_tool("ev_get_sum", {"a": 1, "b": 1})))
        seen.append(str(await client.call_tool("ev_gzip_file_as_resource", {"data": "ftp://example.invalid/x"})))
        everything_http.kill()
        seen.append(str(await client.call_tool("ev_get_sum", {"a": 1, "b": 1})))
    with urllib.request.urlopen(f"{server.base}/healthz", timeout=10) as health:
        seen.append(health.read().decode())
    assert "sekrit" not in "\n".join(seen)
    log = server.log_text()
    assert "ev_get_sum" in log or "upstream" in log, log[-2000:]
    assert "sekrit" not in log


async def test_fastmcp_a_changed_list_of_tools_is_read_again(fastmcp_gate, tollgate_db) -> None:
    server, _ = fastmcp_gate
    async with connect(server, tollgate_db.admin_key) as client:
        grown = await client.call_tool("fm_grow", {"name": "fresh"})
        assert text_of(grown) == "added fresh"
        deadline = time.monotonic() + WAIT
        while "fm_fresh" not in {tool.name for tool in (await client.list_tools()).tools}:
            assert time.monotonic() < deadline, "the new tool never appeared"
            await anyio.sleep(0.1)
        fresh = await client.call_tool("fm_fresh", {})
        assert text_of(fresh) == "fresh is here"


async def test_fastmcp_a_call_past_the_deadline_is_cancelled_upstream(serve_http, tollgate_db, tmp_path) -> None:
    marker = tmp_path / "cancelled-at-deadline"
    config = stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)], env={"CANCEL_MARKER": str(marker)}, timeout_ms=1000)
    server = serve_http(tollgate_db, config=config)
    async with connect(server, tollgate_db.admin_key) as client:
        late = envelope(await client.call_tool("fm_slow", {"seconds": 30}))
    assert late["code"] == "timeout"
    assert late["error_code"] == 3002
    assert late["retryable"] is True
    assert late["details"] == {"backend": "fm", "timeout_ms": 1000}
    wait_for(marker.exists, "the upstream to be told the call was cancelled")
