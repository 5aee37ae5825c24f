#!/usr/bin/env bash
# The package stage of `make test`: what a user gets from `pip install pyspark-fenced-sink`.
#
#   scripts/wheel_check.sh
#
# Builds the wheel from the checkout, creates a fresh venv (outside the checkout), installs the wheel
# WITHOUT extras, and runs scripts/wheel_smoke.py there from a directory that is not the checkout: every
# module imports, the console script runs, a batch write (also from a worker thread) and a streaming write
# go through real Spark and read back exactly. pip's cache (warmed by scripts/bootstrap.sh) makes the
# install a copy, not a download. Exit status: 0 ok, non-zero with the failing step named.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fencedlake-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log() { printf '[wheel] %s\n' "$*"; }

t0=$SECONDS
log "building the wheel from $ROOT"
"$PYTHON" -m pip wheel --disable-pip-version-check --no-input --no-deps --wheel-dir "$WORK/dist" "$ROOT" \
    >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; log "FAILED: building the wheel"; exit 1; }
wheel="$(ls "$WORK"/dist/*.whl)"
log "built $(basename "$wheel") in $((SECONDS - t0)) s"

t1=$SECONDS
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input "$wheel"
log "installed into a fresh venv without extras in $((SECONDS - t1)) s"

cd "$WORK"  # not the checkout: only the installed wheel can be imported
PATH="$WORK/venv/bin:$PATH" PYSPARK_PYTHON="$WORK/venv/bin/python" PYSPARK_DRIVER_PYTHON="$WORK/venv/bin/python" \
    "$WORK/venv/bin/python" "$ROOT/scripts/wheel_smoke.py"
log "ok in $((SECONDS - t0)) s"
