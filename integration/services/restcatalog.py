"""An Iceberg REST catalog server for the integration suite, with fault injection.

No REST catalog server installs from the registries this project may use (Lakekeeper,
Polaris, Gravitino and Nessie are JVM/Rust services shipped as images; the Java
fixture needs Maven; ``lakana-server`` on PyPI is a pre-alpha product control plane).
So this is a test server that follows the Iceberg REST OpenAPI spec for exactly what
pyiceberg's ``RestCatalog`` calls -- config, the OAuth2 token endpoint, namespaces,
tables create/load/exists/list/commit/drop/rename -- backed by pyiceberg's
``SqlCatalog`` on PostgreSQL: a commit's requirements are validated against the
current metadata and the metadata pointer moves by PostgreSQL's compare-and-swap, so
concurrent commits really conflict (409) as they do on a production catalog.

The storage properties it was started with are *vended* to clients in every
``loadTable``/``createTable`` response's ``config`` (a client needs only the URI and
its OAuth2 credential), as catalogs with credential vending do.

Fault injection, armed by tests over HTTP (``POST /_test/faults``, JSON)::

    {"commit": ["503-after", "409", ...]}   one fault per upcoming commit, in order
    {"token_ttl_s": 2.0}                    lifetime of tokens issued from now on (then 419)
    {"reset": true}                         disarm everything, zero the counters

Commit faults: ``409`` (a requirement "failed": nothing applied), ``500-before``
(nothing applied), ``500-after`` / ``502-after`` / ``503-after`` / ``504-after``
(the commit was applied, then that status), ``drop-after`` (applied, connection
closed without a response), ``timeout-after`` (applied, then silent for
``--hold-s`` seconds before the connection is closed). ``GET /_test/faults`` returns
what was injected and how many commits were applied and refused.

Run by integration/services/rest.sh:

    python integration/services/restcatalog.py --port 24331 --pg-uri ... --warehouse s3://bucket/rest \
        --client-id fencedlake --client-secret ... --io s3.endpoint=http://127.0.0.1:24330 ...
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import signal
import socket
import sys
import threading
import time
from collections import Counter
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("restcatalog")
SEPARATOR = "\x1f"
AFTER_FAULTS = {"500-after": 500, "502-after": 502, "503-after": 503, "504-after": 504}
FAULTS = {"409", "500-before", "drop-after", "timeout-after", *AFTER_FAULTS}


class HttpError(Exception):
    """An error response: status, Iceberg error type, message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class _Dropped(Exception):
    """Close the connection without a response (a lost response)."""


