"""OpenTelemetry traces of tollgate, received by an OTLP/HTTP receiver of the tests' own
(`otlp_receiver.py`, decoding with OpenTelemetry's own protobuf definitions) while the
official Python SDK (`mcp` Client) calls the gate, over Streamable HTTP and over stdio,
with its own trace context in `params._meta.traceparent`:

- every request is a SERVER span named `{method} {tool}` continuing the caller's trace
  (same trace id, parent = the caller's span), with the MCP conventions' attributes and
  the guard chain's decisions (principal, rate bucket and what is left, replay);
- a refusal (`insufficient_scope`) and a tool's own failure (`isError`) mark the span
  ERROR with `error.type`;
- a call to a REST backend (FastAPI) and to an upstream MCP server (FastMCP over stdio and
  over HTTP) is a CLIENT span under the SERVER span, and the backend receives the CLIENT
  span's context: a `traceparent` header, or `params._meta.traceparent`;
- `/metrics` has `mcp_server_operation_duration_seconds` by method, tool, error type and
  transport, and `tollgate_backend_call_duration_seconds` by backend; the audit rows carry
  the caller's trace id;
- a collector that is not there (a closed port) or never answers (a black hole, with a
  short export deadline and a small queue) costs no call anything: every call succeeds and
  the dropped spans are counted (`tollgate_spans_dropped_total`).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from otlp_receiver import BlackHole, OtlpReceiver, ReceivedSpan

# The FastAPI backend and the helpers of the REST and upstream tests (`fastapi_backend` is
# a fixture).
from test_openapi import SECRET, fastapi_backend, items_config  # noqa: F401
from test_upstream import FASTMCP_UPSTREAM, free_port, http_backend, port_open, stdio_backend, wait_for

pytestmark = pytest.mark.anyio

SERVICE = "tollgate-under-test"
METRICS_ON = "[http]\nmetrics = true\n\n"
SIMPLE_TEXT = "This is a simple text response for testing."
# A span of the gate ends a moment after its answer leaves; the receiver is polled for it.
SPAN_WAIT = 20.0


# ---- the caller's trace ------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """A fresh trace of the test's own: the ids of the caller's span."""

    trace_id: str = field(default_factory=lambda: secrets.token_hex(16))
    span_id: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-01"

    def meta(self, tracestate: str | None = None) -> dict[str, str]:
        meta = {"traceparent": self.traceparent}
        if tracestate is not None:
            meta["tracestate"] = tracestate
        return meta

    def spans(self, receiver: OtlpReceiver, name: str, kind: str, count: int = 1) -> list[ReceivedSpan]:
        """The spans `name` of kind `kind` in this trace, once `count` have arrived."""
        return receiver.wait_for(
            lambda s: s.trace_id == self.trace_id and s.name == name and s.kind == kind, count, SPAN_WAIT
        )

    def one(self, receiver: OtlpReceiver, name: str, kind: str) -> ReceivedSpan:
        [span] = self.spans(receiver, name, kind)
        return span


def otel_env(endpoint: str, **extra: str) -> dict[str, str]:
    """The variables that turn export on towards `endpoint` (batches sent every 50 ms).
    The sampler and the switch are named so that an `OTEL_*` of the runner cannot change
    what the tests see."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": SERVICE,
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_SDK_DISABLED": "false",
        **extra,
    }


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


# ---- the gate and its clients ----------------------------------------------------------


class Wire:
    """What an HTTP client of the gate sent and got: the JSON-RPC id of each request by
    method (and tool), and the MCP session id the gate gave."""

    def __init__(self) -> None:
        self.ids: dict[str, list[Any]] = {}
        self.session_id: str | None = None

    async def on_request(self, request: Any) -> None:
        if request.method != "POST":
            return
        try:
            body = json.loads(request.content)
        except (ValueError, RuntimeError):
            return
        if isinstance(body, dict) and "id" in body:
            name = body.get("params", {}).get("name")
            key = f"{body['method']} {name}" if name else body["method"]
            self.ids.setdefault(key, []).append(body["id"])

    async def on_response(self, response: Any) -> None:
        session = response.headers.get("mcp-session-id")
        if session:
            self.session_id = session

    def only_id(self, key: str) -> str:
        """The JSON-RPC id of the one request `key`, as the span writes it."""
        [rpc_id] = self.ids[key]
        return str(rpc_id)


