"""Which catalog holds the tables: ``catalog``, ``catalog.<key>``, ``warehouse`` (driver; PROTOCOL.md §1).

:class:`CatalogConfig` is the typed catalog selection shared by the sink, the
reader, the CLI, tests and benchmarks; :func:`catalog_config` builds and
validates one. Its ``repr`` and ``describe`` never show a secret. A relative
warehouse resolves against :func:`driver_directory`, never a Spark session's
temporary directory (PROTOCOL.md §15).
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
    "driver_directory",
    "is_remote_session",
]

CATALOG = "catalog"
CATALOG_PREFIX = "catalog."
WAREHOUSE = "warehouse"
WAREHOUSE_ENV = "FENCEDLAKE_WAREHOUSE"
WAREHOUSE_DEFAULT = "./fencedlake-warehouse"
#: The session artifact id Spark gives its Python workers (``default`` for a classic session).
SPARK_ARTIFACT_ENV = "SPARK_JOB_ARTIFACT_UUID"
#: Spark's per-session file directories (``<spark tmp>/userFiles-*/<session uuid>``).
_SESSION_DIR_PREFIX = "userFiles-"


def is_remote_session(spark: object) -> bool:
    """True for a Spark Connect session: the sink runs on the server, this process is only a client."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _session_directory(path: Path) -> bool:
    """True if ``path`` is (inside) a directory Spark keeps for one session and deletes with it."""
    artifact = os.environ.get(SPARK_ARTIFACT_ENV, "default")
    return any(p.startswith(_SESSION_DIR_PREFIX) for p in path.parts) or (
        artifact not in ("", "default") and artifact in path.parts
    )


def driver_directory() -> Path:
    """The directory a relative ``warehouse`` (and the default one) resolves against: the Spark driver's.

    That is the working directory of the process that started Spark's driver: where the user's program
    started a classic session (Spark's Python workers run there too), or where the Spark Connect server
    was started (like Spark's own ``spark-warehouse``). On a Connect server Python workers run inside
    the session's artifact directory, which Spark deletes with the session; there the directory Spark's
    launcher ran in (``$PWD``, which the launcher's shell sets) is used instead.

    Raises:
        InvalidOptionsError: only a per-session directory is known (nothing may be resolved in it).
    """
    cwd = Path.cwd()
    if not _session_directory(cwd):
        return cwd
    launched = os.environ.get("PWD", "")
    if launched and os.path.isabs(launched) and Path(launched).is_dir() and not _session_directory(Path(launched)):
        return Path(launched)
    raise InvalidOptionsError(
        f"no stable directory for a relative warehouse: this runs in {cwd}, a directory Spark deletes with the "
        f"session; give an absolute warehouse option, set {WAREHOUSE_ENV} to an absolute path where Spark's "
        "driver runs, or configure a catalog (catalog.*)"
    )


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
    name: str | None = None,
    properties: Mapping[str, str] | None = None,
    warehouse: str | None = None,
    *,
    remote: bool = False,
) -> CatalogConfig:
    """A validated :class:`CatalogConfig` (the sink's ``catalog``/``catalog.*``/``warehouse`` options, the CLI's flags).

    ``warehouse`` defaults to ``$FENCEDLAKE_WAREHOUSE``, else ``fencedlake-warehouse``; a relative one
    resolves against :func:`driver_directory`. ``remote``: the caller is a Spark Connect client
    (``compact``, ``read_table``), which plans here while the sink resolves paths on the server: the
    embedded catalog then needs an absolute warehouse, so that both name the same one.

    Raises:
        InvalidOptionsError: a warehouse given with a configured catalog, a warehouse that is not local, or
            (``remote``) an embedded catalog without an absolute warehouse.
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
    given = Path(path).expanduser()
    if remote and not (name or properties) and not given.is_absolute():
        raise InvalidOptionsError(
            f"warehouse {path!r} on a Spark Connect session: the sink resolves a relative (or the default) "
            "warehouse on the server, in the directory the server was started in, and this client cannot know "
            f"it; pass warehouse='/absolute/path' (the one the writes use) or set {WAREHOUSE_ENV}"
        )
    resolved = given if given.is_absolute() else driver_directory() / given
    return CatalogConfig(name=name or None, properties=properties, warehouse=str(resolved.resolve()))


def catalog_options(options: Mapping[str, str], *, remote: bool = False) -> CatalogConfig:
    """The :class:`CatalogConfig` that lower-cased sink or read ``options`` select (``remote``: as catalog_config)."""
    properties = {k[len(CATALOG_PREFIX) :]: v for k, v in options.items() if k.startswith(CATALOG_PREFIX)}
    return catalog_config(options.get(CATALOG), properties, options.get(WAREHOUSE), remote=remote)
