"""Alembic environment. Migrations run on a connection handed in by aicenter.db.migrate."""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import PrimaryKeyConstraint

import aicenter.db.models  # noqa: F401 - registers every table on Base.metadata
from aicenter.db.base import Base

target_metadata = Base.metadata


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | Literal[False]:
    """Alembic renders a primary key's name and columns only: keep PostgreSQL's INCLUDE columns (covering keys,
    db/models/monitoring.py). Everything else is rendered by Alembic (False)."""
    if type_ == "primary_key" and isinstance(obj, PrimaryKeyConstraint):
        include = obj.dialect_kwargs.get("postgresql_include")
        if include:
            columns = ", ".join(repr(c.name) for c in obj.columns)
            name = f"pk_{obj.table.name}"
            return f"sa.PrimaryKeyConstraint({columns}, name=op.f({name!r}), postgresql_include={list(include)!r})"
    return False


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through aicenter.db.migrate, which provides a connection")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite needs table rebuilds for ALTER
        compare_type=True,
        render_item=_render_item,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
