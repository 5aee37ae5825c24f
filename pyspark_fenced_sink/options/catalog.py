"""Which catalog holds the tables: ``catalog``, ``catalog.<key>``, ``warehouse`` (driver; PROTOCOL.md §1).

:class:`CatalogConfig` is the typed catalog selection shared by the sink, the
reader, the CLI, tests and benchmarks; :func:`catalog_config` builds and
validates one. Its ``repr`` and ``describe`` never show a secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_fenced_sink.errors import InvalidOptionsError
from pyspark_fenced_sink.masking import redact

__all__ = [
    "CATALOG",
    "CATALOG_PREFIX",
    "WAREHOUSE",
    "WAREHOUSE_DEFAULT",
    "WAREHOUSE_ENV",
    "CatalogConfig",
    "catalog_config",
    "catalog_options",
]

CATALOG = "catalog"
CATALOG_PREFIX = "catalog."
WAREHOUSE = "warehouse"
WAREHOUSE_ENV = "FENCEDLAKE_WAREHOUSE"
WAREHOUSE_DEFAULT = "./fencedlake-warehouse"


@dataclass(frozen=True)
class CatalogConfig:
    """Which catalog holds the tables: the embedded default, or a pyiceberg catalog.

    Attributes:
        name: A pyiceberg catalog name (``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__*``), or None.
        properties: pyiceberg catalog properties (the sink's ``catalog.<key>`` options).
        warehouse: Absolute warehouse path of the embedded default catalog (SQLite at
            ``<warehouse>/catalog.db``), used when ``name`` and ``properties`` are empty.
    """

    name: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    warehouse: str = ""

    @property
    def embedded(self) -> bool:
        """True when the embedded default catalog (SQLite + local warehouse) is used."""
        return self.name is None and not self.properties

    def describe(self) -> str:
        """A secret-free description for messages."""
        if self.embedded:
            return f"the embedded catalog at {self.warehouse}"
        return f"catalog {self.name or '(from catalog.* options)'} with properties {redact(self.properties)}"

    def __repr__(self) -> str:
        return f"CatalogConfig(name={self.name!r}, properties={redact(self.properties)}, warehouse={self.warehouse!r})"


def catalog_config(
    name: str | None = None, properties: Mapping[str, str] | None = None, warehouse: str | None = None
) -> CatalogConfig:
    """A validated :class:`CatalogConfig` (the sink's ``catalog``/``catalog.*``/``warehouse`` options, the CLI's flags).

    ``warehouse`` defaults to ``$FENCEDLAKE_WAREHOUSE``, else ``./fencedlake-warehouse``.

    Raises:
        InvalidOptionsError: a warehouse given with a configured catalog, or a warehouse that is not local.
    """
    properties = dict(properties or {})
    if "" in properties:
        raise InvalidOptionsError("an option key ends with '.': expected catalog.<key>")
    if warehouse is not None and (name or properties):
        raise InvalidOptionsError(
            "option warehouse applies to the embedded default catalog only; with a configured catalog "
            "set catalog.warehouse instead"
        )
    path = warehouse or os.environ.get(WAREHOUSE_ENV) or WAREHOUSE_DEFAULT
    path = path[len("file://") :] if path.startswith("file://") else path
    if "://" in path:
        raise InvalidOptionsError(
            f"warehouse {path!r} is invalid: the embedded catalog needs a local path; for object "
            "storage configure a catalog (catalog.type, catalog.uri, catalog.warehouse, ...)"
        )
    return CatalogConfig(name=name or None, properties=properties, warehouse=str(Path(path).expanduser().resolve()))


def catalog_options(options: Mapping[str, str]) -> CatalogConfig:
    """The :class:`CatalogConfig` that lower-cased sink or read ``options`` select."""
    properties = {k[len(CATALOG_PREFIX) :]: v for k, v in options.items() if k.startswith(CATALOG_PREFIX)}
    return catalog_config(options.get(CATALOG), properties, options.get(WAREHOUSE))
