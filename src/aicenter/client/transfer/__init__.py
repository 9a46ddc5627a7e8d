"""Push and pull of catalog versions: resumable, hashed, parallel for big files, bundled for small ones.

Push walks a directory, hashes its files (cached by path, size and mtime in ``$AICENTER_HOME/uploads/<key>.json``
together with the upload id, so that re-running the same push resumes the same upload), opens an upload, sends
what the server says is missing — small files back to back in ~8 MiB bundles, several at once, big files in parts
streamed from the file with up to four in flight — and commits. Pull lists the version's files, keeps those already
present with the right hash, fetches small ones as tar batches and big ones with ``Range`` resume, verifying every
file before it takes its name.

Where the time goes (2 cores): sha256 runs at ~1.6 GB/s per core and a big file is hashed four times in all (here
whole and per part, on the server per part and whole), so the hashing is spread over threads (hashlib and file I/O
release the GIL): the parts' hashes are computed next to the whole file's in the first pass, leaving the transfer
to the server's two passes. Four bundles in flight took a 10,000-file push from 3.9 s to ~1.5 s.

Modules: ``_files`` (walk, hashing, the resume file), ``_push``, ``_pull``, and the two mechanisms they share:
``_parallel.bounded_map`` (everything done at once) and ``_retry`` (the one retry policy). The bundle's wire format
is :mod:`aicenter.core.bundle`, the same module the server's parser uses.
"""

from __future__ import annotations

from aicenter.client.transfer._common import Progress, PullReport, TransferError
from aicenter.client.transfer._pull import PullMixin
from aicenter.client.transfer._push import PushMixin

__all__ = ["Progress", "PullReport", "TransferError", "TransferMixin"]


class TransferMixin(PushMixin, PullMixin):
    """``push`` and ``pull`` of catalog versions, mixed into :class:`aicenter.client.Client`."""
