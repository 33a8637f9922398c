"""Long-lived sandboxes: an attempt's workspace and the warm pools."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class WarmSettings(FromEnv):
    """Workspaces (`sandbox.workspace: attempt`) and warm pools (`executors.warm`)."""

    #: An attempt's workspace (`sandbox.workspace: attempt`) is released after this long
    #: without a call (its pod and its volume are deleted).
    workspace_idle_seconds: int = setting(
        "TOOLADAPTER_WORKSPACE_IDLE_SECONDS", env.at_least(1), 1800
    )
    #: Size of an attempt's workspace volume (also its pod's ephemeral-storage request and
    #: limit, so a namespace's ResourceQuota bounds the workspaces it holds).
    workspace_size: str = setting("TOOLADAPTER_WORKSPACE_SIZE", env.quantity, "1Gi")
    #: Workspaces a namespace may hold at once: the first call of one more attempt fails
    #: (nothing started) until one is released, so an agent inventing attemptIds cannot
    #: fill the nodes other tenants share (a ResourceQuota bounds them further).
    workspaces_per_namespace: int = setting(
        "TOOLADAPTER_WORKSPACES_PER_NAMESPACE", env.at_least(1), 16
    )
    #: Warm pools are on by default, sized from demand (`sandbox.pool_sizing`): per namespace
    #: and sandbox profile (image, RuntimeClass, resources) a pool starts one pod when a
    #: descriptor of that profile becomes active in the namespace, grows with its recent
    #: calls (the most that ran at once in the last 2 minutes, and one spare: a call's pod
    #: is handed back to its caller's next call of the same tool) up to this many pods, and
    #: shrinks to zero after `TOOLADAPTER_WARM_POOL_IDLE_SECONDS` without a call. 0: no pools (every
    #: call that is not an attempt's runs in a Job of its own). Each idle pod requests CPU
    #: 10m and memory 32Mi at most, its limits as declared (`sandbox.warm.IDLE_REQUESTS`);
    #: pools never take the share of a namespace's ResourceQuota one call of their profile
    #: needs, and give way (their pods deleted) while a call of the namespace waits for
    #: capacity.
    pool_size: int = setting("TOOLADAPTER_WARM_POOL_SIZE", env.at_least(0), 8)
    #: A pool with no call of its profile (and no descriptor of it made active) for this
    #: long shrinks to zero pods.
    pool_idle_seconds: int = setting("TOOLADAPTER_WARM_POOL_IDLE_SECONDS", env.at_least(1), 600)
    #: Pool pods (ready or starting, every pool and namespace) the cluster holds at most, as
    #: counted at each upkeep round: pools stop growing at this many.
    pool_pods: int = setting("TOOLADAPTER_WARM_POOL_PODS", env.at_least(0), 16)
    #: How long a new warm pod (a pool's, or a new workspace's) may take to be ready.
    start_seconds: int = setting("TOOLADAPTER_WARM_START_SECONDS", env.at_least(1), 120)
