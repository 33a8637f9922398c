"""The gateway's routes, one module per resource.

Each module has `PATHS` (its part of the OpenAPI document) and `add_routes(app)`. A new
resource is a new module added to `MODULES` (as `routes/dry_run.py` was, with
`POST /namespaces/{namespace}/tools/{toolId}/dry-run`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

from tooladapter.gateway.routes import (
    dry_run,
    invocations,
    mcp,
    meta,
    receipts,
    runs,
    tools,
    workspaces,
)

MODULES: Final[tuple[ModuleType, ...]] = (
    meta,
    tools,
    dry_run,
    invocations,
    runs,
    receipts,
    workspaces,
    mcp,
)
