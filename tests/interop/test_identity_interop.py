"""The official Python MCP client (`mcp==2.3.0`) calling tools with an access token from the
company's identity provider, not one tollgate issued.

The provider is a real OpenID Provider nobody here wrote: `tests/idp/provider.mjs` runs the
npm package `oidc-provider` on 127.0.0.1 (Node from `TG_NODE`, else `node`; its packages from
`TG_IDP_MODULES`, else `tests/idp/node_modules`, installed by `npm ci --prefix tests/idp`).
The test asks its token endpoint for client-credentials tokens with a resource indicator
(RFC 8707: the token's `aud` is the resource) over HTTP, as any client would, and starts
tollgate with one `[[auth.issuers]]` table trusting it for that audience.

With the SDK's own transports, the bearer token being the provider's token:

- Streamable HTTP on both eras: a JWT whose role (`interop-testers`, mapped to
  `conformance:use` by the issuer's `roles` table) and scope (`invoices:read`, granted as
  it is) decide what is listed; a fixture tool called returns its real result; a tool
  outside those scopes is refused `-32005 insufficient_scope`, surfacing as `MCPError`
  with the catalog envelope in `.data`.
- stdio on both eras: the same JWT in `TOLLGATE_TOKEN`, the issuer in `--config`.
- An opaque token (no JWT: tollgate asks the provider's introspection endpoint, RFC 7662).

Afterwards `tollgate users list --json` holds the provider's user the calls ran as.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
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

# The resource the tokens are asked for, hence their audience; never dialled.
AUDIENCE = "https://tollgate.interop.test/mcp"

# The issuer's name in tollgate's configuration (logs and the CLI name the provider by it).
ISSUER_NAME = "corp"

INTROSPECTOR = ("tollgate-introspector", "introspector-secret-5d1e07")

# The provider's clients: `agent` gets JWTs carrying the role `interop-testers` and may be
# granted `invoices:read`; `robot` gets opaque tokens and may be granted `conformance:use`.
CLIENTS = [
    {
        "client_id": "agent",
        "client_secret": "agent-secret-8c2b44",
        "format": "jwt",
        "scopes": ["invoices:read"],
        "roles": ["interop-testers"],
    },
    {
        "client_id": "robot",
        "client_secret": "robot-secret-1a9f3e",
        "format": "opaque",
        "scopes": ["conformance:use"],
    },
    {"client_id": INTROSPECTOR[0], "client_secret": INTROSPECTOR[1], "scopes": []},
]

@dataclass(frozen=True)
class Provider:
    """The running test provider: its ready line and where it keeps its files."""

    ready: dict[str, Any]
    dir: Path

    @property
    def issuer(self) -> str:
        return self.ready["issuer"]

    def token(self, client_id: str, scope: str) -> str:
        """A client-credentials access token for `client_id` with `scope` on `AUDIENCE`."""
        client = next(c for c in CLIENTS if c["client_id"] == client_id)
        response = httpx2.post(
            self.ready["token_endpoint"],
            auth=(client["client_id"], client["client_secret"]),
            data={"grant_type": "client_credentials", "scope": scope, "resource": AUDIENCE},
            timeout=10,
        )
        assert response.status_code == 200, f"token endpoint: {response.status_code} {response.text}"
        body = response.json()
        assert body["token_type"].lower() == "bearer", body
        return body["access_token"]

    def tollgate_config(self) -> str:
        """A configuration trusting this provider for `AUDIENCE`, introspecting opaque tokens."""
        secret = self.dir / "introspector.secret"
        secret.write_text(INTROSPECTOR[1])
        return (
            "[[auth.issuers]]\n"
            f'name = "{ISSUER_NAME}"\n'
            f'issuer = "{self.issuer}"\n'
            f'audience = "{AUDIENCE}"\n'
            "[auth.issuers.roles]\n"
            '"interop-testers" = ["conformance:use"]\n'
            "[auth.issuers.introspection]\n"
            f'client_id = "{INTROSPECTOR[0]}"\n'
            f'client_secret_file = "{secret}"\n'
            "cache_secs = 0\n"
        )


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory, oidc_provider) -> Iterator[Provider]:
    """The test provider with `CLIENTS`, on a free loopback port with a fresh RS256 key;
    stopped when the module's tests are done."""
    work = tmp_path_factory.mktemp("idp")
    with oidc_provider(work, CLIENTS) as ready:
        yield Provider(ready=ready, dir=work)


@pytest.fixture
def agent_token(provider: Provider) -> str:
    """A JWT for `agent`: role `interop-testers`, scope `invoices:read`."""
    token = provider.token("agent", "invoices:read")
    assert token.count(".") == 2, "the agent's token is not a JWT"
    return token


@pytest.fixture
def config(provider: Provider) -> str:
    return provider.tollgate_config()


