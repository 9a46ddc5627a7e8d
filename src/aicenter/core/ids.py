"""Row ids: what the database can hold."""

from __future__ import annotations

MAX_ID = 2**63 - 1
"""The largest value a 64-bit signed integer column holds (ids and version numbers, SQLite and PostgreSQL)."""
