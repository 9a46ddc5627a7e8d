"""Dialect-specific SQL over JSON columns, as portable expressions that services compose."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, String, literal
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement


class json_array_contains(FunctionElement[bool]):
    """``json_array_contains(Model.tags, "gpu")``: the JSON array column holds the string.

    PostgreSQL: ``tags @> jsonb_build_array(...)`` (a GIN index on the column can serve it); SQLite: an
    EXISTS over ``json_each``.
    """

    type = Boolean()
    name = "json_array_contains"
    inherit_cache = True

    def __init__(self, column: ColumnElement[Any] | QueryableAttribute[Any], value: str) -> None:
        super().__init__(column, literal(value, String()))


@compiles(json_array_contains)
def _sqlite(element: json_array_contains, compiler: SQLCompiler, **kw: Any) -> str:
    column, value = list(element.clauses)
    return (
        f"EXISTS (SELECT 1 FROM json_each({compiler.process(column, **kw)}) AS json_elem "
        f"WHERE json_elem.value = {compiler.process(value, **kw)})"
    )


@compiles(json_array_contains, "postgresql")
def _postgresql(element: json_array_contains, compiler: SQLCompiler, **kw: Any) -> str:
    column, value = list(element.clauses)
    return f"({compiler.process(column, **kw)} @> jsonb_build_array(CAST({compiler.process(value, **kw)} AS TEXT)))"
