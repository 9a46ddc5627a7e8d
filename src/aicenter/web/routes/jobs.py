"""Jobs in the console: the list (filters, status badges, pending reasons), a job's page (tasks, replicas, nodes,
devices, events, live status and a live log view over the API's SSE endpoint, stop), and the submit form.

The submit form builds the same spec document the CLI reads from YAML (or takes pasted YAML on its "YAML" tab)
and hands it to the one submission service, so errors name the same fields; they are shown next to the form
field that holds them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml
from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.core.jobs import Framework, JobKind, JobStatus, Priority
from aicenter.services import billing, catalog, jobs, notebooks
from aicenter.services.access import may_read_user_data
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form, parse_int, parse_key_values
from aicenter.web.pickers import chosen_workspace_id, run_choices

router = APIRouter()

FINISHED = frozenset(s.value for s in JobStatus if s.is_finished())
# Status -> badge colour class (console.css): green while it runs or after success, amber while it waits.
BADGES = {
    "pending": "pending",
    "queued": "pending",
    "scheduled": "role",
    "starting": "role",
    "running": "active",
    "restarting": "not-ready",
    "preempted": "not-ready",
    "succeeded": "ready",
    "failed": "failed",
    "stopped": "disabled",
    "lost": "failed",
}
FORM_FIELDS = (
    "name",
    "workspace_id",
    "image",
    "algorithm",
    "datasets",
    "framework",
    "task_name",
    "replicas",
    "spec",
    "cpu",
    "memory",
    "gpu",
    "command",
    "priority",
    "max_restarts",
    "env",
    "output_model",
)
# The spec's field paths -> the form's field names (errors are shown next to the field that holds them).
ALIASES = {
    "tasks[0].name": "task_name",
    "tasks[0].replicas": "replicas",
    "tasks[0].resources.spec": "spec",
    "tasks[0].resources.cpu": "cpu",
    "tasks[0].resources.memory": "memory",
    "tasks[0].resources.gpu": "gpu",
    "tasks[0].resources": "spec",
    "tasks[0].command": "command",
    "retry.max_restarts": "max_restarts",
    "workspace": "workspace_id",
}
YAML_FIELDS = ("yaml", "workspace_id")
# Chart ranges (templates/_charts.html) by length; a job's page starts on the smallest covering its run.
RANGES = (("1h", 3600), ("6h", 21600), ("24h", 86400), ("7d", 604800), ("30d", 2592000), ("90d", 7776000))
MAX_COMPARED = 10  # lines per chart on the compare page: past ten, colours repeat and nobody can read it


# --- list ----------------------------------------------------------------------------------------------------


@router.get("/jobs")
async def list_jobs(cx: Page) -> Response:
    params = cx.request.query_params
    status = params.get("status", "").strip()
    kind = params.get("kind", "").strip()
    user = params.get("user", "").strip()
    workspace_raw = params.get("workspace_id", "").strip()
    workspace_id = int(workspace_raw) if workspace_raw.isdigit() else None
    async with cx.ctx.db.read() as session:
        page = await jobs.list_jobs(
            session,
            cx.actor,
            workspace_id=workspace_id,
            status=status or None,
            user=user or None,
            kind=kind or None,
            limit=50,
            cursor=params.get("cursor") or None,
        )
    return render(
        cx,
        "jobs/list.html",
        active="jobs",
        title="Jobs",
        jobs=page.items,
        badges=BADGES,
        statuses=[s.value for s in JobStatus],
        kinds=[k.value for k in JobKind],
        status_filter=status,
        kind=kind,
        user=user,
        workspace_id=workspace_id,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


# --- submit ----------------------------------------------------------------------------------------------------


def _member_workspace_id(cx: Console) -> int | None:
    return cx.workspace.id if cx.workspace is not None and cx.role is not None else None


async def _new(
    cx: Console, *, tab: str, forms: list[FormState] | None = None, status: int = 200, note: str = ""
) -> Response:
    workspace_id = chosen_workspace_id(forms, _member_workspace_id(cx))
    async with cx.ctx.db.read() as session:
        choices = await run_choices(session, cx.actor, workspace_id)
    return render(
        cx,
        "jobs/new.html",
        active="jobs",
        title="Submit a job",
        forms=forms,
        status=status,
        tab=tab,
        note=note,
        choices=choices,
        workspace_id=workspace_id,
        framework_options=[(f.value, f.value) for f in Framework],
        priority_options=[(p.value, p.value) for p in Priority],
        selected_datasets=set(next((s.values.get("datasets_list", "") for s in forms or []), "").split("\n")),
    )


@router.get("/jobs/new")
async def new_job(cx: Page) -> Response:
    """The submit form; ``?notebook=<id>`` opens the YAML tab prefilled from that notebook ("Train from here")."""
    raw = cx.request.query_params.get("notebook", "")
    if raw:
        note = "Prefilled from the notebook: its saved code, image, datasets and resources. Set the command."
        return await _new(cx, tab="yaml", forms=[await _from_notebook(cx, raw)], note=note)
    tab = "yaml" if cx.request.query_params.get("tab") == "yaml" else "form"
    return await _new(cx, tab=tab)


async def _from_notebook(cx: Console, raw: str) -> FormState:
    """The YAML tab's values: the notebook's training spec (``notebooks.train_spec``) in its workspace."""
    if not raw.isdigit() or len(raw) > 18:
        raise ValidationFailed(f'"{raw}" is not a notebook id', field="notebook")
    async with cx.ctx.db.read() as session:
        spec = await notebooks.train_spec(session, cx.actor, int(raw))
        job = await notebooks.load_notebook(session, cx.actor, int(raw))
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    return FormState("job-yaml", {"yaml": text, "workspace_id": str(job.workspace_id)})


def spec_from_form(post: Post) -> dict[str, Any]:
    """The job spec the form describes, as the YAML a user would write (the service checks every field)."""
    resources: dict[str, Any]
    if post.get("spec"):
        resources = {"spec": post.get("spec")}
    else:
        resources = {"cpu": post.get("cpu"), "memory": post.get("memory")}
        gpu = parse_int(post.get("gpu"), "gpu")
        if gpu:
            resources["gpu"] = gpu
    task: dict[str, Any] = {
        "name": post.get("task_name") or "worker",
        "replicas": parse_int(post.get("replicas"), "replicas", default=1),
        "resources": resources,
        "command": post.get("command"),
    }
    spec: dict[str, Any] = {
        "kind": "train",
        "name": post.get("name"),
        "image": post.get("image") or "host",
        "framework": post.get("framework") or "none",
        "priority": post.get("priority") or "normal",
        "tasks": [task],
    }
    if post.get("algorithm"):
        spec["algorithm"] = post.get("algorithm")
    datasets = [d for d in post.data.getlist("datasets") if isinstance(d, str) and d.strip()]
    if datasets:
        spec["datasets"] = datasets
    max_restarts = parse_int(post.get("max_restarts"), "max_restarts")
    if max_restarts:
        spec["retry"] = {"max_restarts": max_restarts, "on": ["node_lost", "error", "preempted"]}
    env = parse_key_values(post.get("env"), "env") if post.get("env") else {}
    if env:
        spec["env"] = env
    if post.get("output_model"):
        spec["output_model"] = post.get("output_model")
    return spec


@router.post("/jobs/new")
async def submit_job(post: Post) -> Response:
    cx = post.cx
    yaml_tab = post.get("mode") == "yaml"
    values = dict(post.values)
    # Several datasets are selected at once; the re-rendered form needs all of them, not the last one.
    values["datasets_list"] = "\n".join(d for d in post.data.getlist("datasets") if isinstance(d, str))
    try:
        workspace_id = parse_int(post.get("workspace_id"), "workspace_id")
        source: str | dict[str, Any] = post.get("yaml") if yaml_tab else spec_from_form(post)
        async with cx.ctx.db.write() as session:
            view = await jobs.submit_job(session, cx.actor, source, workspace_id=workspace_id)
    except AicenterError as exc:
        if yaml_tab:
            state = failed_form("job-yaml", values, exc, YAML_FIELDS)
            if state.errors.get("yaml") is None and state.message is None:
                state.message = exc.message
        else:
            state = failed_form("job-submit", values, exc, FORM_FIELDS, aliases=ALIASES)
        return await _new(cx, tab="yaml" if yaml_tab else "form", forms=[state], status=exc.status)
    job = view.job
    return redirect(cx, f"/jobs/{job.id}", f"Job {job.name} was submitted.")


# --- one job ---------------------------------------------------------------------------------------------------


async def _detail(cx: Console, job_id: int, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        view = await jobs.get_job(session, cx.actor, job_id)
        logs_readable = await may_read_user_data(session, cx.actor, view.job.workspace_id)
        saved_id = view.job.output_model_version_id
        saved = (await catalog.version_links(session, cx.actor, [saved_id])).get(saved_id) if saved_id else None
        cost = await billing.job_cost(session, job_id, utcnow())
    job = view.job
    tasks = [
        {"name": t.get("name", "worker"), "replicas": int(t.get("replicas", 1)), **t} for t in job.spec.get("tasks", [])
    ]
    latest = max((r.attempt for r in view.replicas), default=0)
    started = job.started_at or min((r.started_at for r in view.replicas if r.started_at), default=None)
    return render(
        cx,
        "jobs/detail.html",
        active="jobs",
        title=job.name,
        forms=forms,
        status=status,
        view=view,
        job=job,
        tasks=tasks,
        replicas=[r for r in view.replicas if r.attempt == latest],
        earlier=[r for r in view.replicas if r.attempt != latest],
        # A job that fails while starting never reaches running (the job's started_at); its replicas did start.
        saved_model=saved,
        started=started,
        default_range=covering_range(started),
        badges=BADGES,
        finished=job.status in FINISHED,
        logs_readable=logs_readable,
        cost=cost,
    )


def covering_range(start: datetime | None) -> str:
    """The smallest chart range (1h ... 90d) reaching back from now to a run's ``start``.

    Ranges end now, so a finished job's charts need one reaching its start, not one as long as its run.
    """
    if start is None:
        return RANGES[0][0]
    start = start if start.tzinfo else start.replace(tzinfo=UTC)
    span = (utcnow() - start).total_seconds()
    return next((name for name, seconds in RANGES if seconds >= span), RANGES[-1][0])


@router.get("/jobs/compare")
async def compare_jobs(cx: Page) -> Response:
    """Several jobs' reported metrics overlaid, one line per job: ``/jobs/compare?ids=1,2,3`` (or ``ids=1&ids=2``)."""
    raw = ",".join(v for v in cx.request.query_params.getlist("ids"))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and len(p) <= 18 for p in parts):
        raise ValidationFailed("give the jobs to compare as ids=1,2,3 (job ids)", field="ids")
    ids = list(dict.fromkeys(int(p) for p in parts))
    if len(ids) > MAX_COMPARED:
        raise ValidationFailed(f"compare at most {MAX_COMPARED} jobs at once (got {len(ids)})", field="ids")
    async with cx.ctx.db.read() as session:
        views = [await jobs.get_job(session, cx.actor, job_id) for job_id in ids]
    sources = [{"label": f"#{v.job.id} {v.job.name}", "url": f"/api/v1/jobs/{v.job.id}/metrics"} for v in views]
    return render(
        cx, "jobs/compare.html", active="jobs", title="Compare jobs", views=views, sources=sources, badges=BADGES
    )


@router.get("/jobs/{job_id:int}")
async def job_page(job_id: Id, cx: Page) -> Response:
    return await _detail(cx, job_id)


@router.post("/jobs/{job_id:int}/stop")
async def stop_job(job_id: Id, post: Post) -> Response:
    cx = post.cx
    force = post.get("force") == "on" and cx.is_platform_admin
    try:
        async with cx.ctx.db.write() as session:
            view = await (jobs.force_stop if force else jobs.stop_job)(session, cx.actor, job_id)
    except AicenterError as exc:
        return await _detail(cx, job_id, forms=[message_form("job-stop", exc)], status=exc.status)
    done = view.job.status in FINISHED
    return redirect(cx, f"/jobs/{job_id}", f"Job {view.job.name} " + ("was stopped." if done else "is stopping."))
