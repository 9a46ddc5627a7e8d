"""A service's API keys: created (the key is shown once), listed (name and prefix only), revoked.

A key is 32 random bytes; the database keeps its sha256, which the gateway's route table carries, so a call is
checked in memory. A revoked key stops working at the gateways' next refresh (about a second)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_name
from aicenter.db.models import ServiceKey
from aicenter.events import routes_changed
from aicenter.services import audit
from aicenter.services.context import Actor
from aicenter.services.serving._access import load_service, require_manager

__all__ = ["KEY_PREFIX", "CreatedKey", "create_key", "key_hash", "list_keys", "revoke_key"]

KEY_PREFIX = "aics_"
MAX_KEYS = 100


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    row: ServiceKey
    key: str  # exists only here: shown to the user once


async def create_key(session: AsyncSession, actor: Actor, service_id: int, name: str) -> CreatedKey:
    """A new key for the service (its owner and the workspace's admins)."""
    name = check_name(name, "name")
    service = await load_service(session, actor, service_id)
    await require_manager(session, actor, service, "create keys for")
    keys = (await session.scalars(select(ServiceKey).where(ServiceKey.service_id == service.id))).all()
    live = [k for k in keys if k.revoked_at is None]
    if any(k.name == name for k in live):
        raise Conflict(f'service {service.name} has a key named "{name}" already', details={"field": "name"})
    if len(live) >= MAX_KEYS:
        raise ValidationFailed(f"a service has at most {MAX_KEYS} keys; revoke one first", field="name")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ServiceKey(
        service_id=service.id, name=name, prefix=key[:10], key_hash=key_hash(key), created_by=actor.user_id or None
    )
    session.add(row)
    await session.flush()
    audit.record(
        session, actor, "service.key.create", "service", service.id, workspace_id=service.workspace_id,
        details={"key": name, "prefix": row.prefix},
    )  # fmt: skip
    routes_changed.notify_after_commit(session)
    return CreatedKey(row, key)


async def list_keys(session: AsyncSession, actor: Actor, service_id: int) -> list[ServiceKey]:
    """The service's live keys (names and prefixes; members of its workspace)."""
    service = await load_service(session, actor, service_id)
    stmt = (
        select(ServiceKey)
        .where(ServiceKey.service_id == service.id, ServiceKey.revoked_at.is_(None))
        .order_by(ServiceKey.id)
    )
    return list((await session.scalars(stmt)).all())


async def revoke_key(session: AsyncSession, actor: Actor, service_id: int, key_id: int) -> ServiceKey:
    """Revoke a key (by id); calls with it are refused from the gateways' next refresh on."""
    service = await load_service(session, actor, service_id)
    await require_manager(session, actor, service, "revoke keys of")
    row = await session.scalar(select(ServiceKey).where(ServiceKey.id == key_id, ServiceKey.service_id == service.id))
    if row is None or row.revoked_at is not None:
        raise NotFound(f"key {key_id} of service {service.name} not found")
    row.revoked_at = utcnow()
    audit.record(
        session, actor, "service.key.revoke", "service", service.id, workspace_id=service.workspace_id,
        details={"key": row.name, "prefix": row.prefix},
    )  # fmt: skip
    routes_changed.notify_after_commit(session)
    return row
