"""The gateway's dry runs (REST `dry-run`, MCP `_meta` dryRun) read a data-flow scope's
store as the operator's `spec.dryRun` does: with the labels whose write is still pending,
which the real call's gate counts as stored."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.enums import DataLabel, ScopeKind
from tooladapter.gateway.context import Deps
from tooladapter.gateway.previews import GatewayLookups
from tooladapter.kube import dataflow as kdataflow
from tooladapter.pipeline import dataflow as rule

NAMESPACE = "team-a"
AT = "2099-01-01T00:00:00Z"


def pending_read() -> rule.LabelWrite:
    return rule.LabelWrite(
        namespace=NAMESPACE,
        invocation="read-1",
        uid="uid-1",
        caller="agent",
        run_id="run-a",
        attempt_id="",
        tool="crm",
        at=AT,
        labels=(DataLabel.PRIVATE,),
    )


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """The stores of NAMESPACE as the operator's client reads them, by ConfigMap name."""
    stores: dict[str, dict[str, str]] = {}

    async def read_config_map(kube: Any, *, namespace: str, name: str) -> dict[str, str] | None:
        return stores.get(name) if namespace == NAMESPACE else None

    monkeypatch.setattr(kdataflow, "read_config_map", read_config_map)
    return stores


async def test_a_scope_store_read_by_a_dry_run_holds_the_pending_labels_too(
    stored: dict[str, dict[str, str]],
) -> None:
    # Only `kube` (the stub above reads nothing through it) and `pending_labels` are read.
    deps = Deps(reviews=None, pool=None, store=None, settings=None, kube=None)  # type: ignore[arg-type]
    lookups = GatewayLookups(deps, caller=None, descriptors=[])  # type: ignore[arg-type]  # not read here
    run = rule.Scope(ScopeKind.RUN, NAMESPACE, "agent", "run-a")
    untrusted = rule.entry_key(DataLabel.UNTRUSTED, "fetch-2")
    stored[run.store_name] = {untrusted: rule.entry_value(tool="web", at=AT)}

    # Nothing pending: the store as stored.
    assert await lookups.scope_store(NAMESPACE, run.store_name) == stored[run.store_name]

    deps.pending_labels.add(pending_read())
    held = await lookups.scope_store(NAMESPACE, run.store_name)
    assert held is not None
    assert set(held) == {untrusted, rule.entry_key(DataLabel.PRIVATE, "read-1")}
    # A store nothing is pending for, in this namespace or another, reads as stored.
    other = rule.Scope(ScopeKind.RUN, NAMESPACE, "agent", "run-b")
    assert await lookups.scope_store(NAMESPACE, other.store_name) is None
    assert await lookups.scope_store("team-b", run.store_name) is None
