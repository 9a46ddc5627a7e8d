"""First start: the default pool and the first platform admin. Idempotent: a restart changes nothing."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models import User
from aicenter.services import inventory, tenancy
from aicenter.services.context import Actor


@dataclass(frozen=True)
class BootstrapResult:
    admin_username: str
    generated_password: str | None  # set only when this start created the admin with a generated password


async def bootstrap(session: AsyncSession, *, admin_username: str, admin_password: str | None) -> BootstrapResult:
    await inventory.ensure_default_pool(session)
    if await session.scalar(select(User.id).where(User.is_platform_admin.is_(True)).limit(1)) is not None:
        return BootstrapResult(admin_username, None)
    generated = None
    if not admin_password:
        generated = admin_password = secrets.token_urlsafe(12)
    await tenancy.create_user(
        session,
        Actor.system("bootstrap"),
        username=admin_username,
        password=admin_password,
        display_name="Platform admin",
        is_platform_admin=True,
    )
    return BootstrapResult(admin_username, generated)
