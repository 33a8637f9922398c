"""The names, labels and annotations tooladapter puts on the objects it creates.

Below every package that builds or reads those objects (the sandbox builders, the egress
lease, the kube calls, the proxy), so each reads them from one place.
"""

from __future__ import annotations

from dataclasses import dataclass

MANAGED_BY = "tooladapter"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INVOCATION_UID = "tooladapter.dev/invocation-uid"
ANNOTATION_INVOCATION = "tooladapter.dev/invocation"
ANNOTATION_ARGUMENTS = "tooladapter.dev/arguments"
ANNOTATION_LEASE = "tooladapter.dev/lease-id"
#: `namespace/name` of the invocation an object in another namespace belongs to (owner
#: references cannot cross namespaces): the egress grant in the proxy's namespace.
ANNOTATION_INVOCATION_REF = "tooladapter.dev/invocation-ref"


@dataclass(frozen=True)
class LeaseNames:
    """Deterministic names of a lease's objects, derived from the invocation uid only."""

    job: str
    network_policy: str
    secret: str
    #: The proxy URL with the lease's token (tenant namespace).
    proxy_secret: str
    #: The grant and the connection records (the proxy's namespace).
    egress: str

    @classmethod
    def for_uid(cls, uid: str) -> LeaseNames:
        # A uid is 36 characters of [0-9a-f-]: always a valid, unique object name part.
        return cls(
            job=f"ta-{uid}",
            network_policy=f"ta-{uid}",
            secret=f"ta-cred-{uid}",
            proxy_secret=f"ta-proxy-{uid}",
            egress=f"ta-egress-{uid}",
        )
