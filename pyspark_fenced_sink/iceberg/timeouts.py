"""Every catalog request has a bound (PROTOCOL.md §4; driver).

pyiceberg's REST client sends its requests with no timeout, and psycopg2 waits
for PostgreSQL's answer for ever: a response lost in the network (a hung server,
a proxy, a partition the kernel does not see) would hang a write past
``commit.max-wait-ms``, where no deadline can be checked. :func:`load_bounded`
builds REST and SQL catalogs through the subclasses here:

* :func:`bounded_rest_catalog` -- every request of its ``requests`` session (the
  config fetch, OAuth2 tokens, loads, commits) times out after
  ``request-timeout`` seconds (a catalog property; default
  :data:`REQUEST_TIMEOUT_DEFAULT_S`). A timed-out commit is an unknown outcome (§4).
  A request that could not connect (refused, or reset before a connection was made)
  is retried whatever its method (nothing was sent); one whose connection was reset or
  closed before an answer is retried only when it changes nothing: ``GET``, ``HEAD``
  and the OAuth2 token request (a ``client_credentials`` grant). Up to
  :data:`RESET_RETRIES` retries: the first at once, then after 0.2 and 0.4 s (each
  plus up to 0.1 s of jitter: writers reset together do not retry together). A timeout is
  never retried (it already took ``request-timeout``), nor a commit whose connection
  broke (its outcome is unknown: §4 decides), nor an answer of any status.
  An adapter pyiceberg mounts itself (SigV4 signing, on the catalog URI) keeps its own
  retries and gets the timeout; with SigV4 the token request is left to it too.
* :func:`bounded_sql_catalog` (an ``iceberg.sql_catalog.LeanSqlCatalog``) on
  PostgreSQL -- a pooled connection idle for a few seconds is pinged before use
  (``sql_catalog.ping_after_idle``: a pool of connections that died in an outage
  or a partition is not handed out again; one used moments ago costs no ping),
  libpq's ``connect_timeout`` and TCP keepalives in the URI unless it sets them,
  and a psycopg2 wait callback that gives up on a statement whose answer has not
  come within ``request-timeout`` (the connection is then discarded). The
  callback is process-wide (psycopg2 has one) and installed only when none is:
  it puts psycopg2 in its "green" mode, where ``COPY`` is not available.

What the user configures wins: a URI parameter is kept, and a ``pool_pre_ping``
property replaces the idle ping (``true``: SQLAlchemy's ping before every use;
``false``: none). Other catalog types are loaded by pyiceberg unchanged.
"""

from __future__ import annotations

import functools
import select
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "NO_ANSWER",
    "REQUEST_TIMEOUT",
    "REQUEST_TIMEOUT_DEFAULT_S",
    "RESET_RETRIES",
    "bounded_rest_catalog",
    "bounded_sql_catalog",
    "install_statement_bound",
    "load_bounded",
    "request_timeout_s",
]

#: How the error of a PostgreSQL statement that got no answer within ``request-timeout`` begins.
NO_ANSWER = "timed out: no answer from the PostgreSQL server"
#: Catalog property: seconds a catalog request may take before it fails (REST and PostgreSQL).
REQUEST_TIMEOUT = "request-timeout"
REQUEST_TIMEOUT_DEFAULT_S = 30.0
#: Retries of a REST request whose connection was refused or reset (see the module docstring).
RESET_RETRIES = 3
#: Methods retried after a reset: they change nothing on the server.
_READ_METHODS = frozenset({"GET", "HEAD"})
#: libpq settings added to a PostgreSQL URI that does not set them (seconds).
_LIBPQ_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


def request_timeout_s(properties: Mapping[str, Any]) -> float:
    """The ``request-timeout`` catalog property in seconds (default :data:`REQUEST_TIMEOUT_DEFAULT_S`).

    Raises:
        ValueError: the value is not a positive number.
    """
    text = properties.get(REQUEST_TIMEOUT)
    if text in (None, ""):
        return REQUEST_TIMEOUT_DEFAULT_S
    try:
        value = float(str(text))
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"catalog property {REQUEST_TIMEOUT}={text!r}: expected a positive number of seconds")
    return value


