"""The node-side reaper's entry point (``aicenter.executors.local.reap``); its stop is ``LocalExecutor.stop``,
covered by the contract suites (the Slurm one runs it through ``srun``)."""

from __future__ import annotations

from pathlib import Path

from aicenter.executors.local.reap import main, reap


def test_bad_arguments_give_usage() -> None:
    assert main([]) == 2
    assert main(["/run", "soon"]) == 2


async def test_a_run_dir_without_a_launcher_record_is_left_alone(tmp_path: Path) -> None:
    assert await reap(tmp_path, 0.1) is False


def test_main_on_a_run_dir_without_a_record_exits_zero(tmp_path: Path) -> None:
    assert main([str(tmp_path), "0.1"]) == 0
