"""Skipping tests whose optional package is missing, without importing it into the pytest worker."""

from __future__ import annotations

import importlib.util

import pytest

__all__ = ["skip_without"]


def skip_without(module: str, *, allow_module_level: bool = True) -> None:
    """Skip (the module, or the calling test) when ``module`` is not installed.

    Unlike ``pytest.importorskip`` it does not import the package: the DDP tests only need torch in the job's
    processes, and importing torch at collection cost each xdist worker ~2 s of CPU and ~300 MB.
    """
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')", allow_module_level=allow_module_level)