@functools.cache
def _retrying_adapter_class() -> type:
    """The ``requests`` ``HTTPAdapter`` whose urllib3 retries take refused or reset connections only."""
    from requests.adapters import HTTPAdapter
    from urllib3.exceptions import NewConnectionError, ProtocolError
    from urllib3.util.retry import Retry

    class ResetRetry(Retry):
        def increment(
            self,
            method: Any = None,
            url: Any = None,
            response: Any = None,
            error: Any = None,
            _pool: Any = None,
            _stacktrace: Any = None,
        ) -> Any:
            if not isinstance(error, (NewConnectionError, ProtocolError)):
                # A timeout, or an answer: as without retries (a read error raised as itself).
                return Retry(0, read=False).increment(method, url, response, error, _pool, _stacktrace)
            return super().increment(method, url, response, error, _pool, _stacktrace)

    class ResetAdapter(HTTPAdapter):
        """Retries a refused connection for any request, a reset one for ``methods`` only."""

        def __init__(self, methods: frozenset[str]) -> None:
            retry = ResetRetry(
                total=RESET_RETRIES,
                connect=RESET_RETRIES,
                read=RESET_RETRIES,
                status=0,
                other=0,
                allowed_methods=methods,
                backoff_factor=0.1,
                backoff_jitter=0.1,
                respect_retry_after_header=False,
            )
            super().__init__(max_retries=retry)

    return ResetAdapter


def _mount_bounded(session: Any, properties: Mapping[str, Any], token_url: str | None) -> None:
    """Mount the retrying adapters on ``session`` and give every adapter it has the timeout (module docstring).

    Called again on the same session, it bounds only the adapters mounted since.
    """
    retrying = _retrying_adapter_class()
    if not any(isinstance(a, retrying) for a in session.adapters.values()):
        for prefix in ("http://", "https://"):
            session.mount(prefix, retrying(_READ_METHODS))
        if token_url:  # a client_credentials grant changes nothing: retried after a reset too
            session.mount(token_url, retrying(_READ_METHODS | {"POST"}))
    timeout_s = request_timeout_s(properties)
    for adapter in session.adapters.values():
        if not getattr(adapter, "fencedlake_bounded", False):  # ours, and pyiceberg's own (SigV4: its retries)
            adapter.send = _with_timeout(adapter.send, timeout_s)
            adapter.fencedlake_bounded = True


def _with_timeout(send: Any, timeout_s: float) -> Any:
    def bounded(request: Any, stream: bool = False, timeout: Any = None, *args: Any, **kwargs: Any) -> Any:
        return send(request, stream, timeout_s if timeout is None else timeout, *args, **kwargs)

    return bounded


def _rest_catalog_class() -> type:
    from pyiceberg.catalog.rest import CREDENTIAL, OAUTH2_SERVER_URI, SIGV4, Endpoints, RestCatalog
    from pyiceberg.utils.properties import property_as_bool

    class _Bounded(RestCatalog):
        def _token_url(self) -> str | None:
            """Where pyiceberg's legacy OAuth2 flow posts for tokens; None without one, or with SigV4.

            With SigV4 the catalog URI's adapter signs every request, so no adapter of ours may take
            the token URL from it (a longer prefix would).
            """
            if property_as_bool(self.properties, SIGV4, False):  # as pyiceberg decides to mount SigV4
                return None
            url = self.properties.get(OAUTH2_SERVER_URI)
            if url or CREDENTIAL not in self.properties:
                return str(url) if url else None
            return str(self.url(Endpoints.get_token, prefixed=False))  # pyiceberg's default token URL

        def _create_legacy_oauth2_auth_manager(self, session: Any) -> Any:
            # pyiceberg fetches the first OAuth2 token here, before _create_session returns: bound it too.
            _mount_bounded(session, self.properties, self._token_url())
            return super()._create_legacy_oauth2_auth_manager(session)

        def _create_session(self) -> Any:
            session = super()._create_session()
            _mount_bounded(session, self.properties, self._token_url())
            return session

    return _Bounded


def _sql_catalog_class() -> type:
    from pyspark_fenced_sink.iceberg.sql_catalog import PING_AFTER_IDLE_S, LeanSqlCatalog

    class _Bounded(LeanSqlCatalog):
        def __init__(self, name: str, **properties: str) -> None:
            props = dict(properties)
            if "pool_pre_ping" not in props:  # the user's choice wins; else a ping after an idle spell only
                props["pool_pre_ping"] = "false"
                self.ping_after_idle_s = PING_AFTER_IDLE_S
            uri = str(props.get("uri") or "")
            if uri.startswith(("postgresql", "postgres")) and _psycopg2_driver(uri):
                props["uri"] = _with_libpq_defaults(uri)
                install_statement_bound(request_timeout_s(props))
            super().__init__(name, **props)

    return _Bounded


