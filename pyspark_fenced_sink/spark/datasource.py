"""The Spark data source ``fencedlake``: writes and reads (Spark-facing; imports no catalog code at module load)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

__all__ = ["FencedLakeDataSource"]


class FencedLakeDataSource(DataSource):
    """Exactly-once appends, overwrites and upserts into an Apache Iceberg table, from many jobs at once; reads back.

    Installed with the package, the format is registered automatically::

        df.write.format("fencedlake").mode("append").save("db.events")
        df.write.format("fencedlake").mode("overwrite").option("table", "db.events").save()
        (df.writeStream.format("fencedlake")
            .option("writer.id", "events-ingest")
            .option("checkpointLocation", "/chk/events")
            .start("db.events"))
        spark.read.format("fencedlake").load("db.events")
        spark.read.format("fencedlake").option("snapshot-id", 123).load("db.events")
        spark.readStream.format("fencedlake").load("db.events")

    or explicitly: ``spark.dataSource.register(FencedLakeDataSource)``.

    Throughput: call ``pyspark_fenced_sink.tune_session(spark)`` once on the driver
    (or pass ``--conf spark.sql.execution.arrow.maxBytesPerBatch=2147483647``): with
    Spark's default, Spark measures every Arrow batch after each row it adds, which
    halves the write speed of any Python data source (see :mod:`pyspark_fenced_sink.spark.tuning`).
    It also sets ``spark.sql.python.filterPushdown.enabled=true``, without which Spark
    gives a Python source no filters and every read decodes every data file.

    Options (defaults in brackets). Catalog options, for writes and reads:
        table: ``namespace.table`` (or the ``save()`` path).
        catalog: a pyiceberg catalog name configured in ``.pyiceberg.yaml`` or
            ``PYICEBERG_CATALOG__<NAME>__*`` environment variables [none].
        catalog.<key>: any pyiceberg catalog property, passed through
            (``catalog.type``, ``catalog.uri``, ``catalog.warehouse``, ``catalog.s3.endpoint``...).
        warehouse: the embedded default catalog's warehouse directory, used when no
            catalog option is given: SQLite catalog at ``<warehouse>/catalog.db``
            [env ``FENCEDLAKE_WAREHOUSE``, else ``./fencedlake-warehouse``].

    Write options:
        create-table: create the namespace and table from the DataFrame if missing [true].
        partition-by: partition spec of a created table, e.g.
            ``"day(ts), bucket(16, user_id), truncate(4, code), region"`` [unpartitioned].
        table.<prop>: table properties of a created table (``table.format-version``,
            ``table.write.target-file-size-bytes``...).
        merge-schema: add DataFrame columns the table lacks (as optional columns) [false].
        writer.id: a stable writer identity (letters, digits, ``_.-``). Required for streaming.
            A newer incarnation with the same id fences the older one. [anonymous for batch]
        writer.batch-id: with ``writer.id``: an increasing id per batch write; re-running a
            batch id at or below the last applied one is a no-op that succeeds [none].
        commit.max-wait-ms: how long a commit waits for its outcome before raising
            CommitOutcomeUnknownError (its entry stays durable and is applied later) [300000].
        commit.max-group-size: WAL entries at most in one catalog commit [1000].
        overwrite-mode: with ``overwrite``/``complete``: ``static`` replaces all rows, ``dynamic``
            exactly the partitions the write has rows in [static].
        replace-where: with ``overwrite``/``complete``: replace the rows an Iceberg filter matches,
            e.g. ``"ts >= '2026-01-01' AND region = 'eu'"``; every row written must match it [none].
        branch: the Iceberg branch to write, created from main by its first write; publish it with
            ``fencedlake publish TABLE BRANCH`` [main].
        snapshot-property.<key>: a property in the summary of the snapshot that commits the write.
        upsert-keys: with ``append``: upsert by these key columns (comma-separated) [the table's
            identifier fields; set as such on a table the write creates].
        upsert-order: per key, the row with the greatest value of this column wins; deletes are
            remembered [none: the write applied last wins].
        upsert-delete-where: rows matching this filter (``replace-where`` syntax) delete their key and
            are never written to the table [none].

    Read options (Iceberg's Spark option names; a write option in a read is refused):
        snapshot-id / as-of-timestamp (ms) / branch / tag: time travel, one at most [current].
        start-snapshot-id: batch: the rows appended after this snapshot, up to end-snapshot-id
            [current]; stream: start after it.
        split-size: bytes per input split [the table's read.split.target-size, else 128 MiB,
            smaller for small scans]; file-open-cost [read.split.open-file-cost, else 4 MiB].
        stream-from-timestamp (ms): a stream starts at the first snapshot at or after it.
        streaming-max-files-per-micro-batch / streaming-max-rows-per-micro-batch: bounds of a
            micro-batch [none; at least one file].
        streaming-skip-overwrite-snapshots / streaming-skip-delete-snapshots: skip such snapshots
            instead of failing the stream with ReadRefusedError [false].

    Save modes: ``append``; ``overwrite`` replaces all of the table's rows in one
    snapshot (or, with ``overwrite-mode=dynamic`` / ``replace-where``, the partitions
    written / the rows the filter matches; what is live when the write is applied, in
    write-ahead-log order). ``error``/``errorifexists``/``ignore`` fail inside Spark
    before this sink runs. Streaming output modes: ``append``; ``complete`` replaces the
    rows every micro-batch (per ``overwrite-mode``/``replace-where``); ``update`` is
    refused by Spark. With an ``upsert-*`` option an ``append`` (batch or streaming)
    upserts: every reader sees at most one row per key — with ``upsert-order`` the one
    with the greatest order value among every applied write's rows, absent if that row
    matches ``upsert-delete-where`` — whichever writer commits first; rows that lose are
    deleted with Iceberg position deletes (docs/PROTOCOL.md §5.4).

    Semantics: every write puts one entry into the table's write-ahead log under
    ``<table location>/_fencedlake/`` with put-if-absent, and any committer applies
    all pending entries in one catalog commit. A write that returns succeeded
    exactly once; one that raised FencedWriterError / WriteRejectedError /
    InvalidOptionsError left nothing in the table; one that raised
    CommitOutcomeUnknownError is durable and is applied exactly once by the next
    commit on the table (or ``fencedlake recover``). No commit conflict ever
    reaches the user. See docs/PROTOCOL.md.

    Reads see committed snapshots only. The schema is the table's (a time-traveled
    snapshot's own); ``.schema(...)`` with fewer columns is a projection. Filters
    prune files by partition values and column statistics (with filter pushdown on)
    and Spark applies them again. Positional deletes are applied; equality deletes
    and types Spark cannot hold raise ReadRefusedError. A stream emits the rows each
    new append snapshot of the main branch adds, exactly once across restarts (its
    offsets are positions in the snapshot history); it fails with ReadRefusedError at
    an overwrite or delete snapshot unless told to skip it. See docs/PROTOCOL.md §14.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``fencedlake``."""
        return "fencedlake"

    def schema(self) -> Any:
        """The table's Spark schema (Spark calls this on the driver when a read names no schema)."""
        from pyspark_fenced_sink.spark.reader import table_schema

        return table_schema(self.options)

    def reader(self, schema: Any) -> DataSourceReader:
        """A batch reader (Spark calls this on the driver when it plans ``spark.read...load()``)."""
        from pyspark_fenced_sink.spark.reader import open_reader

        return open_reader(self.options, schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """A streaming reader (Spark calls this once per query run, in its source runner on the driver)."""
        from pyspark_fenced_sink.spark.stream_reader import FencedLakeStreamReader

        return FencedLakeStreamReader.open(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """A batch writer (Spark calls this on the driver when it plans ``df.write...save()``)."""
        from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter

        return FencedLakeBatchWriter.open(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:  # noqa: N802 - Spark's name
        """A streaming writer (Spark calls this for every micro-batch)."""
        from pyspark_fenced_sink.spark.streaming import FencedLakeStreamWriter

        return FencedLakeStreamWriter.open(self.options, schema, overwrite)