class Faults:
    """What tests armed, and what happened; thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.commit: list[str] = []
        self.token_ttl_s = 3600.0
        self.counts: Counter[str] = Counter()

    def next_commit_fault(self) -> str | None:
        with self.lock:
            return self.commit.pop(0) if self.commit else None

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def configure(self, body: dict[str, Any]) -> None:
        with self.lock:
            if body.get("reset"):
                self.commit, self.token_ttl_s, self.counts = [], 3600.0, Counter()
            unknown = [f for f in body.get("commit", []) if f not in FAULTS]
            if unknown:
                raise HttpError(400, "BadRequestException", f"unknown faults {unknown}; known: {sorted(FAULTS)}")
            self.commit.extend(body.get("commit", []))
            if "token_ttl_s" in body:
                self.token_ttl_s = float(body["token_ttl_s"])

    def report(self) -> dict[str, Any]:
        with self.lock:
            return {"pending": list(self.commit), "counts": dict(self.counts), "token_ttl_s": self.token_ttl_s}


class Catalog:
    """The REST operations over a pyiceberg SqlCatalog."""

    def __init__(self, pg_uri: str, warehouse: str, io: dict[str, str], client: tuple[str, str] | None) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        self.sql = SqlCatalog("fencedlake_rest", uri=pg_uri, warehouse=warehouse, pool_pre_ping="true", **io)
        self.io = io
        self.client = client
        self.tokens: dict[str, float] = {}
        self.faults = Faults()
        self.hold_s = 3.0

    # ---------------------------------------------------------------- auth

    def issue_token(self, form: dict[str, list[str]]) -> dict[str, Any]:
        if self.client is not None:
            given = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
            if given != self.client:
                raise HttpError(401, "invalid_client", "unknown client id or secret")
        token = secrets.token_urlsafe(24)
        ttl = self.faults.token_ttl_s
        with self.faults.lock:
            self.tokens[token] = time.monotonic() + ttl
        self.faults.count("tokens-issued")
        return {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": max(1, int(ttl)),
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }

    def check_token(self, header: str | None) -> None:
        if self.client is None:
            return
        token = (header or "").removeprefix("Bearer ").strip()
        with self.faults.lock:
            expiry = self.tokens.get(token)
        if expiry is None:
            raise HttpError(401, "NotAuthorizedException", "missing or unknown bearer token")
        if time.monotonic() > expiry:
            self.faults.count("token-expired")
            raise HttpError(419, "AuthorizationExpiredException", "the bearer token expired")

    # ---------------------------------------------------------------- tables

    def table_result(self, table: Any) -> dict[str, Any]:
        return {
            "metadata-location": table.metadata_location,
            "metadata": json.loads(table.metadata.model_dump_json()),
            "config": dict(self.io),  # vended storage properties
        }

    def create_table(self, namespace: tuple[str, ...], body: bytes) -> dict[str, Any]:
        from pyiceberg.catalog.rest import CreateTableRequest
        from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
        from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

        raw = {"location": None, "partition-spec": None, "write-order": None, **json.loads(body)}
        req = CreateTableRequest.model_validate(raw)
        table = self.sql.create_table(
            (*namespace, req.name),
            schema=req.table_schema,
            location=req.location,
            partition_spec=req.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=req.write_order or UNSORTED_SORT_ORDER,
            properties=req.properties,
        )
        return self.table_result(table)

    def commit(self, identifier: tuple[str, ...], body: bytes) -> dict[str, Any]:
        from pyiceberg.table import CommitTableRequest

        req = CommitTableRequest.model_validate_json(body)
        fault = self.faults.next_commit_fault()
        if fault == "409":
            self.faults.count("409")
            raise HttpError(409, "CommitFailedException", "injected: a requirement failed")
        if fault == "500-before":
            self.faults.count("500-before")
            raise HttpError(500, "ServerError", "injected: failed before applying")
        table = self.sql.load_table(identifier)
        try:
            response = self.sql.commit_table(table, req.requirements, req.updates)
        except Exception:
            self.faults.count("refused")
            raise
        self.faults.count("applied")
        if fault in AFTER_FAULTS:
            self.faults.count(fault)
            raise HttpError(AFTER_FAULTS[fault], "ServerError", f"injected: applied, then {fault}")
        if fault == "timeout-after":
            self.faults.count(fault)
            time.sleep(self.hold_s)
            raise _Dropped()
        if fault == "drop-after":
            self.faults.count(fault)
            raise _Dropped()
        return {
            "metadata-location": response.metadata_location,
            "metadata": json.loads(response.metadata.model_dump_json()),
        }


def _error_status(e: Exception) -> tuple[int, str]:
    from pyiceberg import exceptions as x

    table = [
        ((x.NoSuchTableError, x.NoSuchNamespaceError, x.NoSuchIdentifierError), 404),
        ((x.TableAlreadyExistsError, x.NamespaceAlreadyExistsError, x.NamespaceNotEmptyError), 409),
        ((x.CommitFailedException,), 409),
        ((x.ValidationError, ValueError), 400),
    ]
    for kinds, status in table:
        if isinstance(e, kinds):
            return status, type(e).__name__.replace("Error", "Exception")
    return 500, "ServerError"


def _namespace(segment: str) -> tuple[str, ...]:
    return tuple(unquote(part) for part in unquote(segment).split(SEPARATOR))


def route(cat: Catalog, method: str, path: str, query: dict[str, list[str]], body: bytes, auth: str | None) -> Any:
    """Dispatch one request; returns a JSON-able body, or None for 204."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["_test"]:
        if method == "POST":
            cat.faults.configure(json.loads(body or b"{}"))
        return cat.faults.report()
    if parts[:1] != ["v1"]:
        raise HttpError(404, "NotFoundException", f"no route {method} {path}")
    parts = parts[1:]
    if parts == ["config"]:
        return {"defaults": {}, "overrides": {}}
    if parts == ["oauth", "tokens"] and method == "POST":
        return cat.issue_token(parse_qs(body.decode()))
    cat.check_token(auth)
    sql = cat.sql
    if parts == ["namespaces"]:
        if method == "GET":
            parent = _namespace(query["parent"][0]) if query.get("parent") else ()
            return {"namespaces": [list(n) for n in sql.list_namespaces(parent)]}
        req = json.loads(body)
        sql.create_namespace(tuple(req["namespace"]), req.get("properties") or {})
        return {"namespace": req["namespace"], "properties": req.get("properties") or {}}
    if parts == ["tables", "rename"]:
        req = json.loads(body)
        src, dst = req["source"], req["destination"]
        sql.rename_table((*src["namespace"], src["name"]), (*dst["namespace"], dst["name"]))
        return None
    if len(parts) == 2 and parts[0] == "namespaces":
        ns = _namespace(parts[1])
        if method == "DELETE":
            sql.drop_namespace(ns)
            return None
        return {"namespace": list(ns), "properties": sql.load_namespace_properties(ns)}
    if len(parts) == 3 and parts[0] == "namespaces" and parts[2] == "tables":
        ns = _namespace(parts[1])
        if method == "GET":
            return {"identifiers": [{"namespace": list(i[:-1]), "name": i[-1]} for i in sql.list_tables(ns)]}
        return cat.create_table(ns, body)
    if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "tables":
        identifier = (*_namespace(parts[1]), unquote(parts[3]))
        if method in ("GET", "HEAD"):
            return cat.table_result(sql.load_table(identifier))
        if method == "POST":
            return cat.commit(identifier, body)
        if method == "DELETE":
            if query.get("purgeRequested", ["false"])[0] == "true":
                sql.purge_table(identifier)
            else:
                sql.drop_table(identifier)
            return None
    raise HttpError(404, "NotFoundException", f"no route {method} {path}")


