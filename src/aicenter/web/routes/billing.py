"""Billing in the console: "my balance" (every workspace the user is in), a workspace's pay records (charges)
and recharge records (recharges, refunds, adjustments), its whole ledger (its admins), its billing policy and
phase (arrears), and for platform admins every workspace's balance, the recharge / refund / adjustment form,
the policy form and the reconciliation.

Thin: each page calls ``services.billing``; who sees what is decided there (members: their workspaces, others
NotFound; writing and the all-workspaces list: platform admins) and, for the whole ledger, here.
"""

from __future__ import annotations

import re
import uuid

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.billing_policy import ArrearsMode
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, Conflict, Forbidden, ValidationFailed
from aicenter.services import billing
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form
from aicenter.web.nav import NAV, NavEntry

router = APIRouter()

NAV.append(
    NavEntry(
        "billing",
        "Billing",
        "/billing",
        description="Your workspaces' balances, what their work was charged, and their recharges.",
    )
)

ENTRY_FIELDS = ("kind", "amount", "reason")
ENTRY_KINDS = [
    (billing.EntryKind.RECHARGE.value, "Recharge (+)"),
    (billing.EntryKind.REFUND.value, "Refund (+)"),
    (billing.EntryKind.ADJUSTMENT.value, "Adjustment (+ or -)"),
]
POLICY_FIELDS = ("arrears", "grace_minutes", "monthly_limit")
ARREARS_MODES = [
    (ArrearsMode.OFF.value, "off: nothing refused or stopped (unless a limit is set)"),
    (ArrearsMode.WARN.value, "warn: new work refused, an event"),
    (ArrearsMode.STOP.value, "stop: as warn, and running work stops after the grace"),
]
# The tabs of a workspace's billing page: which entries each shows.
VIEWS = {
    "charges": ("Pay records", frozenset({billing.EntryKind.CHARGE})),
    "credits": ("Recharge records", billing.CREDIT_KINDS),
    "ledger": ("Whole ledger", frozenset(billing.EntryKind)),
}


@router.get("/billing")
async def billing_index(cx: Page) -> Response:
    async with cx.ctx.db.read() as session:
        accounts = await billing.my_accounts(session, cx.actor, utcnow())
        policies = await billing.list_policies(session, cx.actor, [a.workspace_id for a in accounts])
    return render(cx, "billing/index.html", active="billing", title="Billing", accounts=accounts, policies=policies)


# --- one workspace ----------------------------------------------------------------------------------------------


async def _workspace(
    cx: Console, workspace_id: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    request = cx.request
    view = request.query_params.get("view", "charges")
    if view not in VIEWS:
        raise ValidationFailed(f'"{view}" is not a view; use one of {", ".join(VIEWS)}', field="view")
    cursor = request.query_params.get("cursor") or None
    async with cx.ctx.db.read() as session:
        # Its balance and month's spend come with the policy: NotFound for non-members.
        policy = await billing.get_policy(session, cx.actor, workspace_id)
        # Members see their own pay and recharge records; the whole ledger in one list is for its admins.
        may_see_ledger = cx.can_admin_workspace(workspace_id)
        if view == "ledger" and not may_see_ledger:
            raise Forbidden("only the workspace's admins and platform admins see its whole ledger")
        page = await billing.list_entries(session, cx.actor, workspace_id, VIEWS[view][1], limit=50, cursor=cursor)
    return render(
        cx,
        "billing/workspace.html",
        active="billing",
        title=f"Billing of {policy.workspace}",
        forms=forms,
        status=status,
        policy=policy,
        arrears_modes=ARREARS_MODES,
        entries=page.items,
        view=view,
        views=[(key, label) for key, (label, _) in VIEWS.items() if key != "ledger" or may_see_ledger],
        next_url=page_url(request, page.next_cursor),
        first_url=first_page_url(request),
        entry_kinds=ENTRY_KINDS,
        # A fresh key per rendered form: submitting it twice (a double click, a resent POST) credits once.
        new_key=uuid.uuid4().hex,
    )


@router.get("/billing/workspaces/{workspace_id:int}")
async def workspace_billing(workspace_id: Id, cx: Page) -> Response:
    return await _workspace(cx, workspace_id)


@router.post("/billing/workspaces/{workspace_id:int}/entries")
async def add_entry(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            entry = await billing.add_entry(
                session,
                cx.actor,
                workspace_id,
                post.get("kind"),
                post.get("amount"),
                reason=post.get("reason"),
                idempotency_key=post.get("idempotency_key") or None,
            )
    except AicenterError as exc:
        values = dict(post.values)
        if isinstance(exc, Conflict):  # this key is spent on another entry: the corrected form needs a new one
            values.pop("idempotency_key", None)
        state = failed_form("billing-entry", values, exc, ENTRY_FIELDS)
        return await _workspace(cx, workspace_id, forms=[state], status=exc.status)
    return redirect(
        cx,
        f"/billing/workspaces/{workspace_id}?view=credits",
        f"{entry.kind.value.capitalize()} of {entry.amount:,.2f} coins recorded.",
    )


def _minutes(raw: str) -> object:
    """The typed grace: blank is 0, a whole number an int; anything else goes to the service as typed, so that its
    permission check comes first and its message (on the field) explains what is wrong."""
    if not raw:
        return 0
    return int(raw) if re.fullmatch(r"[+-]?\d{1,9}", raw) else raw


@router.post("/billing/workspaces/{workspace_id:int}/policy")
async def set_policy(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            view = await billing.set_policy(
                session,
                cx.actor,
                workspace_id,
                arrears=post.get("arrears"),
                grace_minutes=_minutes(post.get("grace_minutes")),
                monthly_limit=post.get("monthly_limit") or None,  # blank: no limit
            )
    except AicenterError as exc:
        state = failed_form("billing-policy", post.values, exc, POLICY_FIELDS)
        return await _workspace(cx, workspace_id, forms=[state], status=exc.status)
    limit = "no monthly limit" if view.monthly_limit is None else f"monthly limit {view.monthly_limit:,.2f} coins"
    grace = f", grace {view.grace_minutes} min" if view.arrears is ArrearsMode.STOP else ""
    message = f"Billing policy of {view.workspace} set: {view.arrears}{grace}, {limit}."
    return redirect(cx, f"/billing/workspaces/{workspace_id}", message)


# --- platform admins --------------------------------------------------------------------------------------------


@router.get("/billing/admin")
async def billing_admin(cx: Page) -> Response:
    request = cx.request
    async with cx.ctx.db.read() as session:
        page = await billing.all_accounts(
            session, cx.actor, utcnow(), limit=100, cursor=request.query_params.get("cursor") or None
        )
        policies = await billing.list_policies(session, cx.actor, [a.workspace_id for a in page.items])
    return render(
        cx,
        "billing/admin.html",
        active="billing",
        title="Billing: every workspace",
        accounts=page.items,
        policies=policies,
        next_url=page_url(request, page.next_cursor),
        first_url=first_page_url(request),
    )


@router.get("/billing/verify")
async def billing_verify(cx: Page) -> Response:
    async with cx.ctx.db.read() as session:
        mismatches = await billing.verify(session, cx.actor)
    return render(cx, "billing/verify.html", active="billing", title="Billing verification", mismatches=mismatches)
