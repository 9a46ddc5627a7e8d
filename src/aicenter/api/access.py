"""Who may call an operation, declared on every route as ``openapi_extra=access(...)``.

The OpenAPI document carries it as ``x-aicenter-access``, and the tenant-isolation test generated from that
document checks every operation against it (tests/integration/api/test_isolation.py), so a new endpoint is
covered without anyone remembering to add a test.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Access(StrEnum):
    PUBLIC = "public"  # no credentials (login, health)
    USER = "user"  # any signed-in user, acting on their own things
    WORKSPACE = "workspace"  # members of the workspace the path names (others get 403/404)
    WORKSPACE_ADMIN = "workspace_admin"  # admins of the workspace the path names
    ADMIN = "admin"  # platform admins only


JOB_TOKEN_EXTENSION = "x-aicenter-job-token"  # noqa: S105 - an OpenAPI extension name, not a secret


def access(level: Access, *, job_token: bool = False) -> dict[str, Any]:
    """The OpenAPI extension declaring who may call an operation.

    Args:
        level: Who may call it.
        job_token: Whether a job token (a replica's ``AICENTER_TOKEN``) may call it; it then may only for the
            job its ``{job_id}`` path parameter names. Every other operation answers a job token 403.
    """
    out: dict[str, Any] = {"x-aicenter-access": level.value}
    if job_token:
        out[JOB_TOKEN_EXTENSION] = True
    return out
