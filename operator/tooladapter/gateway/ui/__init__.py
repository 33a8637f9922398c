"""The reviewers' page under `/ui/`: approvals, Uncertain effects and runs in a browser.

Server-rendered HTML (jinja2, autoescaped) with one small script for live updates
(EventSource); no external network (no CDN), a strict Content-Security-Policy. People
sign in with their Kubernetes token, and every read and write is made with it.
`add_routes(app)` is the gateway's one registration.
"""

from __future__ import annotations

from aiohttp import web

from tooladapter.gateway.context import DEPS
from tooladapter.gateway.ui import approvals, live, runs, signin, uncertain
from tooladapter.gateway.ui.session import Sealer
from tooladapter.gateway.ui.web import HERE, PREFIX, SEALER, TEMPLATES, templates


def add_routes(app: web.Application) -> None:
    deps = app[DEPS]
    if deps.ui_session_key is not None:
        app[SEALER] = Sealer(deps.ui_session_key)
    else:
        app[SEALER] = Sealer.from_file(deps.settings.page.session_key_file)
    app[TEMPLATES] = templates()
    for module in (signin, approvals, uncertain, runs, live):
        module.add_routes(app)
    app.router.add_static(f"{PREFIX}/static/", HERE / "static", append_version=True)
