"""The official Python SDK's OAuth client (`mcp==2.3.0`, `OAuthClientProvider`) signing a
person in at tollgate's front door (`[oauth_server]`, docs/oauth.md), the person signing in
at a real OpenID Provider nobody here wrote (`oidc-provider`, tests/idp) that tollgate sends
them to (`[auth.issuers.login]`).

The SDK does everything a host does on its own: it is refused with 401, reads the protected
resource metadata and the authorization server metadata, registers itself (RFC 7591) or uses
the URL of its client metadata document as its `client_id`, builds the authorization request
with PKCE and `resource`, checks `state` and `iss` (RFC 9207) on the way back, exchanges the
code and, once its token has expired, refreshes it. Only the person's browser is played here
(`Browser`: httpx2 with a cookie jar, posting each page's form as a person would): tollgate
redirects it to the provider, whose development login page takes the person's name and whose
consent page is accepted; the provider sends it back to tollgate's `/oauth/callback`, tollgate
shows its own consent page, and "allow" redirects to the host's redirect URI, whose query is
handed to the SDK.

The person's scopes come from the provider: their ID token carries the role
`invoice-clerks`, which tollgate's `[auth.issuers.roles]` maps to `invoices:read` and
`clients:read`. The host asks for every scope tollgate advertises and gets those two: it
lists exactly their tools, calls them, and is refused `-32005 insufficient_scope` on
`create_client` (`clients:write`). `tollgate users list --json` then holds the person.

The client metadata document is served by the test over HTTPS with a certificate authority
of its own (`trustme`), which tollgate trusts through `client_documents.ca_file`, its host
allowed by `client_documents.allow_hosts` (tollgate refuses loopback addresses otherwise);
no registration happens (`oauth_registrations` stays empty).
"""

from __future__ import annotations

import html
import json
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import httpx2
import pytest
import trustme
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.shared.exceptions import MCPError
from pydantic import AnyUrl

pytestmark = pytest.mark.anyio

# mode -> the protocol version the connection must end up on.
MODES = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}

# tollgate's client at the provider (a confidential client: its secret in a file).
LOGIN_CLIENT = ("tollgate-login", "login-secret-7c41d2")

# The person who signs in at the provider, their role there and what tollgate maps it to.
PERSON = "ana"
PERSON_NAME = "Ana Lima"
ROLE = "invoice-clerks"
PERSON_SCOPES = ["clients:read", "invoices:read"]

# The most pages and redirects one sign-in may take before the test gives up.
MAX_BROWSER_STEPS = 16


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---- the person's browser ------------------------------------------------------------------


