"""Brokering: short-lived credentials and the sandbox lease, the last steps before acting.

Every object made here has a name derived from the invocation's uid, so repeating the step
after a restart finds what an earlier run made instead of making a second one. A missing
Secret or ServiceAccount denies the call (fail closed) before anything runs.
"""

from __future__ import annotations

import secrets

from tooladapter import API_VERSION
from tooladapter.egress.core.cidr_bounds import descriptor_cidr_problems, parse_cluster
from tooladapter.egress.core.lease import (
    CredentialGrant,
    LeaseGrant,
    build_grant_secret,
    build_proxy_secret,
    proxy_url,
)
from tooladapter.egress.core.rules import effective_allow, split_entries
from tooladapter.enums import FailureClass, InvocationState, Stage, StageOutcome
from tooladapter.executors.limits import CallLimits
from tooladapter.flow.context import SANDBOX_KINDS, Denial, Failure, FlowContext
from tooladapter.flow.recheck import needs_recheck, recheck
from tooladapter.kube.client import NotFound
from tooladapter.kube.sandbox import decode_b64
from tooladapter.model import (
    LeaseLimits,
    SandboxLease,
    SandboxSpec,
    ToolDescriptorSpec,
)
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.job import (
    build_network_policy,
    build_secret,
    owner_reference,
    runtime_class_for,
    secret_item_key,
)
from tooladapter.sandbox.warm import uses_attempt_workspace
from tooladapter.timeutil import in_seconds, now_iso


async def broker(ctx: FlowContext) -> None:
    if needs_recheck(ctx):
        # Before anything is brokered: no Secret read, token minted or lease made for a call
        # the re-check denies, and the lease's egress allow-list is made from what it read.
        await recheck(ctx)
    descriptor = await ctx.load_descriptor()
    ctx.limits = CallLimits.of(descriptor, ctx.rt.settings)
    data_b64 = await gather_credentials(ctx, descriptor)
    ctx.secret_values = [decode_b64(v) for v in data_b64.values()]
    # A ServiceAccount token is only ever handed to a sandbox, bound to its lease's Secret.
    identity = (
        descriptor.authorization.kubernetes_identity if descriptor.kind in SANDBOX_KINDS else None
    )
    count = len(data_b64) + (1 if identity else 0)
    ctx.record(
        Stage.CREDENTIALS,
        StageOutcome.BROKERED if count else StageOutcome.NONE,
        f"{count} value(s), expiring with the call" if count else "",
    )
    if descriptor.kind in SANDBOX_KINDS:
        await lease_sandbox(ctx, descriptor, data_b64)
    else:
        ctx.record(Stage.SANDBOX, StageOutcome.NONE)  # status.execution.kind runs in the operator
    await ctx.advance(InvocationState.BROKERED)


