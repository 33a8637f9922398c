"""The artifact stores: one content-addressed layout, written once, checked on read.

The s3 store runs here against `FakeS3`, a dict that answers as S3 does (status codes and
error shapes of botocore's `ClientError`), with the conditional-put behaviour switchable;
`tests/integration/artifacts/test_s3.py` runs the same store against a real server.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from tooladapter.artifacts import (
    ArtifactStoreError,
    CorruptArtifact,
    LocalArtifactStore,
    content_ref,
    digest_of,
    open_store,
    relative_key,
)
from tooladapter.artifacts.s3 import S3ArtifactStore, S3Location, normal_prefix
from tooladapter.enums import ArtifactBackend
from tooladapter.settings import Settings

DATA = b'{"schema":"tool-invocation-v1"}'
DIGEST = hashlib.sha256(DATA).hexdigest()
REF = f"sha256:{DIGEST}"


def client_error(status: int, code: str, operation: str) -> ClientError:
    return ClientError(
        # The fields the code reads; the stubs' TypedDict wants every field a response has.
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},  # type: ignore[typeddict-item]
        operation,
    )


class FakeS3:
    """The S3 calls the store makes, over a dict. `conditional`: whether PUT honours
    `If-None-Match: *` ("honour"), ignores it ("ignore") or refuses it ("refuse", 501)."""

    def __init__(self, conditional: str = "honour", bucket: str = "receipts") -> None:
        self.conditional = conditional
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}
        self.calls: list[tuple[str, str]] = []
        #: Objects written (a refused put writes none).
        self.writes = 0
        self.down = False

    def _check(self, bucket: str, operation: str) -> None:
        if self.down:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
        if bucket != self.bucket:
            raise client_error(404, "NoSuchBucket", operation)

    def head_bucket(self, *, Bucket: str) -> dict[str, Any]:
        self._check(Bucket, "HeadBucket")
        return {}

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        self._check(Bucket, "HeadObject")
        self.calls.append(("head", Key))
        if Key not in self.objects:
            raise client_error(404, "404", "HeadObject")
        return {"ContentLength": len(self.objects[Key])}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **extra: Any) -> dict[str, Any]:
        self._check(Bucket, "PutObject")
        self.calls.append(("put", Key))
        if "IfNoneMatch" in extra:
            assert extra["IfNoneMatch"] == "*"
            if self.conditional == "refuse":
                raise client_error(501, "NotImplemented", "PutObject")
            if self.conditional == "honour" and Key in self.objects:
                raise client_error(412, "PreconditionFailed", "PutObject")
        sent = base64.b64decode(extra["ChecksumSHA256"])
        if sent != hashlib.sha256(Body).digest():
            raise client_error(400, "BadDigest", "PutObject")
        self.objects[Key] = bytes(Body)
        self.writes += 1
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        self._check(Bucket, "GetObject")
        if Key not in self.objects:
            raise client_error(404, "NoSuchKey", "GetObject")
        return {"Body": io.BytesIO(self.objects[Key])}

    def get_paginator(self, operation: str) -> FakeS3:
        assert operation == "list_objects_v2"
        return self

    def paginate(self, *, Bucket: str, Prefix: str) -> list[dict[str, Any]]:
        """ListObjectsV2 in pages of two keys, as a paginator yields them."""
        self._check(Bucket, "ListObjectsV2")
        keys = sorted(k for k in self.objects if k.startswith(Prefix))
        return [{"Contents": [{"Key": k} for k in keys[i : i + 2]]} for i in range(0, len(keys), 2)]


def s3_store(fake: FakeS3, prefix: str = "tooladapter/") -> S3ArtifactStore:
    store = S3ArtifactStore(fake, bucket=fake.bucket, prefix=prefix)  # type: ignore[arg-type]
    store.check()
    fake.calls.clear()
    fake.writes = 0
    return store


# -- the layout -------------------------------------------------------------------------


def test_a_reference_is_the_sha256_of_the_bytes_and_names_a_two_level_key() -> None:
    assert content_ref(DATA) == REF
    assert relative_key(REF) == f"sha256/{DIGEST[:2]}/{DIGEST}"
    store = S3ArtifactStore(FakeS3(), bucket="receipts", prefix="team-a/receipts")  # type: ignore[arg-type]
    assert store.key_of(REF) == f"team-a/receipts/sha256/{DIGEST[:2]}/{DIGEST}"


@pytest.mark.parametrize(
    ("raw", "normal"),
    [("", ""), ("/", ""), ("a", "a/"), ("a/b/", "a/b/"), ("/a/b", "a/b/")],
)
def test_a_prefix_is_a_folder_however_it_is_written(raw: str, normal: str) -> None:
    assert normal_prefix(raw) == normal


@pytest.mark.parametrize(
    "ref",
    [
        "sha256:../../etc/passwd",
        f"sha256:{DIGEST.upper()}",
        f"md5:{DIGEST}",
        f"sha256:{DIGEST[:-1]}",
        f"sha256:{DIGEST}/x",
        DIGEST,
    ],
)
def test_anything_but_a_reference_names_no_file_and_no_key(ref: str, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="not an artifact reference"):
        digest_of(ref)
    with pytest.raises(KeyError):
        LocalArtifactStore(tmp_path).get(ref)
    with pytest.raises(KeyError):
        s3_store(FakeS3()).get(ref)


# -- the file store ---------------------------------------------------------------------


def test_the_file_store_writes_once_under_the_layout_and_reads_back(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    assert store.put(DATA) == REF
    path = tmp_path / "sha256" / DIGEST[:2] / DIGEST
    assert path.read_bytes() == DATA
    before = path.stat().st_mtime_ns
    assert store.put(DATA) == REF
    assert path.stat().st_mtime_ns == before
    assert store.get(REF) == DATA
    with pytest.raises(KeyError):
        store.get(content_ref(b"never stored"))


def test_the_file_store_refuses_a_file_that_does_not_hash_to_its_name(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    store.put(DATA)
    (tmp_path / "sha256" / DIGEST[:2] / DIGEST).write_bytes(DATA.replace(b"v1", b"v2"))
    with pytest.raises(CorruptArtifact, match=REF):
        store.get(REF)


def test_the_file_store_never_overwrites_a_damaged_file(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    store.put(DATA)
    path = tmp_path / "sha256" / DIGEST[:2] / DIGEST
    path.write_bytes(b"short")
    with pytest.raises(CorruptArtifact, match="holds 5 bytes"):
        store.put(DATA)
    assert path.read_bytes() == b"short"


# -- the s3 store -----------------------------------------------------------------------


def test_the_s3_store_puts_under_the_prefix_with_the_content_checksum() -> None:
    fake = FakeS3()
    store = s3_store(fake)
    assert store.put(DATA) == REF
    key = f"tooladapter/sha256/{DIGEST[:2]}/{DIGEST}"
    assert fake.objects[key] == DATA
    # Conditional: one request, no HEAD first.
    assert fake.calls == [("put", key)]
    assert store.get(REF) == DATA


def test_a_conditional_put_of_a_stored_artifact_leaves_it_and_returns_its_ref() -> None:
    fake = FakeS3()
    store = s3_store(fake)
    store.put(DATA)
    key = store.key_of(REF)

    assert store.put(DATA) == REF

    assert fake.writes == 1
    assert fake.calls == [("put", key), ("put", key), ("head", key)]  # refused, checked whole


def test_a_server_that_ignores_if_none_match_gets_a_head_before_each_put() -> None:
    fake = FakeS3(conditional="ignore")
    store = s3_store(fake)
    assert store.conditional is False

    store.put(DATA)
    store.put(DATA)

    key = store.key_of(REF)
    assert fake.writes == 1
    assert fake.calls == [("head", key), ("put", key), ("head", key)]


def test_a_server_that_refuses_if_none_match_gets_a_head_before_each_put() -> None:
    fake = FakeS3(conditional="refuse")
    store = s3_store(fake)
    assert store.conditional is False
    store.put(DATA)
    store.put(DATA)
    assert fake.writes == 1


def test_the_probe_finds_a_server_that_honours_if_none_match() -> None:
    store = s3_store(FakeS3())
    assert store.conditional is True


def test_the_s3_store_refuses_an_object_that_does_not_hash_to_its_key() -> None:
    fake = FakeS3()
    store = s3_store(fake)
    store.put(DATA)
    fake.objects[store.key_of(REF)] = DATA.replace(b"v1", b"v2")
    with pytest.raises(CorruptArtifact, match=REF):
        store.get(REF)


@pytest.mark.parametrize("conditional", ["honour", "ignore"])
def test_a_stored_object_of_another_size_is_damage_and_never_overwritten(
    conditional: str,
) -> None:
    fake = FakeS3(conditional=conditional)
    store = s3_store(fake)
    fake.objects[store.key_of(REF)] = b"short"
    with pytest.raises(CorruptArtifact, match="holds 5 bytes"):
        store.put(DATA)
    assert fake.objects[store.key_of(REF)] == b"short"


def test_an_absent_object_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        s3_store(FakeS3()).get(REF)


def test_an_unreachable_store_is_an_artifact_store_error() -> None:
    fake = FakeS3()
    store = s3_store(fake)
    fake.down = True
    with pytest.raises(ArtifactStoreError, match="put tooladapter/sha256/"):
        store.put(DATA)
    with pytest.raises(ArtifactStoreError, match="get tooladapter/sha256/"):
        store.get(REF)


def test_a_missing_bucket_fails_the_check() -> None:
    store = S3ArtifactStore(FakeS3(), bucket="absent")  # type: ignore[arg-type]
    with pytest.raises(ArtifactStoreError, match="bucket 'absent' is not usable"):
        store.check()


def test_a_location_prints_without_credentials() -> None:
    location = S3Location(bucket="b", prefix="p/", endpoint="http://127.0.0.1:8333")
    assert str(location) == "s3://b/p/ at http://127.0.0.1:8333"


# -- settings and the factory -----------------------------------------------------------


S3_ENV = (
    "TOOLADAPTER_ARTIFACT_BACKEND",
    "TOOLADAPTER_S3_ENDPOINT",
    "TOOLADAPTER_S3_BUCKET",
    "TOOLADAPTER_S3_PREFIX",
    "TOOLADAPTER_S3_REGION",
    "TOOLADAPTER_S3_PATH_STYLE",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in S3_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_file_backend_is_the_default(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("TOOLADAPTER_ARTIFACT_DIR", str(tmp_path))
    settings = Settings.from_env()
    assert settings.artifacts.backend == ArtifactBackend.FILE
    store = open_store(settings)
    assert isinstance(store, LocalArtifactStore)
    assert store.root == tmp_path


def test_s3_settings_are_read(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TOOLADAPTER_ARTIFACT_BACKEND", "S3")
    clean_env.setenv("TOOLADAPTER_S3_BUCKET", "receipts")
    clean_env.setenv("TOOLADAPTER_S3_ENDPOINT", "http://127.0.0.1:8333")
    clean_env.setenv("TOOLADAPTER_S3_PREFIX", "prod/")
    clean_env.setenv("TOOLADAPTER_S3_REGION", "eu-west-1")
    clean_env.setenv("TOOLADAPTER_S3_PATH_STYLE", "true")
    settings = Settings.from_env()
    assert settings.artifacts.backend == ArtifactBackend.S3
    assert (settings.artifacts.s3_bucket, settings.artifacts.s3_endpoint) == (
        "receipts",
        "http://127.0.0.1:8333",
    )
    assert (
        settings.artifacts.s3_prefix,
        settings.artifacts.s3_region,
        settings.artifacts.s3_path_style,
    ) == (
        "prod/",
        "eu-west-1",
        True,
    )


def test_the_s3_backend_without_a_bucket_fails_closed(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TOOLADAPTER_ARTIFACT_BACKEND", "s3")
    with pytest.raises(ValueError, match="needs TOOLADAPTER_S3_BUCKET"):
        Settings.from_env()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TOOLADAPTER_ARTIFACT_BACKEND", "gcs", "is not one of file|s3"),
        ("TOOLADAPTER_S3_ENDPOINT", "127.0.0.1:8333", "is not an http"),
        ("TOOLADAPTER_S3_PATH_STYLE", "path", "is not a boolean"),
    ],
)
def test_a_bad_artifact_setting_names_the_variable(
    clean_env: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    clean_env.setenv("TOOLADAPTER_S3_BUCKET", "receipts")
    clean_env.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}=.*{message}"):
        Settings.from_env()


def test_the_cli_reads_a_bucket_with_the_operators_s3_settings(
    clean_env: pytest.MonkeyPatch,
) -> None:
    from tooladapter.cli.chainverify import open_read_only
    from tooladapter.cli.exitcodes import CliError

    clean_env.setenv("TOOLADAPTER_S3_ENDPOINT", "http://127.0.0.1:8333")
    clean_env.setenv("TOOLADAPTER_S3_REGION", "eu-west-1")
    store = open_read_only("s3://receipts/prod")
    assert isinstance(store, S3ArtifactStore)
    assert (store.bucket, store.prefix) == ("receipts", "prod/")
    assert store.client.meta.endpoint_url == "http://127.0.0.1:8333"
    assert store.client.meta.region_name == "eu-west-1"
    clean_env.setenv("TOOLADAPTER_S3_PATH_STYLE", "path")
    with pytest.raises(CliError, match=r"TOOLADAPTER_S3_PATH_STYLE=.*is not a boolean"):
        open_read_only("s3://receipts/prod")
