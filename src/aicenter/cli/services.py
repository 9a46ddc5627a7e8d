"""``aicenter service ...``: inference services (a model version served over Open Inference Protocol v2).

A service is named by its name, looked up in ``--workspace``'s workspace, else the profile's, else the user's
default workspace (names are unique per workspace), or by its id. Its replicas are jobs of kind ``service``:
``aicenter service logs`` reads their logs through the jobs log API.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aicenter.cli import output as out
from aicenter.cli.common import (
    CliError,
    Output,
    OutputOpt,
    YesOpt,
    client,
    confirm,
    invalid,
    read_text_file,
    workspace_id,
)
from aicenter.cli.jobs import WorkspaceOpt, stream_logs
from aicenter.cli.service_spec import (
    AlgorithmOpt,
    CommandOpt,
    ConcurrencyOpt,
    CpuOpt,
    EntryOpt,
    EnvOpt,
    GpuOpt,
    GpuTypeOpt,
    HeaderValueOpt,
    ImageOpt,
    MaxOpt,
    MemoryOpt,
    MinOpt,
    PoolOpt,
    ReadyPathOpt,
    ReadyTimeoutOpt,
    ResourcesSpecOpt,
    RuntimeOpt,
    load_spec,
    model_ref,
    revision_fields,
)

if TYPE_CHECKING:
    from aicenter.client import Client, Service

service_app = typer.Typer(
    help="Inference services: deploy a model version, split traffic between revisions, scale, keys, infer.",
    no_args_is_help=True,
)
keys_app = typer.Typer(help="A service's API keys (for callers outside the platform).", no_args_is_help=True)
service_app.add_typer(keys_app, name="keys")

ServiceArg = Annotated[str, typer.Argument(metavar="NAME_OR_ID", help="The service's name (in the workspace) or id.")]


def _running(s: Service) -> str:
    """Seconds since it first served as ``2d 3h``, ``4h 5m``, ``6m``; empty while stopped."""
    seconds = int(s.running_s)
    if seconds <= 0:
        return ""
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes}m" if hours else f"{minutes}m"


def _model_name(s: Service) -> str:
    return s.model.rpartition(":")[0] or s.model


def _model_version(s: Service) -> str:
    return s.model.rpartition(":")[2] if ":" in s.model else ""


def _columns(base_url: str) -> list[out.Column]:
    return [
        ("ID", lambda s: s.id),
        ("NAME", lambda s: s.name),
        ("MODEL", _model_name),
        ("VERSION", _model_version),
        ("DESCRIPTION", lambda s: s.description),
        ("CREATED", lambda s: s.created_at),
        ("RUNNING", _running),
        ("STATUS", lambda s: s.status),
        ("REPLICAS", lambda s: f"{s.replicas_ready}/{s.replicas_total}"),
        ("URL", lambda s: base_url + s.url),
    ]


def _detail(base_url: str) -> list[out.Column]:
    return [
        ("id", lambda s: s.id),
        ("name", lambda s: s.name),
        ("status", lambda s: s.status),
        ("message", lambda s: s.message),
        ("workspace", lambda s: s.workspace_name),
        ("user", lambda s: s.username),
        ("model", lambda s: s.model),
        ("runtime", lambda s: s.runtime),
        ("description", lambda s: s.description),
        ("replicas", lambda s: f"{s.replicas_ready} ready / {s.replicas_total}"),
        ("created", lambda s: s.created_at),
        ("running", _running),
        ("stopped", lambda s: s.stopped_at),
        ("url", lambda s: base_url + s.url),
        ("infer", lambda s: f"{base_url}{s.url}/v2/models/{s.name}/infer"),
    ]


_REVISIONS: list[out.Column] = [
    ("REVISION", lambda r: r.number),
    ("MODEL", lambda r: r.model),
    ("RUNTIME", lambda r: r.runtime),
    ("STATE", lambda r: r.state),
    ("TRAFFIC", lambda r: f"{r.traffic}%" + (f" -> {r.target_traffic}%" if r.target_traffic != r.traffic else "")),
    ("REPLICAS", lambda r: r.desired_replicas),
    ("MESSAGE", lambda r: r.message),
]
_REPLICAS: list[out.Column] = [
    ("JOB", lambda r: r.job_id),
    ("REVISION", lambda r: r.revision),
    ("STATUS", lambda r: r.status),
    ("READY", lambda r: r.ready),
    ("DRAINING", lambda r: r.draining),
    ("STARTED", lambda r: r.started_at),
]
_KEYS: list[out.Column] = [
    ("ID", lambda k: k.id),
    ("NAME", lambda k: k.name),
    ("PREFIX", lambda k: k.prefix),
    ("CREATED", lambda k: k.created_at),
]


def _service_id(api: Client, ref: str, workspace: str | None) -> int:
    """An id (digits or ``#digits``) as is; a name within the chosen (else default) workspace."""
    bare = ref.removeprefix("#")
    if bare.isdigit():
        return int(bare)
    ws = workspace_id(api, workspace)
    found = next((s for s in api.list_services(workspace_id=ws, name=ref) if s.name == ref), None)
    if found is None:
        raise CliError("not_found", f"no service named {ref!r} in the workspace (`aicenter service list` shows them)")
    return found.id


def _show(api: Client, svc: Service, output: Output) -> None:
    if output is not Output.table:
        out.show(svc, output)
        return
    out.show(svc, output, _detail(api.base_url))
    typer.echo("\nRevisions")
    out.show(list(svc.revisions), output, _REVISIONS)
    typer.echo("\nReplicas")
    out.show(list(svc.replicas), output, _REPLICAS)


# -- commands --------------------------------------------------------------------------------------------------


@service_app.command("deploy", epilog="Example: aicenter service deploy iris:1 --name iris --cpu 1 --memory 1Gi")
def deploy(
    model: Annotated[str | None, typer.Argument(metavar="MODEL:VERSION", help="The model version to serve.")] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="The service's name (its URL).")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="A YAML/JSON service file (options override it).")] = None,
    runtime: RuntimeOpt = None,
    entry: EntryOpt = None,
    image: ImageOpt = None,
    algorithm: AlgorithmOpt = None,
    command: CommandOpt = None,
    ready_path: ReadyPathOpt = None,
    pool: PoolOpt = None,
    resources_spec: ResourcesSpecOpt = None,
    cpu: CpuOpt = None,
    memory: MemoryOpt = None,
    gpu: GpuOpt = None,
    gpu_type: GpuTypeOpt = None,
    min_replicas: MinOpt = None,
    max_replicas: MaxOpt = None,
    target_concurrency: ConcurrencyOpt = None,
    ready_timeout: ReadyTimeoutOpt = None,
    env: EnvOpt = None,
    ab_header: Annotated[
        str | None, typer.Option(help="A request header whose value picks a revision (its --header-value).")
    ] = None,
    header_value: HeaderValueOpt = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Deploy a model version (or a custom server, --command) as a service: one replica starts at once and takes
    all traffic once ready."""
    data = load_spec(spec) if spec is not None else {}
    if model is not None:
        data["model"] = model_ref(model, "MODEL:VERSION")
    data.update({k: v for k, v in (("name", name), ("description", description), ("ab_header", ab_header)) if v})
    revision_fields(
        data, runtime=runtime, entry=entry, image=image, algorithm=algorithm, command=command, ready_path=ready_path,
        pool=pool, resources_spec=resources_spec, cpu=cpu, memory=memory, gpu=gpu, gpu_type=gpu_type,
        min_replicas=min_replicas, max_replicas=max_replicas, target_concurrency=target_concurrency,
        ready_timeout_s=ready_timeout, header_value=header_value, env=env,
    )  # fmt: skip
    if not data.get("name"):
        raise invalid("--name", "give the service a name (or `name:` in --spec)")
    if not data.get("model") and data.get("runtime") != "command":
        raise invalid("MODEL:VERSION", "give the model version to serve (or `model:` in --spec)")
    if not data.get("resources"):
        raise invalid("--cpu", "give --resources-spec NAME, or --cpu and --memory (or `resources:` in --spec)")
    with client() as api:
        ws = workspace_id(api, workspace) if workspace or not data.get("workspace") else None
        svc = api.deploy_service(data, workspace_id=ws)
        _show(api, svc, output)


@service_app.command("list")
def list_(
    workspace: WorkspaceOpt = None,
    status: Annotated[str | None, typer.Option(help="deploying, ready, updating, failed or stopped.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Services of the workspace (default: your default workspace), newest first."""
    with client() as api:
        ws = workspace_id(api, workspace)
        found = list(api.list_services(workspace_id=ws, status=status))
        out.show(found, output, _columns(api.base_url))


