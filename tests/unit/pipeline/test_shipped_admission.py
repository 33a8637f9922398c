"""The admission policies compared with what was shipped: what counts as missing or changed,
and which calls the guard refuses (now, inside a gap, before a recreated object)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta

from tests.unit.fake_cluster import shipped_admission
from tooladapter.enums import AdmissionFault, AdmissionKind
from tooladapter.pipeline.validation.shipped import (
    CLOCK_SLACK,
    AdmissionGuard,
    Key,
    Observed,
    Problem,
    compare,
    deployed_name,
    unreadable,
)

CALLER_BINDING: Key = (AdmissionKind.BINDING, "tooladapter-invocation-caller")
CALLER_POLICY: Key = (AdmissionKind.POLICY, "tooladapter-invocation-caller")
LONG_AGO = datetime(2020, 1, 1, tzinfo=UTC)


def as_stored() -> dict[Key, Observed]:
    """The shipped objects as the API server stores them (its defaults filled in)."""
    out: dict[Key, Observed] = {}
    for key, obj in shipped_admission().items():
        spec = copy.deepcopy(obj["spec"])
        if key[0] is AdmissionKind.POLICY:
            match = spec["matchConstraints"]
            match.update(matchPolicy="Equivalent", namespaceSelector={}, objectSelector={})
            for rule in match["resourceRules"]:
                rule["scope"] = "*"
        out[key] = Observed(spec=spec, created=LONG_AGO)
    return out


def test_the_shipped_objects_as_stored_with_the_api_servers_defaults_are_intact() -> None:
    assert len(as_stored()) == 22
    assert compare(as_stored()) == ()


def test_a_missing_binding_is_named_missing() -> None:
    observed = as_stored()
    del observed[CALLER_BINDING]
    assert compare(observed) == (
        Problem(AdmissionKind.BINDING, "tooladapter-invocation-caller", AdmissionFault.MISSING),
    )


def test_a_binding_set_to_warn_or_a_policy_with_an_added_exemption_is_changed() -> None:
    observed = as_stored()
    binding = copy.deepcopy(dict(observed[CALLER_BINDING].spec))
    binding["validationActions"] = ["Warn"]
    policy = copy.deepcopy(dict(observed[CALLER_POLICY].spec))
    policy["matchConditions"] = [{"name": "never", "expression": "false"}]
    observed[CALLER_BINDING] = Observed(binding, LONG_AGO)
    observed[CALLER_POLICY] = Observed(policy, LONG_AGO)
    assert {(p.name, p.kind, p.fault) for p in compare(observed)} == {
        ("tooladapter-invocation-caller", AdmissionKind.BINDING, AdmissionFault.CHANGED),
        ("tooladapter-invocation-caller", AdmissionKind.POLICY, AdmissionFault.CHANGED),
    }


def test_another_release_prefix_and_namespace_verify_their_own_objects() -> None:
    """The chart's `prefix` renames objects and policyName; the metadata policy exempts the
    release's own operator: the same digests once the release's names are put back."""
    user = "system:serviceaccount:tooladapter-system:tooladapter-operator"
    other = "system:serviceaccount:elsewhere:second-operator"
    observed: dict[Key, Observed] = {}
    for (kind, name), seen in as_stored().items():
        spec = copy.deepcopy(dict(seen.spec))
        if kind is AdmissionKind.BINDING:
            spec["policyName"] = deployed_name(spec["policyName"], "second")
        renamed = json.loads(json.dumps(spec).replace(user, other))
        observed[(kind, deployed_name(name, "second"))] = Observed(renamed, LONG_AGO)
    assert compare(observed, prefix="second", namespace="elsewhere") == ()
    # The first release's objects do not stand in for the second's.
    assert len(compare(as_stored(), prefix="second", namespace="elsewhere")) == 22


def test_a_guard_never_compared_refuses_every_call() -> None:
    assert AdmissionGuard().refusal(datetime.now(UTC)) is not None


def test_a_call_created_inside_a_gap_is_refused_after_it_closed_and_a_later_one_runs() -> None:
    guard = AdmissionGuard()
    stored = as_stored()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    guard.observe((), at=t0, observed=stored)
    assert guard.refusal(t0 + timedelta(seconds=1)) is None
    broken = stored.copy()
    del broken[CALLER_BINDING]
    guard.observe(compare(broken), at=t0 + timedelta(minutes=1), observed=broken)
    during = t0 + timedelta(minutes=2)
    refusal = guard.refusal(during)
    assert refusal is not None and "tooladapter-invocation-caller is missing" in refusal
    restored = dict(broken)
    restored[CALLER_BINDING] = Observed(stored[CALLER_BINDING].spec, t0 + timedelta(minutes=3))
    guard.observe(compare(restored), at=t0 + timedelta(minutes=3), observed=restored)
    refusal = guard.refusal(during)
    assert refusal is not None and "while ValidatingAdmissionPolicyBinding" in refusal
    # Just before the break was seen (the watch's delay) counts as inside it.
    assert guard.refusal(t0 + timedelta(minutes=1) - CLOCK_SLACK / 2) is not None
    assert guard.refusal(t0 + timedelta(minutes=3) + 2 * CLOCK_SLACK) is None
    # Before the gap too: the recreated binding was absent for an unknown while before it.
    assert guard.refusal(t0 + timedelta(seconds=30)) is not None


def test_a_call_created_before_a_spec_was_changed_and_changed_back_runs() -> None:
    guard = AdmissionGuard()
    stored = as_stored()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    guard.observe((), at=t0, observed=stored)
    guard.observe((), at=t0 + timedelta(seconds=50), observed=stored)  # a re-list
    changed = dict(stored)
    changed[CALLER_BINDING] = Observed({"policyName": "tooladapter-invocation-caller"}, LONG_AGO)
    guard.observe(compare(changed), at=t0 + timedelta(minutes=1), observed=changed)
    guard.observe((), at=t0 + timedelta(minutes=2), observed=stored)
    assert guard.refusal(t0 + timedelta(seconds=30)) is None
    refusal = guard.refusal(t0 + timedelta(seconds=90))
    assert refusal is not None and "tooladapter-invocation-caller is changed" in refusal


def test_a_gap_begins_at_the_last_sighting_of_everything_intact_not_at_its_own() -> None:
    """Once broke: a gap began when the operator saw the break (less `CLOCK_SLACK`), so with
    the watch slow or stalled until the next re-list, a call created after the caller
    binding was set to Warn (an edit: no new creationTimestamp) and before the operator saw
    it was taken up after the edit was undone, and ran as whoever it claimed to be."""
    guard = AdmissionGuard()
    stored = as_stored()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    guard.observe((), at=t0, observed=stored)
    warned = dict(stored)
    binding = copy.deepcopy(dict(stored[CALLER_BINDING].spec))
    binding["validationActions"] = ["Warn"]
    warned[CALLER_BINDING] = Observed(binding, LONG_AGO)
    # Edited at t0+5s; the watch stalled, the re-list saw it at t0+60s; undone at t0+90s.
    guard.observe(compare(warned), at=t0 + timedelta(seconds=60), observed=warned)
    guard.observe((), at=t0 + timedelta(seconds=90), observed=stored)
    forged = t0 + timedelta(seconds=10)
    refusal = guard.refusal(forged)
    assert refusal is not None and "tooladapter-invocation-caller is changed" in refusal
    assert guard.refusal(t0 + timedelta(seconds=90) + 2 * CLOCK_SLACK) is None


def test_a_first_comparison_that_finds_a_break_covers_everything_before_it() -> None:
    """Never having seen everything intact, the operator knows no beginning of the gap: a
    call created before it started (while an edited binding vouched for nothing) stays
    refused once the binding is as shipped again."""
    guard = AdmissionGuard()
    stored = as_stored()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    warned = dict(stored)
    warned[CALLER_BINDING] = Observed({"policyName": "tooladapter-invocation-caller"}, LONG_AGO)
    guard.observe(compare(warned), at=t0, observed=warned)
    guard.observe((), at=t0 + timedelta(minutes=1), observed=stored)
    refusal = guard.refusal(t0 - timedelta(days=3))
    assert refusal is not None and "since before the operator first verified them" in refusal
    assert guard.refusal(t0 + timedelta(minutes=2)) is None


def test_a_restarted_operator_still_refuses_calls_older_than_a_recreated_binding() -> None:
    """The gaps are in memory; a recreated binding's creationTimestamp says it was absent
    before, so a call created earlier is refused by a fresh process too."""
    stored = as_stored()
    recreated = datetime(2030, 1, 1, tzinfo=UTC)
    stored[CALLER_BINDING] = Observed(stored[CALLER_BINDING].spec, recreated)
    guard = AdmissionGuard()
    guard.observe(compare(stored), at=recreated + timedelta(hours=1), observed=stored)
    refusal = guard.refusal(recreated - timedelta(seconds=5))
    assert refusal is not None and "tooladapter-invocation-caller" in refusal
    assert guard.refusal(recreated + timedelta(seconds=1)) is None


def test_unreadable_policies_are_a_gap_too() -> None:
    guard = AdmissionGuard()
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    guard.observe((), at=t0, observed=as_stored())
    guard.observe(unreadable("tooladapter"), at=t0 + timedelta(minutes=1), observed={})
    refusal = guard.refusal(t0 + timedelta(minutes=1))
    assert refusal is not None and "unreadable" in refusal
