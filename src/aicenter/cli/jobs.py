"""``aicenter job ...``: submit a spec file, follow a job, read its logs, stop, resubmit; job templates.

The spec is sent as written; the server checks it with the one parser every client shares, so an error reads the
same in the CLI, the API and the console and names the exact field (``tasks[0].resources.memory: ...``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aicenter.cli import output as out
from aicenter.cli.common import (
    CliError,
    Output,
    OutputOpt,
    YesOpt,
    chosen_workspace,
    client,
    confirm,
    invalid,
    pick,
    read_text_file,
)

if TYPE_CHECKING:
    from aicenter.client import Client, Cost
    from aicenter.client.models import Job

job_app = typer.Typer(help="Training jobs: submit, list, inspect, follow logs, stop, resubmit.", no_args_is_help=True)
template_app = typer.Typer(help="Saved job specs, submitted later with --set changes.", no_args_is_help=True)
job_app.add_typer(template_app, name="template")

FINISHED = frozenset({"succeeded", "failed", "stopped"})
POLL_S = 0.5  # how often --follow looks at a job that has no output yet; a job starts in well under a second

JobArg = Annotated[
    str, typer.Argument(help="The job's id, or its name in the workspace (the newest job of that name).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="PATH=VALUE change applied before the spec is checked, e.g. tasks[0].replicas=4."),
]
WorkspaceOpt = Annotated[
    str | None,
    typer.Option("--workspace", "-w", help="Workspace name or id. Default: `aicenter workspace use`'s, if set."),
]
TaskOpt = Annotated[str | None, typer.Option("--task", "-t", help="The task (default: the job's first).")]
ReplicaOpt = Annotated[int | None, typer.Option("--replica", "-r", help="The replica index within the task.")]

_JOB_COLUMNS: list[out.Column] = [
    ("ID", lambda j: j.id),
    ("NAME", lambda j: j.name),
    ("KIND", lambda j: j.kind),
    ("STATUS", lambda j: _status(j)),
    ("WORKSPACE", lambda j: j.workspace_name),
    ("USER", lambda j: j.username),
    ("REPLICAS", lambda j: sum(int(t.get("replicas", 1)) for t in j.spec.get("tasks", []))),
    ("SUBMITTED", lambda j: j.submitted_at),
    ("REASON", lambda j: j.pending_reason if j.status == "queued" else j.message),
]
JOB_DETAIL: list[out.Column] = [
    ("id", lambda j: j.id),
    ("name", lambda j: j.name),
    ("kind", lambda j: j.kind),
    ("status", lambda j: _status(j)),
    ("pending reason", lambda j: j.pending_reason),
    ("message", lambda j: j.message),
    ("workspace", lambda j: j.workspace_name),
    ("user", lambda j: j.username),
    ("pool", lambda j: j.pool_name),
    ("image", lambda j: j.spec.get("image")),
    ("algorithm", lambda j: j.spec.get("algorithm")),
    ("datasets", lambda j: ", ".join(j.spec.get("datasets", []))),
    ("framework", lambda j: j.spec.get("framework")),
    ("restarts", lambda j: j.restart_count),
    ("submitted", lambda j: j.submitted_at),
    ("started", lambda j: _started(j)),
    ("finished", lambda j: j.finished_at),
]
_TASK_COLUMNS: list[out.Column] = [
    ("TASK", lambda t: t.get("name")),
    ("REPLICAS", lambda t: t.get("replicas", 1)),
    ("RESOURCES", lambda t: resources_text(t.get("resources", {}))),
    ("COMMAND", lambda t: t.get("command")),
]
REPLICA_COLUMNS: list[out.Column] = [
    ("TASK", lambda r: r.task),
    ("REPLICA", lambda r: r.index),
    ("ATTEMPT", lambda r: r.attempt),
    ("STATUS", lambda r: r.status),
    ("NODE", lambda r: r.node_name),
    ("DEVICES", lambda r: ",".join(str(d) for d in r.devices)),
    ("CPU", lambda r: out.cores(r.cpu_milli)),
    ("MEMORY", lambda r: out.size(r.memory_bytes)),
    ("EXIT", lambda r: r.exit_code),
    ("REASON", lambda r: r.reason),
    ("STARTED", lambda r: r.started_at),
    ("FINISHED", lambda r: r.finished_at),
]
EVENT_COLUMNS: list[out.Column] = [
    ("AT", lambda e: e.at),
    ("FROM", lambda e: e.from_status or "-"),
    ("TO", lambda e: e.to_status),
    ("BY", lambda e: e.actor_name),
    ("REASON", lambda e: e.reason),
    ("MESSAGE", lambda e: e.message),
]
_TEMPLATE_COLUMNS: list[out.Column] = [
    ("ID", lambda t: t.id),
    ("NAME", lambda t: t.name),
    ("WORKSPACE", lambda t: t.workspace_name),
    ("BY", lambda t: t.username),
    ("UPDATED", lambda t: t.updated_at),
    ("DESCRIPTION", lambda t: t.description),
]


def _status(job: Job) -> str:
    if job.failure_reason and job.status in ("failed", "stopped"):
        code = f"exit {job.exit_code}" if job.exit_code not in (None, 0) else ""
        # "stopped (stopped)" says nothing twice: the reason is shown only when it adds something.
        detail = ", ".join(p for p in (job.failure_reason if job.failure_reason != job.status else "", code) if p)
        return f"{job.status} ({detail})" if detail else job.status
    return job.status


def _model_reference(api: Client, version_id: int) -> str:
    """``linreg-model:1`` for the saved output model version (by id), as it is written in specs."""
    from aicenter.client import ApiError

    try:
        return api.resolve("model", f"#{version_id}").ref
    except ApiError:  # deleted since, or not visible to me
        return f"#{version_id}"


def _started(job: Job) -> Any:
    """When the job started; one that failed while starting never ran, but its replicas did start."""
    return job.started_at or min((r.started_at for r in job.replicas if r.started_at), default=None)


def resources_text(values: dict[str, Any]) -> str:
    if "spec" in values:
        return f"spec={values['spec']}"
    shown = []
    for key, value in values.items():
        shown.append(f"{key}={out.size(value) if key == 'memory' and isinstance(value, int) else value}")
    return " ".join(shown)


def _job_id(api: Client, ref: str, workspace: str | None) -> int:
    """The id of job ``ref``: a number (or ``#number``) is an id; anything else is a name, and names repeat
    (every resubmit keeps the name), so it means the newest job of that name in the workspace."""
    bare = ref.removeprefix("#")
    if bare.isdigit():
        return int(bare)
    ws = chosen_workspace(api, workspace)
    newest = next(iter(api.list_jobs(name=ref, workspace_id=ws)), None)
    if newest is None:
        where = "your workspaces" if ws is None else "the workspace"
        raise CliError("not_found", f"no job named {ref!r} in {where} (`aicenter job list` shows them)")
    return newest.id


def _names_workspace(text: str, overrides: list[str] | None) -> bool:
    """Whether the spec (or a ``--set``) names its workspace: it then wins over the profile's default one."""
    from aicenter.core.errors import AicenterError
    from aicenter.core.jobs import load_document

    if any(o.partition("=")[0].strip() == "workspace" for o in overrides or ()):
        return True
    try:
        document = load_document(text)
    except AicenterError:
        return False  # the server reports the syntax error, with its line
    return isinstance(document, dict) and document.get("workspace") is not None


EXAMPLE_SPEC = """\
# A job spec: `aicenter job submit job.yaml` sends it; every field is described in docs/jobs.md.
# Lines starting with # are comments: uncomment a field to use it.
kind: train
name: my-first-job                # lower-case letters, digits, '.', '_', '-'; `aicenter job get my-first-job`
# workspace: vision               # default: -w, else `aicenter workspace use`, else your default workspace
# image: pytorch-cpu:1            # a catalog image version; default "host": the server's own Python
# algorithm: my-code:1            # your code (`aicenter algorithm push DIR -n my-code`), at $AICENTER_CODE_DIR
# datasets: [my-data:1]           # read-only under $AICENTER_DATA_DIR/<name>
# framework: pytorch              # pytorch | tensorflow | paddle | mindspore | mpi | none (default)
tasks:
  - name: worker
    replicas: 1                   # processes, each on one node with the resources below
    resources: {cpu: 1, memory: 1Gi}  # or {spec: NAME} from `aicenter spec list`; GPUs: gpu: 1, gpu_type: ...
    command: >-
      python -c "import platform; print('hello from', platform.node())"
# env: {EPOCHS: "3"}              # environment variables of every replica
# priority: normal                # low | normal | high | urgent
# retry: {max_restarts: 3, on: [node_lost, error, preempted]}
# output_model: my-model          # files left in $AICENTER_OUTPUT_DIR become a version of this model
"""


# -- following -------------------------------------------------------------------------------------------------


def _launched_attempt(job: Job, task: str | None, replica: int | None) -> int | None:
    """The latest attempt of the followed replica that has been launched (None: none yet)."""
    name = task or next((t.get("name", "worker") for t in job.spec.get("tasks", [])), "worker")
    attempts = [
        r.attempt
        for r in job.replicas
        if r.task == name and r.index == (replica or 0) and (r.status != "pending" or r.started_at)
    ]
    return max(attempts, default=None)


def stream_logs(api: Client, job_id: int, task: str | None, replica: int | None, follow: bool) -> None:
    """Print a replica's log; with ``follow`` until the job ends, across restarts (each attempt has its own log).

    A followed stream can end before the job does (the replica restarts, or it was read just as it launched):
    it is then read again from the byte it stopped at, or from the start of a new attempt's log.
    """
    from aicenter.client import ApiError

    if not follow:
        for line in api.job_logs(job_id, task=task, replica=replica):
            typer.echo(line)
        return
    offset, attempt = 0, None
    while True:
        job = api.get_job(job_id)
        launched = _launched_attempt(job, task, replica)
        if launched is not None and launched != attempt:
            if attempt is not None:
                typer.echo(f"--- attempt {launched} ---", err=True)
            offset, attempt = 0, launched
        if attempt is not None:
            try:
                for line in api.job_logs(
                    job_id, task=task, replica=replica, attempt=attempt, since=offset, follow=job.status not in FINISHED
                ):
                    typer.echo(line)
                    offset += len(line.encode()) + 1
            except ApiError as exc:
                if exc.code != "conflict":  # launched a moment ago: its output is not there yet
                    raise
        if job.status in FINISHED:
            return
        time.sleep(POLL_S)


def _follow(api: Client, job_id: int, task: str | None = None, replica: int | None = None) -> int:
    """Stream the logs until the job ends; the exit status is 0 when it succeeded, else 1."""
    stream_logs(api, job_id, task, replica, follow=True)
    job = api.get_job(job_id)
    typer.echo(f"job {job.id} {_status(job)}", err=True)
    return 0 if job.status == "succeeded" else 1


# -- commands --------------------------------------------------------------------------------------------------


@job_app.command("init")
def init(
    path: Annotated[Path, typer.Argument(help="Where to write it; - prints it.")] = Path("job.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite the file if it exists.")] = False,
) -> None:
    """Write a commented example job spec to edit and submit."""
    if str(path) == "-":
        typer.echo(EXAMPLE_SPEC, nl=False)
        return
    if path.exists() and not force:
        raise CliError("conflict", f"{path} exists; pass --force to overwrite it", exit_code=1)
    try:
        path.write_text(EXAMPLE_SPEC, encoding="utf-8")
    except OSError as exc:
        raise invalid("PATH", f"{path}: cannot be written ({exc})") from None
    typer.echo(f"Wrote {path}: edit it, then `aicenter job submit {path}`.")


