"""The tollgate side of the agent-framework tests: a prepared database, a running server and
plain JSON-RPC calls, with no MCP SDK and no framework imported (both test venvs use it).

`Tollgate.start(workdir)` makes a fresh demo database (`tollgate --database DB init --demo
--json`), prepares through the CLI everything the failure scenarios of `scenarios.py` need
(one API key per scenario and channel, the zero per-minute limit of the rate-limit keys, the
tool excluded from the plan) and starts `tollgate serve` on a free loopback port. The server
refuses unknown `TOLLGATE_*` variables, so every process started here gets an environment
stripped of them (only `TOLLGATE_TOKEN` is ever set, for `tollgate stdio`).

Channels: "jsonrpc" keys are created without `--guard-channel` (the default channel);
"tool_result" keys with `--guard-channel tool_result`. When the binary does not know that
option, `Tollgate.token(scenario, "tool_result")` fails the test with the CLI's message.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

CHANNELS = ("jsonrpc", "tool_result")
TRANSPORTS = ("http", "stdio")

# The protocol revision of the plain JSON-RPC calls made here (handshake era).
PROTOCOL_VERSION = "2025-06-18"


class HarnessError(AssertionError):
    """Something the harness needs did not work (the CLI, the server, a plain call)."""


def binary() -> Path:
    """The binary under test: `TG_BIN` (relative to the repository root) or target/debug."""
    configured = Path(os.environ.get("TG_BIN", "target/debug/tollgate"))
    path = configured if configured.is_absolute() else REPO_ROOT / configured
    if not path.is_file():
        raise HarnessError(
            f"{path} does not exist: run `cargo build --bins --features conformance-pack` (or set TG_BIN)"
        )
    return path


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any TOLLGATE_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    env.setdefault("RUST_LOG", "warn")
    env.update(extra or {})
    return env


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Received:
    """What a framework's agent run made of one tool call.

    `text`: what the model's next turn received for the call (the framework's rendering,
    flattened to text); `raised`: the exception the run ended with instead.
    """

    text: str | None = None
    raised: BaseException | None = None

    def describe(self) -> str:
        """One line for reports: the text, or the exception's type and message."""
        if self.raised is not None:
            # mcp 2.x keeps the JSON-RPC error's data on the exception, mcp 1.x on its `.error`.
            data = getattr(self.raised, "data", None)
            if data is None:
                data = getattr(getattr(self.raised, "error", None), "data", None)
            hint = f" (data.hint: {data['hint']})" if isinstance(data, dict) and "hint" in data else ""
            return f"raises {type(self.raised).__name__}: {self.raised}{hint}"
        return self.text or ""


@dataclass
class Key:
    """An API key made for one scenario and channel (or the reason it could not be made)."""

    id: str | None
    token: str | None
    error: str | None = None


# Calls that create a client named "Approval Needed…" wait for a person's approval.
POLICY = """[http]
public_base_url = "{base}"

[[policy.rules]]
name = "new_clients_need_approval"
tools = ["create_client"]
condition = "args.name.startsWith('Approval Needed')"
effect = "require_approval"
"""


