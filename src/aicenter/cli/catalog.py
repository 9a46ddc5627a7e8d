"""``aicenter dataset|algorithm|image|model ...``: the four kinds share their commands, built by one function.

References name versions the way the API resolves them: ``name:3``, ``name`` (the latest ready version I can
see), ``owner/name:3``, ``preset/name:2`` or ``#<version id>``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    workspace_id,
)

if TYPE_CHECKING:
    from aicenter.client import Client
    from aicenter.client.models import Item

SCOPES = ("mine", "workspace", "public", "preset", "all")
BUILD_POLL_S = 2.0

RefArg = Annotated[str, typer.Argument(help="name:3, name (latest), owner/name:3, preset/name:2 or #<version id>.")]
NameArg = Annotated[str, typer.Argument(help="The item's name (preset/NAME for a preset, or an id).")]
WorkspaceOpt = Annotated[str | None, typer.Option("--workspace", "-w", help="Workspace name or id.")]
ListWorkspaceOpt = Annotated[
    str | None,
    typer.Option(
        "--workspace",
        "-w",
        help="With --scope workspace: shared with this workspace; otherwise: items whose home workspace it is.",
    ),
]
ProgressOpt = Annotated[
    bool | None,
    typer.Option("--progress/--no-progress", help="Show a progress bar on stderr (default: when it is a terminal)."),
]

_ITEM_COLUMNS: list[out.Column] = [
    ("ID", lambda i: i.id),
    ("NAME", lambda i: f"preset/{i.name}" if i.is_preset else i.name),
    ("OWNER", lambda i: i.owner_name),
    # Its home: where it is stored and counted against the quota. Not who may see it: --scope workspace lists
    # items with a version *shared with* one of your workspaces, whatever their home.
    ("HOME WORKSPACE", lambda i: i.workspace_name),
    ("VERSIONS", lambda i: i.version_count),
    ("LATEST", lambda i: i.latest_version),
    ("TAGS", lambda i: ",".join(i.tags)),
    ("UPDATED", lambda i: i.updated_at),
    ("DESCRIPTION", lambda i: i.description),
]
_VERSION_COLUMNS: list[out.Column] = [
    ("REF", lambda v: v.ref),
    ("STATE", lambda v: v.state),
    ("VISIBILITY", lambda v: _visibility(v)),
    ("FILES", lambda v: v.file_count),
    ("SIZE", lambda v: out.size(v.size_bytes) if v.size_bytes else "0"),
    ("CREATED", lambda v: v.created_at),
    ("BY", lambda v: v.created_by_name),
    ("DESCRIPTION", lambda v: v.description),
]
_VERSION_DETAIL: list[out.Column] = [
    ("ref", lambda v: v.ref),
    ("id", lambda v: v.id),
    ("item", lambda v: f"{v.item_name} (id {v.item_id}, owner {v.owner_name})"),
    ("state", lambda v: v.state),
    ("visibility", lambda v: _visibility(v)),
    ("files", lambda v: v.file_count),
    ("size", lambda v: out.size(v.size_bytes) if v.size_bytes else "0"),
    ("manifest sha256", lambda v: v.manifest_sha256),
    ("metadata", lambda v: v.metadata),
    ("description", lambda v: v.description),
    ("created", lambda v: f"{out.when(v.created_at)} by {v.created_by_name}"),
    ("copied from", lambda v: f"#{v.copied_from_id}" if v.copied_from_id else None),  # a reference, as typed
]
_BUILD_DETAIL: list[out.Column] = [
    ("state", lambda b: b.state),
    ("env hash", lambda b: b.env_hash),
    ("error", lambda b: b.error),
    ("started", lambda b: b.started_at),
    ("finished", lambda b: b.finished_at),
]


def _visibility(v: Any) -> str:
    if v.visibility == "workspace":
        return f"workspace:{v.shared_workspace_name or v.shared_workspace_id}"
    return str(v.visibility)


# -- lookups ---------------------------------------------------------------------------------------------------


def find_item(api: Client, kind: str, name: str) -> Item:
    """My item ``name``, a preset (``preset/name``), an item visible through a shared version, or an id."""
    from aicenter.client import ApiError

    if name.startswith("preset/"):
        bare = name.removeprefix("preset/")
        found = next((i for i in api.list_items(kind, scope="preset", q=bare) if i.name == bare), None)
    elif "/" not in name:
        found = next((i for i in api.list_items(kind, scope="mine", q=name) if i.name == name), None)
        if found is None and name.isdigit():
            return api.get_item(kind, int(name))
    else:
        found = None
    if found is not None:
        return found
    try:  # someone else's item, seen through a version shared with me
        return api.get_item(kind, api.resolve(kind, name).item_id)
    except ApiError as exc:
        if exc.code != "not_found":
            raise
    raise CliError("not_found", f"no {kind} named {name!r} that you can see")


def _image_spec(python: str | None, requirements: list[str], reference: str | None) -> dict[str, Any]:
    if reference and (python or requirements):
        raise invalid("--reference", "a container image takes no --python or --requirement")
    if reference:
        return {"reference": reference}
    spec: dict[str, Any] = {"requirements": requirements}
    if python:
        spec["python"] = python
    return spec


# -- progress --------------------------------------------------------------------------------------------------


@contextmanager
def progress_bar(enabled: bool | None, label: str) -> Iterator[Callable[[int, int, int, int], None] | None]:
    """A callback drawing bytes, files, rate and ETA on stderr; None when disabled (default: stderr is a TTY)."""
    if not (sys.stderr.isatty() if enabled is None else enabled):
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(binary_units=True),
        TextColumn("{task.fields[files]}"),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    task = bar.add_task(label, total=None, files="")

    def update(done: int, total: int, done_files: int, total_files: int) -> None:
        bar.update(task, completed=done, total=total, files=f"{done_files}/{total_files} files")

    with bar:
        yield update


# -- the commands of one kind ----------------------------------------------------------------------------------


def kind_app(kind: str, help_text: str) -> typer.Typer:
    """The ``aicenter <kind>`` group; images get ``version`` and ``build`` on top."""
    app = typer.Typer(help=help_text, no_args_is_help=True)

    @app.command("list")
    def list_(
        scope: Annotated[
            str,
            typer.Option(
                help="mine (yours), workspace (a version shared with one of your workspaces), public, preset, "
                "or all (platform admins)."
            ),
        ] = "mine",
        q: Annotated[str | None, typer.Option("--query", "-q", help="Substring of name or description.")] = None,
        tag: Annotated[str | None, typer.Option(help="Only items with this tag.")] = None,
        workspace: ListWorkspaceOpt = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Items, by default your own."""
        if scope not in SCOPES:
            raise invalid("--scope", f"must be one of {', '.join(SCOPES)}, got {scope!r}")
        with client() as api:
            ws = workspace_id(api, workspace) if workspace else None
            out.show(list(api.list_items(kind, scope=scope, q=q, tag=tag, workspace_id=ws)), output, _ITEM_COLUMNS)

    @app.command("create")
    def create(
        name: Annotated[str, typer.Argument(help="Letters, digits, '.', '_' and '-'.")],
        description: Annotated[str | None, typer.Option(help="Free text.")] = None,
        tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag; repeatable.")] = None,
        meta: Annotated[
            list[str] | None, typer.Option("--meta", help="KEY=VALUE metadata, e.g. data_type=image; repeatable.")
        ] = None,
        image_type: Annotated[
            str | None, typer.Option("--type", help="Images: venv (built by aicenter) or container.")
        ] = None,
        preset: Annotated[bool, typer.Option("--preset", help="A preset item for everyone (platform admins).")] = False,
        workspace: WorkspaceOpt = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create an item without versions (push creates one when needed)."""
        from aicenter.client import UNSET

        metadata = pairs(meta or [], "--meta")
        if image_type is not None:
            if kind != "image":
                raise invalid("--type", "only images have a type")
            if image_type not in ("venv", "container"):
                raise invalid("--type", f"must be venv or container, got {image_type!r}")
            metadata["image_type"] = image_type
        with client() as api:
            item = api.create_item(
                kind,
                name,
                workspace_id=chosen_workspace(api, workspace) or UNSET,
                description=description if description is not None else UNSET,
                tags=tag if tag else UNSET,
                metadata=metadata or UNSET,
                preset=preset or UNSET,
            )
        out.show(item, output, _ITEM_COLUMNS if output is Output.table else None)

    @app.command("get")
    def get(ref: RefArg, output: OutputOpt = Output.table) -> None:
        """One version (a bare name: its latest version; an item without versions: the item)."""
        from aicenter.client import ApiError

        with client() as api:
            try:
                out.show(api.resolve(kind, ref), output, _VERSION_DETAIL if output is Output.table else None)
                return
            except ApiError as exc:
                if exc.code != "not_found" or ":" in ref or ref.startswith("#"):
                    raise
                item = find_item(api, kind, ref)
        out.show(item, output, None)

    @app.command("versions")
    def versions(name: NameArg, output: OutputOpt = Output.table) -> None:
        """The versions of an item you can see, newest first."""
        with client() as api:
            item = find_item(api, kind, name)
            out.show(list(api.list_versions(kind, item.id)), output, _VERSION_COLUMNS)

    @app.command("update")
    def update(
        name: NameArg,
        description: Annotated[str | None, typer.Option(help="New description.")] = None,
        tag: Annotated[list[str] | None, typer.Option("--tag", help="Replace the tags; repeatable.")] = None,
        rename: Annotated[str | None, typer.Option("--rename", help="A new name.")] = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Change an item's description, tags or name."""
        from aicenter.client import UNSET

        with client() as api:
            item = find_item(api, kind, name)
            updated = api.update_item(
                kind,
                item.id,
                name=rename if rename is not None else UNSET,
                description=description if description is not None else UNSET,
                tags=tag if tag is not None else UNSET,
            )
        out.show(updated, output, None)

    @app.command("delete")
    def delete(name: NameArg, yes: YesOpt = False, output: OutputOpt = Output.table) -> None:
        """Delete an item with every version."""
        confirm(f"Delete {kind} {name!r} with all its versions?", yes)
        with client() as api:
            api.delete_item(kind, find_item(api, kind, name).id)
        out.done(f"Deleted {kind} {name!r}.", output)

    @app.command("rm")
    def rm(ref: RefArg, yes: YesOpt = False, output: OutputOpt = Output.table) -> None:
        """Delete one version."""
        confirm(f"Delete {kind} version {ref!r}?", yes)
        with client() as api:
            version = api.resolve(kind, ref)
            api.delete_version(kind, version.item_id, version.number)
        out.done(f"Deleted {version.ref}.", output)

    @app.command("push")
    def push(
        source: Annotated[Path, typer.Argument(help="A directory (every file under it) or one file.")],
        name: Annotated[str, typer.Option("--name", "-n", help="The item; created if you have none by that name.")],
        description: Annotated[str, typer.Option(help="The new version's description.")] = "",
        workspace: WorkspaceOpt = None,
        progress: ProgressOpt = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Upload files as a new version. Re-run the same command to resume an interrupted push."""
        with client() as api:
            ws = chosen_workspace(api, workspace)
            with progress_bar(progress, f"push {name}") as callback:
                version = api.push(kind, source, name=name, workspace_id=ws, description=description, progress=callback)
        out.show(version, output, _VERSION_DETAIL if output is Output.table else None)

    @app.command("pull")
    def pull(
        ref: RefArg,
        dest: Annotated[Path, typer.Argument(help="Directory to write into; files already there are kept.")],
        progress: ProgressOpt = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Download a version. Files already present with the same hash are skipped; re-run to resume."""
        with client() as api, progress_bar(progress, f"pull {ref}") as callback:
            report = api.pull(kind, ref, dest, progress=callback)
        summary = {
            "ref": report.version.ref,
            "dest": str(dest),
            "downloaded_files": report.downloaded_files,
            "downloaded_bytes": report.downloaded_bytes,
            "skipped_files": report.skipped_files,
            "skipped_bytes": report.skipped_bytes,
        }
        if output is Output.table:
            typer.echo(
                f"Pulled {report.version.ref} into {dest}: {report.downloaded_files} files "
                f"({out.size(report.downloaded_bytes) or 0}) downloaded, {report.skipped_files} already present."
            )
        else:
            out.show(summary, output)

    @app.command("share")
    def share(
        ref: RefArg,
        workspace: Annotated[
            str | None, typer.Option("--workspace", "-w", help="Share with the members of this workspace.")
        ] = None,
        public: Annotated[bool, typer.Option("--public", help="Share with every user (the data mart).")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Share a version with a workspace or with everyone."""
        if public == (workspace is not None):
            raise invalid("--workspace", "give exactly one of --workspace WS and --public")
        with client() as api:
            version = api.resolve(kind, ref)
            if public:
                shared = api.share_version(kind, version.item_id, version.number, visibility="public")
            else:
                ws = workspace_id(api, workspace)
                shared = api.share_version(
                    kind, version.item_id, version.number, visibility="workspace", workspace_id=ws
                )
        out.show(shared, output, _VERSION_DETAIL if output is Output.table else None)

    @app.command("unshare")
    def unshare(ref: RefArg, output: OutputOpt = Output.table) -> None:
        """Make a version private again."""
        with client() as api:
            version = api.resolve(kind, ref)
            result = api.unshare_version(kind, version.item_id, version.number)
        out.show(result, output, _VERSION_DETAIL if output is Output.table else None)

    @app.command("copy")
    def copy(
        ref: RefArg,
        name: Annotated[
            str | None, typer.Option("--name", "-n", help="Your item to copy into (default: same name).")
        ] = None,
        workspace: WorkspaceOpt = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Copy a version you can read into a new version of your own item (no bytes are copied)."""
        with client() as api:
            version = api.resolve(kind, ref)
            ws = chosen_workspace(api, workspace)
            copied = api.copy_version(kind, version.item_id, version.number, name=name, workspace_id=ws)
        out.show(copied, output, _VERSION_DETAIL if output is Output.table else None)

    if kind == "image":
        _image_commands(app)
    return app


def _image_commands(app: typer.Typer) -> None:
    @app.command("version")
    def version(
        name: NameArg,
        python: Annotated[str | None, typer.Option("--python", help="venv: Python version, e.g. 3.11.")] = None,
        requirement: Annotated[
            list[str] | None, typer.Option("--requirement", "-r", help="venv: a pip requirement; repeatable.")
        ] = None,
        reference: Annotated[
            str | None, typer.Option("--reference", help="container: the image, e.g. docker.io/library/python:3.11.")
        ] = None,
        description: Annotated[str | None, typer.Option(help="Free text.")] = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """A new image version from a build spec; a venv version is built by the server (see `image build`)."""
        from aicenter.client import UNSET

        spec = _image_spec(python, requirement or [], reference)
        with client() as api:
            item = find_item(api, "image", name)
            created = api.create_version(
                "image", item.id, description=description if description is not None else UNSET, metadata=spec
            )
        out.show(created, output, _VERSION_DETAIL if output is Output.table else None)

    @app.command("build")
    def build(
        ref: RefArg,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Wait until the build is ready or failed.")
        ] = False,
        retry: Annotated[bool, typer.Option("--retry", help="Queue a failed build again.")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """The build state of a venv image version and the tail of its log."""
        with client() as api:
            v = api.resolve("image", ref)
            status = api.rebuild(v.item_id, v.number) if retry else api.get_build(v.item_id, v.number)
            last = status.state
            while follow and status.state not in ("ready", "failed"):
                time.sleep(BUILD_POLL_S)
                status = api.get_build(v.item_id, v.number)
                if status.state != last and output is Output.table:
                    typer.echo(f"{v.ref}: {status.state}", err=True)
                    last = status.state
        if output is not Output.table:
            out.show(status, output)
        else:
            out.show(status, output, _BUILD_DETAIL)
            if status.log_tail:
                typer.echo("--- log (tail) ---")
                typer.echo(status.log_tail.rstrip("\n"))
        if follow and status.state == "failed":
            raise CliError("build_failed", f"the build of {v.ref} failed: {status.error or 'see the log above'}")


dataset_app = kind_app("dataset", "Datasets: versioned files for training and evaluation.")
algorithm_app = kind_app("algorithm", "Algorithms: versioned code with an entry point.")
image_app = kind_app("image", "Images: environments (venvs built by aicenter, or container references).")
model_app = kind_app("model", "Models: versioned weights, saved by training jobs or pushed.")
