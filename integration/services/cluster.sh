#!/usr/bin/env bash
# A Spark standalone cluster for the integration suite (integration/test_cluster.py): one master
# and two workers on loopback, each its own JVM, started with bin/spark-class (pip's pyspark has
# no sbin/start-master.sh or start-worker.sh).
#
#   integration/services/cluster.sh start|stop|status
#
# The master listens on FENCEDLAKE_IT_MASTER_PORT (24335), worker N (1, 2) on that port + N; web UIs
# take free ports the system picks (a fixed UI port that is busy makes Spark try the next one,
# which may be a worker's). Each worker offers 1 core and 1 GiB; executors and their
# Python workers run the venv's interpreter (PYSPARK_PYTHON). Each daemon's PID file, log and
# work directory are under $STATE/cluster/<master|worker-N>/. A worker started with setsid leads
# its own process group: the executors it launches belong to it, so killing the group is a
# machine going away (the test does that).
#
# Env: FENCEDLAKE_IT_MASTER_PORT (24335), FENCEDLAKE_IT_STATE (.integration), VENV (.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HOST=127.0.0.1
MASTER_PORT="${FENCEDLAKE_IT_MASTER_PORT:-24335}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
WORKERS=2

spark_home() { "$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

# daemon ACTION NAME PORT MATCH PROBE [CMD...]: daemon.sh's start/stop/status for one JVM, in a subshell.
daemon() {
    local action="$1" name="$2" port="$3" match="$4" probe="$5"
    shift 5
    (
        NAME="$name" PORT="$port" MATCH="$match" DIR="$STATE/cluster/$name" DAEMON_PROBE="$probe" DAEMON_WAIT_S=180
        # shellcheck source=daemon.sh
        . "$ROOT/integration/services/daemon.sh"
        case "$action" in
            start) mkdir -p "$DIR/work"; rm -f "$LOG"; daemon_start "$@" || true ;;
            stop) daemon_stop ;;
            status) daemon_status ;;
        esac
    )
}

start() {
    [ -x "$PY" ] || { echo "[cluster] ERROR: no python at $PY: run scripts/bootstrap.sh" >&2; exit 1; }
    local home
    home="$(spark_home)"
    export PYSPARK_PYTHON="$PY" SPARK_LOCAL_IP="$HOST" SPARK_MASTER_HOST="$HOST"
    daemon start master "$MASTER_PORT" "deploy.master.Master" 'grep -q "I have been elected leader" "$LOG"' \
        "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host "$HOST" --port "$MASTER_PORT" --webui-port 0
    for n in $(seq 1 "$WORKERS"); do
        local port=$((MASTER_PORT + n))
        daemon start "worker-$n" "$port" "deploy.worker.Worker" 'grep -q "Successfully registered with master" "$LOG"' \
            "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker "spark://$HOST:$MASTER_PORT" \
            --host "$HOST" --port "$port" --webui-port 0 --cores 1 --memory 1g \
            --work-dir "$STATE/cluster/worker-$n/work"
    done
}

stop() {
    for n in $(seq "$WORKERS" -1 1); do
        daemon stop "worker-$n" "$((MASTER_PORT + n))" "deploy.worker.Worker" ""
    done
    daemon stop master "$MASTER_PORT" "deploy.master.Master" ""
}

status() {
    local rc=0
    daemon status master "$MASTER_PORT" "deploy.master.Master" 'grep -q "elected leader" "$LOG"' || rc=3
    for n in $(seq 1 "$WORKERS"); do
        daemon status "worker-$n" "$((MASTER_PORT + n))" "deploy.worker.Worker" \
            'grep -q "registered with master" "$LOG"' || rc=3
    done
    return "$rc"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
