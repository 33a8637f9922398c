"""Brokering: short-lived credentials and the sandbox lease, the last steps before acting.

Every object made here has a name derived from the invocation's uid, so repeating the step
after a restart finds what an earlier run made instead of making a second one. A missing
Secret or ServiceAccount denies the call (fail closed) before anything runs.
"""

from __future__ import annotations

from .. import API_VERSION
from ..enums import FailureClass, InvocationState, Stage, StageOutcome
from ..kube.client import NotFound
from ..kube.sandbox import decode_b64
from ..model import LeaseLimits, SandboxLease, ToolDescriptorSpec
from ..pipeline.sandbox import (
    LeaseNames,
    build_network_policy,
    build_secret,
    owner_reference,
    runtime_class_for,
    secret_item_key,
)
from ..timeutil import in_seconds, now_iso
from .context import SANDBOX_KINDS, Denial, Failure, FlowContext


async def broker(ctx: FlowContext) -> None:
    descriptor = await ctx.load_descriptor()
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
        ctx.record(Stage.SANDBOX, StageOutcome.NONE, f"{descriptor.kind} tools run in the operator")
    await ctx.advance(InvocationState.BROKERED)


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
            expiration_seconds=descriptor.timeout_seconds,
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
    await ctx.rt.cluster.create(
        build_network_policy(
            namespace=ctx.namespace,
            uid=ctx.uid,
            owner=owner,
            egress_allow=list(sandbox.egress.allow),
            canary=ctx.rt.canary,
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
            timeout_seconds=descriptor.timeout_seconds,
            egress_allow=list(sandbox.egress.allow),
        ),
        credential_expiry=expiry or (in_seconds(descriptor.timeout_seconds) if data_b64 else None),
        leased_at=now_iso(),
        job_name=names.job,
        network_policy_name=names.network_policy,
        secret_name=names.secret if has_secret else None,
        runtime_class=runtime_class_for(sandbox, dict(ctx.rt.settings.runtime_classes)),
    )
    ctx.status.sandbox_lease = lease
    ctx.record(
        Stage.SANDBOX, StageOutcome.LEASED, f"job {names.job}, networkpolicy {names.network_policy}"
    )
    ctx.post(
        reason="SandboxLeased",
        message=f"lease {lease.lease_id} kind {lease.kind} pool {lease.pool_id}",
    )
