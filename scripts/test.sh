#!/usr/bin/env bash
# THE test command: `make test` runs it and CI runs `make test` (.ci/run).
#
#   scripts/test.sh                    all stages: unit wheel integration interop bench
#   scripts/test.sh unit               only `pytest tests`
#   scripts/test.sh integration bench  any subset, in the given order
#
# Stages:
#   unit         python -m pytest tests -n 2 --dist loadfile
#                                                  (hermetic: unit, model, Spark local[2]; two pytest-xdist
#                                                   workers, each test module whole in one of them, so a
#                                                   module still shares one Spark session; the Spark-free
#                                                   model and the Spark tests overlap on the two cores:
#                                                   1,300 s -> 790 s here. FENCEDLAKE_TEST_WORKERS=1 runs
#                                                   it in one process)
#   wheel        scripts/wheel_check.sh            (the built wheel in a fresh venv WITHOUT extras:
#                                                   imports, console script, batch + thread +
#                                                   streaming writes through real Spark, read back)
#   integration  integration/run.sh                (starts PostgreSQL + S3 on 127.0.0.1,
#                                                   pytest integration -n 2 --dist loadscope, stops
#                                                   them: two workers, each module whole in one, the
#                                                   longest first (integration/conftest.py); no module
#                                                   changes a service another uses;
#                                                   FENCEDLAKE_TEST_WORKERS=1 runs it in one process)
#   interop      integration/interop/run.sh        (Apache Iceberg's Java implementation beside us: pinned
#                                                   jars from Maven Central, a venv with the pyspark they
#                                                   match, the same services; CI-sized,
#                                                   FENCEDLAKE_INTEROP_FULL=1 for the full run)
#   bench        python -m benchmarks.run --quick  (smoke run, only if benchmarks/run.py
#                                                   exists; fails on an exception, never
#                                                   on a wall-clock number)
#
# Every stage runs even if an earlier one failed: CI output then shows all failures of
# a run at once instead of one per push. The exit status is 1 if any stage failed.
# pytest's exit code 5 ("no tests collected") counts as a failure: a suite that ran no
# test has proved nothing.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
case "$VENV" in /*) ;; *) VENV="$ROOT/$VENV" ;; esac
export VENV
PY="$VENV/bin/python"

log() { printf '[test] %s\n' "$*"; }

# Bootstrap is a no-op (a stamp check) when the venv is current; `make test` already ran it.
scripts/bootstrap.sh || { log "FAILED: scripts/bootstrap.sh"; exit 1; }

# Spark's Python workers must use the venv's interpreter (where our package is).
export PYSPARK_PYTHON="$PY"
export PYSPARK_DRIVER_PYTHON="$PY"
export PYTHONUNBUFFERED=1
export PIP_NO_INPUT=1
export FENCEDLAKE_SKIP_BOOTSTRAP=1

OUT="$(mktemp -d "${TMPDIR:-/tmp}/fencedlake-test.XXXXXX")"
trap 'rm -rf "$OUT"' EXIT

stages=("$@")
[ "${#stages[@]}" -gt 0 ] || stages=(unit wheel integration interop bench)

names=() results=() secs=() counts=()
failed=0

# The interop stage's downloads (Iceberg's jars, a second virtualenv with another pyspark: a few minutes
# on a fresh machine, mostly network and disk) are made in the background while the first stages run.
# The integration and interop stages wait for them; a failure here shows up again in the interop stage
# (its own run of the same steps), so it is only logged. FENCEDLAKE_PREPARE_INTEROP=0 turns this off.
prepare_pid=""
if [[ " ${stages[*]} " == *" interop "* ]] && [ "${FENCEDLAKE_PREPARE_INTEROP:-1}" = 1 ]; then
    integration/interop/run.sh --prepare >"$OUT/interop-prepare.log" 2>&1 &
    prepare_pid=$!
    log "preparing the interop stage in the background (pid $prepare_pid)"
fi
prepared() {  # wait for the background preparation, once
    [ -n "$prepare_pid" ] || return 0
    if wait "$prepare_pid"; then
        log "interop preparation: $(tail -n 1 "$OUT/interop-prepare.log")"
    else
        log "interop preparation failed (the interop stage runs its steps again); its log:"
        tail -n 30 "$OUT/interop-prepare.log"
    fi
    prepare_pid=""
}

# pytest_counts FILE -> "passed failed skipped" from a JUnit XML report (empty if none).
pytest_counts() {
    [ -s "$1" ] || return 0
    "$PY" - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
tests = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(tests - failed - skipped, failed, skipped)
PY
}

run_stage() {  # run_stage NAME JUNIT_XML_OR_- CMD...
    local name="$1" xml="$2"
    shift 2
    log "===== stage '$name': $* ====="
    local t0=$SECONDS rc
    "$@"
    rc=$?
    local dt=$((SECONDS - t0)) result
    if [ "$rc" -eq 0 ]; then
        result="ok"
    elif [ "$rc" -eq 5 ] && [ "$xml" != - ]; then
        result="FAILED (pytest collected no tests)"
        log "stage '$name' FAILED: pytest exit 5, no tests were collected -- a stage that runs no test proves nothing"
    else
        result="FAILED (exit $rc)"
    fi
    [ "$rc" -eq 0 ] || failed=1
    local c=""
    [ "$xml" != - ] && c="$(pytest_counts "$xml")"
    names+=("$name") results+=("$result") secs+=("$dt") counts+=("${c:-}")
    log "stage '$name': $result in ${dt}s"
}

# pytest-xdist's arguments in `parallel`: FENCEDLAKE_TEST_WORKERS (default 2) workers, tests spread by mode $1;
# none with 1 worker.
xdist() {
    local workers="${FENCEDLAKE_TEST_WORKERS:-2}"
    parallel=()
    if [ "$workers" -gt 1 ]; then
        parallel=(-n "$workers" --dist "$1")
    fi
}

for stage in "${stages[@]}"; do
    case "$stage" in
    unit)
        xdist loadfile
        run_stage unit "$OUT/unit.xml" "$PY" -m pytest tests "${parallel[@]}" --durations=15 --junitxml="$OUT/unit.xml"
        ;;
    wheel)
        run_stage wheel - scripts/wheel_check.sh
        ;;
    integration)
        prepared  # both fetch Iceberg's jars (integration/jvm/fetch.sh): never at the same time
        xdist loadscope
        run_stage integration "$OUT/integration.xml" integration/run.sh integration "${parallel[@]}" \
            --durations=15 --junitxml="$OUT/integration.xml"
        ;;
    interop)
        prepared
        run_stage interop "$OUT/interop.xml" integration/interop/run.sh integration/interop --junitxml="$OUT/interop.xml"
        ;;
    bench)
        if [ -f benchmarks/run.py ]; then
            run_stage bench - "$PY" -m benchmarks.run --quick
        else
            names+=(bench) results+=("not run (benchmarks/run.py does not exist yet)") secs+=(0) counts+=("")
            log "stage 'bench': benchmarks/run.py does not exist yet; nothing to run"
        fi
        ;;
    *)
        log "unknown stage '$stage' (want: unit wheel integration interop bench)"
        names+=("$stage") results+=("FAILED (unknown stage)") secs+=(0) counts+=("")
        failed=1
        ;;
    esac
done

total_pass=0 total_fail=0 total_skip=0
echo
log "===== summary ====="
for i in "${!names[@]}"; do
    detail=""
    if [ -n "${counts[$i]}" ]; then
        read -r p f s <<<"${counts[$i]}"
        detail="  ($p passed, $f failed, $s skipped)"
        total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_skip=$((total_skip + s))
    fi
    printf '[test]   %-12s %5ss  %s%s\n' "${names[$i]}" "${secs[$i]}" "${results[$i]}" "$detail"
done
log "overall: $([ "$failed" -eq 0 ] && echo PASSED || echo FAILED)"
# Plain closing line, summed over the pytest stages.
echo "tests: $total_pass passed, $total_fail failed, $total_skip skipped"
exit "$failed"
