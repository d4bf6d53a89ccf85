"""OpenAPI backends nobody here wrote, behind `tollgate serve`, driven by the official Python
SDK (`mcp` Client over Streamable HTTP):

- Stoplight Prism (`prism mock`) serving the Swagger Petstore 3 document
  (`fixtures/petstore.yaml`): the prefixed tools are listed with their categories and
  annotations, and called; without the backend credential Prism refuses with 401, which
  comes back as `adapter_error` (the backend refused tollgate's own credential).
- A stateful FastAPI backend of the tests' own (`fastapi_backend.py`), whose own
  `/openapi.json` tollgate reads: every row of the failure mapping (404, 409, 422 with its
  own error body and in FastAPI's shape, 400, 401, 429 with `Retry-After`, 500, 503, a
  slow answer past `timeout_ms`, a dropped connection) asserted exactly — `isError`,
  `code`, `error_code`, `retryable`, `details.original_error` — and the idempotency key
  forwarded, a replay answered from tollgate's ledger without reaching the backend, the
  backend credential received by the backend and absent from every response and log.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
PETSTORE = HERE / "fixtures" / "petstore.yaml"
META_ERROR = "dev.tollgate/error"
SECRET = "fastapi-backend-secret-5d1e"
PRISM_KEY = "prism-backend-key-77aa"


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(url: str, headers: dict[str, str], process: subprocess.Popen, timeout: float = 60) -> None:
    """Polls `url` until it answers 200 (the process must stay alive)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            pytest.fail(f"{process.args} exited with {process.returncode}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{url} did not answer")
        time.sleep(0.1)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture
