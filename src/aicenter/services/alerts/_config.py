"""Alert rules, silences and notification channels: who may see and change them.

Platform-wide ones (``workspace_id`` None) are the platform admins'; a workspace's are its admins'. Members read
the platform's rules and their workspaces' rules and silences; channels (their targets may carry secrets in a
URL) only their admins read. What an actor may not see reads as missing (404); what they see but may not change
answers 403.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import BUILTIN_RULES, InvalidExpression, Severity, parse
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import AlertChannel, AlertRule, Membership, Silence
from aicenter.services import audit
from aicenter.services.access import require_platform_admin, require_workspace_admin
from aicenter.services.alerts._events import visible_to
from aicenter.services.context import Actor

CHANNEL_KINDS = ("webhook", "email")
MAX_FOR_S = 7 * 86400  # a week: longer waits are a typo more often than an intent
MAX_SILENCE_S = 90 * 86400
_EMAIL_RE = re.compile(r"^[^@\s,;<>]+@[^@\s,;<>]+$")

M = TypeVar("M", AlertRule, AlertChannel, Silence)


async def _require_scope_admin(session: AsyncSession, actor: Actor, workspace_id: int | None, what: str) -> None:
    if workspace_id is None:
        require_platform_admin(actor, f"platform-wide {what}")
    else:
        await require_workspace_admin(session, actor, workspace_id)


async def _administered(session: AsyncSession, actor: Actor) -> set[int]:
    rows = await session.scalars(
        select(Membership.workspace_id).where(
            Membership.user_id == actor.user_id, Membership.role == WorkspaceRole.WORKSPACE_ADMIN.value
        )
    )
    return set(rows.all())


def _severity(value: str) -> str:
    try:
        return Severity(value).value
    except ValueError:
        raise ValidationFailed(
            f"{value!r} is not a severity (one of {', '.join(s.value for s in Severity)})", field="severity"
        ) from None


def _expression(text: str) -> str:
    """The expression, parsed to check it; its error names the field (forms show it there)."""
    try:
        parse(text)
    except InvalidExpression as err:
        err.details["field"] = "expression"
        raise
    return text


def _for_s(value: int) -> int:
    if not 0 <= value <= MAX_FOR_S:
        raise ValidationFailed(f"must be between 0 and {MAX_FOR_S} seconds", field="for_s")
    return value


# --- rules -------------------------------------------------------------------------------------------------------


async def seed_builtin_rules(session: AsyncSession) -> int:
    """Insert the built-in rules that are missing (by name, platform-wide); returns how many. Idempotent: an
    admin's changes to a built-in rule (disabled, another ``for``) are kept."""
    have = set((await session.scalars(select(AlertRule.name).where(AlertRule.builtin.is_(True)))).all())
    added = 0
    for rule in BUILTIN_RULES:
        if rule.name not in have:
            session.add(
                AlertRule(
                    name=rule.name,
                    expression=rule.expression,
                    for_s=rule.for_s,
                    severity=rule.severity.value,
                    description=rule.description,
                    builtin=True,
                )
            )
            added += 1
    await session.flush()
    return added


async def list_rules(session: AsyncSession, actor: Actor, *, workspace_id: int | None = None) -> list[AlertRule]:
    """Rules the actor sees (platform rules and their workspaces'), platform rules first, then by name."""
    stmt = select(AlertRule)
    tenant = visible_to(actor, AlertRule.workspace_id)
    if tenant is not None:
        stmt = stmt.where(tenant)
    if workspace_id is not None:
        stmt = stmt.where(AlertRule.workspace_id == workspace_id)
    rules = list((await session.scalars(stmt)).all())
    return sorted(rules, key=lambda r: (r.workspace_id is not None, r.workspace_id or 0, r.name))


async def _get(session: AsyncSession, actor: Actor, model: type[M], item_id: int, what: str) -> M:
    row = await session.get(model, item_id)
    if row is None:
        raise NotFound(f"{what} {item_id} not found")
    if actor.is_platform_admin:
        return row
    if row.workspace_id is None:
        if model is AlertChannel:
            raise NotFound(f"{what} {item_id} not found")
        return row
    mine = await session.scalar(
        select(Membership.role).where(Membership.user_id == actor.user_id, Membership.workspace_id == row.workspace_id)
    )
    if mine is None or (model is AlertChannel and mine != WorkspaceRole.WORKSPACE_ADMIN.value):
        raise NotFound(f"{what} {item_id} not found")
    return row


async def get_rule(session: AsyncSession, actor: Actor, rule_id: int) -> AlertRule:
    """One rule the actor sees; NotFound otherwise."""
    return await _get(session, actor, AlertRule, rule_id, "alert rule")


