"""Shared fixtures for the interop tests: real MCP clients, nobody here wrote, against the
real `tollgate` binary.

- `tollgate_bin`: the binary under test (`TG_BIN`, default `target/debug/tollgate` under
  the repository root); build it first with `cargo build`.
- `tollgate_db`: a fresh database made with `tollgate --database DB init --json`
  (a `TollgateDb` with `.path` and `.admin_key`); `admin_key` is that key alone.
- `run_tollgate`: runs a `tollgate` command line and returns the completed process.
- `stdio_params`: builds the `StdioServerParameters` that start `tollgate stdio` on a
  database with the credential in `TOLLGATE_TOKEN`.
- `serve_http`: starts `tollgate serve` on a free loopback port (or one given; optionally
  with a config file) and returns an `HttpServer` with its MCP `url` once `/healthz` answers.
- `oidc_provider`: runs the test OpenID Provider (`tests/idp/provider.mjs`, the npm package
  `oidc-provider`) for the length of a `with` block; `count_rows` counts a table's rows in a
  test database (SQLite or PostgreSQL).

The server refuses unknown `TOLLGATE_*` variables, so every process started here gets an
environment stripped of them; only `TOLLGATE_TOKEN`, `TOLLGATE_TOKEN_FILE` and
`TOLLGATE_CONFIG` are ever set, and only when a test asks for them.
"""

from __future__ import annotations

import json
import queue
import secrets
import os
import shutil
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parents[2]

# The only TOLLGATE_* variables a test may pass to the server.
ALLOWED_TOLLGATE_VARS = frozenset({"TOLLGATE_TOKEN", "TOLLGATE_TOKEN_FILE", "TOLLGATE_CONFIG"})


@dataclass(frozen=True)
class TollgateDb:
    """A scratch database created by `tollgate init --json`."""

    path: Path | str
    admin_key: str | None
    init_output: dict
    workdir: Path


