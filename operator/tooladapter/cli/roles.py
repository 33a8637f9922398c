"""Which of the people's ClusterRoles (manifests/rbac/roles.yaml) grants what a 403 says is
missing, so a refusal names the role to bind instead of leaving the reader to find it.

Pure: the API server's message in, a hint out. `tests/unit/cli/test_roles.py` checks the
table against roles.yaml, so a role that changes cannot leave a wrong hint behind.
"""

from __future__ import annotations

import re
from typing import Final

from tooladapter.review.shown import visible

#: (resource, verb) -> the people's roles that grant it, narrowest first, with who holds it.
ROLES: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("toolinvocations", "create"): ("tooladapter-requester",),
    ("toolinvocations", "get"): (
        "tooladapter-requester",
        "tooladapter-reviewer",
        "tooladapter-operations",
        "tooladapter-observer",
    ),
    ("toolinvocations", "patch"): ("tooladapter-requester", "tooladapter-operations"),
    ("toolinvocations/status", "patch"): ("tooladapter-operations",),
    ("toolinvocations/status", "update"): ("tooladapter-operations",),
    ("toolinvocations/interrupt", "update"): ("tooladapter-operations",),
    ("toolapprovals", "create"): ("tooladapter-reviewer",),
    ("toolapprovals", "get"): (
        "tooladapter-reviewer",
        "tooladapter-operations",
        "tooladapter-observer",
    ),
    ("tooldescriptors", "get"): (
        "tooladapter-requester",
        "tooladapter-reviewer",
        "tooladapter-operations",
        "tooladapter-observer",
    ),
    ("tooldescriptors", "create"): ("tooladapter-workspace-admin",),
    ("toolpolicies", "get"): (
        "tooladapter-reviewer",
        "tooladapter-operations",
        "tooladapter-observer",
    ),
    ("toolpolicies", "create"): ("tooladapter-workspace-admin",),
    ("mcpservers", "create"): ("tooladapter-workspace-admin",),
    ("mcpservers/activation", "update"): ("tooladapter-platform-admin",),
}

#: The role a command's user is expected to hold: preferred when it grants what is missing.
COMMAND_ROLES: Final[dict[str, str]] = {
    "tools": "tooladapter-requester",
    "describe": "tooladapter-requester",
    "invoke": "tooladapter-requester",
    "dry-run": "tooladapter-requester",
    "interrupt": "tooladapter-requester",
    "receipts": "tooladapter-requester",
    "result": "tooladapter-requester",
    "approvals": "tooladapter-reviewer",
    "approve": "tooladapter-reviewer",
    "reject": "tooladapter-reviewer",
    "confirm": "tooladapter-operations",
}

#: Reading verbs share one row: whoever may get may list and watch.
_READS: Final = {"list": "get", "watch": "get"}

_FORBIDDEN = re.compile(
    r'User "(?P<user>[^"]+)" cannot (?P<verb>[a-z]+) resource "(?P<resource>[^"]+)"'
    r' in API group "tooladapter\.dev"(?: in the namespace "(?P<namespace>[^"]+)")?'
)
_SERVICE_ACCOUNT = re.compile(r"system:serviceaccount:(?P<ns>[^:]+):(?P<name>[^:]+)")


def roles_for(resource: str, verb: str) -> tuple[str, ...]:
    """The people's roles that grant `verb` on `resource` (narrowest first), or none."""
    return ROLES.get((resource, _READS.get(verb, verb)), ())


def hint(message: str, command: str | None = None) -> str | None:
    """For an API server's 403 message about a tooladapter.dev resource: which ClusterRole
    to bind, to whom and where, as the command an admin runs (the role of the CLI `command`
    that was refused first, when it grants what is missing). None for any other message."""
    found = _FORBIDDEN.search(message)
    if found is None:
        return None
    roles = roles_for(found["resource"], found["verb"])
    if not roles:
        return None
    preferred = COMMAND_ROLES.get(command or "")
    if preferred in roles:
        roles = (preferred, *(r for r in roles if r != preferred))
    user, namespace = found["user"], found["namespace"]
    account = _SERVICE_ACCOUNT.fullmatch(user)
    subject = f"--serviceaccount={account['ns']}:{account['name']}" if account else f"--user={user}"
    short = account["name"] if account else re.sub(r"[^a-z0-9-]", "-", user.lower())[:40]
    role = roles[0]
    where = f"-n {namespace} " if namespace else ""
    binding = f"{short}-{role.removeprefix('tooladapter-')}"
    command = (
        f"kubectl create rolebinding {where}{binding} --clusterrole={role} {subject}"
        if namespace
        else f"kubectl create clusterrolebinding {binding} --clusterrole={role} {subject}"
    )
    others = f" (or {', '.join(roles[1:])})" if len(roles) > 1 else ""
    return visible(
        f"{found['verb']} on {found['resource']} needs the ClusterRole {role}{others}; "
        f"an admin binds it with: {command}"
    )
