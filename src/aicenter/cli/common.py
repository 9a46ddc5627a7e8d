"""What every command shares: global state, the ``-o`` option, errors, the SDK client, and name -> id lookups."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:  # the SDK pulls in httpx and pydantic: loaded only by commands that talk to a server
    from aicenter.cli.config import Profile
    from aicenter.client import Client

T = TypeVar("T")


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[
    Output, typer.Option("--output", "-o", help="table (readable), json (the API's JSON) or yaml.", show_default=False)
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


@dataclass
class State:
    """Options of the top-level command, reset on every invocation."""

    profile: str | None = None
    debug: bool = False


STATE = State()


class CliError(Exception):
    """A failure found by the CLI itself, shown like a server error: ``error: <code>: <message>``."""

    def __init__(self, code: str, message: str, *, field: str | None = None, exit_code: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.exit_code = exit_code


def invalid(option: str, message: str) -> CliError:
    """A usage/validation error in an option or argument: exit code 2."""
    return CliError("validation_failed", f"{option}: {message}", field=option, exit_code=2)


def read_text_file(path: Path, option: str) -> str:
    """A spec or notebook file's text; ``-`` reads standard input. A missing or unreadable file is ``invalid``."""
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise invalid(option, f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise invalid(option, f"{path}: cannot be read ({exc})") from None


def profile() -> Profile:
    """The active profile (``--profile``, ``$AICENTER_PROFILE``, the current one)."""
    from aicenter.cli.config import CliConfig

    try:
        return CliConfig.load().active(STATE.profile)
    except ValueError as exc:
        raise CliError("bad_config", str(exc)) from None


def client() -> Client:
    """An SDK client for the active profile.

    Raises:
        CliError: ``not_logged_in`` when the profile has no token: every command that calls the API needs one,
            and without this check the first request fails as ``connection_failed`` (no profile means the
            default URL, where usually no server runs) or as a bare 401.
    """
    from aicenter.client import Client

    active = profile()
    if not active.token:
        raise CliError(
            "not_logged_in",
            f"not logged in (profile {active.name!r}); run `aicenter login --server URL` first",
        )
    return Client(active.server, active.token)


def confirm(question: str, yes: bool) -> None:
    """Ask before something destructive; ``--yes`` skips it, and without a terminal ``--yes`` is required."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise CliError("confirmation_required", f"{question} Pass --yes to confirm.", exit_code=2)
    if not typer.confirm(question, default=False):
        raise typer.Exit(1)


# -- parsing ---------------------------------------------------------------------------------------------------


def quantity(value: str) -> str | int:
    """A quantity as the API takes it: whole numbers as integers, anything else (``500m``, ``64Gi``) as text."""
    return int(value) if value.isdigit() else value


def pairs(values: Iterable[str], option: str, *, convert: Callable[[str], Any] = str) -> dict[str, Any]:
    """Parse repeated ``NAME=VALUE`` options into a dict."""
    out: dict[str, Any] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise invalid(option, f"expected NAME=VALUE, got {item!r}")
        out[name.strip()] = convert(value.strip())
    return out


# -- name -> id ------------------------------------------------------------------------------------------------


def pick(kind: str, ref: str, items: Iterable[T], name: Callable[[T], str], ident: Callable[[T], int]) -> T:
    """The item whose name is ``ref``, else (for digits) whose id is ``ref``; names win over ids."""
    by_id: T | None = None
    for item in items:
        if name(item) == ref:
            return item
        if ref.isdigit() and ident(item) == int(ref):
            by_id = item
    if by_id is not None:
        return by_id
    raise CliError("not_found", f"no {kind} named {ref!r}")


def workspace_id(api: Client, ref: str | None) -> int:
    """The id of workspace ``ref`` (name or id); None means the profile's workspace (``aicenter workspace use``),
    else the signed-in user's default workspace."""
    saved = None if ref else profile().workspace
    ref = ref or saved
    if ref is None:
        default = api.me().default_workspace_id
        if default is None:
            raise CliError("not_found", "you have no default workspace; pass --workspace NAME", exit_code=2)
        return default
    found = next((w for w in api.list_workspaces(name=ref) if w.name == ref), None)
    if found is not None:
        return found.id
    if ref.isdigit():
        return int(ref)
    hint = " (the profile's default workspace: `aicenter workspace use` changes it)" if saved else ""
    raise CliError("not_found", f"no workspace named {ref!r} (or you are not a member of it){hint}")


def chosen_workspace(api: Client, ref: str | None) -> int | None:
    """The workspace a command acts in: ``-w`` when given, else the profile's (``aicenter workspace use``), else
    None, which leaves the choice to the server (the spec's ``workspace``, or the user's default workspace)."""
    if ref or profile().workspace:
        return workspace_id(api, ref)
    return None


def user_id(api: Client, ref: str) -> int:
    found = next((u for u in api.list_users(username=ref) if u.username == ref), None)
    if found is not None:
        return found.id
    if ref.isdigit():
        return int(ref)
    raise CliError("not_found", f"no user named {ref!r}")


def member_id(api: Client, workspace: int, ref: str) -> int:
    """A member's user id, looked up in the workspace itself (workspace admins cannot list all users)."""
    return pick("member", ref, api.list_members(workspace), lambda m: m.username, lambda m: m.user_id).user_id


def pool_id(api: Client, ref: str) -> int:
    return pick("pool", ref, api.list_pools(), lambda p: p.name, lambda p: p.id).id


def node_id(api: Client, ref: str) -> int:
    return pick("node", ref, api.list_nodes(), lambda n: n.name, lambda n: n.id).id


def spec_id(api: Client, ref: str) -> int:
    return pick("spec", ref, api.list_specs(), lambda s: s.name, lambda s: s.id).id


def accelerator_type_id(api: Client, ref: str) -> int:
    return pick("accelerator type", ref, api.list_accelerator_types(), lambda a: a.name, lambda a: a.id).id
