#!/usr/bin/env bash
# The operator console in a real browser: headless Chromium (Debian's package) driven by
# playwright-core, against one `tollgate serve` on a free loopback port with a fresh
# database (demo data, the admin key `tollgate init` prints) and one OpenAPI backend, `shop`
# (shop.openapi.json, served by backend.mjs on another free loopback port). Two users of an
# identity provider are written into the database before the server starts (with python3's
# sqlite3: no provider runs here), with two calls of the first in the audit log, for
# users.test.mjs. The OAuth front door is on ([oauth_server]), and a second server on the same
# database speaks Spanish (`locale = "es"`), for oauth.test.mjs: a person signs an
# application in with a personal key (Pablo Ruiz's, made here) in both languages, and the
# operator revokes the grant on the console's Grants page.
#
#   TG_BIN=target/debug/tollgate TG_TOOLS=target/ci-tools bash tests/console/run.sh
#
# Installs Chromium from Debian's packages when /usr/bin/chromium is missing (as root;
# otherwise it says what to run), and playwright-core from tests/console/package-lock.json
# under $TG_TOOLS/console-npm (reinstalled when the lock file changes). Screenshots of every
# page go to target/console-screenshots/; with TG_CONSOLE_SCREENSHOT_DOC=1 the overview is
# also written to docs/console-overview.png. Extra arguments go to `node --test`. The test
# files (console.test.mjs, keys.test.mjs, users.test.mjs, oauth.test.mjs) run one after the
# other against the one server (and, for oauth.test.mjs, the Spanish one); pins.test.mjs and
# approvals.test.mjs run servers of their own.
# Build the binary first: cargo build --bins --features conformance-pack
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tools="${TG_TOOLS:-$root/target/ci-tools}"
case "$tools" in /*) ;; *) tools="$root/$tools" ;; esac
bin="${TG_BIN:-target/debug/tollgate}"
case "$bin" in /*) ;; *) bin="$root/$bin" ;; esac
if [ ! -x "$bin" ]; then
    echo "tests/console: $bin is not an executable; build it with cargo build --bins --features conformance-pack (or set TG_BIN)" >&2
    exit 2
fi
here="$root/tests/console"
mkdir -p "$tools"

chromium=/usr/bin/chromium
if [ ! -x "$chromium" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "tests/console: Chromium is not installed; run: sudo apt-get install -y chromium" >&2
        exit 2
    fi
    echo "tests/console: installing Chromium from Debian's packages" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
fi

# playwright-core only (it downloads no browser), exactly as locked.
npm_dir="$tools/console-npm"
stamp="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ "$(cat "$npm_dir/.lock-sha256" 2>/dev/null || true)" != "$stamp" ]; then
    rm -rf "$npm_dir"
    mkdir -p "$npm_dir"
    cp "$here/package.json" "$here/package-lock.json" "$npm_dir/"
    (cd "$npm_dir" && npm ci --silent --no-audit --no-fund)
    echo "$stamp" > "$npm_dir/.lock-sha256"
fi

# The server refuses unknown TOLLGATE_* variables, and must not read the caller's.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep '^TOLLGATE_' || true)

data=$(mktemp -d /tmp/tollgate-console.XXXXXX)
server=""
server_es=""
backend=""
# Ends process $1: TERM, then KILL if it is still there after 5 s.
end() {
    if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
        kill -TERM "$1"
        # A clean exit takes well under a second; never wait forever.
        for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$1" 2>/dev/null || true
    fi
}
stop() {
    end "$server"
    end "$server_es"
    end "$backend"
    rm -rf "$data"
}
trap stop EXIT

"$bin" --database "$data/t.db" init --company "ACME SL" --tax-id B12345674 --plan pro \
    --locale en --demo --json > "$data/init.json" 2> "$data/init.log" ||
    { cat "$data/init.log" >&2; exit 1; }
# The users, as the server records them the first time one of their tokens is verified: an
# id of `u` and 24 hex digits of SHA-256(issuer, NUL, subject), as src/store/users.rs
# derives it. The second one's name is markup, as a token may carry.
python3 - "$data/t.db" <<'PY'
import hashlib
import sqlite3
import sys
import time

issuer = "https://login.acme.example"
now = int(time.time())
db = sqlite3.connect(sys.argv[1])


def user(subject, name):
    uid = "u" + hashlib.sha256(f"{issuer}\0{subject}".encode()).hexdigest()[:24]
    db.execute(
        "INSERT INTO users (id, issuer, subject, display_name, client_id, first_seen_at,"
        " last_seen_at) VALUES (?, ?, ?, ?, 'portal', ?, ?)",
        (uid, issuer, subject, name, now - 3600, now),
    )
    return uid


ana = user("ana@acme.example", "Ana García")
user("mallory@acme.example", '<img src=x onerror="document.title=1">')
for at, outcome, entry in ((now * 1000 - 2000, "ok", None),
                           (now * 1000 - 1000, "rate_limited", "RateLimited")):
    db.execute(
        "INSERT INTO audit_log (at, request_id, credential_id, tool, outcome, duration_us,"
        " transport, entry) VALUES (?, '1', ?, 'search_clients', ?, 1000, 'http', ?)",
        (at, ana, outcome, entry),
    )
db.commit()
PY
admin_key=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).admin_key)' "$data/init.json")
# The personal key a person signs in with at the OAuth front door.
"$bin" --database "$data/t.db" key create --name "Pablo Ruiz" \
    --scopes invoices:read,clients:read --json > "$data/person.json" 2> "$data/person.log" ||
    { cat "$data/person.log" >&2; exit 1; }
person_key=$(node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).token)' "$data/person.json")

free_port() {
    node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { process.stdout.write(String(s.address().port)); s.close(); })'
}
# Exits 0 once GET $1 answers with status $2 (within 20 s), 1 otherwise.
until_answers() {
    node -e '
        const deadline = Date.now() + 20000;
        (async () => {
            while (Date.now() < deadline) {
                try { if ((await fetch(process.argv[1])).status === Number(process.argv[2])) return; } catch {}
                await new Promise((ok) => setTimeout(ok, 100));
            }
            process.exit(1);
        })();' "$1" "$2"
}

# The backend first: tollgate reads its OpenAPI document when it starts.
backend_port=$(free_port)
node "$here/backend.mjs" "$backend_port" > "$data/backend.log" 2>&1 &
backend=$!
if ! until_answers "http://127.0.0.1:$backend_port/things" 200; then
    echo "tests/console: the test backend did not answer on port $backend_port" >&2
    cat "$data/backend.log" >&2
    exit 1
fi
cp "$here/shop.openapi.json" "$data/shop.openapi.json"
cat > "$data/tollgate.toml" <<TOML
[oauth_server]
enabled = true

[[backends]]
name = "shop"
kind = "openapi"
spec = "shop.openapi.json"
base_url = "http://127.0.0.1:$backend_port"
TOML
# The same, in Spanish: the language of the console and of the front door's pages.
{ echo 'locale = "es"'; cat "$data/tollgate.toml"; } > "$data/tollgate-es.toml"

port=$(free_port)
base="http://127.0.0.1:$port"
RUST_LOG=warn "$bin" --database "$data/t.db" serve --listen "127.0.0.1:$port" \
    --config "$data/tollgate.toml" > "$data/serve.log" 2>&1 &
server=$!
port_es=$(free_port)
base_es="http://127.0.0.1:$port_es"
RUST_LOG=warn "$bin" --database "$data/t.db" serve --listen "127.0.0.1:$port_es" \
    --config "$data/tollgate-es.toml" > "$data/serve-es.log" 2>&1 &
server_es=$!
# /healthz within 20 s, or the server's log.
if ! until_answers "$base/healthz" 200 || ! kill -0 "$server" 2>/dev/null; then
    echo "tests/console: tollgate serve did not become healthy on $base" >&2
    cat "$data/serve.log" >&2
    exit 1
fi
if ! until_answers "$base_es/healthz" 200 || ! kill -0 "$server_es" 2>/dev/null; then
    echo "tests/console: the Spanish tollgate serve did not become healthy on $base_es" >&2
    cat "$data/serve-es.log" >&2
    exit 1
fi

started=$SECONDS
status=0
TG_CONSOLE_URL="$base" TG_CONSOLE_URL_ES="$base_es" TG_CONSOLE_ADMIN_KEY="$admin_key" \
    TG_CONSOLE_PERSON_KEY="$person_key" TG_CONSOLE_CHROMIUM="$chromium" \
    TG_CONSOLE_NPM="$npm_dir" TG_CONSOLE_BIN="$bin" \
    timeout 300 node --test --test-concurrency=1 --test-timeout=120000 "$@" \
        "$here/console.test.mjs" "$here/keys.test.mjs" "$here/users.test.mjs" \
        "$here/oauth.test.mjs" "$here/pins.test.mjs" "$here/approvals.test.mjs" || status=$?
if [ "$status" -ne 0 ]; then
    printf '\n==> tollgate serve log, last 50 lines\n'
    tail -n 50 "$data/serve.log"
    printf '\n==> the Spanish tollgate serve log, last 20 lines\n'
    tail -n 20 "$data/serve-es.log"
fi
printf '\ntests/console: %ss, screenshots in target/console-screenshots/\n' "$((SECONDS - started))"
exit "$status"