def _psycopg2_driver(uri: str) -> bool:
    scheme = uri.split("://", 1)[0]
    return scheme in ("postgresql", "postgres") or scheme.endswith("+psycopg2")


def _with_libpq_defaults(uri: str) -> str:
    """``uri`` with :data:`_LIBPQ_DEFAULTS` added where it sets none of its own."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    missing = {k: v for k, v in _LIBPQ_DEFAULTS.items() if k not in url.query}
    return url.update_query_dict(missing).render_as_string(hide_password=False) if missing else uri


_statement_bound_s: float | None = None


def install_statement_bound(timeout_s: float) -> None:
    """Bound every psycopg2 statement of this process by ``timeout_s`` (the largest asked for wins).

    A no-op when another wait callback is installed (the application chose its own).
    """
    global _statement_bound_s
    import psycopg2.extensions as ext

    current = ext.get_wait_callback()
    if current is None:
        ext.set_wait_callback(_wait_bounded)
    elif current is not _wait_bounded:
        return
    _statement_bound_s = max(timeout_s, _statement_bound_s or 0.0)


def _wait_bounded(conn: Any) -> None:
    """psycopg2's wait callback (``psycopg2.extras.wait_select``) with a deadline.

    Past it, raises ``OperationalError``; psycopg2 then closes the connection (it is in an
    unknown state) and SQLAlchemy discards it from its pool.
    """
    import psycopg2
    import psycopg2.extensions as ext

    timeout_s = _statement_bound_s or REQUEST_TIMEOUT_DEFAULT_S
    deadline = time.monotonic() + timeout_s
    while True:
        state = conn.poll()
        if state == ext.POLL_OK:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise psycopg2.OperationalError(
                f"{NO_ANSWER} within {timeout_s:g} s (catalog property {REQUEST_TIMEOUT}); the connection was closed"
            )
        if state == ext.POLL_READ:
            select.select([conn.fileno()], [], [], left)
        elif state == ext.POLL_WRITE:
            select.select([], [conn.fileno()], [], left)
        else:  # pragma: no cover - psycopg2 documents only these states
            raise psycopg2.OperationalError(f"bad state from poll: {state}")


_classes: dict[str, type] = {}


def bounded_rest_catalog(name: str, **properties: Any) -> Any:
    """A pyiceberg ``RestCatalog`` whose requests time out (see the module docstring)."""
    cls = _classes.get("rest") or _classes.setdefault("rest", _rest_catalog_class())
    return cls(name, **properties)


def bounded_sql_catalog(name: str, **properties: Any) -> Any:
    """A pyiceberg ``SqlCatalog`` whose PostgreSQL statements time out (see the module docstring)."""
    cls = _classes.get("sql") or _classes.setdefault("sql", _sql_catalog_class())
    return cls(name, **properties)


def load_bounded(name: str, properties: Mapping[str, str]) -> Any:
    """Load a catalog as pyiceberg's ``load_catalog(name, **properties)`` does, with REST and SQL ones bounded.

    The catalog type is resolved as pyiceberg does (``type``, else inferred from ``uri``), from the
    properties merged over ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__*``. Unless they name a FileIO
    (``py-io-impl``), its tables' FileIO is ``iceberg.codec.fileio.LeanFileIO``.
    """
    from pyiceberg.catalog import _ENV_CONFIG as env_config  # noqa: N811 - pyiceberg's merged configuration
    from pyiceberg.catalog import PY_CATALOG_IMPL, TYPE, CatalogType, infer_catalog_type, load_catalog
    from pyiceberg.io import PY_IO_IMPL
    from pyiceberg.utils.config import merge_config

    from pyspark_fenced_sink.iceberg.codec.fileio import with_lean_file_io

    conf = merge_config(env_config.get_catalog_config(name) or {}, dict(properties))
    if PY_IO_IMPL not in conf:  # the sink's FileIO unless the configuration names one
        properties = with_lean_file_io(properties)
        conf = {**conf, PY_IO_IMPL: properties[PY_IO_IMPL]}
    if conf.get(PY_CATALOG_IMPL):
        return load_catalog(name, **properties)
    given = conf.get(TYPE)
    kind = CatalogType(given.lower()) if isinstance(given, str) and given else infer_catalog_type(name, conf)
    if kind is CatalogType.REST:
        return bounded_rest_catalog(name, **conf)
    if kind is CatalogType.SQL:
        return bounded_sql_catalog(name, **conf)
    return load_catalog(name, **properties)
