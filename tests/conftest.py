"""Shared fixtures. Service and API tests run once on SQLite and once on PostgreSQL (``db_backend``).

The schema is built once per backend per session through the real migrations; every test then starts from a
known database: all rows deleted and the bootstrap (default pool, admin) re-applied. DELETE rather than
TRUNCATE: on PostgreSQL TRUNCATE takes an ACCESS EXCLUSIVE lock and costs ~10 ms per table even when empty.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

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
from tests.support.postgres import fresh_database
from tests.support.settings import ADMIN_PASSWORD, make_settings

__all__ = ["ADMIN_PASSWORD"]  # test modules import it from here


def pytest_configure(config: pytest.Config) -> None:
    """Let the run write bytecode caches (__pycache__, gitignored) even where PYTHONDONTWRITEBYTECODE is set.

    Without them every process recompiles: each xdist worker rewrites the asserts of all 280 test modules again
    (collection 19 s of CPU instead of 10 s) and every ``aicenter up``, CLI and launcher subprocess compiles the
    42,000 lines of src/ it imports (+0.4 s of CPU per server start, ~45 starts). Runs before xdist starts its
    workers, which inherit this environment.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


@pytest.fixture(autouse=True)
def _sse_streams_not_shut_down() -> None:
    """sse-starlette ends every event stream of the process once any uvicorn server in it is told to exit (a
    process-wide flag it never resets): a test that stopped an in-process server would otherwise cut the log
    streams of the tests after it on the same worker, before their ``end`` event."""
    from sse_starlette.sse import AppStatus

    AppStatus.should_exit = False


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session (per xdist worker), dropped at the end; its URL."""
    with fresh_database("aicenter_test") as url:
        yield url


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
    return make_settings(home, database_url=db_url, token_cache_s=0)  # tests check revocation immediately


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
