"""Shared fixtures for the interop tests: real MCP clients, nobody here wrote, against the
real `tollgate` binary.

- `tollgate_bin`: the binary under test (`TG_BIN`, default `target/debug/tollgate` under
  the repository root); build it first with `cargo build`.
- `tollgate_db`: a fresh database made with `tollgate --database DB init --json`
  (a `TollgateDb` with `.path` and `.admin_key`); `admin_key` is that key alone.
- `run_tollgate`: runs a `tollgate` command line and returns the completed process.
- `stdio_params`: builds the `StdioServerParameters` that start `tollgate stdio` on a
  database with the credential in `TOLLGATE_TOKEN`.
- `serve_http`: starts `tollgate serve` on a free loopback port (optionally with a config
  file) and returns an `HttpServer` with its MCP `url` once `/healthz` answers.

The server refuses unknown `TOLLGATE_*` variables, so every process started here gets an
environment stripped of them; only `TOLLGATE_TOKEN`, `TOLLGATE_TOKEN_FILE` and
`TOLLGATE_CONFIG` are ever set, and only when a test asks for them.
"""

from __future__ import annotations

import json
import secrets
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

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
    """Starts `tollgate --database DB serve --listen 127.0.0.1:<free port> EXTRA…`.

    `config` is TOML text written to a file and passed with `--config` (the way to set
    keys such as `[http] error_status = "semantic"` without TOLLGATE_* variables). Returns
    an `HttpServer` once `/healthz` answers; every server is stopped at teardown.
    """
    started: list[HttpServer] = []

    def start(db: TollgateDb, *extra: str, config: str | None = None) -> HttpServer:
        port = free_port()
        args = [str(tollgate_bin), "--database", str(db.path)]
        if config is not None:
            config_file = tmp_path / f"serve-{port}.toml"
            config_file.write_text(config)
            args += ["--config", str(config_file)]
        args += ["serve", "--listen", f"127.0.0.1:{port}", *extra]
        log = tmp_path / f"serve-{port}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                args, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink
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