class _Forms(HTMLParser):
    """The forms of a page: action, method, and the fields a browser would send (inputs
    with a name, and named submit buttons, as `(name, value)`)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {name: value or "" for name, value in attrs}
        if tag == "form":
            action, method = named.get("action", ""), named.get("method", "get")
            self.forms.append({"action": action, "method": method, "inputs": [], "buttons": []})
        elif tag == "input" and self.forms and "name" in named:
            self.forms[-1]["inputs"].append((named["name"], named.get("value", "")))
        elif tag == "button" and self.forms and "name" in named:
            self.forms[-1]["buttons"].append((named["name"], named.get("value", "")))


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class Browser:
    """A person's browser: a cookie jar, redirects followed one by one, each page's first form
    filled and posted (with the `Origin` header browsers send). On the provider's login page
    it types the person's name; on tollgate's consent page it presses "allow". It stops at the
    redirect to the host's `redirect_uri` and returns that URL's query."""

    redirect_uri: str
    login: str = PERSON
    pages: list[tuple[str, str]] = field(default_factory=list)

    async def sign_in(self, authorization_url: str) -> dict[str, str]:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(30), follow_redirects=False) as http:
            response = await http.get(authorization_url)
            for _ in range(MAX_BROWSER_STEPS):
                if response.is_redirect:
                    location = urljoin(str(response.url), response.headers["location"])
                    if location.startswith(self.redirect_uri):
                        return dict(parse_qsl(urlsplit(location).query))
                    response = await http.get(location)
                elif response.status_code == 200:
                    response = await self._submit(http, response)
                else:
                    request = f"{response.request.method} {response.url}"
                    pytest.fail(f"{request}: HTTP {response.status_code}: {response.text}")
            pytest.fail(f"the sign-in did not come back to the host within {MAX_BROWSER_STEPS} steps: {self.pages}")

    async def _submit(self, http: httpx2.AsyncClient, page: httpx2.Response) -> httpx2.Response:
        self.pages.append((str(page.url), page.text))
        parser = _Forms()
        parser.feed(page.text)
        assert parser.forms, f"no form on {page.url}: {page.text}"
        form = parser.forms[0]
        assert form["method"].lower() == "post", form
        fields = dict(form["inputs"])
        if "login" in fields:
            fields.update(login=self.login, password="any")
        if ("decision", "allow") in form["buttons"]:
            fields["decision"] = "allow"
        target = urljoin(str(page.url), form["action"])
        return await http.post(target, data=fields, headers={"Origin": origin(str(page.url))})

    def pages_of(self, url_prefix: str) -> list[str]:
        """The text of every page seen whose URL starts with `url_prefix`, in order, character
        references decoded."""
        found = [html.unescape(text) for url, text in self.pages if url.startswith(url_prefix)]
        assert found, f"no page under {url_prefix}: {[url for url, _ in self.pages]}"
        return found


# ---- the host: the SDK's OAuth client ------------------------------------------------------


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory, keeping every token set it was given."""

    def __init__(self) -> None:
        self.tokens: list[OAuthToken] = []
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens[-1] if self.tokens else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Host:
    """An MCP host built on the SDK: its OAuth provider, storage and the person's browser."""

    oauth: OAuthClientProvider
    storage: MemoryStorage
    browser: Browser
    authorization_urls: list[str]

    @asynccontextmanager
    async def connect(self, url: str, mode: str) -> AsyncIterator[Client]:
        async with httpx2.AsyncClient(auth=self.oauth, timeout=httpx2.Timeout(30)) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=mode, read_timeout_seconds=60) as client:
                assert client.protocol_version == MODES[mode]
                yield client

    def expire_token(self) -> None:
        """As if the access token's lifetime had passed: the SDK keeps the expiry it computed
        from `expires_in` in its context, and refreshes before the next request once it is
        past."""
        self.oauth.context.token_expiry_time = time.time() - 1


def make_host(server_url: str, redirect_uri: str, client_metadata_url: str | None = None) -> Host:
    storage = MemoryStorage()
    browser = Browser(redirect_uri=redirect_uri)
    urls: list[str] = []
    answers: list[dict[str, str]] = []

    async def redirect_handler(authorization_url: str) -> None:
        urls.append(authorization_url)
        answers.append(await browser.sign_in(authorization_url))

    async def callback_handler() -> AuthorizationCodeResult:
        query = answers[-1]
        assert "error" not in query, query
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    metadata = OAuthClientMetadata(
        client_name="Interop host",
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    oauth = OAuthClientProvider(
        server_url=server_url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url,
    )
    return Host(oauth=oauth, storage=storage, browser=browser, authorization_urls=urls)


# ---- tollgate with the front door, and the provider people sign in at ---------------------


@dataclass(frozen=True)
class FrontDoor:
    """tollgate's port (fixed before the provider starts: its callback is registered there)
    and the running provider's ready line."""

    port: int
    provider: dict[str, Any]
    work: Path

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self, extra: str = "") -> str:
        """tollgate's configuration: the front door on, the provider trusted, its `login`
        table signing people in, the person's role mapped to their scopes."""
        secret = self.work / "login.secret"
        secret.write_text(LOGIN_CLIENT[1])
        return (
            "[oauth_server]\n"
            "enabled = true\n"
            f"{extra}"
            "[[auth.issuers]]\n"
            'name = "corp"\n'
            f'issuer = "{self.provider["issuer"]}"\n'
            f'audience = "{self.issuer}/mcp"\n'
            "[auth.issuers.roles]\n"
            f'"{ROLE}" = {json.dumps(PERSON_SCOPES)}\n'
            "[auth.issuers.login]\n"
            f'client_id = "{LOGIN_CLIENT[0]}"\n'
            f'client_secret_file = "{secret}"\n'
        )


@pytest.fixture
def front_door(tmp_path: Path, oidc_provider) -> Iterator[FrontDoor]:
    """A port for tollgate and the provider knowing tollgate's callback on it, with the
    person `ana` holding the role `invoice-clerks`."""
    port = free_port()
    work = tmp_path / "idp"
    work.mkdir()
    clients = [
        {
            "client_id": LOGIN_CLIENT[0],
            "client_secret": LOGIN_CLIENT[1],
            "redirect_uris": [f"http://127.0.0.1:{port}/oauth/callback"],
            "scopes": [],
        }
    ]
    accounts = {PERSON: {"roles": [ROLE], "name": PERSON_NAME}}
    with oidc_provider(work, clients, accounts) as ready:
        yield FrontDoor(port=port, provider=ready, work=tmp_path)


