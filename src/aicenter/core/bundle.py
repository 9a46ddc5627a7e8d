"""The upload bundle's wire format, shared by the client that writes bundles and the store that reads them.

A bundle is many small files back to back in one request body. Each file is a 48-byte ASCII header (16 lower-case
hex digits of the file's index in the upload, 16 of its size, 16 reserved ``0``) followed by exactly ``size``
bytes. Pure: no I/O, so both sides import it without the client depending on the server's storage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["HEADER_SIZE", "bundle_header", "bundle_length", "parse_bundle_header"]

HEADER_SIZE = 48
_HEADER_RE = re.compile(rb"([0-9a-f]{16})([0-9a-f]{16})0{16}")


def bundle_header(index: int, size: int) -> bytes:
    """The header that precedes file ``index`` of ``size`` bytes in a bundle."""
    return f"{index:016x}{size:016x}{0:016x}".encode("ascii")


def parse_bundle_header(header: bytes) -> tuple[int, int] | None:
    """``(index, size)`` from a 48-byte header, or None when it is malformed."""
    match = _HEADER_RE.fullmatch(header)
    if match is None:
        return None
    return int(match[1], 16), int(match[2], 16)


def bundle_length(sizes: Iterable[int]) -> int:
    """The body length of a bundle of files of these sizes (its ``Content-Length``)."""
    return sum(HEADER_SIZE + size for size in sizes)
