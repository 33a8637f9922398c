"""Least privilege as the API server sees it, with the RBAC of manifests/ as `make install`
applied it (the chart renders the same objects: tests/unit/packaging/test_chart.py): the egress
proxy's ServiceAccount reads Secrets only in the grants' namespace, never the reviewers'
page session key nor anything else in the operator's namespace; the operator lists no
Secret cluster-wide (what remains: `get`, `create` and `delete` by name, explained in
manifests/rbac/operator.yaml).

Each answer is a SubjectAccessReview as the ServiceAccount's user, asked by the admin: the
authorizer's own verdict, whether or not the object exists."""

from __future__ import annotations

import pytest
from kubernetes import client

from tooladapter.egress.core.lease import LABEL_EGRESS
from tooladapter.settings import EgressSettings

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(60)]

SYSTEM = "tooladapter-system"
GRANTS = EgressSettings().namespace
PROXY = f"system:serviceaccount:{SYSTEM}:tooladapter-egress-proxy"
OPERATOR = f"system:serviceaccount:{SYSTEM}:tooladapter-operator"
#: The page's session key as the operator creates it (`<prefix>-ui-session-key`; the chart's
#: earlier `tooladapter-ui-session`), and what else lives beside it: the receipt signing key,
#: S3 credentials, the gateway's TLS key, Helm's release records.
SESSION_KEY = "tooladapter-ui-session-key"
NEIGHBOURS = (
    SESSION_KEY,
    "tooladapter-ui-session",
    "tooladapter-receipt-signing",
    "s3-credentials",
    "tooladapter-gateway-tls",
    "sh.helm.release.v1.x.v1",
)


def allowed(
    api: client.ApiClient,
    user: str,
    verb: str,
    namespace: str | None,
    name: str | None = None,
    resource: str = "secrets",
) -> bool:
    attributes: dict[str, str] = {"verb": verb, "resource": resource, "group": ""}
    if namespace is not None:
        attributes["namespace"] = namespace
    if name is not None:
        attributes["name"] = name
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SYSTEM}"],
                "resourceAttributes": attributes,
            },
        }
    )
    return bool(review.status.allowed)


def test_the_grants_live_in_a_namespace_of_their_own() -> None:
    assert GRANTS == "tooladapter-egress"
    assert GRANTS != SYSTEM


def test_the_proxy_cannot_read_the_page_session_key(api: client.ApiClient) -> None:
    for name in NEIGHBOURS:
        assert not allowed(api, PROXY, "get", SYSTEM, name), name
    for verb in ("list", "watch"):
        assert not allowed(api, PROXY, verb, SYSTEM)
        assert not allowed(api, PROXY, verb, None), f"{verb} secrets cluster-wide"
        assert not allowed(api, PROXY, verb, "default")
    assert not allowed(api, PROXY, "get", "default", "anything")


def test_the_proxy_reads_its_grants_and_writes_only_its_records(api: client.ApiClient) -> None:
    for verb in ("get", "list", "watch"):
        assert allowed(api, PROXY, verb, GRANTS)
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed(api, PROXY, verb, GRANTS), verb
    assert allowed(api, PROXY, "create", GRANTS, resource="configmaps")
    assert not allowed(api, PROXY, "create", SYSTEM, resource="configmaps")


def test_the_grants_namespace_holds_only_grants(api: client.ApiClient) -> None:
    """What the proxy may read there is grants: every Secret in it is one (other tests'
    calls may be writing theirs meanwhile)."""
    secrets = client.CoreV1Api(api).list_namespaced_secret(GRANTS).items
    others = [
        s.metadata.name for s in secrets if (s.metadata.labels or {}).get(LABEL_EGRESS) != "true"
    ]
    assert not others


def test_the_operator_lists_no_secret_cluster_wide(api: client.ApiClient) -> None:
    for verb in ("list", "watch"):
        assert not allowed(api, OPERATOR, verb, None), f"{verb} secrets cluster-wide"
        assert not allowed(api, OPERATOR, verb, "default"), f"{verb} secrets in a tenant"
        assert not allowed(api, OPERATOR, verb, SYSTEM)
    # The reaper's listing: only the grants' namespace.
    assert allowed(api, OPERATOR, "list", GRANTS)
    assert not allowed(api, OPERATOR, "watch", GRANTS)
    # What remains, by name (descriptors name Secrets in every tenant namespace).
    for verb in ("get", "create", "delete"):
        assert allowed(api, OPERATOR, verb, "default", "a-named-secret"), verb