def _binary() -> Path:
    configured = os.environ.get("TG_BIN", "target/debug/tollgate")
    path = Path(configured)
    return path if path.is_absolute() else REPO_ROOT / path


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any TOLLGATE_* variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    env.setdefault("RUST_LOG", "warn")
    # TG_FRONT_DOOR=on replays the suite with the OAuth front door on: a client with a key
    # or a provider's token must see exactly what it saw without it.
    if os.environ.get("TG_FRONT_DOOR") == "on":
        env["TOLLGATE_OAUTH_SERVER_ENABLED"] = "true"
    for name, value in (extra or {}).items():
        if name.startswith("TOLLGATE_") and name not in ALLOWED_TOLLGATE_VARS:
            raise ValueError(f"{name} is not a variable tests may pass to tollgate")
        env[name] = value
    return env


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The interop tests run on asyncio (the `mcp` SDK's default)."""
    return "asyncio"


@pytest.fixture(scope="session")
def tollgate_bin() -> Path:
    """The `tollgate` binary under test."""
    path = _binary()
    if not path.is_file():
        pytest.fail(f"{path} does not exist: run `cargo build` first (or set TG_BIN)")
    return path


@pytest.fixture
def run_tollgate(tollgate_bin: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Runs `tollgate ARGS…` with a clean environment; returns the completed process."""

    def run(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(tollgate_bin), *args],
            env=clean_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run


def _psql(server: str, statement: str) -> None:
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", f"{server}/postgres", "-c", statement],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def tollgate_db(tmp_path: Path, run_tollgate):
    """A fresh database created by `tollgate init --json`: a file in a temporary directory,
    or, when `TG_POSTGRES` names a PostgreSQL server (a URL without a database), a fresh
    database on it, dropped afterwards."""
    server = os.environ.get("TG_POSTGRES", "").rstrip("/")
    name = None
    if server:
        name = f"tg_interop_{secrets.token_hex(6)}"
        _psql(server, f"CREATE DATABASE {name}")
        path = f"{server}/{name}"
    else:
        path = tmp_path / "tollgate.db"
    done = run_tollgate("--database", str(path), "init", "--json", "--company", "Interop Co")
    assert done.returncode == 0, f"tollgate init failed ({done.returncode}): {done.stderr}"
    printed = json.loads(done.stdout)
    yield TollgateDb(path=path, admin_key=printed.get("admin_key"), init_output=printed, workdir=tmp_path)
    if name is not None:
        _psql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def admin_key(tollgate_db: TollgateDb) -> str | None:
    """The `admin_key` printed by `tollgate init --json` for `tollgate_db`."""
    return tollgate_db.admin_key


@pytest.fixture
def stdio_params(tollgate_bin: Path) -> Callable[..., StdioServerParameters]:
    """Builds parameters that start `tollgate --database DB stdio EXTRA…`.

    `token` defaults to the database's admin key; pass `token=None` for none. `env` adds
    variables (only TOLLGATE_TOKEN / TOLLGATE_TOKEN_FILE / TOLLGATE_CONFIG among TOLLGATE_*).
    The SDK itself starts the child with only a safe list of inherited variables plus these.
    """
    default = object()

    def build(
        db: TollgateDb,
        *extra: str,
        token: str | None | object = default,
        env: Mapping[str, str] | None = None,
    ) -> StdioServerParameters:
        chosen = db.admin_key if token is default else token
        variables: dict[str, str] = {"RUST_LOG": "warn"}
        if chosen is not None:
            variables["TOLLGATE_TOKEN"] = str(chosen)
        for name, value in (env or {}).items():
            if name.startswith("TOLLGATE_") and name not in ALLOWED_TOLLGATE_VARS:
                raise ValueError(f"{name} is not a variable tests may pass to tollgate")
            variables[name] = value
        return StdioServerParameters(
            command=str(tollgate_bin),
            args=["--database", str(db.path), "stdio", *extra],
            env=variables,
            cwd=str(db.workdir),
        )

    return build


# ---- HTTP: `tollgate serve` on a free loopback port ---------------------------------------


@dataclass(frozen=True)
class HttpServer:
    """A running `tollgate serve`: `url` is its MCP endpoint, `base` its origin."""

    url: str
    base: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        """What the server wrote to stderr so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_healthy(server: HttpServer, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            pytest.fail(f"tollgate serve exited with {server.process.returncode}: {server.log_text()}")
        try:
            with urllib.request.urlopen(f"{server.base}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"tollgate serve did not become healthy: {server.log_text()}")
        time.sleep(0.05)


@pytest.fixture
def serve_http(tollgate_bin: Path, tmp_path: Path):
    """Starts `tollgate --database DB serve --listen 127.0.0.1:<port> EXTRA…` (`port`: a free
    one unless given, e.g. one an identity provider already knows tollgate's callback on).

    `config` is TOML text written to a file and passed with `--config` (the way to set
    keys such as `[http] error_status = "semantic"` without TOLLGATE_* variables); `env`
    adds variables (e.g. `OTEL_*`; among TOLLGATE_* only those `clean_env` allows). Returns
    an `HttpServer` once `/healthz` answers; every server is stopped at teardown.
    """
    started: list[HttpServer] = []

    def start(
        db: TollgateDb,
        *extra: str,
        config: str | None = None,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> HttpServer:
        port = port or free_port()
        args = [str(tollgate_bin), "--database", str(db.path)]
        if config is not None:
            config_file = tmp_path / f"serve-{port}.toml"
            config_file.write_text(config)
            args += ["--config", str(config_file)]
        args += ["serve", "--listen", f"127.0.0.1:{port}", *extra]
        log = tmp_path / f"serve-{port}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                args, env=clean_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink
            )
        base = f"http://127.0.0.1:{port}"
        server = HttpServer(url=f"{base}/mcp", base=base, process=process, log=log)
        started.append(server)
        _wait_healthy(server)
        return server

    yield start
    for server in started:
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def _count_rows(db: TollgateDb, table: str) -> int:
    """The number of rows of `table` in the test database (a SQLite file or, under
    `TG_POSTGRES`, a PostgreSQL database), read directly."""
    if str(db.path).startswith("postgres"):
        done = subprocess.run(
            ["psql", "-qtA", "-v", "ON_ERROR_STOP=1", str(db.path), "-c", f"SELECT count(*) FROM {table}"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return int(done.stdout.strip())
    with sqlite3.connect(f"file:{db.path}?mode=ro", uri=True) as connection:
        return connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def count_rows() -> Callable[[TollgateDb, str], int]:
    """`count_rows(db, table)`: how many rows `table` holds in the test database `db`."""
    return _count_rows


# ---- the test OpenID Provider: tests/idp/provider.mjs ------------------------------------

# How long the provider may take to print its ready line (Node loads oidc-provider first).
PROVIDER_START_SECS = 30


def idp_modules_dir() -> Path:
    """The `node_modules` holding the provider's packages: `TG_IDP_MODULES`, else
    `tests/idp/node_modules` (installed by `npm ci --prefix tests/idp`)."""
    configured = os.environ.get("TG_IDP_MODULES")
    modules = Path(configured) if configured else REPO_ROOT / "tests" / "idp" / "node_modules"
    if not all((modules / package / "package.json").is_file() for package in ("oidc-provider", "jose")):
        pytest.fail(
            f"the test OpenID Provider's npm packages are not in {modules}: run "
            "`npm ci --prefix tests/idp` (or set TG_IDP_MODULES to a node_modules directory holding them)"
        )
    return modules


def _read_line_within(stream: Any, seconds: float) -> str | None:
    """The next line of `stream`, or None when none comes within `seconds`."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=seconds)
    except queue.Empty:
        return None


@contextmanager
def _run_oidc_provider(work: Path, clients: list[dict], accounts: dict | None = None) -> Iterator[dict[str, Any]]:
    """`provider.mjs serve` in `work` on a free loopback port with a fresh RS256 key, these
    `clients` and `accounts` (tests/idp/README.md describes both); yields its ready line (the
    `issuer` and its endpoints). Node is `TG_NODE`, else `node`. Stopped on leaving: its
    standard input closed, then killed if need be."""
    node = os.environ.get("TG_NODE", "node")
    shutil.copy(REPO_ROOT / "tests" / "idp" / "provider.mjs", work / "provider.mjs")
    (work / "node_modules").symlink_to(idp_modules_dir())
    subprocess.run(
        [node, "provider.mjs", "newkeys", "keys.json", "RS256"], cwd=work, check=True, capture_output=True, timeout=60
    )
    config = {"keys": "keys.json", "port": 0, "clients": clients, "accounts": accounts or {}}
    (work / "config.json").write_text(json.dumps(config))
    log = work / "provider.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [node, "provider.mjs", "serve", "config.json"],
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sink,
            text=True,
        )
    try:
        line = _read_line_within(process.stdout, PROVIDER_START_SECS)
        if not line:
            pytest.fail(f"the test provider did not start: {log.read_text(errors='replace')}")
        yield json.loads(line)
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


@pytest.fixture(scope="session")
def oidc_provider() -> Callable[..., AbstractContextManager[dict[str, Any]]]:
    """`with oidc_provider(work, clients, accounts) as ready:` runs the test OpenID Provider
    in the folder `work` for the length of the block (see `_run_oidc_provider`)."""
    return _run_oidc_provider