@job_app.command("submit", epilog="`aicenter job init` writes a commented example spec; docs/jobs.md has every field.")
def submit(
    spec: Annotated[Path, typer.Argument(help="The job spec (YAML or JSON); - reads standard input.")],
    set_: SetOpt = None,
    workspace: WorkspaceOpt = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Then stream the first replica's logs until the job ends.")
    ] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a job from a spec file (`aicenter job init` writes an example to start from)."""
    text = read_text_file(spec, "SPEC")
    with client() as api:
        ws = None if not workspace and _names_workspace(text, set_) else chosen_workspace(api, workspace)
        job = api.submit_job(text, set_ or (), workspace_id=ws)
        if follow:
            typer.echo(f"job {job.id} {job.status}", err=True)
            raise typer.Exit(_follow(api, job.id))
    out.show(job, output, JOB_DETAIL if output is Output.table else None)


@job_app.command("list")
def list_(
    status: Annotated[str | None, typer.Option(help="A status, or several separated by commas.")] = None,
    workspace: WorkspaceOpt = None,
    user: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    kind: Annotated[str | None, typer.Option(help="train, notebook or trial.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many (newest first).")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Jobs of your workspaces, newest first (platform admins: every workspace's)."""
    if limit < 1:
        raise invalid("--limit", "must be at least 1")
    with client() as api:
        ws = chosen_workspace(api, workspace)
        jobs = api.list_jobs(status=status, workspace_id=ws, user=user, kind=kind)
        shown = [job for _, job in zip(range(limit), jobs, strict=False)]
    out.show(shown, output, _JOB_COLUMNS)


