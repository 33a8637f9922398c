"""The s3 artifact backend against a real S3-compatible server (SeaweedFS, `hack/s3`).

The operators here serve `s3-<SESSION>-*`, a scope disjoint from the session operator's
`<SESSION>-*`, and store in buckets of a server this module starts on loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from kubernetes import client

from tests.integration.objects import Agent, descriptor, events_of, get, pretty, status_of
from tooladapter.artifacts import CorruptArtifact, Space, content_ref, relative_key
from tooladapter.artifacts.s3 import S3ArtifactStore
from tooladapter.devtools import ROOT, SESSION, Namespace, OperatorProcess, wait_for
from tooladapter.devtools.s3 import S3Server
from tooladapter.kube.leases import lease_name
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SCOPE = f"s3-{SESSION}"
BUCKET = "receipts"
PREFIX = f"{SESSION}/"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("s3"), buckets=(BUCKET, "other"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def scope_ns(api: client.ApiClient) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=SCOPE)
    yield namespace
    namespace.delete()
    with contextlib.suppress(client.ApiException):
        client.CoordinationV1Api(api).delete_namespaced_lease(
            lease_name([f"{SCOPE}-*"]), "tooladapter-system"
        )


@pytest.fixture
def processes() -> Iterator[list[OperatorProcess]]:
    started: list[OperatorProcess] = []
    yield started
    for op in started:
        op.stop()


def s3_operator(workdir: Path, server: S3Server, **extra: str) -> OperatorProcess:
    workdir.mkdir()
    return OperatorProcess(
        workdir,
        {
            **server.operator_env(BUCKET, PREFIX),
            "TOOLADAPTER_NAMESPACES": f"{SCOPE}-*",
            "TOOLADAPTER_LEASE_SECONDS": "6",
            # One ToolInvoked per call, counted: the end is announced once, after its receipt.
            "TOOLADAPTER_EVENTS": "all",
            **extra,
        },
    )


def fetched(server: S3Server, ref: str, space: Space = Space.RECEIPTS) -> bytes:
    """The object `ref` names in `space`, read with a client of its own, checked against
    `ref`."""
    key = PREFIX + relative_key(ref, space)
    body = server.client().get_object(Bucket=BUCKET, Key=key)["Body"]
    data = body.read()
    assert content_ref(data) == ref
    return bytes(data)


def test_puts_are_write_once_checked_and_refused_when_damaged(s3: S3Server) -> None:
    store = S3ArtifactStore(s3.client(), bucket=BUCKET, prefix=f"{PREFIX}unit")
    store.check()
    assert store.conditional is True  # SeaweedFS honours If-None-Match: * on PUT

    data = b'{"schema":"tool-invocation-v1","n":1}'
    ref = store.put(data)
    assert ref == "sha256:" + hashlib.sha256(data).hexdigest()
    key = store.key_of(ref)
    assert key.startswith(f"{PREFIX}unit/sha256/{ref[7:9]}/")
    first = s3.client().head_object(Bucket=BUCKET, Key=key)
    assert store.get(ref) == data

    assert store.put(data) == ref  # again: refused by the server, found whole, left alone
    again = s3.client().head_object(Bucket=BUCKET, Key=key)
    assert (again["ETag"], again["LastModified"]) == (first["ETag"], first["LastModified"])

    # The server itself refuses an overwrite carrying If-None-Match.
    with pytest.raises(ClientError) as refused:
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"other", IfNoneMatch="*")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412

    # Bytes that do not hash to their key (written around the store) are refused on read.
    damaged = content_ref(b"never written by the store")
    s3.client().put_object(Bucket=BUCKET, Key=store.key_of(damaged), Body=b"tampered")
    with pytest.raises(CorruptArtifact):
        store.get(damaged)
    with pytest.raises(KeyError):
        store.get(content_ref(b"absent"))


def test_the_operator_identity_reaches_only_its_buckets(s3: S3Server) -> None:
    with pytest.raises(ClientError) as denied:
        s3.client().put_object(Bucket="elsewhere", Key="x", Body=b"x")
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] in (403, 404)


def test_a_call_ends_observed_with_its_receipt_in_the_bucket_and_another_replica_reads_it(
    api: client.ApiClient,
    s3: S3Server,
    scope_ns: Namespace,
    processes: list[OperatorProcess],
    tmp_path: Path,
) -> None:
    first = s3_operator(tmp_path / "first", s3)
    processes.append(first)
    first.start()
    assert first.says(f"artifacts in s3://{BUCKET}/{PREFIX} at {s3.endpoint}")
    descriptor(api, scope_ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent = Agent.create(api, scope_ns.name, "agent-1")
    agent.grant(["list-tools"], ["read"])

    name = agent.invoke("list-tools", {}, idempotencyKey="once")
    status = status_of(agent.wait(name, timeout=90))

    assert status["state"] == "Observed", pretty(status)
    receipt = parse_receipt(fetched(s3, status["receiptRef"])) or {}
    assert receipt["schema"] == "tool-invocation-v1"
    assert receipt["state"] == "Observed"
    assert receipt["invocationName"] == name
    assert receipt["requestHash"] == status["requestHash"]
    assert receipt["resultHash"] == status["resultRef"]
    result = fetched(s3, status["resultRef"], Space.RESULTS)  # a key space of its own
    assert result.decode() == status["result"]["content"]
    assert not (first.workdir / "artifacts").exists()  # nothing went to a local directory

    # Another replica: the first stops, a second process with the same settings leads.
    first.stop()
    second = s3_operator(tmp_path / "second", s3)
    processes.append(second)
    second.start(timeout=90)

    # It hands out the first one's receipt for a duplicate, and stores its own beside it.
    dup = status_of(agent.wait(agent.invoke("list-tools", {}, idempotencyKey="once")))
    assert dup["state"] == "Observed" and dup["duplicateOf"] == name, pretty(dup)
    assert dup["receiptRef"] == status["receiptRef"]
    assert (parse_receipt(fetched(s3, dup["auditRef"])) or {})["duplicateOf"] == name

    # And a process with its settings (the operator's store, from the environment) reads
    # and checks every receipt the first wrote.
    reader = (
        "import sys; from tooladapter.artifacts import Space, open_store;"
        "from tooladapter.settings import Settings;"
        "store = open_store(Settings.from_env());"
        "sys.stdout.buffer.write(store.get(sys.argv[1]) + b'\\n');"
        "sys.stdout.buffer.write(store.get(sys.argv[2], Space.RESULTS) + b'\\n')"
    )
    out = subprocess.run(
        [sys.executable, "-c", reader, status["receiptRef"], status["resultRef"]],
        env={**os.environ, **second.env},
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    assert (parse_receipt(out[0]) or {}).get("invocationName") == name
    assert out[1].decode() == status["result"]["content"]


def test_a_store_down_at_the_end_delays_the_receipt_and_never_loses_it(
    api: client.ApiClient,
    scope_ns: Namespace,
    processes: list[OperatorProcess],
    tmp_path: Path,
) -> None:
    server = S3Server(tmp_path / "outage", buckets=(BUCKET,))
    server.workdir.mkdir()
    server.start()
    try:
        op = s3_operator(tmp_path / "op", server)
        processes.append(op)
        op.start()
        descriptor(api, scope_ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        agent = Agent.create(api, scope_ns.name, "agent-1")
        agent.grant(["list-tools"], ["read"])

        server.stop()
        name = agent.invoke("list-tools", {})

        def warned() -> bool:
            return "ArtifactStoreUnavailable" in events_of(api, scope_ns.name, name)

        wait_for(warned, timeout=60, what="the ArtifactStoreUnavailable event")
        # Decided but not persisted: no terminal state without its receipt.
        live = status_of(get(api, scope_ns.name, "toolinvocations", name))
        assert live.get("state") in (None, "Executing"), pretty(live)

        server.start()
        status = status_of(agent.wait(name, timeout=90))
        assert status["state"] == "Observed", pretty(status)
        receipt = parse_receipt(fetched(server, status["receiptRef"])) or {}
        assert receipt["state"] == "Observed"
        assert events_of(api, scope_ns.name, name).count("ToolInvoked") == 1
    finally:
        server.stop()
