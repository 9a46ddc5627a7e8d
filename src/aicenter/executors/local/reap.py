"""Stop a replica from its node: ``python -m aicenter.executors.local.reap RUN_DIR GRACE_S``.

An executor that runs the launcher on other hosts (``slurm``) cannot signal processes there itself. When the
launcher was killed, the command lives on outside the engine's tracking (Slurm's ``proctrack/linuxproc``
loses a process whose parent died), and only something on the node can end it: the executor runs this module
there (through ``srun``), and it does exactly what ``LocalExecutor.stop`` does for such a replica, with the same
identity checks (a pid is signalled only when the process holding it started at the recorded time) and the
removal of the replica's control group. Exit status 0 when the replica has ended (or never had a launcher
record), 2 on bad arguments.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from aicenter.executors.base import ReplicaHandle
from aicenter.executors.local.executor import LocalExecutor
from aicenter.runtime.files import STATUS_FILE, read_json

__all__ = ["main", "reap"]


async def reap(run_dir: Path, grace_s: float) -> bool:
    """Stop the replica whose launcher wrote ``run_dir``'s status record; False when there is no record."""
    record = read_json(run_dir / STATUS_FILE) or {}
    if not record.get("launcher_pid") or record.get("launcher_start_time") is None:
        return False
    handle = ReplicaHandle(
        executor="local",
        node="",
        run_dir=str(run_dir),
        pid=int(record["launcher_pid"]),
        start_time=float(record["launcher_start_time"]),
        extra={},
    )
    await LocalExecutor(node_name="reaper").stop(handle, grace_s)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        run_dir, grace_s = Path(args[0]), float(args[1])
    except (IndexError, ValueError):
        print("usage: python -m aicenter.executors.local.reap RUN_DIR GRACE_S", file=sys.stderr)
        return 2
    asyncio.run(reap(run_dir, grace_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
