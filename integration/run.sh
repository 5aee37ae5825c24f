#!/usr/bin/env bash
# Run the integration suite against real services.
#
#   integration/run.sh [pytest args...]        e.g. integration/run.sh integration/test_services.py -x
#
# FENCEDLAKE_IT_TARGET=local (default): bootstraps the venv, starts PostgreSQL, the S3
#   server, Azurite (Azure Blob), fake-gcs-server (GCS), the Iceberg REST test catalog and
#   Apache Iceberg's own REST fixture (a JVM; jars from integration/jvm/fetch.sh, cached) on
#   127.0.0.1 (integration/services/*.sh), exports their connection settings, runs pytest,
#   and stops every service on any exit (success, failure or Ctrl-C). Ports: FENCEDLAKE_IT_
#   PG_PORT (24329), S3_PORT (24330), REST_PORT (24331), AZURE_PORT (24332), GCS_PORT (24333),
#   ICEBERG_REST_PORT (24338), RESTART_PG_PORT (24339: test_scenarios.py's restart test starts and stops a
#   PostgreSQL of its own there), FAULTS_REST_PORT (24362: test_rest.py's own REST test server, whose faults
#   no other module's commits may take); integration/test_connect.py and test_cluster.py start a Spark
#   Connect server (CONNECT_PORT, 24334) and a standalone cluster (MASTER_PORT, 24335, workers on
#   the next two) themselves, and integration/test_network_faults.py starts toxiproxy (API on
#   TOXIPROXY_PORT, 24340; its proxies listen on TOXIPROXY_LISTEN, 24341-24360; built with Go once).
#   Every default lies below Linux's ephemeral range (32768-60999): a client socket never holds one.
#   FENCEDLAKE_IT_KEEP_SERVICES=1 leaves them running for a faster next run.
# FENCEDLAKE_IT_TARGET=docker: starts nothing; expects FENCEDLAKE_IT_PG_URI,
#   FENCEDLAKE_IT_S3_ENDPOINT, FENCEDLAKE_IT_S3_BUCKET and AWS_* from the environment
#   (docker/docker-compose.yml sets them) and uses python3 from PATH.
#
# With no pytest args, runs `pytest integration`. Exit status is pytest's, except that
# "no tests collected" (5) is reported as a failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TARGET="${FENCEDLAKE_IT_TARGET:-local}"
log() { printf '[integration] %s\n' "$*"; }
die() { printf '[integration] ERROR: %s\n' "$*" >&2; exit 1; }

args=("$@")
[ "${#args[@]}" -gt 0 ] || args=(integration)

