"""The console's usage report page: a member's table, chart data and CSV of their workspace only; the platform
summary for admins only; a bad range shown next to its field (rollups synthesized, as in the API test)."""

from __future__ import annotations

from datetime import date

import httpx
from sqlalchemy import insert, select

from aicenter.db.engine import Database
from aicenter.db.models import BillingRollup, User
from tests.factories import make_user
from tests.integration.web.conftest import Browser, OpenBrowser


async def _rollup(db: Database, username: str, day: date, kind: str, cents: int) -> None:
    async with db.write() as session:
        user_id, ws = (
            await session.execute(select(User.id, User.default_workspace_id).where(User.username == username))
        ).one()
        await session.execute(
            insert(BillingRollup).values(
                day=day,
                workspace_id=ws,
                user_id=user_id,
                kind=kind,
                spec_name="cpu-4",
                gpu_type="",
                microhours=cents * 10_000,
                cents=cents,
                entries=1,
            )
        )


async def test_report_page_table_chart_csv_and_admin_summary(
    admin: Browser, open_browser: OpenBrowser, client: httpx.AsyncClient, db: Database
) -> None:
    await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    await _rollup(db, "alice", date(2026, 2, 3), "notebook", 120)
    await _rollup(db, "bob", date(2026, 2, 3), "train", 777)
    alice = await open_browser("alice")
    query = "period=month&group_by=kind&from=2026-01-01&to=2026-04-01"
    page = await alice.get(f"/billing/reports?{query}")
    assert page.status_code == 200, page.text
    assert 'data-testid="nav-billing-reports"' in page.text
    assert page.text.count('data-testid="billing-report-row"') == 1
    assert 'data-group="notebook"' in page.text
    assert "1.20" in page.text
    assert "7.77" not in page.text  # bob's workspace
    assert 'data-testid="billing-chart"' in page.text
    assert 'data-testid="billing-stats"' not in page.text
    csv = await alice.get(f"/billing/reports.csv?{query}")
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.headers["content-disposition"] == 'attachment; filename="billing-month-kind-2026-01-01.csv"'
    assert csv.text.splitlines()[1:] == ["2026-02-01,notebook,1.200000,1.20,1"]

    bad = await alice.get("/billing/reports?period=month&from=2026-03-01&to=2026-01-01")
    assert bad.status_code == 422
    assert 'data-testid="billing-report-to-error"' in bad.text
    for query_part, shown in (
        ("workspace_id=%C2%B2", 'data-testid="billing-report-workspace-id-error"'),  # a digit to isdigit, not int
        ("workspace_id=99999999999999999999999", 'data-testid="billing-report-workspace-id-error"'),  # over int64
        ("from=9998-01-01&to=9999-06-01", 'data-testid="billing-report-from-error"'),  # buckets past year 9999
    ):
        bad = await alice.get(f"/billing/reports?period=year&{query_part}")
        assert bad.status_code == 422, (query_part, bad.status_code)
        assert shown in bad.text, query_part

    everything = await admin.get(f"/billing/reports?{query}")
    assert everything.text.count('data-testid="billing-report-row"') == 2
    assert 'data-testid="billing-stats"' in everything.text
    assert 'data-testid="chart-billing-accelerator-utilization"' in everything.text  # monitoring's series
