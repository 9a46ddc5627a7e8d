"""One evaluation of every alert rule: facts and series -> core.alerts.decide -> alert rows, events, outbox.

Runs in the caller's write transaction (the evaluator holds a lease, so one replica evaluates per interval).
Nothing here touches the network: notifications are rows in the outbox that the delivery loop sends, so a
hanging webhook can never delay an evaluation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import (
    Action,
    AlertState,
    Current,
    Element,
    Expr,
    InvalidExpression,
    Severity,
    decide,
    evaluate,
    fingerprint,
    parse,
    selector_names,
    silence_matches,
)
from aicenter.core.clock import utcnow
from aicenter.db.models import Alert, AlertChannel, AlertRule, Notification, Silence
from aicenter.events import alerts_outbox
from aicenter.services.alerts._config import seed_builtin_rules
from aicenter.services.alerts._events import record_event
from aicenter.services.alerts._facts import SeriesReader, gather_facts

log = logging.getLogger(__name__)

PAYLOAD_VERSION = 1


@dataclass
class EvaluationResult:
    """What one evaluation changed: the alerts that fired and resolved, and the notifications queued."""

    fired: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    queued: int = 0
    silenced: int = 0


def _summary(rule: AlertRule, labels: dict[str, str], value: float | None) -> str:
    where = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    shown = "" if value is None else f" (value {value:.4g})"
    return f"{rule.name}: {where or 'cluster'}{shown}"[:1024]


def payload(alert: Alert, rule: AlertRule) -> dict[str, Any]:
    """The JSON a webhook receives (and an e-mail shows): stable, versioned by ``version``."""
    return {
        "version": PAYLOAD_VERSION,
        "status": alert.state,
        "alert_id": alert.id,
        "rule": rule.name,
        "rule_id": rule.id,
        "severity": alert.severity,
        "summary": alert.summary,
        "description": rule.description,
        "labels": dict(alert.labels),
        "value": alert.value,
        "workspace_id": alert.workspace_id,
        "started_at": alert.started_at.isoformat() if alert.started_at else None,
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


class _Context:
    """Channels and silences, loaded once per evaluation."""

    def __init__(self, channels: list[AlertChannel], silences: list[Silence]) -> None:
        self.channels = channels
        self.silences = silences

    def silenced(self, alert: Alert, rule: AlertRule) -> bool:
        return any(
            (s.workspace_id is None or s.workspace_id == alert.workspace_id)
            and silence_matches(s.matchers, alert.labels, rule.name)
            for s in self.silences
        )

    def targets(self, alert: Alert, rule: AlertRule) -> list[AlertChannel]:
        """Platform channels get platform rules' alerts; a workspace's channels get its alerts, whatever rule."""
        return [
            c
            for c in self.channels
            if (c.workspace_id is None and rule.workspace_id is None)
            or (c.workspace_id is not None and c.workspace_id == alert.workspace_id)
        ]


def _notify(session: AsyncSession, ctx: _Context, alert: Alert, rule: AlertRule, result: EvaluationResult) -> None:
    if ctx.silenced(alert, rule):
        result.silenced += 1
        return
    body = payload(alert, rule)
    for channel in ctx.targets(alert, rule):
        session.add(Notification(channel_id=channel.id, alert_id=alert.id, payload=body))
        result.queued += 1


def _event(session: AsyncSession, alert: Alert, rule: AlertRule, extra: dict[str, Any]) -> None:
    firing = alert.state == AlertState.FIRING
    record_event(
        session,
        f"alert.{alert.state}",
        f"{'firing' if firing else 'resolved'}: {alert.summary}",
        severity=Severity(alert.severity) if firing else Severity.INFO,
        node_id=extra.get("node_id"),
        job_id=extra.get("job_id"),
        workspace_id=alert.workspace_id,
        details={"alert_id": alert.id, "rule": rule.name, "labels": dict(alert.labels)},
    )


async def _apply_rule(
    session: AsyncSession,
    ctx: _Context,
    rule: AlertRule,
    vector: list[Element],
    now: datetime,
    result: EvaluationResult,
) -> None:
    if rule.workspace_id is not None:
        # A workspace's rule sees cluster-wide series and its own workspace's, nothing of another workspace.
        vector = [e for e in vector if e.workspace_id in (None, rule.workspace_id)]
    active: dict[str, Element] = {}
    for elem in vector:
        active.setdefault(fingerprint(elem.labels), elem)
    rows = {a.fingerprint: a for a in (await session.scalars(select(Alert).where(Alert.rule_id == rule.id))).all()}
    current = {fp: Current(AlertState(a.state), a.pending_since) for fp, a in rows.items()}
    for decision in decide(set(active), current, for_s=rule.for_s, now=now):
        element = active.get(decision.fingerprint)
        alert = rows.get(decision.fingerprint)
        if alert is None:
            assert element is not None  # decide only names fingerprints that are active or stored
            alert = Alert(
                rule_id=rule.id,
                fingerprint=decision.fingerprint,
                labels=dict(element.labels),
                state=AlertState.RESOLVED.value,
            )
            session.add(alert)
        if element is not None:
            alert.value = element.value if element.value == element.value else None  # NaN is no value
            alert.last_seen_at = now
            alert.workspace_id = rule.workspace_id if rule.workspace_id is not None else element.workspace_id
            alert.summary = _summary(rule, dict(element.labels), alert.value)
        alert.severity = rule.severity
        extra = dict(element.extra) if element is not None else {}
        if decision.action == Action.PEND:
            alert.state, alert.pending_since = AlertState.PENDING.value, now
        elif decision.action == Action.FIRE:
            alert.state, alert.started_at, alert.resolved_at = AlertState.FIRING.value, now, None
            alert.pending_since = alert.pending_since or now
        elif decision.action == Action.RESOLVE:
            alert.state, alert.resolved_at, alert.pending_since = AlertState.RESOLVED.value, now, None
        elif decision.action == Action.DROP:
            alert.state, alert.pending_since = AlertState.RESOLVED.value, None
        if decision.action in (Action.FIRE, Action.RESOLVE):
            await session.flush()  # the alert's id, for the event and the payload
            _event(session, alert, rule, extra)
            _notify(session, ctx, alert, rule, result)
            (result.fired if decision.action == Action.FIRE else result.resolved).append(alert.id)


async def evaluate_rules(
    session: AsyncSession, *, series: SeriesReader | None = None, now: datetime | None = None
) -> EvaluationResult:
    """Evaluate every rule once and write what changed (alerts, events, queued notifications).

    Built-in rules are seeded first. A disabled rule's alerts resolve. A stored rule that no longer parses (the
    language changed under it) is skipped with a log line, never stopping the others.

    Args:
        session: A write session; the caller commits.
        series: Reads the samplers' latest values (None: platform facts only).
        now: The evaluation time (tests pass one).
    """
    now = now or utcnow()
    await seed_builtin_rules(session)
    rules = list((await session.scalars(select(AlertRule).order_by(AlertRule.id))).all())
    parsed: dict[int, Expr] = {}
    for rule in rules:
        if rule.enabled:
            try:
                parsed[rule.id] = parse(rule.expression)
            except InvalidExpression as err:
                log.warning("alert rule %s (%d) skipped: %s", rule.name, rule.id, err.message)
    names: set[str] = set()
    for expr in parsed.values():
        names |= selector_names(expr)
    facts = await gather_facts(session, names, now, series)
    channels = list((await session.scalars(select(AlertChannel).where(AlertChannel.enabled.is_(True)))).all())
    silences = list((await session.scalars(select(Silence).where(Silence.ends_at > now))).all())
    ctx = _Context(channels, silences)
    result = EvaluationResult()
    for rule in rules:
        rule_expr = parsed.get(rule.id)
        vector: list[Element] = []
        if rule_expr is not None:
            out = evaluate(rule_expr, lambda name: facts.get(name, []))
            vector = out if isinstance(out, list) else []
        await _apply_rule(session, ctx, rule, vector, now, result)
    if result.queued:
        alerts_outbox.notify_after_commit(session)
    return result
