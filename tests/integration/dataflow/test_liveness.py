"""A scope store the API server refuses never holds a call's end (issue 42), on the real
cluster: a ResourceQuota allows no more ConfigMaps in the namespace, so the labels of the
run's reads cannot be written; the reads end anyway, their labels pending, the send still
waits for an approval, and once the quota allows it the operator writes the labels."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.integration.dataflow.tools import publish_tools, read_then_fetch
from tests.integration.objects import Agent, get, pretty, status_of
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, wait_for
from tooladapter.enums import ScopeKind
from tooladapter.pipeline import dataflow as rule

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

QUOTA = "no-more-configmaps"


def quota_allowing(api: client.ApiClient, namespace: str, count: int) -> None:
    """At most `count` ConfigMaps in the namespace, once the quota controller counted them
    (before that, the quota admits nothing to compare with)."""
    core = client.CoreV1Api(api)
    body: dict[str, Any] = {"spec": {"hard": {"count/configmaps": str(count)}}}
    try:
        core.read_namespaced_resource_quota(QUOTA, namespace)
        core.patch_namespaced_resource_quota(QUOTA, namespace, body)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        core.create_namespaced_resource_quota(namespace, {"metadata": {"name": QUOTA}, **body})  # type: ignore[arg-type]  # the client sends a dict body as is

    def counted() -> bool:
        status = core.read_namespaced_resource_quota(QUOTA, namespace).status
        hard = (status.hard or {}) if status is not None else {}
        used = (status.used or {}) if status is not None else {}
        return hard.get("count/configmaps") == str(count) and "count/configmaps" in used

    wait_for(counted, timeout=120, what=f"quota {QUOTA} counted by the quota controller")


def test_a_refused_label_write_never_holds_the_end_and_lands_once_allowed(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    present = len(client.CoreV1Api(api).list_namespaced_config_map(ns.name).items)
    quota_allowing(api, ns.name, present)  # no store can be made

    read, fetch = read_then_fetch(agent, "run-a")  # both end Observed, not stuck

    for name in (read, fetch):
        flow = status_of(agent.wait(name))["dataFlow"]
        assert flow.get("pending") is True, pretty(agent.wait(name))
    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    waiting = status_of(
        agent.wait(send, states={"AwaitingApproval", "Observed", "Denied", "Failed"})
    )
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    assert read in waiting["dataFlow"]["gated"] and fetch in waiting["dataFlow"]["gated"]
    assert sink.total == 0

    quota_allowing(api, ns.name, present + 10)

    def stored() -> bool:
        flows = [
            (get(api, ns.name, "toolinvocations", n).get("status") or {}).get("dataFlow") or {}
            for n in (read, fetch)
        ]
        return not any(f.get("pending") for f in flows)

    wait_for(stored, timeout=180, what="the pending labels written and their flags cleared")
    store = rule.Scope(ScopeKind.RUN, ns.name, agent.user, "run-a").store_name
    data = client.CoreV1Api(api).read_namespaced_config_map(store, ns.name).data
    assert set(data or {}) == {f"private.{read}", f"untrusted.{fetch}"}, data
