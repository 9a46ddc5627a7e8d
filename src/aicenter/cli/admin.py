"""``aicenter admin ...``: the artifact store's maintenance (platform admins)."""

from __future__ import annotations

from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import CliError, Output, OutputOpt, invalid

admin_app = typer.Typer(help="Store maintenance: integrity check, garbage collection, imports.", no_args_is_help=True)

KINDS = ("dataset", "algorithm", "image", "model")


@admin_app.command("fsck")
def fsck(
    repair: Annotated[bool, typer.Option("--repair", help="Move damaged blobs to quarantine.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Re-hash every blob a version references; report missing and damaged ones (exit 1 if any)."""
    from aicenter.cli.common import client

    with client() as api:
        report = api.storage_fsck(repair=repair)
    if output is not Output.table:
        out.show(report, output)
    else:
        typer.echo(f"checked {report.checked} blobs: {len(report.missing)} missing, {len(report.damaged)} damaged")
        for sha in report.missing:
            typer.echo(f"missing  {sha}")
        for sha in report.damaged:
            moved = " (quarantined)" if sha in report.quarantined else ""
            typer.echo(f"damaged  {sha}{moved}")
    if report.missing or report.damaged:
        raise CliError("store_damaged", "the store has missing or damaged blobs (see above)")


@admin_app.command("gc")
def gc(output: OutputOpt = Output.table) -> None:
    """Expire stale uploads and delete blobs no version references (older than the grace period)."""
    from aicenter.cli.common import client

    with client() as api:
        report = api.storage_gc()
    if output is not Output.table:
        out.show(report, output)
        return
    typer.echo(
        f"scanned {report.scanned} blobs, deleted {report.deleted} ({out.size(report.freed_bytes) or 0} freed), "
        f"kept {report.kept_young} too young; expired {report.expired_uploads} uploads"
    )


@admin_app.command("import")
def import_(
    kind: Annotated[str, typer.Argument(help="dataset, algorithm, image or model.")],
    name: Annotated[str, typer.Argument(help="The preset item; created if missing.")],
    path: Annotated[str, typer.Argument(help="A directory on the server, inside its import roots.")],
    description: Annotated[str | None, typer.Option(help="The new version's description.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """A new version of a preset item from a directory on the server (no upload: the files are read in place)."""
    from aicenter.cli.catalog import _VERSION_DETAIL
    from aicenter.cli.common import client
    from aicenter.client import UNSET

    if kind not in KINDS:
        raise invalid("KIND", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    bare = name.removeprefix("preset/")
    with client() as api:
        item = next((i for i in api.list_items(kind, scope="preset", q=bare) if i.name == bare), None)
        if item is None:
            item = api.create_item(kind, bare, preset=True)
        version = api.import_directory(
            kind, item.id, path, description=description if description is not None else UNSET
        )
    out.show(version, output, _VERSION_DETAIL if output is Output.table else None)
