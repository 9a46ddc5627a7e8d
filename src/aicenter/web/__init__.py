"""The web console: server-rendered pages and static assets shipped in the package."""

from __future__ import annotations

from fastapi import FastAPI


def install(app: FastAPI) -> None:
    """Mount the console's routes and static files on ``app``."""
