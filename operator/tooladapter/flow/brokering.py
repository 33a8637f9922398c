"""Brokering: short-lived credentials and the sandbox lease, the last steps before acting.

Every object made here has a name derived from the invocation's uid, so repeating the step
after a restart finds what an earlier run made instead of making a second one. A missing
Secret, key or ServiceAccount denies the call (fail closed) before anything runs.

Where each credential goes (`spec.credentials[].inject`): an http tool's values stay in the
operator's memory (`ctx.carried`) and go only into the requests they match; a sandboxed
tool's HTTP values go into the lease's egress grant, where only the proxy reads them; its
files into the lease's Secret, mounted read-only for a container tool's fixed command.
Tokens of a sandboxed call are bound to the lease's Secret: they die with the call.
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime, timedelta

from tooladapter import API_VERSION
from tooladapter.credentials.carried import (
    Carried,
    Issued,
    header_of,
    header_problem,
    record,
    secret_forms,
)
from tooladapter.credentials.issuers import (
    IssuerRefused,
    IssuerUnreachable,
    client_credentials_form,
    service_account_of,
    token_exchange_form,
)
from tooladapter.egress.core.cidr_bounds import (
    CidrBounds,
    descriptor_cidr_problems,
    parse_cluster,
)
from tooladapter.egress.core.lease import (
    CredentialGrant,
    LeaseGrant,
    build_grant_secret,
    build_proxy_secret,
    proxy_url,
)
from tooladapter.egress.core.lease_ca import LeaseCA, ca_bundle, make_lease_ca
from tooladapter.egress.core.rules import effective_allow, split_entries
from tooladapter.egress.core.trust import system_bundle
from tooladapter.enums import FailureClass, InvocationState, Stage, StageOutcome
from tooladapter.executors.issuers import basic_authorization
from tooladapter.executors.limits import CallLimits
from tooladapter.flow.context import SANDBOX_KINDS, Denial, Failure, FlowContext
from tooladapter.flow.recheck import needs_recheck, recheck
from tooladapter.kube.client import NotFound
from tooladapter.kube.sandbox import decode_b64
from tooladapter.model import (
    Credential,
    CredentialUse,
    LeaseLimits,
    SandboxLease,
    SandboxSpec,
    ToolDescriptorSpec,
)
from tooladapter.naming import LeaseNames
from tooladapter.pipeline.pinning import egress_added
from tooladapter.sandbox.job import (
    build_network_policy,
    build_secret,
    owner_reference,
    runtime_class_for,
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
    values = await read_secret_values(ctx, descriptor)
    if descriptor.kind in SANDBOX_KINDS:
        await lease_sandbox(ctx, descriptor, values)
    else:
        carried = await with_tokens(ctx, descriptor, values, bound_secret=None)
        note_credentials(ctx, carried)
        ctx.record(Stage.SANDBOX, StageOutcome.NONE)  # status.execution.kind runs in the operator
    await ctx.advance(InvocationState.BROKERED)


async def ensure_carried(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> list[Carried]:
    """The credentials an operator-run call carries: brokered by this process, or (after
    a restart between brokering and execution) brokered again, right before acting. A
    Secret gone by then ends the call Failed at credentials: nothing was sent."""
    if ctx.carried is not None or not descriptor.credentials:
        return ctx.carried or []
    try:
        values = await read_secret_values(ctx, descriptor)
        carried = await with_tokens(ctx, descriptor, values, bound_secret=None)
    except Denial as denial:
        raise Failure(Stage.CREDENTIALS, denial.reason, denial.failure) from None
    ctx.carried = carried
    ctx.secret_values.extend(form for item in carried for form in secret_forms(item))
    return carried


def credential_seconds(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> int:
    """How long brokered credentials live: the call's deadline, plus for a sandbox the two
    waits for capacity that may come before its tool starts (its quota's before the Job,
    `capacity`, then the scheduler's for its pod, `executors.sandbox`), so a call that
    waited still has its whole timeout. They die with the lease's Secret at the call's end
    either way."""
    waited = 2 * ctx.rt.settings.capacity.wait_seconds if descriptor.kind in SANDBOX_KINDS else 0
    return ctx.call_limits().timeout_seconds + waited


def _denied(message: str) -> Denial:
    return Denial(Stage.CREDENTIALS, message, FailureClass.CREDENTIALS)


async def read_secret_values(
    ctx: FlowContext, descriptor: ToolDescriptorSpec
) -> dict[str, tuple[str, str]]:
    """The Secret values the declared credentials name, by credential name: (text, base64
    as the Secret holds it). Each Secret is read once per call."""
    read: dict[str, dict[str, str]] = {}
    values: dict[str, tuple[str, str]] = {}
    for credential in descriptor.credentials:
        ref = credential.source.secret_key_ref
        if ref is None:
            continue
        if ref.name not in read:
            try:
                read[ref.name] = await ctx.rt.cluster.read_secret(ctx.namespace, ref.name)
            except NotFound:
                raise _denied(
                    f"credential {credential.name}: secret {ref.name} not found in "
                    f"{ctx.namespace}: failing closed"
                ) from None
        if ref.key not in read[ref.name]:
            raise _denied(
                f"credential {credential.name}: secret {ref.name} has no key {ref.key!r}: "
                "failing closed"
            )
        data = read[ref.name][ref.key]
        text = decode_b64(data)
        if credential.inject.hosts is not None:
            text = text.strip()
            problem = header_problem(text)
            if problem:
                raise _denied(
                    f"credential {credential.name}: secret {ref.name} key {ref.key!r} {problem}"
                )
        values[credential.name] = (text, data)
    return values


async def with_tokens(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    values: dict[str, tuple[str, str]],
    *,
    bound_secret: str | None,
) -> list[Carried]:
    """Every declared credential with its value: Secret values as read, tokens minted now
    (bound to `bound_secret`, and stored in it under the file's key when they go to a
    file)."""
    carried: list[Carried] = []
    for credential in descriptor.credentials:
        if credential.name in values:
            text, data = values[credential.name]
            carried.append(Carried(credential, text, data))
            continue
        carried.append(await mint(ctx, descriptor, credential, bound_secret))
    return carried


async def mint(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    credential: Credential,
    bound_secret: str | None,
) -> Carried:
    """A token for one credential: a ServiceAccount's, expiring with the call, or an
    issuer's (`mint_issued`)."""
    if credential.source.issued is not None:
        return await mint_issued(ctx, credential)
    source = credential.source.service_account_token
    assert source is not None  # exactly one source (the CRD and the model both say so)
    file_key = f"file-{credential.name}" if credential.inject.file is not None else None
    try:
        token, expiry = await ctx.rt.cluster.request_token(
            namespace=ctx.namespace,
            service_account=source.service_account_name,
            audiences=list(source.audiences),
            expiration_seconds=credential_seconds(ctx, descriptor),
            bound_secret=bound_secret,
            store_key=file_key if bound_secret is not None else None,
        )
    except NotFound:
        raise _denied(
            f"credential {credential.name}: serviceaccount {source.service_account_name} "
            f"not found in {ctx.namespace}: failing closed"
        ) from None
    data = _b64(token)
    return Carried(credential, token, data, expires_at=expiry or None)


#: The caller's ServiceAccount token an exchange sends lives this long (the API server's
#: minimum); the issuer only reads it to know on whose behalf.
SUBJECT_TOKEN_SECONDS = 600


async def mint_issued(ctx: FlowContext, credential: Credential) -> Carried:
    """A token an OAuth 2.0 issuer mints for this call alone: by client credentials, or by
    exchanging the calling agent's ServiceAccount token (RFC 8693). A refusal denies the
    call at credentials with the issuer's error code; no answer fails it, transient. Either
    way before anything is sent."""
    source = credential.source
    issued_source = source.issued
    assert issued_source is not None
    if credential.inject.file is not None:
        # The lease's Secret holds only Secret values and bound ServiceAccount tokens.
        raise _denied(
            f"credential {credential.name}: an issuer's token goes to HTTP requests "
            "(inject.hosts), not to a file"
        )
    ref = issued_source.client_secret_ref
    try:
        secret = decode_b64(
            (await ctx.rt.cluster.read_secret(ctx.namespace, ref.name)).get(ref.key, "")
        ).strip()
    except NotFound:
        secret = ""
    if not secret:
        raise _denied(
            f"credential {credential.name}: client secret {ref.name} key {ref.key!r} not "
            f"found in {ctx.namespace}: failing closed"
        )
    # Redacted from here on: nothing the issuer or the tool answers may show it, nor the
    # Basic credentials it is sent in (base64 of the form-urlencoded `id:secret`, which
    # no form of the bare secret matches once encoding changed it; an issuer's error may
    # echo them).
    ctx.secret_values.append(secret)
    ctx.secret_values.append(basic_authorization(issued_source.client_id, secret).split(" ")[1])
    subject: str | None = None
    if source.token_exchange is not None:
        exchange = source.token_exchange
        caller = ctx.load_spec().caller.name
        account = service_account_of(caller)
        if account is None:
            raise _denied(
                f"credential {credential.name}: a token exchange acts on behalf of the "
                f"caller's ServiceAccount, and caller {caller} is none"
            )
        try:
            subject_token, _ = await ctx.rt.cluster.request_token(
                namespace=account[0],
                service_account=account[1],
                audiences=[exchange.subject_audience],
                expiration_seconds=SUBJECT_TOKEN_SECONDS,
            )
        except NotFound:
            raise _denied(
                f"credential {credential.name}: the caller's serviceaccount {caller} is gone"
            ) from None
        ctx.secret_values.append(subject_token)
        subject = caller
        form = token_exchange_form(exchange, subject_token)
    else:
        assert source.oauth2_client_credentials is not None
        form = client_credentials_form(source.oauth2_client_credentials)
    issuers = ctx.rt.issuers
    if issuers is None:
        raise Failure(
            Stage.CREDENTIALS, "no OAuth 2.0 issuer client is configured", FailureClass.TRANSIENT
        )
    url = issued_source.token_url
    try:
        minted = await issuers.token(url, issued_source.client_id, secret, form)
    except IssuerRefused as refused:
        raise _denied(
            f"credential {credential.name}: the issuer at {url} refused: {refused.error}"
        ) from None
    except IssuerUnreachable as exc:
        raise Failure(
            Stage.CREDENTIALS,
            f"credential {credential.name}: no token from the issuer: {exc}",
            FailureClass.TRANSIENT,
        ) from None
    token = minted.access_token
    problem = header_problem(token)
    if problem:
        raise Failure(
            Stage.CREDENTIALS,
            f"credential {credential.name}: the issuer's token {problem}",
            FailureClass.TRANSIENT,
        )
    issued = Issued(
        token_url=url,
        client_id=issued_source.client_id,
        client_secret=secret,
        scopes=minted.scopes if minted.scopes is not None else tuple(issued_source.scopes),
        audience=issued_source.audience,
        revocation_url=issued_source.revocation_url,
        subject=subject,
    )
    # Redacted and due for revocation from now on, whatever happens to the call next.
    ctx.secret_values.append(token)
    expiry = in_seconds(minted.expires_in) if minted.expires_in is not None else None
    carried = Carried(credential, token, _b64(token), expires_at=expiry, issued=issued)
    ctx.minted.append(carried)
    return carried


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def note_credentials(ctx: FlowContext, carried: list[Carried]) -> None:
    """The carried credentials into memory (for the executor and redaction), status (what
    went where, never a value) and the credentials stage."""
    ctx.carried = carried
    ctx.secret_values.extend(form for item in carried for form in secret_forms(item))
    ctx.status.credentials = [CredentialUse.model_validate(record(item)) for item in carried]
    ctx.record(
        Stage.CREDENTIALS,
        StageOutcome.BROKERED if carried else StageOutcome.NONE,
        f"{len(carried)} credential(s) ({', '.join(item.name for item in carried)}), "
        "expiring with the call"
        if carried
        else "",
    )


async def lease_sandbox(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, values: dict[str, tuple[str, str]]
) -> None:
    """The lease's Secret (credential files, and the binding of its tokens), its egress
    grant and default-deny NetworkPolicy, owned by the invocation."""
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
    egress = ctx.rt.settings.egress
    bounds = CidrBounds(
        egress.descriptor_cidrs,
        egress.descriptor_cidr_min_prefix_v4,
        egress.descriptor_cidr_min_prefix_v6,
    )
    out_of_bounds = descriptor_cidr_problems(descriptor, bounds)
    if out_of_bounds:
        raise Denial(Stage.SANDBOX, "; ".join(out_of_bounds), FailureClass.VALIDATION)
    names = LeaseNames.for_uid(ctx.uid)
    owner = owner_reference(
        api_version=API_VERSION, kind="ToolInvocation", name=ctx.name, uid=ctx.uid
    )
    files = {
        f"file-{c.name}": values[c.name][1]
        for c in descriptor.credentials
        if c.inject.file is not None and c.name in values
    }
    tokens = any(c.source.service_account_token for c in descriptor.credentials)
    has_secret = bool(files) or tokens
    if has_secret:
        await ctx.rt.cluster.create(
            build_secret(namespace=ctx.namespace, uid=ctx.uid, owner=owner, data_b64=files)
        )
    carried = await with_tokens(
        ctx, descriptor, values, bound_secret=names.secret if has_secret else None
    )
    note_credentials(ctx, carried)
    allow = lease_allow_list(ctx, sandbox)
    check_approved_egress(ctx, allow)
    proxied = await grant_egress(ctx, descriptor, carried, allow)
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
    expiries = sorted(item.expires_at for item in carried if item.expires_at)
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
        credential_expiry=(expiries[0] if expiries else None)
        or (in_seconds(credential_seconds(ctx, descriptor)) if carried else None),
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


def check_approved_egress(ctx: FlowContext, allow: list[str]) -> None:
    """The lease's list, read after the re-check, is still within what was approved (the
    default list may have been reloaded a moment ago): no grant wider than approved."""
    approved = ctx.status.approved_lists
    if approved is None or approved.egress_allow is None:
        return
    added = egress_added(allow, approved.egress_allow)
    if added:
        raise Denial(
            Stage.SANDBOX,
            f"the egress allow list gained {', '.join(added)} since the call's approval was "
            "asked for: it did not run; call again to be approved anew",
            FailureClass.POLICY_DENIED,
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


def credential_grants(carried: list[Carried]) -> tuple[list[CredentialGrant], dict[str, str]]:
    """The grant's view of the HTTP credentials (which requests carry which header) and the
    values it holds: each header value under `credential-<i>`, the raw value (what an
    answer must never hand back) under `credential-<i>-raw`."""
    grants: list[CredentialGrant] = []
    values: dict[str, str] = {}
    for index, item in enumerate(c for c in carried if c.declaration.inject.hosts is not None):
        inject = item.declaration.inject
        key = f"credential-{index}"
        header, value = header_of(inject, item.value)
        values[key] = value
        values[f"{key}-raw"] = item.value
        grants.append(
            CredentialGrant(
                name=item.name,
                hosts=tuple(inject.hosts or ()),
                header=header,
                key=key,
                methods=tuple(inject.methods) if inject.methods is not None else None,
                paths=tuple(inject.paths) if inject.paths is not None else None,
            )
        )
    return grants, values


async def grant_egress(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    carried: list[Carried],
    allow: list[str],
) -> bool:
    """Hand the lease to the egress proxy when it names hosts (or carries HTTP
    credentials): the grant in the proxy's namespace, the proxy URL with a fresh token for
    the pod. False when the lease needs no proxy, or none is configured (host names then
    stay unreachable: fail closed)."""
    _cidrs, hosts = split_entries(allow)
    grants, values = credential_grants(carried)
    peer = ctx.rt.egress_peer
    if not (hosts or grants) or peer is None:
        return False
    owner = owner_reference(
        api_version=API_VERSION, kind="ToolInvocation", name=ctx.name, uid=ctx.uid
    )
    token = secrets.token_urlsafe(32)
    # The token opens the lease's hosts while it lasts: redacted like a brokered value.
    ctx.secret_values.append(token)
    seconds = credential_seconds(ctx, descriptor) + GRANT_MARGIN_SECONDS
    grant = LeaseGrant(
        uid=ctx.uid,
        namespace=ctx.namespace,
        invocation=ctx.name,
        allow=tuple(allow),
        credentials=tuple(grants),
        expires_at=in_seconds(seconds),
    )
    ca = lease_ca(ctx.uid, grants, seconds)
    grant_secret = build_grant_secret(
        namespace=ctx.rt.settings.egress.namespace, grant=grant, token=token, values=values, ca=ca
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
        build_proxy_secret(
            namespace=ctx.namespace,
            uid=ctx.uid,
            owner=owner,
            url=url,
            ca_bundle=ca_bundle(system_bundle(), ca.cert_pem) if ca is not None else None,
        )
    )
    return True


def lease_ca(uid: str, grants: list[CredentialGrant], seconds: int) -> LeaseCA | None:
    """The lease's CA when it carries HTTP credentials (the proxy then ends https to their
    hosts with leaves it signs: `egress.core.lease_ca`), expiring with the grant."""
    if not grants:
        return None
    hosts = [host for grant in grants for host in grant.hosts]
    now = datetime.now(UTC)
    return make_lease_ca(uid=uid, hosts=hosts, not_after=now + timedelta(seconds=seconds), now=now)


#: A grant outlives the tool's timeout by the time a Job may take to be scheduled.
GRANT_MARGIN_SECONDS = 180