async def _unique_name(
    session: AsyncSession, model: type[AlertRule] | type[AlertChannel], workspace_id: int | None, name: str, what: str
) -> None:
    clash = await session.scalar(
        select(model.id).where(
            model.name == name,
            model.workspace_id.is_(None) if workspace_id is None else model.workspace_id == workspace_id,
        )
    )
    if clash is not None:
        raise Conflict(f"{what} {name!r} already exists here", details={"field": "name"})


async def create_rule(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    expression: str,
    for_s: int = 0,
    severity: str = "warning",
    description: str = "",
    workspace_id: int | None = None,
    enabled: bool = True,
) -> AlertRule:
    """Add a rule: platform-wide (platform admins) or a workspace's (its admins).

    Raises:
        InvalidExpression: The expression does not parse (``details.position`` says where).
        ValidationFailed: A bad name, severity or ``for_s``.
        Conflict: The scope already has a rule of that name.
    """
    await _require_scope_admin(session, actor, workspace_id, "alert rules")
    check_name(name)
    _expression(expression)
    rule = AlertRule(
        workspace_id=workspace_id,
        name=name,
        expression=expression,
        for_s=_for_s(for_s),
        severity=_severity(severity),
        description=check_text(description, "description", 512),
        enabled=enabled,
        created_by=actor.user_id or None,
    )
    await _unique_name(session, AlertRule, workspace_id, name, "alert rule")
    session.add(rule)
    await session.flush()
    audit.record(
        session,
        actor,
        "alert_rule.create",
        "alert_rule",
        rule.id,
        workspace_id=workspace_id,
        details={"name": name, "expression": expression},
    )
    return rule


async def update_rule(session: AsyncSession, actor: Actor, rule_id: int, **changes: Any) -> AlertRule:
    """Change a rule's ``expression``, ``for_s``, ``severity``, ``description`` or ``enabled`` (None: unchanged).
    A built-in rule keeps its expression: disable it and add your own instead."""
    rule = await get_rule(session, actor, rule_id)
    await _require_scope_admin(session, actor, rule.workspace_id, "alert rules")
    applied: dict[str, Any] = {}
    for key, value in changes.items():
        if value is None:
            continue
        if key == "expression":
            if rule.builtin and value != rule.expression:
                raise Conflict("a built-in rule's expression is fixed: disable it and add a rule of your own")
            _expression(value)
        elif key == "for_s":
            value = _for_s(value)
        elif key == "severity":
            value = _severity(value)
        elif key == "description":
            value = check_text(value, "description", 512)
        elif key != "enabled":
            raise ValidationFailed(f"{key} cannot be changed", field=key)
        if getattr(rule, key) != value:
            setattr(rule, key, value)
            applied[key] = value
    if applied:
        await session.flush()
        audit.record(
            session, actor, "alert_rule.update", "alert_rule", rule.id, workspace_id=rule.workspace_id, details=applied
        )
    return rule


async def delete_rule(session: AsyncSession, actor: Actor, rule_id: int) -> None:
    """Delete a rule and its alerts. Built-in rules are disabled instead (Conflict)."""
    rule = await get_rule(session, actor, rule_id)
    await _require_scope_admin(session, actor, rule.workspace_id, "alert rules")
    if rule.builtin:
        raise Conflict(f"{rule.name} is built in: disable it instead (enabled=false)")
    await session.delete(rule)
    audit.record(
        session,
        actor,
        "alert_rule.delete",
        "alert_rule",
        rule.id,
        workspace_id=rule.workspace_id,
        details={"name": rule.name},
    )


# --- silences ----------------------------------------------------------------------------------------------------


async def list_silences(session: AsyncSession, actor: Actor, *, active_only: bool = True) -> list[Silence]:
    """Silences the actor sees (platform ones and their workspaces'), newest first."""
    stmt = select(Silence).order_by(Silence.id.desc())
    tenant = visible_to(actor, Silence.workspace_id)
    if tenant is not None:
        stmt = stmt.where(tenant)
    if active_only:
        stmt = stmt.where(Silence.ends_at > utcnow())
    return list((await session.scalars(stmt)).all())


async def create_silence(
    session: AsyncSession,
    actor: Actor,
    *,
    matchers: dict[str, str],
    duration_s: int,
    comment: str = "",
    workspace_id: int | None = None,
) -> Silence:
    """Mute notifications of alerts whose labels match every matcher (``rule`` matches the rule's name) for
    ``duration_s``. A workspace's silence mutes only that workspace's alerts.

    Raises:
        ValidationFailed: No matchers (a silence must say what it mutes), or a duration out of range.
    """
    await _require_scope_admin(session, actor, workspace_id, "silences")
    if not matchers:
        raise ValidationFailed("name at least one label to match (e.g. rule=node-down)", field="matchers")
    for key, value in matchers.items():
        if not key or len(key) > 64 or not isinstance(value, str) or len(value) > 256:
            raise ValidationFailed(f"bad matcher {key!r}", field="matchers")
    if not 60 <= duration_s <= MAX_SILENCE_S:
        raise ValidationFailed(f"must be between 60 and {MAX_SILENCE_S} seconds", field="duration_s")
    silence = Silence(
        workspace_id=workspace_id,
        matchers=dict(matchers),
        ends_at=utcnow() + timedelta(seconds=duration_s),
        comment=check_text(comment, "comment", 512),
        created_by=actor.user_id or None,
        created_by_name=actor.username,
    )
    session.add(silence)
    await session.flush()
    audit.record(
        session,
        actor,
        "silence.create",
        "silence",
        silence.id,
        workspace_id=workspace_id,
        details={"matchers": matchers, "duration_s": duration_s},
    )
    return silence