@asynccontextmanager
async def http_client(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    """The SDK's Streamable HTTP client sending `Authorization: Bearer <token>`."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode, read_timeout_seconds=30) as client:
            assert client.protocol_version == MODES[mode]
            yield client


def assert_insufficient_scope(error: MCPError, required: str, provided: list[str]) -> None:
    """The catalog's `insufficient_scope`, as the SDK surfaces it."""
    assert error.code == -32005, error
    assert error.message == "insufficient_scope"
    assert isinstance(error.data, dict), error.data
    assert error.data["code"] == "insufficient_scope"
    assert error.data["http_status"] == 403
    assert error.data["required_scope"] == required
    assert sorted(error.data["provided_scopes"]) == provided
    assert isinstance(error.data["hint"], str) and error.data["hint"]


def built_in_scopes(run_tollgate, db) -> dict[str, str]:
    """Each built-in tool's scope, as `tollgate tools --json` gives it (the conformance
    fixtures are not among them: `conformance:use` grants every one of those)."""
    done = run_tollgate("--database", str(db.path), "tools", "--json")
    assert done.returncode == 0, done.stderr
    return {tool["name"]: tool["scope"] for tool in json.loads(done.stdout)["tools"]}


async def assert_lists_exactly(client: Client, scopes: dict[str, str], granted: set[str]) -> None:
    """`tools/list` holds the built-in tools of the `granted` scopes and no other, plus the
    conformance fixtures (all of them `conformance:use`) when that is granted."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert names & scopes.keys() == {name for name, scope in scopes.items() if scope in granted}
    fixtures = names - scopes.keys()
    if "conformance:use" in granted:
        assert "test_simple_text" in fixtures
    else:
        assert fixtures == set()


async def assert_simple_text(client: Client) -> None:
    called = await client.call_tool("test_simple_text", {})
    assert called.is_error is False
    assert [(c.type, c.text) for c in called.content] == [("text", SIMPLE_TEXT)]


async def assert_agent_session(client: Client, scopes: dict[str, str]) -> None:
    """What `agent`'s token reaches: the fixtures (its role) and the invoice reading tools
    (its scope), nothing else; those calls work, `create_client` is refused."""
    await assert_lists_exactly(client, scopes, {"conformance:use", "invoices:read"})
    await assert_simple_text(client)
    searched = await client.call_tool("search_invoices", {})
    assert searched.is_error is False
    with pytest.raises(MCPError) as raised:
        await client.call_tool("create_client", {"name": "Refused Co"})
    assert_insufficient_scope(raised.value, "clients:write", ["conformance:use", "invoices:read"])


def users(run_tollgate, db) -> list[dict[str, Any]]:
    """`tollgate users list --json`."""
    done = run_tollgate("--database", str(db.path), "users", "list", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_user_seen(run_tollgate, db, provider: Provider, subject: str) -> None:
    """The calls ran as the provider's `subject`: one tollgate user of that issuer."""
    listed = [(u["issuer"], u["subject"]) for u in users(run_tollgate, db)]
    assert listed == [(provider.issuer, subject)]


@pytest.mark.parametrize("mode", list(MODES))
async def test_http_client_calls_tools_with_a_providers_jwt(
    mode: str, tollgate_db, serve_http, run_tollgate, provider: Provider, config, agent_token
) -> None:
    server = serve_http(tollgate_db, "--conformance-pack", config=config)
    async with http_client(server.url, agent_token, mode) as client:
        await assert_agent_session(client, built_in_scopes(run_tollgate, tollgate_db))
    assert_user_seen(run_tollgate, tollgate_db, provider, "agent")
    assert agent_token not in server.log_text()


@pytest.mark.parametrize("mode", list(MODES))
async def test_stdio_client_calls_tools_with_a_providers_jwt(
    mode: str, tollgate_db, stdio_params, run_tollgate, provider: Provider, config, agent_token
) -> None:
    config_file = tollgate_db.workdir / "identity.toml"
    config_file.write_text(config)
    params = stdio_params(tollgate_db, "--conformance-pack", "--config", str(config_file), token=agent_token)
    async with Client(params, mode=mode, read_timeout_seconds=30) as client:
        assert client.protocol_version == MODES[mode]
        await assert_agent_session(client, built_in_scopes(run_tollgate, tollgate_db))
    assert_user_seen(run_tollgate, tollgate_db, provider, "agent")


async def test_http_client_calls_tools_with_an_opaque_token(
    tollgate_db, serve_http, run_tollgate, provider: Provider, config
) -> None:
    token = provider.token("robot", "conformance:use")
    assert "." not in token, "the robot's token is not opaque"
    server = serve_http(tollgate_db, "--conformance-pack", config=config)
    async with http_client(server.url, token, "2026-07-28") as client:
        await assert_lists_exactly(client, built_in_scopes(run_tollgate, tollgate_db), {"conformance:use"})
        await assert_simple_text(client)
        with pytest.raises(MCPError) as raised:
            await client.call_tool("search_invoices", {})
        assert_insufficient_scope(raised.value, "invoices:read", ["conformance:use"])
    assert_user_seen(run_tollgate, tollgate_db, provider, "robot")
