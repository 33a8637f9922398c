"""Leader election on the real cluster: one Lease per served namespace set.

The operators here serve `lead-<SESSION>-*` (and `solo-<SESSION>-*`), scopes disjoint from
the session operator's `<SESSION>-*`, so the suite's own operator never sees these calls
and these operators never see the suite's.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, events_of, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, wait_for
from tooladapter.kube.leases import lease_name
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

LEASE_NAMESPACE = "tooladapter-system"
LEASE_SECONDS = 6
#: A standby polls every LEASE_SECONDS / 5; requests and kopf's start-up come on top.
MARGIN = 4
SCOPE = f"lead-{SESSION}"
OTHER_SCOPE = f"solo-{SESSION}"
DEPOSED_SCOPE = f"lost-{SESSION}"


def operator_for(workdir: Path, prefix: str) -> OperatorProcess:
    workdir.mkdir()
    return OperatorProcess(
        workdir,
        {
            "TOOLADAPTER_NAMESPACES": f"{prefix}-*",
            "TOOLADAPTER_LEASE_SECONDS": str(LEASE_SECONDS),
            # One ToolInvoked per call, counted: which replica wrote it, and only once.
            "TOOLADAPTER_EVENTS": "all",
        },
    )


def identity_of(op: OperatorProcess) -> str:
    """The holder identity an operator logged when it began to lead."""
    found = re.search(r"leading scope \S+ \[[^\]]*\] as (\S+)", op.log_text()[op.offset :])
    assert found, op.tail()
    return found.group(1)


def receipts_of(op: OperatorProcess, invocation: str) -> int:
    """How many receipts of `invocation` this operator wrote to its artifact store."""
    count = 0
    for path in op.artifacts.glob("sha256/*/*"):
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            doc = parse_receipt(path.read_bytes())
            if isinstance(doc, dict) and doc.get("invocationName") == invocation:
                count += 1
    return count


def lease_of(api: client.ApiClient, prefix: str) -> client.V1Lease | None:
    try:
        return client.CoordinationV1Api(api).read_namespaced_lease(
            lease_name([f"{prefix}-*"]), LEASE_NAMESPACE
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def call_once(agent: Agent, leader: OperatorProcess, others: list[OperatorProcess]) -> str:
    """A native call, Observed, with exactly one receipt and one ToolInvoked event, all
    written by `leader`."""
    name = agent.invoke("list-tools", {})
    status = status_of(agent.wait(name, timeout=60))
    assert status["state"] == "Observed", pretty(status)
    wait_for(
        lambda: "ToolInvoked" in events_of(agent.admin, agent.namespace, name),
        timeout=30,
        what=f"the ToolInvoked event of {name}",
    )
    assert events_of(agent.admin, agent.namespace, name).count("ToolInvoked") == 1
    assert receipts_of(leader, name) == 1
    assert all(receipts_of(op, name) == 0 for op in others)
    return name


@pytest.fixture
def processes() -> Iterator[list[OperatorProcess]]:
    started: list[OperatorProcess] = []
    yield started
    for op in started:
        op.stop()


@pytest.fixture
def lead_ns(api: client.ApiClient) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=SCOPE)
    yield namespace
    namespace.delete()
    for prefix in (SCOPE, OTHER_SCOPE):  # left behind only when a test failed midway
        with contextlib.suppress(client.ApiException):
            client.CoordinationV1Api(api).delete_namespaced_lease(
                lease_name([f"{prefix}-*"]), LEASE_NAMESPACE
            )


def test_one_leader_per_scope_a_standby_takes_over_and_other_scopes_never_wait(
    api: client.ApiClient,
    lead_ns: Namespace,
    processes: list[OperatorProcess],
    tmp_path: Path,
) -> None:
    first = operator_for(tmp_path / "first", SCOPE)
    processes.append(first)
    first.start()
    leader_id = identity_of(first)
    lease = lease_of(api, SCOPE)
    assert lease is not None and lease.spec.holder_identity == leader_id
    assert lease.spec.lease_duration_seconds == LEASE_SECONDS
    assert lease.metadata.annotations is not None
    assert lease.metadata.annotations["tooladapter.dev/namespaces"] == f"{SCOPE}-*"

    # A second operator for the same scope waits, and says so once.
    second = operator_for(tmp_path / "second", SCOPE)
    processes.append(second)
    second.start(until="standby: ", timeout=30)
    assert f"standby: {leader_id} leads scope " in second.log_text()

    # An operator for another scope starts at once, the first one's Lease notwithstanding.
    solo = operator_for(tmp_path / "solo", OTHER_SCOPE)
    processes.append(solo)
    solo.start(timeout=30)  # were it to wait for `first`, it would wait for ever
    assert not solo.says("standby:")
    assert lease_of(api, OTHER_SCOPE) is not None
    solo.stop()
    assert lease_of(api, OTHER_SCOPE) is None, "a clean stop releases the Lease"

    # A call in the scope is processed once, by the leader.
    descriptor(api, lead_ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent = Agent.create(api, lead_ns.name, "agent-1")
    agent.grant(["list-tools"], ["read"])
    call_once(agent, first, [second])
    assert not second.says("tooladapter started")
    assert second.log_text().count("standby: ") == 1, second.tail()

    # The leader crashes. The standby takes over once the Lease has expired, not before.
    first.kill()
    killed = time.monotonic()
    second.wait_log("leading scope ", timeout=LEASE_SECONDS + MARGIN)
    took_over = time.monotonic() - killed
    # The last renewal came at most one renew period (LEASE_SECONDS / 5) before the kill.
    assert took_over >= LEASE_SECONDS * 4 / 5 - 0.5, f"took over after {took_over:.1f}s"
    second.wait_log("tooladapter started", timeout=60)
    lease = lease_of(api, SCOPE)
    assert lease is not None and lease.spec.holder_identity == identity_of(second)
    assert (lease.spec.lease_transitions or 0) >= 1
    call_once(agent, second, [first])

    # A clean stop releases the Lease (deletes it, after the flows are cancelled), so a
    # standby leads at its next look. By expiry it could not before LEASE_SECONDS * 4 / 5:
    # the stopping leader renewed until it released.
    third = operator_for(tmp_path / "third", SCOPE)
    processes.append(third)
    third.start(until="standby: ", timeout=30)
    second.stop()
    assert second.says("released the leadership"), second.tail()
    third.wait_log("leading scope ", timeout=LEASE_SECONDS * 4 / 5 - 1.5)
    third.wait_log("tooladapter started", timeout=60)
    call_once(agent, third, [first, second])


def test_a_leader_that_finds_another_holder_in_its_lease_exits_at_once(
    api: client.ApiClient, processes: list[OperatorProcess], tmp_path: Path
) -> None:
    leader = operator_for(tmp_path / "deposed", DEPOSED_SCOPE)
    processes.append(leader)
    leader.start()
    coordination = client.CoordinationV1Api(api)
    name = lease_name([f"{DEPOSED_SCOPE}-*"])

    def usurp() -> bool | None:
        lease = coordination.read_namespaced_lease(name, LEASE_NAMESPACE)
        lease.spec.holder_identity = "someone-else"
        try:  # carries the resourceVersion read: the leader's renewals may win the race
            coordination.replace_namespaced_lease(name, LEASE_NAMESPACE, lease)
        except client.ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return True

    try:
        wait_for(usurp, timeout=30, what="the Lease taken over by someone else")
        usurped = time.monotonic()
        assert leader.proc is not None
        # Found at its next renewal (every LEASE_SECONDS / 5), then it exits at once.
        wait_for(
            lambda: leader.proc is not None and leader.proc.poll() is not None,
            timeout=LEASE_SECONDS / 5 + MARGIN,
            what="the deposed leader's exit",
        )
        assert time.monotonic() - usurped < LEASE_SECONDS * 2 / 3
        assert leader.proc.returncode == 75, leader.tail()
        assert leader.says("lost leadership of "), leader.tail()
        assert leader.says("is held by someone-else now")
    finally:
        with contextlib.suppress(client.ApiException):
            coordination.delete_namespaced_lease(name, LEASE_NAMESPACE)
