#!/usr/bin/env bash
# S3 for the integration suite: moto's S3 server (with the atomicity lock, see s3server.py)
# on loopback, in the background, bucket created, dummy credentials.
#
#   integration/services/s3.sh start|stop|status
#
# Env: FENCEDLAKE_IT_S3_PORT (24330), FENCEDLAKE_IT_S3_BUCKET (fencedlake),
#      FENCEDLAKE_IT_STATE (.integration), VENV (.venv) -- the venv must hold moto
#      (scripts/bootstrap.sh installs it). Idempotent: start on a running server only
#      re-checks the bucket; stop on a stopped one is a no-op.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=s3
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_S3_PORT:-24330}"
BUCKET="${FENCEDLAKE_IT_S3_BUCKET:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/s3"
MATCH="s3server.py serve"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
SERVER="$ROOT/integration/services/s3server.py"
ENDPOINT="http://$HOST:$PORT"
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

start() {
    if running_pid >/dev/null; then
        log "already running on $ENDPOINT"
        "$PY" "$SERVER" ensure-bucket --endpoint "$ENDPOINT" --bucket "$BUCKET" | sed 's/^/    /'
        return 0
    fi
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first (or set VENV / FENCEDLAKE_PYTHON)"
    "$PY" -c 'import moto, boto3' 2>/dev/null || die "moto/boto3 missing in $PY: run scripts/bootstrap.sh"
    daemon_start "$PY" "$SERVER" serve --host "$HOST" --port "$PORT" --bucket "$BUCKET" --ready-file "$READY"
    log "bucket '$BUCKET'"
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