# ---- a client metadata document over HTTPS -------------------------------------------------


@dataclass
class DocumentServer:
    """An HTTPS server on loopback serving one client metadata document."""

    url: str
    ca_file: Path
    host: str
    fetches: list[str]


@contextmanager
def serve_document(work: Path, path: str, document_for) -> Iterator[DocumentServer]:
    """Serves `document_for(url)` as JSON at https://127.0.0.1:<port>`path`, with a
    certificate of a fresh authority (its PEM in `ca_file`); counts the fetches."""
    authority = trustme.CA()
    ca_file = work / "document-ca.pem"
    authority.cert_pem.write_to_path(str(ca_file))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    fetches: list[str] = []
    holder: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            fetches.append(self.path)
            if self.path != path:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(holder["body"])))
            self.end_headers()
            self.wfile.write(holder["body"])

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    host = f"127.0.0.1:{server.server_address[1]}"
    url = f"https://{host}{path}"
    holder["body"] = json.dumps(document_for(url)).encode()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield DocumentServer(url=url, ca_file=ca_file, host=host, fetches=fetches)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# ---- what the person's host may do --------------------------------------------------------


def tool_scopes(run_tollgate, db) -> dict[str, str]:
    """Each built-in tool's scope, as `tollgate tools --json` gives it."""
    done = run_tollgate("--database", str(db.path), "tools", "--json")
    assert done.returncode == 0, done.stderr
    return {tool["name"]: tool["scope"] for tool in json.loads(done.stdout)["tools"]}


async def assert_acts_as_the_person(client: Client, scopes: dict[str, str]) -> None:
    """The host holds the person's scopes and no other: it lists exactly their tools, calls
    them, and is refused a tool of another scope."""
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == {name for name, scope in scopes.items() if scope in PERSON_SCOPES}
    for tool in ("search_invoices", "search_clients"):
        called = await client.call_tool(tool, {})
        assert called.is_error is False, called
    with pytest.raises(MCPError) as raised:
        await client.call_tool("create_client", {"name": "Refused Co"})
    error = raised.value
    assert error.code == -32005, error
    assert error.message == "insufficient_scope"
    assert error.data["code"] == "insufficient_scope"
    assert error.data["required_scope"] == "clients:write"
    assert sorted(error.data["provided_scopes"]) == PERSON_SCOPES


def assert_signed_in_at_the_provider(host: Host, door: FrontDoor, client_label: str) -> None:
    """One sign-in: tollgate's authorization endpoint, the provider's login page, tollgate's
    consent page naming the person, the client and the scopes it will get."""
    assert len(host.authorization_urls) == 1, host.authorization_urls
    assert host.authorization_urls[0].startswith(f"{door.issuer}/oauth/authorize?")
    request = dict(parse_qsl(urlsplit(host.authorization_urls[0]).query))
    assert request["code_challenge_method"] == "S256"
    assert request["resource"] == f"{door.issuer}/mcp"
    login, _consent_there = host.browser.pages_of(door.provider["issuer"])
    assert 'name="login"' in login
    [consent] = host.browser.pages_of(f"{door.issuer}/oauth/")
    assert f'<dd id="person">{PERSON_NAME}</dd>' in consent, consent
    assert client_label in consent
    for scope in PERSON_SCOPES:
        assert f"<code>{scope}</code>" in consent


def assert_person_seen(run_tollgate, db, door: FrontDoor) -> None:
    """`tollgate users list --json`: the provider's person, and nobody else."""
    done = run_tollgate("--database", str(db.path), "users", "list", "--json")
    assert done.returncode == 0, done.stderr
    listed = [(user["issuer"], user["subject"]) for user in json.loads(done.stdout)]
    assert listed == [(door.provider["issuer"], PERSON)]


def assert_refreshed(host: Host, before: int) -> OAuthToken:
    """The SDK refreshed once since it held `before` token sets: a new access token, the
    refresh token rotated, the same scopes."""
    assert len(host.storage.tokens) == before + 1, "one refresh"
    previous, refreshed = host.storage.tokens[-2:]
    assert refreshed.access_token != previous.access_token
    assert refreshed.refresh_token != previous.refresh_token, "the refresh token rotates"
    assert sorted(refreshed.scope.split()) == PERSON_SCOPES
    return refreshed