case "$TARGET" in
local)
    VENV="${VENV:-.venv}"
    case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
    export VENV
    if [ "${FENCEDLAKE_SKIP_BOOTSTRAP:-0}" != 1 ]; then
        scripts/bootstrap.sh
    fi
    PY="${FENCEDLAKE_PYTHON:-$VENV/bin/python}"

    PG_PORT="${FENCEDLAKE_IT_PG_PORT:-24329}"
    S3_PORT="${FENCEDLAKE_IT_S3_PORT:-24330}"
    PG_USER="${FENCEDLAKE_IT_PG_USER:-fencedlake}"
    PG_DB="${FENCEDLAKE_IT_PG_DB:-fencedlake}"
    # Same default as postgres.sh; exported so both sides agree. Never printed.
    export FENCEDLAKE_IT_PG_PASSWORD="${FENCEDLAKE_IT_PG_PASSWORD:-fencedlake-it-only}"

    stop_services() {
        local rc=$?
        if [ "${FENCEDLAKE_IT_KEEP_SERVICES:-0}" = 1 ]; then
            log "FENCEDLAKE_IT_KEEP_SERVICES=1: leaving services running"
        else
            log "stopping services"
            # Started by their test modules (test_connect.py, test_cluster.py, test_network_faults.py); stopped here
            # too after a crash.
            integration/services/connect.sh stop >/dev/null 2>&1 || true
            integration/services/cluster.sh stop >/dev/null 2>&1 || true
            integration/services/toxiproxy.sh stop >/dev/null 2>&1 || true
            integration/services/iceberg_rest.sh stop || true
            integration/services/rest.sh stop || true
            integration/services/gcs.sh stop || true
            integration/services/azurite.sh stop || true
            integration/services/s3.sh stop || true
            integration/services/postgres.sh stop || true
            # test_rest.py's REST server and test_scenarios.py's restart test's PostgreSQL (their own; stopped by
            # their tests, and here after a crash).
            FENCEDLAKE_IT_REST_PORT="${FENCEDLAKE_IT_FAULTS_REST_PORT:-24362}" \
                FENCEDLAKE_IT_STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}/rest-faults" \
                integration/services/rest.sh stop >/dev/null 2>&1 || true
            FENCEDLAKE_IT_PG_PORT="${FENCEDLAKE_IT_RESTART_PG_PORT:-24339}" \
                FENCEDLAKE_IT_STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}/restart" \
                integration/services/postgres.sh stop >/dev/null 2>&1 || true
        fi
        exit "$rc"
    }
    trap stop_services EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM

    t0=$SECONDS
    integration/services/postgres.sh start
    integration/services/s3.sh start
    integration/services/azurite.sh start
    integration/services/gcs.sh start
    pw_enc="$("$PY" -c 'import os, urllib.parse; print(urllib.parse.quote(os.environ["FENCEDLAKE_IT_PG_PASSWORD"], safe=""))')"
    export FENCEDLAKE_IT_PG_URI="postgresql+psycopg2://$PG_USER:$pw_enc@127.0.0.1:$PG_PORT/$PG_DB"
    integration/services/rest.sh start
    integration/services/iceberg_rest.sh start
    log "services up in $((SECONDS - t0)) s"

    export FENCEDLAKE_IT_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
    export FENCEDLAKE_IT_AZURE_CONNECTION_STRING="$(integration/services/azurite.sh connection-string)"
    export FENCEDLAKE_IT_AZURE_CONTAINER="${FENCEDLAKE_IT_AZURE_CONTAINER:-fencedlake}"
    export FENCEDLAKE_IT_GCS_ENDPOINT="http://127.0.0.1:${FENCEDLAKE_IT_GCS_PORT:-24333}"
    export FENCEDLAKE_IT_GCS_BUCKET="${FENCEDLAKE_IT_GCS_BUCKET:-fencedlake}"
    export FENCEDLAKE_IT_REST_URI="http://127.0.0.1:${FENCEDLAKE_IT_REST_PORT:-24331}"
    export FENCEDLAKE_IT_ICEBERG_REST_URI="http://127.0.0.1:${FENCEDLAKE_IT_ICEBERG_REST_PORT:-24338}"
    # Test-only OAuth2 client of the REST test server (rest.sh uses the same defaults).
    export FENCEDLAKE_IT_REST_CREDENTIAL="${FENCEDLAKE_IT_REST_CLIENT_ID:-fencedlake}:${FENCEDLAKE_IT_REST_CLIENT_SECRET:-fencedlake-it-only}"
    # Google clients must never look for a GCE metadata server (a link-local address): the GCS
    # emulator takes any token, and these keep google-auth and gcsfs on loopback.
    export NO_GCE_CHECK=true GCE_METADATA_HOST=127.0.0.1:9 GCE_METADATA_IP=127.0.0.1:9
    export FENCEDLAKE_IT_S3_BUCKET="${FENCEDLAKE_IT_S3_BUCKET:-fencedlake}"
    # moto accepts any credentials; these are dummies, not secrets.
    export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
    export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
    export AWS_REGION="${AWS_REGION:-us-east-1}"
    export AWS_DEFAULT_REGION="$AWS_REGION"
    export FENCEDLAKE_IT_TARGET=local
    export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$PY}"
    export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$PY}"
    ;;
docker)
    PY="${FENCEDLAKE_PYTHON:-python3}"
    for v in FENCEDLAKE_IT_PG_URI FENCEDLAKE_IT_S3_ENDPOINT FENCEDLAKE_IT_S3_BUCKET \
             AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION; do
        [ -n "${!v:-}" ] || die "FENCEDLAKE_IT_TARGET=docker but $v is not set (docker/docker-compose.yml sets it)"
    done
    log "target docker: using services at $FENCEDLAKE_IT_S3_ENDPOINT and the configured PostgreSQL"
    ;;
*)
    die "FENCEDLAKE_IT_TARGET must be 'local' or 'docker', not '$TARGET'"
    ;;
esac

log "running: python -m pytest ${args[*]}"
set +e
"$PY" -m pytest "${args[@]}"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    printf '[integration] FAILED: pytest collected no tests from: %s\n' "${args[*]}" >&2
    exit 5
fi
exit "$rc"
