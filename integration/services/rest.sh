#!/usr/bin/env bash
# An Iceberg REST catalog for the integration suite: integration/services/restcatalog.py (a
# test server following the REST spec, backed by pyiceberg's SqlCatalog on the suite's
# PostgreSQL, warehouse on the suite's S3, OAuth2 client credentials, fault injection),
# on loopback. PostgreSQL and S3 must be running (integration/run.sh starts them first).
#
#   integration/services/rest.sh start|stop|status
#
# Env: FENCEDLAKE_IT_REST_PORT (24331), FENCEDLAKE_IT_PG_URI (required), FENCEDLAKE_IT_S3_PORT
#      (24330), FENCEDLAKE_IT_S3_BUCKET (fencedlake), FENCEDLAKE_IT_REST_CLIENT_ID / _SECRET
#      (test-only defaults; never printed), FENCEDLAKE_IT_STATE (.integration), VENV (.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=rest
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_REST_PORT:-24331}"
S3_PORT="${FENCEDLAKE_IT_S3_PORT:-24330}"
BUCKET="${FENCEDLAKE_IT_S3_BUCKET:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/rest"
MATCH="restcatalog.py"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

start() {
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first"
    [ -n "${FENCEDLAKE_IT_PG_URI:-}" ] || die "FENCEDLAKE_IT_PG_URI is not set (integration/run.sh sets it)"
    # The server reads its secrets from the environment, never from its command line.
    FENCEDLAKE_REST_PG_URI="$FENCEDLAKE_IT_PG_URI" \
    FENCEDLAKE_REST_CLIENT_ID="${FENCEDLAKE_IT_REST_CLIENT_ID:-fencedlake}" \
    FENCEDLAKE_REST_CLIENT_SECRET="${FENCEDLAKE_IT_REST_CLIENT_SECRET:-fencedlake-it-only}" \
    daemon_start "$PY" "$ROOT/integration/services/restcatalog.py" --host "$HOST" --port "$PORT" \
        --warehouse "s3://$BUCKET/rest-warehouse" --ready-file "$READY" \
        --io "s3.endpoint=http://127.0.0.1:$S3_PORT" --io s3.access-key-id=testing \
        --io s3.secret-access-key=testing --io s3.region=us-east-1 --io s3.path-style-access=true || true
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
