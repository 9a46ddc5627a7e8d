"""Apply Alembic migrations at start-up, under a lock so that several replicas can start at once."""

from __future__ import annotations

import fcntl
import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text

from aicenter.db.engine import Database

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# Any constant works; it names the advisory lock that serializes migrations across replicas.
_PG_LOCK_ID = 0x41494345  # "AICE"


def alembic_config(connection: Connection | None = None) -> Config:
    # Alembic is imported when migrations run, not with this module: it pulls in mako and pygments,
    # ~0.3 s of `aicenter up`'s start-up budget of 3 s.
    cfg: Config = importlib.import_module("alembic.config").Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _upgrade(connection: Connection, revision: str) -> None:
    importlib.import_module("alembic.command").upgrade(alembic_config(connection), revision)


def _downgrade(connection: Connection, revision: str) -> None:
    importlib.import_module("alembic.command").downgrade(alembic_config(connection), revision)


async def upgrade(db: Database, revision: str = "head", *, lock_dir: Path | None = None) -> None:
    """Bring the schema to ``revision``. Safe to call from many processes at once."""
    if db.is_sqlite:
        # SQLite runs in one home; a file lock beside the database serializes concurrent starts.
        db_path = Path(db.url.split("///", 1)[1])
        lock_path = (lock_dir or db_path.parent) / ".migrate.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            async with db.engine.connect() as conn:
                await conn.run_sync(_upgrade, revision)
                await conn.commit()
        return
    async with db.engine.connect() as conn:
        # Session-level advisory lock: held until released, across Alembic's own transactions.
        await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _PG_LOCK_ID})
        try:
            await conn.commit()
            await conn.run_sync(_upgrade, revision)
            await conn.commit()
        finally:
            await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _PG_LOCK_ID})
            await conn.commit()


async def downgrade(db: Database, revision: str) -> None:
    async with db.engine.connect() as conn:
        await conn.run_sync(_downgrade, revision)
        await conn.commit()
