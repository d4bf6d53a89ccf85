#!/usr/bin/env bash
# tests/packaging.sh: the .deb, end to end, on a machine WITHOUT systemd running (CI).
#
# Builds the package with `cargo deb`, installs it with dpkg, and checks what an operator
# gets: the tollgate user, files and permissions, the unit (`systemd-analyze verify` when
# the tool exists), `check-config` on the installed config, and that the binary carries no
# conformance fixtures (`--conformance-pack` refused). Then it does by hand what the
# unit does: runs the installed binary as the service user with the installed config and a
# clean environment, with NOTIFY_SOCKET pointing at a listener (Type=notify: READY=1 and
# STOPPING=1), passes `healthcheck`, makes real MCP calls over HTTP with the admin key,
# takes an online backup, stops it with SIGTERM (exit 0), restores the backup, removes the
# package (data kept) and purges it (data, config and user gone).
#
# The package is built with the `dist` profile (link-time optimisation), as released;
# `TG_DEB_PROFILE=release` builds it with the quicker `release` profile instead (CI does, to
# reuse the release build it already made: the contents, scripts and unit are the same).
#
# Run as root: `bash tests/packaging.sh`. It always leaves the machine as it found it (an
# EXIT trap stops the server and purges the package) and refuses to touch a tollgate
# installation it did not make. Last line: `packaging: N passed, M failed`.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)

CARGO_DEB_VERSION=3.8.0
PKG=tollgate
CONF=/etc/tollgate/config.toml
STATE=/var/lib/tollgate
DB=$STATE/tollgate.db
UNIT=/lib/systemd/system/tollgate.service
BASE=http://127.0.0.1:8787
MARKER=$STATE/.packaging-test
SERVICE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

PASSED=0
FAILED=0
SERVER_PID=
LISTENER_PID=
WORK=$(mktemp -d /tmp/tollgate-packaging.XXXXXX)
chmod 0755 "$WORK"

pass() { PASSED=$((PASSED + 1)); echo "ok   - $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL - $1${2:+: $2}"; }
note() { echo "note - $*"; }
# check NAME CMD...: passes when CMD succeeds; its output is shown on failure.
check() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; fi
}
# expect NAME EXPECTED ACTUAL
expect() {
    if [ "$2" = "$3" ]; then pass "$1"; else fail "$1" "expected [$2], got [$3]"; fi
}
# must NAME CMD...: like check, but the test cannot go on without it.
must() {
    local name=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$name"; else fail "$name" "$out"; exit 1; fi
}
mode_of() { stat -c '%a %U:%G' "$1" 2>&1; }
installed() { dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q ' installed$'; }
known_to_dpkg() { dpkg-query -W "$PKG" >/dev/null 2>&1; }

# Runs a command as the service user, from /, with a clean environment: what systemd does.
as_service() {
    (cd / && env -i PATH="$SERVICE_PATH" setpriv --reuid=tollgate --regid=tollgate --init-groups -- "$@")
}

cleanup() {
    local status=$?
    set +e
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID"; sleep 1; kill -KILL "$SERVER_PID" 2>/dev/null
    fi
    if [ -n "$LISTENER_PID" ]; then kill "$LISTENER_PID" 2>/dev/null; wait "$LISTENER_PID" 2>/dev/null; fi
    if known_to_dpkg; then
        echo "cleanup: purging $PKG"
        dpkg -P "$PKG" >/dev/null 2>&1 || { FAILED=$((FAILED + 1)); echo "FAIL - cleanup purge"; }
    fi
    rm -rf "$WORK"
    if [ "$status" -ne 0 ] && [ "$FAILED" -eq 0 ]; then
        FAILED=1
        echo "FAIL - aborted (exit $status)"
    fi
    echo "packaging: $PASSED passed, $FAILED failed"
    if [ "$FAILED" -gt 0 ] || [ "$status" -ne 0 ]; then exit 1; fi
    exit 0
}

# --- preflight ---------------------------------------------------------------------------

