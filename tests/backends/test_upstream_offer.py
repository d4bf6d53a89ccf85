"""An upstream MCP server's resources and prompts behind the gate, driven through the
official Python SDK client (`mcp` 2.3.0, handshake era) over the gate's stdio and
Streamable HTTP:

- `@modelcontextprotocol/server-everything` (npm, over stdio, as `ev`): its resources
  listed under `upstream://ev/…` and read (a listed one, one its template makes, one a
  tool's result links to), its prompts listed as `ev_<name>`, fetched and completed, each
  read an audit row; a subscription to
  one of its resources whose update reaches the subscribed session;
- a FastMCP server (PyPI, `fastmcp_upstream.py`, as `fm`): its resource, template and
  prompt; a resource added at run time announced with `notifications/resources/list_changed`
  and relayed; a key without `fm:read` is refused `insufficient_scope` (and charged), and
  does not see the backend's resources or prompts listed;
- `expose` turning the resources and prompts of a backend off.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PromptReference

from test_upstream import FASTMCP_UPSTREAM, stdio_backend

pytestmark = pytest.mark.anyio

WAIT = 30.0


class Seen:
    """The notifications a client received."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(message)

    def methods(self) -> list[str]:
        found = []
        for message in self.messages:
            root = getattr(message, "root", message)
            method = getattr(root, "method", None)
            if method is not None:
                found.append(method)
        return found

    def updated_uris(self) -> list[str]:
        uris = []
        for message in self.messages:
            root = getattr(message, "root", message)
            if getattr(root, "method", None) == "notifications/resources/updated":
                uris.append(str(root.params.uri))
        return uris


@asynccontextmanager
async def gate_client(transport, token: str, seen: Seen | None = None) -> AsyncIterator[Client]:
    """A handshake-era client of the gate over `transport` (`("http", server)` or
    `("stdio", params)`) with `token`."""
    kind, target = transport
    handler = seen if seen is not None else None
    if kind == "http":
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60)) as http:
            async with Client(
                streamable_http_client(target.url, http_client=http),
                mode="legacy",
                read_timeout_seconds=60,
                message_handler=handler,
            ) as client:
                yield client
    else:
        async with Client(target, mode="legacy", read_timeout_seconds=60, message_handler=handler) as client:
            yield client


