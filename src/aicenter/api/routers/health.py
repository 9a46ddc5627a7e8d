"""Liveness and readiness for load balancers and `aicenter up`."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from aicenter import __version__
from aicenter.api.access import Access, access
from aicenter.api.deps import ReadSession
from aicenter.api.schemas.common import HealthOut

router = APIRouter(prefix="/api/v1", tags=["health"])


@router.get("/health", openapi_extra=access(Access.PUBLIC))
async def health(session: ReadSession) -> HealthOut:
    """200 when the server can reach its database."""
    await session.execute(text("SELECT 1"))
    return HealthOut(status="ok", version=__version__)
