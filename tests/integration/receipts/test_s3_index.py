"""The receipt index's named keys on a real S3-compatible server (SeaweedFS, `hack/s3`):
written once, never overwritten, listed by folder under the store's prefix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tooladapter.artifacts import CorruptArtifact, content_ref
from tooladapter.artifacts.index import entry_bytes, ref_of_key, run_key, run_prefix
from tooladapter.artifacts.s3 import S3ArtifactStore
from tooladapter.devtools import SESSION
from tooladapter.devtools.s3 import S3Server

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

BUCKET = "receipts"
PREFIX = f"{SESSION}/index-test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("s3-index"), buckets=(BUCKET,))
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("conditional", [True, False])
def test_named_keys_are_listed_by_prefix_and_never_overwritten(
    s3: S3Server, conditional: bool
) -> None:
    store = S3ArtifactStore(s3.client(), bucket=BUCKET, prefix=f"{PREFIX}-{conditional}")
    store.check()
    assert store.conditional is True  # SeaweedFS honours If-None-Match: * on PUT
    store.conditional = conditional  # and the HEAD-first path of servers that do not

    refs = [content_ref(f"receipt {n}".encode()) for n in range(3)]
    keys = [run_key("team-a", "run-1", ref) for ref in refs]
    for key in keys:
        store.put_key(key, entry_bytes(ref_of_key(key)))
    # Neighbours the folder must not reach: another run, another tenant.
    store.put_key(run_key("team-a", "run-2", refs[0]), b"x")
    store.put_key(run_key("team-b", "run-1", refs[0]), b"x")

    assert store.list(run_prefix("team-a", "run-1")) == sorted(keys)
    assert store.list(run_prefix("team-a", "no-run")) == []
    assert store.get_key(keys[0]) == entry_bytes(refs[0])

    full = f"{store.prefix}{keys[0]}"
    first = s3.client().head_object(Bucket=BUCKET, Key=full)
    store.put_key(keys[0], entry_bytes(refs[0]))  # the same bytes: left as they are
    with pytest.raises(CorruptArtifact):
        store.put_key(keys[0], b"other bytes")
    again = s3.client().head_object(Bucket=BUCKET, Key=full)
    assert (again["ETag"], again["LastModified"]) == (first["ETag"], first["LastModified"])
    assert store.get_key(keys[0]) == entry_bytes(refs[0])
    with pytest.raises(KeyError):
        store.get_key(run_key("team-a", "run-1", content_ref(b"absent")))
