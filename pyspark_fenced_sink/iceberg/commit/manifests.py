"""Manifest merging inside append commits (PROTOCOL.md §5.3; driver).

:func:`append_producer` picks pyiceberg's merge append when
``commit.manifest-merge.enabled`` (fencedlake's default: on, as Iceberg Java's),
else a fast append. :func:`merge_settings` reads the manifest properties; with
``strict`` (at planning) a malformed value fails the write, otherwise it is
logged and the commit appends without merging.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import ManifestFile
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import UpdateSnapshot, _MergeAppendFiles
from pyiceberg.utils.properties import property_as_int

from pyspark_fenced_sink.errors import InvalidOptionsError

__all__ = ["MANIFEST_MERGE_DEFAULT", "MergeSettings", "append_producer", "merge_settings"]

logger = logging.getLogger(__name__)

#: fencedlake's default for ``commit.manifest-merge.enabled`` (Iceberg Java's; pyiceberg defaults to off).
MANIFEST_MERGE_DEFAULT = True

#: The spellings pyiceberg accepts for a boolean property (``strtobool``).
_TRUE, _FALSE = ("y", "yes", "t", "true", "on", "1"), ("n", "no", "f", "false", "off", "0")


@dataclass(frozen=True)
class MergeSettings:
    """How append commits maintain manifests.

    Attributes:
        enabled: merge small manifests on append (``commit.manifest-merge.enabled``).
        min_count: manifests a bin with the new manifest needs before it is merged
            (``commit.manifest.min-count-to-merge``).
        target_bytes: the size a merged manifest is packed to (``commit.manifest.target-size-bytes``).
    """

    enabled: bool = MANIFEST_MERGE_DEFAULT
    min_count: int = TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT
    target_bytes: int = TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT


def _parse(props: Mapping[str, str]) -> MergeSettings:
    tp = TableProperties
    raw = str(props.get(tp.MANIFEST_MERGE_ENABLED, "")).strip().lower()
    if raw and raw not in _TRUE + _FALSE:
        raise InvalidOptionsError(f"table property {tp.MANIFEST_MERGE_ENABLED}: expected true or false, found {raw!r}")
    enabled = MANIFEST_MERGE_DEFAULT if not raw else raw in _TRUE
    sizes = {}
    for key, default in (
        (tp.MANIFEST_MIN_MERGE_COUNT, tp.MANIFEST_MIN_MERGE_COUNT_DEFAULT),
        (tp.MANIFEST_TARGET_SIZE_BYTES, tp.MANIFEST_TARGET_SIZE_BYTES_DEFAULT),
    ):
        try:
            value = property_as_int(dict(props), key, default)
        except ValueError as e:
            raise InvalidOptionsError(f"table property {key}: expected an integer, found {props.get(key)!r}") from e
        if value is None or value < 1:
            raise InvalidOptionsError(f"table property {key}: expected a positive integer, found {value}")
        sizes[key] = value
    return MergeSettings(enabled, sizes[tp.MANIFEST_MIN_MERGE_COUNT], sizes[tp.MANIFEST_TARGET_SIZE_BYTES])


def merge_settings(props: Mapping[str, str], *, strict: bool = False) -> MergeSettings:
    """The table's manifest-merge settings.

    Args:
        props: the table's properties.
        strict: raise on a malformed value (planning); otherwise log it and return merging off.

    Raises:
        InvalidOptionsError: ``strict`` and a value is malformed (the message names the property).
    """
    try:
        return _parse(props)
    except InvalidOptionsError as e:
        if strict:
            raise
        logger.warning("fencedlake: %s; this commit appends without merging manifests", e)
        return MergeSettings(enabled=False)


class _MergingAppend(_MergeAppendFiles):
    """pyiceberg's merge append, with the settings given, that removes the manifests it merged away.

    The new files' manifest is written before it is merged; pyiceberg leaves it behind once its
    entries are in the merged manifest. No manifest list ever names it, so it is removed as soon
    as the snapshot's manifests are decided (a failed removal leaves one stray metadata file).
    It builds on pyiceberg 0.12's private producer and ``UpdateSnapshot`` fields: one reason setup.cfg
    caps pyiceberg below 0.13.
    """

    def __init__(self, update: UpdateSnapshot, settings: MergeSettings) -> None:
        super().__init__(
            operation=Operation.APPEND,
            transaction=update._transaction,
            io=update._io,
            branch=update._branch,
            snapshot_properties=update._snapshot_properties,
        )
        self._merge_enabled = settings.enabled
        self._min_count_to_merge = settings.min_count
        self._target_size_bytes = settings.target_bytes

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        out = super()._process_manifests(manifests)
        kept = {m.manifest_path for m in out}
        for path in [m.manifest_path for m in manifests if m.manifest_path not in kept]:
            if path in self._written_manifests:
                self._written_manifests.remove(path)
                try:
                    self._io.delete(path)
                except OSError as e:  # harmless: no manifest list names it
                    logger.warning("fencedlake: could not remove merged-away manifest %s: %s", path, e)
        return out


def append_producer(update: UpdateSnapshot, props: Mapping[str, str]) -> Any:
    """The snapshot producer of an append commit: a merge append if merging is on, else a fast append.

    pyiceberg's merge append reads the three properties itself with its own default (off); the
    settings parsed here are used instead, so fencedlake's default applies to tables that say nothing.
    """
    settings = merge_settings(props)
    if not settings.enabled:
        return update.fast_append()
    return _MergingAppend(update, settings)
