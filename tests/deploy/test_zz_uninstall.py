"""`helm uninstall` (`make undeploy`) leaves nothing of the release but the CRDs and the
receipts' claim, which is kept on purpose (artifacts.file.keepOnUninstall). Runs last."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.deploy.release import Release, make
from tooladapter.devtools import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

CRDS = ["tooldescriptors", "toolinvocations", "toolapprovals", "toolpolicies", "mcpservers"]


def _left(api: client.ApiClient, release: Release) -> list[str]:
    """Every object of the release still in the cluster (by the instance label)."""
    selector = f"app.kubernetes.io/instance={release.name}"
    ns = release.namespace
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    policy = client.PolicyV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    listings: dict[str, Any] = {
        "Deployment": apps.list_namespaced_deployment(ns, label_selector=selector),
        "ReplicaSet": apps.list_namespaced_replica_set(ns, label_selector=selector),
        "Pod": core.list_namespaced_pod(ns, label_selector=selector),
        "Service": core.list_namespaced_service(ns, label_selector=selector),
        "ServiceAccount": core.list_namespaced_service_account(ns, label_selector=selector),
        "Secret": core.list_namespaced_secret(ns, label_selector=selector),
        "ConfigMap": core.list_namespaced_config_map(ns, label_selector=selector),
        "Role": rbac.list_namespaced_role(ns, label_selector=selector),
        "RoleBinding": rbac.list_namespaced_role_binding(ns, label_selector=selector),
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget(
            ns, label_selector=selector
        ),
        "ClusterRole": rbac.list_cluster_role(label_selector=selector),
        "ClusterRoleBinding": rbac.list_cluster_role_binding(label_selector=selector),
        "ValidatingAdmissionPolicy": admission.list_validating_admission_policy(
            label_selector=selector
        ),
        "ValidatingAdmissionPolicyBinding": admission.list_validating_admission_policy_binding(
            label_selector=selector
        ),
        # Helm's own record of the release.
        "release Secret": core.list_namespaced_secret(
            ns, label_selector=f"name={release.name},owner=helm"
        ),
        # The leadership Lease: the last leader's clean stop deletes it.
        "Lease": client.CoordinationV1Api(api).list_namespaced_lease(
            ns, label_selector="app.kubernetes.io/managed-by=tooladapter"
        ),
    }
    return [f"{kind} {o.metadata.name}" for kind, items in listings.items() for o in items.items]


def test_uninstall_leaves_only_the_crds_and_the_kept_receipts_claim(
    api: client.ApiClient, release: Release
) -> None:
    values = release.values()
    claim = f"{values['prefix']}-artifacts"
    # The certificate the chart made once is kept too, so a reinstall serves the same one
    # (clients trust its CA): it goes only when an admin deletes it.
    tls = f"{values['prefix']}-gateway-tls"
    assert _left(api, release), "the release is installed before the uninstall"

    make("undeploy")

    def left() -> list[str]:
        return [o for o in _left(api, release) if o != f"Secret {tls}"]

    try:
        wait_for(lambda: not left(), timeout=120, what="the release gone", interval=1)
    except AssertionError:
        raise AssertionError(f"left behind: {left()}") from None
    core = client.CoreV1Api(api)
    kept = core.read_namespaced_persistent_volume_claim(claim, release.namespace)
    assert kept.metadata.annotations is not None
    assert kept.metadata.annotations["helm.sh/resource-policy"] == "keep"
    kept_tls = core.read_namespaced_secret(tls, release.namespace)
    assert kept_tls.metadata.annotations is not None
    assert kept_tls.metadata.annotations["helm.sh/resource-policy"] == "keep"
    core.delete_namespaced_secret(tls, release.namespace)
    extensions = client.ApiextensionsV1Api(api)
    for plural in CRDS:
        assert extensions.read_custom_resource_definition(f"{plural}.tooladapter.dev")
    # What the README tells an admin to do with the receipts once they are not needed.
    core.delete_namespaced_persistent_volume_claim(claim, release.namespace)
