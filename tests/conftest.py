"""Shared fixtures. Service and API tests run once on SQLite and once on PostgreSQL (``db_backend``).

The schema is built once per backend per session through the real migrations; every test then starts from a
known database: all rows deleted and the bootstrap (default pool, admin) re-applied. DELETE rather than
TRUNCATE: on PostgreSQL TRUNCATE takes an ACCESS EXCLUSIVE lock and costs ~10 ms per table even when empty.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI
from sqlalchemy import delete

from aicenter.app import create_app
from aicenter.config import Settings
from aicenter.db.base import Base
from aicenter.db.engine import Database
from aicenter.services.bootstrap import bootstrap

ADMIN_PASSWORD = "admin-password-1"
PG_ADMIN_DSN = os.environ.get("AICENTER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_available() -> bool:
    async def probe() -> bool:
        try:
            conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
        except (OSError, asyncpg.PostgresError):
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped at the end. Returns its SQLAlchemy URL."""
    if not _pg_available():
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}; CI must start it")
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    name = f"aicenter_test_{uuid.uuid4().hex[:10]}"

    async def run(sql: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    yield f"{base}/{name}"
    asyncio.run(run(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def db_url(db_backend: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> str:
    if db_backend == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('sqlite') / 'aicenter.db'}"


@pytest.fixture(scope="session")
def settings(db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home: Path = tmp_path_factory.mktemp("home")
    return Settings(
        home=home,
        database_url=db_url,
        admin_password=ADMIN_PASSWORD,
        secret_key="test-secret-key-0123456789",
        register_host=False,
        token_cache_s=0,  # tests check revocation immediately
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    application = create_app(settings, run_controllers=False)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
def db(app: FastAPI) -> Database:
    database: Database = app.state.ctx.db
    return database


@pytest_asyncio.fixture(loop_scope="session", autouse=True)
async def _clean_database(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Reset the database before each test that uses it."""
    if "app" not in request.fixturenames:
        yield
        return
    app: FastAPI = request.getfixturevalue("app")
    database: Database = app.state.ctx.db
    async with database.write() as session:
        for table in reversed(Base.metadata.sorted_tables):
            await session.execute(delete(table))
    async with database.write() as session:
        await bootstrap(session, admin_username="admin", admin_password=ADMIN_PASSWORD)
    app.state.ctx.tokens.forget()
    yield


@pytest_asyncio.fixture(loop_scope="session")
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c
