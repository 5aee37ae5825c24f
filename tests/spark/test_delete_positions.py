"""``collected_positions``: each dirty data file's deleted positions, scoped as the planner scopes them.

Spark-free. Both ways of reading are checked against the positions written: one pyarrow dataset
(a pyarrow FileIO, every delete file on one filesystem) and each file through the FileIO (any other).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from pyspark_fenced_sink.iceberg.codec.fileio import LeanFileIO
from pyspark_fenced_sink.spark import delete_positions
from pyspark_fenced_sink.spark.delete_positions import collected_positions


@dataclass(frozen=True)
class _Dirty:
    path: str
    delete_files: tuple[str, ...]


def _delete_file(path: Path, rows: list[tuple[str, int]], *, large: bool = False) -> str:
    kind = pa.large_string() if large else pa.string()
    names = pa.array([name for name, _ in rows], kind)
    pq.write_table(pa.table({"file_path": names, "pos": pa.array([pos for _, pos in rows], pa.int64())}), path)
    return str(path)


def _state(tmp_path: Path) -> tuple[list[_Dirty], list[list[int]]]:
    """Three dirty files; a delete file naming two of them but scoped to one; a row naming an unplanned file."""
    a, b, c = (f"file:///wh/data/{n}.parquet" for n in ("a", "b", "c"))
    d1 = _delete_file(tmp_path / "d1.parquet", [(a, 0), (a, 3), (b, 7)])  # scoped to a only: b's 7 does not count
    d2 = _delete_file(tmp_path / "d2.parquet", [(b, 1), (b, 2), ("file:///wh/data/gone.parquet", 5)], large=True)
    d3 = _delete_file(tmp_path / "d3.parquet", [])
    d4 = _delete_file(tmp_path / "d4.parquet", [(c, 9), (a, 4)])  # scoped to both: each keeps its own row
    dirty = [_Dirty(a, (d1, d4)), _Dirty(b, (d2, d3)), _Dirty(c, (d3, d4))]
    return dirty, [[0, 3, 4], [1, 2], [9]]


@pytest.mark.parametrize("io", ["lean", "pyarrow", "fsspec"])
def test_positions_count_only_for_the_data_files_their_delete_file_is_scoped_to(tmp_path: Path, io: str) -> None:
    dirty, expected = _state(tmp_path)
    file_io: Any = {"lean": LeanFileIO, "pyarrow": PyArrowFileIO, "fsspec": FsspecFileIO}[io]({})
    dataset = delete_positions._arrow_paths(file_io, [p for f in dirty for p in f.delete_files])
    assert (dataset is not None) is (io != "fsspec")
    found = collected_positions(file_io, dirty)
    assert [sorted(p.tolist()) for p in found] == expected
    assert all(p.dtype == np.int64 for p in found)


def test_no_delete_files_and_no_dirty_files(tmp_path: Path) -> None:
    assert collected_positions(LeanFileIO(), []) == []
    empty = _delete_file(tmp_path / "e.parquet", [])
    found = collected_positions(FsspecFileIO({}), [_Dirty("file:///wh/a.parquet", (empty,))])
    assert [p.tolist() for p in found] == [[]]


def test_files_on_two_filesystems_are_read_one_by_one(tmp_path: Path) -> None:
    """No one pyarrow filesystem holds them all: each goes through the FileIO."""
    assert delete_positions._arrow_paths(LeanFileIO(), ["/a/d1.parquet", "s3://bucket/d2.parquet"]) is None


def test_a_delete_file_read_once_is_not_read_again_and_the_upserts_cache_shares_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delete files are immutable: the second read of a state reads nothing; an upsert's lookup finds them kept."""
    from pyspark_fenced_sink.iceberg.commit import key_index

    dirty, expected = _state(tmp_path)
    first = collected_positions(LeanFileIO(), dirty)
    reads: list[Any] = []
    real = delete_positions._read
    monkeypatch.setattr(delete_positions, "_read", lambda io, paths: reads.append(paths) or real(io, paths))
    again = collected_positions(LeanFileIO(), dirty)
    assert reads == [] and [p.tolist() for p in again] == [p.tolist() for p in first]
    assert [sorted(p.tolist()) for p in again] == expected
    a, d4 = dirty[0].path, dirty[0].delete_files[1]
    kept = key_index.known_delete_positions([d4])
    assert {k: v.tolist() for k, v in kept[d4].items()} == {a: [4], "file:///wh/data/c.parquet": [9]}
    # one new delete file: only it is read
    d5 = _delete_file(tmp_path / "d5.parquet", [(a, 6), (a, 6)])  # a position named twice counts once
    grown = collected_positions(LeanFileIO(), [_Dirty(a, (*dirty[0].delete_files, d5))])
    assert reads == [[d5]] and sorted(grown[0].tolist()) == [0, 3, 4, 6]
