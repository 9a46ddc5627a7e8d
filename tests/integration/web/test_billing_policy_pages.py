"""The billing policy in the console: a workspace's policy and phase shown to its members (and in the balance
lists), the platform admins' policy form (field errors, CSRF and a member's POST write nothing; a saved policy
shows prefilled), and a 402 refusal (spending limit, balance) shown readably on the job and notebook forms.

The world is test_billing_pages' (alice's workspace: balance 94.00, 6.00 charged this month by the meter); the
phase is moved by the billing service's own evaluation, as the billing controller does after each meter pass.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sqlalchemy import func, select

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent, BillingPolicy, Job
from aicenter.services import billing
from aicenter.services.context import Actor
from tests.factories import ADMIN
from tests.integration.web.conftest import Browser, OpenBrowser
from tests.integration.web.test_billing_pages import World, world  # noqa: F401  (the fixture)


async def _policy_row(db: Database, workspace_id: int) -> tuple[str, int, int | None] | None:
    async with db.read() as session:
        row = await session.get(BillingPolicy, workspace_id)
        return None if row is None else (row.arrears, row.grace_minutes, row.monthly_limit_cents)


async def _count(db: Database, model: Any) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def _set(db: Database, workspace_id: int, arrears: str, limit: str | None = None) -> None:
    """Set a policy through the service and let the evaluation move the phase, as the billing controller does."""
    async with db.write() as session:
        await billing.set_policy(session, ADMIN, workspace_id, arrears=arrears, monthly_limit=limit)
    async with db.write() as session:
        await billing.evaluate_policies(session, utcnow())


async def _status(db: Database, job_id: int) -> str:
    async with db.read() as session:
        return str(await session.scalar(select(Job.status).where(Job.id == job_id)))


def _row(page: str, workspace_id: int) -> str:
    rows = re.findall(r'<tr data-testid="billing-account"(.*?)</tr>', page, flags=re.S)
    (row,) = [r for r in rows if f'data-workspace-id="{workspace_id}"' in r]
    return row


def _text(page: str, testid: str) -> str:
    found = re.search(rf'data-testid="{testid}"[^>]*>(.*?)</(?:dd|p|div|td)>', page, flags=re.S)
    assert found is not None, testid
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


async def test_members_see_the_policy_and_its_phase(
    world: World,  # noqa: F811
    db: Database,
    open_browser: OpenBrowser,
    admin: Browser,
) -> None:
    bob = await open_browser("bob")  # a member of alice's workspace
    page = await bob.get(f"/billing/workspaces/{world.ws}")
    assert page.status_code == 200, page.text
    assert 'data-testid="billing-policy" data-strict="no"' in page.text
    assert 'data-testid="policy-none"' in page.text
    assert 'data-testid="policy-phase" data-phase="ok"' in page.text
    assert 'id="billing-policy-form"' not in page.text  # setting it is for platform admins
    listed = _row((await bob.get("/billing")).text, world.ws)
    assert 'data-phase="ok" data-arrears="off"' in listed
    assert re.search(r'data-testid="billing-policy-limit">—<', listed)

    await _set(db, world.ws, "warn", "5")  # 6.00 charged this month: the limit is reached
    page = await bob.get(f"/billing/workspaces/{world.ws}")
    assert 'data-testid="billing-policy" data-strict="yes"' in page.text
    assert 'data-arrears="warn"' in page.text
    assert _text(page.text, "policy-limit") == "5.00 coins"
    assert _text(page.text, "policy-spend") == "6.00 of 5.00 coins"
    assert 'data-testid="policy-phase" data-phase="warned"' in page.text
    phase = _text(page.text, "policy-phase")
    assert phase.startswith("in arrears since ")
    assert phase.endswith(": the monthly limit is reached")

    listed = _row((await bob.get("/billing")).text, world.ws)
    assert 'data-phase="warned" data-arrears="warn"' in listed
    assert "in arrears" in listed
    assert re.search(r'data-testid="billing-policy-limit">5\.00<', listed)
    everyone = _row((await admin.get("/billing/admin")).text, world.ws)
    assert 'data-phase="warned"' in everyone
    assert re.search(r'data-testid="billing-policy-limit">5\.00<', everyone)

    await _set(db, world.ws, "stop")  # no limit now; grace 0, but the balance (94.00) is positive: recovered
    assert 'data-phase="ok" data-arrears="stop"' in _row((await bob.get("/billing")).text, world.ws)

    refused = await bob.post(f"/billing/workspaces/{world.ws}/policy", {"arrears": "off", "grace_minutes": "x"})
    assert refused.status_code == 403  # whatever the body: permission first
    assert await _policy_row(db, world.ws) == ("stop", 0, None)
    async with db.read() as session:  # the lists' policies: only the workspaces one may see
        assert await billing.list_policies(session, Actor(world.carol.user_id, "carol"), [world.ws]) == {}
        assert list(await billing.list_policies(session, Actor(world.bob.user_id, "bob"), [world.ws, 10**6])) == [
            world.ws
        ]
    carol = await open_browser("carol")
    assert (await carol.post(f"/billing/workspaces/{world.ws}/policy", {"arrears": "off"})).status_code == 403


async def test_admin_sets_a_policy_and_bad_input_writes_nothing(
    world: World,  # noqa: F811
    db: Database,
    admin: Browser,
) -> None:
    page = await admin.get(f"/billing/workspaces/{world.ws}")
    assert page.status_code == 200
    assert 'id="billing-policy-form"' in page.text
    assert '<option value="off" selected>' in page.text
    assert re.search(r'id="billing-policy-monthly-limit" name="monthly_limit" type="text" value=""', page.text)
    path = f"/billing/workspaces/{world.ws}/policy"
    for form, field_name, message in [
        ({"arrears": "warn", "monthly_limit": "-5"}, "monthly-limit", "more than 0"),
        ({"arrears": "warn", "monthly_limit": "0"}, "monthly-limit", "more than 0"),
        ({"arrears": "warn", "monthly_limit": "1.001"}, "monthly-limit", "2 decimal places"),
        ({"arrears": "warn", "monthly_limit": "lots"}, "monthly-limit", "not a decimal number"),
        ({"arrears": "pause"}, "arrears", "use one of off, warn, stop"),
        ({"arrears": "stop", "grace_minutes": "-1"}, "grace-minutes", "0 to 43200"),
        ({"arrears": "stop", "grace_minutes": "soon"}, "grace-minutes", "whole number"),
        ({"arrears": "stop", "grace_minutes": "99999999999"}, "grace-minutes", "whole number"),
    ]:
        bad = await admin.post(path, form)
        assert bad.status_code == 422, form
        error = re.search(rf'data-testid="billing-policy-{field_name}-error">([^<]+)<', bad.text)
        assert error is not None, (form, bad.text)
        assert message in html.unescape(error[1]), error[1]
        for key in ("grace_minutes", "monthly_limit"):  # what was typed stays (a select offers only its modes)
            if key in form:
                assert f'value="{form[key]}"' in bad.text
    no_csrf = await admin.post(path, {"arrears": "stop", "grace_minutes": "30", "monthly_limit": "500"}, csrf="")
    assert no_csrf.status_code == 403
    assert await _policy_row(db, world.ws) is None
    assert await _count(db, BillingPolicy) == 0

    saved = await admin.post(path, {"arrears": "stop", "grace_minutes": "30", "monthly_limit": "500"})
    assert saved.status_code == 303, saved.text
    assert saved.headers["location"] == f"/billing/workspaces/{world.ws}"
    assert await _policy_row(db, world.ws) == ("stop", 30, 50000)
    landed = await admin.get(saved.headers["location"])
    assert "Billing policy of alice set: stop, grace 30 min, monthly limit 500.00 coins." in landed.text
    assert '<option value="stop" selected>' in landed.text  # the form shows what is stored
    assert 'id="billing-policy-grace-minutes" name="grace_minutes" type="text" value="30"' in landed.text
    assert 'id="billing-policy-monthly-limit" name="monthly_limit" type="text" value="500.00"' in landed.text
    assert _text(landed.text, "policy-grace") == "30 min"
    assert _text(landed.text, "policy-spend") == "6.00 of 500.00 coins"
    async with db.read() as session:
        audited = await session.scalar(select(func.count()).where(AuditEvent.action == "billing.policy"))
    assert audited == 1

    cleared = await admin.post(path, {"arrears": "off", "grace_minutes": "", "monthly_limit": ""})
    assert cleared.status_code == 303
    assert await _policy_row(db, world.ws) == ("off", 0, None)  # blank limit: none
    assert 'data-testid="policy-none"' in (await admin.get(f"/billing/workspaces/{world.ws}")).text


async def test_a_refusal_for_money_is_shown_on_the_job_and_notebook_forms(
    world: World,  # noqa: F811
    db: Database,
    open_browser: OpenBrowser,
) -> None:
    alice = await open_browser("alice")
    await _set(db, world.ws, "warn", "5")  # 6.00 spent this month
    jobs_before = await _count(db, Job)
    form = {
        "mode": "form",
        "name": "t2",
        "workspace_id": str(world.ws),
        "image": "host",
        "framework": "none",
        "task_name": "worker",
        "replicas": "1",
        "spec": "cpu-4",
        "command": "echo hi",
        "priority": "normal",
    }
    refused = await alice.post("/jobs/new", form)
    assert refused.status_code == 402, refused.text
    message = _text(refused.text, "job-submit-error")
    assert "workspace alice spent 6.00 coins this month" in message
    assert "monthly limit is 5.00" in message
    assert 'value="t2"' in refused.text  # what was typed stays
    assert await _count(db, Job) == jobs_before

    async with db.write() as session:  # no limit, but the balance runs out: 94.00 - 94.00
        await billing.set_policy(session, ADMIN, world.ws, arrears="warn")
        await billing.adjust(session, ADMIN, world.ws, "-94", reason="spent elsewhere")
    notebook = {"name": "nb1", "workspace_id": str(world.ws), "image": "host", "spec": "cpu-4", "idle_timeout": ""}
    refused = await alice.post("/notebooks/new", notebook)
    assert refused.status_code == 402, refused.text
    message = _text(refused.text, "notebook-new-error")
    assert message == "workspace alice's balance is 0.00 coins; ask a platform admin to recharge"
    assert 'value="nb1"' in refused.text
    assert await _count(db, Job) == jobs_before  # a notebook is a job: none written

    async with db.write() as session:
        await billing.recharge(session, ADMIN, world.ws, "10", reason="top-up")
    admitted = await alice.post("/notebooks/new", notebook)
    assert admitted.status_code == 303, admitted.text
    target = admitted.headers["location"]
    assert (await alice.post(target, {"action": "stop"})).status_code == 303  # queued: it ends at once
    async with db.write() as session:
        await billing.adjust(session, ADMIN, world.ws, "-10", reason="spent elsewhere")
    stopped = await _status(db, int(target.rsplit("/", 1)[1]))
    refused = await alice.post(target, {"action": "start"})  # the detail page's start button
    assert refused.status_code == 402, refused.text
    assert _text(refused.text, "notebook-start-error").startswith("workspace alice's balance is 0.00 coins")
    assert await _status(db, int(target.rsplit("/", 1)[1])) == stopped
