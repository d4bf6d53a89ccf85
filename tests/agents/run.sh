#!/usr/bin/env bash
# The agent-framework tests: each framework's own agent loop, driven by a scripted model,
# against the real binary, over HTTP and stdio, in both guard channels.
#
#   TG_BIN=target/debug/tollgate bash tests/agents/run.sh
#
# The frameworks need two MCP SDK generations, so two venvs under $TG_TOOLS (default
# target/ci-tools), made on the first run and reused after (reinstalled when their
# requirements file changes):
#   agents-sdk2/  mcp 2.x: openai-agents, pydantic-ai, llama-index-tools-mcp, fastmcp
#   agents-sdk1/  mcp 1.x: langchain-mcp-adapters, mcp-use
# Both groups run at once (they wait on the server more than on the CPU); each one's
# output is printed when it ends. At the end, a table of what each framework's model
# received for each failure kind and channel (from $TG_AGENTS_OBSERVATIONS).
# Build the binary first: cargo build --bins --features conformance-pack
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tools="${TG_TOOLS:-$root/target/ci-tools}"
case "$tools" in /*) ;; *) tools="$root/$tools" ;; esac
bin="${TG_BIN:-target/debug/tollgate}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [ ! -x "$bin" ]; then
    echo "tests/agents: $bin is not an executable; build it with cargo build --bins --features conformance-pack (or set TG_BIN)" >&2
    exit 2
fi
here="$root/tests/agents"
mkdir -p "$tools"

# The frameworks must not phone home, and the server refuses unknown TOLLGATE_* variables.
export MCP_USE_ANONYMIZED_TELEMETRY=false OPENAI_AGENTS_DISABLE_TRACING=1 LANGSMITH_TRACING=false DO_NOT_TRACK=1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^TOLLGATE_' || true)
export TG_BIN="$bin"

# venv NAME REQUIREMENTS: creates or reuses $tools/NAME with exactly REQUIREMENTS installed.
venv() {
    local dir="$tools/$1" requirements="$here/$2" stamp
    stamp="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [ ! -x "$dir/bin/python" ]; then
        python3 -m venv "$dir"
    fi
    if [ "$(cat "$dir/.requirements-sha256" 2>/dev/null || true)" != "$stamp" ]; then
        "$dir/bin/pip" install --quiet -r "$requirements"
        echo "$stamp" > "$dir/.requirements-sha256"
    fi
}

# Both at once: a first install is mostly waiting on downloads.
venv agents-sdk2 requirements-sdk2.txt > "$tools/agents-sdk2-install.log" 2>&1 &
install2=$!
venv agents-sdk1 requirements-sdk1.txt > "$tools/agents-sdk1-install.log" 2>&1 &
install1=$!
for job in "$install2:agents-sdk2" "$install1:agents-sdk1"; do
    if ! wait "${job%%:*}"; then
        cat "$tools/${job#*:}-install.log" >&2
        echo "tests/agents: could not install the ${job#*:} venv" >&2
        exit 2
    fi
done

observations="$tools/agents-observations.jsonl"
: > "$observations"
export TG_AGENTS_OBSERVATIONS="$observations"

# group NAME FILES…: runs pytest on FILES with the venv NAME; output in $tools/NAME.log.
group() {
    local name="$1"
    shift
    (cd "$here" && "$tools/$name/bin/python" -m pytest -q -p no:cacheprovider \
        -W ignore::DeprecationWarning --tb=short --rootdir "$here" "$@") > "$tools/$name.log" 2>&1
}

started=$SECONDS
group agents-sdk2 test_openai_agents.py test_pydantic_ai.py test_llama_index.py test_fastmcp.py &
sdk2=$!
group agents-sdk1 test_langchain.py test_mcp_use.py &
sdk1=$!
status=0
wait "$sdk2" || status=1
printf '\n==> agents-sdk2 (mcp 2.x)\n'
cat "$tools/agents-sdk2.log"
wait "$sdk1" || status=1
printf '\n==> agents-sdk1 (mcp 1.x)\n'
cat "$tools/agents-sdk1.log"

printf '\n==> what the model receives (%s)\n' "$observations"
"$tools/agents-sdk2/bin/python" "$here/harness.py" table "$observations" || true
printf '\ntests/agents: %ss\n' "$((SECONDS - started))"
exit "$status"
