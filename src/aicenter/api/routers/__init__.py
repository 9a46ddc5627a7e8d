"""Every API router, in the order they appear in the OpenAPI document. Add new routers to ROUTERS."""

from fastapi import APIRouter

from aicenter.api.routers import accelerator_types, audit, auth, health, nodes, pools, specs, users, workspaces

ROUTERS: list[APIRouter] = [
    health.router,
    auth.router,
    users.router,
    workspaces.router,
    audit.router,
    nodes.router,
    accelerator_types.router,
    specs.router,
    pools.router,
]
