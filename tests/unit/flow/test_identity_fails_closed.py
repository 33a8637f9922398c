"""Identity fails closed: while an admission policy or binding that vouches for
`spec.caller` is missing or changed, no call passes validation (Denied at `validation`,
`admission-missing`, naming it); a call created during such a gap stays refused after the
policies return; new calls run again. Against the fake cluster's admission objects, which
start as manifests/admission/ ships them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.unit.fake_cluster import Harness, ScriptedExecutor, descriptor, invocation
from tooladapter import identity
from tooladapter.enums import AdmissionKind, FailureClass, InvocationState, ToolKind
from tooladapter.kube.errors import Forbidden
from tooladapter.pipeline.validation.shipped import CLOCK_SLACK, AdmissionGuard, Key
from tooladapter.timeutil import to_iso

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

BINDING: Key = (AdmissionKind.BINDING, "tooladapter-invocation-caller")
POLICY: Key = (AdmissionKind.POLICY, "tooladapter-invocation-caller")


def masters_call(name: str, **extra: Any) -> dict:
    """An agent claiming to be a cluster admin (the caller binding would have refused it)."""
    body = invocation(name, caller="system:admin", **extra)
    body["spec"]["caller"]["groups"] = ["system:masters"]
    return body


def ready(h: Harness) -> None:
    h.publish(descriptor("lister"))
    h.cluster.grant("system:admin", tools=["lister"], classes=["read"])


async def verify(h: Harness) -> None:
    await identity.verify(h.cluster, h.rt.admission, h.rt.settings.admission)


def intact(name: str) -> float | None:
    return REGISTRY.get_sample_value(
        "tooladapter_admission_intact", {"kind": AdmissionKind.BINDING.value, "name": name}
    )


def assert_refused(stored: dict, naming: str) -> None:
    status = stored["status"]
    assert status["state"] == InvocationState.DENIED
    assert status["failureClass"] == FailureClass.ADMISSION_MISSING
    denied = [s for s in status["stages"] if s["outcome"] == "denied"]
    assert [s["stage"] for s in denied] == ["validation"]
    assert naming in status["message"]


async def test_a_missing_caller_binding_denies_every_call_at_validation(h: Harness) -> None:
    ready(h)
    del h.cluster.admission[BINDING]
    await verify(h)
    assert intact("tooladapter-invocation-caller") == 0
    stored = await h.run(h.submit(masters_call("as-admin")))
    assert_refused(
        stored, "ValidatingAdmissionPolicyBinding tooladapter-invocation-caller is missing"
    )
    native = h.executors[ToolKind.NATIVE]
    assert isinstance(native, ScriptedExecutor) and native.executed == []


async def test_a_changed_policy_denies_and_names_it(h: Harness) -> None:
    ready(h)
    changed = copy.deepcopy(h.cluster.admission[POLICY])
    changed["spec"]["matchConditions"] = [{"name": "agents-exempt", "expression": "false"}]
    h.cluster.admission[POLICY] = changed
    await verify(h)
    stored = await h.run(h.submit(masters_call("as-admin")))
    assert_refused(stored, "ValidatingAdmissionPolicy tooladapter-invocation-caller is changed")


async def test_policies_that_cannot_be_read_deny(h: Harness) -> None:
    ready(h)
    h.cluster.fail_next["admission_objects"] = Forbidden("forbidden")
    await verify(h)
    stored = await h.run(h.submit(masters_call("as-admin")))
    assert_refused(stored, "is unreadable")


async def test_an_operator_that_has_not_verified_yet_runs_nothing(h: Harness) -> None:
    ready(h)
    h.rt.admission = AdmissionGuard()
    stored = await h.run(h.submit(masters_call("as-admin")))
    assert_refused(stored, "not yet verified")


async def test_restored_lets_new_calls_run_and_a_call_made_in_the_gap_stays_denied(
    h: Harness,
) -> None:
    ready(h)
    shipped = h.cluster.admission.pop(BINDING)
    await verify(h)
    during_gap = h.submit(masters_call("made-in-gap"))  # created now; taken up later
    h.cluster.recreate_admission(BINDING, shipped)
    await verify(h)
    assert intact("tooladapter-invocation-caller") == 1
    stored = await h.run(during_gap)
    assert_refused(stored, "ValidatingAdmissionPolicyBinding tooladapter-invocation-caller")
    # A call created after the gap closed (beyond the clock slack) runs.
    later = masters_call("after-gap")
    later["metadata"]["creationTimestamp"] = to_iso(datetime.now(UTC) + 2 * CLOCK_SLACK)
    stored = await h.run(h.submit(later))
    assert stored["status"]["state"] == InvocationState.OBSERVED


async def test_an_unverified_caller_claims_no_idempotency_key(h: Harness) -> None:
    """The claim is keyed by the caller: a forged one must not take a real caller's key
    (its later call would end as a duplicate of the forgery)."""
    ready(h)
    del h.cluster.admission[BINDING]
    await verify(h)
    stored = await h.run(h.submit(masters_call("as-admin", idempotencyKey="k-1")))
    assert_refused(stored, "tooladapter-invocation-caller")
    assert h.cluster.calls_of("claim_idempotency_key") == []
