"""The HTTP S3 control store: signatures, answers S3 gives and moto cannot, and when it serves (store/s3_http.py).

The store contract itself (round trips, LIST order, put-if-absent) runs against
moto in ``test_stores.py``. Here: its SigV4 signatures equal botocore's for the
same request; a scripted server answers what real S3 may (409
``ConditionalRequestConflict``, 5xx, a dropped connection, ``403``, paged LISTs);
secrets stay out of errors; and which configurations it serves (the rest go to
s3fs).
"""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.store import s3_http
from pyspark_fenced_sink.store.registry import open_store
from pyspark_fenced_sink.store.s3 import S3Store
from pyspark_fenced_sink.store.s3_http import S3_CLIENT_ENV, S3HttpStore, http_client, http_store
from pyspark_fenced_sink.store.sigv4 import Credentials, canonical_path, sign

SECRET = "wJalrXUtnFEMI-not-a-real-secret-0123456789"


# ---------------------------------------------------------------------------------------------- signatures


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "token"),
    [
        ("GET", "/bucket/_fencedlake/t/wal/00000000000000000001.json", {}, b"", ""),
        ("PUT", "/bucket/_fencedlake/t/wal/key with spaces+plus=eq.json", {}, b'{"token": "x"}', ""),
        ("GET", "/bucket", {"list-type": "2", "prefix": "a/b c/", "start-after": "a/b c/0001"}, b"", "session/token=="),
        ("DELETE", "/bucket/k~_-.x", {}, b"", ""),
    ],
)
def test_signature_equals_botocores_for_the_same_request(
    method: str, path: str, query: dict[str, str], body: bytes, token: str
) -> None:
    """The Authorization header is byte-for-byte the one botocore's S3 SigV4 signer computes."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotocoreCredentials

    host = "127.0.0.1:9000"
    encoded = canonical_path(path)
    ours_query = "&".join(f"{k}={v}" for k, v in sorted(_quoted(query).items()))
    request = AWSRequest(method=method, url=f"http://{host}{encoded}" + (f"?{ours_query}" if query else ""), data=body)
    S3SigV4Auth(BotocoreCredentials("AKIDEXAMPLE", SECRET, token or None), "s3", "eu-west-3").add_auth(request)
    date = request.headers["X-Amz-Date"]

    import hashlib

    payload = hashlib.sha256(body).hexdigest()
    ours = sign(Credentials("AKIDEXAMPLE", SECRET, token), "eu-west-3", method, host, encoded, query, payload, date)
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-content-sha256"] == request.headers["X-Amz-Content-SHA256"]


def _quoted(query: dict[str, str]) -> dict[str, str]:
    from urllib.parse import quote

    return {quote(k, safe="-_.~"): quote(v, safe="-_.~") for k, v in query.items()}


def test_credentials_repr_hides_the_secret_and_the_token() -> None:
    """A logged client or credentials object shows the access key id only."""
    shown = repr(Credentials("AKIDEXAMPLE", SECRET, "the-session-token"))
    assert "AKIDEXAMPLE" in shown
    assert SECRET not in shown
    assert "the-session-token" not in shown


# ---------------------------------------------------------------------------------------------- a scripted S3


class _Script:
    """What the scripted server answers, request by request; records every request it got."""

    def __init__(self) -> None:
        self.answers: list[Callable[[Any], tuple[int, bytes] | None]] = []
        self.requests: list[dict[str, Any]] = []


def _error_xml(code: str) -> bytes:
    return f"<Error><Code>{code}</Code><Message>injected {code}</Message></Error>".encode()


@pytest.fixture
def script() -> Iterator[tuple[_Script, str]]:
    """(script, endpoint): a local HTTP/1.1 server answering from the script (200 and empty when it runs out)."""
    state = _Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.requests.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
            )
            answer = state.answers.pop(0)(self) if state.answers else (200, b"")
            if answer is None:  # drop the connection: the request was read, no answer goes back
                self.close_connection = True
                self.connection.shutdown(2)
                return
            status, payload = answer
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_DELETE = _serve  # noqa: N815 - http.server's method names

        def log_message(self, *args: Any) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _props(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "s3.endpoint": endpoint,
        "s3.access-key-id": "AKIDEXAMPLE",
        "s3.secret-access-key": SECRET,
        "s3.region": "us-east-1",
        **extra,
    }


def _store(endpoint: str, **extra: str) -> S3HttpStore:
    store = http_store(f"s3://bucket/{uuid.uuid4().hex}/_fencedlake", _props(endpoint, **extra))
    assert isinstance(store, S3HttpStore)
    return store


def _answer(status: int, body: bytes = b"") -> Callable[[Any], tuple[int, bytes]]:
    return lambda _: (status, body)


def _drop(_: Any) -> None:
    return None


@pytest.fixture(autouse=True)
def _fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_http.time, "sleep", lambda _: None)


def test_put_sends_if_none_match_and_a_signed_body(script: tuple[_Script, str]) -> None:
    """The conditional PUT carries If-None-Match: * and the body's SHA-256; 200 is 'created', 412 'exists'."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_answer(200), _answer(412, _error_xml("PreconditionFailed"))]
    assert store.put_if_absent("wal/1.json", b"first") is True
    assert store.put_if_absent("wal/1.json", b"second") is False
    first = state.requests[0]
    assert first["method"] == "PUT" and first["body"] == b"first"
    assert first["headers"]["If-None-Match"] == "*"
    assert first["path"] == f"/bucket/{store.base}wal/1.json"
    assert first["headers"]["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "Expect" not in first["headers"]


def test_409_conditional_request_conflict_is_retried_on_the_same_key(script: tuple[_Script, str]) -> None:
    """A concurrent conditional write in flight (409) applied nothing: the same PUT again, then created."""
    state, endpoint = script
    store = _store(endpoint)
    conflict = _answer(409, _error_xml("ConditionalRequestConflict"))
    state.answers = [conflict, conflict, _answer(200)]
    assert store.put_if_absent("wal/2.json", b"x") is True
    assert [r["path"] for r in state.requests] == [f"/bucket/{store.base}wal/2.json"] * 3


def test_persistent_409_fails_not_ambiguous(script: tuple[_Script, str]) -> None:
    """409 on every attempt: nothing was applied, so the error is not ambiguous."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_answer(409, _error_xml("ConditionalRequestConflict"))] * store.conflict_retries
    with pytest.raises(StoreError) as raised:
        store.put_if_absent("wal/3.json", b"x")
    assert not raised.value.ambiguous
    assert len(state.requests) == store.conflict_retries


@pytest.mark.parametrize(
    ("failure", "ambiguous"),
    [
        pytest.param(_answer(500, _error_xml("InternalError")), True, id="500"),
        pytest.param(_answer(503, _error_xml("SlowDown")), True, id="503"),
        pytest.param(_drop, True, id="dropped-after-the-request"),
    ],
)
def test_a_put_that_may_have_landed_fails_ambiguous_after_its_attempts(
    script: tuple[_Script, str], failure: Callable[[Any], Any], ambiguous: bool
) -> None:
    """5xx or a lost answer on every attempt: StoreError(ambiguous), resolved by the owner token (I7)."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [failure] * s3_http.MAX_ATTEMPTS
    with pytest.raises(StoreError) as raised:
        store.put_if_absent("wal/4.json", b"x")
    assert raised.value.ambiguous is ambiguous
    assert len(state.requests) == s3_http.MAX_ATTEMPTS


def test_a_put_that_never_connected_fails_not_ambiguous() -> None:
    """Every connect refused: the request never left, so the error is definite (nothing may have landed)."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    store = _store(f"http://127.0.0.1:{port}")
    with pytest.raises(StoreError, match="no connection") as raised:
        store.put_if_absent("wal/4.json", b"x")
    assert not raised.value.ambiguous


def test_a_lost_answer_then_412_on_itself_reports_exists(script: tuple[_Script, str]) -> None:
    """The PUT landed but its answer was lost; the retry finds the key (412): 'exists', for the token to resolve."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_drop, _answer(412, _error_xml("PreconditionFailed"))]
    assert store.put_if_absent("wal/5.json", b"x") is False
    assert len(state.requests) == 2


@pytest.mark.parametrize("operation", ["GET", "LIST", "DELETE"])
def test_reads_and_deletes_retry_then_fail_not_ambiguous(script: tuple[_Script, str], operation: str) -> None:
    """GET, LIST and DELETE failures surface as (non-ambiguous) StoreError after the attempts, never raw."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_answer(500, _error_xml("InternalError")), _drop, _answer(503, _error_xml("SlowDown"))]
    call = {
        "GET": lambda: store.get("wal/6.json"),
        "LIST": lambda: store.list("wal/"),
        "DELETE": lambda: store.delete("x"),
    }
    with pytest.raises(StoreError) as raised:
        call[operation]()
    assert not raised.value.ambiguous
    assert len(state.requests) == s3_http.MAX_ATTEMPTS


def test_a_retry_after_a_5xx_succeeds(script: tuple[_Script, str]) -> None:
    """One 500 then the object: the GET returns it."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_answer(500, _error_xml("InternalError")), _answer(200, b"payload")]
    assert store.get("wal/7.json") == b"payload"


def test_access_denied_is_a_definite_error_naming_the_code_not_the_secret(script: tuple[_Script, str]) -> None:
    """403: one request, a StoreError with S3's code and message; neither the secret nor the token appears."""
    state, endpoint = script
    store = _store(endpoint, **{"s3.session-token": "the-session-token"})
    state.answers = [_answer(403, _error_xml("AccessDenied"))]
    with pytest.raises(StoreError) as raised:
        store.put_if_absent("wal/8.json", b"x")
    message = str(raised.value)
    assert "AccessDenied" in message and "403" in message
    assert not raised.value.ambiguous
    assert SECRET not in message and "the-session-token" not in message
    assert SECRET not in repr(store.client) and SECRET not in repr(store)
    assert state.requests[0]["headers"]["x-amz-security-token"] == "the-session-token"


def test_list_follows_continuation_tokens_and_strips_the_root(script: tuple[_Script, str]) -> None:
    """ListObjectsV2 pages are followed; keys come back relative to the store's root, start-after sent once."""
    state, endpoint = script
    store = _store(endpoint)
    ns = "http://s3.amazonaws.com/doc/2006-03-01/"

    def page(keys: list[str], token: str) -> Callable[[Any], tuple[int, bytes]]:
        contents = "".join(f"<Contents><Key>{store.base}{k}</Key><Size>1</Size></Contents>" for k in keys)
        more = (
            f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>"
            if token
            else ("<IsTruncated>false</IsTruncated>")
        )
        return _answer(200, f'<ListBucketResult xmlns="{ns}">{contents}{more}</ListBucketResult>'.encode())

    state.answers = [page(["wal/02", "wal/03"], "tok/en=="), page(["wal/04"], "")]
    assert store.list("wal/", "wal/01") == ["wal/02", "wal/03", "wal/04"]
    first, second = (r["path"] for r in state.requests)
    assert "list-type=2" in first and "start-after=" in first and "continuation-token" not in first
    assert "continuation-token=tok%2Fen%3D%3D" in second


def test_get_of_a_missing_key_is_none_and_delete_of_one_is_no_error(script: tuple[_Script, str]) -> None:
    """404 is 'absent' for GET and 'already gone' for DELETE."""
    state, endpoint = script
    store = _store(endpoint)
    state.answers = [_answer(404, _error_xml("NoSuchKey")), _answer(404, _error_xml("NoSuchKey"))]
    assert store.get("wal/9.json") is None
    store.delete("wal/9.json")


def test_connections_are_reused_and_a_forked_child_opens_its_own(script: tuple[_Script, str]) -> None:
    """Kept-alive connections serve later requests; after a fork (pid changed) the idle ones are not shared."""
    _, endpoint = script
    store = _store(endpoint)
    store.get("wal/a")
    host = store.client.url_of(store.bucket)[0]
    (idle,) = store.client._idle[host]
    store.get("wal/b")
    assert store.client._idle[host] == [idle]
    store.client._pid = -1  # as in a child after fork
    store.get("wal/c")
    assert store.client._idle[host] and store.client._idle[host][0] is not idle


# ---------------------------------------------------------------------------------------------- who serves


def test_registry_picks_the_http_store_unless_told_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Explicit keys and an endpoint: the HTTP store; FENCEDLAKE_S3_CLIENT=s3fs: s3fs's."""
    props = _props("http://127.0.0.1:1")
    assert isinstance(open_store("s3://bucket/t/_fencedlake", props), S3HttpStore)
    monkeypatch.setenv(S3_CLIENT_ENV, "s3fs")
    assert isinstance(open_store("s3://bucket/t/_fencedlake", props), S3Store)


@pytest.mark.parametrize(
    ("props", "env", "serves"),
    [
        pytest.param({"s3.endpoint": "http://h:1"}, {}, False, id="no-keys-anywhere"),
        pytest.param(
            {"s3.endpoint": "http://h:1"}, {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}, True, id="env-keys"
        ),
        pytest.param({"s3.access-key-id": "a"}, {}, False, id="half-a-pair"),
        pytest.param({"s3.access-key-id": "a", "s3.secret-access-key": "b"}, {}, False, id="aws-no-region"),
        pytest.param(
            {"s3.access-key-id": "a", "s3.secret-access-key": "b"}, {"AWS_REGION": "eu-west-1"}, True, id="aws"
        ),
        pytest.param(
            {"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.endpoint": "http://h:1/some/path"},
            {},
            False,
            id="endpoint-with-a-path",
        ),
        pytest.param(
            {"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.endpoint": "http://h:1"},
            {"HTTP_PROXY": "http://proxy:3128"},
            False,
            id="proxied",
        ),
        pytest.param(
            {"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.endpoint": "http://h:1"},
            {"HTTP_PROXY": "http://proxy:3128", "NO_PROXY": "h"},
            True,
            id="proxy-bypassed",
        ),
    ],
)
def test_the_http_store_serves_only_what_it_can_do_as_s3fs_would(
    monkeypatch: pytest.MonkeyPatch, props: dict[str, str], env: dict[str, str], serves: bool
) -> None:
    """Static keys, a known region, no proxy: the HTTP client; anything else: None (s3fs serves)."""
    for name in s3_http._ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (http_client(props) is not None) is serves


def test_aws_without_an_endpoint_is_virtual_hosted_https_in_the_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """No s3.endpoint: https://<bucket>.s3.<region>.amazonaws.com/<key>."""
    client = http_client({"s3.access-key-id": "a", "s3.secret-access-key": "b", "s3.region": "eu-west-3"})
    assert client is not None
    assert client.target.scheme == "https"
    assert client.url_of("bkt", "p/k") == ("bkt.s3.eu-west-3.amazonaws.com", "/p/k")
    assert client.url_of("b.with.dots", "k") == ("s3.eu-west-3.amazonaws.com", "/b.with.dots/k")
