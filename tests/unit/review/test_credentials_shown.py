"""What a reviewer reads of the credentials a gated call will carry: the descriptor's
declarations (names, sources, where they go), labelled as the descriptor's, from the
descriptor the call was validated against, never a value."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.fake_cluster import container_descriptor, descriptor, http_descriptor
from tooladapter.gateway.ui.web import templates
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.review import page as reviewpage
from tooladapter.review.carried import DECLARED_BY, Found, carried_view
from tooladapter.review.texts import pending_approvals

NAMESPACE = "team-a"

API_CREDENTIAL: dict[str, Any] = {
    "name": "api",
    "source": {"secretKeyRef": {"name": "api-creds", "key": "token"}},
    "inject": {"hosts": ["api.example.com"], "methods": ["POST"], "paths": ["/v1/"]},
}
BASIC_CREDENTIAL: dict[str, Any] = {
    "name": "mirror",
    "source": {"secretKeyRef": {"name": "mirror-creds", "key": "password"}},
    "inject": {"hosts": ["mirror.example.com"], "header": "X-Auth", "basicUsername": "bot"},
}
TOKEN_CREDENTIAL: dict[str, Any] = {
    "name": "kube",
    "source": {"serviceAccountToken": {"serviceAccountName": "builder", "audiences": ["ci"]}},
    "inject": {"file": "/tooladapter/credentials/token"},
}


def http_tool(*credentials: dict[str, Any]) -> dict[str, Any]:
    body = http_descriptor(
        "deploy", "https://api.example.com/v1/deploy", credentials=list(credentials)
    )
    body["spec"]["sideEffectClass"] = "external"
    return body


def digest_of(body: dict[str, Any]) -> str:
    return descriptor_digest(ToolDescriptorSpec.model_validate(body["spec"]).wire())


def waiting(
    body: dict[str, Any], *, name: str = "call-1", arguments: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec = body["spec"]
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {
            "tool": {"id": spec["toolId"], "version": spec["version"]},
            "arguments": arguments if arguments is not None else {"tag": "v1"},
            "caller": {"kind": "agent", "name": "agent-1"},
        },
        "status": {
            "state": "AwaitingApproval",
            "requestHash": "sha256:" + "1" * 64,
            "descriptorDigest": digest_of(body),
            "approvalRequestedAt": "2026-01-01T00:00:00Z",
        },
    }


def test_the_validated_descriptors_credentials_are_shown_with_where_they_go() -> None:
    body = http_tool(API_CREDENTIAL, BASIC_CREDENTIAL)
    view = carried_view(waiting(body), [body])
    assert view["declaredBy"] == DECLARED_BY == "descriptor"
    assert view["descriptor"] == Found.VALIDATED and view["known"] and view["note"] is None
    api, mirror = view["credentials"]
    assert api["name"] == "api"
    assert api["source"] == {"kind": "secretKeyRef", "secret": "api-creds", "key": "token"}
    assert api["where"] == {
        "hosts": ["api.example.com"],
        "header": "Authorization",
        "scheme": "Bearer",
        "methods": ["POST"],
        "paths": ["/v1/"],
    }
    assert api["text"] == (
        "api: Secret api-creds key token, as header Authorization (Bearer) on requests to "
        "api.example.com (POST; /v1/)"
    )
    assert mirror["where"]["basicUsername"] == "bot" and "scheme" not in mirror["where"]
    assert mirror["where"]["methods"] is None and mirror["where"]["paths"] is None
    assert "(Basic, user bot)" in mirror["text"] and "every method; every path" in mirror["text"]


def test_a_service_account_token_in_a_file_names_the_account_and_the_path() -> None:
    body = container_descriptor(
        "build",
        credentials=[TOKEN_CREDENTIAL],
        sandbox={
            "command": ["make"],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": []},
        },
    )
    (kube,) = carried_view(waiting(body), [body])["credentials"]
    assert kube["source"] == {
        "kind": "serviceAccountToken",
        "serviceAccount": "builder",
        "audiences": ["ci"],
    }
    assert kube["where"] == {"file": "/tooladapter/credentials/token"}
    assert kube["text"] == (
        "kube: a token of ServiceAccount builder (audiences ci), as the read-only file "
        "/tooladapter/credentials/token"
    )


def test_a_descriptor_declaring_none_is_known_to_carry_none() -> None:
    body = http_tool()
    view = carried_view(waiting(body), [body])
    assert view["known"] and view["credentials"] == [] and view["note"] is None


def test_a_changed_missing_or_unread_descriptor_shows_no_credentials_as_the_calls() -> None:
    body = http_tool(API_CREDENTIAL)
    call = waiting(body)
    changed = copy.deepcopy(body)
    changed["spec"]["credentials"][0]["inject"]["hosts"] = ["other.example.com"]
    changed["spec"]["http"]["allowedHosts"] = ["api.example.com", "other.example.com"]
    for descriptors, found in (
        ([changed], Found.CHANGED),
        ([], Found.MISSING),
        ([http_tool(API_CREDENTIAL) | {"spec": {"toolId": "other"}}], Found.MISSING),
        (None, Found.UNREAD),
    ):
        view = carried_view(call, descriptors)
        assert view["descriptor"] == found
        assert not view["known"] and view["credentials"] == [] and view["note"]
    # A call never validated (no digest) is not matched to any descriptor.
    unvalidated = waiting(body)
    del unvalidated["status"]["descriptorDigest"]
    assert carried_view(unvalidated, [body])["descriptor"] == Found.MISSING


def test_an_mcp_tool_names_the_server_whose_credentials_it_carries() -> None:
    body = descriptor(
        "search",
        kind="mcp",
        mcp={"server": "search-server", "tool": "search", "pinnedDigest": "sha256:" + "c" * 64},
    )
    view = carried_view(waiting(body), [body])
    assert view["known"] and view["mcpServer"] == "search-server"
    assert "McpServer search-server" in view["note"]


def test_pending_approvals_carry_the_view_by_namespace_and_arguments_stay_whole() -> None:
    body = http_tool(API_CREDENTIAL)
    # An agent's arguments may talk about credentials: they stay arguments, shown whole.
    posing = {"credentials": [{"name": "api", "inject": {"hosts": ["evil.example.net"]}}]}
    call = waiting(body, arguments=posing)
    (view,) = pending_approvals([call], descriptors={NAMESPACE: [body]})
    assert [c["name"] for c in view["carries"]["credentials"]] == ["api"]
    assert "evil.example.net" not in str(view["carries"])
    assert "evil.example.net" in view["shownArguments"]
    (unread,) = pending_approvals([call], descriptors={"team-b": [body]})
    assert unread["carries"]["descriptor"] == Found.UNREAD
    (page,) = reviewpage.pending_for_page([call], descriptors={NAMESPACE: [body]})
    assert page["carries"] == view["carries"]


def render(pending: list[dict[str, Any]]) -> str:
    return (
        templates()
        .get_template("approvals_live.html")
        .render(
            refused=[],
            pending=pending,
            decided=[],
            reviewable=set(),
            person=None,
            prefix="/ui",
            expiries=(),
            marked=None,
        )
    )


def test_the_page_shows_each_credential_labelled_as_the_descriptors() -> None:
    body = http_tool(API_CREDENTIAL, BASIC_CREDENTIAL)
    html = render(reviewpage.pending_for_page([waiting(body)], descriptors={NAMESPACE: [body]}))
    assert "declared by the descriptor, not the agent" in html
    assert 'data-declared-by="descriptor"' in html and 'data-descriptor="validated"' in html
    assert "Secret <code>api-creds</code>, key <code>token</code>" in html
    assert "header <code>Authorization</code> (Bearer)" in html
    assert "<code>api.example.com</code>; POST; paths <code>/v1/</code>" in html
    assert "Basic, user <code>bot</code>" in html and "every method; every path" in html


def test_the_page_says_when_the_credentials_are_unknown_or_none() -> None:
    body = http_tool(API_CREDENTIAL)
    html = render(reviewpage.pending_for_page([waiting(body)], descriptors={}))
    assert 'data-descriptor="unread"' in html and "could not be read" in html
    assert "api-creds" not in html
    bare = http_tool()
    html = render(reviewpage.pending_for_page([waiting(bare)], descriptors={NAMESPACE: [bare]}))
    assert "the descriptor declares no credentials" in html
