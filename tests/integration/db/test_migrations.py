"""Migrations on SQLite and PostgreSQL: upgrade from empty, no drift from the models, downgrade, concurrent start."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect

from aicenter.db import migrate
from aicenter.db.base import Base
from aicenter.db.engine import Database

# Tables Alembic itself keeps; everything else must come and go with the migrations.
_ALEMBIC_TABLES = {"alembic_version"}


def _model_diff(connection: Connection) -> list[Any]:
    """What ``alembic check`` reports: the autogenerate diff between the models and the migrated database."""
    context = MigrationContext.configure(connection, opts={"compare_type": True})
    return list(compare_metadata(context, Base.metadata))


def _table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names()) - _ALEMBIC_TABLES


def _current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _head() -> str:
    head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    assert head is not None
    return head


async def _run(db: Database, fn: Any) -> Any:
    async with db.engine.connect() as conn:
        return await conn.run_sync(fn)


async def test_upgrade_check_downgrade_upgrade(empty_db_url: str) -> None:
    db = Database(empty_db_url)
    try:
        assert await _run(db, _table_names) == set()

        await migrate.upgrade(db)
        assert await _run(db, _current_revision) == _head()
        assert await _run(db, _table_names) == set(Base.metadata.tables)
        diff = await _run(db, _model_diff)
        assert diff == [], f"models and migrations disagree; add a migration (tools/make_migration.py): {diff}"

        await migrate.upgrade(db)  # already at head: a restart changes nothing
        assert await _run(db, _current_revision) == _head()

        await migrate.downgrade(db, "base")
        assert await _run(db, _table_names) == set(), "downgrade to base left tables behind"
        assert await _run(db, _current_revision) is None

        await migrate.upgrade(db)
        assert await _run(db, _model_diff) == []
    finally:
        await db.dispose()


_UPGRADE_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys, time
    from aicenter.db import migrate
    from aicenter.db.engine import Database

    async def main() -> None:
        db = Database(sys.argv[1])
        # Both processes begin at the same instant, after their (slow, uneven) imports.
        await asyncio.sleep(max(0.0, float(sys.argv[2]) - time.time()))
        try:
            await migrate.upgrade(db)
        finally:
            await db.dispose()

    asyncio.run(main())
    """
)


async def test_concurrent_upgrades_from_two_processes(empty_db_url: str) -> None:
    """Two replicas starting at once on one empty database: both succeed, the schema is built once."""
    start_at = str(time.time() + 4)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _UPGRADE_SCRIPT,
            empty_db_url,
            start_at,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(proc.communicate() for proc in procs)), timeout=120)
    for proc, (_, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    db = Database(empty_db_url)
    try:
        assert await _run(db, _current_revision) == _head()
        assert await _run(db, _model_diff) == []
    finally:
        await db.dispose()
