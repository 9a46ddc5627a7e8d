"""What an alert rule's evaluation changes: pure, so that every transition is unit-tested without a database.

An alert goes pending -> firing once its condition has held for the rule's ``for`` duration (at once with
``for`` 0), and firing -> resolved once the condition no longer holds. A pending alert whose condition stops
before ``for`` elapses is dropped without a notification (Prometheus' semantics: a flapping value does not page).
A resolved alert whose condition returns starts pending again (the same row: alerts are deduplicated by rule
and fingerprint).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

__all__ = ["Action", "AlertState", "Current", "Decision", "Severity", "decide", "fingerprint"]


class AlertState(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class Action(StrEnum):
    PEND = "pend"  # a new (or returning) condition starts its ``for`` wait: row becomes pending
    FIRE = "fire"  # notify: firing
    RESOLVE = "resolve"  # notify: resolved
    DROP = "drop"  # a pending alert whose condition stopped before ``for``: back to resolved, silently
    KEEP = "keep"  # no state change (its value may still be refreshed)


@dataclass(frozen=True)
class Current:
    """What the database holds for one alert of the rule."""

    state: AlertState
    pending_since: datetime | None


@dataclass(frozen=True)
class Decision:
    fingerprint: str
    action: Action


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable id of a label set: SHA-256 of its sorted JSON, 32 hex characters (collisions need 2^64 alerts)."""
    text = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def decide(active: set[str], current: Mapping[str, Current], *, for_s: float, now: datetime) -> list[Decision]:
    """The transitions for one rule.

    Args:
        active: Fingerprints of the label sets whose condition holds now.
        current: The rule's alert rows, by fingerprint.
        for_s: How long a condition must hold before it fires.
        now: The evaluation time.

    Returns:
        One decision per fingerprint in ``active`` or in ``current`` that is not resolved, sorted by fingerprint.
    """
    wait = timedelta(seconds=for_s)
    out: list[Decision] = []
    for fp in sorted(active | {fp for fp, c in current.items() if c.state != AlertState.RESOLVED}):
        row = current.get(fp)
        state = row.state if row is not None else AlertState.RESOLVED
        if fp in active:
            if state == AlertState.FIRING:
                action = Action.KEEP
            elif state == AlertState.PENDING:
                since = row.pending_since if row is not None and row.pending_since is not None else now
                action = Action.FIRE if now - since >= wait else Action.KEEP
            else:
                action = Action.FIRE if for_s <= 0 else Action.PEND
        elif state == AlertState.FIRING:
            action = Action.RESOLVE
        else:  # pending, condition gone before ``for`` elapsed
            action = Action.DROP
        out.append(Decision(fp, action))
    return out
