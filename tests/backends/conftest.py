"""Fixtures for the backend tests: the interop fixtures (the binary, a fresh database,
`serve_http`, `stdio_params`), plus where the npm packages of the upstreams are.

- `npm_modules`: the `node_modules` directory `run.sh` installed (`TG_BACKENDS_NPM`).
- `everything_js`: `@modelcontextprotocol/server-everything`'s entry point
  (`node everything_js stdio|streamableHttp`).
- `prism_bin`: Stoplight Prism's command line.
- `write_config`: writes TOML text to a file beside the database and returns its path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

_INTEROP = Path(__file__).resolve().parents[1] / "interop" / "conftest.py"
_spec = importlib.util.spec_from_file_location("interop_conftest", _INTEROP)
assert _spec is not None and _spec.loader is not None
interop = importlib.util.module_from_spec(_spec)
# A dataclass looks its module up in sys.modules while it is being defined.
sys.modules[_spec.name] = interop
_spec.loader.exec_module(interop)

# The interop fixtures, under their own names.
anyio_backend = interop.anyio_backend
tollgate_bin = interop.tollgate_bin
run_tollgate = interop.run_tollgate
tollgate_db = interop.tollgate_db
admin_key = interop.admin_key
stdio_params = interop.stdio_params
serve_http = interop.serve_http
free_port = interop.free_port
clean_env = interop.clean_env
TollgateDb = interop.TollgateDb


@pytest.fixture(scope="session")
def npm_modules() -> Path:
    """The node_modules directory with the upstream servers and Prism."""
    path = Path(os.environ.get("TG_BACKENDS_NPM", "target/ci-tools/backends-npm/node_modules"))
    if not path.is_absolute():
        path = Path(__file__).resolve().parents[2] / path
    if not path.is_dir():
        pytest.fail(f"{path} does not exist: run tests/backends/run.sh (it installs the packages)")
    return path


@pytest.fixture(scope="session")
def everything_js(npm_modules: Path) -> Path:
    """server-everything's entry point."""
    return npm_modules / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


@pytest.fixture(scope="session")
def prism_bin(npm_modules: Path) -> Path:
    """Prism's command line."""
    return npm_modules / ".bin" / "prism"


@pytest.fixture
def write_config(tmp_path: Path):
    """Writes `text` to `tmp_path/name` (default `tollgate.toml`) and returns the path."""

    def write(text: str, name: str = "tollgate.toml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
