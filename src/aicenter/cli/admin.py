"""``aicenter admin ...``: the artifact store's maintenance (platform admins), and a password reset run on the
server's host."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import CliError, Output, OutputOpt, invalid

admin_app = typer.Typer(
    help="Store maintenance (integrity check, garbage collection, imports); a password reset on the server's host.",
    no_args_is_help=True,
)

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


@admin_app.command("reset-password")
def reset_password(
    username: Annotated[str, typer.Argument(metavar="USER", help="The user whose password to set.")],
    home: Annotated[
        Path | None,
        typer.Option(help="The server's home. Default: $AICENTER_HOME, else ~/.aicenter.", show_default=False),
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the new password from stdin (one line).")
    ] = False,
    generate: Annotated[bool, typer.Option("--generate", help="Generate a password and print it once.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Set a user's password directly in the server's database, without the API or signing in.

    Run it on the server's host with the server's settings (AICENTER_HOME or --home; AICENTER_DATABASE_URL for
    PostgreSQL), e.g. when the first admin's password is lost. The user's console sessions and CLI logins are
    revoked; the change is in the audit log. Without --password-stdin or --generate it prompts twice.
    """
    import secrets

    from aicenter.cli import _host

    if password_stdin and generate:
        raise invalid("--generate", "give either --password-stdin or --generate, not both")
    settings = _host.server_settings(home)
    if generate:
        password = secrets.token_urlsafe(12)
    elif password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    elif sys.stdin.isatty():
        password = typer.prompt("New password", hide_input=True, confirmation_prompt=True)
    else:
        raise invalid("--password-stdin", "no terminal to prompt on: pass the password on stdin with it, or --generate")
    result = _host.reset_password(settings, username, password)
    if output is not Output.table:
        data: dict[str, object] = {
            "username": result.username,
            "user_id": result.user_id,
            "revoked_sign_ins": result.revoked_sign_ins,
        }
        if generate:
            data["password"] = password
        out.show(data, output)
        return
    typer.echo(
        f"password of user '{result.username}' reset; {result.revoked_sign_ins} console session(s) and CLI login(s) "
        "revoked"
    )
    if generate:
        typer.echo(f"new password: {password}\n  (shown only now)")
