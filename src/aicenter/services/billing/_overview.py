"""Balances at a glance (the console's "my balance" and the admins' list of every workspace) and a workspace's
entries of several kinds (pay records: charges; recharge records: recharges, refunds and adjustments)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core.billing_policy import month_start
from aicenter.db.models import LedgerEntry, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services.access import get_visible_workspace, member_workspace_ids, require_platform_admin
from aicenter.services.billing._ledger import EntryKind, EntryView, month_spend
from aicenter.services.context import Actor


@dataclass(frozen=True)
class AccountView:
    """A workspace's balance and what its work was charged since the start of this month (UTC), in coins."""

    workspace_id: int
    workspace: str
    balance: Decimal
    month_spend: Decimal
    month_start: datetime


async def _accounts(session: AsyncSession, workspaces: list[Workspace], now: datetime) -> list[AccountView]:
    start = month_start(now)
    spent = await month_spend(session, [w.id for w in workspaces], now)
    return [
        AccountView(
            w.id,
            w.name,
            Decimal(w.balance).quantize(billing.MINOR_UNIT),
            Decimal(spent.get(w.id, 0)).scaleb(-billing.MINOR_PLACES),
            start,
        )
        for w in workspaces
    ]


async def my_accounts(session: AsyncSession, actor: Actor, now: datetime) -> list[AccountView]:
    """The balance and this month's spend of every workspace the actor is a member of, by name."""
    stmt = select(Workspace).where(Workspace.id.in_(member_workspace_ids(actor))).order_by(Workspace.name)
    return await _accounts(session, list((await session.scalars(stmt)).all()), now)


async def all_accounts(
    session: AsyncSession, actor: Actor, now: datetime, *, limit: int = 100, cursor: str | None = None
) -> Page[AccountView]:
    """Every workspace's balance and this month's spend (platform admins), by id."""
    require_platform_admin(actor, "the list of every workspace's balance")
    page = await paginate(session, select(Workspace), Workspace.id, limit=limit, cursor=cursor)
    return Page(await _accounts(session, list(page.items), now), page.next_cursor)


async def list_entries(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    kinds: Collection[EntryKind],
    *,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[EntryView]:
    """A workspace's entries of any of ``kinds``, newest first (its members and platform admins)."""
    await get_visible_workspace(session, actor, workspace_id)
    stmt = select(LedgerEntry).where(
        LedgerEntry.workspace_id == workspace_id, LedgerEntry.kind.in_(sorted(k.value for k in kinds))
    )
    page = await paginate(session, stmt, LedgerEntry.id, limit=limit, cursor=cursor, descending=True)
    return Page([EntryView.of(row) for row in page.items], page.next_cursor)
