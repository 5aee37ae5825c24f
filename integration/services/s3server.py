"""A real S3 endpoint for the integration suite: moto's server on loopback, one lock around it.

Run by integration/services/s3.sh (which owns the PID file and log):

    python integration/services/s3server.py serve --host 127.0.0.1 --port 24330 \
        --bucket fencedlake --ready-file .integration/s3/ready
    python integration/services/s3server.py ensure-bucket --endpoint http://127.0.0.1:24330 --bucket fencedlake

Credentials are dummies; moto accepts any.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class _SerializedApp:
    """WSGI app that runs one request at a time.

    moto honours ``If-None-Match: *`` and ``If-Match`` on PutObject, but checks the
    condition and then writes the key as two separate steps with no lock in between:
    two racing conditional PUTs can both pass the check and both "win". Real S3 (and
    MinIO) make that check-and-write atomic, and put-if-absent is the primitive the
    fencedlake WAL is built on, so every request here holds one lock end to end.
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with self._lock:
            return list(self._app(environ, start_response))  # drain the body inside the lock


class LockedMotoServer(ThreadedMotoServer):
    """``ThreadedMotoServer`` whose WSGI app is wrapped in :class:`_SerializedApp` (moto 5.x)."""

    def _server_entry(self) -> None:
        app = _SerializedApp(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


def ensure_bucket(endpoint: str, bucket: str, region: str = "us-east-1") -> None:
    """Create ``bucket`` unless it exists (idempotent)."""
    import boto3
    from botocore.exceptions import ClientError

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    try:
        s3.head_bucket(Bucket=bucket)
        print(f"[s3server] bucket {bucket!r} exists", flush=True)
    except ClientError:
        s3.create_bucket(Bucket=bucket)
        print(f"[s3server] created bucket {bucket!r}", flush=True)


def serve(host: str, port: int, bucket: str, ready_file: Path | None) -> None:
    """Start the server, create the bucket, then block until SIGTERM/SIGINT."""
    server = LockedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    endpoint = f"http://{host}:{port}"
    print(f"[s3server] moto {_moto_version()} serving on {endpoint} (requests serialized)", flush=True)
    ensure_bucket(endpoint, bucket)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if ready_file is not None:
        ready_file.write_text(f"{endpoint}\n")
    while not stop.wait(1.0):
        pass
    print("[s3server] stopping", flush=True)
    server.stop()
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)


def _moto_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("moto")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_serve = sub.add_parser("serve")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=24330)
    p_serve.add_argument("--bucket", default="fencedlake")
    p_serve.add_argument("--ready-file", type=Path)
    p_serve.add_argument("--verbose", action="store_true", help="log every request (werkzeug access log)")
    p_bucket = sub.add_parser("ensure-bucket")
    p_bucket.add_argument("--endpoint", required=True)
    p_bucket.add_argument("--bucket", default="fencedlake")
    args = parser.parse_args(argv)

    if args.cmd == "serve":
        if not args.verbose:
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
        started = time.monotonic()
        serve(args.host, args.port, args.bucket, args.ready_file)
        print(f"[s3server] served for {time.monotonic() - started:.0f} s", flush=True)
    else:
        ensure_bucket(args.endpoint, args.bucket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