async def test_a_registered_host_signs_a_person_in_and_refreshes(
    tollgate_db, serve_http, run_tollgate, count_rows, front_door: FrontDoor
) -> None:
    server = serve_http(tollgate_db, config=front_door.config(), port=front_door.port)
    host = make_host(server.url, f"http://127.0.0.1:{free_port()}/callback")
    scopes = tool_scopes(run_tollgate, tollgate_db)

    # Stateless (2026-07-28): the first request is refused 401 and the SDK signs in.
    async with host.connect(server.url, "2026-07-28") as client:
        await assert_acts_as_the_person(client, scopes)
        registered = host.storage.client_info
        assert registered is not None and registered.client_id.startswith("tgc_"), registered
        [first] = host.storage.tokens
        assert first.access_token.startswith("tg_at_") and first.refresh_token.startswith("tg_rt_")
        assert sorted(first.scope.split()) == PERSON_SCOPES

        host.expire_token()
        called = await client.call_tool("search_invoices", {})
        assert called.is_error is False, called
        assert_refreshed(host, 1)
        await assert_acts_as_the_person(client, scopes)

    # The same host on the handshake era, its token on `initialize`: the session belongs to
    # the host's client, so it goes on with the token a refresh brings.
    async with host.connect(server.url, "legacy") as client:
        await assert_acts_as_the_person(client, scopes)
        host.expire_token()
        called = await client.call_tool("search_clients", {})
        assert called.is_error is False, called
        last = assert_refreshed(host, 2)
        await assert_acts_as_the_person(client, scopes)

    assert_signed_in_at_the_provider(host, front_door, "Interop host")
    assert count_rows(tollgate_db, "oauth_registrations") == 1
    assert count_rows(tollgate_db, "oauth_grants") == 1
    assert_person_seen(run_tollgate, tollgate_db, front_door)
    for token in (first.access_token, first.refresh_token, last.access_token, last.refresh_token):
        assert token not in server.log_text()


def innermost(error: BaseException) -> BaseException:
    """The first error inside the task groups' exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def test_a_handshake_era_host_without_a_token_signs_in_on_its_first_request(
    tollgate_db, serve_http, run_tollgate, front_door: FrontDoor
) -> None:
    server = serve_http(tollgate_db, config=front_door.config(), port=front_door.port)
    host = make_host(server.url, f"http://127.0.0.1:{free_port()}/callback")
    # The handshake without a token is challenged (401): the SDK signs the person in, then
    # opens its session with the token.
    async with host.connect(server.url, "legacy") as client:
        await assert_acts_as_the_person(client, tool_scopes(run_tollgate, tollgate_db))
    assert_signed_in_at_the_provider(host, front_door, "Interop host")


async def test_a_host_with_a_client_metadata_document_signs_a_person_in_without_registering(
    tollgate_db, serve_http, run_tollgate, count_rows, front_door: FrontDoor, tmp_path: Path
) -> None:
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"

    def document(url: str) -> dict[str, Any]:
        return {
            "client_id": url,
            "client_name": "Interop host (metadata document)",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

    with serve_document(tmp_path, "/clients/interop-host.json", document) as published:
        documents = (
            "[oauth_server.client_documents]\n"
            f'allow_hosts = ["{published.host}"]\n'
            f'ca_file = "{published.ca_file}"\n'
        )
        server = serve_http(tollgate_db, config=front_door.config(documents), port=front_door.port)
        host = make_host(server.url, redirect_uri, client_metadata_url=published.url)
        scopes = tool_scopes(run_tollgate, tollgate_db)

        async with host.connect(server.url, "2026-07-28") as client:
            await assert_acts_as_the_person(client, scopes)
            assert host.storage.client_info is not None
            assert host.storage.client_info.client_id == published.url
            host.expire_token()
            called = await client.call_tool("search_clients", {})
            assert called.is_error is False, called
            assert_refreshed(host, 1)

        assert published.fetches, "tollgate fetched the document"
        assert set(published.fetches) == {"/clients/interop-host.json"}

    assert_signed_in_at_the_provider(host, front_door, "Interop host (metadata document)")
    [consent] = host.browser.pages_of(f"{front_door.issuer}/oauth/")
    assert f'<code id="client-id">{published.url}</code>' in consent
    assert count_rows(tollgate_db, "oauth_registrations") == 0, "no registration happened"
    assert count_rows(tollgate_db, "oauth_grants") == 1
    assert_person_seen(run_tollgate, tollgate_db, front_door)
