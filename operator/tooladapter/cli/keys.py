"""`keys rotate`, `keys list`: the receipt signing keys (an administrator's commands).

A rotation adds a fresh Ed25519 key to the signing Secret and makes it the one that signs;
the previous key's validity period ends a minute later (the operators read the Secret
again within 15 s), and it stays in the Secret and in the public key set, so every receipt
it signed stays verifiable. The public keys go to the ConfigMap at once (the operators
would write them too). Needs get and update on the Secret, which only administrators have.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from tooladapter.cli.chainverify import KEYS_CONFIG_MAP
from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.cli.render import table
from tooladapter.kube.client import Conflict
from tooladapter.kube.receipt_keys import publish_public, read_keyring, read_public, replace_keyring
from tooladapter.receipts.core.keyring import public_keys, rotated, signer_of

SIGNING_SECRET = "tooladapter-system/tooladapter-receipt-signing"  # noqa: S105 (a name)


def _split(value: str, option: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise CliError(f"{option} must be namespace/name, not {value!r}", ExitCode.USAGE)
    return namespace, name


def _config_map_option(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--config-map: the public keys' ConfigMap, which both commands name."""
    return click.option(
        "--config-map",
        default=KEYS_CONFIG_MAP,
        show_default=True,
        metavar="NAMESPACE/NAME",
        help=text,
    )


@click.group("keys")
@common_options
def keys() -> None:
    """The receipt signing keys: rotate them, list the public ones."""


async def _rotate(settings: Settings, secret: str, config_map: str) -> ExitCode:
    where = _split(secret, "--secret")
    published = _split(config_map, "--config-map")
    async with settings.connect() as api:
        for _ in range(3):
            keyring, version = await read_keyring(api.kube, *where)
            new = rotated(keyring, datetime.now(UTC))
            try:
                await replace_keyring(api.kube, *where, new, version)
            except Conflict:
                continue  # rotated or changed meanwhile: read it again
            await publish_public(api.kube, *published, public_keys(new))
            old, now = signer_of(keyring), signer_of(new)
            if settings.structured:
                settings.emit({"active": now.keyid, "previous": old.keyid})
            else:
                click.echo(
                    f"rotated: receipts are signed with {now.keyid} from now on (the operators "
                    f"switch within 15 s); {old.keyid} stays in the key set, and every receipt "
                    "it signed stays verifiable"
                )
            return ExitCode.OK
    raise CliError(f"Secret {secret} kept changing: try again")


@keys.command("rotate")
@common_options
@click.option(
    "--secret",
    default=SIGNING_SECRET,
    show_default=True,
    metavar="NAMESPACE/NAME",
    help="The signing Secret (the operator's TOOLADAPTER_RECEIPT_SIGNING_SECRET).",
)
@_config_map_option("The public keys' ConfigMap (TOOLADAPTER_RECEIPT_KEYS_CONFIGMAP).")
@click.pass_obj
def rotate(settings: Settings, secret: str, config_map: str) -> ExitCode:
    """Add a receipt signing key and sign with it from now on; earlier keys stay
    verifiable."""
    return run_async(_rotate(settings, secret, config_map))


async def _list(settings: Settings, config_map: str) -> ExitCode:
    async with settings.connect() as api:
        found = await read_public(api.kube, *_split(config_map, "--config-map"))
    if settings.structured:
        settings.emit(found.wire())
    else:
        click.echo(
            table(
                ["key", "not before", "not after"],
                [[k.keyid, k.not_before, k.not_after or "(signing)"] for k in found.keys],
            )
        )
    return ExitCode.OK


@keys.command("list")
@common_options
@_config_map_option("The public keys' ConfigMap.")
@click.pass_obj
def list_keys(settings: Settings, config_map: str) -> ExitCode:
    """The public receipt keys and their validity periods (what /receipt-keys serves)."""
    return run_async(_list(settings, config_map))
