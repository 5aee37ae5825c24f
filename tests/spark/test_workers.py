"""``settle``: the sink's Python workers freeze their import-time heap once; the user's process is left alone."""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import zipfile
import zipimport
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.spark import workers
from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
from pyspark_fenced_sink.spark.datasource import FencedLakeDataSource
from pyspark_fenced_sink.spark.workers import GC_FREEZE_ENV, ZIP_CACHE_ENV, Role, in_spark_worker, settle

OLD_ZIPIMPORT = sys.version_info < (3, 13)  # before 3.13 a zip importer re-reads its archive on invalidation


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A process that counts as a Spark worker with nothing settled yet; counts gc.collect calls; unfreezes after."""
    monkeypatch.setattr(workers, "_settled", set())
    monkeypatch.setattr(workers, "_worker", [True])
    monkeypatch.delenv(GC_FREEZE_ENV, raising=False)
    monkeypatch.setenv(ZIP_CACHE_ENV, "0")  # the zip importers' change has its own tests below
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


# --- zip importers re-read an archive only when it changed ----------------------------------------------------


def _archive(path: Path, modules: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("zpkg/__init__.py", "")
        for name, text in modules.items():
            z.writestr(f"zpkg/{name}.py", text)


@pytest.fixture
def zipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, list[str]]]:
    """An archive on sys.path with a package in it (two importers: the archive and its package), reads counted."""
    archive = tmp_path / "lib.zip"
    _archive(archive, {"first": "VALUE = 1"})
    reads: list[str] = []
    real = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(path: str) -> Any:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(zipimport, "_read_directory", counting)
    monkeypatch.setattr(zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches)
    monkeypatch.syspath_prepend(str(archive))
    importlib.import_module("zpkg.first")
    yield archive, reads
    for name in [m for m in sys.modules if m == "zpkg" or m.startswith("zpkg.")]:
        del sys.modules[name]
    for key in [k for k in sys.path_importer_cache if k.startswith(str(archive))]:
        del sys.path_importer_cache[key]


@pytest.mark.skipif(not OLD_ZIPIMPORT, reason="Python 3.13+ drops a zip importer's cache lazily")
def test_python_rereads_every_importers_archive_on_each_invalidation(zipped: tuple[Path, list[str]]) -> None:
    """What pyspark's per-request ``importlib.invalidate_caches()`` costs without the change: a read per importer."""
    archive, reads = zipped
    reads.clear()
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 4  # the archive's importer and its package's, twice


@pytest.mark.skipif(not OLD_ZIPIMPORT, reason="Python 3.13+ drops a zip importer's cache lazily")
def test_an_unchanged_archive_is_not_read_again_and_a_changed_one_is(zipped: tuple[Path, list[str]]) -> None:
    """After the change: one read for the first invalidation, none while unchanged, one after a rewrite."""
    archive, reads = zipped
    assert workers._reread_changed_archives_only() is True
    assert workers._reread_changed_archives_only() is False  # installed once
    reads.clear()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 1
    importlib.invalidate_caches()
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 1
    _archive(archive, {"first": "VALUE = 1", "second": "VALUE = 2"})  # another size: changed
    importlib.invalidate_caches()
    assert reads.count(str(archive)) == 2
    assert importlib.import_module("zpkg.second").VALUE == 2


def test_settle_changes_zip_importers_only_in_a_worker_and_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first settle in a worker installs it (unless switched off); the user's process is left alone."""
    calls: list[int] = []
    monkeypatch.setattr(workers, "_reread_changed_archives_only", lambda: bool(calls.append(1)))
    monkeypatch.setenv(GC_FREEZE_ENV, "0")
    monkeypatch.delenv(ZIP_CACHE_ENV, raising=False)
    for worker, expected in ((False, 0), (True, 1)):
        monkeypatch.setattr(workers, "_settled", set())
        monkeypatch.setattr(workers, "_worker", [worker])
        settle(Role.WRITE_TASK)
        settle(Role.DRIVER)
        assert len(calls) == expected
    monkeypatch.setattr(workers, "_settled", set())
    monkeypatch.setenv(ZIP_CACHE_ENV, "off")
    settle(Role.READ_TASK)
    assert len(calls) == 1


# --- in Spark: the workers of a real fencedlake write freeze ---------------------------------------------------

PROBE = "probe.dir"


def _record(directory: str, stage: str) -> None:
    """What the calling worker's heap looks like after the sink's own entry point ran in it."""
    path = Path(directory) / f"{stage}-{os.getpid()}.json"
    zip_cache = getattr(zipimport.zipimporter.invalidate_caches, "_fencedlake", False)
    path.write_text(json.dumps({"frozen": gc.get_freeze_count(), "worker": in_spark_worker(), "zip": zip_cache}))


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
    assert all(r["zip"] == OLD_ZIPIMPORT for r in records.values()), records
