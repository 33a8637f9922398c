"""`tools` and `describe`: what the current user may call, and how a tool is governed."""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tooladapter.cli import views
from tooladapter.cli.complete import tool_ids
from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.cli.render import fields, table
from tooladapter.enums import Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import UserApi


async def _allowed(api: UserApi, verb: str, resource: str, names: set[str]) -> dict[str, bool]:
    """One SelfSubjectAccessReview per distinct name, a few at a time."""
    gate = asyncio.Semaphore(8)

    async def one(name: str) -> tuple[str, bool]:
        async with gate:
            return name, await api.can_i(verb, resource, name)

    return dict(await asyncio.gather(*(one(n) for n in sorted(names))))


async def _tools(settings: Settings, show_all: bool) -> ExitCode:
    async with settings.connect() as api:
        descriptors = views.callable_descriptors(await api.list_all(Resource.DESCRIPTORS))
        specs = [d.get("spec") or {} for d in descriptors]
        invoke = await _allowed(
            api, "invoke", Resource.DESCRIPTORS, {str(s.get("toolId")) for s in specs}
        )
        use = await _allowed(
            api,
            "use",
            Resource.SIDE_EFFECT_CLASSES,
            {str(s.get("sideEffectClass")) for s in specs},
        )
    rows = [
        views.tool_row(
            d,
            may_invoke=invoke[str(s.get("toolId"))],
            class_granted=use[str(s.get("sideEffectClass"))],
        )
        for d, s in zip(descriptors, specs, strict=True)
    ]
    if not show_all:
        rows = [r for r in rows if r["mayInvoke"]]
    if settings.listed(rows, f"No tools you may invoke in namespace {api.namespace}."):
        return ExitCode.OK
    headers = ["tool", "version", "kind", "class", "class granted", "healthy"]
    if show_all:
        headers.append("may invoke")
    headers.append("description")
    click.echo(
        table(
            headers,
            [
                [
                    r["toolId"],
                    r["version"],
                    r["kind"],
                    r["sideEffectClass"],
                    r["classGranted"],
                    r["healthy"],
                    *([r["mayInvoke"]] if show_all else []),
                    r["description"],
                ]
                for r in rows
            ],
        )
    )
    return ExitCode.OK


@click.command("tools")
@common_options
@click.option("--all", "show_all", is_flag=True, help="Also active tools you may not invoke.")
@click.pass_obj
def tools(settings: Settings, show_all: bool) -> ExitCode:
    """Active tools you may invoke (a SelfSubjectAccessReview of `invoke` per tool).

    CLASS GRANTED says whether you may `use` the tool's declared side-effect class; the
    namespace may raise it (a production namespace raises writes to production)."""
    return run_async(_tools(settings, show_all))


async def _describe(settings: Settings, tool_id: str) -> ExitCode:
    async with settings.connect() as api:
        descriptors = [
            d
            for d in await api.list_all(Resource.DESCRIPTORS)
            if (d.get("spec") or {}).get("toolId") == tool_id
        ]
        if not descriptors:
            raise CliError(f"no tool {tool_id!r} in namespace {api.namespace}", ExitCode.NOT_FOUND)
        policies: list[dict[str, Any]] = []
        policies_note = ""
        try:
            policies = await api.list_all(Resource.POLICIES)
        except UserApiError as err:
            if err.status != 403:
                raise
            policies_note = (
                "(you may not read this namespace's ToolPolicies: their rules are not shown)"
            )
        may_invoke = await api.can_i("invoke", Resource.DESCRIPTORS, tool_id)
    descriptors.sort(key=lambda d: views.version_key(str((d.get("spec") or {}).get("version"))))
    versions = [views.describe_version(d, policies) for d in descriptors]
    if settings.structured:
        settings.emit({"toolId": tool_id, "mayInvoke": may_invoke, "versions": versions})
        return ExitCode.OK
    click.echo(fields([("Tool", tool_id), ("May invoke", may_invoke)]))
    for v in versions:
        click.echo("")
        click.echo(
            fields(
                [
                    ("Version", v["version"]),
                    ("Kind", v["kind"]),
                    ("Class", v["sideEffectClass"]),
                    ("Risk class", v["riskClass"]),
                    ("Active", v["active"]),
                    ("Healthy", v["healthy"]),
                    ("Retired", v["retired"]),
                    ("Message", v["message"]),
                    ("Timeout", f"{v['timeoutSeconds']}s" if v["timeoutSeconds"] else None),
                    ("Description", v["description"]),
                ]
            )
        )
        click.echo("Input schema:")
        click.echo(_indent(views.canonical_pretty(v["inputSchema"])))
        if v["outputSchema"] is not None:
            click.echo("Output schema:")
            click.echo(_indent(views.canonical_pretty(v["outputSchema"])))
        click.echo("Approval:")
        for rule in v["approvalRules"]:
            click.echo(f"  - {rule}")
    if policies_note:
        click.echo("")
        click.echo(policies_note)
    return ExitCode.OK


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


@click.command("describe")
@common_options
@click.argument("tool_id", metavar="TOOL", shell_complete=tool_ids)
@click.pass_obj
def describe(settings: Settings, tool_id: str) -> ExitCode:
    """A tool's versions, classes, schemas and when its calls need an approval."""
    return run_async(_describe(settings, tool_id))
