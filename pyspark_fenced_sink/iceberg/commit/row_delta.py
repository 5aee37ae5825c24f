"""Position delete files and the snapshot producer that commits them (PROTOCOL.md §5.5, §5.2; driver).

pyiceberg 0.12 writes delete files into no manifest (its producers know data
manifests only) and cannot create format-3 tables, so deletion vectors are out:
fencedlake deletes rows with Iceberg format-2 **position deletes**, which
pyiceberg, DuckDB and fencedlake's readers apply.

* :func:`write_position_deletes` writes one *file-scoped* delete file: the
  positions of one data file, its ``file_path`` bounds equal (readers then match
  it to that file alone; Iceberg Java writes them the same way), in the data
  file's partition and spec, named ``d-<table tag>-<upper>-<nonce>.parquet``
  (``protocol.filetag.ApplyTag``: ``gc`` can judge it).
* :class:`RowDelta` is pyiceberg's overwrite producer plus delete files: added
  ones go into a delete manifest per partition spec, removed ones (a compaction
  folding them) are marked deleted in the delete manifests that list them, and
  the summary counts both.

It builds on pyiceberg 0.12's private producer API, like ``iceberg.commit.manifests``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _OverwriteFiles
from pyiceberg.types import LongType, NestedField, StringType

from pyspark_fenced_sink.iceberg.codec.datafiles import data_file_layout_version

__all__ = ["POSITION_DELETE_SCHEMA", "RowDelta", "named_data_file", "write_position_deletes"]

#: The reserved field ids of a position delete file's columns (Iceberg spec).
FILE_PATH_ID = 2147483546
POS_ID = 2147483545
POSITION_DELETE_SCHEMA = Schema(
    NestedField(FILE_PATH_ID, "file_path", StringType(), required=True),
    NestedField(POS_ID, "pos", LongType(), required=True),
)
_ARROW_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_ID).encode()}),
    ]
)
#: Full bounds for ``file_path``: truncated bounds would no longer name the one file they apply to.
_STATS = compute_statistics_plan(POSITION_DELETE_SCHEMA, {"write.metadata.metrics.default": "full"})
_ID_MAPPING = parquet_path_to_id_mapping(POSITION_DELETE_SCHEMA)


def named_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position delete file applies to, if its ``file_path`` bounds name one."""
    if delete_file.content != DataFileContent.POSITION_DELETES:
        return None
    lower = (delete_file.lower_bounds or {}).get(FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(FILE_PATH_ID)
    return lower.decode() if lower is not None and lower == upper else None


def write_position_deletes(
    io: FileIO, path: str, data_file: DataFile, positions: np.ndarray, format_version: int
) -> DataFile:
    """Write the (sorted, distinct) ``positions`` of ``data_file`` to a delete file at ``path``; describe it."""
    table = pa.table(
        [pa.array([data_file.file_path] * len(positions), pa.string()), pa.array(positions, pa.int64())],
        schema=_ARROW_SCHEMA,
    )
    with io.new_output(path).create(overwrite=False) as stream:
        writer = pq.ParquetWriter(stream, _ARROW_SCHEMA, compression="zstd")
        writer.write_table(table)
        writer.close()
        size = stream.tell()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=writer.writer.metadata,
        stats_columns=_STATS,
        parquet_column_mapping=_ID_MAPPING,
    )
    delete_file = DataFile.from_args(
        data_file_layout_version(format_version),
        content=DataFileContent.POSITION_DELETES,
        file_format=FileFormat.PARQUET,
        file_path=path,
        partition=data_file.partition,
        file_size_in_bytes=size,
        **stats.to_serialized_dict(),
    )
    delete_file.spec_id = data_file.spec_id
    return delete_file


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for a manifest of delete files."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class RowDelta(_OverwriteFiles):
    """An overwrite (or, with ``replace``, a replace) snapshot that also adds and removes delete files.

    Built with operation ``append``, it records an ``append`` snapshot: for an upsert commit that
    deleted nothing (only new keys), which a stream of appends may then deliver.
    """

    def __init__(self, *args: Any, replace: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._added_deletes: list[DataFile] = []
        self._removed_deletes: set[str] = set()
        self._replace = replace

    def add_delete_file(self, delete_file: DataFile) -> None:
        """Add a delete file (a delete manifest of its spec lists it)."""
        self._added_deletes.append(delete_file)

    def remove_delete_files(self, paths: Iterable[str]) -> None:
        """Remove live delete files (they are marked deleted in the manifests that list them)."""
        self._removed_deletes.update(paths)

    def _delete_manifest_writer(self, spec_id: int) -> _DeleteManifestWriter:
        return _DeleteManifestWriter(
            self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id, self._compression
        )

    def _existing_manifests(self) -> list[ManifestFile]:
        out = []
        for manifest in super()._existing_manifests():
            if manifest.content != ManifestContent.DELETES or not self._removed_deletes:
                out.append(manifest)
                continue
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            if not any(e.data_file.file_path in self._removed_deletes for e in entries):
                out.append(manifest)
                continue
            with self._delete_manifest_writer(manifest.partition_spec_id) as writer:
                for e in entries:
                    if e.data_file.file_path in self._removed_deletes:
                        writer.delete(e)
                    else:
                        writer.existing(e)
            out.append(writer.to_manifest_file())
        return out

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        out = super()._process_manifests(manifests)
        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for delete_file in self._added_deletes:
            by_spec[delete_file.spec_id].append(delete_file)
        for spec_id, files in sorted(by_spec.items()):
            with self._delete_manifest_writer(spec_id) as writer:
                for delete_file in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED,
                            snapshot_id=self._snapshot_id,
                            sequence_number=None,
                            file_sequence_number=None,
                            data_file=delete_file,
                        )
                    )
            out.append(writer.to_manifest_file())
        return out

    def _removed_delete_files(self) -> list[DataFile]:
        if not self._removed_deletes or self._parent_snapshot_id is None:
            return []
        snapshot = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        found: list[DataFile] = []
        for manifest in snapshot.manifests(self._io) if snapshot is not None else []:
            if manifest.content == ManifestContent.DELETES:
                entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
                found.extend(e.data_file for e in entries if e.data_file.file_path in self._removed_deletes)
        return found

    def _summary(self, snapshot_properties: Any = None) -> Summary:
        """The snapshot summary, counting data and delete files, each under its own partition spec."""
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        ssc = SnapshotSummaryCollector(partition_summary_limit=0)
        for f in [*self._added_data_files, *self._added_deletes]:
            ssc.add_file(f, schema=schema, partition_spec=specs[f.spec_id])
        for f in [*self._deleted_data_files, *self._removed_delete_files()]:
            ssc.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        operation = Operation.APPEND if self._operation == Operation.APPEND else Operation.OVERWRITE
        summary = update_snapshot_summaries(
            Summary(operation, **ssc.build(), **(snapshot_properties or {})),
            previous_summary=parent.summary if parent is not None else None,
        )
        if self._replace:
            return Summary(Operation.REPLACE, **summary.additional_properties)
        return summary
