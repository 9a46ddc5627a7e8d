"""The job-side helpers (``from aicenter.runtime import report``) for jobs whose Python is not the server's.

A venv image is built with pip from the user's requirements and has no ``aicenter`` in it; installing the whole
platform there would drag the server's dependencies into every image and clash with the user's pins. Instead the
few stdlib-only modules user code imports are copied into a read-only directory, and that directory goes on
the job's ``PYTHONPATH``::

    <jobs>/.runtime/<content hash>/aicenter/runtime/{__init__,report,files,checkpoint,serve*}.py

There is deliberately no ``aicenter/__init__.py``: ``aicenter`` is then a namespace package, which loses to
any regular ``aicenter`` package further down ``sys.path`` (a venv that installed the aicenter SDK keeps its
own), and no server module (database, settings, secrets) is reachable from the job. The directory is named by
the hash of its contents, so a server upgrade writes a new one and running jobs keep the files they started
with.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
from pathlib import Path

__all__ = ["JOB_MODULES", "job_pythonpath", "write_job_pythonpath"]

# What user code imports, and what those import: stdlib only (``tests/unit/runtime`` checks it); and the model
# server (``python -m aicenter.runtime.serve``), which a service replica runs with its image's Python: stdlib and
# numpy at import, the model's framework only when it loads the model.
JOB_MODULES = (
    "__init__.py",
    "report.py",
    "files.py",
    "checkpoint.py",
    "serve.py",
    "serve_v2.py",
    "serve_runtimes.py",
)
_HERE = Path(__file__).resolve().parent


@functools.cache
def _sources() -> tuple[tuple[str, bytes], ...]:
    return tuple((name, (_HERE / name).read_bytes()) for name in JOB_MODULES)


@functools.cache
def _digest() -> str:
    h = hashlib.sha256()
    for name, data in _sources():
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def job_pythonpath(jobs_root: Path) -> Path:
    """The directory to put on a job's ``PYTHONPATH`` (written by ``write_job_pythonpath``)."""
    return jobs_root / ".runtime" / _digest()


def write_job_pythonpath(jobs_root: Path) -> Path:
    """Write ``job_pythonpath(jobs_root)`` unless it exists; atomic (built aside, then renamed), read-only."""
    target = job_pythonpath(jobs_root)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    package = tmp / "aicenter" / "runtime"
    package.mkdir(parents=True)
    try:
        for name, data in _sources():
            (package / name).write_bytes(data)
            os.chmod(package / name, 0o444)
        for directory in (package, package.parent, tmp):
            os.chmod(directory, 0o555)  # noqa: S103 - read-only for everyone: the job may run as another uid
        try:
            tmp.rename(target)
        except OSError:  # another server wrote it meanwhile: same hash, same files
            if not target.is_dir():
                raise
            _remove(tmp)
    except BaseException:
        _remove(tmp)
        raise
    return target


def _remove(tree: Path) -> None:
    with contextlib.suppress(OSError):
        for dirpath, _dirs, _files in os.walk(tree):
            os.chmod(dirpath, 0o700)
    shutil.rmtree(tree, ignore_errors=True)
