"""Fixtures for the simulator tests: slices of the public traces, shipped in tests/data/traces."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def _shipped(name: str) -> Path:
    path = TRACES / name
    # A missing slice is a broken checkout, not a reason to skip: fail loudly.
    assert path.is_file(), f"{path} is missing; it is part of the repository (tests/data/traces/README.md)"
    return path


@pytest.fixture
def philly_slice() -> Path:
    """The header and first 300 jobs of philly.csv."""
    return _shipped("philly_head300.csv")


@pytest.fixture
def openb_pods_slice() -> Path:
    """The header and first 400 tasks of openb_pod_list_default.csv."""
    return _shipped("openb_pod_list_default_head400.csv")


@pytest.fixture
def openb_nodes_slice() -> Path:
    """The header and first 60 GPU nodes of openb_node_list_gpu_node.csv."""
    return _shipped("openb_node_list_gpu_node_head60.csv")
