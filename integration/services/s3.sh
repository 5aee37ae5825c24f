#!/usr/bin/env bash
# S3 for the integration suite: moto's S3 server (with the atomicity lock, see s3server.py)
# on loopback, in the background, bucket created, dummy credentials.
#
#   integration/services/s3.sh start|stop|status
#
# Env: FENCEDLAKE_IT_S3_PORT (54330), FENCEDLAKE_IT_S3_BUCKET (fencedlake),
#      FENCEDLAKE_IT_STATE (.integration), VENV (.venv) -- the venv must hold moto
#      (scripts/bootstrap.sh installs it). Idempotent: start on a running server only
#      re-checks the bucket; stop on a stopped one is a no-op.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_S3_PORT:-54330}"
BUCKET="${FENCEDLAKE_IT_S3_BUCKET:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/s3"
PIDFILE="$DIR/s3server.pid"
READY="$DIR/ready"
LOG="$DIR/s3server.log"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
SERVER="$ROOT/integration/services/s3server.py"
ENDPOINT="http://$HOST:$PORT"

log() { printf '[s3] %s\n' "$*"; }
die() { printf '[s3] ERROR: %s\n' "$*" >&2; exit 1; }

# Our server's PID, or nothing. The PID must still be a process running s3server.py
# (a stale PID file after a reboot may name an unrelated process: never signal that).
running_pid() {
    [ -f "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE")"
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "s3server.py serve" || return 1
    echo "$pid"
}

start() {
    local pid
    if pid="$(running_pid)"; then
        log "already running (pid $pid) on $ENDPOINT"
        "$PY" "$SERVER" ensure-bucket --endpoint "$ENDPOINT" --bucket "$BUCKET" | sed 's/^/    /'
        return 0
    fi
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first (or set VENV / FENCEDLAKE_PYTHON)"
    "$PY" -c 'import moto, boto3' 2>/dev/null || die "moto/boto3 missing in $PY: run scripts/bootstrap.sh"
    if (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; then
        die "port $PORT on $HOST is taken by another process: set FENCEDLAKE_IT_S3_PORT"
    fi
    mkdir -p "$DIR"
    rm -f "$READY" "$PIDFILE"
    log "starting moto S3 on $ENDPOINT (log: $LOG)"
    local t0=$SECONDS
    # setsid: the server outlives this shell and is not hit by the caller's Ctrl-C;
    # stop() is the way to end it.
    setsid "$PY" "$SERVER" serve --host "$HOST" --port "$PORT" --bucket "$BUCKET" --ready-file "$READY" \
        >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    for _ in $(seq 1 300); do  # up to 60 s
        [ -f "$READY" ] && break
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            tail -n 30 "$LOG" >&2 || true
            die "S3 server exited during start-up (log above: $LOG)"
        fi
        sleep 0.2
    done
    [ -f "$READY" ] || { tail -n 30 "$LOG" >&2 || true; stop; die "S3 server not ready after 60 s"; }
    log "ready in $((SECONDS - t0)) s: pid $(cat "$PIDFILE"), bucket '$BUCKET'"
}

stop() {
    local pid
    if ! pid="$(running_pid)"; then
        log "not running"
        rm -f "$PIDFILE" "$READY"
        return 0
    fi
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do  # up to 10 s, then SIGKILL
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid ignored SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE" "$READY"
    log "stopped"
}

status() {
    local pid
    if pid="$(running_pid)" && [ -f "$READY" ]; then
        log "running: pid $pid, $ENDPOINT, bucket '$BUCKET'"
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