async def expire_silence(session: AsyncSession, actor: Actor, silence_id: int) -> Silence:
    """End a silence now (it stays listed with ``active_only=False``)."""
    silence = await _get(session, actor, Silence, silence_id, "silence")
    await _require_scope_admin(session, actor, silence.workspace_id, "silences")
    silence.ends_at = min(silence.ends_at, utcnow())
    await session.flush()
    audit.record(session, actor, "silence.expire", "silence", silence.id, workspace_id=silence.workspace_id)
    return silence


# --- channels ----------------------------------------------------------------------------------------------------


def check_target(kind: str, target: str) -> str:
    """A webhook's http(s) URL or an e-mail address, checked for shape (not reachability)."""
    if kind not in CHANNEL_KINDS:
        raise ValidationFailed(f"{kind!r} is not a channel kind (webhook or email)", field="kind")
    target = target.strip()
    if kind == "webhook":
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(target) > 1024:
            raise ValidationFailed("must be an http:// or https:// URL with a host", field="target")
    elif not _EMAIL_RE.match(target) or len(target) > 254:
        raise ValidationFailed("must be one e-mail address (name@domain)", field="target")
    return target


async def list_channels(session: AsyncSession, actor: Actor, *, workspace_id: int | None = None) -> list[AlertChannel]:
    """Channels the actor administers: all for platform admins, their workspaces' for workspace admins."""
    stmt = select(AlertChannel).order_by(AlertChannel.id)
    if not actor.is_platform_admin:
        stmt = stmt.where(AlertChannel.workspace_id.in_(await _administered(session, actor)))
    if workspace_id is not None:
        stmt = stmt.where(AlertChannel.workspace_id == workspace_id)
    return list((await session.scalars(stmt)).all())


async def get_channel(session: AsyncSession, actor: Actor, channel_id: int) -> AlertChannel:
    """One channel the actor administers; NotFound otherwise."""
    return await _get(session, actor, AlertChannel, channel_id, "alert channel")


async def create_channel(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    kind: str,
    target: str,
    workspace_id: int | None = None,
    enabled: bool = True,
) -> AlertChannel:
    """Add a webhook or e-mail channel, platform-wide (platform admins) or a workspace's (its admins)."""
    await _require_scope_admin(session, actor, workspace_id, "alert channels")
    check_name(name)
    channel = AlertChannel(
        workspace_id=workspace_id,
        name=name,
        kind=kind,
        target=check_target(kind, target),
        enabled=enabled,
        created_by=actor.user_id or None,
    )
    await _unique_name(session, AlertChannel, workspace_id, name, "alert channel")
    session.add(channel)
    await session.flush()
    # The target is not audited: a webhook URL often carries its secret.
    audit.record(
        session,
        actor,
        "alert_channel.create",
        "alert_channel",
        channel.id,
        workspace_id=workspace_id,
        details={"name": name, "kind": kind},
    )
    return channel


async def update_channel(
    session: AsyncSession, actor: Actor, channel_id: int, *, target: str | None = None, enabled: bool | None = None
) -> AlertChannel:
    """Change a channel's target or switch it on or off."""
    channel = await get_channel(session, actor, channel_id)
    await _require_scope_admin(session, actor, channel.workspace_id, "alert channels")
    if target is not None:
        channel.target = check_target(channel.kind, target)
    if enabled is not None:
        channel.enabled = enabled
    await session.flush()
    audit.record(
        session,
        actor,
        "alert_channel.update",
        "alert_channel",
        channel.id,
        workspace_id=channel.workspace_id,
        details={"enabled": channel.enabled},
    )
    return channel


async def delete_channel(session: AsyncSession, actor: Actor, channel_id: int) -> None:
    """Delete a channel and its undelivered notifications."""
    channel = await get_channel(session, actor, channel_id)
    await _require_scope_admin(session, actor, channel.workspace_id, "alert channels")
    await session.delete(channel)
    audit.record(
        session,
        actor,
        "alert_channel.delete",
        "alert_channel",
        channel.id,
        workspace_id=channel.workspace_id,
        details={"name": channel.name},
    )
