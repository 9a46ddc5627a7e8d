"""The ``aicenter`` (alias ``aic``) command line: server commands and an API client built on the SDK."""

from __future__ import annotations

import sys
import traceback
from typing import Annotated, Any

import typer

# Typer vendors its own copy of click (typer._click) and raises that copy's exceptions, not the click package's.
from typer._click import exceptions as click_exc
from typer.core import TyperGroup

from aicenter import __version__
from aicenter.cli import admin, alerts, auth, billing, catalog, inventory, jobs, notebooks, services, ssh_keys, tenancy
from aicenter.cli.common import STATE, CliError, Output, OutputOpt
from aicenter.cli.simulate import simulate
from aicenter.cli.top import top
from aicenter.cli.up import up


def _fail(code: str, message: str, field: str | None, exit_code: int) -> int:
    line = f"error: {code}: {message}"
    if field and field not in message:
        line += f" (field: {field})"
    typer.echo(line, err=True)
    return exit_code


def _more_problems(problems: Any) -> None:
    """The problems after the first of a validation error, one indented line each: a spec with three mistakes is
    fixed in one round, not three (the first is already on the ``error:`` line, which scripts match)."""
    if not isinstance(problems, list) or len(problems) < 2:
        return
    for problem in problems[1:]:
        if isinstance(problem, dict):
            where = f"{problem['field']}: " if problem.get("field") else ""
            typer.echo(f"  {where}{problem.get('message', '')}", err=True)


def _report(exc: BaseException) -> int:
    """One line on stderr for any failure, and the exit status: 2 for usage and validation errors, else 1."""
    from aicenter.client.errors import ApiError  # only on the error path: it imports the SDK
    from aicenter.core.errors import AicenterError

    if isinstance(exc, CliError):
        return _fail(exc.code, exc.message, exc.field, exc.exit_code)
    if isinstance(exc, ApiError):
        message = exc.message
        if exc.code == "connection_failed":
            message += " (is the server running? `aicenter up` starts one; `aicenter login --server URL` picks one)"
        elif exc.status == 401:
            message += " (run `aicenter login`)"
        validation = exc.status in (400, 422) or exc.code == "validation_failed"
        code = _fail(exc.code, message, exc.field, 2 if validation else 1)
        _more_problems(exc.details.get("errors"))
        return code
    if isinstance(exc, AicenterError):
        field = exc.details.get("field")
        return _fail(exc.code, exc.message, str(field) if field else None, 2 if exc.status in (400, 422) else 1)
    if isinstance(exc, click_exc.UsageError):
        where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx else ""
        return _fail("usage", exc.format_message() + where, None, exc.exit_code)
    if isinstance(exc, click_exc.ClickException):
        return _fail("error", exc.format_message(), None, exc.exit_code)
    if isinstance(exc, typer.Abort):
        typer.echo("aborted", err=True)
        return 1
    if STATE.debug:
        traceback.print_exception(exc)
    return _fail("internal", f"{type(exc).__name__}: {exc} (run with --debug for a traceback)", None, 1)


def _output_last(args: list[str]) -> list[str]:
    """``aicenter -o json job list`` read as ``aicenter job list -o json``.

    ``-o`` is an option of each command (each knows which formats it prints), but people put it first, as with
    ``kubectl``: an ``-o`` before the command is moved to the end of the line (before a ``--``). A command
    without ``-o`` then says so, naming its ``--help``.
    """
    rest, moved, i = list(args), [], 0
    while i < len(rest) and rest[i].startswith("-"):
        arg = rest[i]
        if arg in ("-o", "--output") and i + 1 < len(rest):
            moved += rest[i : i + 2]
            del rest[i : i + 2]
        elif arg.startswith("--output=") or (arg.startswith("-o") and len(arg) > 2):
            moved.append(arg)
            del rest[i]
        else:
            i += 2 if arg in ("-P", "--profile") else 1
    if not moved:
        return rest
    end = rest.index("--") if "--" in rest else len(rest)
    return rest[:end] + moved + rest[end:]


class _Group(TyperGroup):
    """The root group: turns every failure into one line on stderr and an exit status, never a traceback."""

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        STATE.profile, STATE.debug = None, False
        args = _output_last(list(sys.argv[1:] if args is None else args))
        try:
            rv = super().main(args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except click_exc.NoArgsIsHelpError as exc:
            exc.show()
            code = exc.exit_code
        except Exception as exc:
            code = _report(exc)
        if not standalone_mode:
            return code
        sys.exit(code)


app = typer.Typer(
    name="aicenter",
    cls=_Group,
    help="aicenter: the one-stop platform for AI computing centers. `aicenter up` starts a server.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root(
    profile: Annotated[
        str | None, typer.Option("--profile", "-P", help="Use this profile instead of the current one.")
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected errors.")] = False,
) -> None:
    STATE.profile = profile
    STATE.debug = debug


@app.command("version")
def version(output: OutputOpt = Output.table) -> None:
    """Print the version of this client."""
    if output is Output.table:
        typer.echo(f"aicenter {__version__}")
    else:
        from aicenter.cli.output import show

        show({"version": __version__}, output)


app.command("up")(up)
app.command("login")(auth.login)
app.command("logout")(auth.logout)
app.command("whoami")(auth.whoami)
app.command("top")(top)
app.add_typer(auth.profile_app, name="profile")
app.add_typer(auth.token_app, name="token")
app.add_typer(ssh_keys.ssh_key_app, name="ssh-key")
app.add_typer(tenancy.user_app, name="user")
app.add_typer(tenancy.workspace_app, name="workspace")
app.add_typer(tenancy.member_app, name="member")
app.add_typer(tenancy.quota_app, name="quota")
app.add_typer(tenancy.audit_app, name="audit")
app.add_typer(inventory.node_app, name="node")
app.add_typer(inventory.accel_app, name="accelerator-type")
app.add_typer(inventory.spec_app, name="spec")
app.add_typer(inventory.pool_app, name="pool")
app.add_typer(catalog.dataset_app, name="dataset")
app.add_typer(catalog.algorithm_app, name="algorithm")
app.add_typer(catalog.image_app, name="image")
app.add_typer(catalog.model_app, name="model")
app.add_typer(jobs.job_app, name="job")
app.add_typer(notebooks.notebook_app, name="notebook")
app.add_typer(services.service_app, name="service")
app.add_typer(admin.admin_app, name="admin")
app.add_typer(billing.billing_app, name="billing")
app.add_typer(alerts.alert_app, name="alert")
app.command("events")(alerts.events)
app.command("simulate")(simulate)


def main() -> None:
    """Console-script entry point of ``aicenter`` and ``aic``."""
    app()
