"""Fixtures of the agent-framework tests (both venvs: nothing here imports an MCP SDK).

- `tollgate` (module scope): a `harness.Tollgate` — a fresh demo database prepared for every
  scenario of `scenarios.py` and a running `tollgate serve` on a free loopback port. See
  `harness.py` for its methods (`token`, `http_url`, `headers`, `stdio`, `run`, `call`, …).
- `anyio_backend`: the async tests run on asyncio.

The server refuses unknown `TOLLGATE_*` variables, and some frameworks start a stdio
server with this process's whole environment, so they are removed from it here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Received, Tollgate  # noqa: E402

for _name in [name for name in os.environ if name.startswith("TOLLGATE_")]:
    del os.environ[_name]

# Frameworks under test must not phone home.
os.environ.update(
    {
        "MCP_USE_ANONYMIZED_TELEMETRY": "false",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "LANGSMITH_TRACING": "false",
        "DO_NOT_TRACK": "1",
    }
)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """The framework tests run on asyncio."""
    return "asyncio"


@pytest.fixture(scope="module")
def tollgate(tmp_path_factory: pytest.TempPathFactory):
    """A prepared database and a running server, shared by one test module."""
    server = Tollgate.start(tmp_path_factory.mktemp("tollgate"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def observe():
    """Records what a framework's model received, for the table of the README.

    `observe(framework, scenario, channel, transport, received)` appends one JSON line to
    the file named by `TG_AGENTS_OBSERVATIONS` (nothing when it is unset). Call it before
    asserting, so failing cases are recorded too.
    """
    path = os.environ.get("TG_AGENTS_OBSERVATIONS")

    def record(framework: str, scenario, channel: str, transport: str, received: Received) -> None:
        if not path:
            return
        row = {
            "framework": framework,
            "scenario": getattr(scenario, "name", str(scenario)),
            "channel": channel,
            "transport": transport,
            "raised": type(received.raised).__name__ if received.raised is not None else None,
            "received": received.describe(),
        }
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")

    return record
