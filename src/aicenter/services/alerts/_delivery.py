"""Sending the outbox: webhooks (JSON POST, httpx) and e-mail (smtplib in a thread), retried with backoff.

A round leases due notifications in a short transaction (db/leases.py), sends each one concurrently outside any
transaction, and records each outcome as soon as that send ends, so one hanging webhook (cut at
``alert_webhook_timeout_s``, 5 s by default) delays only its own row. A failure keeps ``last_error`` and sets the
next attempt 10 s, 20 s, 40 s ... (at most an hour) later; after ``alert_delivery_attempts`` the row is given
up (``next_attempt_at`` None, ``last_error`` kept) and shows in the channel's listing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import smtplib
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.core.clock import utcnow
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.models import AlertChannel, Notification
from aicenter.services.alerts._config import get_channel
from aicenter.services.context import Actor

log = logging.getLogger(__name__)

BATCH = 50  # notifications per round; a round's sends run concurrently
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 3600.0
_ERROR_MAX = 1024


@dataclass(frozen=True)
class Outgoing:
    """One leased notification, with what sending it needs (read before the transaction ends)."""

    id: int
    token: str
    attempts: int
    kind: str
    target: str
    channel_name: str
    payload: dict[str, Any]
    workspace_id: int | None = None


@dataclass(frozen=True)
class ChannelTest:
    """The outcome of a channel test: ``error`` None when the receiver took the message."""

    channel_id: int
    ok: bool
    error: str | None


def backoff_s(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: 10 s doubling per failure, at most an hour."""
    return float(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** max(0, attempts - 1)))


def _subject(payload: dict[str, Any]) -> str:
    status = str(payload.get("status", "")).upper()
    return f"[aicenter] {status} {payload.get('summary', '')}"[:200]


def _email(settings: Settings, to: str, payload: dict[str, Any]) -> EmailMessage:
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = to
    message["Subject"] = _subject(payload)
    lines = [f"{key}: {value}" for key, value in payload.items() if key != "labels"]
    lines += [f"label {k}: {v}" for k, v in sorted(dict(payload.get("labels") or {}).items())]
    message.set_content("\n".join(lines) + "\n")
    return message


def _send_email_blocking(settings: Settings, message: EmailMessage, timeout_s: float) -> None:
    with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout_s) as smtp:
        if settings.smtp_starttls:
            smtp.starttls()
        if settings.smtp_username:
            smtp.login(settings.smtp_username, settings.smtp_password)
        smtp.send_message(message)


async def private_target_error(settings: Settings, url: str) -> str | None:
    """Why a workspace channel's webhook may not be called, or None: every address its host resolves to must be
    public (or inside ``alert_webhook_private_networks``). Otherwise a workspace admin could make the server call,
    or probe with the channel test, the database, Ray's dashboard or any service on the center's own network.

    Checked on every send, not only when the channel is saved, since a name may resolve elsewhere later. A name
    that resolves anew between this check and httpx's connect (DNS rebinding within the record's TTL) is not
    covered; operators who need that shut give the server an egress proxy.
    """
    host = urlsplit(url).hostname or ""
    port = urlsplit(url).port or 443
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        return f"cannot resolve the webhook's host {host!r}: {err}"
    allowed = [ipaddress.ip_network(n.strip(), strict=False) for n in settings.alert_webhook_private_networks]
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not address.is_global and not any(address in network for network in allowed):
            return (
                f"the webhook's host {host!r} resolves to {address}, a private address a workspace's channel may not "
                "reach; a platform admin can allow its network with AICENTER_ALERT_WEBHOOK_PRIVATE_NETWORKS"
            )
    return None


async def send(
    settings: Settings, kind: str, target: str, payload: dict[str, Any], *, workspace_id: int | None = None
) -> str | None:
    """Send one message; returns None on success, else a one-line error (never raises for the receiver's faults).

    Webhooks: a JSON POST, redirects not followed, any 2xx is success; a workspace's webhook only to public
    addresses (``private_target_error``). E-mail: via ``smtp_host`` in a thread (smtplib blocks), with the same
    timeout.
    """
    timeout_s = settings.alert_webhook_timeout_s
    try:
        if kind == "webhook":
            if workspace_id is not None and (refused := await private_target_error(settings, target)):
                return refused
            async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
                response = await client.post(target, json=payload, headers={"User-Agent": "aicenter-alerts"})
            if not 200 <= response.status_code < 300:
                return f"HTTP {response.status_code} from the webhook"
            return None
        if not settings.smtp_host:
            return "no SMTP server configured (AICENTER_SMTP_HOST)"
        message = _email(settings, target, payload)
        # Bounded twice: smtplib's socket timeout per operation, and the whole exchange here.
        await asyncio.wait_for(
            asyncio.to_thread(_send_email_blocking, settings, message, timeout_s), timeout=timeout_s * 3
        )
        return None
    except httpx.TimeoutException:
        return f"webhook did not answer within {timeout_s:g} s"
    except TimeoutError:
        return f"SMTP server did not answer within {timeout_s * 3:g} s"
    except (httpx.HTTPError, OSError, smtplib.SMTPException) as err:
        return f"{type(err).__name__}: {err}"[:_ERROR_MAX]


