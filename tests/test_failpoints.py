"""Named fail points at protocol steps (PROTOCOL.md §9)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.failpoints import DIR_ENV, ENV, POINTS, FailPointError

ROOT = Path(__file__).resolve().parents[1]
POINT = "commit.after-wal-put"
OTHER = "commit.before-wal-put"


def _disarm() -> None:
    """No option spec, and re-parse now so that @N counts start from zero in the next test."""
    failpoints.configure(None)
    failpoints.set_handler(None)
    failpoints.hit("gc.before-delete")  # nothing armed: re-reads the (empty) spec and clears the hit counts


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv(DIR_ENV, raising=False)
    _disarm()
    yield
    monkeypatch.delenv(ENV, raising=False)
    _disarm()


def _hits_until_raise(name: str, limit: int = 10) -> list[bool]:
    """Hit ``name`` ``limit`` times; True where it raised."""
    fired = []
    for _ in range(limit):
        try:
            failpoints.hit(name)
            fired.append(False)
        except FailPointError:
            fired.append(True)
    return fired


def test_the_protocol_steps_are_the_named_points() -> None:
    """The armable names are exactly the documented protocol steps."""
    assert sorted(POINTS) == [
        "commit.after-catalog-commit",
        "commit.after-manifests-written",
        "commit.after-wal-put",
        "commit.before-catalog-commit",
        "commit.before-wal-put",
        "compact.after-plan",
        "compact.after-rewrite",
        "driver.after-open",
        "executor.after-file-written",
        "gc.after-barrier",
        "gc.before-delete",
        "read.before-file",
        "stream.after-register",
        "upsert.after-deletes-written",
        "upsert.after-key-file-written",
        "upsert.after-tombstones-merged",
    ]


def test_unarmed_points_do_nothing() -> None:
    """With nothing armed every point is a no-op."""
    assert [_hits_until_raise(p, 2) for p in sorted(POINTS)] == [[False, False]] * len(POINTS)


def test_environment_arms_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """FENCEDLAKE_FAILPOINTS=name=raise raises at that point, every hit, and nowhere else."""
    monkeypatch.setenv(ENV, f"{POINT}=raise")
    with pytest.raises(FailPointError, match=f"fail point {POINT} fired"):
        failpoints.hit(POINT)
    assert _hits_until_raise(POINT, 3) == [True, True, True]
    assert _hits_until_raise(OTHER, 2) == [False, False]


def test_option_arms_and_configure_none_disarms() -> None:
    """The ``test.failpoints`` option value (``configure``) arms points; configure(None) disarms them."""
    failpoints.configure(f"{POINT}=raise")
    assert _hits_until_raise(POINT, 1) == [True]
    failpoints.configure(None)
    assert _hits_until_raise(POINT, 1) == [False]


def test_environment_and_option_specs_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Points armed by the environment and by the option are both armed."""
    monkeypatch.setenv(ENV, f"{POINT}=raise")
    failpoints.configure(f"{OTHER}=raise")
    assert _hits_until_raise(POINT, 1) == [True]
    assert _hits_until_raise(OTHER, 1) == [True]


def test_several_points_in_one_spec() -> None:
    """``;`` separates points; blanks around parts are ignored."""
    failpoints.configure(f" {POINT}=raise@2 ; {OTHER}=raise ;")
    assert _hits_until_raise(POINT, 3) == [False, True, False]
    assert _hits_until_raise(OTHER, 1) == [True]


def test_at_n_fires_only_on_the_nth_hit() -> None:
    """``@3`` fires on the third hit of that point only; hits of other points do not count."""
    failpoints.configure(f"{POINT}=raise@3")
    failpoints.hit(OTHER)
    assert _hits_until_raise(POINT, 5) == [False, False, True, False, False]


def test_rearming_restarts_the_count() -> None:
    """A changed spec counts hits from zero again."""
    failpoints.configure(f"{POINT}=raise@2")
    assert _hits_until_raise(POINT, 1) == [False]
    failpoints.configure(f"{POINT}=raise@2;{OTHER}=raise@9")
    assert _hits_until_raise(POINT, 2) == [False, True]


def test_sleep_waits_then_continues() -> None:
    """``sleep:MS`` delays the step by MS milliseconds and does not raise."""
    failpoints.configure(f"{POINT}=sleep:150")
    started = time.monotonic()
    failpoints.hit(POINT)
    elapsed = time.monotonic() - started
    assert 0.15 <= elapsed < 2.0


