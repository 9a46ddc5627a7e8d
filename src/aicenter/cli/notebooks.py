"""``aicenter notebook ...``: debug environments (JupyterLab in a sandbox, reached by browser or SSH).

A notebook is a job of kind ``notebook``, so its logs are the job's and ``aicenter job`` commands see it too. A
notebook is named by its id or by its name: names are unique per user and workspace, so a name means the
caller's own notebook of that name (in ``-w``'s workspace, else in any of theirs, newest first).
"""

from __future__ import annotations

import os
import shutil
import sys
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
    pairs,
    quantity,
    read_text_file,
)
from aicenter.cli.jobs import (
    EVENT_COLUMNS,
    FINISHED,
    JOB_DETAIL,
    REPLICA_COLUMNS,
    WorkspaceOpt,
    resources_text,
    stream_logs,
)
from aicenter.cli.notebook_ssh import known_hosts_path, ssh_argv, ssh_config_block, write_known_hosts

if TYPE_CHECKING:
    from aicenter.client import Client, Notebook

notebook_app = typer.Typer(
    help="Notebooks (debug environments): JupyterLab in a sandbox, opened in the browser or over SSH.",
    no_args_is_help=True,
)

MAX_IDLE_MINUTES = 30 * 24 * 60  # the server's limit, 30 days, in the unit the CLI takes

NotebookArg = Annotated[
    str, typer.Argument(metavar="NAME_OR_ID", help="The notebook's id, or the name of your own notebook.")
]


def _idle(nb: Notebook) -> str:
    if nb.idle_timeout_s == 0:
        return "never"
    minutes = f"{nb.idle_timeout_s // 60}m" if nb.idle_timeout_s % 60 == 0 else f"{nb.idle_timeout_s}s"
    return minutes if nb.own_idle_timeout_s is not None else f"{minutes} (default)"


def _resources(nb: Notebook) -> str:
    """``cpu=2 memory=4Gi``: a zero GPU count says nothing."""
    return resources_text({k: v for k, v in nb.resources.items() if not (k == "gpu" and not v)})


def _status(nb: Notebook) -> str:
    if nb.failure_reason and nb.status in ("failed", "stopped") and nb.failure_reason != nb.status:
        return f"{nb.status} ({nb.failure_reason})"
    return nb.status


_COLUMNS: list[out.Column] = [
    ("ID", lambda n: n.id),
    ("NAME", lambda n: n.name),
    ("STATUS", _status),
    ("WORKSPACE", lambda n: n.workspace_name),
    ("USER", lambda n: n.username),
    ("IMAGE", lambda n: n.image),
    ("RESOURCES", _resources),
    ("IDLE TIMEOUT", _idle),
    ("CULL AT", lambda n: n.cull_at),
    ("SUBMITTED", lambda n: n.submitted_at),
]
_DETAIL: list[out.Column] = [
    ("id", lambda n: n.id),
    ("name", lambda n: n.name),
    ("status", _status),
    ("message", lambda n: n.message),
    ("workspace", lambda n: n.workspace_name),
    ("user", lambda n: n.username),
    ("pool", lambda n: n.pool_name),
    ("image", lambda n: n.image),
    ("algorithm", lambda n: n.algorithm),
    ("datasets", lambda n: ", ".join(n.datasets)),
    ("resources", _resources),
    ("idle timeout", _idle),
    ("idle since", lambda n: n.idle_since),
    ("cull at", lambda n: n.cull_at),
    ("warned", lambda n: n.warned or None),
    ("culled at", lambda n: n.culled_at),
    ("saved at", lambda n: n.saved_at),
    ("starts", lambda n: n.restart_count + 1),
    ("submitted", lambda n: n.submitted_at),
    ("started", lambda n: n.started_at),
    ("finished", lambda n: n.finished_at),
    ("ssh host", lambda n: n.ssh_host),
]


def _detail(base_url: str) -> list[out.Column]:
    """The detail rows, with JupyterLab's full address (the API gives its path on the server)."""
    return [*_DETAIL, ("lab", lambda n: base_url + n.lab_url)]


def _notebook_id(api: Client, ref: str, workspace: str | None) -> int:
    """A number (or ``#number``) is an id; anything else is the name of one of the caller's own notebooks (in the
    chosen workspace; without one, a name found in several workspaces is refused rather than guessed)."""
    from aicenter.client import ApiError

    bare = ref.removeprefix("#")
    if bare.isdigit():
        return int(bare)
    ws = chosen_workspace(api, workspace)
    try:
        return api.notebook_by_name(ref, workspace_id=ws).id
    except ApiError as exc:
        if exc.code == "conflict":
            raise CliError("conflict", exc.message.replace("name the workspace", "pass --workspace")) from None
        if exc.code != "not_found":
            raise
        where = "in your workspaces" if ws is None else "in the workspace"
        raise CliError(
            "not_found", f"you have no notebook named {ref!r} {where} (`aicenter notebook list` shows them)"
        ) from None