def prism(prism_bin: Path) -> Iterator[str]:
    """`prism mock fixtures/petstore.yaml` on a free loopback port; its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [str(prism_bin), "mock", str(PETSTORE), "-p", str(port), "-h", "127.0.0.1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(f"{base}/store/inventory", {"api_key": "probe"}, process)
        yield base
    finally:
        stop(process)


@pytest.fixture
def fastapi_backend(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The FastAPI backend on a free port: its base URL and its document, fetched."""
    key_file = tmp_path / "items.key"
    key_file.write_text(SECRET + "\n")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "fastapi_backend:app", "--host", "127.0.0.1", "--port", str(port)],
        cwd=HERE,
        env={"FASTAPI_BACKEND_KEY_FILE": str(key_file), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(f"{base}/openapi.json", {}, process)
        document = tmp_path / "items.json"
        with urllib.request.urlopen(f"{base}/openapi.json", timeout=5) as answer:
            document.write_bytes(answer.read())
        yield base, document
    finally:
        stop(process)


@asynccontextmanager
async def client_of(url: str, token: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy", read_timeout_seconds=30) as client:
            yield client


def meta(result: Any) -> dict[str, Any]:
    raw = result.meta
    if raw is None:
        return {}
    return raw if isinstance(raw, dict) else raw.model_dump(by_alias=True)


def envelope_of(result: Any, code: str, error_code: int, retryable: bool, original_error: str | None) -> dict:
    """The catalog envelope of an `isError` result, its fields asserted."""
    assert result.is_error is True, result
    envelope = meta(result)[META_ERROR]
    assert result.content[0].text == envelope["hint"]
    assert (envelope["code"], envelope["error_code"], envelope["retryable"]) == (code, error_code, retryable), envelope
    assert envelope["details"].get("original_error") == original_error, envelope
    return envelope


def petstore_config(base: str, key_file: Path | None) -> str:
    auth = f'auth = {{ header = "api_key", value_file = "{key_file}" }}\n' if key_file else ""
    return f"""
[[backends]]
name = "pets"
kind = "openapi"
spec = "{PETSTORE}"
base_url = "{base}"
timeout_ms = 10000
{auth}"""


async def test_prism_petstore_tools_are_listed_and_called(prism: str, tollgate_db, serve_http, tmp_path: Path) -> None:
    key_file = tmp_path / "pets.key"
    key_file.write_text(PRISM_KEY + "\n")
    server = serve_http(tollgate_db, config=petstore_config(prism, key_file))
    async with client_of(server.url, tollgate_db.admin_key) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {
            "pets_update_pet",
            "pets_add_pet",
            "pets_find_pets_by_status",
            "pets_get_pet_by_id",
            "pets_delete_pet",
            "pets_get_inventory",
            "pets_place_order",
        } <= set(tools)
        read, destroy, write = tools["pets_get_pet_by_id"], tools["pets_delete_pet"], tools["pets_add_pet"]
        assert read.annotations.read_only_hint is True
        assert destroy.annotations.destructive_hint is True
        assert write.annotations.read_only_hint is False and write.annotations.destructive_hint is False
        assert read.output_schema["type"] == "object"
        assert "idempotency_key" in write.input_schema["properties"]
        assert "api_key" not in read.input_schema["properties"], "the credential header is no argument"
        assert read.description.startswith("Find pet by ID.")

        pet = await client.call_tool("pets_get_pet_by_id", {"petId": 10})
        assert pet.is_error is False, pet
        assert pet.structured_content["name"] == "doggie"
        found = await client.call_tool("pets_find_pets_by_status", {"status": "sold"})
        assert found.is_error is False and found.structured_content is None
        assert json.loads(found.content[0].text)[0]["name"] == "doggie"
        added = await client.call_tool(
            "pets_add_pet", {"name": "Rex", "photoUrls": [], "status": "available", "idempotency_key": "add-rex-1"}
        )
        assert added.is_error is False and added.structured_content["id"] == 10
        inventory = await client.call_tool("pets_get_inventory", {})
        assert inventory.structured_content == {"available": 7, "pending": 2, "sold": 11}
        deleted = await client.call_tool("pets_delete_pet", {"petId": 10, "idempotency_key": "del-10"})
        assert deleted.is_error is False
        assert deleted.content[0].text == "200 OK"
    assert PRISM_KEY not in server.log_text()


async def test_prism_refusing_the_missing_credential_is_adapter_error(prism: str, tollgate_db, serve_http) -> None:
    server = serve_http(tollgate_db, config=petstore_config(prism, None))
    async with client_of(server.url, tollgate_db.admin_key) as client:
        refused = await client.call_tool("pets_get_pet_by_id", {"petId": 10})
    envelope = envelope_of(refused, "adapter_error", 4001, False, "https://stoplight.io/prism/errors#UNAUTHORIZED")
    assert envelope["details"]["status"] == 401
    assert envelope["details"]["backend"] == "pets"


def items_config(base: str, document: Path, key_file: Path) -> str:
    return f"""
[[backends]]
name = "shop"
kind = "openapi"
spec = "{document}"
base_url = "{base}"
timeout_ms = 500
auth = {{ header = "X-Api-Key", value_file = "{key_file}" }}
"""


async def test_every_fastapi_answer_maps_to_its_catalog_entry(
    fastapi_backend: tuple[str, Path], tollgate_db, serve_http, tmp_path: Path
) -> None:
    base, document = fastapi_backend
    key_file = tmp_path / "shop.key"
    key_file.write_text(SECRET + "\n")
    server = serve_http(tollgate_db, config=items_config(base, document, key_file))
    seen: list[Any] = []
    async with client_of(server.url, tollgate_db.admin_key) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"shop_create_item", "shop_get_item", "shop_limited", "shop_slow", "shop_drop"} <= set(tools)
        assert "x-api-key" not in tools["shop_create_item"].input_schema["properties"]

        async def call(name: str, args: dict[str, Any]) -> Any:
            result = await client.call_tool(name, args)
            seen.append(result.model_dump(by_alias=True))
            return result

        made = await call("shop_create_item", {"name": "lamp", "price": 12, "idempotency_key": "lamp-1"})
        assert made.is_error is False and made.structured_content == {"id": 1, "name": "lamp", "price": 12}
        # (tool, arguments, code, error_code, retryable, original_error)
        rows = [
            ("shop_get_item", {"item_id": 42}, "not_found", 3101, False, "item_missing"),
            ("shop_create_item", {"name": "lamp", "price": 3}, "conflict", 3102, False, "item_exists"),
            ("shop_create_item", {"name": "rug", "price": -1}, "business_rule_violation", 3103, False, "price_negative"),
            ("shop_create_item", {"name": "admin", "price": 1}, "business_rule_violation", 3103, False, "value_error"),
            ("shop_get_item", {"item_id": 0}, "business_rule_violation", 3103, False, None),
            ("shop_limited", {}, "rate_limited", 3001, True, "too_many"),
            ("shop_broken", {}, "adapter_error", 4001, False, "db_down"),
            ("shop_busy", {}, "adapter_error", 4001, True, "maintenance"),
            ("shop_slow", {}, "timeout", 3002, True, None),
            ("shop_drop", {}, "backend_unavailable", 4002, True, None),
        ]
        envelopes = {}
        for tool, args, code, error_code, retryable, original in rows:
            result = await call(tool, args)
            envelopes[(tool, json.dumps(args))] = envelope_of(result, code, error_code, retryable, original)
            assert envelopes[(tool, json.dumps(args))]["details"]["backend"] == "shop"

        def env(tool: str, args: dict[str, Any]) -> dict:
            return envelopes[(tool, json.dumps(args))]

        assert env("shop_create_item", {"name": "rug", "price": -1})["details"]["message"] == "a price cannot be negative"
        assert (
            env("shop_create_item", {"name": "admin", "price": 1})["details"]["message"]
            == "Value error, the name admin is reserved"
        )
        assert env("shop_get_item", {"item_id": 0})["details"]["message"] == "item ids start at 1"
        assert env("shop_limited", {})["retry_after"] == 30
        assert env("shop_slow", {})["details"]["timeout_ms"] == 500
        assert env("shop_drop", {})["details"]["reason"] == "connection closed before the response"
        assert env("shop_get_item", {"item_id": 42})["details"]["status"] == 404

        replay = await call("shop_create_item", {"name": "lamp", "price": 12, "idempotency_key": "lamp-1"})
        assert replay.is_error is False and replay.structured_content == made.structured_content

    with urllib.request.urlopen(f"{base}/received", timeout=5) as answer:
        received = json.loads(answer.read())["received"]
    keyed = [r for r in received if r["idempotency_key"] == "lamp-1"]
    assert len(keyed) == 1, "the replay is answered by tollgate's ledger, not by the backend"
    assert all(r["x_api_key"] == SECRET for r in received)
    assert SECRET not in json.dumps(seen)
    assert SECRET not in server.log_text()


async def test_a_credential_the_fastapi_backend_refuses_is_adapter_error(
    fastapi_backend: tuple[str, Path], tollgate_db, serve_http, tmp_path: Path
) -> None:
    base, document = fastapi_backend
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-the-key\n")
    server = serve_http(tollgate_db, config=items_config(base, document, wrong))
    async with client_of(server.url, tollgate_db.admin_key) as client:
        refused = await client.call_tool("shop_create_item", {"name": "desk", "price": 5})
    envelope = envelope_of(refused, "adapter_error", 4001, False, "bad_key")
    assert envelope["details"]["status"] == 401
    assert "not-the-key" not in json.dumps(refused.model_dump(by_alias=True))


async def events_of(base: str) -> list[str]:
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(5)) as http:
        return (await http.get(f"{base}/received")).json()["events"]


