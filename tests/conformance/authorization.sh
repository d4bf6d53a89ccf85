#!/usr/bin/env bash
# Runs the official MCP conformance suite's authorization-server checks (its `authorization`
# command: `authorization-server-metadata-endpoint` and `authorization-code-grant`) against
# tollgate's OAuth front door (`[oauth_server] enabled = true`).
#
# Usage: tests/conformance/authorization.sh <tollgate binary> <conformance binary> [output dir]
# The suite's results go to <output dir>/authorization (replaced on every run).
#
# The suite plays the MCP host: it reads the metadata, builds an authorization request for a
# client registered here (`POST /oauth/register`, a public client whose redirect URI is
# http://127.0.0.1/callback: on loopback any port matches) and waits for the browser to come
# back to its callback server. The person's browser is played with curl: tollgate's sign-in
# page, a personal key posted, the consent page, "allow" posted, and the redirect followed to
# the suite's callback; the suite then exchanges the code and checks the token response.
# Every check of both scenarios must be SUCCESS: a WARNING fails too (the only one the suite
# can give is for client_id_metadata_document_supported not being true, which it is).
set -euo pipefail

bin=$1
suite=$2
out=${3:-$(mktemp -d)}
work=$(mktemp -d)
# The suite's bound; alone it would wait five minutes for the browser.
deadline_secs=120
pid=
suite_pid=
cleanup() {
    [ -n "$suite_pid" ] && kill "$suite_pid" 2>/dev/null && wait "$suite_pid" 2>/dev/null
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "authorization conformance: $*"
    if [ -f "$work/suite.txt" ]; then
        echo "--- the suite's output"
        cat "$work/suite.txt"
    fi
    if [ -f "$work/serve.log" ]; then
        echo "--- the server's log"
        tail -50 "$work/serve.log"
    fi
    exit 1
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Field $2 of the JSON file $1.
json_field() {
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"
}

# The value of hidden field $2 in the page $1.
hidden() {
    python3 - "$1" "$2" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
found = re.search(r'name="%s" value="([^"]*)"' % re.escape(sys.argv[2]), page)
if not found:
    sys.exit(f"no field {sys.argv[2]} in {sys.argv[1]}")
print(html.unescape(found.group(1)))
PY
}

db="$work/tollgate.db"
"$bin" --database "$db" init --company "Conformance" --json > "$work/init.json" 2> "$work/init.log" ||
    fail "tollgate init: $(cat "$work/init.log")"
# The person who signs in: a personal key (no identity provider is configured).
"$bin" --database "$db" key create --name "Ana" --scopes invoices:read --json > "$work/key.json" ||
    fail "tollgate key create failed"
key=$(json_field "$work/key.json" token)

port=$(free_port)
issuer="http://127.0.0.1:$port"
TOLLGATE_OAUTH_SERVER_ENABLED=true "$bin" --database "$db" serve --listen "127.0.0.1:$port" \
    2> "$work/serve.log" &
pid=$!
for _ in $(seq 1 100); do
    curl -sf "$issuer/healthz" > /dev/null && break
    sleep 0.1
done
curl -sf "$issuer/healthz" > /dev/null || fail "tollgate did not start"

# A public client, registered as a host registers itself.
curl -sf --max-time 10 -H 'Content-Type: application/json' -o "$work/client.json" \
    -d '{"client_name": "MCP conformance suite", "redirect_uris": ["http://127.0.0.1/callback"],
         "token_endpoint_auth_method": "none",
         "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]}' \
    "$issuer/oauth/register" || fail "the registration was refused"
client_id=$(json_field "$work/client.json" client_id)

callback_port=$(free_port)
timeout "$deadline_secs" "$suite" authorization --url "$issuer" --client-id "$client_id" \
    --resource "$issuer/mcp" --port "$callback_port" -o "$work/results" > "$work/suite.txt" 2>&1 &
suite_pid=$!

# The suite prints the authorization URL once the metadata scenario is done.
url=
for _ in $(seq 1 600); do
    url=$(grep -m1 "^$issuer/oauth/authorize?" "$work/suite.txt" || true)
    [ -n "$url" ] && break
    kill -0 "$suite_pid" 2>/dev/null || fail "the suite ended before asking for a sign-in"
    sleep 0.1
done
[ -n "$url" ] || fail "the suite printed no authorization URL"

# The person's browser: the sign-in page, the key, the consent page, "allow", the way back.
jar="$work/cookies"
browse() { curl -s --max-time 10 -b "$jar" -c "$jar" "$@"; }
status=$(browse -o "$work/sign-in.html" -w '%{http_code}' "$url") || fail "GET $url failed"
[ "$status" = 200 ] || fail "the authorization endpoint answered $status: $(cat "$work/sign-in.html")"
status=$(browse -o "$work/consent.html" -w '%{http_code}' -H "Origin: $issuer" \
    --data-urlencode "request=$(hidden "$work/sign-in.html" request)" \
    --data-urlencode "csrf=$(hidden "$work/sign-in.html" csrf)" \
    --data-urlencode "key=$key" "$issuer/oauth/sign-in") || fail "the sign-in post failed"
[ "$status" = 200 ] || fail "the sign-in answered $status: $(cat "$work/consent.html")"
location=$(browse -o /dev/null -w '%{redirect_url}' -H "Origin: $issuer" \
    --data-urlencode "request=$(hidden "$work/consent.html" request)" \
    --data-urlencode "csrf=$(hidden "$work/consent.html" csrf)" \
    --data-urlencode "decision=allow" "$issuer/oauth/consent") || fail "the consent post failed"
case "$location" in
    "http://127.0.0.1:$callback_port/callback?"*) ;;
    *) fail "the consent did not send the browser back to the suite: '$location'" ;;
esac
browse -o /dev/null "$location" || fail "the suite's callback server did not answer"

suite_status=0
wait "$suite_pid" || suite_status=$?
suite_pid=
sed -n '/=== SUMMARY ===/,$p' "$work/suite.txt" |
    sed -e 's/^Total: /suite checks: /'
[ "$suite_status" -eq 0 ] || fail "the suite exited with $suite_status"

mkdir -p "$out"
rm -rf "$out/authorization"
cp -r "$work/results" "$out/authorization"
# Both scenarios ran once, and every check of each is SUCCESS. The suite names each result
# folder authorization-server-<scenario>-<time>.
python3 - "$out/authorization" <<'PY' || fail "a check is not SUCCESS"
import json, pathlib, sys
expected = ["authorization-server-metadata-endpoint", "authorization-code-grant"]
seen, bad = [], []
for path in sorted(pathlib.Path(sys.argv[1]).glob("*/checks.json")):
    scenario = next((name for name in expected if f"-{name}-" in path.parent.name), path.parent.name)
    seen.append(scenario)
    for check in json.loads(path.read_text()):
        line = f'{scenario}: {check["id"]} {check["status"]}'
        print("  " + line)
        if check["status"] != "SUCCESS":
            bad.append(f'{line} {check.get("errorMessage", "")}')
if sorted(seen) != sorted(expected):
    bad.append(f"scenarios run: {seen}, expected each of {expected} once")
for line in bad:
    print("  not passed: " + line)
sys.exit(1 if bad else 0)
PY
echo "authorization conformance: every check of both scenarios passes"
