"""``aicenter user|workspace|member|quota|audit ...``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.auth import _read_password
from aicenter.cli.common import (
    STATE,
    CliError,
    Output,
    OutputOpt,
    YesOpt,
    client,
    confirm,
    invalid,
    member_id,
    pairs,
    pool_id,
    quantity,
    user_id,
    workspace_id,
)
from aicenter.cli.notebooks import parse_idle_minutes

user_app = typer.Typer(help="Users of the platform (platform admins).", no_args_is_help=True)
workspace_app = typer.Typer(help="Workspaces (tenants).", no_args_is_help=True)
member_app = typer.Typer(help="Members of a workspace and their roles.", no_args_is_help=True)
quota_app = typer.Typer(help="Guaranteed and maximum resources of a workspace per pool.", no_args_is_help=True)
audit_app = typer.Typer(
    help="The audit log of every change (platform admins; a workspace's admins with --workspace).",
    no_args_is_help=True,
)

WorkspaceOpt = Annotated[
    str | None, typer.Option("--workspace", "-w", help="Workspace name or id. Default: your default workspace.")
]
ROLES = ("member", "workspace_admin")

_USER_COLUMNS: list[out.Column] = [
    ("ID", lambda u: u.id),
    ("USERNAME", lambda u: u.username),
    ("NAME", lambda u: u.display_name),
    ("EMAIL", lambda u: u.email),
    ("ADMIN", lambda u: u.is_platform_admin),
    ("STATE", lambda u: u.state),
    ("CREATED", lambda u: u.created_at),
]
_WORKSPACE_COLUMNS: list[out.Column] = [
    ("ID", lambda w: w.id),
    ("NAME", lambda w: w.name),
    ("DESCRIPTION", lambda w: w.description),
    ("CREATED", lambda w: w.created_at),
]
_MEMBER_COLUMNS: list[out.Column] = [
    ("USER ID", lambda m: m.user_id),
    ("USERNAME", lambda m: m.username),
    ("NAME", lambda m: m.display_name),
    ("ROLE", lambda m: m.role),
    ("SINCE", lambda m: m.created_at),
]
_QUOTA_COLUMNS: list[out.Column] = [
    ("POOL", lambda q: q.pool_name or q.pool_id),
    ("GUARANTEED", lambda q: out.resources(q.guaranteed)),
    ("MAXIMUM", lambda q: out.resources(q.maximum)),
    ("USED", lambda q: out.resources(q.used)),
]
_AUDIT_COLUMNS: list[out.Column] = [
    ("AT", lambda e: e.at),
    ("ACTOR", lambda e: e.actor_name or e.actor_id),
    ("ACTION", lambda e: e.action),
    ("TARGET", lambda e: f"{e.target_type}:{e.target_id}" if e.target_type else ""),
    ("WORKSPACE", lambda e: e.workspace_id),
    ("ADDRESS", lambda e: e.client_address),
]


def _role(value: str) -> str:
    if value not in ROLES:
        raise invalid("--role", f"must be one of {', '.join(ROLES)}, got {value!r}")
    return value


# -- users -----------------------------------------------------------------------------------------------------


@user_app.command("list")
def user_list(
    state: Annotated[str | None, typer.Option(help="active or frozen.")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", "-q", help="User names starting with this.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Every user."""
    with client() as api:
        out.show(list(api.list_users(state=state, q=prefix)), output, _USER_COLUMNS)


