"""Notebooks in the console: the list, the create form, a notebook's page (open, stop, start, save, train from
here, delete, idle state, events, log) and its terminal.

Addresses: ``/notebooks/{id}/...`` (with anything after the id) is the notebook proxy (JupyterLab itself,
``api/routers/notebook_proxy.py``, registered before the console), so the console uses only ``/notebooks``,
``/notebooks/new`` and ``/notebooks/{id}`` (the page; its forms POST to it with an ``action`` field), and the
terminal page at ``/notebook-terminal/{id}``.

Who sees what follows the service: members of the workspace and platform admins see the metadata; only the owner
gets the open buttons (JupyterLab, terminal, SSH), start and save; the owner and workspace admins stop, delete and
change the idle timeout; a platform admin outside the workspace force-stops.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.api.schemas.notebooks import NotebookOut
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, Conflict, Forbidden, ValidationFailed
from aicenter.core.jobs import JobStatus
from aicenter.core.quantity import format_memory
from aicenter.services import alerts, billing, catalog, jobs, notebooks
from aicenter.services.access import may_read_user_data
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form, parse_int
from aicenter.web.pickers import chosen_workspace_id, run_choices
from aicenter.web.routes.jobs import BADGES
from aicenter.web.security import add_page_headers, safe_next

router = APIRouter()

FORM_FIELDS = ("name", "workspace_id", "image", "algorithm", "datasets", "spec", "cpu", "memory", "gpu", "idle_timeout")
# The notebook spec's field paths -> the form's field names (errors are shown next to the field that holds them);
# what the jobs service checks after parsing (a spec's existence, its pools) names the job spec's paths.
ALIASES = {
    **{f"{prefix}resources.{key}": key for prefix in ("", "tasks[0].") for key in ("spec", "cpu", "memory", "gpu")},
    "resources": "spec",
    "tasks[0].resources": "spec",
    "idle_timeout_s": "idle_timeout",
    "workspace": "workspace_id",
}
SAVE_FIELDS = ("algorithm", "description")
ACTIONS = ("start", "stop", "save", "delete", "idle-timeout")
# Settled states: the page stops refreshing itself once a notebook is in one (and nobody asked it to stop).
SETTLED = frozenset({JobStatus.RUNNING.value, *(s.value for s in JobStatus if s.is_finished())})
FINISHED = frozenset(s.value for s in JobStatus if s.is_finished())
RESUMABLE = frozenset({JobStatus.STOPPED.value, JobStatus.FAILED.value})
# The culler's idle_since trails real use by up to one cull interval (a minute by default): less idle than this
# reads as "active" rather than a precise-looking "idle 0 min".
_ACTIVE_S = 60


def idle_label(nb: NotebookOut, now: datetime | None = None) -> str:
    """``idle 12 min`` (from the culler's ``idle_since``), ``active``, or ``—`` when it is not running."""
    if nb.status != JobStatus.RUNNING.value:
        return "—"
    if nb.idle_since is None:
        return "active"
    seconds = ((now or utcnow()) - _aware(nb.idle_since)).total_seconds()
    if seconds < _ACTIVE_S:
        return "active"
    if seconds < 3600:
        return f"idle {int(seconds // 60)} min"
    return f"idle {seconds / 3600:.1f} h".replace(".0 h", " h")


def _aware(value: datetime) -> datetime:
    """SQLite gives naive datetimes back; every time the platform stores is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def resources_label(resources: dict[str, Any]) -> str:
    """``cpu-1`` (a spec) or ``2 CPU, 4 GiB, 1 GPU``."""
    if resources.get("spec"):
        return str(resources["spec"])
    parts = []
    if resources.get("cpu") not in (None, ""):
        parts.append(f"{resources['cpu']} CPU")
    memory = resources.get("memory")
    if isinstance(memory, int) and memory > 0:
        parts.append(format_memory(memory))
    elif memory:
        parts.append(str(memory))
    if resources.get("gpu"):
        parts.append(f"{resources['gpu']} GPU")
    return ", ".join(parts) or "—"


def _forget(cx: Console, job_id: int) -> None:
    """This process's proxy drops its cached address at once (a stopped notebook is refused without a wait)."""
    gateway = getattr(cx.request.app.state, "notebook_gateway", None)
    if gateway is not None:
        gateway.forget(job_id)


def _member_workspace_id(cx: Console) -> int | None:
    return cx.workspace.id if cx.workspace is not None and cx.role is not None else None


# --- list ------------------------------------------------------------------------------------------------------


@router.get("/notebooks")
async def list_notebooks(cx: Page) -> Response:
    params = cx.request.query_params
    status = params.get("status", "").strip()
    user = params.get("user", "").strip()
    workspace_raw = params.get("workspace_id", "").strip()
    workspace_id = int(workspace_raw) if workspace_raw.isdigit() and len(workspace_raw) <= 18 else None
    async with cx.ctx.db.read() as session:
        page = await notebooks.list_notebooks(
            session,
            cx.actor,
            default_idle_s=cx.ctx.settings.notebook_idle_timeout_s,
            workspace_id=workspace_id,
            status=status or None,
            user=user or None,
            cursor=params.get("cursor") or None,
            limit=50,
        )
    rows = [NotebookOut.from_view(v) for v in page.items]
    now = utcnow()
    return render(
        cx,
        "notebooks/list.html",
        active="notebooks",
        title="Notebooks",
        rows=rows,
        idle={nb.id: idle_label(nb, now) for nb in rows},
        resources={nb.id: resources_label(nb.resources) for nb in rows},
        badges=BADGES,
        statuses=[s.value for s in JobStatus],
        status_filter=status,
        user=user,
        workspace_id=workspace_id,
        resumable=RESUMABLE,
        finished=FINISHED,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


# --- create ----------------------------------------------------------------------------------------------------


async def _new(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    workspace_id = chosen_workspace_id(forms, _member_workspace_id(cx))
    async with cx.ctx.db.read() as session:
        choices = await run_choices(session, cx.actor, workspace_id)
    return render(
        cx,
        "notebooks/new.html",
        active="notebooks",
        title="New notebook",
        forms=forms,
        status=status,
        choices=choices,
        workspace_id=workspace_id,
        default_idle_min=cx.ctx.settings.notebook_idle_timeout_s // 60,
        selected_datasets=set(next((s.values.get("datasets_list", "") for s in forms or []), "").split("\n")),
    )


@router.get("/notebooks/new")
async def new_notebook(cx: Page) -> Response:
    return await _new(cx)


def idle_timeout_s(raw: str, field: str = "idle_timeout") -> int | None:
    """Minutes typed in a form -> seconds: blank is the default (None), 0 never culls."""
    minutes = parse_int(raw, field)
    if minutes is None:
        return None
    if minutes < 0:
        raise ValidationFailed("must be 0 (never) or a number of minutes", field=field)
    return minutes * 60


def spec_from_form(post: Post) -> dict[str, Any]:
    """The notebook spec the form describes, as ``aicenter notebook create`` sends it (the service checks it)."""
    resources: dict[str, Any]
    if post.get("spec"):
        resources = {"spec": post.get("spec")}
    else:
        resources = {"cpu": post.get("cpu"), "memory": post.get("memory")}
        gpu = parse_int(post.get("gpu"), "gpu")
        if gpu:
            resources["gpu"] = gpu
    spec: dict[str, Any] = {"name": post.get("name"), "image": post.get("image") or "host", "resources": resources}
    if post.get("algorithm"):
        spec["algorithm"] = post.get("algorithm")
    datasets = [d for d in post.data.getlist("datasets") if isinstance(d, str) and d.strip()]
    if datasets:
        spec["datasets"] = datasets
    timeout = idle_timeout_s(post.get("idle_timeout"))
    if timeout is not None:
        spec["idle_timeout_s"] = timeout
    return spec


@router.post("/notebooks/new")
async def create_notebook(post: Post) -> Response:
    cx = post.cx
    values = dict(post.values)
    # Several datasets are selected at once; the re-rendered form needs all of them, not the last one.
    values["datasets_list"] = "\n".join(d for d in post.data.getlist("datasets") if isinstance(d, str))
    try:
        workspace_id = parse_int(post.get("workspace_id"), "workspace_id")
        spec = spec_from_form(post)
        async with cx.ctx.db.write() as session:
            job_id = await notebooks.create_notebook(session, cx.actor, spec, workspace_id=workspace_id)
    except AicenterError as exc:
        if isinstance(exc, Conflict) and "notebook_id" in exc.details:
            state = FormState("notebook-new", values, errors={"name": exc.message})  # the name is taken
        else:
            state = failed_form("notebook-new", values, exc, FORM_FIELDS, aliases=ALIASES)
        return await _new(cx, forms=[state], status=exc.status)
    return redirect(cx, f"/notebooks/{job_id}", f"Notebook {spec['name']} was created; it starts in a moment.")


# --- one notebook ----------------------------------------------------------------------------------------------


async def _detail(cx: Console, job_id: int, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        view = await notebooks.get_notebook(
            session, cx.actor, job_id, default_idle_s=cx.ctx.settings.notebook_idle_timeout_s
        )
        logs_readable = await may_read_user_data(session, cx.actor, view.job.job.workspace_id)
        cluster = await alerts.list_events(session, cx.actor, job_id=job_id, limit=50)
        saved_id = view.notebook.saved_version_id
        saved = (await catalog.version_links(session, cx.actor, [saved_id])).get(saved_id) if saved_id else None
        cost = await billing.job_cost(session, job_id, utcnow())
    nb = NotebookOut.from_view(view)
    job = view.job.job
    # One timeline: the job's status changes and the culler's warnings and culls, oldest first.
    events: list[dict[str, Any]] = [
        {"at": e.at, "what": f"{e.from_status or '—'} → {e.to_status}", "by": e.actor_name, "message": e.message}
        for e in view.job.events
    ]
    events += [{"at": e.at, "what": e.kind, "by": "platform", "message": e.message} for e in cluster.items]
    events.sort(key=lambda e: _aware(e["at"]))
    can_admin = view.is_owner or cx.can_admin_workspace(job.workspace_id)
    return render(
        cx,
        "notebooks/detail.html",
        active="notebooks",
        title=nb.name,
        forms=forms,
        status=status,
        nb=nb,
        job=job,
        view=view,
        events=events,
        saved=saved,
        idle=idle_label(nb),
        resources=resources_label(nb.resources),
        badges=BADGES,
        running=nb.status == JobStatus.RUNNING.value,
        stopping=job.stop_requested_at is not None and nb.status not in FINISHED,
        settled=nb.status in SETTLED and job.stop_requested_at is None,
        finished=nb.status in FINISHED,
        resumable=nb.status in RESUMABLE,
        can_admin=can_admin,  # stop, delete, idle timeout
        logs_readable=logs_readable,
        default_idle_min=view.idle_timeout_s // 60,
        cost=cost,
    )


@router.get("/notebooks/{job_id:int}")
async def notebook_page(job_id: Id, cx: Page) -> Response:
    return await _detail(cx, job_id)


@router.post("/notebooks/{job_id:int}")
async def notebook_action(job_id: Id, post: Post) -> Response:
    """The page's buttons: ``action`` is start, stop, save, delete or idle-timeout. (Not ``/notebooks/{id}/stop``:
    every path below ``/notebooks/{id}/`` is JupyterLab's, through the proxy.)"""
    cx = post.cx
    action = post.get("action")
    if action not in ACTIONS:
        raise ValidationFailed(f"unknown action {action!r}; one of {', '.join(ACTIONS)}", field="action")
    back = safe_next(post.get("next"), f"/notebooks/{job_id}")
    form = f"notebook-{action}"
    try:
        if action == "save":
            return await _save(post, job_id)
        async with cx.ctx.db.write() as session:
            if action == "start":
                await notebooks.start_notebook(session, cx.actor, job_id)
                message = "The notebook is starting."
            elif action == "stop":
                try:
                    await notebooks.stop_notebook(session, cx.actor, job_id)
                except Forbidden:
                    if not cx.is_platform_admin:
                        raise
                    # Neither its owner nor an admin of its workspace: a platform admin's stop is a force-stop.
                    await jobs.force_stop(session, cx.actor, job_id)
                message = "The notebook is stopping; its work dir is kept."
            elif action == "delete":
                await notebooks.delete_notebook(session, cx.actor, job_id, cx.ctx.settings.jobs_path)
                back, message = "/notebooks", "The notebook and its work dir were deleted."
            else:
                timeout = idle_timeout_s(post.get("idle_timeout"))
                await notebooks.set_idle_timeout(session, cx.actor, job_id, timeout)
                message = "The idle timeout was changed."
    except AicenterError as exc:
        if action == "idle-timeout":
            state = failed_form(form, post.values, exc, ("idle_timeout",), aliases={"idle_timeout_s": "idle_timeout"})
        else:
            state = message_form(form, exc)
        return await _detail(cx, job_id, forms=[state], status=exc.status)
    _forget(cx, job_id)
    return redirect(cx, back, message)


async def _save(post: Post, job_id: int) -> Response:
    """Save the work dir as an algorithm version; the flash names the new version (``name:n``)."""
    cx = post.cx
    try:
        saved = await notebooks.save_notebook(
            cx.ctx.db,
            cx.ctx.store,
            cx.actor,
            job_id,
            jobs_path=cx.ctx.settings.jobs_path,
            algorithm=post.get("algorithm") or None,
            description=post.get("description"),
        )
    except AicenterError as exc:
        state = failed_form("notebook-save", post.values, exc, SAVE_FIELDS)
        return await _detail(cx, job_id, forms=[state], status=exc.status)
    links = f" ({saved.skipped_links} symbolic links left out)" if saved.skipped_links else ""
    return redirect(cx, f"/notebooks/{job_id}", f"Saved as algorithm version {saved.reference}{links}.")


# --- terminal --------------------------------------------------------------------------------------------------

# xterm.js sizes its rows and colours with <style> elements it writes at run time, which the console's default
# policy (style-src 'self') blocks; this page alone also allows inline styles. Scripts stay 'self' only.
TERMINAL_CSP = (
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@router.get("/notebook-terminal/{job_id:int}")
async def terminal_page(job_id: Id, cx: Page) -> Response:
    """A shell in the notebook's work dir: xterm.js on a JupyterLab terminal through the proxy (owner only)."""
    async with cx.ctx.db.read() as session:
        view = await notebooks.get_notebook(
            session, cx.actor, job_id, default_idle_s=cx.ctx.settings.notebook_idle_timeout_s
        )
    notebooks.require_owner(cx.actor, view.job.job, "open")
    nb = NotebookOut.from_view(view)
    response = render(
        cx,
        "notebooks/terminal.html",
        active="notebooks",
        title=f"{nb.name}: terminal",
        nb=nb,
        running=nb.status == JobStatus.RUNNING.value,
        base=jobs.notebook_base_url(nb.id),
        badges=BADGES,
    )
    add_page_headers(response)
    response.headers["Content-Security-Policy"] = TERMINAL_CSP
    return response
