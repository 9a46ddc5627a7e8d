"""``aicenter login/logout/whoami``, ``aicenter profile ...`` and ``aicenter token ...``."""

from __future__ import annotations

import contextlib
import re
import socket
import sys
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import STATE, CliError, Output, OutputOpt, client, invalid, pick
from aicenter.cli.config import DEFAULT_PROFILE, CliConfig, Profile

profile_app = typer.Typer(help="Switch between servers and accounts.", no_args_is_help=True)
token_app = typer.Typer(help="Your API tokens (for scripts and CI).", no_args_is_help=True)

_DURATION = re.compile(r"^(\d+)([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _read_password(password_stdin: bool, prompt: str = "Password") -> str:
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise invalid("--password-stdin", "stdin gave an empty password")
        return password
    if not sys.stdin.isatty():
        raise invalid("--password-stdin", "no terminal to ask for the password on; pipe it with --password-stdin")
    return str(typer.prompt(prompt, hide_input=True))


def login(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            "-s",
            help="Server URL. Default: the profile's, else the current profile's, else http://127.0.0.1:8000.",
        ),
    ] = None,
    username: Annotated[str | None, typer.Option("--username", "-u", help="Default: asked for.")] = None,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="Read the password from stdin.")] = False,
    profile: Annotated[str | None, typer.Option("--profile", "-p", help="Save under this profile name.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Log in and keep the server and a token in ~/.aicenter/config.toml (mode 0600)."""
    from aicenter.client import ApiError, Client

    cfg = _load()
    name = profile or STATE.profile or cfg.current or DEFAULT_PROFILE
    existing = cfg.profiles.get(name)
    # A new profile starts on the current profile's server: usually another account on the same server.
    server = server or (existing.server if existing else cfg.active().server)
    if not username:
        if not sys.stdin.isatty() or password_stdin:
            raise invalid("--username", "required when stdin is not a terminal")
        username = str(typer.prompt("Username", default=existing.username if existing else None))
    password = _read_password(password_stdin)
    with Client(server) as api:
        result = api.login(username, password, token_name=f"cli@{socket.gethostname()}"[:128])
        if existing and existing.token and existing.server == server:
            # Logging in again replaces the profile's token: revoke the old one rather than leave it valid.
            api.token = existing.token
            with contextlib.suppress(ApiError):  # already expired or revoked
                api.logout()
    # The default workspace belongs to this account on this server: kept when the same user logs in again.
    same = existing is not None and existing.server == server and existing.username == result.user.username
    cfg.profiles[name] = Profile(
        name=name,
        server=server,
        token=result.token,
        username=result.user.username,
        workspace=existing.workspace if same and existing else None,
    )
    cfg.current = name
    cfg.save()
    if output is Output.table:
        typer.echo(f"Logged in to {server} as {result.user.username} (profile {name!r}, saved in {cfg.path}).")
    else:
        out.show(result.user, output)


def logout(output: OutputOpt = Output.table) -> None:
    """Revoke this profile's token on the server and forget it."""
    from aicenter.client import ApiError

    cfg = _load()
    profile = cfg.active(STATE.profile)
    stored = cfg.profiles.get(profile.name)
    if stored is None or not stored.token:
        out.done(f"Not logged in (profile {profile.name!r}).", output)
        return
    warning = None
    with client() as api:
        try:
            api.logout()
        except ApiError as exc:
            if exc.status not in (0, 401):
                raise
            # An expired token, or a server that is gone: forget the token locally all the same.
            warning = f"warning: the server did not revoke the token ({exc.code}: {exc.message})"
    stored.token = None
    cfg.save()
    if warning:
        typer.echo(warning, err=True)
    out.done(f"Logged out of {stored.server} (profile {profile.name!r}).", output)


def whoami(output: OutputOpt = Output.table) -> None:
    """Show the signed-in user, the server and the profile."""
    from aicenter.client import ApiError

    with client() as api:
        user = api.me()
        if output is not Output.table:
            out.show(user, output)
            return
        names: dict[int, str] = {}
        try:
            mine = api.my_workspaces()
            names = {w.workspace.id: w.workspace.name for w in mine}
            workspaces = ", ".join(f"{w.workspace.name} ({w.role})" for w in mine)
        except ApiError as exc:
            if exc.status != 404:
                raise
            workspaces = "?"
        active = CliConfig.load().active(STATE.profile)
        rows: list[out.Column] = [
            ("user", lambda u: u.username),
            ("name", lambda u: u.display_name),
            ("platform admin", lambda u: u.is_platform_admin),
            ("state", lambda u: u.state),
            ("workspaces", lambda u: workspaces),
            ("default workspace", lambda u: names.get(u.default_workspace_id, u.default_workspace_id)),
            ("profile workspace", lambda u: active.workspace or "-"),
            ("server", lambda u: api.base_url),
            ("profile", lambda u: active.name),
        ]
        out.show(user, output, rows)


def _load() -> CliConfig:
    try:
        return CliConfig.load()
    except ValueError as exc:
        raise CliError("bad_config", str(exc)) from None


# -- profiles --------------------------------------------------------------------------------------------------


@profile_app.command("list")
def profile_list(output: OutputOpt = Output.table) -> None:
    """Every profile; the current one is marked."""
    cfg = _load()
    current = cfg.active(STATE.profile).name
    rows = [
        {
            "name": p.name,
            "server": p.server,
            "username": p.username,
            "logged_in": bool(p.token),
            "current": p.name == current,
        }
        for p in cfg.profiles.values()
    ]
    out.show(
        rows,
        output,
        [
            ("", lambda r: "*" if r["current"] else ""),
            ("NAME", lambda r: r["name"]),
            ("SERVER", lambda r: r["server"]),
            ("USER", lambda r: r["username"]),
            ("LOGGED IN", lambda r: r["logged_in"]),
        ],
    )


@profile_app.command("use")
def profile_use(name: Annotated[str, typer.Argument(help="A profile from `aicenter profile list`.")]) -> None:
    """Make a profile the current one."""
    cfg = _load()
    if name not in cfg.profiles:
        raise CliError("not_found", f"no profile named {name!r}; `aicenter login --profile {name}` creates it")
    cfg.current = name
    cfg.save()
    typer.echo(f"Using profile {name!r} ({cfg.profiles[name].server}).")


@profile_app.command("remove")
def profile_remove(name: Annotated[str, typer.Argument(help="The profile to forget.")]) -> None:
    """Forget a profile (its token stays valid on the server until it expires; `aicenter logout` revokes it)."""
    cfg = _load()
    if cfg.profiles.pop(name, None) is None:
        raise CliError("not_found", f"no profile named {name!r}")
    if cfg.current == name:
        cfg.current = None
    cfg.save()
    typer.echo(f"Removed profile {name!r}.")


# -- tokens ----------------------------------------------------------------------------------------------------

_TOKEN_COLUMNS: list[out.Column] = [
    ("ID", lambda t: t.id),
    ("NAME", lambda t: t.name),
    ("KIND", lambda t: t.kind),
    ("CREATED", lambda t: t.created_at),
    ("EXPIRES", lambda t: t.expires_at or "never"),
    ("LAST USED", lambda t: t.last_used_at),
    ("REVOKED", lambda t: t.revoked_at),
]


@token_app.command("list")
def token_list(
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include revoked tokens.")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """Your tokens (never their secrets)."""
    with client() as api:
        out.show(api.list_tokens(include_revoked=all_), output, _TOKEN_COLUMNS)


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A name to recognise it by, e.g. ci-nightly.")],
    expires_in: Annotated[
        str | None, typer.Option("--expires-in", help="Lifetime such as 90m, 12h, 30d, 8w. Default: no expiry.")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create an API token. Its secret is printed once; keep it somewhere safe."""
    expires_at = None
    if expires_in is not None:
        match = _DURATION.match(expires_in.strip())
        if not match or int(match.group(1)) == 0:
            raise invalid("--expires-in", f"expected a duration such as 30d or 12h, got {expires_in!r}")
        expires_at = datetime.now(UTC) + timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    with client() as api:
        created = api.create_token(name, expires_at=expires_at)
    if output is Output.table:
        expiry = out.when(created.expires_at) + " UTC" if created.expires_at else "never"
        typer.echo(f"Created token {created.name!r} (id {created.id}, expires {expiry}). Its secret, shown only now:")
        typer.echo(created.token)
    else:
        out.show(created, output)


@token_app.command("revoke")
def token_revoke(
    token: Annotated[str, typer.Argument(help="Token id or name.")],
    output: OutputOpt = Output.table,
) -> None:
    """Revoke one of your tokens; it stops working at once."""
    with client() as api:
        found = pick("token", token, api.list_tokens(), lambda t: t.name, lambda t: t.id)
        api.revoke_token(found.id)
    out.done(f"Revoked token {found.name!r} (id {found.id}).", output)