if [ "$(id -u)" -ne 0 ]; then
    echo "packaging: must run as root (it installs and purges a package)" >&2
    exit 1
fi
for tool in dpkg dpkg-deb curl setpriv python3 cargo; do
    command -v "$tool" >/dev/null || { echo "packaging: $tool is required" >&2; exit 1; }
done
# Never touch an installation this test did not make; purge what an interrupted run left.
if known_to_dpkg || getent passwd tollgate >/dev/null || [ -e "$STATE" ]; then
    if [ -e "$MARKER" ]; then
        echo "packaging: purging what an interrupted run left behind"
        dpkg -P "$PKG" >/dev/null 2>&1 || true
    else
        echo "packaging: tollgate is already installed here (or its user or $STATE exist);" \
             "not touching a real installation" >&2
        exit 1
    fi
fi
if curl -s -o /dev/null --max-time 2 "$BASE/healthz"; then
    echo "packaging: something already listens on 127.0.0.1:8787; stop it first" >&2
    exit 1
fi
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------

if ! cargo deb --version >/dev/null 2>&1; then
    echo "installing cargo-deb $CARGO_DEB_VERSION"
    cargo install cargo-deb --locked --version "$CARGO_DEB_VERSION"
fi
profile=${TG_DEB_PROFILE:-dist}
echo "building the package (profile $profile)"
profile_args=()
[ "$profile" = release ] || profile_args=(--profile "$profile")
cargo deb "${profile_args[@]}" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; fail "cargo deb builds the package"; exit 1; }
DEB=$(tail -n 1 "$WORK/build.log")
must "cargo deb builds the package" test -f "$DEB"

CONTENTS=$(dpkg-deb -c "$DEB" | awk '{print $1, $2, $6}')
for entry in "-rwxr-xr-x 0/0 ./usr/bin/tollgate" \
             "-rw-r--r-- 0/0 ./lib/systemd/system/tollgate.service" \
             "-rw-r----- 0/0 ./etc/tollgate/config.toml" \
             "-rw-r--r-- 0/0 ./usr/share/doc/tollgate/README.Debian" \
             "-rw-r--r-- 0/0 ./usr/share/doc/tollgate/copyright"; do
    check "package holds ${entry##* } (${entry%% *})" grep -qxF -- "$entry" <<<"$CONTENTS"
done
expect "package name" "tollgate" "$(dpkg-deb -f "$DEB" Package)"
check "depends on libc6 and passwd" grep -Eq '^libc6 .*, passwd$' <<<"$(dpkg-deb -f "$DEB" Depends)"
expect "config is a conffile" "/etc/tollgate/config.toml" "$(dpkg-deb -I "$DEB" conffiles)"

# --- install -----------------------------------------------------------------------------

must "dpkg -i installs the package" dpkg -i "$DEB"
touch "$MARKER"
check "package is installed" installed
IFS=: read -r _ _ uid _ _ home shell < <(getent passwd tollgate)
check "system user tollgate exists" test -n "$uid"
check "tollgate is a system uid ($uid < 1000)" test "$uid" -lt 1000
expect "tollgate home" "$STATE" "$home"
expect "tollgate has no login shell" "/usr/sbin/nologin" "$shell"
check "group tollgate exists" getent group tollgate
expect "binary mode" "755 root:root" "$(mode_of /usr/bin/tollgate)"
expect "unit mode" "644 root:root" "$(mode_of "$UNIT")"
expect "config mode" "640 root:tollgate" "$(mode_of "$CONF")"
expect "state dir mode" "700 tollgate:tollgate" "$(mode_of "$STATE")"
check "unit is Type=notify" grep -qx 'Type=notify' "$UNIT"
check "unit runs the installed config" \
    grep -qx 'ExecStart=/usr/bin/tollgate --config /etc/tollgate/config.toml serve' "$UNIT"
check "unit runs as tollgate" grep -qx 'User=tollgate' "$UNIT"
check "other users cannot read the config" bash -c "! setpriv --reuid=nobody --regid=nogroup --clear-groups cat $CONF"
expect "service is not enabled on install" "" \
    "$(ls /etc/systemd/system/multi-user.target.wants/tollgate.service 2>/dev/null || true)"

