#!/usr/bin/env bash
# Runs the official MCP conformance suite against `tollgate serve --conformance-pack`,
# once per frozen requirement set (2025-11-25 and 2026-07-28).
#
# Usage: tests/conformance/run.sh <tollgate binary> <conformance binary> [output dir]
# The tollgate binary must carry the fixtures: build it with `--features conformance-pack`.
#
# The suite sends no credential, so the server runs in development mode: requests without
# a token run as a credential created here (loopback only). Every scored scenario must
# pass; scenarios listed in expected-failures.yml (with the reason) are tolerated.
set -euo pipefail

bin=$1
suite=$2
out=${3:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

db="$work/conformance.db"
if ! TOLLGATE_CONFORMANCE_PACK=true "$bin" --database "$db" check-config > /dev/null 2> "$work/pack.txt"; then
    cat "$work/pack.txt"
    echo "conformance: $bin has no conformance pack; build it with --features conformance-pack"
    exit 1
fi
"$bin" --database "$db" init --company "Conformance" --plan enterprise --json > "$work/init.json"
key_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["admin_key_id"])' "$work/init.json")
# The suite calls the slow fixtures many times a minute; lift this credential's limits.
for category in read write destructive send generate; do
    "$bin" --database "$db" limits set --credential "$key_id" --category "$category" --per-minute 100000 > /dev/null
done

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" --database "$db" serve --conformance-pack --listen "127.0.0.1:$port" \
    --dev-credential "$key_id" 2> "$work/serve.log" &
pid=$!
for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/healthz" > /dev/null && break
    sleep 0.1
done

status=0
for requirements in 2025-11-25 2026-07-28; do
    echo "== conformance --requirements $requirements"
    if ! "$suite" server --url "http://127.0.0.1:$port/mcp" --requirements "$requirements" \
        --expected-failures "$here/expected-failures.yml" -o "$out/$requirements" > "$work/$requirements.txt" 2>&1; then
        status=1
    fi
    # The suite's own summary counts unscored scenarios (extensions, pending) too; its
    # exit code, checked above, is what decides. Relabel its total so it is not mistaken
    # for the verdict.
    sed -n '/=== SUMMARY ===/,$p' "$work/$requirements.txt" |
        sed -e 's/^Total: /suite checks, scored and unscored: /'
done
if [ "$status" -ne 0 ]; then
    echo "conformance failed; server log:"
    tail -50 "$work/serve.log"
else
    echo "conformance: every scored scenario of 2025-11-25 and 2026-07-28 passes"
fi
exit "$status"
