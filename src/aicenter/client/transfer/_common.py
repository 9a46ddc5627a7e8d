"""What every transfer module shares: the error, the progress callback and its meter, the pull report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aicenter.client.errors import ApiError
from aicenter.client.models import Version

__all__ = ["Meter", "Progress", "PullReport", "TransferError"]

Progress = Callable[[int, int, int, int], None]
"""``progress(done_bytes, total_bytes, done_files, total_files)``, called as work completes (main thread)."""


class TransferError(ApiError):
    """A push or pull failed on this side (a symlink in the source, an unsafe path or a bad hash from the server)."""

    def __init__(self, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(0, code, message, {"field": field} if field else None)


@dataclass(frozen=True)
class PullReport:
    """What a pull did: files and bytes fetched, and those already present with the right hash."""

    version: Version
    downloaded_files: int
    downloaded_bytes: int
    skipped_files: int
    skipped_bytes: int


class Meter:
    """Counts done bytes/files and forwards them to the caller's progress callback."""

    def __init__(self, progress: Progress | None, total_bytes: int, total_files: int) -> None:
        self.progress = progress
        self.total_bytes, self.total_files = total_bytes, total_files
        self.bytes = self.files = 0

    def add(self, n_bytes: int, n_files: int = 0) -> None:
        self.bytes += n_bytes
        self.files += n_files
        if self.progress is not None:
            self.progress(self.bytes, self.total_bytes, self.files, self.total_files)
