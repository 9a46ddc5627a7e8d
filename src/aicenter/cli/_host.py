"""Commands that work on the server's own home or database, without the API: for the operator on the server's
host when no one can sign in (the first admin's password was lost). They read the server's settings the way
``aicenter up`` does (``AICENTER_HOME``, ``AICENTER_DATABASE_URL``, ...), so they act on the same database."""

from __future__ import annotations

import asyncio
import getpass
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aicenter.cli.common import CliError

if TYPE_CHECKING:
    from aicenter.config import Settings


def server_settings(home: Path | None) -> Settings:
    """The server's settings from its environment; ``home`` (``--home``) overrides ``AICENTER_HOME``."""
    from pydantic import ValidationError

    from aicenter.config import Settings

    try:
        return Settings(home=home) if home is not None else Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise CliError("bad_config", f"{field + ': ' if field else ''}{first.get('msg', exc)}", exit_code=2) from None


def _shown_url(settings: Settings) -> str:
    """The database URL without its password, for messages."""
    from sqlalchemy.engine import make_url

    return make_url(settings.effective_database_url).render_as_string(hide_password=True)


@dataclass(frozen=True)
class ResetResult:
    username: str
    user_id: int
    revoked_sign_ins: int


def reset_password(settings: Settings, username: str, password: str) -> ResetResult:
    """Set ``username``'s password in the server's database (see ``services.tenancy.reset_password``).

    Raises:
        CliError: No database there, it cannot be reached, or no user of that name.
    """
    if settings.database_url is None and not (settings.home_dir / "aicenter.db").exists():
        raise CliError(
            "not_found",
            f"no aicenter database in {settings.home_dir}: give the server's home with --home or AICENTER_HOME "
            "(or its AICENTER_DATABASE_URL)",
        )
    return asyncio.run(_reset(settings, username, password))


async def _reset(settings: Settings, username: str, password: str) -> ResetResult:
    from sqlalchemy.exc import SQLAlchemyError

    from aicenter.core.errors import NotFound
    from aicenter.db.engine import Database
    from aicenter.services import tenancy
    from aicenter.services.context import Actor

    db = Database(settings.effective_database_url, pool_size=1)
    # Audited as the operating-system account that ran the command: there is no signed-in user.
    actor = Actor.system(f"host:{getpass.getuser()}")
    try:
        async with db.write() as session:
            done = await tenancy.reset_password(session, actor, username=username, password=password)
            return ResetResult(done.user.username, done.user.id, done.revoked_sign_ins)
    except NotFound as exc:
        raise CliError("not_found", f"{exc.message} in the database {_shown_url(settings)}", field="USER") from None
    except (SQLAlchemyError, OSError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise CliError("database_error", f"cannot use the database {_shown_url(settings)}: {reason}") from None
    finally:
        await db.dispose()