def audit_rows(run_tollgate, db) -> list[dict[str, Any]]:
    done = run_tollgate("--database", str(db.path), "audit", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def create_key(run_tollgate, db, config, scopes: str) -> dict[str, Any]:
    done = run_tollgate(
        "--database", str(db.path), "--config", str(config), "key", "create", "--name", "offer", "--scopes", scopes, "--json"
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def gate(kind: str, request_fixtures, config_text: str, token: str | None = None):
    """The gate over `kind` with `config_text`: `("http", server)`, or `("stdio", params)`
    presenting `token` (the admin key by default; over HTTP the client presents it)."""
    db, write_config, serve_http, stdio_params = request_fixtures
    if kind == "http":
        return ("http", serve_http(db, config=config_text))
    config = write_config(config_text)
    return ("stdio", stdio_params(db, token=token or db.admin_key, env={"TOLLGATE_CONFIG": str(config)}))


@pytest.fixture
def fixtures(tollgate_db, write_config, serve_http, stdio_params):
    return (tollgate_db, write_config, serve_http, stdio_params)


def text_of_contents(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.contents)


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_everything_resources_and_prompts_are_listed_read_and_audited(kind, fixtures, everything_js, run_tollgate) -> None:
    db = fixtures[0]
    transport = gate(kind, fixtures, stdio_backend("ev", "node", [str(everything_js), "stdio"]))
    async with gate_client(transport, db.admin_key) as client:
        listed = await client.list_resources()
        uris = [str(r.uri) for r in listed.resources]
        ours = [u for u in uris if u.startswith("tollgate://")]
        theirs = [u for u in uris if u.startswith("upstream://ev/")]
        assert ours, uris
        assert theirs, uris
        assert all(u.startswith(("tollgate://", "upstream://ev/demo://")) for u in uris), uris
        first = theirs[0]
        read = await client.read_resource(first)
        assert str(read.contents[0].uri) == first
        assert text_of_contents(read) or read.contents[0].blob

        templates = await client.list_resource_templates()
        shapes = [t.uri_template for t in templates.resource_templates]
        assert "upstream://ev/demo://resource/dynamic/text/{resourceId}" in shapes, shapes
        made = await client.read_resource("upstream://ev/demo://resource/dynamic/text/7")
        assert str(made.contents[0].uri) == "upstream://ev/demo://resource/dynamic/text/7"
        assert "7" in text_of_contents(made)

        # A URI the upstream neither lists nor templates is not asked for.
        with pytest.raises(MCPError) as unknown:
            await client.read_resource("upstream://ev/file:///etc/passwd")
        assert unknown.value.error.data["code"] == "resource_not_found"
        assert unknown.value.error.data["details"]["uri"] == "upstream://ev/file:///etc/passwd"

        prompts = await client.list_prompts()
        names = [p.name for p in prompts.prompts]
        assert "ev_simple_prompt" in names and "ev_args_prompt" in names, names
        got = await client.get_prompt("ev_args_prompt", {"city": "Lisbon"})
        assert "Lisbon" in got.messages[0].content.text
        # A tool's result links to the upstream's resources by the gate's URIs, which read.
        linked = await client.call_tool("ev_get_resource_links", {"count": 2})
        links = [c.uri for c in linked.content if c.type == "resource_link"]
        assert links and all(str(u).startswith("upstream://ev/demo://") for u in links), linked
        followed = await client.read_resource(str(links[0]))
        assert str(followed.contents[0].uri) == str(links[0])
        completed = await client.complete(
            PromptReference(type="ref/prompt", name="ev_completable_prompt"), {"name": "department", "value": "S"}
        )
        assert completed.completion.values == ["Sales", "Support"], completed
    rows = audit_rows(run_tollgate, db)
    tools = [row["tool"] for row in rows]
    assert f"resources/read {first}" in tools, tools
    assert "resources/read upstream://ev/demo://resource/dynamic/text/7" in tools, tools
    assert "prompts/get ev_args_prompt" in tools, tools
    assert "completion/complete ev_completable_prompt.department" in tools, tools


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_an_everything_resource_update_reaches_the_subscribed_session(kind, fixtures, everything_js) -> None:
    db = fixtures[0]
    transport = gate(kind, fixtures, stdio_backend("ev", "node", [str(everything_js), "stdio"]))
    seen = Seen()
    async with gate_client(transport, db.admin_key, seen) as client:
        capabilities = client.server_capabilities
        assert capabilities.resources.subscribe is True
        listed = await client.list_resources()
        uri = next(str(r.uri) for r in listed.resources if str(r.uri).startswith("upstream://ev/"))
        with pytest.raises(MCPError) as unknown:
            await client.subscribe_resource("upstream://ev/file:///etc/passwd")
        assert unknown.value.error.data["code"] == "resource_not_found"
        assert unknown.value.error.data["details"]["uri"] == "upstream://ev/file:///etc/passwd"
        await client.subscribe_resource(uri)
        # server-everything sends an update of each subscribed resource when its
        # simulated updates are switched on.
        await client.call_tool("ev_toggle_subscriber_updates", {})
        with anyio.fail_after(WAIT):
            while uri not in seen.updated_uris():
                await client.send_ping()
                await anyio.sleep(0.1)
        await client.unsubscribe_resource(uri)


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_fastmcp_resources_prompts_and_a_list_change_through_the_gate(kind, fixtures, run_tollgate) -> None:
    db = fixtures[0]
    transport = gate(kind, fixtures, stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)]))
    seen = Seen()
    async with gate_client(transport, db.admin_key, seen) as client:
        assert client.server_capabilities.resources.list_changed is True
        assert client.server_capabilities.prompts.list_changed is True
        read = await client.read_resource("upstream://fm/notes://shelf/readme")
        assert text_of_contents(read) == "Aisle 1: bolts. Aisle 2: nuts."
        aisle = await client.read_resource("upstream://fm/notes://shelf/aisle/4")
        assert text_of_contents(aisle) == "Notes of aisle 4."
        got = await client.get_prompt("fm_restock_plan", {"sku": "B-7"})
        assert "restock of B-7" in got.messages[0].content.text
        # A required argument left out: the upstream's own refusal, from the catalog.
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("fm_restock_plan", {})
        assert missing.value.error.data["code"] == "adapter_error"
        assert missing.value.error.data["details"]["backend"] == "fm"

        await client.call_tool("fm_add_note", {"name": "late"})
        with anyio.fail_after(WAIT):
            while True:
                listed = await client.list_resources()
                if "upstream://fm/notes://shelf/late" in [str(r.uri) for r in listed.resources]:
                    break
                await anyio.sleep(0.1)
        with anyio.fail_after(WAIT):
            while "notifications/resources/list_changed" not in seen.methods():
                await client.send_ping()
                await anyio.sleep(0.1)
        late = await client.read_resource("upstream://fm/notes://shelf/late")
        assert text_of_contents(late) == "the late note"
    tools = [row["tool"] for row in audit_rows(run_tollgate, db)]
    assert "prompts/get fm_restock_plan" in tools, tools
    assert "resources/read upstream://fm/notes://shelf/aisle/4" in tools, tools


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_a_key_without_the_read_scope_is_refused_charged_and_shown_nothing(kind, fixtures, run_tollgate) -> None:
    db, write_config = fixtures[0], fixtures[1]
    config_text = stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)])
    config = write_config(config_text, "keys.toml")
    key = create_key(run_tollgate, db, config, "fm:write")
    transport = gate(kind, fixtures, config_text, key["token"])
    async with gate_client(transport, key["token"]) as client:
        listed = await client.list_resources()
        assert not [r for r in listed.resources if str(r.uri).startswith("upstream://")], listed
        prompts = await client.list_prompts()
        assert not [p for p in prompts.prompts if p.name.startswith("fm_")], prompts
        with pytest.raises(MCPError) as refused:
            await client.read_resource("upstream://fm/notes://shelf/readme")
        data = refused.value.error.data
        assert data["code"] == "insufficient_scope", data
        assert data["required_scope"] == "fm:read", data
        with pytest.raises(MCPError) as refused_prompt:
            await client.get_prompt("fm_restock_plan", {"sku": "B-7"})
        assert refused_prompt.value.error.data["code"] == "insufficient_scope"
    # Both refusals were charged to the key's read bucket first.
    usage = run_tollgate("--database", str(db.path), "usage", "--json")
    assert usage.returncode == 0, usage.stderr
    counters = json.loads(usage.stdout)["counters"]
    charged = [c for c in counters if c["key"] == key["id"] and "read" in c["bucket"]]
    assert charged and all(c["count"] == 2 for c in charged), counters
    rows = [r for r in audit_rows(run_tollgate, db) if r["tool"].startswith(("resources/read upstream://fm/", "prompts/get fm_"))]
    assert len(rows) == 2, rows
    assert all(r["outcome"] != "ok" for r in rows), rows


