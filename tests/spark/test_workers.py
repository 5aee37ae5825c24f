"""``settle``: the sink's Python workers freeze their import-time heap once; the user's process is left alone."""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.spark import workers
from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource
from pyspark_fenced_sink.spark.workers import GC_FREEZE_ENV, Role, in_spark_worker, settle


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A process that counts as a Spark worker with nothing settled yet; counts gc.collect calls; unfreezes after."""
    monkeypatch.setattr(workers, "_settled", set())
    monkeypatch.setattr(workers, "_worker", [True])
    monkeypatch.delenv(GC_FREEZE_ENV, raising=False)
    collects: list[int] = []
    real = gc.collect

    def counting(*args: Any) -> int:
        collects.append(1)
        return real(*args)

    monkeypatch.setattr(workers.gc, "collect", counting)
    yield collects
    gc.unfreeze()


def test_settle_in_a_worker_freezes_once_per_role(fresh: list[int]) -> None:
    """The first call imports, collects and freezes; a second call for the same role collects nothing."""
    gc.unfreeze()
    assert settle(Role.WRITE_TASK) is True
    assert gc.get_freeze_count() > 0 and len(fresh) == 1
    assert settle(Role.WRITE_TASK) is False
    assert len(fresh) == 1


def test_settle_imports_the_roles_modules(fresh: list[int]) -> None:
    """The driver role's catalog modules are loaded before the freeze, so their objects are frozen."""
    import sys

    settle(Role.DRIVER)
    assert "pyspark_fenced_sink.write.transaction" in sys.modules and "pyiceberg.catalog.sql" in sys.modules


def test_settle_is_off_with_the_environment_switch(fresh: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """FENCEDLAKE_GC_FREEZE=0 leaves the heap as it is."""
    gc.unfreeze()
    monkeypatch.setenv(GC_FREEZE_ENV, "0")
    assert settle(Role.READ_TASK) is False
    assert gc.get_freeze_count() == 0 and not fresh


def test_settle_in_the_users_process_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process is no Spark worker: its heap is never frozen."""
    monkeypatch.setattr(workers, "_settled", set())
    monkeypatch.setattr(workers, "_worker", [])
    gc.unfreeze()
    assert in_spark_worker() is False
    assert settle(Role.DRIVER) is False
    assert gc.get_freeze_count() == 0


# --- in Spark: the workers of a real fencedlake write freeze ---------------------------------------------------

PROBE = "probe.dir"


def _record(directory: str, stage: str) -> None:
    """What the calling worker's heap looks like after the sink's own entry point ran in it."""
    path = Path(directory) / f"{stage}-{os.getpid()}.json"
    path.write_text(json.dumps({"frozen": gc.get_freeze_count(), "worker": in_spark_worker()}))


class _ProbedWriter(FencedLakeBatchWriter):
    """The sink's batch writer, recording each worker's freeze state after the sink's method ran."""

    def __init__(self, txn: Any, probe: str) -> None:
        super().__init__(txn)
        self.probe = probe

    def write(self, iterator: Iterator[Any]) -> Any:
        message = super().write(iterator)
        _record(self.probe, "task")
        return message

    def commit(self, messages: Sequence[Any]) -> None:  # type: ignore[override]
        super().commit(messages)
        _record(self.probe, "commit")


class _ProbedSource(FencedLakeDataSource):
    """``fencedlake`` with a probe directory option (taken out before the sink parses its options)."""

    @classmethod
    def name(cls) -> str:
        return "fencedlake_settle_probe"

    def writer(self, schema: Any, overwrite: bool) -> Any:
        probe = self.options.pop(PROBE)
        sink = super().writer(schema, overwrite)
        _record(probe, "planning")
        return _ProbedWriter(sink.txn, probe)


@pytest.mark.spark
def test_a_writes_planning_task_and_commit_workers_are_frozen(spark: Any, tmp_path: Path) -> None:
    """Every Python worker a batch write ran in has a frozen heap after the sink's entry point ran there."""
    spark.dataSource.register(_ProbedSource)
    probe = tmp_path / "probe"
    probe.mkdir()
    frame = spark.range(0, 100, 1, 2)
    writer = frame.write.format("fencedlake_settle_probe").mode("append").option("warehouse", str(tmp_path / "wh"))
    writer.option(PROBE, str(probe)).save("db.settled")
    records = {p.name: json.loads(p.read_text()) for p in probe.iterdir()}
    stages = {name.split("-")[0] for name in records}
    assert stages == {"planning", "task", "commit"}, records
    assert all(r["worker"] and r["frozen"] > 0 for r in records.values()), records