@user_app.command("create")
def user_create(
    username: Annotated[str, typer.Argument(help="Letters, digits, '.', '_' and '-'.")],
    display_name: Annotated[str | None, typer.Option("--display-name", help="Full name.")] = None,
    email: Annotated[str | None, typer.Option(help="E-mail address.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Make them a platform admin.")] = False,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Create a user, with a default workspace of their own."""
    from aicenter.client import UNSET

    password = _read_password(password_stdin, "Password for the new user")
    with client() as api:
        user = api.create_user(
            username,
            password,
            display_name=display_name if display_name is not None else UNSET,
            email=email if email is not None else UNSET,
            is_platform_admin=admin,
        )
    out.show(user, output)


@user_app.command("get")
def user_get(user: Annotated[str, typer.Argument(help="User name or id.")], output: OutputOpt = Output.table) -> None:
    """One user."""
    with client() as api:
        out.show(api.get_user(user_id(api, user)), output)


@user_app.command("update")
def user_update(
    user: Annotated[str, typer.Argument(help="User name or id.")],
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    email: Annotated[str | None, typer.Option(help="E-mail address ('' clears it).")] = None,
    admin: Annotated[bool | None, typer.Option("--admin/--no-admin", help="Grant or take platform admin.")] = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Set a new password from stdin.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Change a user's name, e-mail, platform-admin flag or password."""
    from aicenter.client import UNSET

    password = _read_password(True) if password_stdin else UNSET
    with client() as api:
        updated = api.update_user(
            user_id(api, user),
            display_name=display_name if display_name is not None else UNSET,
            email=email if email is not None else UNSET,
            is_platform_admin=admin if admin is not None else UNSET,
            password=password,
        )
    out.show(updated, output)


@user_app.command("freeze")
def user_freeze(
    user: Annotated[str, typer.Argument(help="User name or id.")], output: OutputOpt = Output.table
) -> None:
    """Freeze a user: they cannot log in and their tokens stop working."""
    with client() as api:
        out.show(api.freeze_user(user_id(api, user)), output)


@user_app.command("thaw")
def user_thaw(user: Annotated[str, typer.Argument(help="User name or id.")], output: OutputOpt = Output.table) -> None:
    """Let a frozen user back in."""
    with client() as api:
        out.show(api.thaw_user(user_id(api, user)), output)


# -- workspaces ------------------------------------------------------------------------------------------------


@workspace_app.command("list")
def workspace_list(output: OutputOpt = Output.table) -> None:
    """Your workspaces (every workspace for platform admins)."""
    with client() as api:
        out.show(list(api.list_workspaces()), output, _WORKSPACE_COLUMNS)


@workspace_app.command("create")
def workspace_create(
    name: Annotated[str, typer.Argument(help="Lower-case letters, digits, '.', '_' and '-'.")],
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
    admin: Annotated[str | None, typer.Option("--admin", help="User name or id of its first workspace admin.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a workspace."""
    from aicenter.client import UNSET

    with client() as api:
        ws = api.create_workspace(
            name,
            description=description if description is not None else UNSET,
            admin_user_id=user_id(api, admin) if admin else UNSET,
        )
    out.show(ws, output)


@workspace_app.command("use")
def workspace_use(
    workspace: Annotated[str | None, typer.Argument(help="Workspace name or id (one you are a member of).")] = None,
    unset: Annotated[bool, typer.Option("--unset", help="Forget the default workspace.")] = False,
) -> None:
    """Act in this workspace when a command is given no --workspace (saved in the CLI profile)."""
    from aicenter.cli.config import CliConfig

    if (workspace is None) == (not unset):
        raise invalid("WORKSPACE", "give a workspace name, or --unset")
    cfg = CliConfig.load()
    name = cfg.active(STATE.profile).name
    stored = cfg.profiles.get(name)
    if stored is None or not stored.token:
        raise CliError("not_logged_in", f"not logged in (profile {name!r}); run `aicenter login --server URL` first")
    if workspace is None:
        stored.workspace = None
        cfg.save()
        typer.echo(f"No default workspace in profile {name!r}: commands use your account's default workspace.")
        return
    with client() as api:
        # Membership, not visibility: platform admins see every workspace but submit only where they are members.
        mine = {m.workspace.name: m.workspace for m in api.my_workspaces()}
    by_id = {str(w.id): w for w in mine.values()}
    found = mine.get(workspace) or by_id.get(workspace)
    if found is None:
        raise CliError(
            "not_found",
            f"you are not a member of a workspace named {workspace!r} (`aicenter whoami` lists yours)",
        )
    stored.workspace = found.name
    cfg.save()
    typer.echo(f"Using workspace {found.name!r} in profile {name!r}; -w still picks another for one command.")


@workspace_app.command("get")
def workspace_get(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")], output: OutputOpt = Output.table
) -> None:
    """One workspace."""
    with client() as api:
        out.show(api.get_workspace(workspace_id(api, workspace)), output)


@workspace_app.command("rename")
def workspace_rename(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    new_name: Annotated[str, typer.Argument(help="The new name.")],
    output: OutputOpt = Output.table,
) -> None:
    """Rename a workspace."""
    with client() as api:
        out.show(api.update_workspace(workspace_id(api, workspace), name=new_name), output)


@workspace_app.command("describe")
def workspace_describe(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    description: Annotated[str, typer.Argument(help="The new description.")],
    output: OutputOpt = Output.table,
) -> None:
    """Change a workspace's description."""
    with client() as api:
        out.show(api.update_workspace(workspace_id(api, workspace), description=description), output)


@workspace_app.command("admins-read-logs")
def workspace_admins_read_logs(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    decision: Annotated[str, typer.Argument(help="allow or deny.", metavar="allow|deny")],
    output: OutputOpt = Output.table,
) -> None:
    """Let platform admins who are not members read this workspace's job logs, or stop them (its admins; the
    change is audited). Job status, events and failure reasons are visible to platform admins either way."""
    if decision not in ("allow", "deny"):
        raise typer.BadParameter(f"expected allow or deny, not {decision!r}", param_hint="DECISION")
    with client() as api:
        changed = api.update_workspace(workspace_id(api, workspace), admins_read_logs=decision == "allow")
        out.show(changed, output)


@workspace_app.command("notebook-idle-timeout")
def workspace_notebook_idle_timeout(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    minutes: Annotated[str, typer.Argument(metavar="MINUTES|default", help="Idle minutes; 0: never; default.")],
    output: OutputOpt = Output.table,
) -> None:
    """Set how long this workspace's notebooks may stay idle before they are stopped (its admins; a notebook's own
    setting wins; default: the platform's)."""
    seconds = parse_idle_minutes(minutes, "MINUTES")
    with client() as api:
        changed = api.update_workspace(workspace_id(api, workspace), notebook_idle_timeout_s=seconds)
        out.show(changed, output)


@workspace_app.command("delete")
def workspace_delete(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    yes: YesOpt = False,
    output: OutputOpt = Output.table,
) -> None:
    """Delete a workspace with its memberships and quotas."""
    confirm(f"Delete workspace {workspace!r}?", yes)
    with client() as api:
        api.delete_workspace(workspace_id(api, workspace))
    out.done(f"Deleted workspace {workspace!r}.", output)


@workspace_app.command("storage")
def workspace_storage(
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    limit: Annotated[
        str | None, typer.Option("--limit", help="Set the storage quota, e.g. 10Gi (platform admins).")
    ] = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Remove the storage quota (platform admins).")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Storage used by the workspace's catalog items, and its quota."""
    if limit is not None and no_limit:
        raise invalid("--limit", "give --limit or --no-limit, not both")
    with client() as api:
        ws = workspace_id(api, workspace)
        if limit is not None or no_limit:
            usage = api.set_storage_quota(ws, None if no_limit else quantity(limit or ""))
        else:
            usage = api.storage_usage(ws)
    columns: list[out.Column] = [
        ("workspace", lambda u: workspace),
        ("used", lambda u: out.size(u.used_bytes) or "0"),
        ("limit", lambda u: out.size(u.limit_bytes) if u.limit_bytes is not None else "unlimited"),
    ]
    out.show(usage, output, columns if output is Output.table else None)


# -- members ---------------------------------------------------------------------------------------------------


@member_app.command("list")
def member_list(workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """Members of a workspace."""
    with client() as api:
        out.show(list(api.list_members(workspace_id(api, workspace))), output, _MEMBER_COLUMNS)


@member_app.command("add")
def member_add(
    user: Annotated[str, typer.Argument(help="User name (or id).")],
    role: Annotated[str, typer.Option(help="member or workspace_admin.")] = "member",
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Add a user to a workspace."""
    role = _role(role)
    with client() as api:
        ws = workspace_id(api, workspace)
        # By name on the server: workspace admins may add users they cannot list.
        member = (
            api.add_member(ws, user_id=int(user), role=role)
            if user.isdigit()
            else api.add_member(ws, username=user, role=role)
        )
    out.show(member, output)


@member_app.command("set-role")
def member_set_role(
    user: Annotated[str, typer.Argument(help="Member's user name or id.")],
    role: Annotated[str, typer.Argument(help="member or workspace_admin.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Change a member's role."""
    role = _role(role)
    with client() as api:
        ws = workspace_id(api, workspace)
        out.show(api.set_member_role(ws, member_id(api, ws, user), role), output)


@member_app.command("remove")
def member_remove(
    user: Annotated[str, typer.Argument(help="Member's user name or id.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Remove a member from a workspace."""
    with client() as api:
        ws = workspace_id(api, workspace)
        api.remove_member(ws, member_id(api, ws, user))
    out.done(f"Removed {user!r} from the workspace.", output)


# -- quotas ----------------------------------------------------------------------------------------------------


@quota_app.command("list")
def quota_list(workspace: WorkspaceOpt = None, output: OutputOpt = Output.table) -> None:
    """A workspace's quota in each pool, with current use."""
    with client() as api:
        out.show(api.list_quotas(workspace_id(api, workspace)), output, _QUOTA_COLUMNS)


@quota_app.command("set")
def quota_set(
    pool: Annotated[str, typer.Option("--pool", help="Pool name or id.")],
    maximum: Annotated[
        list[str] | None, typer.Option("--max", help="NAME=QUANTITY, e.g. cpu=64, memory=256Gi, nvidia-a100=16.")
    ] = None,
    guaranteed: Annotated[
        list[str] | None, typer.Option("--guaranteed", help="NAME=QUANTITY, e.g. nvidia-a100=8.")
    ] = None,
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Set (replace) a workspace's quota in a pool. A resource without --max is unlimited."""
    maxima = pairs(maximum or [], "--max", convert=quantity)
    guarantees = pairs(guaranteed or [], "--guaranteed", convert=quantity)
    with client() as api:
        ws = workspace_id(api, workspace)
        out.show(api.set_quota(ws, pool_id(api, pool), maximum=maxima, guaranteed=guarantees), output, None)


@quota_app.command("delete")
def quota_delete(
    pool: Annotated[str, typer.Option("--pool", help="Pool name or id.")],
    workspace: WorkspaceOpt = None,
    output: OutputOpt = Output.table,
) -> None:
    """Remove a workspace's quota in a pool."""
    with client() as api:
        api.delete_quota(workspace_id(api, workspace), pool_id(api, pool))
    out.done(f"Deleted the quota in pool {pool!r}.", output)


# -- audit -----------------------------------------------------------------------------------------------------


@audit_app.command("list")
def audit_list(
    actor: Annotated[str | None, typer.Option(help="Acting user's name.")] = None,
    action: Annotated[str | None, typer.Option(help="e.g. workspace.create.")] = None,
    target_type: Annotated[str | None, typer.Option("--target-type", help="e.g. workspace, user, node.")] = None,
    target_id: Annotated[str | None, typer.Option("--target-id")] = None,
    workspace: Annotated[str | None, typer.Option("--workspace", "-w", help="Workspace name or id.")] = None,
    since: Annotated[datetime | None, typer.Option(help="From this time (UTC), e.g. 2025-01-31T08:00.")] = None,
    until: Annotated[datetime | None, typer.Option(help="Before this time (UTC).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Show at most this many events.")] = 50,
    output: OutputOpt = Output.table,
) -> None:
    """Audit events, newest first."""
    from itertools import islice

    with client() as api:
        events = api.list_audit_events(
            actor=actor,
            action=action,
            target_type=target_type,
            target_id=target_id,
            workspace_id=workspace_id(api, workspace) if workspace else None,
            since=since,
            until=until,
        )
        shown = list(islice(events, limit))
        columns = _AUDIT_COLUMNS
        if output is Output.table and any(e.workspace_id is not None for e in shown):
            # Names, not ids; a deleted workspace keeps its id (the audit log outlives it).
            names = {w.id: w.name for w in api.list_workspaces()}
            where: out.Column = ("WORKSPACE", lambda e: names.get(e.workspace_id, e.workspace_id))
            columns = [where if header == "WORKSPACE" else (header, get) for header, get in _AUDIT_COLUMNS]
        out.show(shown, output, columns)
