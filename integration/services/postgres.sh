#!/usr/bin/env bash
# PostgreSQL for the integration suite: Debian's server, started without systemd,
# on 127.0.0.1 only, data and socket under .integration/pg/.
#
#   integration/services/postgres.sh start|stop|status
#
# start: installs PostgreSQL from Debian if no pg_ctl is found (apt-get update, then
# apt-get install postgresql: 15 on Debian 12), initdb as the `postgres` OS user
# (initdb refuses root), pg_ctl start, waits for pg_isready, then makes sure the login
# role and database exist with the configured password. Every step is idempotent.
#
# Env (defaults):
#   FENCEDLAKE_IT_PG_PORT      24329
#   FENCEDLAKE_IT_PG_USER      fencedlake   (login role; password auth over TCP)
#   FENCEDLAKE_IT_PG_DB        fencedlake
#   FENCEDLAKE_IT_PG_PASSWORD  a fixed test-only default; never printed
#   FENCEDLAKE_IT_STATE        .integration (state lives in $FENCEDLAKE_IT_STATE/pg)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_PG_PORT:-24329}"
ROLE="${FENCEDLAKE_IT_PG_USER:-fencedlake}"
DB="${FENCEDLAKE_IT_PG_DB:-fencedlake}"
PASSWORD="${FENCEDLAKE_IT_PG_PASSWORD:-fencedlake-it-only}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"

log() { printf '[postgres] %s\n' "$*"; }
die() { printf '[postgres] ERROR: %s\n' "$*" >&2; exit 1; }

for ident in "$ROLE" "$DB"; do
    [[ "$ident" =~ ^[a-z_][a-z0-9_]*$ ]] || die "invalid role/database name '$ident' (want [a-z_][a-z0-9_]*)"
done

IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1
# The server runs as `postgres` when we are root (initdb and postgres refuse root),
# else as the calling user. SUPER is the bootstrap superuser, reached by peer auth
# over the unix socket only.
if [ "$IS_ROOT" -eq 1 ]; then SUPER=postgres; else SUPER="$(id -un)"; fi

as_pg() {
    if [ "$IS_ROOT" -eq 1 ]; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && "$@")
    fi
}

find_pgbin() {
    local p
    if p="$(command -v pg_ctl 2>/dev/null)"; then
        dirname "$(readlink -f "$p")"
        return 0
    fi
    # Debian keeps server binaries off PATH, one directory per major version.
    p="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$p" ] && [ -x "$p/pg_ctl" ] && { echo "$p"; return 0; }
    return 1
}

install_postgres() {
    command -v apt-get >/dev/null 2>&1 || die "no pg_ctl and no apt-get: install PostgreSQL >= 13 yourself"
    local SUDO=()
    if [ "$IS_ROOT" -ne 1 ]; then
        command -v sudo >/dev/null 2>&1 || die "no pg_ctl found and not root: install the 'postgresql' package"
        SUDO=(sudo)
    fi
    log "pg_ctl not found: installing PostgreSQL from Debian (apt-get update + install postgresql)"
    local t0=$SECONDS
    # Do not let the package create and start its own 'main' cluster on port 5432:
    # we run our own cluster below. (Only written when absent; dpkg keeps it.)
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
        "${SUDO[@]}" mkdir -p /etc/postgresql-common
        echo "create_main_cluster = false" | "${SUDO[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
    fi
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confold postgresql
    log "installed PostgreSQL in $((SECONDS - t0)) s"
}

# Where the cluster lives. Normally $STATE/pg inside the checkout; if the `postgres`
# user cannot reach that directory (a checkout under a private home), or the socket
# path would exceed the 107-byte unix socket limit, a per-checkout directory in /tmp.
# (A second cluster with its own FENCEDLAKE_IT_STATE, as test_scenarios.py's restart test starts, gets its own.)
fallback_dir() {
    local key="$ROOT"
    [ "$STATE" = "$ROOT/.integration" ] || key="$STATE"
    echo "/tmp/fencedlake-it-pg-$(printf '%s' "$key" | sha256sum | cut -c1-12)"
}

pg_state_dir() {
    local dir="$STATE/pg"
    local sock="$dir/run/.s.PGSQL.$PORT"
    if [ "${#sock}" -gt 100 ]; then
        dir="$(fallback_dir)"
    fi
    echo "$dir"
}

PGBIN=""
PGDIR="$(pg_state_dir)"
DATA="$PGDIR/data"
SOCK="$PGDIR/run"
LOGFILE="$PGDIR/postgres.log"

