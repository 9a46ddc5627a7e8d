"""The answer of a single-file download: the blob's bytes, hashed as they go out when the whole file is asked for.

The service has checked the blob's length before the response starts. A whole-file GET is also hashed while it
streams, and its last piece is held back until the hash matches the file's sha256 (the ETag): a blob with the
right length but wrong bytes is then quarantined and the connection broken before the final bytes, so the client
sees a short body (Content-Length is known to it) and never accepts wrong bytes under the right ETag. Ranges are
served as read (verifying one needs the whole blob); their length check still holds.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import Callable
from typing import IO, Any

import anyio
from fastapi.responses import FileResponse
from starlette.types import Send


class BlobResponse(FileResponse):
    """A FileResponse for a blob of known sha256, read 1 MiB at a time.

    Starlette's 64 KiB chunks cost a worker-thread round trip each, 32,768 of them for a 2 GiB file, and kept a
    download well below the disk's speed; reading and hashing a chunk share one round trip.

    Args:
        sha256: what the whole file must hash to.
        on_damaged: called (in a worker thread) with what is wrong when the bytes read do not hash to
            ``sha256``; it quarantines the blob.
    """

    chunk_size = 1 << 20

    def __init__(self, path: str | os.PathLike[str], *, sha256: str, on_damaged: Callable[[str], Any], **kw: Any):
        super().__init__(path, **kw)
        self.sha256 = sha256
        self.on_damaged = on_damaged

    async def _handle_simple(self, send: Send, send_header_only: bool, send_pathsend: bool) -> None:
        # Overrides Starlette's whole-file path (pathsend included: it would send the file unverified).
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        if send_header_only:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        h = hashlib.sha256()
        f = await anyio.to_thread.run_sync(open, self.path, "rb")
        loop = asyncio.get_running_loop()
        # The next piece is read and hashed in a worker thread while the previous one is sent (hashlib releases
        # the GIL): hashing then costs little of the download's speed instead of a third of it.
        ahead = loop.run_in_executor(None, _read_hashed, f, h, self.chunk_size)
        try:
            pending = b""
            while chunk := await ahead:
                ahead = loop.run_in_executor(None, _read_hashed, f, h, self.chunk_size)
                if pending:
                    await send({"type": "http.response.body", "body": pending, "more_body": True})
                pending = chunk
        finally:
            # Not awaited: a client that went away cancels this task, and the read in flight finishes on its own.
            ahead.add_done_callback(lambda _: f.close())
        actual = h.hexdigest()
        if actual != self.sha256:
            await anyio.to_thread.run_sync(self.on_damaged, f"its bytes hash to {actual}")
            # The response has started, so no JSON error can be sent: raising breaks the connection (logged as a
            # server error) and the held-back bytes never leave. The next request gets 500 `damaged`.
            raise OSError(
                errno.EIO,
                f"the stored content {self.sha256} hashes to {actual} and was quarantined; the download of "
                f"{self.path} was cut short before its last bytes",
            )
        await send({"type": "http.response.body", "body": pending, "more_body": False})


def _read_hashed(f: IO[bytes], h: Any, size: int) -> bytes:
    chunk = f.read(size)
    h.update(chunk)  # hashlib releases the GIL for large updates
    return chunk
