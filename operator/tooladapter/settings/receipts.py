"""Where the receipts' signing keys, public keys and chain heads are kept in the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class ReceiptSettings(FromEnv):
    """Receipt signing and chaining (`tooladapter.receipts`)."""

    #: `namespace/name` of the Secret holding the receipt signing keys (Ed25519), made by
    #: the operator with one fresh key when absent; only the operator may read it.
    signing_secret: str = setting(
        "TOOLADAPTER_RECEIPT_SIGNING_SECRET",
        env.namespaced,
        "tooladapter-system/tooladapter-receipt-signing",
    )
    #: `namespace/name` of the ConfigMap where the operator publishes the public receipt
    #: keys and their validity periods (also served at the gateway's `GET /receipt-keys`).
    keys_config_map: str = setting(
        "TOOLADAPTER_RECEIPT_KEYS_CONFIGMAP",
        env.namespaced,
        "tooladapter-system/tooladapter-receipt-keys",
    )
    #: `namespace/name` of the ConfigMap where the operator publishes each namespace
    #: incarnation's receipt chain head (`<namespace>.<uid>` = `SEQ:sha256:<hex>`).
    heads_config_map: str = setting(
        "TOOLADAPTER_RECEIPT_HEADS_CONFIGMAP",
        env.namespaced,
        "tooladapter-system/tooladapter-receipt-heads",
    )
    #: How often moved chain heads are published (one read and one write of that
    #: ConfigMap per period at most, never one per call).
    heads_publish_seconds: int = setting(
        "TOOLADAPTER_RECEIPT_HEADS_PUBLISH_SECONDS", env.at_least(1), 10
    )