def test_handler_sees_every_hit_armed_or_not() -> None:
    """A handler installed by core tests is called with the point's name at every hit."""
    seen: list[str] = []
    failpoints.set_handler(seen.append)
    failpoints.hit(POINT)
    failpoints.hit(OTHER)
    failpoints.configure(f"{POINT}=raise")
    with pytest.raises(FailPointError):
        failpoints.hit(POINT)
    assert seen == [POINT, OTHER, POINT]


def test_hitting_an_unknown_point_is_a_programming_error() -> None:
    """Code can only hit declared points."""
    with pytest.raises(ValueError, match=r"unknown fail point 'commit\.after-wal-pt'"):
        failpoints.hit("commit.after-wal-pt")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("no.such-point=raise", "bad fail point 'no.such-point=raise'"),
        (f"{POINT}", f"bad fail point '{POINT}'"),
        (f"{POINT}=explode", "bad fail point action 'explode'"),
        (f"{POINT}=sleep:", "bad fail point action 'sleep:'"),
        (f"{POINT}=sleep:abc", "bad fail point action 'sleep:abc'"),
        (f"{POINT}=sleep:-5", "bad fail point action 'sleep:-5'"),
        (f"{POINT}=raise@x", "bad fail point count 'x'"),
        (f"{POINT}=raise@0", "bad fail point count '0'"),
        (f"{POINT}=raise@", "bad fail point count ''"),
    ],
)
def test_validate_rejects_bad_specs(spec: str, match: str) -> None:
    """validate() names what is wrong: an unknown point, a missing or unknown action, a bad count or delay."""
    with pytest.raises(ValueError, match=match):
        failpoints.validate(spec)


@pytest.mark.parametrize(
    "spec", ["", f"{POINT}=raise", f"{POINT}=crash@2", f"{POINT}=pause", f"{POINT}=sleep:0;{OTHER}=sleep:25@1"]
)
def test_validate_accepts_good_specs(spec: str) -> None:
    """Every documented action and form validates."""
    failpoints.validate(spec)


# ---------------------------------------------------------------------------------------------- real processes


def _child(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    full_env.pop(ENV, None)
    full_env.update(env)
    return subprocess.Popen(
        [sys.executable, "-c", code], env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


CHILD = (
    "from pyspark_fenced_sink import failpoints\n"
    "import sys\n"
    "failpoints.configure(sys.argv[1] if len(sys.argv) > 1 else None)\n"
    "for i in range(3):\n"
    "    print('before', i, flush=True)\n"
    f"    failpoints.hit({POINT!r})\n"
    "print('survived', flush=True)\n"
)


@pytest.mark.parametrize(
    ("spec", "printed"), [(f"{POINT}=crash", "before 0\n"), (f"{POINT}=crash@2", "before 0\nbefore 1\n")]
)
def test_crash_exits_86_at_once(spec: str, printed: str) -> None:
    """``crash`` ends the process with exit code 86 at the step, running nothing after it."""
    proc = _child(CHILD, {ENV: spec})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 86, err
    assert out == printed


def test_crash_armed_by_the_option_in_a_child() -> None:
    """The option path (``configure``) arms a crash too."""
    proc = _child(CHILD.replace("sys.argv[1] if len(sys.argv) > 1 else None", f"{POINT + '=crash'!r}"), {})
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 86, err
    assert out == "before 0\n"


def test_unarmed_child_runs_to_the_end() -> None:
    """Control: the same child without a fail point exits 0."""
    proc = _child(CHILD, {})
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out.endswith("survived\n")


def test_pause_writes_a_marker_and_blocks_until_killed(tmp_path: Path) -> None:
    """``pause`` creates ``<dir>/<name>.hit`` with the pid and blocks, so a harness can kill -9 at that step."""
    proc = _child(CHILD, {ENV: f"{POINT}=pause@2", DIR_ENV: str(tmp_path)})
    marker = tmp_path / f"{POINT}.hit"
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), "the paused child never wrote its marker"
        time.sleep(0.2)
        assert proc.poll() is None, "the child did not block at the paused step"
        assert marker.read_text() == str(proc.pid)
    finally:
        proc.kill()
        out, _ = proc.communicate(timeout=30)
    assert out == "before 0\nbefore 1\n"
    assert proc.returncode == -9
