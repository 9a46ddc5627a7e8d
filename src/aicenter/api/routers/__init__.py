"""Every API router, in the order they appear in the OpenAPI document. Add new routers to ROUTERS."""

from fastapi import APIRouter

from aicenter.api.routers import (
    accelerator_types,
    alerts,
    audit,
    auth,
    catalog,
    health,
    job_metrics,
    jobs,
    nodes,
    notebook_proxy,
    notebooks,
    pools,
    series,
    specs,
    ssh_keys,
    storage,
    uploads,
    users,
    workspaces,
)

ROUTERS: list[APIRouter] = [
    health.router,
    auth.router,
    ssh_keys.router,
    users.router,
    workspaces.router,
    audit.router,
    nodes.router,
    accelerator_types.router,
    specs.router,
    pools.router,
    *catalog.ROUTERS,
    uploads.router,
    storage.router,
    jobs.router,
    job_metrics.router,
    jobs.templates_router,
    notebooks.router,
    series.router,
    alerts.router,
    notebook_proxy.router,
]
