"""Throwaway PostgreSQL databases for tests, on the server at ``AICENTER_TEST_PG_DSN`` (default 127.0.0.1:5432).

Every database gets a unique name, so parallel test runs (several engineers, pytest-xdist workers) never meet.
Without a reachable server a test is skipped on a laptop and fails in CI, where PostgreSQL must be up.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg
import pytest

PG_ADMIN_DSN = os.environ.get("AICENTER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def pg_available() -> bool:
    """Whether the PostgreSQL server answers within 3 seconds."""

    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
        except (OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


def require_postgres() -> None:
    """Skip the calling test (fail it in CI) when PostgreSQL is not reachable."""
    if pg_available():
        return
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}; CI must start it")
    pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")


def _admin_execute(sql: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


@contextmanager
def fresh_database(prefix: str = "aicenter_test") -> Iterator[str]:
    """Create an empty database named ``<prefix>_<random>``, yield its SQLAlchemy (asyncpg) URL, then drop it.

    The drop uses ``WITH (FORCE)``: a server process killed by the test may still hold connections.
    """
    require_postgres()
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    _admin_execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    try:
        yield f"{base}/{name}"
    finally:
        _admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
