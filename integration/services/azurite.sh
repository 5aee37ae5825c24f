#!/usr/bin/env bash
# Azure Blob Storage for the integration suite: Azurite (Microsoft's emulator, from the npm
# registry), blob service only, on loopback, in-memory, one container created.
#
#   integration/services/azurite.sh start|stop|status
#
# start installs Azurite into $FENCEDLAKE_IT_STATE/azurite (npm install, pinned version,
# once; needs node and npm) and starts `azurite-blob`. Azurite's put-if-absent
# (If-None-Match: *) is atomic: its in-memory metadata store checks for the blob and
# inserts it with no await in between, on Node's single thread (integration/test_services.py
# races 16 creators on one key to check it).
#
# Env: FENCEDLAKE_IT_AZURE_PORT (24332), FENCEDLAKE_IT_AZURE_CONTAINER (fencedlake),
#      FENCEDLAKE_IT_STATE (.integration), VENV (.venv: azure-storage-blob creates the container).
# The account is Azurite's documented development account (devstoreaccount1 and its
# published key): not a secret.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=azurite
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_AZURE_PORT:-24332}"
CONTAINER="${FENCEDLAKE_IT_AZURE_CONTAINER:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/azurite-run"
INSTALL="$STATE/azurite"
AZURITE_VERSION=3.37.0
MATCH="azurite-blob"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"
DAEMON_PROBE="(exec 3<>/dev/tcp/$HOST/$PORT)"
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

connection_string() {
    printf 'DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=%s;BlobEndpoint=http://%s:%s/devstoreaccount1;' \
        'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==' "$HOST" "$PORT"
}

install() {
    local bin="$INSTALL/node_modules/.bin/azurite-blob"
    if [ -x "$bin" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$INSTALL/node_modules/azurite/package.json"; then
        return 0
    fi
    command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js (>= 20) and npm"
    log "installing azurite@$AZURITE_VERSION into $INSTALL (npm, once; ~2 min)"
    mkdir -p "$INSTALL"
    local t0=$SECONDS
    npm install --prefix "$INSTALL" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >>"$INSTALL/npm.log" 2>&1 \
        || { tail -n 20 "$INSTALL/npm.log" >&2; die "npm install azurite failed (log: $INSTALL/npm.log)"; }
    log "installed in $((SECONDS - t0)) s"
}

ensure_container() {
    AZ_CS="$(connection_string)" AZ_CONTAINER="$CONTAINER" "$PY" - <<'PY'
import os
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

service = BlobServiceClient.from_connection_string(os.environ["AZ_CS"])
try:
    service.create_container(os.environ["AZ_CONTAINER"])
    print(f"[azurite] created container {os.environ['AZ_CONTAINER']!r}")
except ResourceExistsError:
    print(f"[azurite] container {os.environ['AZ_CONTAINER']!r} exists")
PY
}

start() {
    [ -x "$PY" ] || die "no python at $PY: run scripts/bootstrap.sh first"
    install
    # --inMemoryPersistence: state dies with the process (tests use fresh prefixes anyway);
    # --loose: ignore headers Azurite does not implement; --skipApiVersionCheck: newer SDKs.
    daemon_start node "$INSTALL/node_modules/.bin/azurite-blob" --blobHost "$HOST" --blobPort "$PORT" \
        --inMemoryPersistence --loose --skipApiVersionCheck --disableProductStyleUrl --silent || true
    ensure_container
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    connection-string) connection_string; echo ;;
    *) echo "usage: $0 start|stop|status|connection-string" >&2; exit 2 ;;
esac
