"""What every command shares: the global options, the connection, printing, async.

The global options (`-n`, `-o`, `--kubeconfig`, `--context`) are accepted before the
command and after it (`tooladapter -n team-a approvals` and `kubectl tooladapter approvals
-n team-a` both work); a value given after the command wins.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import click

from tooladapter.cli.render import Output, document
from tooladapter.kube.user import UserApi, connect

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
P = ParamSpec("P")
D = TypeVar("D", bound="DataclassInstance")


@dataclass
class Settings:
    """The global options as given (None: not given; the kubeconfig decides)."""

    namespace: str | None = None
    output: Output = Output.TABLE
    kubeconfig: str | None = None
    context: str | None = None

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[UserApi]:
        async with connect(
            kubeconfig=self.kubeconfig, context=self.context, namespace=self.namespace
        ) as api:
            yield api

    @property
    def structured(self) -> bool:
        return self.output is not Output.TABLE

    def emit(self, data: Any) -> None:
        """A JSON or YAML document on stdout (only with -o json|yaml)."""
        click.echo(document(data, self.output))

    def listed(self, rows: Sequence[Any], none: str) -> bool:
        """Whether a listing is printed already: as a document (-o json|yaml), or as `none`
        on stderr when there is nothing to list; else the caller prints its table."""
        if self.structured:
            self.emit(rows)
            return True
        if not rows:
            progress(none)
            return True
        return False


def _store(field: str, convert: Callable[[str], Any] = str) -> Callable[..., None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        settings = ctx.ensure_object(Settings)
        if value is not None:
            setattr(settings, field, convert(value))

    return callback


def common_options(func: F) -> F:
    """-n/--namespace, -o/--output, --kubeconfig, --context (on the group and each command)."""
    options = [
        click.option(
            "-n",
            "--namespace",
            expose_value=False,
            callback=_store("namespace"),
            help="Namespace (default: the kubeconfig context's).",
        ),
        click.option(
            "-o",
            "--output",
            type=click.Choice([o.value for o in Output]),
            expose_value=False,
            callback=_store("output", Output),
            help="Output format (default: table).",
        ),
        click.option(
            "--kubeconfig",
            expose_value=False,
            callback=_store("kubeconfig"),
            type=click.Path(dir_okay=False),
            help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
        ),
        click.option(
            "--context",
            expose_value=False,
            callback=_store("context"),
            help="Kubeconfig context (default: its current context).",
        ),
    ]
    return stacked(func, options)


def stacked(func: F, options: Sequence[Callable[[F], F]]) -> F:
    """`func` under `options`, as if they were written as decorators in this order."""
    for option in reversed(options):
        func = option(func)
    return func


def gathered(kind: type[D], keyword: str) -> Callable[[F], F]:
    """`func` given the parameters named by `kind`'s fields as one `kind`, as `keyword`:
    for options that several commands take and hand on together."""
    names = [item.name for item in dataclasses.fields(kind)]

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            value = kind(**{name: kwargs.pop(name) for name in names})
            return func(*args, **kwargs, **{keyword: value})

        return cast(F, command)

    return decorate


def wait_options(*, wait_help: str, timeout: int, timeout_help: str) -> list[Any]:
    """--wait/--no-wait and --timeout: how long a command waits for the operator."""
    return [
        click.option("--wait/--no-wait", default=True, show_default=True, help=wait_help),
        click.option(
            "--timeout",
            type=click.FloatRange(min=1),
            default=timeout,
            show_default=True,
            help=timeout_help,
        ),
    ]


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def awaited(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """An async command body as click calls it: run to its end (`run_async`)."""

    @functools.wraps(func)
    def command(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_async(func(*args, **kwargs))

    return command


def progress(text: str) -> None:
    """A line for the person watching (stderr: stdout stays for results)."""
    click.echo(text, err=True)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
