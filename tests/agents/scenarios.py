"""The failure kinds every framework test drives, one tool call each, and what the model must
be told about each of them.

A scenario names the tool the scripted model calls and its arguments (`{client_id}`-style
references are filled from `Tollgate.ids`, plus `{channel}`), the key it calls with (its
scopes and per-minute limits: `harness.Tollgate.prepare` makes one key per scenario and
channel), the state it needs (a tool excluded from the plan), an optional
`prepare(tollgate, token, channel)` run before the agent (e.g. the first call of an
idempotency key), the string `code` and JSON-RPC code it fails with, and `must_mention`: the
specifics the model must find in the text it receives (a string verbatim, or a regular
expression).

`listed` is False for a tool the key's `tools/list` does not show (a scope it lacks, a tool
outside the plan, a retired name). Frameworks only call tools they listed, so those tests
simulate an agent whose tool list predates the change: the framework's tool for that name
is built from `Tollgate.declaration(name)` (as a full-scope key saw it, or the retired tool's
former declaration below) and added to the tools the framework's adapter converted.

`jsonrpc_code` is None for failures inside the tool (`isError` results in both channels).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# A retired tool's declaration as an agent built against tollgate 0.1.0 still has it.
RETIRED_DECLARATIONS: tuple[dict, ...] = (
    {
        "name": "list_invoices",
        "description": "List invoices, newest first.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["draft", "issued", "paid", "void"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            },
            "additionalProperties": False,
        },
    },
)

# An id of the right shape that no invoice has.
MISSING_INVOICE_ID = "inv_00000000-0000-7000-8000-000000000000"


@dataclass(frozen=True)
class Scenario:
    """One tool call the scripted model makes, and what it must lead to."""

    name: str
    tool: str
    arguments: dict[str, Any]
    code: str
    jsonrpc_code: int | None
    must_mention: tuple[str | re.Pattern, ...]
    scopes: str = "*"
    limits: tuple[tuple[str, int], ...] = ()
    plan_excludes: tuple[tuple[str, str], ...] = ()
    listed: bool = True
    prepare: Callable[[Any, str, str], None] | None = None
    success: bool = False

    @property
    def is_guard(self) -> bool:
        """A guard failure: a JSON-RPC error in the default channel."""
        return self.jsonrpc_code is not None

    def __str__(self) -> str:
        return self.name


def _first_payment(tollgate: Any, token: str, channel: str) -> None:
    """The first `record_payment` under the key the model then reuses with another amount."""
    response = tollgate.call(
        token,
        "record_payment",
        {
            "invoice_id": tollgate.ids["issued_invoice_id"],
            "amount_cents": 100,
            "idempotency_key": f"agents-payment-{channel}",
        },
    )
    result = response.get("result")
    assert result is not None and not result.get("isError"), f"the first payment failed: {response}"


def _seconds() -> re.Pattern:
    return re.compile(r"\b\d+\s*(?:s|secs?|seconds?)\b", re.IGNORECASE)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        name="not_found",
        tool="get_invoice",
        arguments={"invoice_id": MISSING_INVOICE_ID},
        code="invoice_not_found",
        jsonrpc_code=None,
        must_mention=(MISSING_INVOICE_ID, "search_invoices"),
    ),
    Scenario(
        name="validation",
        tool="create_invoice",
        arguments={
            "client_id": "{client_id}",
            "due_date": "31/12/2026",
            "lines": [{"description": "Consulting", "quantity": 0, "unit_price_cents": 10000, "vat_rate": 21}],
        },
        code="invalid_format",
        jsonrpc_code=None,
        must_mention=(
            "due_date",
            "YYYY-MM-DD",
            "lines.0.quantity",
            re.compile(r"(?:at least 1\b|\b1 to \d)"),
        ),
    ),
    Scenario(
        name="rate_limit",
        tool="create_client",
        arguments={"name": "Rate Limited S.L."},
        code="rate_limited",
        jsonrpc_code=-32006,
        must_mention=("write", _seconds()),
        limits=(("write", 0),),
    ),
    Scenario(
        name="scope",
        tool="create_client",
        arguments={"name": "Out Of Scope S.L."},
        code="insufficient_scope",
        jsonrpc_code=-32005,
        must_mention=("clients:write",),
        scopes="clients:read,invoices:read",
        listed=False,
    ),
    Scenario(
        name="plan",
        tool="export_invoices",
        arguments={"from": "2026-01-01", "to": "2026-12-31"},
        code="plan_upgrade_required",
        jsonrpc_code=-32004,
        must_mention=("enterprise",),
        plan_excludes=(("pro", "export_invoices"),),
        listed=False,
    ),
    Scenario(
        name="guardrail",
        tool="create_invoice",
        arguments={
            "client_id": "{client_id}",
            "lines": [{"description": "Consulting", "quantity": 1, "unit_price_cents": 10000, "vat_rate": 7}],
        },
        code="mcp_guardrail_violation",
        jsonrpc_code=-32008,
        must_mention=("vat_rate", re.compile(r"\b7\b"), re.compile(r"\b21\b\D{1,12}\b10\b\D{1,12}\b4\b\D{1,12}\b0\b")),
    ),
    Scenario(
        name="idempotency_required",
        tool="send_invoice",
        arguments={"invoice_id": "{issued_invoice_id}"},
        code="idempotency_key_required",
        jsonrpc_code=-32007,
        must_mention=("idempotency_key",),
    ),
    Scenario(
        name="idempotency_reused",
        tool="record_payment",
        arguments={"invoice_id": "{issued_invoice_id}", "amount_cents": 200, "idempotency_key": "agents-payment-{channel}"},
        code="idempotency_key_reused",
        jsonrpc_code=-32007,
        must_mention=("idempotency_key", "new key"),
        prepare=_first_payment,
    ),
    Scenario(
        name="approval_required",
        tool="create_client",
        arguments={"name": "Approval Needed {channel} S.L.", "idempotency_key": "agents-approval-{channel}"},
        code="approval_required",
        jsonrpc_code=-32009,
        must_mention=(
            re.compile(r"https?://127\.0\.0\.1:\d+/console/approvals/apr_[0-9a-f]{32}"),
            re.compile(r"\bapprove\b"),
            "agents-approval-",
        ),
    ),
    Scenario(
        name="retired_tool",
        tool="list_invoices",
        arguments={},
        code="tool_retired",
        jsonrpc_code=-32602,
        must_mention=("search_invoices",),
        listed=False,
    ),
)

# A plain read that succeeds: the model receives the client's data.
SUCCESS = Scenario(
    name="success",
    tool="get_client",
    arguments={"client_id": "{client_id}"},
    code="",
    jsonrpc_code=None,
    must_mention=("{client_id}", "{client_name}"),
    success=True,
)

# An OpenAI strict-mode agent calls create_invoice with its required arguments only.
STRICT_CREATE_INVOICE = Scenario(
    name="strict_create_invoice",
    tool="create_invoice",
    arguments={
        "client_id": "{client_id}",
        "lines": [{"description": "Consulting", "quantity": 1, "unit_price_cents": 10000, "vat_rate": 21}],
    },
    code="",
    jsonrpc_code=None,
    must_mention=("{client_id}", "draft"),
    success=True,
)

ALL_SCENARIOS: tuple[Scenario, ...] = (*SCENARIOS, SUCCESS, STRICT_CREATE_INVOICE)

BY_NAME: dict[str, Scenario] = {s.name: s for s in ALL_SCENARIOS}
