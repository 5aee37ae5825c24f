#!/usr/bin/env bash
# Apache Iceberg's own REST catalog (the iceberg-open-api test fixture, Iceberg Java's reference
# RESTCatalogAdapter over a JdbcCatalog) for the integration suite, on loopback, beside the project's
# REST test server (rest.sh). Its catalog tables live in the suite's PostgreSQL (catalog name
# iceberg_rest), its warehouse on the suite's S3 server (S3FileIO); loadTable responses vend the S3
# keys, as the fixture does with include-credentials. PostgreSQL and S3 must be running
# (integration/run.sh starts them first); the jars come from integration/jvm/fetch.sh (cached).
#
#   integration/services/iceberg_rest.sh start|stop|status
#
# Env: FENCEDLAKE_IT_ICEBERG_REST_PORT (24338), FENCEDLAKE_IT_PG_PORT (24329), FENCEDLAKE_IT_PG_USER /
#      _DB (fencedlake), FENCEDLAKE_IT_PG_PASSWORD (test-only default; never printed),
#      FENCEDLAKE_IT_S3_PORT (24330), FENCEDLAKE_IT_S3_BUCKET (fencedlake), FENCEDLAKE_IT_STATE
#      (.integration), FENCEDLAKE_JVM_CACHE (.jvm).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NAME=iceberg-rest
HOST=127.0.0.1
PORT="${FENCEDLAKE_IT_ICEBERG_REST_PORT:-24338}"
PG_PORT="${FENCEDLAKE_IT_PG_PORT:-24329}"
S3_PORT="${FENCEDLAKE_IT_S3_PORT:-24330}"
BUCKET="${FENCEDLAKE_IT_S3_BUCKET:-fencedlake}"
STATE="${FENCEDLAKE_IT_STATE:-$ROOT/.integration}"
DIR="$STATE/iceberg-rest"
MATCH="LoopbackRESTCatalogServer"
# shellcheck source=daemon.sh
. "$ROOT/integration/services/daemon.sh"

start() {
    command -v java >/dev/null 2>&1 || die "java not found: the Iceberg REST fixture needs a Java 17 runtime"
    local cp
    cp="$("$ROOT/integration/jvm/fetch.sh" --classpath rest)" || die "integration/jvm/fetch.sh rest failed"
    # The fixture reads its catalog from CATALOG_* variables (RCKUtils: CATALOG_A__B_C -> a-b.c); the
    # password travels in the environment, never on a command line.
    CATALOG_CATALOG_NAME=iceberg_rest \
    CATALOG_URI="jdbc:postgresql://127.0.0.1:$PG_PORT/${FENCEDLAKE_IT_PG_DB:-fencedlake}" \
    CATALOG_JDBC_USER="${FENCEDLAKE_IT_PG_USER:-fencedlake}" \
    CATALOG_JDBC_PASSWORD="${FENCEDLAKE_IT_PG_PASSWORD:-fencedlake-it-only}" \
    CATALOG_WAREHOUSE="s3://$BUCKET/iceberg-rest-warehouse" \
    CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO \
    CATALOG_S3_ENDPOINT="http://127.0.0.1:$S3_PORT" \
    CATALOG_S3_PATH__STYLE__ACCESS=true \
    CATALOG_S3_ACCESS__KEY__ID=testing \
    CATALOG_S3_SECRET__ACCESS__KEY=testing \
    CATALOG_CLIENT_REGION=us-east-1 \
    CATALOG_INCLUDE__CREDENTIALS=true \
    daemon_start java -Xmx512m -XX:+UseSerialGC -cp "$cp" org.apache.iceberg.rest.LoopbackRESTCatalogServer \
        "$HOST" "$PORT" "$READY" || true
}

case "${1:-}" in
    start) start ;;
    stop) daemon_stop ;;
    status) daemon_status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
