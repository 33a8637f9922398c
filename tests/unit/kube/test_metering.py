"""The operator's own API requests, counted by verb and resource (never an object's name)."""

from __future__ import annotations

import pytest

from tooladapter.kube.metering import request_kind

BASE = "https://10.0.0.1:6443"


@pytest.mark.parametrize(
    ("method", "path", "query", "kind"),
    [
        (
            "PATCH",
            "/apis/tooladapter.dev/v1alpha1/namespaces/t/toolinvocations/c-1/status",
            None,
            ("PATCH", "toolinvocations/status"),
        ),
        (
            "GET",
            "/apis/tooladapter.dev/v1alpha1/namespaces/t/toolinvocations/c-1",
            None,
            ("GET", "toolinvocations"),
        ),
        (
            "GET",
            "/apis/tooladapter.dev/v1alpha1/namespaces/t/toolinvocations",
            [("limit", 100)],
            ("LIST", "toolinvocations"),
        ),
        (
            "GET",
            "/apis/tooladapter.dev/v1alpha1/toolinvocations",
            [("watch", True)],
            ("WATCH", "toolinvocations"),
        ),
        ("GET", "/api/v1/namespaces/t/configmaps/bench-data", None, ("GET", "configmaps")),
        ("GET", "/api/v1/namespaces/t", None, ("GET", "namespaces")),
        ("PUT", "/api/v1/namespaces/t/finalize", None, ("PUT", "namespaces/finalize")),
        ("GET", "/api/v1/namespaces", [("watch", "true")], ("WATCH", "namespaces")),
        (
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            None,
            ("POST", "subjectaccessreviews"),
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/t/leases/key-abc",
            None,
            ("PUT", "leases"),
        ),
        ("POST", "/api/v1/namespaces/t/events", None, ("POST", "events")),
        ("GET", "/version", None, ("GET", "other")),
    ],
)
def test_a_request_is_counted_by_verb_and_resource_without_its_object_name(
    method: str, path: str, query: list[tuple[str, object]] | None, kind: tuple[str, str]
) -> None:
    assert request_kind(method, BASE + path, query) == kind
