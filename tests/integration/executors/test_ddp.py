"""A real 2-replica PyTorch DDP job (gloo, CPU) through the local executor and the runtime environment.

The replicas get exactly what a job controller will give them: ``runtime_env`` + ``framework_env("pytorch")``
with ports from ``allocate_ports``; ``torch.distributed.init_process_group("gloo")`` reads nothing else.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from aicenter.executors import ReplicaHandle, ReplicaPlan, ReplicaState, ReplicaStatus
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import sandbox_support
from aicenter.runtime.env import ReplicaAddress, framework_env, ports_needed, runtime_env
from tests.support.extras import skip_without

skip_without("torch")  # in the test extras (torch==2.13.0); CI installs it

pytestmark = pytest.mark.slow

NODE = "ddp-node"
# Two Python processes importing torch on a busy 2-core machine take a while; training itself is ~1 s.
DEADLINE_S = 180.0

TRAIN = textwrap.dedent(
    """
    import hashlib, io, json, os, time
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from aicenter.runtime import latest, report, restart_count, save_atomic

    STEPS = 20
    CHECKPOINT_EVERY = int(os.environ.get("CHECKPOINT_EVERY", "0"))
    HOLD_AT = int(os.environ.get("HOLD_AT", "0"))  # wait at this step until the test is done with us

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    ddp = DistributedDataParallel(model)  # broadcasts rank 0's initial parameters
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    true_w = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)

    start = 0
    if CHECKPOINT_EVERY and restart_count() > 0:
        path = latest("step-*.pt")
        if path is not None:
            state = torch.load(path)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = state["step"]
            print(f"rank {rank} resumed from step {start}", flush=True)

    losses = []
    for step in range(start, STEPS):
        data = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own shard, reproducibly
        x = torch.randn(64, 8, generator=data)
        y = x @ true_w + 0.01 * torch.randn(64, 1, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        report(step=step + 1, loss=loss.item())
        done = step + 1
        if CHECKPOINT_EVERY and done % CHECKPOINT_EVERY == 0 and rank == 0:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done}, buffer)
            save_atomic(f"step-{done:05d}.pt", buffer.getvalue())
            print(f"checkpoint at step {done}", flush=True)
        if done == HOLD_AT:
            print(f"rank {rank} holding at step {done}", flush=True)
            while True:
                time.sleep(0.05)

    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    result = {
        "rank": rank,
        "params_sha256": hashlib.sha256(params).hexdigest(),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "start": start,
    }
    out = Path(os.environ["AICENTER_OUTPUT_DIR"]) / f"rank{rank}.json"
    out.write_text(json.dumps(result))
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)
    # Past the work: skip the interpreter's teardown, where torch's gloo threads now and then abort the process
    # ("terminate called without an active exception", exit 134) after a clean run.
    os._exit(0)
    """
)


async def _launch_pair(
    executor: LocalExecutor, root: Path, attempt: int, extra_env: dict[str, str]
) -> list[ReplicaHandle]:
    code = root / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(TRAIN)
    output, checkpoints = root / "output", root / "checkpoints"
    output.mkdir(exist_ok=True)
    layout = [
        ReplicaAddress("worker", r, "127.0.0.1", tuple(await executor.allocate_ports(NODE, ports_needed("pytorch"))))
        for r in range(2)
    ]
    handles = []
    for rank, address in enumerate(layout):
        env = {
            **runtime_env(
                1,
                address.task,
                address.replica,
                attempt,
                code_dir=code,
                data_dir=root / "data",
                output_dir=output,
                checkpoint_dir=checkpoints,
                api_url="http://127.0.0.1:9",
                token="unused",
            ),
            **framework_env("pytorch", layout, rank),
            "OMP_NUM_THREADS": "1",
            "GLOO_SOCKET_IFNAME": "lo",  # loopback only: never another interface
            **extra_env,
        }
        plan = ReplicaPlan(
            job_id=1,
            task=address.task,
            replica=address.replica,
            attempt=attempt,
            node=NODE,
            command="python train.py",
            env=env,
            run_dir=root / "runs" / f"attempt{attempt}" / f"{address.task}-{address.replica}",
            workdir=code,
            python_bin=Path(sys.executable).parent,
        )
        handles.append(await executor.launch(plan))
    return handles


async def _wait(executor: LocalExecutor, handle: ReplicaHandle, what: str, check: Any) -> ReplicaStatus:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        status = await executor.status(handle)
        if check(status):
            return status
        if time.monotonic() > deadline:
            log = (Path(handle.run_dir) / "output.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"timed out waiting for {what}; status {status}; log:\n{log}")
        await asyncio.sleep(0.2)


def _exited(status: ReplicaStatus) -> bool:
    return status.state is not ReplicaState.RUNNING


def _log(handle: ReplicaHandle) -> str:
    return (Path(handle.run_dir) / "output.log").read_text(errors="replace")


def _results(root: Path) -> list[dict[str, Any]]:
    return [json.loads((root / "output" / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(params=["off", "bwrap"])
def executor(request: pytest.FixtureRequest, tmp_path: Path) -> LocalExecutor:
    """Unsandboxed, and with each replica in its bubblewrap sandbox (as the server runs them by default)."""
    if request.param == "bwrap" and not sandbox_support().available:
        pytest.skip(f"no bwrap sandbox here: {sandbox_support().reason}")
    return LocalExecutor(tmp_path, node_name=NODE, sandbox=request.param)


async def _stop_all(executor: LocalExecutor, handles: list[ReplicaHandle]) -> None:
    for handle in handles:
        await executor.stop(handle, grace_s=1.0)


async def test_two_replica_ddp_trains_and_ranks_agree(executor: LocalExecutor, tmp_path: Path) -> None:
    handles = await _launch_pair(executor, tmp_path, 0, {})
    try:
        for handle in handles:
            status = await _wait(executor, handle, "the replica to finish", _exited)
            assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0), _log(handle)
    finally:
        await _stop_all(executor, handles)
    first, second = _results(tmp_path)
    assert first["params_sha256"] == second["params_sha256"]  # DDP kept the replicas identical
    for result in (first, second):
        assert result["last_loss"] < result["first_loss"] / 4
    metrics = (Path(handles[0].run_dir) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["step"] for m in metrics] == list(range(1, 21))


async def test_ddp_resumes_from_checkpoint_after_a_replica_is_killed(executor: LocalExecutor, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "step-00010.pt"
    handles = await _launch_pair(executor, tmp_path, 0, {"CHECKPOINT_EVERY": "5", "HOLD_AT": "10"})
    try:
        for handle in handles:
            await _wait(
                executor,
                handle,
                "both replicas to hold at step 10",
                lambda s, h=handle: _exited(s) or "holding at step 10" in _log(h),
            )
        assert checkpoint.is_file()
        os.kill(int(handles[1].extra["child_pid"]), signal.SIGKILL)  # the node's OOM killer, a crash, ...
        killed = await _wait(executor, handles[1], "the killed replica to exit", _exited)
        assert (killed.state, killed.exit_code, killed.reason) == (ReplicaState.EXITED, -9, "signal 9")
        await executor.stop(handles[0], grace_s=5.0)
        stopped = await executor.status(handles[0])
        assert (stopped.state, stopped.reason) == (ReplicaState.EXITED, "stopped")
    finally:
        await _stop_all(executor, handles)
    assert not (tmp_path / "output" / "rank0.json").exists()

    resumed = await _launch_pair(executor, tmp_path, 1, {"CHECKPOINT_EVERY": "5"})
    try:
        for handle in resumed:
            status = await _wait(executor, handle, "the resumed replica to finish", _exited)
            assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0), _log(handle)
    finally:
        await _stop_all(executor, resumed)
    for rank, handle in enumerate(resumed):
        assert f"rank {rank} resumed from step 10" in _log(handle)
    first, second = _results(tmp_path)
    assert first["start"] == second["start"] == 10
    assert first["params_sha256"] == second["params_sha256"]
