#!/usr/bin/env bash
# Create or refresh the project's virtualenv: ${VENV:-.venv} (relative to the repo root).
#
#   scripts/bootstrap.sh                     # .venv, editable install with [test,postgres]
#   VENV=/tmp/venv-check scripts/bootstrap.sh
#   PYTHON=python3.12 scripts/bootstrap.sh   # interpreter used to create the venv
#   FORCE=1 scripts/bootstrap.sh             # reinstall even if nothing changed
#   PIP_CONSTRAINT=pins.txt scripts/bootstrap.sh   # pip's constraint file (pins; part of the stamp)
#
# Idempotent and fast when nothing changed: a stamp file inside the venv records a
# hash of setup.cfg + pyproject.toml + the interpreter version; when it matches and
# the package is still importable, nothing is installed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-test,postgres}"
STAMP="$VENV/.fencedlake-bootstrap.stamp"

log() { printf '[bootstrap] %s\n' "$*"; }
die() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; [ "$rc" -eq 0 ] || printf "[bootstrap] FAILED (exit %s) at line %s; venv: %s\n" "$rc" "$LINENO" "$VENV" >&2' EXIT

command -v "$PYTHON" >/dev/null 2>&1 || die "interpreter '$PYTHON' not found (set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "$("$PYTHON" --version 2>&1) is too old: python_requires >= 3.11"
PYVER="$("$PYTHON" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')"

# Serialize concurrent bootstraps of the same venv (e.g. `make demo` and `make test`).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.bootstrap.lock"
flock 9

want="$(cat setup.cfg pyproject.toml | sha256sum | cut -d' ' -f1) python-$PYVER extras-$EXTRAS"
# A pip constraint file (integration/interop/run.sh pins the interop venv's pyspark with one) is part of the stamp.
if [ -n "${PIP_CONSTRAINT:-}" ]; then
    [ -f "$PIP_CONSTRAINT" ] || die "PIP_CONSTRAINT=$PIP_CONSTRAINT is not a file"
    want="$want constraints-$(sha256sum <"$PIP_CONSTRAINT" | cut -c1-16)"
fi

if [ "${FORCE:-0}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] \
    && "$VENV/bin/python" -c 'import importlib.metadata as m, importlib.util as u, sys
m.version("pyspark-fenced-sink"); sys.exit(u.find_spec("pyspark_fenced_sink") is None)' \
        >/dev/null 2>&1; then
    log "up to date: $VENV (python $PYVER; setup.cfg/pyproject.toml unchanged)"
    exit 0
fi

start=$SECONDS
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    have="$("$VENV/bin/python" -c 'import sys; print(".".join(map(str, sys.version_info[:3])))')"
    if [ "$have" != "$PYVER" ]; then
        log "venv has python $have, want $PYVER: recreating $VENV"
        rm -rf "$VENV"
    fi
elif [ -e "$VENV" ]; then
    log "venv at $VENV is broken (no working python): recreating"
    rm -rf "$VENV"
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating venv $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
log "upgrading pip"
"${PIP[@]}" install --quiet --upgrade pip
log "installing pyspark-fenced-sink (editable) with extras [$EXTRAS] -- a cold install downloads ~600 MB"
# editable_mode=compat: a plain .pth entry for the checkout. setuptools' default
# (an import-hook finder) hides the package from pkgutil.iter_modules(), and Spark
# finds `pyspark_*` data sources to auto-register by exactly that scan.
"${PIP[@]}" install --progress-bar off --config-settings editable_mode=compat -e ".[$EXTRAS]"

log "checking the install"
# From / so the checkout is not on sys.path by way of the current directory.
(cd / && "$VENV/bin/python" -) <<'PY'
import importlib.metadata as md
import pkgutil

for dist in ("pyspark-fenced-sink", "pyspark", "pyarrow", "pyiceberg", "s3fs", "moto", "duckdb"):
    print(f"[bootstrap]   {dist:<22} {md.version(dist)}")
# Spark auto-registers data sources by scanning top-level modules named pyspark_*:
# the package must be visible to pkgutil, not only through an import hook.
found = [m.name for m in pkgutil.iter_modules() if m.name == "pyspark_fenced_sink"]
if not found:
    raise SystemExit("[bootstrap] pyspark_fenced_sink is not visible to pkgutil.iter_modules(): "
                     "Spark would not auto-register format('fencedlake')")
PY

printf '%s\n' "$want" >"$STAMP"
log "done in $((SECONDS - start)) s: $VENV"