def _cost_label(cost: Cost) -> str:
    so_far = f" so far (estimated; {cost.charged:.2f} charged)" if cost.estimated else ""
    return f"{cost.amount:.2f} coins, {cost.machine_hours} machine-hours{so_far}"


@job_app.command("get")
def get(job: JobArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """A job: status and pending reason, tasks, replicas (node, devices), events."""
    with client() as api:
        found = api.get_job(_job_id(api, job, workspace))
        saved = None
        if output is Output.table and found.output_model_version_id is not None:
            saved = _model_reference(api, found.output_model_version_id)
        cost = api.job_cost(found.id) if output is Output.table else None
    if output is not Output.table:
        out.show(found, output)
        return
    detail = [*JOB_DETAIL, ("output model", lambda j: saved)] if saved else list(JOB_DETAIL)
    if cost is not None:
        detail.append(("cost", lambda j: _cost_label(cost)))
    out.show(found, output, detail)
    for title, rows, columns in (
        ("Tasks", found.spec.get("tasks", []), _TASK_COLUMNS),
        ("Replicas", found.replicas, REPLICA_COLUMNS),
        ("Events", found.events, EVENT_COLUMNS),
    ):
        typer.echo(f"\n{title}")
        out.show(list(rows), output, columns)


@job_app.command("logs")
def logs(
    job: JobArg,
    task: TaskOpt = None,
    replica: ReplicaOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the replica ends.")] = False,
    attempt: Annotated[
        int | None,
        typer.Option(
            "--attempt", "-a", min=0, help="An earlier run's log: 0 is the first (default: the latest launched)."
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """A replica's output, each line prefixed by its UTC time."""
    with client() as api:
        job_id = _job_id(api, job, workspace)
        if attempt is not None:
            if follow:
                raise CliError("validation_failed", "--attempt reads a finished run's log; it cannot be --follow'ed")
            for line in api.job_logs(job_id, task=task, replica=replica, attempt=attempt):
                typer.echo(line)
            return
        stream_logs(api, job_id, task, replica, follow)


@job_app.command("events")
def events(job: JobArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """The job's status changes: when, from, to, by whom, why."""
    with client() as api:
        out.show(api.job_events(_job_id(api, job, workspace)), output, EVENT_COLUMNS)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


_LATEST_COLUMNS: list[out.Column] = [
    ("METRIC", lambda row: row[0]),
    ("VALUE", lambda row: _number(row[1].value)),
    ("STEP", lambda row: row[1].step),
    ("AT", lambda row: row[1].at),
]
_POINT_COLUMNS: list[out.Column] = [
    ("STEP", lambda p: p.step),
    ("VALUE", lambda p: _number(p.value)),
    ("AT", lambda p: p.at),
]


@job_app.command("metrics")
def metrics(
    job: JobArg,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Print this metric's whole series.")] = None,
    task: TaskOpt = None,
    replica: ReplicaOpt = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """What the job reported with `aicenter.runtime.report`: the latest value of every metric, or one series."""
    with client() as api:
        job_id = _job_id(api, job, workspace)
        if name is not None:
            points = list(api.job_metric_series(job_id, name, task=task, replica=replica))
            out.show(points, output, _POINT_COLUMNS)
            return
        page = api.job_metrics(job_id, task=task, replica=replica, limit=1)
    if output is not Output.table:
        summary = {k: v for k, v in page.to_json().items() if k in ("job_id", "task", "replica", "reporting", "latest")}
        out.show(summary, output)
        return
    if not page.latest:
        typer.echo(f"job {job_id} has reported no metrics (aicenter.runtime.report) so far")
        return
    others = [r for r in page.reporting if r != f"{page.task}-{page.replica}"]
    if others:
        typer.echo(f"replica {page.task}-{page.replica} (also reporting: {', '.join(others)}; see --task/--replica)")
    out.show(sorted(page.latest.items()), output, _LATEST_COLUMNS)


@job_app.command("stop")
def stop(
    job: JobArg,
    force: Annotated[bool, typer.Option("--force", help="As a platform admin: stop any job.")] = False,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Stop a job: its replicas get SIGTERM, then SIGKILL after a grace period."""
    with client() as api:
        job_id = _job_id(api, job, workspace)
        stopped = api.force_stop_job(job_id) if force else api.stop_job(job_id)
    if output is Output.table:
        typer.echo(f"job {stopped.id} {_status(stopped)}" + ("" if stopped.status in FINISHED else " (stopping)"))
    else:
        out.show(stopped, output)


@job_app.command("resubmit")
def resubmit(
    job: JobArg,
    set_: SetOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Then stream its logs until it ends.")] = False,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a copy of a job (to its workspace), with --set changes."""
    with client() as api:
        new = api.resubmit_job(_job_id(api, job, workspace), set_ or ())
        if follow:
            typer.echo(f"job {new.id} {new.status}", err=True)
            raise typer.Exit(_follow(api, new.id))
    out.show(new, output, JOB_DETAIL if output is Output.table else None)


@job_app.command("delete")
def delete(job: JobArg, workspace: WorkspaceOpt = None, yes: YesOpt = False, output: OutputOpt = Output.table) -> None:
    """Delete a finished job and its records."""
    with client() as api:
        job_id = _job_id(api, job, workspace)
        confirm(f"Delete job {job_id}" + ("?" if job.removeprefix("#") == str(job_id) else f" ({job})?"), yes)
        api.delete_job(job_id)
    out.done(f"Deleted job {job_id}.", output)


# -- templates -------------------------------------------------------------------------------------------------


def _template(api: Client, ref: str, workspace: str | None) -> int:
    ws = chosen_workspace(api, workspace)
    return pick("template", ref, api.list_templates(workspace_id=ws), lambda t: t.name, lambda t: t.id).id


@template_app.command("save")
def template_save(
    name: Annotated[str, typer.Argument(help="The template's name, unique in its workspace.")],
    spec: Annotated[Path, typer.Argument(help="The job spec (YAML or JSON); - reads standard input.")],
    set_: SetOpt = None,
    workspace: WorkspaceOpt = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Save a spec file as a template (it is checked like a submission)."""
    from aicenter.client import UNSET

    text = read_text_file(spec, "SPEC")
    source: str | dict[str, Any] = text
    if set_:  # the API saves specs as given: the changes are applied here, by the parser the server uses
        from aicenter.core.jobs import apply_overrides, load_document

        document = load_document(text)
        if not isinstance(document, dict):
            raise invalid("SPEC", "a job spec is a mapping of fields (kind, name, tasks, ...)")
        source = apply_overrides(document, set_)
    with client() as api:
        ws = None if not workspace and _names_workspace(text, set_) else chosen_workspace(api, workspace)
        saved = api.create_template(
            name,
            source,
            workspace_id=ws,
            description=description if description is not None else UNSET,
        )
    out.show(saved, output, _TEMPLATE_COLUMNS[:5] if output is Output.table else None)


@template_app.command("list")
def template_list(workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Templates of your workspaces."""
    with client() as api:
        ws = chosen_workspace(api, workspace)
        out.show(list(api.list_templates(workspace_id=ws)), output, _TEMPLATE_COLUMNS)


@template_app.command("submit")
def template_submit(
    template: Annotated[str, typer.Argument(help="The template's name or id.")],
    set_: SetOpt = None,
    workspace: WorkspaceOpt = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Then stream its logs until it ends.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Submit a job from a template, with --set changes."""
    with client() as api:
        job = api.submit_template(_template(api, template, workspace), set_ or ())
        if follow:
            typer.echo(f"job {job.id} {job.status}", err=True)
            raise typer.Exit(_follow(api, job.id))
    out.show(job, output, JOB_DETAIL if output is Output.table else None)


@template_app.command("delete")
def template_delete(
    template: Annotated[str, typer.Argument(help="The template's name or id.")],
    workspace: WorkspaceOpt = None,
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Delete a template."""
    confirm(f"Delete template {template!r}?", yes)
    with client() as api:
        api.delete_template(_template(api, template, workspace))
    out.done(f"Deleted template {template!r}.", output)
