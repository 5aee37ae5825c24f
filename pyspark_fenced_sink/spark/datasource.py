"""The Spark data source ``fencedlake`` (PROTOCOL.md §3, §14; Spark-facing, no catalog code at load)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader

from pyspark_fenced_sink.spark.warmup import warm_up_writer
from pyspark_fenced_sink.spark.workers import Role, settle

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

    or explicitly: ``spark.dataSource.register(FencedLakeDataSource)``. From SQL, declare a
    table for the session (Spark passes a Python data source no options for a table in its
    catalog: ``CREATE TABLE ... USING fencedlake`` is refused, and a statement on one declared
    with columns fails naming the view statement, ``spark.sql``)::

        CREATE TEMPORARY VIEW events USING fencedlake OPTIONS (table 'db.events')
        INSERT INTO events SELECT ...;  INSERT OVERWRITE events SELECT ...;  SELECT * FROM events

    (or ``pyspark_fenced_sink.register_view(spark, "events", "db.events")``).

    Throughput: call ``pyspark_fenced_sink.tune_session(spark)`` once on the driver
    (or pass ``--conf spark.sql.execution.arrow.maxBytesPerBatch=2147483647``): with
    Spark's default, Spark measures every Arrow batch after each row it adds, which
    halves the write speed of any Python data source (see :mod:`pyspark_fenced_sink.spark.tuning`).
    It also sets ``spark.sql.python.filterPushdown.enabled=true``, without which Spark
    gives a Python source no filters and every read decodes every data file.

    Options: the README's option tables ("Options", "Read options") are the reference, with
    every key, default and meaning; each key and default is declared once, next to its
    validation, in ``pyspark_fenced_sink.options`` (``catalog``, ``write``, ``read``). The
    common ones: ``table`` (or the ``save()``/``load()`` path), ``warehouse`` (the embedded
    catalog's directory) or ``catalog`` / ``catalog.<key>`` (any pyiceberg catalog),
    ``writer.id`` (required for streaming), ``writer.batch-id``, ``partition-by``,
    ``overwrite-mode``, ``replace-where``, ``branch``, ``snapshot-property.<key>``,
    ``upsert-keys`` / ``upsert-order`` / ``upsert-delete-where`` (upserts by key); for reads,
    Iceberg's Spark option names (``snapshot-id``, ``as-of-timestamp``, ``branch``, ``tag``,
    ``start-snapshot-id``, ...). A bad option fails on the driver, before any task runs.

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
    deleted with Iceberg position deletes (docs/PROTOCOL.md §5.5).

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
        from pyspark_fenced_sink.spark.sql import refuse_catalog_table, refuse_unnamed_table

        settle(Role.DRIVER)
        refuse_catalog_table(self.options)
        refuse_unnamed_table(self.options)
        return table_schema(self.options)

    def reader(self, schema: Any) -> DataSourceReader:
        """A batch reader (Spark calls this on the driver when it plans ``spark.read...load()``)."""
        from pyspark_fenced_sink.spark.reader import open_reader
        from pyspark_fenced_sink.spark.sql import refuse_unnamed_table

        settle(Role.DRIVER)
        refuse_unnamed_table(self.options, schema)
        return open_reader(self.options, schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """A streaming reader (Spark calls this once per query run, in its source runner on the driver)."""
        from pyspark_fenced_sink.spark.sql import refuse_unnamed_table
        from pyspark_fenced_sink.spark.stream_reader import FencedLakeStreamReader

        settle(Role.DRIVER)
        refuse_unnamed_table(self.options, schema)
        return FencedLakeStreamReader.open(self.options, schema)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        """A batch writer (Spark calls this on the driver when it plans ``df.write...save()``).

        A warm-up write (``tune_session(spark, writers=N)``, :mod:`pyspark_fenced_sink.spark.warmup`)
        gets a writer that touches no table.
        """
        from pyspark_fenced_sink.spark.batch import FencedLakeBatchWriter
        from pyspark_fenced_sink.spark.sql import refuse_unnamed_table

        settle(Role.DRIVER)
        warm_up = warm_up_writer(self.options)
        if warm_up is not None:
            return warm_up
        refuse_unnamed_table(self.options, schema)
        return FencedLakeBatchWriter.open(self.options, schema, overwrite)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:  # noqa: N802 - Spark's name
        """A streaming writer (Spark calls this for every micro-batch)."""
        from pyspark_fenced_sink.spark.sql import refuse_unnamed_table
        from pyspark_fenced_sink.spark.streaming import FencedLakeStreamWriter

        settle(Role.DRIVER)
        refuse_unnamed_table(self.options, schema)
        return FencedLakeStreamWriter.open(self.options, schema, overwrite)