def make_handler(cat: Catalog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

        def _send(self, status: int, payload: Any) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _handle(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                out = route(cat, self.command, url.path, parse_qs(url.query), body, self.headers.get("Authorization"))
                self._send(204 if out is None else 200, out)
            except _Dropped:
                self.close_connection = True
                with suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
            except HttpError as e:
                self._send(e.status, {"error": {"message": e.message, "type": e.kind, "code": e.status}})
            except Exception as e:
                status, kind = _error_status(e)
                if status == 500:
                    log.exception("%s %s failed", self.command, url.path)
                self._send(status, {"error": {"message": str(e), "type": kind, "code": status}})

        do_GET = do_POST = do_DELETE = do_HEAD = _handle  # noqa: N815 - http.server's names

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=24331)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--io", action="append", default=[], help="a vended FileIO property key=value")
    parser.add_argument("--hold-s", type=float, default=3.0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args(argv)
    # Secrets come from the environment, never the command line (ps shows it).
    import os

    pg_uri = os.environ["FENCEDLAKE_REST_PG_URI"]
    client = (os.environ["FENCEDLAKE_REST_CLIENT_ID"], os.environ["FENCEDLAKE_REST_CLIENT_SECRET"])
    io = dict(item.split("=", 1) for item in args.io)
    logging.basicConfig(level=logging.INFO, format="[restcatalog] %(levelname)s %(message)s")
    cat = Catalog(pg_uri, args.warehouse, io, client)
    cat.hold_s = args.hold_s
    server = ThreadingHTTPServer((args.host, args.port), make_handler(cat))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    log.info("serving the Iceberg REST API on http://%s:%d (warehouse %s)", args.host, args.port, args.warehouse)
    if args.ready_file is not None:
        args.ready_file.write_text(f"http://{args.host}:{args.port}\n")
    stop.wait()
    server.shutdown()
    if args.ready_file is not None:
        args.ready_file.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
