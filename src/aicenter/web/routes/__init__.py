"""The console's routers, included by :func:`aicenter.web.install`; later areas append theirs."""

from __future__ import annotations

from fastapi import APIRouter

from aicenter.web.routes import (
    account,
    alerts,
    audit,
    billing,
    billing_reports,
    catalog,
    catalog_versions,
    home,
    jobs,
    nodes,
    notebooks,
    pools,
    services,
    services_actions,
    session,
    specs,
    users,
    workspaces,
)

ROUTERS: list[APIRouter] = [
    session.router,
    home.router,
    account.router,
    workspaces.router,
    users.router,
    nodes.router,
    specs.router,
    pools.router,
    audit.router,
    catalog.router,
    catalog_versions.router,
    jobs.router,
    notebooks.router,
    services.router,
    services_actions.router,
    alerts.router,
    billing.router,
    billing_reports.router,
]
