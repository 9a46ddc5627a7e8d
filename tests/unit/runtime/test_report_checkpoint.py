"""Metric reporting and checkpoint helpers, as a job script uses them."""

from __future__ import annotations

import importlib
import json
import os
import warnings
from pathlib import Path

import pytest

from aicenter.runtime import checkpoint_dir, latest, report, restart_count, save_atomic
from aicenter.runtime import report as report_module_function
from aicenter.runtime.report import metrics_path


def test_report_appends_json_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AICENTER_RUN_DIR", str(tmp_path))
    report(step=1, loss=0.5, accuracy=1)
    report(loss=float("nan"))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k != "at"} for r in records] == [
        {"step": 1, "loss": 0.5, "accuracy": 1.0},
        {"step": None, "loss": None},
    ]
    assert all(r["at"].endswith("Z") for r in records)
    assert report_module_function is report


def test_report_refuses_non_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AICENTER_RUN_DIR", str(tmp_path))
    with pytest.raises(TypeError, match="'loss' must be a number"):
        report(step=1, loss="low")  # type: ignore[arg-type]
    assert not (tmp_path / "metrics.jsonl").exists()


def test_report_outside_a_job_warns_and_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AICENTER_RUN_DIR", raising=False)
    # The package exports the function under the module's name, so reach the module through importlib.
    monkeypatch.setattr(importlib.import_module("aicenter.runtime.report"), "_warned", False)
    assert metrics_path() is None
    with pytest.warns(UserWarning, match="not inside an aicenter job"):
        report(step=1, loss=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report(step=2, loss=0.1)  # warned once only


def test_checkpoints_are_atomic_and_latest_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt = tmp_path / "ckpt"
    monkeypatch.setenv("AICENTER_CHECKPOINT_DIR", str(ckpt))
    assert latest() is None
    assert checkpoint_dir() == ckpt
    assert ckpt.is_dir()
    first = save_atomic("step-00010.pt", b"ten")
    second = save_atomic("step-00020.pt", b"twenty")
    os.utime(first, ns=(10**18, 10**18))  # same mtime for both: the name decides
    os.utime(second, ns=(10**18, 10**18))
    (ckpt / ".step-00030.pt.abc.tmp").write_bytes(b"half")  # a write that was killed midway
    assert latest("step-*.pt") == second
    assert latest("*.json") is None
    assert second.read_bytes() == b"twenty"
    assert save_atomic("step-00020.pt", b"again").read_bytes() == b"again"
    assert sorted(p.name for p in ckpt.iterdir()) == [".step-00030.pt.abc.tmp", "step-00010.pt", "step-00020.pt"]


@pytest.mark.parametrize("name", ["", "..", "a/b", "x\0y"])
def test_save_atomic_refuses_paths(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AICENTER_CHECKPOINT_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="plain file name"):
        save_atomic(name, b"x")


def test_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AICENTER_CHECKPOINT_DIR", raising=False)
    monkeypatch.delenv("AICENTER_RESTART_COUNT", raising=False)
    with pytest.raises(RuntimeError, match="not inside an aicenter job"):
        checkpoint_dir()
    assert latest() is None
    assert restart_count() == 0
    monkeypatch.setenv("AICENTER_RESTART_COUNT", "3")
    assert restart_count() == 3
    monkeypatch.setenv("AICENTER_RESTART_COUNT", "bogus")
    assert restart_count() == 0
