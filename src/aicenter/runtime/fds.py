"""File descriptors of a process started by the server: what the launcher must not keep of its parent's."""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["close_inherited"]


def close_inherited(keep: Iterable[int]) -> None:
    """Close every descriptor but stdio and ``keep`` (the ``--*-fd`` ones handed over on purpose).

    The executor asks for only those (``pass_fds``), but under uvloop (uvicorn's loop) a subprocess inherits
    every inheritable descriptor of the server whatever ``close_fds`` says, and ``aicenter up`` makes its
    listening socket inheritable for ``--workers``. A launcher outlives the server by design, so a launcher
    holding that socket kept the server's port taken after a crash: ``aicenter up`` could not start again on
    it until every replica had ended, and connections to the port queued on a socket nobody accepted.
    """
    low = 3
    for fd in sorted({fd for fd in keep if fd >= low}):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