def credential_seconds(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> int:
    """How long brokered credentials live: the call's deadline, plus for a sandbox the wait
    for capacity that may come between brokering and the Job (`capacity`), so a call that
    waited for its quota still has its whole timeout. They die with the lease's Secret at
    the call's end either way."""
    waited = ctx.rt.settings.capacity.wait_seconds if descriptor.kind in SANDBOX_KINDS else 0
    return ctx.call_limits().timeout_seconds + waited


async def gather_credentials(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> dict[str, str]:
    """The secret values the tool depends on, base64 as Secrets hold them."""
    data_b64: dict[str, str] = {}
    for dep in descriptor.secret_dependencies:
        try:
            source = await ctx.rt.cluster.read_secret(ctx.namespace, dep.secret_name)
        except NotFound:
            raise Denial(
                Stage.CREDENTIALS,
                f"secret {dep.secret_name} not found in {ctx.namespace}: failing closed",
                FailureClass.CREDENTIALS,
            ) from None
        for key in dep.keys:
            if key not in source:
                raise Denial(
                    Stage.CREDENTIALS,
                    f"secret {dep.secret_name} has no key {key!r}: failing closed",
                    FailureClass.CREDENTIALS,
                )
            data_b64[secret_item_key(dep.secret_name, key)] = source[key]
    return data_b64


async def mint_token(ctx: FlowContext, descriptor: ToolDescriptorSpec, secret: str) -> str | None:
    """The tool's ServiceAccount token, bound to the lease's Secret (it stops working when
    the Secret is deleted at the call's end) and written into it; its expiry."""
    identity = descriptor.authorization.kubernetes_identity
    if identity is None:
        return None
    try:
        token, expiry = await ctx.rt.cluster.request_token(
            namespace=ctx.namespace,
            service_account=identity.service_account_name,
            audiences=identity.audiences,
            expiration_seconds=credential_seconds(ctx, descriptor),
            bound_secret=secret,
        )
    except NotFound:
        raise Denial(
            Stage.CREDENTIALS,
            f"serviceaccount {identity.service_account_name} not found: failing closed",
            FailureClass.CREDENTIALS,
        ) from None
    ctx.secret_values.append(token)
    return expiry


async def lease_sandbox(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, data_b64: dict[str, str]
) -> None:
    """The lease's Secret and default-deny NetworkPolicy, owned by the invocation."""
    sandbox = descriptor.sandbox_spec
    if sandbox is None:
        # The CRD requires a sandbox block of container tools; one that slipped by can
        # never run, so it fails here, before any effect, instead of on every retry.
        raise Failure(
            Stage.SANDBOX,
            f"{descriptor.kind} tool has no sandbox block: it cannot run",
            FailureClass.VALIDATION,
        )
    # The descriptor controller refuses these; a status written under another setting
    # (or not yet rewritten) must not open an ipBlock the setting now refuses.
    out_of_bounds = descriptor_cidr_problems(descriptor, ctx.rt.settings.egress.cidr_bounds)
    if out_of_bounds:
        raise Denial(Stage.SANDBOX, "; ".join(out_of_bounds), FailureClass.VALIDATION)
    names = LeaseNames.for_uid(ctx.uid)
    owner = owner_reference(
        api_version=API_VERSION, kind="ToolInvocation", name=ctx.name, uid=ctx.uid
    )
    has_secret = bool(data_b64) or descriptor.authorization.kubernetes_identity is not None
    expiry = None
    if has_secret:
        await ctx.rt.cluster.create(
            build_secret(namespace=ctx.namespace, uid=ctx.uid, owner=owner, data_b64=data_b64)
        )
        expiry = await mint_token(ctx, descriptor, names.secret)
    allow = lease_allow_list(ctx, sandbox)
    proxied = await grant_egress(ctx, descriptor, sandbox, allow, owner)
    # An attempt's call runs in its workspace pod, which the namespace's warm policy
    # (`pipeline.warm`) confines to the proxy: a policy of the call's own would select
    # no pod. Its egress is its grant at the proxy, made above.
    in_workspace = uses_attempt_workspace(descriptor, ctx.load_spec().attempt_id)
    if not in_workspace:
        await ctx.rt.cluster.create(
            build_network_policy(
                namespace=ctx.namespace,
                uid=ctx.uid,
                owner=owner,
                egress_allow=allow,
                canary=ctx.rt.canary,
                proxy=ctx.rt.egress_peer if proxied else None,
                cluster=parse_cluster(ctx.rt.settings.egress.cluster_cidrs),
            )
        )
    lease = SandboxLease(
        lease_id=ctx.uid,
        kind=sandbox.kind,
        pool_id=sandbox.pool_id,
        workspace_ref=f"emptyDir:{names.job}/workspace",
        limits=LeaseLimits(
            cpu=sandbox.resources.limits.cpu,
            memory=sandbox.resources.limits.memory,
            timeout_seconds=ctx.call_limits().timeout_seconds,
            extended=sandbox.resources.limits.extended,
            egress_allow=allow,
        ),
        credential_expiry=expiry
        or (in_seconds(credential_seconds(ctx, descriptor)) if data_b64 else None),
        leased_at=now_iso(),
        job_name=None if in_workspace else names.job,
        network_policy_name=None if in_workspace else names.network_policy,
        secret_name=names.secret if has_secret else None,
        runtime_class=runtime_class_for(sandbox, dict(ctx.rt.settings.sandbox.runtime_classes)),
        egress_proxy=ctx.rt.egress_peer.endpoint if proxied and ctx.rt.egress_peer else None,
    )
    ctx.status.sandbox_lease = lease
    ctx.record(
        Stage.SANDBOX,
        StageOutcome.LEASED,
        "the attempt's workspace"
        if in_workspace
        else f"job {names.job}, networkpolicy {names.network_policy}",
    )
    ctx.post(
        reason="SandboxLeased",
        message=f"lease {lease.lease_id} kind {lease.kind} pool {lease.pool_id}",
    )


def lease_allow_list(ctx: FlowContext, sandbox: SandboxSpec) -> list[str]:
    """The descriptor's egress list (the operator's default when it sets none), narrowed by
    every ToolPolicy of the namespace that sets `egress.allow`."""
    narrowing = [
        entry.spec.egress.allow
        for entry in ctx.catalog.policies.in_namespace(ctx.namespace)
        if entry.spec is not None and entry.spec.egress.allow is not None
    ]
    return effective_allow(sandbox.egress.allow, ctx.rt.settings.egress.default_allow, narrowing)


async def grant_egress(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    sandbox: SandboxSpec,
    allow: list[str],
    owner: dict[str, object],
) -> bool:
    """Hand the lease to the egress proxy when it names hosts (or credentials): the grant
    in the proxy's namespace, the proxy URL with a fresh token for the pod. False when the
    lease needs no proxy, or none is configured (host names then stay unreachable: fail
    closed)."""
    _cidrs, hosts = split_entries(allow)
    credentials = sandbox.egress.credentials
    peer = ctx.rt.egress_peer
    if not (hosts or credentials) or peer is None:
        return False
    values: dict[str, str] = {}
    grants: list[CredentialGrant] = []
    for index, credential in enumerate(credentials):
        ref = credential.secret_key_ref
        try:
            source = await ctx.rt.cluster.read_secret(ctx.namespace, ref.name)
        except NotFound:
            raise Denial(
                Stage.CREDENTIALS,
                f"secret {ref.name} (egress credential for {credential.host}) not found in "
                f"{ctx.namespace}: failing closed",
                FailureClass.CREDENTIALS,
            ) from None
        if ref.key not in source:
            raise Denial(
                Stage.CREDENTIALS,
                f"secret {ref.name} has no key {ref.key!r}: failing closed",
                FailureClass.CREDENTIALS,
            )
        value = decode_b64(source[ref.key]).strip()
        if not value or any(c in value for c in "\r\n\0"):
            raise Denial(
                Stage.CREDENTIALS,
                f"secret {ref.name} key {ref.key!r} is not a one-line header value",
                FailureClass.CREDENTIALS,
            )
        key = f"credential-{index}"
        values[key] = value
        grants.append(CredentialGrant(credential.host, credential.header, credential.scheme, key))
        ctx.secret_values.append(value)
    token = secrets.token_urlsafe(32)
    # The token opens the lease's hosts while it lasts: redacted like a brokered value.
    ctx.secret_values.append(token)
    grant = LeaseGrant(
        uid=ctx.uid,
        namespace=ctx.namespace,
        invocation=ctx.name,
        allow=tuple(allow),
        credentials=tuple(grants),
        expires_at=in_seconds(credential_seconds(ctx, descriptor) + GRANT_MARGIN_SECONDS),
    )
    grant_secret = build_grant_secret(
        namespace=ctx.rt.settings.egress.namespace, grant=grant, token=token, values=values
    )
    if not await ctx.rt.cluster.create(grant_secret):
        # An earlier run of this step made one with another token (and maybe the pod's URL):
        # nothing has run yet (the Job comes at Executing), so both are made afresh.
        names = LeaseNames.for_uid(ctx.uid)
        await ctx.rt.cluster.delete("Secret", ctx.rt.settings.egress.namespace, names.egress)
        await ctx.rt.cluster.delete("Secret", ctx.namespace, names.proxy_secret)
        if not await ctx.rt.cluster.create(grant_secret):
            raise Failure(
                Stage.SANDBOX, "the lease's egress grant kept reappearing", FailureClass.TRANSIENT
            )
    url = proxy_url(address=peer.url_address, port=peer.port, uid=ctx.uid, token=token)
    await ctx.rt.cluster.create(
        build_proxy_secret(namespace=ctx.namespace, uid=ctx.uid, owner=owner, url=url)
    )
    if values:
        ctx.record(
            Stage.CREDENTIALS,
            StageOutcome.BROKERED,
            f"{len(values)} egress credential(s), injected by the egress proxy",
        )
    return True


#: A grant outlives the tool's timeout by the time a Job may take to be scheduled.
GRANT_MARGIN_SECONDS = 180