def parse_idle_minutes(value: str, option: str) -> int | None:
    """Minutes as typed (``0``/``never``: never culled, ``default``: the workspace's or platform's) -> seconds
    as the API takes them (None: the default)."""
    text = value.strip().lower()
    if text == "default":
        return None
    if text == "never":
        return 0
    if not text.isdigit():
        raise invalid(option, f"expected whole minutes, 0 (never) or 'default', got {value!r}")
    minutes = int(text)
    if minutes > MAX_IDLE_MINUTES:
        raise invalid(option, f"at most {MAX_IDLE_MINUTES} minutes (30 days), got {minutes}")
    return minutes * 60


def _build_spec(
    text: str | None, fields: dict[str, Any], resources: dict[str, Any], env: dict[str, str]
) -> str | dict[str, Any]:
    """The notebook as sent: the file's text untouched when no option changes it (the server's error then names
    the file's line), else the file's fields with the options' on top."""
    if text is not None and not fields and not resources and not env:
        return text
    data: dict[str, Any] = {}
    if text is not None:
        from aicenter.core.jobs import load_document

        document = load_document(text)
        if not isinstance(document, dict):
            raise invalid("--file", "a notebook is a mapping of fields (name, image, resources, ...)")
        data = dict(document)
    data.update(fields)
    if resources:
        data["resources"] = resources
    if env:
        data["env"] = {**(data.get("env") or {}), **env}
    if not data.get("name"):
        raise invalid("NAME", "give the notebook a name (or `name:` in --file)")
    if not data.get("resources"):
        raise invalid("--cpu", "give --spec NAME, or --cpu and --memory (or `resources:` in --file)")
    return data


# -- commands --------------------------------------------------------------------------------------------------