async def _claim(db: Database, owner: str, ttl_s: float, now: datetime) -> list[Outgoing]:
    async with db.write() as session:
        rows = await leases.claim_rows(
            session,
            Notification,
            Notification.next_attempt_at.is_not(None),
            Notification.next_attempt_at <= now,
            owner=owner,
            ttl_s=ttl_s,
            limit=BATCH,
            order_by=Notification.next_attempt_at,
        )
        if not rows:
            return []
        channels = {
            c.id: c
            for c in (
                await session.scalars(select(AlertChannel).where(AlertChannel.id.in_({r.channel_id for r in rows})))
            ).all()
        }
        out = []
        for row in rows:
            channel = channels.get(row.channel_id)
            if channel is None or not channel.enabled:
                # A channel switched off after queueing: drop the row rather than send against the admin's wish.
                row.next_attempt_at, row.last_error = None, "channel disabled"
                continue
            assert row.lock_token is not None
            out.append(
                Outgoing(
                    row.id,
                    row.lock_token,
                    row.attempts,
                    channel.kind,
                    channel.target,
                    channel.name,
                    row.payload,
                    channel.workspace_id,
                )
            )
        return out


async def _record(db: Database, item: Outgoing, error: str | None, max_attempts: int) -> None:
    now = utcnow()
    attempts = item.attempts + 1
    values: dict[str, Any] = {"attempts": attempts, "lock_expires_at": None, "lock_owner": None}
    if error is None:
        values |= {"delivered_at": now, "next_attempt_at": None, "last_error": None}
    else:
        log.warning(
            "alert notification %d to channel %s failed (attempt %d): %s", item.id, item.channel_name, attempts, error
        )
        retry = attempts < max_attempts
        values |= {
            "last_error": error[:_ERROR_MAX],
            "next_attempt_at": now + timedelta(seconds=backoff_s(attempts)) if retry else None,
        }
    async with db.write() as session:
        await leases.guarded_update(session, Notification, Notification.id == item.id, token=item.token, **values)


async def deliver_due(db: Database, settings: Settings, *, owner: str) -> int:
    """Send every due notification once (one round); returns how many were attempted."""
    # The lease outlives the longest send (an SMTP exchange may take three timeouts) with room to record it.
    ttl_s = settings.alert_webhook_timeout_s * 3 + 30
    items = await _claim(db, owner, ttl_s, utcnow())

    async def one(item: Outgoing) -> None:
        error = await send(settings, item.kind, item.target, item.payload, workspace_id=item.workspace_id)
        await _record(db, item, error, settings.alert_delivery_attempts)

    await asyncio.gather(*(one(item) for item in items))
    return len(items)


async def next_due_in_s(db: Database) -> float | None:
    """Seconds until the earliest queued notification is due (0 when one is due now), None when none is queued."""
    async with db.read() as session:
        earliest: datetime | None = await session.scalar(select(func.min(Notification.next_attempt_at)))
    if earliest is None:
        return None
    return float(max(0.0, (earliest - utcnow()).total_seconds()))


async def test_channel(db: Database, actor: Actor, channel_id: int, settings: Settings) -> ChannelTest:
    """Send a test message to a channel now, outside the outbox, and say whether it arrived.

    Raises:
        NotFound: The actor does not administer the channel.
    """
    async with db.read() as session:
        channel = await get_channel(session, actor, channel_id)
        kind, target, name, workspace_id = channel.kind, channel.target, channel.name, channel.workspace_id
    body = {
        "version": 1,
        "status": "test",
        "rule": "test",
        "summary": f"test message to channel {name} from {actor.username}",
        "labels": {"channel": name},
        "workspace_id": workspace_id,
    }
    error = await send(settings, kind, target, body, workspace_id=workspace_id)
    return ChannelTest(channel_id, error is None, error)
