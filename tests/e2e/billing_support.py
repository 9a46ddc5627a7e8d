"""Helpers of the billing e2e tests (test_billing_kill_e2e.py, test_billing_journey.py): the seed's formula
computed here, independently of ``aicenter.core.billing``, from the replica records the API returns, and the
ledger as the API lists it, checked against it."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from typing import Any

import httpx

from tests.e2e.polling import DEADLINE_S, wait

__all__ = ["DEADLINE_S", "Copy", "check_charges", "copies", "expected_charge", "ledger", "wait", "wait_closed"]

_HOUR_US = 3_600_000_000


def _at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Copy:
    """One replica attempt as the API shows it, with the price of its spec (known to the test: it set it)."""

    id: int
    job_id: int
    weight: float
    price: Decimal
    started_at: datetime | None
    finished_at: datetime | None


def copies(http: httpx.Client, job_id: int, price: Decimal) -> list[Copy]:
    """Every attempt of every replica of the job (``GET /jobs/{id}/replicas``)."""
    response = http.get(f"/api/v1/jobs/{job_id}/replicas")
    assert response.status_code == 200, response.text
    return [
        Copy(r["id"], job_id, r["billing_weight"], price, _at(r["started_at"]), _at(r["finished_at"]))
        for r in response.json()
    ]


def expected_charge(copy: Copy) -> tuple[Decimal, Decimal]:
    """(machine-hours, coins) of a finished copy by docs/billing.md: weight x (end - start) in whole
    microseconds, rounded half-even to 0.000001 h; times the price, rounded half-even to 0.01 coin."""
    assert copy.started_at is not None
    assert copy.finished_at is not None
    delta = copy.finished_at - copy.started_at
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    with localcontext() as ctx:
        ctx.prec = 60  # exact: the products and the quotient's digits fit before the one rounding
        hours = (Decimal(str(copy.weight)) * micros / _HOUR_US).quantize(Decimal("0.000001"), ROUND_HALF_EVEN)
        coins = (hours * copy.price).quantize(Decimal("0.01"), ROUND_HALF_EVEN)
    return hours, coins


def ledger(http: httpx.Client, workspace_id: int, kind: str | None = None) -> list[dict[str, Any]]:
    """Every entry of the workspace's ledger, all pages."""
    entries: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {
            "limit": 500,
            **({"kind": kind} if kind else {}),
            **({"cursor": cursor} if cursor else {}),
        }
        response = http.get(f"/api/v1/workspaces/{workspace_id}/ledger", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        entries.extend(page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            return entries


def _closed(copy: Copy, charges: list[dict[str, Any]]) -> bool:
    """Whether the meter closed the copy: a charge ends at its recorded end, or (when that last period came
    to 0 h and 0 coins, an end within milliseconds of the last charge: no entry is written) the charges
    already add up to the formula."""
    if copy.finished_at is None:
        return False
    if any(_at(c["period_end"]) == copy.finished_at for c in charges):
        return True
    hours, coins = expected_charge(copy)
    return (_sum(charges, "machine_hours"), _sum(charges, "amount")) == (hours, -coins)


def _sum(charges: list[dict[str, Any]], field: str) -> Decimal:
    return sum((Decimal(c[field]) for c in charges), Decimal(0))


def wait_closed(http: httpx.Client, workspace_id: int, all_copies: list[Copy]) -> list[dict[str, Any]]:
    """The workspace's charges once the meter has closed every started copy (each one must have ended); past
    the deadline, the charges as they are, for ``check_charges`` to say what is wrong with them."""
    deadline = time.monotonic() + DEADLINE_S
    started = [c for c in all_copies if c.started_at is not None]
    while True:
        charges = ledger(http, workspace_id, "charge")
        by_copy = _by_copy(charges)
        if all(_closed(c, by_copy.get(c.id, [])) for c in started) or time.monotonic() > deadline:
            return charges
        time.sleep(0.25)  # polling interval: the loop exits on what it reads


def _period_start(charge: dict[str, Any]) -> datetime:
    start = _at(charge["period_start"])
    assert start is not None, f"a charge without a period: {charge}"
    return start


def _by_copy(charges: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {}
    for entry in charges:
        found.setdefault(entry["replica_id"], []).append(entry)
    return found


def check_charges(all_copies: list[Copy], entries: list[dict[str, Any]]) -> dict[int, Decimal]:
    """Assert the ledger's charges are exactly once and the formula to the cent; each copy's coins charged.

    Exactly once, checked three ways: every idempotency key appears once; each copy's charge periods tile its
    run (the first starts at its start, each next one where the last ended: no period charged twice, none
    skipped); and their sums are the formula over the whole copy, hours and coins.
    """
    keys = Counter(e["idempotency_key"] for e in entries)
    assert [k for k, n in keys.items() if n > 1] == [], "a charge was written twice"
    charges = _by_copy([e for e in entries if e["kind"] == "charge"])
    known = {c.id for c in all_copies}
    assert set(charges) <= known, f"charges of copies the jobs do not have: {set(charges) - known}"
    charged: dict[int, Decimal] = {}
    for copy in all_copies:
        mine = sorted(charges.get(copy.id, []), key=_period_start)
        if copy.started_at is None:
            assert mine == [], f"copy {copy.id} never started but was charged"
            continue
        hours, coins = expected_charge(copy)
        if not mine:  # a copy too short to cost a micro machine-hour has no entry
            assert (hours, coins) == (Decimal(0), Decimal(0)), f"copy {copy.id} was never charged"
            charged[copy.id] = coins
            continue
        starts = [_at(e["period_start"]) for e in mine]
        ends = [_at(e["period_end"]) for e in mine]
        assert starts == [copy.started_at, *ends[:-1]], f"copy {copy.id}: periods do not tile its run"
        # (The last period ends at the copy's end, unless it came to 0 h and 0 coins: then it has no entry.)
        assert _sum(mine, "machine_hours") == hours, f"copy {copy.id}: machine-hours"
        assert _sum(mine, "amount") == -coins, f"copy {copy.id}: coins"
        charged[copy.id] = coins
    return charged
