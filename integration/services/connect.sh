#!/usr/bin/env bash
# A Spark Connect server for the integration suite (integration/test_connect.py): the server
# pip's pyspark ships (what sbin/start-connect-server.sh runs), local[2], on loopback.
#
#   integration/services/connect.sh start|stop|status
#
# Its working directory is $STATE/connect/work, emptied on every start: the embedded
# catalog's default warehouse resolves there (fencedlake-warehouse/), which the tests check;
# Spark's own temporary files (the sessions' artifact directories) go to $STATE/connect/tmp.
# Its Python workers run the venv's interpreter (PYSPARK_PYTHON), which has the package.
#
# Env: FENCEDLAKE_IT_CONNECT_PORT (24334), FENCEDLAKE_IT_STATE (.integration), VENV (.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=connect
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_CONNECT_PORT:-24334}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/connect"
MATCH="org.apache.spark.sql.connect.service.SparkConnectServer"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
# The server is ready once its log says so (the gRPC port opens a moment before).
DAEMON_PROBE='grep -q "Spark Connect server started" "$LOG"'
DAEMON_WAIT_S=180
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

start() {
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first (or set VENV / FENCEDLAKE_PYTHON)"
    local spark_home
    spark_home="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
    if ! running_pid >/dev/null; then
        rm -rf "$DIR/work" "$DIR/tmp"
        rm -f "$LOG"
    fi
    mkdir -p "$DIR/work" "$DIR/tmp"
    cd "$DIR/work"
    export PYSPARK_PYTHON="$PY" SPARK_LOCAL_IP="$HOST"
    daemon_start "$spark_home/bin/spark-submit" \
        --class "$MATCH" --name fencedlake-it-connect --master 'local[2]' \
        --conf "spark.connect.grpc.binding.address=$HOST" --conf "spark.connect.grpc.binding.port=$PORT" \
        --conf spark.ui.enabled=false --conf spark.driver.memory=1g --conf spark.sql.shuffle.partitions=2 \
        --conf "spark.local.dir=$DIR/tmp" \
        spark-internal || true
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
