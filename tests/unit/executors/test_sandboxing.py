"""The local executor's sandbox of a plan: what it binds, who it runs as, and when it refuses to launch."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from aicenter.executors import LaunchFailed, ReplicaPlan
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import prepare_writable, sandbox_spec
from aicenter.runtime.files import LauncherPlan
from aicenter.runtime.sandbox import SandboxSupport


def _plan(tmp_path: Path, **changes: object) -> ReplicaPlan:
    job = tmp_path / "jobs" / "3"
    dirs = {name: job / name for name in ("code", "data", "output", "checkpoints")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    plan = ReplicaPlan(
        job_id=3,
        task="worker",
        replica=0,
        attempt=0,
        node="n",
        command="true",
        env={
            "AICENTER_CODE_DIR": str(dirs["code"]),
            "AICENTER_DATA_DIR": str(dirs["data"]),
            "AICENTER_OUTPUT_DIR": str(dirs["output"]),
            "AICENTER_CHECKPOINT_DIR": str(dirs["checkpoints"]),
            "AICENTER_TOKEN": "job-token",
        },
        run_dir=job / "runs" / "r0",
        workdir=dirs["code"],
        devices=(1,),
        workspace_id=4,
    )
    return replace(plan, **changes)  # type: ignore[arg-type]


def test_code_and_data_are_read_only_outputs_and_metrics_read_write(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    spec = sandbox_spec(plan, plan.run_dir, bwrap="/usr/bin/bwrap", uid_base=None)
    assert {plan.env["AICENTER_CODE_DIR"], plan.env["AICENTER_DATA_DIR"]} <= set(spec.read_only)
    assert spec.read_write == (
        plan.env["AICENTER_OUTPUT_DIR"],
        plan.env["AICENTER_CHECKPOINT_DIR"],
        str(plan.run_dir / "metrics.jsonl"),
    )
    assert str(plan.run_dir) not in spec.read_only  # its plan.json (with the token) stays outside
    assert str(tmp_path / "jobs") not in spec.read_only + spec.read_write
    assert spec.devices[0] == "/dev/nvidia1"
    assert "/dev/nvidia0" not in spec.devices
    assert spec.uid is None


def test_a_root_server_gives_each_workspace_its_own_uid(tmp_path: Path) -> None:
    spec = sandbox_spec(_plan(tmp_path), tmp_path / "run", bwrap="bwrap", uid_base=300_000)
    assert (spec.uid, spec.gid) == (300_004, 300_004)
    other = sandbox_spec(_plan(tmp_path, workspace_id=5), tmp_path / "run", bwrap="bwrap", uid_base=300_000)
    assert other.uid == 300_005


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_writable_paths_are_made_and_given_to_the_job_uid(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    leftover = Path(plan.env["AICENTER_CHECKPOINT_DIR"]) / "step-10.pt"
    leftover.write_bytes(b"ckpt")  # from an earlier attempt
    spec = sandbox_spec(plan, plan.run_dir, bwrap="bwrap", uid_base=300_000)
    prepare_writable(spec)
    metrics = plan.run_dir / "metrics.jsonl"
    assert metrics.exists()
    for path in (metrics, leftover, Path(plan.env["AICENTER_OUTPUT_DIR"])):
        assert (path.stat().st_uid, path.stat().st_gid) == (300_004, 300_004)


def test_an_unsandboxed_plan_is_written_as_before() -> None:
    assert "sandbox" not in LauncherPlan(command="true", workdir="/").to_json()


async def test_bwrap_mode_refuses_to_launch_where_no_sandbox_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = SandboxSupport(False, None, os.geteuid() == 0, "bwrap is not installed")
    monkeypatch.setattr("aicenter.executors.local.sandboxing.sandbox_support", lambda: broken)
    plan = _plan(tmp_path, node="n")
    with pytest.raises(LaunchFailed, match="bwrap is not installed"):
        await LocalExecutor(tmp_path, node_name="n", sandbox="bwrap").launch(plan)
    # auto runs it unsandboxed instead
    handle = await LocalExecutor(tmp_path, node_name="n", sandbox="auto").launch(plan)
    assert "sandbox" not in (Path(handle.run_dir) / "plan.json").read_text()
    await LocalExecutor(tmp_path, node_name="n").stop(handle, grace_s=1.0)
