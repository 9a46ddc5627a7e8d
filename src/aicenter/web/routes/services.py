"""Inference services in the console: the list (the seed's fields plus replicas ready/total), the deploy form
(``/services/new``, ``?model=<ref>`` from a model version's "Deploy" button) and a service's page.

Who sees what follows the service layer: members see their workspaces' services, platform admins all of them
(metadata, status, force stop; never keys, the "try it" form or requests: ``services_actions``). The page's
actions (traffic, promote, rollback, scale, stop, start, delete, keys, try it) are in ``services_actions``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError
from aicenter.core.jobs.serving import MODEL_SERVER_RUNTIMES
from aicenter.core.roles import WorkspaceRole
from aicenter.core.serving.apidoc import build_api_doc, example_body
from aicenter.core.serving.spec import AUTO_RUNTIME, RevisionState
from aicenter.services import billing, serving
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, parse_int
from aicenter.web.pickers import chosen_workspace_id, deploy_choices

router = APIRouter()

DEPLOY_FIELDS = (
    "name",
    "workspace_id",
    "model",
    "description",
    "runtime",
    "entry",
    "spec",
    "cpu",
    "memory",
    "gpu",
    "pool",
    "min_replicas",
    "max_replicas",
)
# The deploy spec's field paths -> the form's field names (errors are shown next to the field that holds them).
DEPLOY_ALIASES = {
    "resources.spec": "spec",
    "resources.cpu": "cpu",
    "resources.memory": "memory",
    "resources.gpu": "gpu",
    "resources": "spec",
    "workspace": "workspace_id",
}
RUNTIMES = (AUTO_RUNTIME, *MODEL_SERVER_RUNTIMES)


def running_label(seconds: float) -> str:
    """``—`` (not serving), ``12 min``, ``3.5 h`` or ``2.0 d``."""
    if seconds <= 0:
        return "—"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@router.get("/services")
async def list_services(cx: Page) -> Response:
    params = cx.request.query_params
    async with cx.ctx.db.read() as session:
        page = await serving.list_services(session, cx.actor, cursor=params.get("cursor") or None, limit=50)
    return render(
        cx,
        "services/list.html",
        active="services",
        title="Services",
        rows=page.items,
        running={v.service.id: running_label(v.running_s) for v in page.items},
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


# --- deploy ----------------------------------------------------------------------------------------------------


async def _new(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    member_of = cx.workspace.id if cx.workspace is not None and cx.role is not None else None
    # ?workspace_id= (the model version's workspace, from its "Deploy" button) if the user is a member of it.
    asked = cx.request.query_params.get("workspace_id", "")
    if asked.isdigit() and len(asked) <= 18 and cx.role_in(int(asked)) is not None:
        member_of = int(asked)
    workspace_id = chosen_workspace_id(forms, member_of)
    async with cx.ctx.db.read() as session:
        choices = await deploy_choices(session, cx.actor, workspace_id)
    return render(
        cx,
        "services/new.html",
        active="services",
        title="Deploy a model",
        forms=forms,
        status=status,
        choices=choices,
        workspace_id=workspace_id,
        model=cx.request.query_params.get("model", "").strip()[:300],
        runtime_options=[(r, r) for r in RUNTIMES],
    )


@router.get("/services/new")
async def new_service(cx: Page) -> Response:
    """The deploy form; ``?model=<ref>&workspace_id=<id>`` (the model version page's "Deploy" button) fills in
    the model and the workspace."""
    return await _new(cx)


def deploy_spec_from_form(post: Post) -> dict[str, Any]:
    """The deploy request the form describes, as ``aicenter service deploy`` reads it (the service checks it)."""
    resources: dict[str, Any]
    if post.get("spec"):
        resources = {"spec": post.get("spec")}
    else:
        resources = {"cpu": post.get("cpu") or "1", "memory": post.get("memory") or "1Gi"}
        gpu = parse_int(post.get("gpu"), "gpu")
        if gpu:
            resources["gpu"] = gpu
    spec: dict[str, Any] = {
        "name": post.get("name"),
        "model": post.get("model") or None,
        "description": post.get("description"),
        "runtime": post.get("runtime") or AUTO_RUNTIME,
        "resources": resources,
        "min_replicas": parse_int(post.get("min_replicas"), "min_replicas", default=0),
        "max_replicas": parse_int(post.get("max_replicas"), "max_replicas", default=3),
    }
    if post.get("entry"):
        spec["entry"] = post.get("entry")
    if post.get("pool"):
        spec["pool"] = post.get("pool")
    return spec


@router.post("/services/new")
async def deploy_service(post: Post) -> Response:
    """Deploy; refused whole (nothing is created) with the error next to its field."""
    cx = post.cx
    try:
        workspace_id = parse_int(post.get("workspace_id"), "workspace_id")
        spec = deploy_spec_from_form(post)
        async with cx.ctx.db.write() as session:
            service_id = await serving.deploy_service(session, cx.actor, spec, workspace_id=workspace_id)
    except AicenterError as exc:
        state = failed_form("service-deploy", post.values, exc, DEPLOY_FIELDS, aliases=DEPLOY_ALIASES)
        return await _new(cx, forms=[state], status=exc.status)
    return redirect(cx, f"/services/{service_id}", f"Service {post.get('name')} is deploying.")


# --- one service -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TryResult:
    """What the gateway answered the "try it" form (shown to the member who sent it, never stored)."""

    status: int
    revision: str
    body: str


def try_body(revisions: list[Any], stable_id: int | None) -> str:
    """The "try it" form's V2 infer body: an example built from the stable (else newest) revision's inputs."""
    shown = next((r for r in revisions if r.id == stable_id), None) or (revisions[-1] if revisions else None)
    return json.dumps(example_body(shown.signature if shown is not None else None), indent=2)


def _ms(at: datetime | None) -> int | None:
    if at is None:
        return None
    return int((at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp() * 1000)


def replica_spans_json(spans: list[serving.ReplicaSpan]) -> str:
    """The replicas of the last hour for the replicas-over-time chart (static/services.js): times in ms."""
    return json.dumps(
        [
            {
                "revision": s.revision,
                "started": _ms(s.started_at),
                "ready": _ms(s.ready_at),
                "draining": _ms(s.draining_since),
                "finished": _ms(s.finished_at),
            }
            for s in spans
        ]
    )


EVENTS_SHOWN = 50
"""The service page's events: the latest; the rest through the API or ``aicenter service events``."""


async def service_detail(
    cx: Console,
    service_id: int,
    *,
    forms: list[FormState] | None = None,
    status: int = 200,
    new_key: serving.CreatedKey | None = None,
    tried: TryResult | None = None,
) -> Response:
    """Status, URL, actions, revisions and traffic, live replicas (linked to their job pages for logs and
    events), the service's latest events, load charts, keys and "try it" (members only), and the generated API
    document. Unknown or unseen services are 404 (the service layer's)."""
    async with cx.ctx.db.read() as session:
        view = await serving.get_service(session, cx.actor, service_id)
        role = cx.role_in(view.service.workspace_id)
        keys = await serving.list_keys(session, cx.actor, service_id) if role is not None else []
        spans = await serving.replica_history(session, cx.actor, service_id)
        events = (await serving.list_service_events(session, cx.actor, service_id, limit=EVENTS_SHOWN)).items
        cost = await billing.service_cost(session, service_id, utcnow())
    service = view.service
    stable = next((r for r in view.revisions if r.id == service.stable_revision_id), None)
    doc = build_api_doc(
        service_name=service.name,
        url_path=view.url_path,
        base_url=cx.ctx.settings.api_url,
        signature=stable.signature if stable is not None else None,
        runtime=stable.runtime if stable is not None else view.runtime,
        revision=stable.number if stable is not None else None,
    )
    manager = role is not None and (
        (service.user_id is not None and service.user_id == cx.actor.user_id) or role == WorkspaceRole.WORKSPACE_ADMIN
    )
    live = [r for r in view.revisions if r.state in (RevisionState.STARTING.value, RevisionState.READY.value)]
    canary = next((r for r in reversed(live) if r.id != service.stable_revision_id), None)
    scale_base = stable.spec if stable is not None else (live[-1].spec if live else {})
    response = render(
        cx,
        "services/detail.html",
        active="services",
        title=f"Service {service.name}",
        forms=forms,
        status=status,
        v=view,
        doc=doc,
        public_url=cx.ctx.settings.api_url + view.url_path,
        running=running_label(view.running_s),
        member=role is not None,
        manager=manager,
        # A platform admin who cannot manage it may still stop it (audited as a force stop).
        force_stop=cx.is_platform_admin and not manager and service.stopped_at is None,
        stopped=service.stopped_at is not None,
        ready_revisions=[r for r in view.revisions if r.state == RevisionState.READY.value],
        canary=canary,
        scale_min=scale_base.get("min_replicas", 0),
        scale_max=scale_base.get("max_replicas", 3),
        keys=keys,
        new_key=new_key,
        infer_path=f"{view.url_path}/v2/models/{service.name}/infer",
        try_body=try_body(view.revisions, service.stable_revision_id),
        tried=tried,
        command_runtime=view.runtime == "command",
        replica_spans=replica_spans_json(spans),
        events=events,
        cost=cost,
    )
    if new_key is not None:
        response.headers["Cache-Control"] = "no-store"  # the key is shown once: no copy in any cache
    return response


@router.get("/services/{service_id:int}")
async def service_page(service_id: Id, cx: Page) -> Response:
    return await service_detail(cx, service_id)
