"""The web console: server-rendered pages and static assets shipped in the package.

Pages call the same services as the REST API (never the API over HTTP). Areas add their pages by including a
router in :data:`aicenter.web.routes.ROUTERS` and an entry in :data:`aicenter.web.nav.NAV`.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from aicenter.web.errors import install_console_error_handlers
from aicenter.web.routes import ROUTERS
from aicenter.web.templating import STATIC_DIR


def install(app: FastAPI) -> None:
    """Mount the console's routes and static files on ``app``."""
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    for router in ROUTERS:
        app.include_router(router, include_in_schema=False)
    install_console_error_handlers(app)
