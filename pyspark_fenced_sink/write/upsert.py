"""An upsert task's rows: data rows on, delete rows to a delete-key file (PROTOCOL.md §5.5, "Executors").

:class:`DeleteRows` splits each Arrow batch of an upsert (already cast to the
table's schema) by ``upsert-delete-where``: rows the filter holds for are delete
rows, reduced to their key and order columns and buffered; the rest go to the
task's data files. At the end of the task the buffered keys become one
delete-key file under the control root (``iceberg.codec.key_files``). A null key, or a
data row with a null in a required column, fails the task with
``WriteRejectedError`` before anything is committed.

No catalog code here: this module runs in Spark's Python workers.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets

import pyarrow as pa
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema

from pyspark_fenced_sink import failpoints
from pyspark_fenced_sink.errors import WriteRejectedError
from pyspark_fenced_sink.iceberg.codec.key_files import describe, write_key_file
from pyspark_fenced_sink.iceberg.codec.row_filter import split_rows
from pyspark_fenced_sink.protocol.filetag import FileTag
from pyspark_fenced_sink.protocol.layout import keys_key
from pyspark_fenced_sink.protocol.upsert import UpsertSpec

__all__ = ["DeleteRows"]

logger = logging.getLogger(__name__)


class DeleteRows:
    """One task's delete rows of an upsert, and the checks every row of it passes."""

    def __init__(
        self,
        upsert: UpsertSpec,
        table: str,
        root: str,
        schema: Schema,
        schema_json: str,
        required: tuple[str, ...],
        io: FileIO,
        tag: FileTag,
    ) -> None:
        self.upsert, self.table, self.root, self.schema, self.io, self.tag = upsert, table, root, schema, io, tag
        self.required, self.schema_json = required, schema_json
        ids = [*upsert.key_ids, *([upsert.order[0]] if upsert.order is not None else [])]
        self.columns = {schema.find_column_name(i) or str(i): i for i in ids}
        self.pending: list[pa.Table] = []
        self.written: list[str] = []

    def split(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The data rows of ``batch`` (delete rows are kept); raises for a null key or required value."""
        if self.upsert.delete_where is None:
            data, doomed = batch, None
        else:
            data, doomed = split_rows(batch, self.upsert.delete_where, self.schema_json)
        for part, what in ((data, "row"), (doomed, "delete row")):
            if part is None or not part.num_rows:
                continue
            for _, name in self.upsert.keys:
                if part.column(name).null_count:
                    raise WriteRejectedError(
                        f"table {self.table}: an upserted {what} has a null key ({name!r} is null); every row of an "
                        "upsert needs its whole key: fix the rows; nothing of this write was committed",
                        table=self.table,
                    )
        for name in self.required:
            if data.num_rows and data.column(name).null_count:
                raise WriteRejectedError(
                    f"table {self.table}: a row that is not a delete row (it does not match upsert-delete-where) "
                    f"has a null in required column {name!r}; only delete rows may leave non-key columns empty: "
                    "fix the rows; nothing of this write was committed",
                    table=self.table,
                )
        if doomed is not None and doomed.num_rows:
            names = list(self.columns)
            keys = pa.Table.from_batches([doomed]).select(names)
            self.pending.append(keys.rename_columns([f"f{self.columns[n]}" for n in names]))
        return data

    def finish(self) -> tuple[dict[str, object], ...]:
        """Write the task's delete-key file (if it has delete rows); its reference for the WAL entry."""
        if not self.pending:
            return ()
        table = pa.concat_tables(self.pending)
        self.pending = []
        tag = dataclasses.replace(self.tag, nonce=secrets.token_hex(8))
        path = f"{self.root.rstrip('/')}/{keys_key(tag.file_name())}"
        self.written.append(path)
        size = write_key_file(self.io, path, table, {f"f{i}": i for i in self.columns.values()})
        failpoints.hit("upsert.after-key-file-written")
        return (describe(path, table, self.upsert.key_ids, self.schema, size),)

    def abort(self) -> None:
        """Delete the delete-key file this task wrote (nothing references it yet)."""
        for path in self.written:
            try:
                self.io.delete(path)
            except (OSError, FileNotFoundError) as e:
                logger.warning("could not delete %s of a failed task (gc will): %s", path, e)
