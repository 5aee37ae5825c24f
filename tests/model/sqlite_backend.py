"""The model's schedules over a real pyiceberg SQL catalog on SQLite.

The in-memory register (``memory_port``) makes 10,000 schedules cheap; this
backend runs the same schedules through the production
:class:`IcebergTablePort` — real snapshots, manifests, the ``fencedlake.state``
property and commit records in snapshot summaries, the catalog's own
compare-and-swap — so what the model proves also holds for pyiceberg as it
really behaves. Data files are DataFile records of files that need not exist
(an append only writes manifests). Each successful commit is mirrored into
``env.table`` so ``harness.check`` reads it unchanged, and ``verify`` compares
that mirror with the real table at the end.

``rebase_on_conflict`` swaps the one-shot catalog request for pyiceberg's own
``Transaction.commit_transaction`` retry — the real library behaviour the
protocol must avoid (docs/PROTOCOL.md §12, "pyiceberg's built-in commit retry").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, NestedField

from pyspark_fenced_sink.iceberg.catalogs import embedded_catalog
from pyspark_fenced_sink.iceberg.codec.datafiles import encode_data_file
from pyspark_fenced_sink.iceberg.commit.table_port import IcebergTablePort
from pyspark_fenced_sink.protocol.context import CommitUnknown
from pyspark_fenced_sink.protocol.entry import MAIN_BRANCH, WalEntry
from pyspark_fenced_sink.protocol.reconcile import ReconcilePlan
from pyspark_fenced_sink.protocol.replace import EntryRefused
from pyspark_fenced_sink.protocol.state import STATE_PROPERTY, CommitRecord, CommittedState
from pyspark_fenced_sink.protocol.view import TableView

from .harness import Env
from .memory_port import apply_plan

_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "part", IntegerType(), required=False),
    NestedField(3, "v", LongType(), required=False),
)
_SPEC = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="part"))
#: pyiceberg's retry (only used by the rebase mutant) should not sleep for real; every second append merges
#: manifests (PROTOCOL.md §5.3), so the schedules check the invariants across merging commits too.
_FAST_RETRY = {
    "commit.retry.min-wait-ms": "1",
    "commit.retry.max-wait-ms": "2",
    "commit.manifest.min-count-to-merge": "2",
}


class _ModelPort(IcebergTablePort):
    """The production port, plus scheduler checkpoints, injected unknown outcomes and the mirror."""

    def __init__(self, catalog: Any, name: str, env: Env, *, live: bool) -> None:
        super().__init__(catalog, name)
        self.env = env
        self.live = live  # False: the final recover (no checkpoints, no faults)

    def load(self) -> TableView:
        if self.live:
            self.env.sched.checkpoint()
        return super().load()

    def find_record(self, view: TableView, seq: int) -> CommitRecord | None:
        if self.live:
            self.env.sched.checkpoint()
        return super().find_record(view, seq)

    def commit(
        self, base: TableView, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord
    ) -> TableView:
        fault = None
        if self.live:
            self.env.sched.checkpoint()
            fault = self.env._commit_fault()
        if fault == "unknown-before":
            raise CommitUnknown("response lost before the commit reached the catalog")
        view = super().commit(base, plan, entries, record)
        self._mirror(plan, entries, record)
        if fault == "unknown-after":
            raise CommitUnknown("response lost after the commit landed")
        return view

    def _mirror(self, plan: ReconcilePlan, entries: Mapping[int, WalEntry], record: CommitRecord) -> None:
        t = self.env.table
        with t.lock:
            try:
                apply_plan(t, plan, entries, record)
            except EntryRefused as e:  # the real port applied what the model refuses: verify() reports it
                self.env.injected[f"backend: the model refuses what pyiceberg applied: {e.reason[:80]}"] += 1

    def _submit(self, table: Table, tx: Transaction, requirements: tuple[Any, ...]) -> None:
        if not self.env.rebase_on_conflict:
            super()._submit(table, tx, requirements)
            return
        tx._requirements = requirements
        tx.commit_transaction()


class SqliteBackend:
    """One SQLite catalog per test; one fresh table per schedule."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = str(warehouse)
        self.catalog = embedded_catalog(self.warehouse)
        self.catalog.create_namespace_if_not_exists("model")

    def install(self, env: Env, seed: int) -> None:
        name = f"model.t{seed}"
        if self.catalog.table_exists(name):
            self.catalog.drop_table(name)
        table = self.catalog.create_table(name, _SCHEMA, partition_spec=_SPEC, properties=_FAST_RETRY)
        partition_type = table.spec().partition_type(table.schema())
        data_dir = f"{table.location()}/data"
        spec_id = table.spec().spec_id

        def encode_file(file_name: str, key: str, part: int, lo: int, hi: int) -> dict[str, Any]:
            df = DataFile.from_args(
                content=DataFileContent.DATA,
                file_path=f"{data_dir}/{file_name}",
                file_format=FileFormat.PARQUET,
                partition=Record(part),
                record_count=2,
                file_size_in_bytes=100,
                value_counts={2: 2, 3: 2},
                null_value_counts={2: 0, 3: 0},
                lower_bounds={2: to_bytes(IntegerType(), part), 3: to_bytes(LongType(), lo)},
                upper_bounds={2: to_bytes(IntegerType(), part), 3: to_bytes(LongType(), hi)},
            )
            df.spec_id = spec_id
            return {**encode_data_file(df, partition_type), "key": key, "part": part, "lo": lo, "hi": hi}

        env.encode_file = encode_file
        env.catalog_ops = False  # drop/rename/purge and friends run on the in-memory catalog only
        env.nan_rows = False  # the table's v is a long: no NaN
        env.table.uuid = str(table.metadata.table_uuid)
        env.table.location = table.location()
        env.port_factory = lambda e: _ModelPort(self.catalog, name, e, live=True)
        self._name = name

    def final_port(self, env: Env) -> Any:
        return _ModelPort(self.catalog, self._name, env, live=False)

    def verify(self, env: Env) -> list[str]:
        table = self.catalog.load_table(self._name)
        v = []
        state = CommittedState.decode(table.properties.get(STATE_PROPERTY))
        if state != env.table.state:
            v.append(f"backend: catalog state {state} != mirrored {env.table.state}")
        v.extend(k for k in env.injected if k.startswith("backend:"))
        for branch in (MAIN_BRANCH, *env.table.branches):
            ref = table.refs().get(branch)
            scan = table.scan(snapshot_id=ref.snapshot_id).plan_files() if ref is not None else []
            live = sorted(task.file.file_path for task in scan)
            mirrored = sorted(str(f["p"]) for f in env.table.live(branch))
            if live != mirrored:
                v.append(f"backend: live files of {branch} {live[:4]} != mirrored {mirrored[:4]}")
        return v
