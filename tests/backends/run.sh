#!/usr/bin/env bash
# Backends nobody here wrote, behind tollgate: upstream MCP servers
# (@modelcontextprotocol/server-everything from npm, a FastMCP server from PyPI) and REST
# backends (Stoplight Prism serving a public OpenAPI document, and a FastAPI backend of the
# tests' own), driven through the official Python SDK.
#
#   TG_BIN=target/debug/tollgate TG_TOOLS=target/ci-tools bash tests/backends/run.sh
#
# Installs what it needs under $TG_TOOLS (a venv and npm packages) once; a second run reuses
# it. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/../.."
tools="${TG_TOOLS:-$PWD/target/ci-tools}"
mkdir -p "$tools"
venv="$tools/backends-venv"
npm_dir="$tools/backends-npm"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/backends/requirements.txt

if [ ! -f "$npm_dir/.installed-v1" ]; then
    mkdir -p "$npm_dir"
    npm install --silent --no-save --no-audit --no-fund --prefix "$npm_dir" \
        @modelcontextprotocol/server-everything@2026.8.31 @stoplight/prism-cli@5.16.0
    touch "$npm_dir/.installed-v1"
fi

TG_BIN="${TG_BIN:-$PWD/target/debug/tollgate}" TG_BACKENDS_NPM="$npm_dir/node_modules" \
    "$venv/bin/python" -m pytest tests/backends -q -p no:cacheprovider "$@"
