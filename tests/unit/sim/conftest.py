"""Fixtures for the simulator tests: slices of the public traces (skipped when ../shared/traces is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

TRACES = (Path(__file__).parents[3] / "../shared/traces").resolve()


def _slice(name: str, rows: int, dest: Path) -> Path:
    source = TRACES / name
    if not source.is_file():
        pytest.skip(f"{source} not found")
    with source.open(encoding="utf-8") as f:
        lines = [next(f) for _ in range(rows + 1)]
    out = dest / name
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture
def philly_slice(tmp_path: Path) -> Path:
    """The header and first 300 jobs of philly.csv."""
    return _slice("philly.csv", 300, tmp_path)


@pytest.fixture
def openb_pods_slice(tmp_path: Path) -> Path:
    """The header and first 400 tasks of openb_pod_list_default.csv."""
    return _slice("openb_pod_list_default.csv", 400, tmp_path)


@pytest.fixture
def openb_nodes_slice(tmp_path: Path) -> Path:
    """The header and first 60 GPU nodes of openb_node_list_gpu_node.csv."""
    return _slice("openb_node_list_gpu_node.csv", 60, tmp_path)
