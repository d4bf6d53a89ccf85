"""An end-to-end invoicing conversation through the official Python MCP client
(`mcp==2.3.0`, `mode="legacy"`) against `tollgate stdio` (issue 6):

create a client, draft an invoice, issue it, try to modify it (`invoice_cannot_be_modified`),
try to delete it (`mcp_guardrail_violation`, whose `guardrail_uri` the client then reads as a
resource), void it; record a payment on another issued invoice with an idempotency key,
repeat it (replayed, marked in `_meta`, one payment row in the database), repeat it with
another amount (`idempotency_key_reused`).

Self-contained: the binary comes from `TOLLGATE_BIN` (else `TG_BIN`, else
`target/debug/tollgate` under the repository root); the database is made in a temporary
directory with `tollgate init --json`. Run: `pytest tests/interop/test_invoicing_e2e.py`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
META_ERROR = "dev.tollgate/error"
META_REPLAY = "dev.tollgate/idempotentReplay"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def tollgate_bin() -> Path:
    configured = os.environ.get("TOLLGATE_BIN") or os.environ.get("TG_BIN") or "target/debug/tollgate"
    path = Path(configured)
    path = path if path.is_absolute() else REPO_ROOT / path
    if not path.is_file():
        pytest.fail(f"{path} does not exist: run `cargo build` first (or set TOLLGATE_BIN)")
    return path


def server_env() -> dict[str, str]:
    """This process's environment without TOLLGATE_* (tollgate refuses unknown ones)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")} | {"RUST_LOG": "warn"}


@pytest.fixture
def database(tmp_path: Path) -> tuple[Path, str]:
    """A fresh database and its admin key, from `tollgate init --json`."""
    path = tmp_path / "e2e.db"
    done = subprocess.run(
        [str(tollgate_bin()), "--database", str(path), "init", "--json", "--company", "E2E Facturas SL"],
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return path, json.loads(done.stdout)["admin_key"]


def params(db: Path, key: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=str(tollgate_bin()),
        args=["--database", str(db), "stdio"],
        env={"TOLLGATE_TOKEN": key, "RUST_LOG": "warn"},
        cwd=str(db.parent),
    )


def meta(result: Any) -> dict[str, Any]:
    """A result's `_meta` as a plain dict."""
    raw = result.meta
    if raw is None:
        return {}
    return raw if isinstance(raw, dict) else raw.model_dump(by_alias=True)


def tool_error(result: Any) -> dict[str, Any]:
    """The catalog envelope of an `isError` result."""
    assert result.is_error, result
    envelope = meta(result)[META_ERROR]
    assert result.content[0].text == envelope["hint"]
    return envelope


async def ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, (name, result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def payments_in_db(db: Path, invoice_id: str) -> int:
    with sqlite3.connect(db) as conn:
        (count,) = conn.execute("SELECT count(*) FROM payments WHERE invoice_id = ?", (invoice_id,)).fetchone()
    return count


async def test_invoicing_conversation(database: tuple[Path, str]) -> None:
    db, key = database
    async with Client(params(db, key), mode="legacy") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"create_client", "create_invoice", "issue_invoice", "void_invoice", "record_payment"} <= tools

        # Create a client and draft an invoice: 3 h at 60.00 EUR, 21 % VAT.
        acme = await ok(client, "create_client", {
            "name": "Talleres Ebro SL", "tax_id": "B-12345674", "email": "facturas@ebro.example",
        })
        assert acme["tax_id"] == "B12345674" and acme["tax_id_kind"] == "cif"
        lines = [{"description": "Consulting hours", "quantity": 3, "unit_price_cents": 6000, "vat_rate": 21}]
        draft = await ok(client, "create_invoice", {"client_id": acme["id"], "lines": lines})
        assert (draft["status"], draft["subtotal_cents"], draft["vat_cents"], draft["total_cents"]) == ("draft", 18000, 3780, 21780)

        # Issue it: it gets the first number of series F.
        issued = await ok(client, "issue_invoice", {
            "invoice_id": draft["id"], "issue_date": "2025-05-02", "idempotency_key": str(uuid.uuid4()),
        })
        assert (issued["status"], issued["number"]) == ("issued", "F-000001")

        # An issued invoice cannot be modified: an isError result the model can read.
        refused = await client.call_tool("update_invoice", {"invoice_id": draft["id"], "notes": "changed"})
        envelope = tool_error(refused)
        assert (envelope["code"], envelope["http_status"], envelope["error_code"]) == ("invoice_cannot_be_modified", 422, 3103)
        assert envelope["param"] == "status" and envelope["retryable"] is False

        # Nor deleted: a fiscal guardrail, a JSON-RPC error whose guide is a resource.
        with pytest.raises(MCPError) as raised:
            await client.call_tool("delete_invoice", {"invoice_id": draft["id"]})
        error = raised.value
        assert (error.code, error.message) == (-32008, "mcp_guardrail_violation")
        data = error.data
        assert (data["code"], data["http_status"], data["error_code"]) == ("mcp_guardrail_violation", 422, 3301)
        assert (data["rule_id"], data["subcode"]) == ("issued-invoice-immutable", "invoice_issued")
        guide = await client.read_resource(data["guardrail_uri"])
        assert guide.contents[0].mime_type == "text/markdown"
        assert "void_invoice" in guide.contents[0].text
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert data["guardrail_uri"] in listed

        # Void it instead: the rectifying invoice cancels it.
        voided = await ok(client, "void_invoice", {
            "invoice_id": draft["id"], "reason": "Billed to the wrong client", "idempotency_key": str(uuid.uuid4()),
        })
        assert voided["invoice"]["status"] == "void"
        assert (voided["rectifying_invoice"]["number"], voided["rectifying_invoice"]["total_cents"]) == ("R-000001", -21780)

        # Another invoice, issued, then paid with an idempotency key.
        second = await ok(client, "create_invoice", {"client_id": acme["id"], "lines": lines})
        await ok(client, "issue_invoice", {
            "invoice_id": second["id"], "issue_date": "2025-05-03", "idempotency_key": str(uuid.uuid4()),
        })
        pay_key = f"pay-{uuid.uuid4()}"
        payment = {"invoice_id": second["id"], "amount_cents": 10000, "method": "transfer", "idempotency_key": pay_key}
        first = await client.call_tool("record_payment", payment)
        assert not first.is_error and META_REPLAY not in meta(first)
        assert first.structured_content["invoice"]["balance_cents"] == 11780

        # The retry replays the stored result, marked, and pays nothing more.
        again = await client.call_tool("record_payment", payment)
        assert not again.is_error
        assert meta(again)[META_REPLAY] is True
        assert again.structured_content == first.structured_content
        assert payments_in_db(db, second["id"]) == 1

        # The same key with another amount is refused.
        with pytest.raises(MCPError) as raised:
            await client.call_tool("record_payment", payment | {"amount_cents": 20000})
        error = raised.value
        assert (error.code, error.message) == (-32007, "idempotency_key_reused")
        assert (error.data["http_status"], error.data["error_code"], error.data["retryable"]) == (409, 3201, False)
        assert payments_in_db(db, second["id"]) == 1

        # Without a key a payment is refused before anything runs.
        with pytest.raises(MCPError) as raised:
            await client.call_tool("record_payment", {"invoice_id": second["id"], "amount_cents": 1})
        assert (raised.value.code, raised.value.message) == (-32007, "idempotency_key_required")
