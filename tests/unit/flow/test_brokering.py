"""Brokering `spec.credentials` against the fake cluster: where each value goes (the http
executor's call, the lease's Secret, the egress grant), what status says (never a value),
and fail-closed denials before anything runs."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    container_descriptor,
    credential,
    finished_job,
    http_descriptor,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tests.unit.flow.test_restart import restart, run_until_stopped, stop_after_writing
from tooladapter.egress.core.lease import GRANT_KEY
from tooladapter.enums import ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.job import ProxyPeer
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

VALUE = "s3cr3t-brokered-value"
URL = "https://api.example.test/items"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(data: str) -> str:
    return base64.b64decode(data).decode()


def forms(value: str) -> list[str]:
    """Every spelling of `value` that must never reach status."""
    return [value, b64(value), f"Bearer {value}", b64(f"Bearer {value}")]


def statuses_at(cluster: FakeCluster, state: str) -> list[dict[str, Any]]:
    """The status as written at `state` (each time)."""
    seen: list[dict[str, Any]] = []

    def after(result: dict[str, Any], **_: object) -> None:
        status = result.get("status") or {}
        if status.get("state") == state:
            seen.append(json.loads(json.dumps(status)))

    cluster.after["patch_status"] = after
    return seen


def http_harness() -> tuple[Harness, ScriptedExecutor]:
    executor = ScriptedExecutor()
    h = make_runtime(settings=Settings(write_every_state=True), executors={ToolKind.HTTP: executor})
    return h, executor


# --------------------------------------------------------------------------- http tools


async def test_a_secret_credential_of_an_http_tool_is_brokered_and_named_never_shown() -> None:
    h, executor = http_harness()
    h.cluster.secrets[(NAMESPACE, "api-key")] = {"token": b64(VALUE + "\n")}
    h.publish(
        http_descriptor(
            "fetch",
            URL,
            credentials=[credential("api", secret="api-key", hosts=["api.example.test"])],
        )
    )
    h.cluster.grant(tools=["fetch"], classes=["read"])
    brokered = statuses_at(h.cluster, "Brokered")

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert stored["status"]["state"] == "Observed", stored["status"]
    assert brokered, "the call was never written Brokered"
    expected = [{"name": "api", "source": "secretKeyRef", "hosts": ["api.example.test"]}]
    assert brokered[0]["credentials"] == expected
    assert stored["status"]["credentials"] == expected
    stages = {s["stage"]: s for s in stored["status"]["stages"]}
    assert stages["credentials"]["outcome"] == "brokered"
    # The value (stripped of its newline) reaches the executor's call, and only it.
    (call,) = executor.executed
    assert [(c.name, c.value) for c in call.credentials] == [("api", VALUE)]
    writes = h.cluster.writes_of("f-1")
    assert len(writes) > 2
    written = json.dumps([stored, *writes])
    for form in forms(VALUE):
        assert form not in written, form
    for event in h.events.posted:
        assert VALUE not in f"{event}"
    receipts = h.store.receipts()
    assert receipts
    for receipt in receipts:
        for form in forms(VALUE):
            assert form.encode() not in receipt


@pytest.mark.parametrize(
    ("secrets", "needle"),
    [
        ({}, "secret api-key not found"),
        ({"other": b64(VALUE)}, "has no key 'token'"),
        ({"token": b64("")}, "is empty"),
        ({"token": b64("a\r\nX-Evil: 1")}, "is not a one-line header value"),
    ],
)
async def test_a_credential_that_cannot_be_brokered_denies_at_credentials(
    secrets: dict[str, str], needle: str
) -> None:
    h, executor = http_harness()
    if secrets:
        h.cluster.secrets[(NAMESPACE, "api-key")] = secrets
    h.publish(
        http_descriptor(
            "fetch",
            URL,
            credentials=[credential("api", secret="api-key", hosts=["api.example.test"])],
        )
    )
    h.cluster.grant(tools=["fetch"], classes=["read"])

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    status = stored["status"]
    assert (status["state"], status["deniedStage"], status["failureClass"]) == (
        "Denied",
        "credentials",
        "credentials",
    ), status
    assert needle in status["message"]
    assert executor.executed == []
    assert not status.get("credentials")


async def test_a_missing_service_account_denies_and_mints_nothing() -> None:
    h, executor = http_harness()
    h.publish(
        http_descriptor(
            "fetch",
            URL,
            credentials=[credential("kube", service_account="nobody", hosts=["api.example.test"])],
        )
    )
    h.cluster.grant(tools=["fetch"], classes=["read"])

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert (stored["status"]["deniedStage"], stored["status"]["failureClass"]) == (
        "credentials",
        "credentials",
    )
    assert "serviceaccount nobody not found" in stored["status"]["message"]
    assert executor.executed == [] and h.cluster.token_bindings == {}


# --------------------------------------------------------------------------- sandboxed tools


def sandboxed(cluster: FakeCluster) -> Harness:
    settings = Settings()
    executor = SandboxExecutor(cluster, settings)
    return make_runtime(
        cluster,
        settings=settings,
        executors={ToolKind.SHELL: executor, ToolKind.CONTAINER: executor},
    )


def at_job_creation(cluster: FakeCluster) -> dict[str, Any]:
    """The Secrets as they are when the Job is created (the call's end deletes them)."""
    seen: dict[str, Any] = {}

    def hook(obj: dict[str, Any], **_: object) -> None:
        if obj["kind"] == "Job":
            seen["job"] = obj
            seen["secrets"] = {key: dict(data) for key, data in cluster.secrets.items()}

    cluster.hooks["create"] = hook
    return seen


async def test_a_token_for_a_container_tools_file_is_in_the_lease_secret_and_bound_to_it() -> None:
    cluster = FakeCluster()
    h = sandboxed(cluster)
    cluster.service_accounts.add((NAMESPACE, "deployer"))
    path = "/tooladapter/credentials/kube/token"
    h.publish(
        container_descriptor(
            credentials=[credential("kube", service_account="deployer", file=path)]
        )
    )
    cluster.grant(tools=["ct"], classes=["sandbox"])
    body = h.submit(invocation("ct-1", tool="ct", arguments={"command": "x"}))
    uid = body["metadata"]["uid"]
    names = LeaseNames.for_uid(uid)
    cluster.script_job(uid, finished_job(), outcome=pod_result())
    seen = at_job_creation(cluster)

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Observed", status
    token = "token-of-deployer"
    assert seen["secrets"][(NAMESPACE, names.secret)] == {"file-kube": b64(token)}
    assert cluster.token_bindings == {token: names.secret}
    (asked,) = cluster.calls_of("request_token")
    assert asked["bound_secret"] == names.secret and asked["store_key"] == "file-kube"
    volume = next(
        v for v in seen["job"]["spec"]["template"]["spec"]["volumes"] if v["name"] == "credentials"
    )
    assert volume["secret"]["secretName"] == names.secret
    assert volume["secret"]["items"] == [{"key": "file-kube", "path": "kube/token"}]
    (use,) = status["credentials"]
    assert (use["name"], use["source"], use["file"]) == ("kube", "serviceAccountToken", path)
    assert use["expiresAt"]
    assert token not in json.dumps(stored) and b64(token) not in json.dumps(stored)
    assert token not in json.dumps(seen["job"])


async def test_a_secret_file_reaches_the_lease_secret_byte_for_byte() -> None:
    """A file gets the Secret's bytes unchanged (binary, trailing newline and all); only
    values sent in headers are stripped."""
    cluster = FakeCluster()
    h = sandboxed(cluster)
    raw = b"\x00\xffkeytab\n"
    data = base64.b64encode(raw).decode()
    cluster.secrets[(NAMESPACE, "db")] = {"keytab": data}
    path = "/tooladapter/credentials/db.keytab"
    h.publish(container_descriptor(credentials=[credential("db", key="keytab", file=path)]))
    cluster.grant(tools=["ct"], classes=["sandbox"])
    body = h.submit(invocation("ct-1", tool="ct", arguments={"command": "x"}))
    uid = body["metadata"]["uid"]
    cluster.script_job(uid, finished_job(), outcome=pod_result())
    seen = at_job_creation(cluster)

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed", stored["status"]
    assert seen["secrets"][(NAMESPACE, LeaseNames.for_uid(uid).secret)] == {"file-db": data}
    assert cluster.calls_of("request_token") == []
    assert stored["status"]["credentials"] == [
        {"name": "db", "source": "secretKeyRef", "file": path}
    ]
    assert data not in json.dumps(stored) and data not in json.dumps(seen["job"])


async def test_an_injected_credential_of_a_shell_tool_goes_into_the_egress_grant_only() -> None:
    cluster = FakeCluster()
    h = sandboxed(cluster)
    h.rt.egress_peer = ProxyPeer(address="10.0.0.9", port=3128)
    cluster.secrets[(NAMESPACE, "api")] = {"token": b64(VALUE)}
    sandbox = {
        "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
        "egress": {"allow": ["api.example.test"]},
    }
    h.publish(
        shell_descriptor(
            sandbox=sandbox,
            credentials=[credential("api", hosts=["api.example.test"], methods=["GET"])],
        )
    )
    cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    uid = body["metadata"]["uid"]
    names = LeaseNames.for_uid(uid)
    cluster.script_job(uid, finished_job(), outcome=pod_result())
    seen = at_job_creation(cluster)

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed", stored["status"]
    secrets = seen["secrets"]
    # No file and no token: the lease has no Secret of its own, the pod no credential mount.
    assert (NAMESPACE, names.secret) not in secrets
    pod = seen["job"]["spec"]["template"]["spec"]
    assert not any(v["name"] == "credentials" for v in pod["volumes"])
    grant = secrets[(Settings().egress.namespace, names.egress)]
    assert unb64(grant["credential-0"]) == f"Bearer {VALUE}"
    assert unb64(grant["credential-0-raw"]) == VALUE
    document = json.loads(unb64(grant[GRANT_KEY]))
    assert document["credentials"] == [
        {
            "name": "api",
            "hosts": ["api.example.test"],
            "header": "Authorization",
            "key": "credential-0",
            "methods": ["GET"],
            "paths": None,
        }
    ]
    assert VALUE not in json.dumps(document)
    # The pod's own Secrets (its proxy URL) and the Job never hold the value.
    for (namespace, _name), data in secrets.items():
        if namespace == NAMESPACE and (namespace, _name) != (NAMESPACE, "api"):
            for encoded in data.values():
                assert VALUE not in unb64(encoded)
    assert VALUE not in json.dumps(seen["job"]) and b64(VALUE) not in json.dumps(seen["job"])
    assert stored["status"]["credentials"] == [
        {"name": "api", "source": "secretKeyRef", "hosts": ["api.example.test"]}
    ]
    for form in forms(VALUE):
        assert form not in json.dumps(stored)


# --------------------------------------------------------------------------- after a restart


async def test_after_a_restart_an_http_call_brokers_again_or_fails_having_sent_nothing() -> None:
    """Values live in the operator's memory only: a new process reads them again right
    before acting, and a Secret gone by then ends the call Failed (nothing was sent)."""
    for secret_left in (True, False):
        h, _first = http_harness()
        h.cluster.secrets[(NAMESPACE, "api-key")] = {"token": b64(VALUE)}
        h.publish(
            http_descriptor(
                "fetch",
                URL,
                credentials=[credential("api", secret="api-key", hosts=["api.example.test"])],
            )
        )
        h.cluster.grant(tools=["fetch"], classes=["read"])
        body = h.submit(invocation("f-1", tool="fetch"))
        stop_after_writing(h.cluster, "Brokered")
        await run_until_stopped(h, body)
        if not secret_left:
            del h.cluster.secrets[(NAMESPACE, "api-key")]

        executor = ScriptedExecutor()
        second = restart(
            h, settings=Settings(write_every_state=True), executors={ToolKind.HTTP: executor}
        )
        stored = await second.run(h.cluster.invocation("f-1"))

        status = stored["status"]
        if secret_left:
            assert status["state"] == "Observed", status
            (call,) = executor.executed
            assert [(c.name, c.value) for c in call.credentials] == [("api", VALUE)]
        else:
            assert (status["state"], status["failureClass"]) == ("Failed", "credentials"), status
            assert "secret api-key not found" in status["message"]
            assert executor.executed == []
        for form in forms(VALUE):
            assert form not in json.dumps(stored)
