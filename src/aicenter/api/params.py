"""Types of path and query parameters shared by the API and the console."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from aicenter.core.ids import MAX_ID

Id = Annotated[int, Field(ge=1, le=MAX_ID)]
"""A row id or version number: 1..2**63-1.

Checked at the edge so that an out-of-range integer is a 422 naming the parameter instead of reaching the
database driver, which cannot bind it (SQLite's raises OverflowError, asyncpg's a DataError: a 500).
"""

Index = Annotated[int, Field(ge=0, le=MAX_ID)]
"""A position counted from 0 (a file of an upload, a part of a file), bounded like ``Id``."""