if command -v systemd-analyze >/dev/null; then
    check "systemd-analyze verify $UNIT" systemd-analyze verify "$UNIT"
    if exposure=$(systemd-analyze security --offline=true "$UNIT" 2>/dev/null | sed -n 's/.*exposure level for tollgate.service: \([0-9.]*\).*/\1/p') \
        && [ -n "$exposure" ]; then
        check "systemd-analyze security exposure $exposure <= 2.0" \
            python3 -c "import sys; sys.exit(0 if float('$exposure') <= 2.0 else 1)"
    else
        note "systemd-analyze security --offline not supported here; skipped"
    fi
else
    note "systemd-analyze not installed; unit verification skipped"
fi

# --- configure and first start -----------------------------------------------------------

check "check-config accepts the installed config" as_service tollgate --config "$CONF" check-config
EFFECTIVE=$(as_service tollgate --config "$CONF" check-config 2>&1 || true)
check "installed config uses $DB" grep -qF "database = \"$DB\"" <<<"$EFFECTIVE"
check "installed config listens on loopback only" grep -qF 'listen = "127.0.0.1:8787"' <<<"$EFFECTIVE"

set +e
as_service tollgate --config "$CONF" healthcheck >"$WORK/pre.out" 2>&1
pre_status=$?
set -e
expect "healthcheck before init is refused (exit 2)" 2 "$pre_status"
check "…and says to run tollgate init" grep -q 'tollgate init' "$WORK/pre.out"

# The packaged binary is built without the conformance fixtures: asking for them is refused.
set +e
as_service tollgate --config "$CONF" stdio --conformance-pack </dev/null >"$WORK/pack.out" 2>&1
pack_status=$?
set -e
expect "--conformance-pack is refused by the packaged binary (exit 2)" 2 "$pack_status"
check "…because the build does not carry the fixtures" grep -q 'this build of tollgate does not carry it' "$WORK/pack.out"

as_service tollgate --config "$CONF" init --company "Pkg Test" --json >"$WORK/init.json" 2>"$WORK/init.err" \
    || { fail "init as the service user" "$(cat "$WORK/init.err")"; exit 1; }
pass "init as the service user"
ADMIN_KEY=$(python3 -c 'import json,sys; print(json.load(sys.stdin).get("admin_key") or "")' <"$WORK/init.json")
check "init printed an admin key" test -n "$ADMIN_KEY"
expect "database owned by tollgate" "tollgate:tollgate" "$(stat -c '%U:%G' "$DB")"

# A NOTIFY_SOCKET listener standing in for systemd.
NOTIFY_SOCK=$WORK/notify.sock
python3 - "$NOTIFY_SOCK" "$WORK/notify.log" <<'PY' &
import os, socket, sys
path, log = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
os.chmod(path, 0o777)
with open(log, "a", buffering=1) as out:
    while True:
        out.write(s.recv(4096).decode() + "\n")
PY
LISTENER_PID=$!
for _ in $(seq 50); do [ -S "$NOTIFY_SOCK" ] && break; sleep 0.1; done

(cd / && exec env -i PATH="$SERVICE_PATH" NOTIFY_SOCKET="$NOTIFY_SOCK" \
    setpriv --reuid=tollgate --regid=tollgate --init-groups -- \
    /usr/bin/tollgate --config "$CONF" serve) >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!