@dataclass
class Tollgate:
    """A prepared database and a running `tollgate serve` on it.

    - `http_url`: the MCP endpoint; `headers(token)` the HTTP headers a client sends.
    - `stdio(token)`: `dict(command, args, env, cwd)` that starts `tollgate stdio` with the
      credential in `TOLLGATE_TOKEN` (env holds only RUST_LOG and TOLLGATE_TOKEN; frameworks
      that pass env as the whole child environment still work: the command path is absolute).
    - `token(scenario, channel)`: the credential of that scenario in that channel.
    - `run(*args)`: a CLI call on this database; `call(token, tool, arguments)`: one plain
      JSON-RPC `tools/call` over HTTP, returning the response object (`result` or `error`).
    - `ids`: values the scenarios' arguments refer to (`client_id`, `draft_invoice_id`,
      `issued_invoice_id`, `missing_invoice_id`).
    - `declaration(name)`: the tool's `tools/list` entry as a full-scope key sees it, or the
      former declaration of a retired tool (see `scenarios.RETIRED_DECLARATIONS`).
    """

    bin: Path
    workdir: Path
    db: Path
    admin_token: str
    http_url: str = ""
    base: str = ""
    process: subprocess.Popen | None = None
    log: Path | None = None
    keys: dict[tuple[str, str], Key] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    declarations: dict[str, dict] = field(default_factory=dict)

    # ---- lifecycle ---------------------------------------------------------------------

    @classmethod
    def start(cls, workdir: Path, scenarios: Iterable[Any] | None = None) -> Tollgate:
        """Creates the database, prepares every scenario and starts the HTTP server."""
        from scenarios import ALL_SCENARIOS  # a sibling module; pytest puts it on sys.path

        workdir.mkdir(parents=True, exist_ok=True)
        db = workdir / "tollgate.db"
        exe = binary()
        done = _run(exe, "--database", str(db), "init", "--demo", "--json", "--company", "Agents Co")
        printed = json.loads(done.stdout)
        tg = cls(bin=exe, workdir=workdir, db=db, admin_token=printed["admin_key"])
        tg.serve()
        try:
            tg._discover_ids()
            tg._record_declarations()
            for scenario in scenarios if scenarios is not None else ALL_SCENARIOS:
                tg.prepare(scenario)
        except BaseException:
            tg.stop()
            raise
        return tg

    def serve(self) -> None:
        """Starts `tollgate serve` on a free loopback port and waits for `/healthz`."""
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.http_url = f"{self.base}/mcp"
        self.log = self.workdir / f"serve-{port}.log"
        # The policy rule of the `approval_required` scenario; the approval pages are on this
        # server, for `tollgate stdio` too.
        self.config().write_text(POLICY.format(base=self.base))
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [str(self.bin), "--database", str(self.db), "--config", str(self.config()), "serve",
                 "--listen", f"127.0.0.1:{port}"],
                env=clean_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        deadline = time.monotonic() + 20
        while True:
            if self.process.poll() is not None:
                raise HarnessError(f"tollgate serve exited with {self.process.returncode}: {self.log_text()}")
            try:
                with urllib.request.urlopen(f"{self.base}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise HarnessError(f"tollgate serve did not become healthy: {self.log_text()}")
            time.sleep(0.05)

    def config(self) -> Path:
        """The configuration file every server of this database reads."""
        return self.workdir / "tollgate.toml"

    def stop(self) -> None:
        """Stops the server started by `serve`."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def log_text(self) -> str:
        """What the server wrote to stderr so far."""
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    # ---- the CLI -----------------------------------------------------------------------

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """`tollgate --database DB ARGS…` with a clean environment."""
        return _run(self.bin, "--database", str(self.db), *args, check=check)

    def create_key(self, name: str, scopes: str, channel: str) -> Key:
        """A key with `scopes`; with `--guard-channel tool_result` for that channel."""
        args = ["key", "create", "--name", name, "--scopes", scopes, "--json"]
        if channel == "tool_result":
            args += ["--guard-channel", "tool_result"]
        done = self.run(*args, check=False)
        if done.returncode != 0:
            return Key(id=None, token=None, error=f"`tollgate {' '.join(args)}` failed: {done.stderr.strip()}")
        printed = json.loads(done.stdout)
        return Key(id=printed["id"], token=printed["token"])

    def prepare(self, scenario: Any) -> None:
        """Makes the scenario's keys (one per channel) and the state it needs."""
        for channel in CHANNELS:
            key = self.create_key(f"{scenario.name}-{channel}", scenario.scopes, channel)
            self.keys[(scenario.name, channel)] = key
            if key.id is None:
                continue
            for category, per_minute in scenario.limits:
                self.run(
                    "limits", "set", "--credential", key.id, "--category", category,
                    "--per-minute", str(per_minute), "--json",
                )
        for plan, tool in scenario.plan_excludes:
            self.run("plan", "exclude", plan, tool)

    # ---- what tests use ----------------------------------------------------------------

    def token(self, scenario: Any, channel: str) -> str:
        """The credential of `scenario` (a Scenario or its name) in `channel`."""
        if channel not in CHANNELS:
            raise ValueError(f"unknown channel {channel!r}")
        name = scenario if isinstance(scenario, str) else scenario.name
        key = self.keys.get((name, channel))
        if key is None:
            raise HarnessError(f"no key was prepared for scenario {name!r}")
        if key.token is None:
            raise HarnessError(key.error or "the key could not be created")
        return key.token

    def headers(self, token: str) -> dict[str, str]:
        """The HTTP headers that carry `token`."""
        return {"Authorization": f"Bearer {token}"}

    def stdio(self, token: str) -> dict[str, Any]:
        """How to start `tollgate stdio` with `token`: command, args, env, cwd."""
        return {
            "command": str(self.bin),
            "args": ["--database", str(self.db), "--config", str(self.config()), "stdio"],
            "env": {"RUST_LOG": "warn", "TOLLGATE_TOKEN": token},
            "cwd": str(self.workdir),
        }

    def declaration(self, name: str) -> dict:
        """The `tools/list` entry of `name` (a retired tool: its former declaration)."""
        try:
            return self.declarations[name]
        except KeyError:
            raise HarnessError(f"no declaration of {name!r}") from None

    def arguments(self, scenario: Any, channel: str = "jsonrpc") -> dict:
        """The scenario's arguments with `{client_id}`-style references (and `{channel}`)
        filled in."""
        return fill(scenario.arguments, {**self.ids, "channel": channel})

    def must_mention(self, scenario: Any) -> tuple:
        """The scenario's `must_mention` with `{client_id}`-style references filled in."""
        return tuple(fill(item, self.ids) for item in scenario.must_mention)

    def prepare_call(self, scenario: Any, channel: str) -> str:
        """Runs the scenario's `prepare` for `channel`; returns the channel's token."""
        token = self.token(scenario, channel)
        if scenario.prepare is not None:
            scenario.prepare(self, token, channel)
        return token

    def assert_specific(self, received: Received, scenario: Any) -> None:
        """Asserts that the run went on and the model received the specific sentence."""
        assert received.raised is None, f"{scenario.name}: the agent run aborted: {received.describe()}"
        assert received.text is not None, f"{scenario.name}: the model received nothing"
        self.assert_mentions(received.text, scenario)

    def assert_mentions(self, text: str, scenario: Any) -> None:
        """Asserts that `text` (what the model received) names every `must_mention` item."""
        missing = missing_mentions(text, self.must_mention(scenario))
        assert not missing, f"{scenario.name}: the model's input lacks {missing}:\n{text}"

    # ---- plain JSON-RPC over HTTP ------------------------------------------------------

    def rpc_session(self, token: str) -> RpcSession:
        """A handshaken HTTP session (initialize + initialized) for `token`."""
        return RpcSession(self.http_url, token)

    def call(self, token: str, tool: str, arguments: Mapping[str, Any] | None = None) -> dict:
        """One `tools/call` in a fresh session; the JSON-RPC response object."""
        return self.rpc_session(token).request("tools/call", {"name": tool, "arguments": dict(arguments or {})})

    def list_tools(self, token: str) -> list[dict]:
        """`tools/list` as `token` sees it (every page)."""
        session = self.rpc_session(token)
        tools: list[dict] = []
        params: dict[str, Any] = {}
        while True:
            response = session.request("tools/list", params)
            result = response["result"]
            tools += result["tools"]
            if not result.get("nextCursor"):
                return tools
            params = {"cursor": result["nextCursor"]}

    def _discover_ids(self) -> None:
        session = self.rpc_session(self.admin_token)
        clients = structured(session.request("tools/call", {"name": "search_clients", "arguments": {}}))
        with_tax_id = [c for c in clients["data"] if c.get("tax_id")]
        self.ids["client_id"] = with_tax_id[0]["id"]
        self.ids["client_name"] = with_tax_id[0]["name"]
        invoices = structured(session.request("tools/call", {"name": "search_invoices", "arguments": {}}))
        by_status: dict[str, dict] = {}
        for invoice in invoices["data"]:
            if invoice["kind"] != "rectifying":
                by_status.setdefault(invoice["status"], invoice)
        self.ids["draft_invoice_id"] = by_status["draft"]["id"]
        issued = next(
            i for i in invoices["data"] if i["status"] == "issued" and i["kind"] != "rectifying" and i["balance_cents"] >= 1000
        )
        self.ids["issued_invoice_id"] = issued["id"]
        self.ids["missing_invoice_id"] = "inv_00000000-0000-7000-8000-000000000000"

    def _record_declarations(self) -> None:
        from scenarios import RETIRED_DECLARATIONS

        for tool in self.list_tools(self.admin_token):
            self.declarations[tool["name"]] = tool
        for tool in RETIRED_DECLARATIONS:
            self.declarations[tool["name"]] = tool


class RpcSession:
    """A Streamable HTTP session spoken with urllib: JSON or SSE responses both read."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.session_id: str | None = None
        self.next_id = 1
        init = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "agents-harness", "version": "1"},
            },
        )
        if "error" in init:
            raise HarnessError(f"initialize failed: {init['error']}")
        self.notify("notifications/initialized")

    def _post(self, body: dict) -> tuple[int, str, str]:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        }
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self.session_id = response.headers.get("Mcp-Session-Id") or self.session_id
                return response.status, response.headers.get("Content-Type", ""), response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read().decode()

    def notify(self, method: str, params: dict | None = None) -> None:
        """Sends a notification."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        self._post(body)

    def request(self, method: str, params: dict | None = None) -> dict:
        """Sends a request; returns its JSON-RPC response object."""
        ident = self.next_id
        self.next_id += 1
        status, content_type, text = self._post({"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}})
        for message in _messages(content_type, text):
            if message.get("id") == ident:
                return message
        raise HarnessError(f"{method}: no response (HTTP {status}): {text[:500]}")


def _messages(content_type: str, text: str) -> list[dict]:
    if "text/event-stream" in content_type:
        found = []
        for event in text.split("\n\n"):
            data = "\n".join(line[5:].lstrip() for line in event.splitlines() if line.startswith("data:"))
            if data:
                found.append(json.loads(data))
        return found
    return [json.loads(text)] if text.strip() else []


def _run(exe: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(exe), *args], env=clean_env(), capture_output=True, text=True, timeout=60, check=False
    )
    if check and done.returncode != 0:
        raise HarnessError(f"`tollgate {' '.join(args)}` failed ({done.returncode}): {done.stderr}")
    return done


# ---- reading results and texts -------------------------------------------------------------


def structured(response: dict) -> Any:
    """The `structuredContent` of a successful `tools/call` response."""
    if "error" in response or response["result"].get("isError"):
        raise HarnessError(f"the call failed: {json.dumps(response)[:800]}")
    return response["result"]["structuredContent"]


def fill(value: Any, ids: Mapping[str, str]) -> Any:
    """`value` with every string's `{name}` replaced by `ids[name]` (recursively)."""
    if isinstance(value, str):
        return value.format_map(ids) if "{" in value else value
    if isinstance(value, Mapping):
        return {k: fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, ids) for v in value]
    return value


def missing_mentions(text: str, mentions: Sequence[str | re.Pattern]) -> list[str]:
    """The items of `mentions` that `text` lacks (a string: verbatim; a pattern: search)."""
    missing = []
    for item in mentions:
        if isinstance(item, re.Pattern):
            if not item.search(text):
                missing.append(f"/{item.pattern}/")
        elif item not in text:
            missing.append(item)
    return missing



# ---- the table of what each model received --------------------------------------------------


def table(observations: Path, width: int = 110) -> str:
    """A markdown table of `observe` records: one row per framework and scenario, one
    column per channel; a cell says what the model received (both transports, when they
    differ)."""
    cells: dict[str, dict[str, dict[str, dict[str, str]]]] = {}
    for line in observations.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        by_scenario = cells.setdefault(row["framework"], {})
        cell = by_scenario.setdefault(row["scenario"], {}).setdefault(row["channel"], {})
        # The seconds to wait differ from one call to the next: not a difference to show.
        cell[row["transport"]] = re.sub(r"\bwait \d+ seconds\b", "wait N seconds", row["received"])

    def shorten(text: str) -> str:
        text = " ".join(text.split()).replace("|", "\\|")
        return text if len(text) <= width else text[: width - 1] + "…"

    def render(by_transport: dict[str, str] | None) -> str:
        if not by_transport:
            return ""
        texts = set(by_transport.values())
        if len(texts) == 1:
            return shorten(texts.pop())
        return "; ".join(f"{t}: {shorten(x)}" for t, x in sorted(by_transport.items()))

    out = ["| framework | failure | jsonrpc | tool_result |", "|---|---|---|---|"]
    for framework in sorted(cells, key=lambda f: (f.startswith("fastmcp"), f)):
        for scenario, channels in cells[framework].items():
            jsonrpc, tool_result = render(channels.get("jsonrpc")), render(channels.get("tool_result"))
            out.append(f"| {framework} | {scenario} | {jsonrpc} | {tool_result} |")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "table":
        sys.exit("usage: harness.py table OBSERVATIONS.jsonl")
    print(table(Path(sys.argv[2])))
