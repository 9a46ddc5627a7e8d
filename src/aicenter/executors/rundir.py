"""What every executor reads from a replica's run directory: the launcher's status record and its output log.

All three engines run the same launcher (``aicenter.runtime.launcher``), which writes ``status.json`` and
``output.log`` into the replica's run directory. The ``local`` executor reads them on this host; the ``ray`` and
``slurm`` executors read them on the shared filesystem that holds the jobs' directories (the deployment guide
says which path every node must mount), so status and logs cost no call into the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aicenter.executors.base import ReplicaState, ReplicaStatus
from aicenter.runtime.files import OUTPUT_FILE, parse_stamp

__all__ = ["FOLLOW_POLL_S", "exited_status", "read_chunk", "stream_output"]

FOLLOW_POLL_S = 0.1
_READ_CHUNK = 256 * 1024


def read_chunk(path: Path, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``path`` from ``offset``; empty when the file does not exist (yet)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(size)
    except FileNotFoundError:
        return b""


def exited_status(record: dict[str, Any]) -> ReplicaStatus:
    """The ``EXITED`` status a launcher's final record says (exit code, reason, start and end)."""
    code = record.get("exit_code")
    return ReplicaStatus(
        state=ReplicaState.EXITED,
        exit_code=None if code is None else int(code),
        reason=record.get("reason"),
        started_at=parse_stamp(record.get("started_at")),
        finished_at=parse_stamp(record.get("finished_at")),
    )


async def stream_output(
    run_dir: Path | str, since: int, *, follow: bool, running: Callable[[], Awaitable[bool]]
) -> AsyncIterator[bytes]:
    """Bytes of the replica's ``output.log`` from offset ``since``.

    Args:
        run_dir: The replica's run directory.
        since: The byte offset to start at.
        follow: Keep reading until ``running`` says the replica ended, then drain what is left.
        running: Whether the replica still runs (the executor's own status check).
    """
    path = Path(run_dir) / OUTPUT_FILE
    offset = max(0, since)
    while True:
        chunk = await asyncio.to_thread(read_chunk, path, offset, _READ_CHUNK)
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if not follow:
            return
        if not await running():
            # The launcher writes all output before its final record: one more read drains the rest.
            while chunk := await asyncio.to_thread(read_chunk, path, offset, _READ_CHUNK):
                offset += len(chunk)
                yield chunk
            return
        await asyncio.sleep(FOLLOW_POLL_S)