async def wait_for_event(base: str, event: str) -> None:
    """Polls the backend's record until `event` is in it (at most 20 seconds)."""
    with anyio.fail_after(20):
        while event not in await events_of(base):
            await anyio.sleep(0.05)


async def test_a_cancelled_call_stops_the_request_to_the_fastapi_backend(
    fastapi_backend: tuple[str, Path], tollgate_db, serve_http, tmp_path: Path
) -> None:
    base, document = fastapi_backend
    key_file = tmp_path / "shop.key"
    key_file.write_text(SECRET + "\n")
    config = items_config(base, document, key_file).replace("timeout_ms = 500", "timeout_ms = 60000")
    server = serve_http(tollgate_db, config=config)
    async with client_of(server.url, tollgate_db.admin_key) as client:
        scope = anyio.CancelScope()

        async def call_slow() -> None:
            with scope:
                await client.call_tool("shop_slow", {})

        async with anyio.create_task_group() as group:
            group.start_soon(call_slow)
            await wait_for_event(base, "slow started")
            scope.cancel()
        await wait_for_event(base, "slow disconnected")
        # The session goes on: the next call is answered.
        made = await client.call_tool("shop_create_item", {"name": "chair", "price": 4})
        assert made.is_error is False, made
    assert "slow answered" not in await events_of(base)
