#!/usr/bin/env bash
# The interop stage: fencedlake beside Apache Iceberg's Java reference implementation.
#
#   integration/interop/run.sh [pytest args...]    default: integration/interop
#   integration/interop/run.sh --prepare           steps 1 and 2 only (scripts/test.sh runs it early, in the
#                                                  background, while the first stages run)
#
# 1. integration/jvm/fetch.sh: the pinned jars (Iceberg's Spark runtime, iceberg-aws-bundle, hadoop-aws,
#    JDBC drivers, the Iceberg REST fixture) from Maven Central into .jvm/ (cached; milliseconds when current);
# 2. scripts/bootstrap.sh with VENV=.venv-interop and pyspark pinned to PYSPARK_VERSION of
#    integration/jvm/versions.env: the Spark that Iceberg's runtime jar is built for, which is also the
#    oldest Spark fencedlake supports (cached by the bootstrap stamp);
# 3. integration/run.sh in that venv (the same services on 127.0.0.1, Iceberg's REST fixture among
#    them) with FENCEDLAKE_INTEROP=1, which lets pytest collect integration/interop/.
#
# Env: FENCEDLAKE_INTEROP_VENV (.venv-interop), FENCEDLAKE_INTEROP_FULL=1 (every scenario on every
# catalog, the full mixed-writer rounds and benchmark sizes; the default is the CI-sized profile), and
# everything integration/run.sh reads (service ports, FENCEDLAKE_IT_KEEP_SERVICES, ...).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
log() { printf '[interop] %s\n' "$*"; }

t0=$SECONDS
integration/jvm/fetch.sh spark rest
log "jars ready in $((SECONDS - t0)) s"

IVENV="${FENCEDLAKE_INTEROP_VENV:-.venv-interop}"
case "$IVENV" in /*) ;; *) IVENV="$ROOT/$IVENV" ;; esac
pyspark_version="$(sed -n 's/^PYSPARK_VERSION=//p' integration/jvm/versions.env)"
[ -n "$pyspark_version" ] || { log "ERROR: no PYSPARK_VERSION in integration/jvm/versions.env"; exit 1; }
mkdir -p .jvm
constraints=".jvm/interop-constraints.txt"
printf 'pyspark==%s\n' "$pyspark_version" >"$constraints.tmp" && mv "$constraints.tmp" "$constraints"
t1=$SECONDS
VENV="$IVENV" PIP_CONSTRAINT="$ROOT/$constraints" scripts/bootstrap.sh
log "venv $IVENV (pyspark $pyspark_version) ready in $((SECONDS - t1)) s"

if [ "${1:-}" = --prepare ]; then  # scripts/test.sh: jars and venv ahead of time, in the background
    log "prepared (jars and $IVENV) in $((SECONDS - t0)) s"
    exit 0
fi
args=("$@")
[ "${#args[@]}" -gt 0 ] || args=(integration/interop)
export VENV="$IVENV"
export FENCEDLAKE_SKIP_BOOTSTRAP=1 FENCEDLAKE_INTEROP=1
export PYSPARK_PYTHON="$IVENV/bin/python" PYSPARK_DRIVER_PYTHON="$IVENV/bin/python"
exec integration/run.sh "${args[@]}"