@asynccontextmanager
async def http_client(url: str, token: str, wire: Wire | None = None) -> AsyncIterator[Client]:
    """A handshake-era client of the gate at `url` with `token`."""
    hooks = {"request": [wire.on_request], "response": [wire.on_response]} if wire else {}
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30), event_hooks=hooks
    ) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", read_timeout_seconds=30) as client:
            yield client


def create_key(run_tollgate, db, config: Path, scopes: str) -> dict[str, Any]:
    """`tollgate key create --json` (the backends' scopes exist under `config`)."""
    done = run_tollgate(
        "--database", str(db.path), "--config", str(config), "key", "create", "--name", "otel", "--scopes", scopes, "--json"
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def audit_rows(run_tollgate, db) -> list[dict[str, Any]]:
    done = run_tollgate("--database", str(db.path), "audit", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(base: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of `GET /metrics`: name, labels, value."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(_LABEL.findall(match.group(2) or ""))
            samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def metric(base: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` with exactly `labels`, or None when there is none."""
    found = [value for n, got, value in metric_samples(base) if n == name and got == labels]
    assert len(found) <= 1, found
    return found[0] if found else None


def operation(method: str, tool: str = "", error_type: str = "", transport: str = "tcp") -> dict[str, str]:
    """The labels of one series of `mcp_server_operation_duration_seconds`."""
    return {"mcp_method_name": method, "gen_ai_tool_name": tool, "error_type": error_type, "network_transport": transport}


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


@pytest.fixture
def fastmcp_http(tmp_path: Path) -> Iterator[str]:
    """`fastmcp_upstream.py` over Streamable HTTP on a free loopback port: its MCP URL."""
    port = free_port()
    log = tmp_path / "fastmcp-http.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(FASTMCP_UPSTREAM), "http", str(port)], stdin=subprocess.DEVNULL, stdout=sink, stderr=sink
        )
    try:
        wait_for(lambda: process.poll() is not None or port_open(port), "the FastMCP server to listen")
        assert process.poll() is None, log.read_text(errors="replace")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def fastmcp_stdio() -> str:
    return stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)])


# ---- SERVER spans ------------------------------------------------------------------------


def assert_continues(span: ReceivedSpan, caller: Caller) -> None:
    assert (span.kind, span.trace_id, span.parent_span_id) == ("SERVER", caller.trace_id, caller.span_id), span


async def test_server_spans_over_http_continue_the_callers_trace(
    receiver, serve_http, tollgate_db, write_config, run_tollgate
) -> None:
    config = METRICS_ON + fastmcp_stdio()
    key = create_key(run_tollgate, tollgate_db, write_config(config), "fm:read")
    server = serve_http(tollgate_db, config=config, env=otel_env(receiver.endpoint))
    port = int(server.base.rsplit(":", 1)[1])
    caller, wire = Caller(), Wire()
    async with http_client(server.url, key["token"], wire) as client:
        listing = await client.list_tools(meta=caller.meta(), cache_mode="bypass")
        assert "fm_greet" in {tool.name for tool in listing.tools}
        greeted = await client.call_tool("fm_greet", {"name": "Ada"}, meta=caller.meta())
        assert greeted.is_error is False and greeted.structured_content == {"greeting": "Hello, Ada!"}
        version = client.protocol_version

    listed = caller.one(receiver, "tools/list", "SERVER")
    assert_continues(listed, caller)
    assert listed.status == "UNSET"
    common = {
        "mcp.protocol.version": version,
        "mcp.session.id": wire.session_id,
        "network.transport": "tcp",
        "server.address": "127.0.0.1",
        "server.port": port,
    }
    assert wire.session_id and re.fullmatch(r"[0-9a-f]{32}", wire.session_id), wire.session_id
    for name, value in {**common, "mcp.method.name": "tools/list", "jsonrpc.request.id": wire.only_id("tools/list")}.items():
        assert listed.attributes.get(name) == value, (name, listed.attributes)
    for absent in ("gen_ai.tool.name", "gen_ai.operation.name", "error.type", "tollgate.principal"):
        assert absent not in listed.attributes, (absent, listed.attributes)
    assert listed.resource["service.name"] == SERVICE

    called = caller.one(receiver, "tools/call fm_greet", "SERVER")
    assert_continues(called, caller)
    assert called.status == "UNSET"
    expected = {
        **common,
        "mcp.method.name": "tools/call",
        "gen_ai.tool.name": "fm_greet",
        "gen_ai.operation.name": "execute_tool",
        "jsonrpc.request.id": wire.only_id("tools/call fm_greet"),
        "tollgate.principal": key["id"],
        "tollgate.backend": "fm",
        # The key's first `read` call of the minute, of 120 (the plan's default).
        "tollgate.rate.bucket": "read",
        "tollgate.rate.remaining": 119,
        "tollgate.idempotent_replay": False,
    }
    for name, value in expected.items():
        assert called.attributes.get(name) == value, (name, called.attributes)
    assert "error.type" not in called.attributes
    assert listed.span_id != called.span_id

    assert metric(server.base, "mcp_server_operation_duration_seconds_count", **operation("tools/call", "fm_greet")) == 1
    assert metric(server.base, "mcp_server_operation_duration_seconds_count", **operation("tools/list")) >= 1
    assert metric(server.base, "tollgate_backend_call_duration_seconds_count", backend="fm") == 1
    rows = [row for row in audit_rows(run_tollgate, tollgate_db) if row["tool"] == "fm_greet"]
    assert [row["trace_id"] for row in rows] == [caller.trace_id]


async def test_server_spans_over_stdio_continue_the_callers_trace(
    receiver, stdio_params, tollgate_db, write_config, run_tollgate
) -> None:
    config = write_config(fastmcp_stdio())
    key = create_key(run_tollgate, tollgate_db, config, "fm:read")
    env = {**otel_env(receiver.endpoint), "TOLLGATE_CONFIG": str(config)}
    caller = Caller()
    async with Client(stdio_params(tollgate_db, token=key["token"], env=env), mode="legacy", read_timeout_seconds=30) as client:
        listing = await client.list_tools(meta=caller.meta(), cache_mode="bypass")
        assert "fm_greet" in {tool.name for tool in listing.tools}
        greeted = await client.call_tool("fm_greet", {"name": "Grace"}, meta=caller.meta())
        assert greeted.structured_content == {"greeting": "Hello, Grace!"}
        version = client.protocol_version

    listed = caller.one(receiver, "tools/list", "SERVER")
    called = caller.one(receiver, "tools/call fm_greet", "SERVER")
    for span, method in ((listed, "tools/list"), (called, "tools/call")):
        assert_continues(span, caller)
        assert span.status == "UNSET"
        assert span.attributes["mcp.method.name"] == method
        assert span.attributes["network.transport"] == "pipe"
        assert span.attributes["mcp.protocol.version"] == version
        assert re.fullmatch(r"\d+", span.attributes["jsonrpc.request.id"]), span.attributes
        for absent in ("server.address", "server.port", "mcp.session.id", "error.type"):
            assert absent not in span.attributes, (absent, span.attributes)
    assert listed.attributes["jsonrpc.request.id"] != called.attributes["jsonrpc.request.id"]
    assert called.attributes["gen_ai.tool.name"] == "fm_greet"
    assert called.attributes["gen_ai.operation.name"] == "execute_tool"
    assert called.attributes["tollgate.principal"] == key["id"]
    assert called.attributes["tollgate.rate.bucket"] == "read"
    assert called.attributes["tollgate.rate.remaining"] == 119
    # The upstream call under it.
    client_span = caller.one(receiver, "tools/call greet", "CLIENT")
    assert client_span.parent_span_id == called.span_id
    rows = [row for row in audit_rows(run_tollgate, tollgate_db) if row["tool"] == "fm_greet"]
    assert [(row["transport"], row["trace_id"]) for row in rows] == [("stdio", caller.trace_id)]


# ---- failures ----------------------------------------------------------------------------


async def test_a_scope_refusal_and_a_tool_error_mark_the_span_failed(
    receiver, serve_http, tollgate_db, write_config, run_tollgate
) -> None:
    config = METRICS_ON + fastmcp_stdio()
    path = write_config(config)
    reader = create_key(run_tollgate, tollgate_db, path, "fm:read")
    writer = create_key(run_tollgate, tollgate_db, path, "fm:read,fm:write")
    server = serve_http(tollgate_db, config=config, env=otel_env(receiver.endpoint))
    refused_trace, failed_trace = Caller(), Caller()
    async with http_client(server.url, reader["token"]) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("fm_refuse", {"reason": "no"}, meta=refused_trace.meta())
    assert raised.value.message == "insufficient_scope"
    async with http_client(server.url, writer["token"]) as client:
        failed = await client.call_tool("fm_refuse", {"reason": "closed books"}, meta=failed_trace.meta())
    assert failed.is_error is True
    assert text_of(failed) == "The business backend fm answered with an error: refused: closed books; the call did not complete."

    refused = refused_trace.one(receiver, "tools/call fm_refuse", "SERVER")
    assert_continues(refused, refused_trace)
    assert (refused.status, refused.status_message) == ("ERROR", "insufficient_scope")
    assert refused.attributes["error.type"] == "insufficient_scope"
    assert refused.attributes["rpc.response.status_code"] == str(raised.value.code)
    assert refused.attributes["tollgate.principal"] == reader["id"]
    assert "tollgate.error.code" not in refused.attributes
    # Refused before the backend: no CLIENT span in its trace.
    assert [s.name for s in receiver.spans() if s.trace_id == refused_trace.trace_id] == ["tools/call fm_refuse"]

    tool_failed = failed_trace.one(receiver, "tools/call fm_refuse", "SERVER")
    assert_continues(tool_failed, failed_trace)
    assert tool_failed.status == "ERROR"
    assert tool_failed.attributes["error.type"] == "tool_error"
    assert tool_failed.attributes["tollgate.error.code"] == "adapter_error"
    assert tool_failed.attributes["tollgate.principal"] == writer["id"]
    assert "rpc.response.status_code" not in tool_failed.attributes
    upstream = failed_trace.one(receiver, "tools/call refuse", "CLIENT")
    assert upstream.parent_span_id == tool_failed.span_id
    assert (upstream.status, upstream.attributes["error.type"]) == ("ERROR", "adapter_error")

    count = "mcp_server_operation_duration_seconds_count"
    assert metric(server.base, count, **operation("tools/call", "fm_refuse", "insufficient_scope")) == 1
    assert metric(server.base, count, **operation("tools/call", "fm_refuse", "tool_error")) == 1
    assert metric(server.base, count, **operation("tools/call", "fm_refuse")) is None
    rows = {row["outcome"]: row["trace_id"] for row in audit_rows(run_tollgate, tollgate_db) if row["tool"] == "fm_refuse"}
    assert rows == {"insufficient_scope": refused_trace.trace_id, "adapter_error": failed_trace.trace_id}


# ---- CLIENT spans and the context that reaches the backends -----------------------------


async def test_a_rest_backend_call_is_a_client_span_whose_context_reaches_the_backend(
    receiver, fastapi_backend, serve_http, tollgate_db, write_config, run_tollgate, tmp_path: Path
) -> None:
    base, document = fastapi_backend
    backend_port = int(base.rsplit(":", 1)[1])
    key_file = tmp_path / "shop.key"
    key_file.write_text(SECRET + "\n")
    key_file.chmod(0o600)
    config = METRICS_ON + items_config(base, document, key_file)
    key = create_key(run_tollgate, tollgate_db, write_config(config), "shop:read,shop:write")
    server = serve_http(tollgate_db, config=config, env=otel_env(receiver.endpoint))
    caller = Caller()
    async with http_client(server.url, key["token"]) as client:
        made = await client.call_tool("shop_create_item", {"name": "lamp", "price": 12}, meta=caller.meta("tg=1,other=x"))
        assert made.structured_content == {"id": 1, "name": "lamp", "price": 12}
        read = await client.call_tool("shop_get_item", {"item_id": 1}, meta=caller.meta())
        assert read.structured_content == {"id": 1, "name": "lamp", "price": 12}

    with urllib.request.urlopen(f"{base}/received", timeout=5) as answer:
        traces = {(t["method"], t["path"]): t for t in json.loads(answer.read())["traces"]}
    for tool, method, template, path, tracestate in (
        ("shop_create_item", "POST", "/items", "/items", "tg=1,other=x"),
        ("shop_get_item", "GET", "/items/{item_id}", "/items/1", None),
    ):
        parent = caller.one(receiver, f"tools/call {tool}", "SERVER")
        assert_continues(parent, caller)
        span = caller.one(receiver, f"{method} {template}", "CLIENT")
        assert (span.trace_id, span.parent_span_id, span.status) == (caller.trace_id, parent.span_id, "UNSET"), span
        assert span.attributes == {
            "http.request.method": method,
            "url.template": template,
            "server.address": "127.0.0.1",
            "server.port": backend_port,
            "tollgate.backend": "shop",
        }
        got = traces[(method, path)]
        assert got["traceparent"] == f"00-{caller.trace_id}-{span.span_id}-01", (got, span)
        # The caller's tracestate goes on as it came; none is sent when it sent none.
        assert got["tracestate"] == tracestate, got

    assert metric(server.base, "tollgate_backend_call_duration_seconds_count", backend="shop") == 2
    for tool in ("shop_create_item", "shop_get_item"):
        assert metric(server.base, "mcp_server_operation_duration_seconds_count", **operation("tools/call", tool)) == 1
    rows = [row for row in audit_rows(run_tollgate, tollgate_db) if row["backend"] == "shop"]
    assert sorted(row["tool"] for row in rows) == ["shop_create_item", "shop_get_item"]
    assert {row["trace_id"] for row in rows} == {caller.trace_id}


@pytest.mark.parametrize("upstream", ["stdio", "http"])
async def test_an_upstream_call_is_a_client_span_whose_context_reaches_the_upstream(
    upstream, request, receiver, serve_http, tollgate_db, write_config, run_tollgate
) -> None:
    backend = fastmcp_stdio() if upstream == "stdio" else http_backend("fm", request.getfixturevalue("fastmcp_http"))
    config = METRICS_ON + backend
    key = create_key(run_tollgate, tollgate_db, write_config(config), "fm:read")
    server = serve_http(tollgate_db, config=config, env=otel_env(receiver.endpoint))
    first, second = Caller(), Caller()
    async with http_client(server.url, key["token"]) as client:
        with_state = await client.call_tool("fm_trace_meta", {}, meta=first.meta("tg=7"))
        without_state = await client.call_tool("fm_trace_meta", {}, meta=second.meta())
    for caller, result, tracestate in ((first, with_state, "tg=7"), (second, without_state, None)):
        assert result.is_error is False, result
        parent = caller.one(receiver, "tools/call fm_trace_meta", "SERVER")
        assert_continues(parent, caller)
        span = caller.one(receiver, "tools/call trace_meta", "CLIENT")
        assert (span.trace_id, span.parent_span_id, span.status) == (caller.trace_id, parent.span_id, "UNSET"), span
        assert span.attributes == {
            "mcp.method.name": "tools/call",
            "gen_ai.tool.name": "trace_meta",
            "gen_ai.operation.name": "execute_tool",
            "tollgate.backend": "fm",
        }
        assert result.structured_content == {
            "traceparent": f"00-{caller.trace_id}-{span.span_id}-01",
            "tracestate": tracestate,
        }
    assert metric(server.base, "tollgate_backend_call_duration_seconds_count", backend="fm") == 2
    assert metric(server.base, "mcp_server_operation_duration_seconds_count", **operation("tools/call", "fm_trace_meta")) == 2


# ---- a collector that is not there, or never answers -----------------------------------

CALLS = 40


@pytest.mark.parametrize("collector", ["closed-port", "black-hole"])
async def test_an_absent_or_silent_collector_costs_no_call_and_drops_are_counted(
    collector, serve_http, tollgate_db
) -> None:
    with BlackHole() if collector == "black-hole" else nullcontext() as hole:
        if hole is None:
            env = otel_env(f"http://127.0.0.1:{free_port()}")
        else:
            env = otel_env(hole.endpoint, OTEL_EXPORTER_OTLP_TIMEOUT="200", OTEL_BSP_MAX_QUEUE_SIZE="16")
        server = serve_http(tollgate_db, "--conformance-pack", config=METRICS_ON, env=env)
        async with http_client(server.url, tollgate_db.admin_key) as client:
            for _ in range(CALLS):
                result = await client.call_tool("test_simple_text", {})
                assert result.is_error is False
                assert text_of(result) == SIMPLE_TEXT

        # No span can ever be taken: each is dropped, by the queue's bound or with its
        # failed export, and counted. At least the calls' own spans are.
        def counts() -> tuple[float, float, float] | None:
            found = tuple(
                metric(server.base, name)
                for name in ("tollgate_spans_dropped_total", "tollgate_span_export_failures_total", "tollgate_spans_exported_total")
            )
            assert None not in found, f"the span counts are not all on /metrics: {found}"
            dropped, failed, _ = found
            return found if dropped >= CALLS and failed >= 1 else None

        _, _, exported = wait_for(counts, "the dropped spans to be counted")
        assert exported == 0
        if hole is not None:
            assert hole.accepted >= 1, "the exporter never reached the black hole"
    assert metric(server.base, "mcp_server_operation_duration_seconds_count", **operation("tools/call", "test_simple_text")) == CALLS