up=no
for _ in $(seq 150); do
    if curl -sf --max-time 1 "$BASE/healthz" >"$WORK/healthz.json"; then up=yes; break; fi
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
done
if [ "$up" != yes ]; then fail "serve answers /healthz" "$(cat "$WORK/serve.log")"; exit 1; fi
pass "serve answers /healthz"
# The schema version the binary was built with, from wherever the store declares it.
SCHEMA_VERSION=$(cat "$ROOT"/src/store/*.rs | sed -n 's/^pub const SCHEMA_VERSION: u32 = \([0-9]*\);/\1/p')
if [ -z "$SCHEMA_VERSION" ]; then fail "SCHEMA_VERSION found in src/store/"; fi
expect "/healthz body" "{\"status\":\"ok\",\"store\":\"sqlite\",\"schema_version\":$SCHEMA_VERSION}" "$(cat "$WORK/healthz.json")"
expect "server runs as tollgate" "tollgate" "$(ps -o user= -p "$SERVER_PID" | tr -d ' ')"
for _ in $(seq 50); do grep -qx 'READY=1' "$WORK/notify.log" 2>/dev/null && break; sleep 0.1; done
check "sent READY=1 to NOTIFY_SOCKET" grep -qx 'READY=1' "$WORK/notify.log"
check "healthcheck (database) as the service user" as_service tollgate --config "$CONF" healthcheck
check "healthcheck --url" as_service tollgate healthcheck --url "$BASE/healthz"
# The packaged configuration listens on loopback, where the operator's console is on.
expect "console sign-in page on loopback" "200" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$BASE/console/sign-in")"

# --- a real MCP conversation over HTTP ---------------------------------------------------

# mcp NAME BODY [extra curl args…]: POSTs to /mcp; leaves status, headers and JSON body in $WORK.
mcp() {
    local name=$1 body=$2
    shift 2
    curl -sS --max-time 10 -o "$WORK/$name.body" -D "$WORK/$name.headers" -w '%{http_code}' \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        "$@" --data "$body" "$BASE/mcp" >"$WORK/$name.status"
    # An SSE answer carries the JSON-RPC message on its data: line.
    if grep -q '^data:' "$WORK/$name.body"; then
        sed -n 's/^data: \{0,1\}//p' "$WORK/$name.body" | tail -n 1 >"$WORK/$name.json"
    else
        cp "$WORK/$name.body" "$WORK/$name.json"
    fi
}
# jq-less JSON lookup: json FILE 'python expression over d'
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>&1; }

# A session belongs to the credential of its initialize: the client sends its key from the start.
mcp initialize '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"packaging-test","version":"0"}}}' \
    -H "Authorization: Bearer $ADMIN_KEY"
expect "initialize: HTTP 200" 200 "$(cat "$WORK/initialize.status")"
expect "initialize: negotiated 2025-11-25" 2025-11-25 "$(json "$WORK/initialize.json" 'd["result"]["protocolVersion"]')"
SESSION=$(sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii][Dd]: *\([^[:space:]]*\).*/\1/p' "$WORK/initialize.headers")
check "initialize: Mcp-Session-Id header" test -n "$SESSION"
SESSION_HEADERS=(-H "Mcp-Session-Id: $SESSION" -H 'MCP-Protocol-Version: 2025-11-25')

mcp initialized '{"jsonrpc":"2.0","method":"notifications/initialized"}' "${SESSION_HEADERS[@]}" \
    -H "Authorization: Bearer $ADMIN_KEY"
expect "notifications/initialized: HTTP 202" 202 "$(cat "$WORK/initialized.status")"

mcp list '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}' \
    "${SESSION_HEADERS[@]}" -H "Authorization: Bearer $ADMIN_KEY"
expect "tools/list with the admin key: HTTP 200" 200 "$(cat "$WORK/list.status")"
expect "tools/list: a JSON-RPC result with a tools array" True \
    "$(json "$WORK/list.json" 'd["id"] == 2 and isinstance(d["result"]["tools"], list)')"
note "tools listed: $(json "$WORK/list.json" '", ".join(t["name"] for t in d["result"]["tools"]) or "(none)"')"
expect "tools/list: no conformance fixture is served" False \
    "$(json "$WORK/list.json" 'any(t["name"].startswith("test_") for t in d["result"]["tools"])')"
expect "initialize: nothing to subscribe to in the packaged server" False \
    "$(json "$WORK/initialize.json" '"subscribe" in d["result"]["capabilities"]["resources"]')"
expect "initialize: no logging announced (no packaged tool logs)" False \
    "$(json "$WORK/initialize.json" '"logging" in d["result"]["capabilities"]')"

mcp call '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}' \
    "${SESSION_HEADERS[@]}" -H 'Authorization: Bearer tg_not_a_real_key'
expect "tools/call with a bad key: HTTP 401" 401 "$(cat "$WORK/call.status")"
expect "tools/call with a bad key: -32001 invalid_token" "-32001 invalid_token" \
    "$(json "$WORK/call.json" 'str(d["error"]["code"]) + " " + d["error"]["message"]')"

ADMIN=(-H "Authorization: Bearer $ADMIN_KEY")
# call ID TOOL ARGS: a tools/call with the admin key that must succeed.
call() {
    mcp "call$1" "{\"jsonrpc\":\"2.0\",\"id\":$1,\"method\":\"tools/call\",\"params\":{\"name\":\"$2\",\"arguments\":$3}}" \
        "${SESSION_HEADERS[@]}" "${ADMIN[@]}"
    expect "tools/call $2 $3: a successful result" "200 True" "$(cat "$WORK/call$1.status") $(json "$WORK/call$1.json" \
        '"error" not in d and d["id"] == '"$1"' and d["result"].get("isError") is not True')"
}
# Rows of the clients table, read with plain SQLite.
client_names() {
    python3 -c 'import sqlite3,sys; print(",".join(r[0] for r in sqlite3.connect(sys.argv[1]).execute("SELECT name FROM clients ORDER BY name")))' "$1" 2>&1
}

# --- online backup, stop, restore --------------------------------------------------------

call 10 create_client '{"name":"Before Backup SL"}'
BACKUP=$WORK/backup.db
check "backup while the server runs" tollgate --config "$CONF" backup "$BACKUP"
call 11 create_client '{"name":"After Backup SL"}'
call 12 search_clients '{"query":"Backup"}'
check "search_clients finds both clients" grep -q 'After Backup SL' "$WORK/call12.json"
expect "the backup holds the call made before it" "Before Backup SL" "$(client_names "$BACKUP")"
expect "backup file is private" "600 root:root" "$(mode_of "$BACKUP")"
expect "backup left every state file owned by tollgate" "" \
    "$(find "$STATE" -mindepth 1 ! -user tollgate ! -name .packaging-test -printf '%p ' )"

kill -TERM "$SERVER_PID"
set +e
wait "$SERVER_PID"
serve_status=$?
set -e
SERVER_PID=
expect "SIGTERM: serve exits 0" 0 "$serve_status"
for _ in $(seq 20); do grep -qx 'STOPPING=1' "$WORK/notify.log" 2>/dev/null && break; sleep 0.1; done
check "sent STOPPING=1 to NOTIFY_SOCKET" grep -qx 'STOPPING=1' "$WORK/notify.log"

check "restore --force over the stopped service's database" \
    tollgate --config "$CONF" restore "$BACKUP" --force
expect "restored database owned by tollgate" "600 tollgate:tollgate" "$(mode_of "$DB")"
expect "restored database is the backup" "Before Backup SL" "$(client_names "$DB")"
check "healthcheck after restore" as_service tollgate --config "$CONF" healthcheck

# --- remove keeps data, purge deletes it -------------------------------------------------

check "dpkg -r removes the package" dpkg -r "$PKG"
expect "package state after remove" "deinstall ok config-files" "$(dpkg-query -W -f='${Status}' "$PKG")"
check "binary gone after remove" test ! -e /usr/bin/tollgate
check "unit gone after remove" test ! -e "$UNIT"
check "database kept after remove" test -s "$DB"
check "config kept after remove" test -f "$CONF"
check "user kept after remove" getent passwd tollgate

check "dpkg -P purges the package" dpkg -P "$PKG"
check "package unknown after purge" bash -c "! dpkg-query -W $PKG"
check "state dir gone after purge" test ! -e "$STATE"
check "config dir gone after purge" test ! -e /etc/tollgate
check "user gone after purge" bash -c "! getent passwd tollgate"
check "group gone after purge" bash -c "! getent group tollgate"
