"""The admission policies the operator verifies (`pipeline.validation.shipped`)."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class AdmissionSettings(FromEnv):
    """Which release's admission policies and bindings vouch for `spec.caller`."""

    #: The release's name prefix (the chart's `prefix`): the policies are
    #: `<prefix>-invocation-caller` and so on.
    prefix: str = setting("TOOLADAPTER_ADMISSION_PREFIX", env.stripped, "tooladapter")
    #: The release namespace: the policies exempt `<prefix>-operator` in it.
    namespace: str = setting("TOOLADAPTER_ADMISSION_NAMESPACE", env.stripped, "tooladapter-system")
    #: Seconds between full re-reads beside the watch (a watch can miss nothing, but a
    #: stuck one must not leave a removed binding unseen for long).
    relist_seconds: int = setting("TOOLADAPTER_ADMISSION_RELIST_SECONDS", env.at_least(5), 60)
