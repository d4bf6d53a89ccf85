"""A small stateful REST backend of the tests' own, in FastAPI (which publishes its own
OpenAPI 3.1 document at /openapi.json), answering every status tollgate maps.

Run: `python -m uvicorn fastapi_backend:app --host 127.0.0.1 --port N` from this directory.

- `POST /items` creates an item: 401 without the right `X-Api-Key` (the key is read from
  the file named by `FASTAPI_BACKEND_KEY_FILE`), 409 when the name exists, 422 with the
  backend's own body `{"error": {"code", "message"}}` when the price is negative, 422 in
  FastAPI's own shape (`{"detail": [{"type", "msg", …}]}`) for the reserved name `admin`.
  Every request it receives is recorded with its `Idempotency-Key` and `X-Api-Key`.
- `GET /items/{item_id}`: 404 (own body) for an unknown id, 400 `{"detail": "…"}` for 0.
- `GET /limited`: 429 with `Retry-After: 30`. `GET /broken`: 500. `GET /busy`: 503.
- `GET /slow`: answers after 5 seconds, unless the client goes away first (recorded). `GET /drop`: the connection is closed before any
  answer.
- `GET /received` (not in the document): what `POST /items` received, what `/slow` saw,
  and the W3C trace headers (`traceparent`, `tracestate`) of every request, for the tests.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from fastapi import FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

api = FastAPI(title="Items", version="1")

ITEMS: dict[int, dict] = {}
RECEIVED: list[dict] = []
EVENTS: list[str] = []
TRACES: list[dict] = []


def expected_key() -> str:
    return Path(os.environ["FASTAPI_BACKEND_KEY_FILE"]).read_text().strip()


class NewItem(BaseModel):
    name: str
    price: int


class Item(BaseModel):
    id: int
    name: str
    price: int


def own_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


@api.post("/items", operation_id="createItem", status_code=201, response_model=Item, summary="Create an item.")
async def create_item(item: NewItem, request: Request, x_api_key: str | None = Header(default=None)):
    RECEIVED.append(
        {"idempotency_key": request.headers.get("idempotency-key"), "x_api_key": x_api_key, "name": item.name}
    )
    if x_api_key != expected_key():
        return own_error(401, "bad_key", "the API key is not valid")
    if item.name == "admin":
        detail = [{"type": "value_error", "loc": ["body", "name"], "msg": "Value error, the name admin is reserved"}]
        return JSONResponse({"detail": detail}, status_code=422)
    if item.price < 0:
        return own_error(422, "price_negative", "a price cannot be negative")
    if any(existing["name"] == item.name for existing in ITEMS.values()):
        return own_error(409, "item_exists", f"an item named {item.name} exists")
    new = {"id": len(ITEMS) + 1, "name": item.name, "price": item.price}
    ITEMS[new["id"]] = new
    return new


@api.get("/items/{item_id}", operation_id="getItem", response_model=Item, summary="Read an item.")
async def get_item(item_id: int):
    if item_id == 0:
        raise HTTPException(status_code=400, detail="item ids start at 1")
    if item_id not in ITEMS:
        return own_error(404, "item_missing", f"no item {item_id}")
    return ITEMS[item_id]


@api.get("/limited", operation_id="limited", summary="Always over the rate limit.")
async def limited():
    return own_error(429, "too_many", "slow down", headers={"Retry-After": "30"})


@api.get("/broken", operation_id="broken", summary="Always fails.")
async def broken():
    return own_error(500, "db_down", "the database is down")


@api.get("/busy", operation_id="busy", summary="Always in maintenance.")
async def busy():
    return own_error(503, "maintenance", "back soon")


@api.get("/slow", operation_id="slow", summary="Answers after five seconds.")
async def slow(request: Request):
    EVENTS.append("slow started")
    for _ in range(50):
        if await request.is_disconnected():
            EVENTS.append("slow disconnected")
            return {"late": False}
        await asyncio.sleep(0.1)
    EVENTS.append("slow answered")
    return {"late": True}


@api.get("/drop", operation_id="drop", summary="Closes the connection without an answer.")
async def drop():
    return {"never": "sent"}


@api.get("/received", include_in_schema=False)
async def received():
    return {"received": RECEIVED, "events": EVENTS, "traces": TRACES}


def record_trace_headers(scope) -> None:
    """Notes the W3C trace headers of a request (recorded here, in plain ASGI: an HTTP
    middleware of FastAPI's would hide a client's disconnection from `/slow`)."""
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    TRACES.append(
        {
            "method": scope["method"],
            "path": scope["path"],
            "traceparent": headers.get("traceparent"),
            "tracestate": headers.get("tracestate"),
        }
    )


async def app(scope, receive, send):
    """The FastAPI app, except that `/drop` closes the connection before any answer; the
    trace headers of every request but `/received` are recorded."""
    if scope["type"] == "http" and scope["path"] != "/received":
        record_trace_headers(scope)
    if scope["type"] == "http" and scope["path"] == "/drop":
        # uvicorn's `send` is a method of the request cycle that owns the connection.
        transport = getattr(getattr(send, "__self__", None), "transport", None)
        if transport is not None:
            transport.abort()
            return
    await api(scope, receive, send)