@notebook_app.command("create", epilog="A --file holds the same fields: name, image, algorithm, datasets, ...")
def create(
    name: Annotated[str | None, typer.Argument(help="Its name, unique among your notebooks in the workspace.")] = None,
    image: Annotated[str | None, typer.Option(help="A catalog image version (default: host, the server's).")] = None,
    spec: Annotated[str | None, typer.Option("--spec", help="A resource spec name (`aicenter spec list`).")] = None,
    cpu: Annotated[str | None, typer.Option(help="CPU cores: 2, 500m.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory: 4Gi.")] = None,
    gpu: Annotated[int | None, typer.Option(min=0, help="Whole accelerators.")] = None,
    gpu_type: Annotated[str | None, typer.Option(help="Accelerator type (nvidia-a100); default: any.")] = None,
    algorithm: Annotated[
        str | None, typer.Option(help="Your code (name:version), checked out writable into the work dir.")
    ] = None,
    dataset: Annotated[list[str] | None, typer.Option(help="A dataset (name:version), read-only; repeatable.")] = None,
    workspace: WorkspaceOpt = None,
    pool: Annotated[str | None, typer.Option(help="The pool to run in.")] = None,
    env: Annotated[list[str] | None, typer.Option(help="NAME=VALUE environment variable; repeatable.")] = None,
    idle_timeout: Annotated[
        str | None,
        typer.Option(help="Stop it after this many idle minutes; 0: never; default: the workspace's setting."),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="A YAML notebook file (options override it); - reads stdin.")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a notebook and queue it; `aicenter notebook open NAME` opens JupyterLab once it runs."""
    text = read_text_file(file, "--file") if file is not None else None
    fields: dict[str, Any] = {
        k: v for k, v in {"name": name, "image": image, "algorithm": algorithm, "pool": pool}.items() if v is not None
    }
    if dataset:
        fields["datasets"] = list(dataset)
    if idle_timeout is not None:
        fields["idle_timeout_s"] = parse_idle_minutes(idle_timeout, "--idle-timeout")
    resources: dict[str, Any] = {}
    if spec is not None:
        if cpu or memory or gpu or gpu_type:
            raise invalid("--spec", "a resource spec names its own cpu/memory/gpu; give one or the other")
        resources["spec"] = spec
    else:
        resources = {k: v for k, v in {"cpu": cpu, "memory": memory}.items() if v is not None}
        resources = {k: quantity(v) for k, v in resources.items()}
        if gpu:
            resources["gpu"] = gpu
        if gpu_type:
            resources["gpu_type"] = gpu_type
    if text is None and not resources:
        raise invalid("--cpu", "give --spec NAME, or --cpu and --memory")
    if text is None and not name:
        raise invalid("NAME", "give the notebook a name")
    source = _build_spec(text, fields, resources, pairs(env or (), "--env"))
    names_workspace = isinstance(source, dict) and source.get("workspace") is not None
    if isinstance(source, str):
        from aicenter.core.errors import AicenterError
        from aicenter.core.jobs import load_document

        try:
            names_workspace = isinstance(doc := load_document(source), dict) and doc.get("workspace") is not None
        except AicenterError:
            names_workspace = False  # the server reports the syntax error, with its line
    with client() as api:
        ws = None if not workspace and names_workspace else chosen_workspace(api, workspace)
        nb = api.create_notebook(source, workspace_id=ws)
    out.show(nb, output, _detail(api.base_url) if output is Output.table else None)
    if output is Output.table:
        typer.echo(f"\n`aicenter notebook open {nb.name}` opens JupyterLab once it is running.", err=True)


@notebook_app.command("list")
def list_(
    workspace: WorkspaceOpt = None,
    status: Annotated[str | None, typer.Option(help="A status, or several separated by commas.")] = None,
    all_users: Annotated[
        bool, typer.Option("--all-users", "-A", help="Everyone's notebooks you may see, not only yours.")
    ] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Your notebooks, newest first (--all-users: every notebook of your workspaces)."""
    with client() as api:
        ws = chosen_workspace(api, workspace)
        user = None if all_users else api.me().username
        found = list(api.list_notebooks(workspace_id=ws, status=status, user=user))
    out.show(found, output, _COLUMNS)


@notebook_app.command("get")
def get(notebook: NotebookArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """A notebook: status, inputs, idle state, replicas and events."""
    with client() as api:
        nb = api.get_notebook(_notebook_id(api, notebook, workspace))
    if output is not Output.table:
        out.show(nb, output)
        return
    out.show(nb, output, _detail(api.base_url))
    for title, rows, columns in (("Replicas", nb.replicas, REPLICA_COLUMNS), ("Events", nb.events, EVENT_COLUMNS)):
        typer.echo(f"\n{title}")
        out.show(list(rows), output, columns)


@notebook_app.command("open")
def open_(
    notebook: NotebookArg,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Only print the address.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """Open JupyterLab in the browser (which must be signed in to the console: the lab is served to its owner)."""
    with client() as api:
        nb = api.get_notebook(_notebook_id(api, notebook, workspace))
        url = api.base_url + nb.lab_url
    typer.echo(url)
    if nb.status != "running":
        typer.echo(f"notebook {nb.id} is {nb.status}: JupyterLab answers once it is running", err=True)
    typer.echo("The browser must be signed in to the console as the notebook's owner.", err=True)
    if not no_browser:
        import webbrowser

        if not webbrowser.open(url):
            typer.echo("No browser could be started here: open the address above yourself.", err=True)


def _lifecycle(action: str, notebook: str, workspace: str | None, output: Output) -> None:
    with client() as api:
        nb_id = _notebook_id(api, notebook, workspace)
        nb = api.stop_notebook(nb_id) if action == "stop" else api.start_notebook(nb_id)
    if output is Output.table:
        # A running notebook's stop is asked for here and carried out by the server: it is stopping, not stopped.
        stopping = action == "stop" and nb.status not in FINISHED
        typer.echo(f"notebook {nb.id} ({nb.name}) {_status(nb)}" + (" (stopping)" if stopping else ""))
    else:
        out.show(nb, output)


@notebook_app.command("stop")
def stop(notebook: NotebookArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Stop it: its resources are released, its work dir is kept for `start`."""
    _lifecycle("stop", notebook, workspace, output)


@notebook_app.command("start")
def start(notebook: NotebookArg, workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Start a stopped (or failed) notebook again, with the same work dir."""
    _lifecycle("start", notebook, workspace, output)


@notebook_app.command("save")
def save(
    notebook: NotebookArg,
    algorithm: Annotated[
        str | None, typer.Option(help="The algorithm to add the version to (created if new); default: its own.")
    ] = None,
    description: Annotated[str, typer.Option(help="The version's description.")] = "",
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Save the running notebook's work dir as a new algorithm version; prints its reference (name:number)."""
    with client() as api:
        saved = api.save_notebook(_notebook_id(api, notebook, workspace), algorithm=algorithm, description=description)
    if output is not Output.table:
        out.show(saved, output)
        return
    typer.echo(saved.reference)
    if saved.skipped_links:
        typer.echo(f"({saved.skipped_links} symbolic links left out: a version holds regular files only)", err=True)


@notebook_app.command("delete")
def delete(
    notebook: NotebookArg, workspace: WorkspaceOpt = None, yes: YesOpt = False, output: OutputOpt = Output.table
) -> None:
    """Delete a stopped notebook and its work dir (save it first)."""
    with client() as api:
        nb_id = _notebook_id(api, notebook, workspace)
        named = "" if notebook.removeprefix("#") == str(nb_id) else f" ({notebook})"
        confirm(f"Delete notebook {nb_id}{named} and its work dir?", yes)
        api.delete_notebook(nb_id)
    out.done(f"Deleted notebook {nb_id}.", output)


@notebook_app.command("logs")
def logs(
    notebook: NotebookArg,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until it stops.")] = False,
    workspace: WorkspaceOpt = None,
) -> None:
    """JupyterLab's output (the notebook's job log), each line prefixed by its UTC time."""
    with client() as api:
        stream_logs(api, _notebook_id(api, notebook, workspace), None, None, follow)


@notebook_app.command("train")
def train(
    notebook: NotebookArg,
    file: Annotated[
        Path | None, typer.Option("--file", help="Write the spec to this file instead of printing it.")
    ] = None,
    submit: Annotated[bool, typer.Option("--submit", help="Submit it as a training job at once.")] = False,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """A training job spec prefilled from the notebook (its latest save, image, datasets, resources), as YAML."""
    import yaml

    with client() as api:
        spec = api.notebook_train_spec(_notebook_id(api, notebook, workspace))
        if submit:
            job = api.submit_job(spec)
            out.show(job, output, JOB_DETAIL if output is Output.table else None)
            return
    if file is None:
        if output is Output.json:
            out.show(spec, output)
        else:
            typer.echo(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True).rstrip("\n"))
        return
    try:
        file.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True), encoding="utf-8")
    except OSError as exc:
        raise invalid("--file", f"{file}: cannot be written ({exc})") from None
    typer.echo(f"Wrote {file}: set its command, then `aicenter job submit {file}`.")


@notebook_app.command("idle-timeout")
def idle_timeout(
    notebook: NotebookArg,
    minutes: Annotated[str, typer.Argument(metavar="MINUTES|default", help="Idle minutes; 0: never; default.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Set how long the notebook may stay idle before it is stopped (0: never; default: the workspace's)."""
    seconds = parse_idle_minutes(minutes, "MINUTES")
    with client() as api:
        nb = api.update_notebook(_notebook_id(api, notebook, workspace), seconds)
    if output is Output.table:
        typer.echo(f"notebook {nb.id} ({nb.name}): idle timeout {_idle(nb)}")
    else:
        out.show(nb, output)


@notebook_app.command(
    "ssh",
    epilog="Example: aicenter notebook ssh my-nb -- -L 8888:localhost:8888 nvidia-smi",
)
def ssh(
    notebook: NotebookArg,
    args: Annotated[
        list[str] | None, typer.Argument(help="After --: more ssh options, then a command to run there.")
    ] = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Log in to the notebook with the system ssh, through the platform's SSH gateway (your SSH public key
    must be registered with the platform: /api/v1/ssh-keys)."""
    binary = shutil.which("ssh")
    if binary is None:
        raise CliError("ssh_not_found", "no `ssh` command found: install the OpenSSH client (openssh-client)")
    with client() as api:
        info = api.notebook_ssh(_notebook_id(api, notebook, workspace))
    known = write_known_hosts(info.known_hosts)
    argv = ssh_argv(binary, info, known, args or ())
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(binary, argv)  # noqa: S606 (the user's own ssh, with arguments as a list: no shell)
    except OSError as exc:
        raise CliError("ssh_failed", f"cannot run {binary}: {exc}") from None


@notebook_app.command("ssh-config")
def ssh_config(notebook: NotebookArg, workspace: WorkspaceOpt = None) -> None:
    """Print the notebook's ~/.ssh/config block (and write its host keys to the CLI's known_hosts file)."""
    with client() as api:
        info = api.notebook_ssh(_notebook_id(api, notebook, workspace))
    known = write_known_hosts(info.known_hosts)
    typer.echo(ssh_config_block(info.config, known, info.gateway_host), nl=False)
    typer.echo(
        f"# append this to ~/.ssh/config; VS Code Remote-SSH and PyCharm use it (`ssh {info.host_alias}`). "
        f"Host keys: {known_hosts_path()}",
        err=True,
    )
