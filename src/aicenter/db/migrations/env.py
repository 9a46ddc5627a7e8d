"""Alembic environment. Migrations run on a connection handed in by aicenter.db.migrate."""

from __future__ import annotations

from alembic import context

import aicenter.db.models  # noqa: F401 - registers every table on Base.metadata
from aicenter.db.base import Base

target_metadata = Base.metadata


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through aicenter.db.migrate, which provides a connection")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite needs table rebuilds for ALTER
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
