"""Waiting for a child process while signal handlers keep running: the launcher's main thread.

Kept apart from the launcher (which imports it) so that module stays readable; it imports nothing of the server.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess

__all__ = ["wait_handling_signals"]


def wait_handling_signals(child: subprocess.Popen[bytes]) -> int:
    """``child.wait()``, with the stop signals' handlers run as the signals arrive.

    Python runs a handler only in the main thread, but the kernel delivers a process signal to any thread that
    does not block it: the output pumps, the watchers. One that landed on a helper thread left the main thread
    asleep in waitpid, so a SIGUSR2 forced stop waited for the command's own end (half the runs of the launcher's
    SIGUSR2 test). The main thread sleeps in select() on a pidfd of the child and on the signal wakeup fd
    instead, so either wakes it; without pidfds (Linux < 5.3) it polls twice a second.
    """
    try:
        pidfd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):
        while True:
            try:
                return child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    previous = signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    try:
        while (code := child.poll()) is None:
            select.select([pidfd, wake_r], [], [])
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
        return code
    finally:
        signal.set_wakeup_fd(previous)
        for fd in (pidfd, wake_r, wake_w):
            os.close(fd)
