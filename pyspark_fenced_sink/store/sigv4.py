"""AWS Signature Version 4 for S3 requests (PROTOCOL.md §2; driver): a pure function over one request.

What :mod:`.s3_http` signs: the method, the path, the query, the ``host`` and
``x-amz-*`` headers and the SHA-256 of the body. Other headers (``If-None-Match``,
``Content-Length``) travel unsigned, as SigV4 allows. The derived signing key is
cached per (secret, day, region): one HMAC per request instead of five.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["EMPTY_SHA256", "Credentials", "amz_date", "canonical_path", "canonical_query", "sign"]

#: The SHA-256 of an empty body (GET, LIST, DELETE).
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

_SERVICE = "s3"
_ALGORITHM = "AWS4-HMAC-SHA256"


@dataclass(frozen=True)
class Credentials:
    """Static S3 credentials; ``repr`` shows the access key id only (never the secret or the token)."""

    access_key: str
    secret_key: str
    token: str = ""

    def __repr__(self) -> str:
        return f"Credentials(access_key={self.access_key!r}, secret_key='****', token={'****' if self.token else ''!r})"


def amz_date(now: float | None = None) -> str:
    """``now`` (epoch seconds, default the clock) as SigV4's ``x-amz-date``: ``YYYYMMDDTHHMMSSZ``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))


def canonical_path(path: str) -> str:
    """``path`` percent-encoded as S3 wants it, in the request line and in the signature alike (``/`` kept)."""
    return quote(path, safe="/-_.~")


def canonical_query(query: Mapping[str, str]) -> str:
    """``query`` percent-encoded and sorted: the signature's query string, and the request line's."""
    pairs = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in query.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


@functools.lru_cache(maxsize=16)
def _signing_key(secret_key: str, day: str, region: str) -> bytes:
    key = hmac.new(f"AWS4{secret_key}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, _SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sign(
    credentials: Credentials,
    region: str,
    method: str,
    host: str,
    path: str,
    query: Mapping[str, str],
    payload_sha256: str,
    date: str,
) -> dict[str, str]:
    """The headers that sign one request: ``Host``, ``x-amz-*`` and ``Authorization``.

    Args:
        credentials: Who signs.
        region: The bucket's region (the signature's scope).
        method: ``GET``, ``PUT``, ``DELETE``, ...
        host: The ``Host`` header exactly as sent (``host`` or ``host:port``).
        path: The request path, already encoded (:func:`canonical_path`).
        query: The query parameters, not encoded.
        payload_sha256: Hex SHA-256 of the body.
        date: :func:`amz_date` of the request.
    """
    headers = {"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": date}
    if credentials.token:
        headers["x-amz-security-token"] = credentials.token
    names = sorted(headers)
    signed = ";".join(names)
    canonical = "\n".join(
        [
            method,
            path,
            canonical_query(query),
            "".join(f"{n}:{headers[n].strip()}\n" for n in names),
            signed,
            payload_sha256,
        ]
    )
    scope = f"{date[:8]}/{region}/{_SERVICE}/aws4_request"
    to_sign = f"{_ALGORITHM}\n{date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    signature = hmac.new(_signing_key(credentials.secret_key, date[:8], region), to_sign.encode(), hashlib.sha256)
    out = {("Host" if n == "host" else n): headers[n] for n in names}
    out["Authorization"] = (
        f"{_ALGORITHM} Credential={credentials.access_key}/{scope}, SignedHeaders={signed}, "
        f"Signature={signature.hexdigest()}"
    )
    return out
