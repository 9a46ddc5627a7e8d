"""Builds venv images: ``python<ver> -m venv`` plus ``pip install`` of the version's requirements.

Every replica runs it. A tick leases pending builds one at a time (``catalog.claim_build``), builds outside any
transaction while renewing the lease, and records the outcome with an update guarded by the lease token.
A build is made in ``<envs>/<env_hash>.tmp-<token>`` and renamed to ``<envs>/<env_hash>`` when complete, so an
environment that exists is whole; builds with equal inputs share it ("reusing cached environment"). Output
goes line by line, timestamped, to ``<logs>/builds/<version_id>.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.services import catalog
from aicenter.services.catalog import BuildJob
from aicenter.storage import BlobStore

log = logging.getLogger(__name__)

# Variables of the server's own interpreter that must not leak into the environment being built.
_SCRUBBED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONUSERBASE")


class _Timeout(Exception):
    pass


class _GivenBack(Exception):
    """The build was interrupted (the builder is stopping, or its lease was lost): no outcome to record."""


class BuildLog:
    """The build's log file: each line prefixed with an ISO timestamp; a new build starts it afresh."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = path.open("w", encoding="utf-8", errors="replace")

    def line(self, text: str) -> None:
        self._file.write(f"{utcnow().isoformat(timespec='milliseconds')} {text}\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


async def find_python(version: str) -> str | None:
    """The interpreter for ``version`` ("3": this server's; "3.11": ``python3.11`` on PATH), or None.

    A candidate is run once to confirm its version: version managers (pyenv) put shims on PATH for versions
    that are not active, which exist but fail when run.
    """
    if version == "3" or version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return sys.executable
    candidate = shutil.which(f"python{version}")
    if candidate is None:
        return None
    proc = await asyncio.create_subprocess_exec(
        candidate,
        "-c",
        "import sys; print('%d.%d' % sys.version_info[:2])",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=_build_env(),
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    return candidate if proc.returncode == 0 and out.decode().strip() == version else None


def _build_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    env["PIP_NO_INPUT"] = "1"
    return env


def relocate(tmp: Path, final: Path) -> None:
    """Rewrite the build directory's own path in the venv's scripts and config before the rename.

    ``venv`` and pip write absolute paths: script shebangs (``#!<tmp>/bin/python``), ``activate``'s
    VIRTUAL_ENV and pyvenv.cfg. After the rename they would point at a directory that no longer exists.
    """
    old, new = os.fsencode(tmp), os.fsencode(final)
    candidates = [tmp / "pyvenv.cfg", *(tmp / "bin").iterdir()]
    for path in candidates:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        data = path.read_bytes()
        if old in data and b"\0" not in data:
            path.write_bytes(data.replace(old, new))


class ImageBuilder(Controller):
    """Claims and builds pending venv image builds.

    Args:
        db: The database.
        store: The blob store (its ``envs_dir`` and ``logs_dir``).
        settings: ``pip_args`` and ``build_timeout_s`` are read.
        owner: The lease owner name (default ``host:pid``).
        lease_ttl_s: A build's lease; renewed every third of it while building.
        interval_s: How often to look for pending builds.
    """

    name = "image-builder"

    def __init__(
        self,
        db: Database,
        store: BlobStore,
        settings: Settings,
        *,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        interval_s: float = 3.0,
    ) -> None:
        super().__init__()
        self.db = db
        self.store = store
        self.settings = settings
        self.owner = owner or replica_name()
        self.lease_ttl_s = lease_ttl_s
        self.interval_s = interval_s
        self._current: asyncio.Task[str | None] | None = None

    async def tick(self) -> None:
        """Build pending images one after another until none is left (or the controller stops)."""
        while not self._stopping.is_set():
            job = await catalog.claim_build(self.db, self.owner, self.lease_ttl_s)
            if job is None:
                return
            await self.run(job)

    async def stop(self) -> None:
        self._stopping.set()
        if self._current is not None:
            self._current.cancel()  # run() gives the build back; another replica takes it at once
        await super().stop()

    async def run(self, job: BuildJob) -> None:
        """Build one claimed job and record the outcome (unless its lease was lost meanwhile)."""
        build_log = BuildLog(catalog.build_log_path(self.store, job.version_id))
        try:
            build_log.line(
                f"building image version {job.version_id}: python {job.python}, "
                f"{len(job.requirements)} requirements, environment {job.env_hash}"
            )
            try:
                error = await self._build_with_lease(job, build_log)
            except _GivenBack:
                return
            build_log.line(f"failed: {error}" if error else f"ready: {catalog.env_dir(self.store, job.env_hash)}")
        finally:
            build_log.close()
        if not await catalog.finish_build(self.db, job, error=error):
            log.warning("image build %s: lease lost before the outcome was recorded", job.version_id)

    async def _build_with_lease(self, job: BuildJob, build_log: BuildLog) -> str | None:
        """Run the build while a side task renews its lease.

        Raises:
            _GivenBack: the build was interrupted; the row is queued again or belongs to another builder.
        """
        self._current = asyncio.create_task(self._build(job, build_log))
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._keep_lease(job, self._current, lost))
        try:
            return await self._current
        except asyncio.CancelledError:
            if lost.is_set():
                build_log.line("lease lost: another builder took this build over; stopping")
            else:
                build_log.line("builder stopping; the build is queued again")
                await catalog.requeue_build(self.db, job)
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # this controller's own task was cancelled, not just the build
            raise _GivenBack from None
        except Exception as exc:
            log.exception("image build %s failed unexpectedly", job.version_id)
            return f"internal error: {type(exc).__name__}: {exc}"
        finally:
            self._current = None
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _keep_lease(self, job: BuildJob, build: asyncio.Task[str | None], lost: asyncio.Event) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                held = await catalog.renew_build(self.db, job, self.lease_ttl_s)
            except Exception:
                log.exception("image build %s: renewing the lease failed; retrying", job.version_id)
                continue
            if not held:
                lost.set()
                build.cancel()
                return

    async def _build(self, job: BuildJob, build_log: BuildLog) -> str | None:
        """Make the environment; the one-line reason of a failure, or None on success."""
        final = catalog.env_dir(self.store, job.env_hash)
        if final.exists():
            build_log.line(f"reusing cached environment {job.env_hash}")
            return None
        options = [r for r in job.requirements if r.startswith("-")]
        if options:
            return f"requirement {options[0]!r} is a pip option; list requirement specifiers only"
        python = await find_python(job.python)
        if python is None:
            return f"python {job.python} is not installed on this host"
        tmp = final.with_name(f"{job.env_hash}.tmp-{job.token}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.build_timeout_s
        try:
            venv = [python, "-m", "venv", *(["--system-site-packages"] if job.system_site_packages else []), str(tmp)]
            code, last_error = await self._step(venv, build_log, deadline)
            if code != 0:
                return f"python -m venv failed (exit code {code}): {last_error}"
            if job.requirements:
                # --no-compile: byte-code is compiled below with the final path recorded in it.
                pip = [
                    str(tmp / "bin" / "python"),
                    *("-m", "pip", "install", "--disable-pip-version-check", "--no-compile"),
                    *self.settings.pip_args,
                    *job.requirements,
                ]
                code, last_error = await self._step(pip, build_log, deadline)
                if code != 0:
                    return last_error or f"pip install failed with exit code {code}"
                compileall = [str(tmp / "bin" / "python"), "-m", "compileall", "-q", "-s", str(tmp), "-p", str(final)]
                code, _ = await self._step([*compileall, str(tmp / "lib")], build_log, deadline)
                if code != 0:  # like pip's own compile step: a file that does not compile is not fatal
                    build_log.line(f"compileall exited with code {code}; continuing")
            await asyncio.to_thread(relocate, tmp, final)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.exists():
                    raise
                build_log.line(f"another build made environment {job.env_hash} first; using it")
            return None
        except _Timeout:
            return f"build timed out after {self.settings.build_timeout_s:g} s"
        finally:
            if tmp.exists():
                await asyncio.to_thread(shutil.rmtree, tmp, True)

    async def _step(self, argv: Sequence[str], build_log: BuildLog, deadline: float) -> tuple[int, str]:
        """Run one command, logging its output; (exit code, its last error line or last line)."""
        build_log.line("$ " + " ".join(argv))
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=_build_env(),
            start_new_session=True,  # its own process group: a timeout kills pip's children too
        )
        assert proc.stdout is not None
        last_line = last_error = ""
        pending = b""
        try:
            async with asyncio.timeout_at(deadline):
                while chunk := await proc.stdout.read(65536):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for raw in lines:
                        text = raw.decode("utf-8", errors="replace").rstrip("\r")
                        build_log.line(text)
                        if text.strip():
                            last_line = text.strip()
                            if text.startswith("ERROR:"):
                                last_error = text.strip()
                code = await proc.wait()
        except TimeoutError:
            _kill_group(proc.pid)
            await proc.wait()
            build_log.line("timed out; killed")
            raise _Timeout from None
        except asyncio.CancelledError:
            _kill_group(proc.pid)
            await asyncio.shield(proc.wait())
            raise
        if pending:
            build_log.line(pending.decode("utf-8", errors="replace"))
            last_line = pending.decode("utf-8", errors="replace").strip() or last_line
        build_log.line(f"exit code {code}")
        return code, last_error or last_line


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def build(ctx: AppContext) -> ImageBuilder:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return ImageBuilder(ctx.db, ctx.store, ctx.settings)
