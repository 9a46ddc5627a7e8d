"""Every API router, in the order they appear in the OpenAPI document. Add new routers to ROUTERS."""

from fastapi import APIRouter

from aicenter.api.routers import auth, health

ROUTERS: list[APIRouter] = [
    health.router,
    auth.router,
]