prepare_dirs() {
    mkdir -p "$DATA" "$SOCK"
    if [ "$IS_ROOT" -eq 1 ]; then
        chown postgres:postgres "$PGDIR" "$DATA" "$SOCK"
        chmod 700 "$DATA"
        if ! as_pg test -w "$DATA"; then
            local fallback
            fallback="$(fallback_dir)"
            die "user 'postgres' cannot reach $DATA (a parent directory is not traversable). Set FENCEDLAKE_IT_STATE to a reachable directory, e.g. FENCEDLAKE_IT_STATE=$fallback"
        fi
    fi
    touch "$LOGFILE"
    [ "$IS_ROOT" -eq 1 ] && chown postgres:postgres "$LOGFILE"
    return 0
}

is_running() {
    [ -f "$DATA/PG_VERSION" ] && as_pg "$PGBIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1
}

sql_literal() {  # single-quoted SQL string literal
    printf "'%s'" "${1//\'/\'\'}"
}

provision() {
    # Role and database, idempotently. The password travels on psql's stdin, never argv.
    as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U "$SUPER" -d postgres -f - >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN CREATE ROLE $ROLE LOGIN; END IF;
END \$\$;
ALTER ROLE $ROLE WITH LOGIN PASSWORD $(sql_literal "$PASSWORD");
SELECT 'CREATE DATABASE $DB OWNER $ROLE' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB')\gexec
SQL
    # Prove the exact path the tests use: TCP + password to the target database.
    PGPASSWORD="$PASSWORD" "$PGBIN/psql" -X -q -w -h "$HOST" -p "$PORT" -U "$ROLE" -d "$DB" \
        -c 'SELECT 1' >/dev/null || die "password login as '$ROLE' to '$DB' over TCP failed (see $LOGFILE)"
}

start() {
    local t0=$SECONDS
    PGBIN="$(find_pgbin)" || { install_postgres; PGBIN="$(find_pgbin)" || die "PostgreSQL installed but no pg_ctl found"; }
    if [ "$IS_ROOT" -eq 1 ]; then
        id postgres >/dev/null 2>&1 || die "OS user 'postgres' does not exist (the Debian package creates it)"
    fi
    prepare_dirs
    if [ ! -f "$DATA/PG_VERSION" ]; then
        log "initdb $DATA ($("$PGBIN/postgres" --version))"
        as_pg "$PGBIN/initdb" -D "$DATA" -U "$SUPER" --auth-local=peer --auth-host=scram-sha-256 \
            --encoding=UTF8 --no-locale >>"$LOGFILE" 2>&1 || { tail -n 30 "$LOGFILE" >&2; die "initdb failed"; }
    fi
    if is_running; then
        log "already running ($DATA)"
    else
        if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
            die "port $PORT on $HOST is taken by another process: set FENCEDLAKE_IT_PG_PORT"
        fi
        log "starting on $HOST:$PORT (log: $LOGFILE)"
        as_pg "$PGBIN/pg_ctl" start -D "$DATA" -l "$LOGFILE" -w -t 60 -s \
            -o "-c listen_addresses=$HOST -p $PORT -k $SOCK" \
            || { tail -n 30 "$LOGFILE" >&2; die "pg_ctl start failed"; }
    fi
    local ok=0
    for _ in $(seq 1 60); do
        if "$PGBIN/pg_isready" -q -h "$HOST" -p "$PORT" -t 1; then ok=1; break; fi
        sleep 0.5
    done
    [ "$ok" -eq 1 ] || { tail -n 30 "$LOGFILE" >&2; die "server not accepting connections on $HOST:$PORT"; }
    provision
    log "ready in $((SECONDS - t0)) s: $HOST:$PORT database '$DB' role '$ROLE'"
}

stop() {
    if ! PGBIN="$(find_pgbin)" || [ ! -f "$DATA/PG_VERSION" ]; then
        log "not running (no cluster at $DATA)"
        return 0
    fi
    if ! is_running; then
        log "not running"
        return 0
    fi
    log "stopping ($DATA)"
    if ! as_pg "$PGBIN/pg_ctl" stop -D "$DATA" -m fast -w -t 60 -s; then
        # pg_ctl could not stop it in time: signal the postmaster by its PID file.
        local pid
        pid="$(head -n 1 "$DATA/postmaster.pid" 2>/dev/null || true)"
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            log "pg_ctl stop failed; SIGQUIT then SIGKILL to postmaster pid $pid"
            kill -QUIT "$pid" 2>/dev/null || true
            sleep 5
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    log "stopped"
}

status() {
    if PGBIN="$(find_pgbin)" && is_running && "$PGBIN/pg_isready" -q -h "$HOST" -p "$PORT" -t 2; then
        log "running: $HOST:$PORT, data $DATA"
        return 0
    fi
    log "not running"
    return 3
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