@service_app.command("get")
def get(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """A service: status, URL, revisions with their traffic and state, live replicas."""
    with client() as api:
        _show(api, api.get_service(_service_id(api, service, workspace)), output)


@service_app.command("update", epilog="Example: aicenter service update iris iris:2 --canary 10")
def update(
    service: ServiceArg,
    model: Annotated[str | None, typer.Argument(metavar="[MODEL:VERSION]", help="A new model version.")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="A YAML/JSON file of the fields to change.")] = None,
    canary: Annotated[
        int | None, typer.Option(min=0, max=99, help="Hold the new revision at this percent until promoted.")
    ] = None,
    steps: Annotated[int | None, typer.Option(min=1, max=100, help="Move traffic by this percent per step.")] = None,
    step_interval: Annotated[int | None, typer.Option(min=1, max=3600, help="Seconds between steps.")] = None,
    runtime: RuntimeOpt = None,
    entry: EntryOpt = None,
    image: ImageOpt = None,
    algorithm: AlgorithmOpt = None,
    command: CommandOpt = None,
    ready_path: ReadyPathOpt = None,
    pool: PoolOpt = None,
    resources_spec: ResourcesSpecOpt = None,
    cpu: CpuOpt = None,
    memory: MemoryOpt = None,
    gpu: GpuOpt = None,
    gpu_type: GpuTypeOpt = None,
    min_replicas: MinOpt = None,
    max_replicas: MaxOpt = None,
    target_concurrency: ConcurrencyOpt = None,
    ready_timeout: ReadyTimeoutOpt = None,
    header_value: HeaderValueOpt = None,
    env: EnvOpt = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Deploy a new revision (the current one with these changes); traffic moves to it once it is ready: all at
    once, by --steps, or held at --canary percent until `promote` or `rollback`."""
    data = load_spec(spec) if spec is not None else {}
    if model is not None:
        data["model"] = model_ref(model, "MODEL:VERSION")
    revision_fields(
        data, runtime=runtime, entry=entry, image=image, algorithm=algorithm, command=command, ready_path=ready_path,
        pool=pool, resources_spec=resources_spec, cpu=cpu, memory=memory, gpu=gpu, gpu_type=gpu_type,
        min_replicas=min_replicas, max_replicas=max_replicas, target_concurrency=target_concurrency,
        ready_timeout_s=ready_timeout, header_value=header_value, env=env,
    )  # fmt: skip
    if canary is not None and (steps is not None or step_interval is not None):
        raise invalid("--canary", "a canary holds its percent; --steps moves by steps: give one or the other")
    if step_interval is not None and steps is None:
        raise invalid("--step-interval", "goes with --steps PCT")
    if canary is not None:
        data["rollout"] = {"strategy": "canary", "canary_percent": canary}
    elif steps is not None:
        data["rollout"] = {"strategy": "steps", "step_percent": steps}
        if step_interval is not None:
            data["rollout"]["step_interval_s"] = step_interval
    if not data:
        raise invalid("MODEL:VERSION", "nothing to change: give a model version, --spec, an option or a rollout")
    with client() as api:
        _show(api, api.update_service(_service_id(api, service, workspace), data), output)


@service_app.command("traffic", epilog="Example: aicenter service traffic iris 1=90 2=10")
def traffic(
    service: ServiceArg,
    split: Annotated[list[str], typer.Argument(metavar="REVISION=PERCENT...", help="Percentages summing to 100.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Split traffic between ready revisions."""
    shares: dict[str, int] = {}
    for item in split:
        rev, sep, pct = item.partition("=")
        if not sep or not rev.strip().isdigit() or not pct.strip().isdigit():
            raise invalid("REVISION=PERCENT", f"expected REVISION=PERCENT (whole numbers), got {item!r}")
        shares[rev.strip()] = int(pct)
    if sum(shares.values()) != 100:
        raise invalid("REVISION=PERCENT", f"the percentages must sum to 100, not {sum(shares.values())}")
    with client() as api:
        _show(api, api.set_traffic(_service_id(api, service, workspace), shares), output)


def _action(action: str, service: str, workspace: str | None, output: Output) -> None:
    with client() as api:
        sid = _service_id(api, service, workspace)
        calls = {
            "promote": api.promote_service,
            "rollback": api.rollback_service,
            "stop": api.stop_service,
            "start": api.start_service,
        }
        svc = calls[action](sid)
    if output is Output.table:
        typer.echo(f"service {svc.id} ({svc.name}) {svc.status}" + (f": {svc.message}" if svc.message else ""))
    else:
        out.show(svc, output)


@service_app.command("promote")
def promote(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Send all traffic to the revision rolling out (a canary); the old revision drains and stops."""
    _action("promote", service, workspace, output)


@service_app.command("rollback")
def rollback(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Retire the revision rolling out: all traffic returns to the stable revision."""
    _action("rollback", service, workspace, output)


@service_app.command("stop")
def stop(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Stop it: replicas drain and stop; requests get 503 until `start`."""
    _action("stop", service, workspace, output)


@service_app.command("start")
def start(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Start a stopped service again."""
    _action("start", service, workspace, output)


@service_app.command("scale", epilog="Example: aicenter service scale iris --min 0 --max 4 --target-concurrency 8")
def scale(
    service: ServiceArg,
    min_replicas: Annotated[int | None, typer.Option("--min", min=0, max=100, help="0 allows scale to zero.")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max", min=1, max=100)] = None,
    target_concurrency: Annotated[
        float | None, typer.Option(help="In-flight requests per replica the autoscaler aims at.")
    ] = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Change the scale bounds or the target concurrency."""
    if min_replicas is None and max_replicas is None and target_concurrency is None:
        raise invalid("--min", "give --min, --max or --target-concurrency")
    if min_replicas is not None and max_replicas is not None and min_replicas > max_replicas:
        raise invalid("--min", f"{min_replicas} is above --max {max_replicas}")
    if target_concurrency is not None and target_concurrency <= 0:
        raise invalid("--target-concurrency", "must be above 0")
    with client() as api:
        svc = api.scale_service(
            _service_id(api, service, workspace),
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            target_concurrency=target_concurrency,
        )
        _show(api, svc, output)


@service_app.command("delete")
def delete(
    service: ServiceArg, workspace: WorkspaceOpt = None, yes: YesOpt = False, output: OutputOpt = Output.table
) -> None:
    """Delete a stopped service (its replica jobs stay, with their machine time)."""
    with client() as api:
        sid = _service_id(api, service, workspace)
        named = "" if service.removeprefix("#") == str(sid) else f" ({service})"
        confirm(f"Delete service {sid}{named}?", yes)
        api.delete_service(sid)
    out.done(f"Deleted service {sid}.", output)


@service_app.command("logs")
def logs(
    service: ServiceArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing (one replica: --job).")] = False,
    job: Annotated[int | None, typer.Option(help="Only this replica (its job id, from `service get`).")] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """The output of the service's live replicas (their job logs), each line prefixed by its UTC time."""
    from aicenter.client import ApiError

    with client() as api:
        svc = api.get_service(_service_id(api, service, workspace))
        jobs = [r.job_id for r in svc.replicas if job is None or r.job_id == job]
        if job is not None and not jobs:
            raise invalid("--job", f"job {job} is not a live replica of service {svc.name!r}")
        if not jobs:
            typer.echo(f"service {svc.name!r} has no live replica ({svc.status})", err=True)
            return
        if follow and len(jobs) > 1:
            raise invalid("--follow", f"{len(jobs)} replicas run: pick one with --job ({', '.join(map(str, jobs))})")
        for job_id in jobs:
            if len(jobs) > 1:
                typer.echo(f"--- job {job_id} ---", err=True)
            try:
                stream_logs(api, job_id, None, None, follow)
            except ApiError as exc:
                if exc.code != "conflict":  # conflict: the replica has not launched, so it has no log yet
                    raise
                typer.echo(f"replica job {job_id} has not launched yet: no logs so far", err=True)


@service_app.command("events")
def events(
    service: ServiceArg,
    limit: Annotated[int, typer.Option(min=1, max=500, help="Show at most this many (the newest).")] = 50,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """The service's history, newest first: deployed, updated, revisions ready or failed, traffic moves, scaling
    (with the autoscaler's reason), stopped, started."""
    with client() as api:
        shown = api.service_events(_service_id(api, service, workspace), limit=limit)
    out.show(shown, output, _EVENT_COLUMNS)


_EVENT_COLUMNS: list[out.Column] = [
    ("TIME", lambda e: e.at),
    ("KIND", lambda e: e.kind.removeprefix("service.")),
    # The log's message names the service for the cluster-wide list; here it is the one asked for.
    ("MESSAGE", lambda e: e.message.removeprefix(f"service {e.details.get('service')}: ")),
]


@service_app.command("infer", epilog="Example: aicenter service infer iris --input 'input=[[5.1, 3.5, 1.4, 0.2]]'")
def infer(
    service: ServiceArg,
    input_: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="NAME=JSON: a tensor as a (nested) JSON list; repeatable."),
    ] = None,
    body_file: Annotated[
        Path | None, typer.Option("--body", help="A v2 inference request (JSON file); - reads stdin.")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="AICENTER_SERVICE_KEY", help="A service API key (default: your token).")
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Call the service's v2 infer endpoint through the gateway and print the JSON answer."""
    if bool(input_) == (body_file is not None):
        raise invalid("--input", "give --input NAME=JSON (repeatable) or --body FILE, one of them")
    request: dict[str, Any]
    if body_file is not None:
        try:
            loaded = json.loads(read_text_file(body_file, "--body"))
        except json.JSONDecodeError as exc:
            raise invalid("--body", f"{body_file}: not JSON ({exc})") from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("inputs"), list):
            raise invalid("--body", 'a v2 request is an object with "inputs": [{name, shape, datatype, data}]')
        request = loaded
    else:
        from aicenter.client.inference import v2_tensor

        tensors = []
        for item in input_ or ():
            name, sep, text = item.partition("=")
            if not sep or not name.strip():
                raise invalid("--input", f"expected NAME=JSON, got {item!r}")
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise invalid("--input", f"{name}: not JSON ({exc.msg})") from None
            tensors.append(v2_tensor(name.strip(), value))
        request = {"inputs": tensors}
    from aicenter.client import ApiError

    with client() as api:
        svc = api.get_service(_service_id(api, service, workspace))
        url = f"{api.base_url}{svc.url}/v2/models/{svc.name}/infer"
        try:
            answer = api.infer_raw(svc, request, api_key=api_key)
        except ApiError as exc:
            if exc.status != 404 or exc.message.strip().lower() != "not found":
                raise
            # A bare 404 is the web server's, not the gateway's (which names what it misses): no gateway here.
            raise CliError(
                "not_found", f"{url}: nothing answers there (404); this server runs no serving gateway"
            ) from None
    typer.echo(json.dumps(answer, indent=2, ensure_ascii=False))


# -- keys ------------------------------------------------------------------------------------------------------


@keys_app.command("list")
def keys_list(service: ServiceArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """The service's live keys: names and prefixes."""
    with client() as api:
        out.show(api.list_service_keys(_service_id(api, service, workspace)), output, _KEYS)


@keys_app.command("create")
def keys_create(
    service: ServiceArg,
    name: Annotated[str, typer.Argument(metavar="KEYNAME", help="Who uses the key.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A new API key, printed this once (callers send it as `Authorization: Bearer <key>`)."""
    with client() as api:
        created = api.create_service_key(_service_id(api, service, workspace), name)
    if output is not Output.table:
        out.show(created, output)
        return
    typer.echo(created.key)
    typer.echo(f"Key {created.id} ({created.name}): shown this once, store it now; it cannot be shown again.", err=True)


@keys_app.command("revoke")
def keys_revoke(
    service: ServiceArg,
    key: Annotated[str, typer.Argument(metavar="KEY_ID_OR_NAME", help="The key's id or name.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Revoke a key: calls with it are refused within a second."""
    from aicenter.cli.common import pick

    with client() as api:
        sid = _service_id(api, service, workspace)
        found = pick("key", key, api.list_service_keys(sid), lambda k: k.name, lambda k: k.id)
        api.revoke_service_key(sid, found.id)
    out.done(f"Revoked key {found.id} ({found.name}).", output)