async def test_expose_turns_a_backends_resources_and_prompts_off(fixtures) -> None:
    db = fixtures[0]
    config = stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)]).replace('kind = "mcp"', 'kind = "mcp"\nexpose = ["tools"]')
    transport = gate("http", fixtures, config)
    async with gate_client(transport, db.admin_key) as client:
        listed = await client.list_resources()
        assert not [r for r in listed.resources if str(r.uri).startswith("upstream://")]
        prompts = await client.list_prompts()
        assert not [p for p in prompts.prompts if p.name.startswith("fm_")]
        tools = await client.list_tools()
        assert "fm_greet" in [t.name for t in tools.tools]
        with pytest.raises(MCPError) as refused:
            await client.read_resource("upstream://fm/notes://shelf/readme")
        assert refused.value.error.data["code"] == "resource_not_found"


async def test_a_list_change_reaches_only_the_sessions_that_may_read_the_backend(fixtures, run_tollgate) -> None:
    db, write_config = fixtures[0], fixtures[1]
    config_text = stdio_backend("fm", sys.executable, [str(FASTMCP_UPSTREAM)])
    key = create_key(run_tollgate, db, write_config(config_text, "keys.toml"), "fm:write")
    transport = gate("http", fixtures, config_text)
    reader_seen, writer_seen = Seen(), Seen()
    async with gate_client(transport, db.admin_key, reader_seen) as reader:
        async with gate_client(transport, key["token"], writer_seen) as writer:
            # Both sessions have answered once, so both were told of the lists as they are.
            await reader.send_ping()
            await writer.send_ping()
            await writer.call_tool("fm_add_note", {"name": "late"})
            with anyio.fail_after(WAIT):
                while "notifications/resources/list_changed" not in reader_seen.methods():
                    await reader.send_ping()
                    await anyio.sleep(0.1)
            # The change was counted before the reader was told: the writer's next answer
            # is where it would be told, and is not.
            await writer.send_ping()
            await writer.send_ping()
            assert "notifications/resources/list_changed" not in writer_seen.methods(), writer_seen.methods()
