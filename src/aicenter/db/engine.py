"""Async engine and sessions for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


class Database:
    """One engine plus two session factories: ``read()`` and ``write()``.

    Reads run in autocommit: no BEGIN/ROLLBACK around a GET's one or two queries (on PostgreSQL that is
    3 round trips instead of 1 per query; on SQLite 3 thread hops through aiosqlite). A read that needs one
    consistent snapshot across several queries uses ``write()`` or its own transaction.

    On SQLite a read-modify-write inside a deferred transaction fails with SQLITE_BUSY when another
    connection wrote meanwhile (busy_timeout does not help there), so write sessions start with
    ``BEGIN IMMEDIATE``: writers queue on the database lock instead of failing. Readers never block
    writers under WAL.
    """

    def __init__(self, url: str, *, pool_size: int = 10, echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        # Every session ends its own transaction (write() commits or rolls back; reads autocommit), so the
        # pool's rollback-on-return would only add a round trip (an aiosqlite thread hop) per request.
        kwargs: dict[str, Any] = {
            "echo": echo,
            "pool_reset_on_return": None,
            "pool_size": pool_size,
            "max_overflow": 0,
        }
        if self.is_sqlite:
            kwargs["connect_args"] = {"timeout": 30}
            if ":memory:" in url:
                raise ValueError("in-memory SQLite is not supported; use a file")
        else:
            # No pool_pre_ping: it costs a BEGIN/;/ROLLBACK round trip per checkout. Connections that died
            # are invalidated on first error and replaced; recycling bounds their age.
            kwargs["pool_recycle"] = 1800
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.is_sqlite:
            _configure_sqlite(self.engine)
        write_bind = self.engine.execution_options(sqlite_immediate=True) if self.is_sqlite else self.engine
        # SQLite connections are already in driver autocommit (see _configure_sqlite); a flag that skips our
        # BEGIN avoids the isolation-level switch per checkout, which costs aiosqlite thread hops.
        read_bind = self.engine.execution_options(
            **({"sqlite_autocommit": True} if self.is_sqlite else {"isolation_level": "AUTOCOMMIT"})
        )
        self._read = async_sessionmaker(read_bind, expire_on_commit=False)
        self._write = async_sessionmaker(write_bind, expire_on_commit=False)

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for queries; rolled back at exit."""
        async with self._read() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A session in one transaction: committed if the block succeeds, rolled back if it raises."""
        async with self._write() as session, session.begin():
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, emit BEGIN, so that we can choose IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        options = conn.get_execution_options()
        if options.get("sqlite_autocommit", False):
            return
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("sqlite_immediate", False) else "BEGIN")
