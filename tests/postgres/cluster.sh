#!/usr/bin/env bash
# A private PostgreSQL server for the tests, on a free loopback port, from Debian's
# packages (installed when missing). It never touches the machine's own cluster.
#
#   cluster.sh start DIR   create and start a server whose files live under DIR; prints the
#                          URL to give the tests as TOLLGATE_TEST_POSTGRES
#   cluster.sh stop DIR    stop it (fast shutdown) and remove DIR
#   cluster.sh pause DIR   stop the server but keep its data (a restart, a failover)
#   cluster.sh resume DIR  start it again on the same port
#
# PostgreSQL refuses to run as root: as root the server runs as the `postgres` user (made
# by the Debian package). Its data is throwaway, so fsync is off.
set -euo pipefail

cmd=${1:?usage: cluster.sh start|stop|pause|resume DIR}
dir=${2:?usage: cluster.sh start|stop|pause|resume DIR}

pg_bin() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$found" ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "cluster.sh: PostgreSQL is not installed; run: sudo apt-get install -y postgresql" >&2
            exit 1
        fi
        echo "cluster.sh: installing PostgreSQL from Debian's packages" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
        found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    echo "$found"
}

as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

server_start() {
    as_owner "$(cat "$dir/bin")/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
        -o "$(cat "$dir/options")" >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
}

case "$cmd" in
start)
    bin=$(pg_bin)
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres "$dir"
    fi
    port=$(free_port)
    as_owner "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    echo "$bin" >"$dir/bin"
    echo "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=400" >"$dir/options"
    server_start
    echo "postgres://postgres@127.0.0.1:$port"
    ;;
pause)
    as_owner "$(cat "$dir/bin")/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
resume)
    server_start
    ;;
stop)
    if [ -f "$dir/bin" ]; then
        bin=$(cat "$dir/bin")
        as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "usage: cluster.sh start|stop|pause|resume DIR" >&2
    exit 2
    ;;
esac
