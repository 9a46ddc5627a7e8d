"""Autogenerate an Alembic revision from the ORM models: python tools/make_migration.py "message".

It upgrades a scratch SQLite database to head and diffs the models against it, so the new revision holds only
what changed since the last one.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from alembic import command
from sqlalchemy import Connection

from aicenter.db import migrate
from aicenter.db.engine import Database


def _revision(connection: Connection, message: str) -> None:
    command.revision(migrate.alembic_config(connection), message=message, autogenerate=True)


async def main(message: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite+aiosqlite:///{Path(tmp) / 'scratch.db'}")
        await migrate.upgrade(db)
        async with db.engine.connect() as conn:
            await conn.run_sync(_revision, message)
        await db.dispose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "change"))
