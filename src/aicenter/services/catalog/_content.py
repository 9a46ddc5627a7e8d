"""Content of a version: its file list, one file's blob, archive entries and previews.

Every function applies the content rule (``load_version(content=True)``): platform admins without a
visibility that includes them get Forbidden, users who cannot see the version NotFound.
"""

from __future__ import annotations

import asyncio
import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.core.errors import NotFound, ValidationFailed
from aicenter.db.models import VersionFile
from aicenter.db.pagination import Page, paginate
from aicenter.services.catalog._access import load_version
from aicenter.services.catalog._views import FileView, Preview, file_view
from aicenter.services.context import Actor
from aicenter.storage import BlobStore, FileEntry, check_path, checked_blob

PREVIEW_BYTES = 64 * 1024
PREVIEW_ROWS = 20
MAX_FILES_PAGE = 1000
# Bound on one IN (...) list: SQLite's default limit on bound parameters is 32766, PostgreSQL's 65535.
_IN_CHUNK = 1000

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".svg": "image/svg+xml",
}
CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}


async def list_files(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    prefix: str | None = None,
    limit: int = MAX_FILES_PAGE,
    cursor: str | None = None,
) -> Page[FileView]:
    """The version's files by path (primary key order: an index range scan per page).

    Args:
        prefix: Only paths starting with it (``images/`` for a directory); matched literally, not as a pattern.
    """
    _, version = await load_version(session, actor, kind, item_id, number, content=True)
    stmt = select(VersionFile).where(VersionFile.version_id == version.id)
    if prefix:
        stmt = stmt.where(VersionFile.path.startswith(prefix, autoescape=True))
    page = await paginate(
        session, stmt, VersionFile.path, sort="path", limit=limit, cursor=cursor, max_limit=MAX_FILES_PAGE
    )
    return Page([file_view(row) for row in page.items], page.next_cursor)


async def _file_row(session: AsyncSession, version_id: int, path: str, label: str) -> VersionFile:
    try:
        clean = check_path(path)
    except ValidationFailed:
        raise NotFound(f"{label} has no file {path}") from None
    row = await session.get(VersionFile, (version_id, clean))
    if row is None:
        raise NotFound(f"{label} has no file {path}")
    return row


async def get_file(
    session: AsyncSession, actor: Actor, store: BlobStore, kind: ItemKind, item_id: int, number: int, path: str
) -> tuple[FileView, Path, os.stat_result]:
    """One file of the version, the path of its blob and the blob's stat, to stream.

    The blob's length is checked against the manifest before a byte is sent, so that damaged content is never
    served under the file's sha256 as ETag.

    Raises:
        Damaged: the blob is missing from the store, or has another length (it is then quarantined).
    """
    item, version = await load_version(session, actor, kind, item_id, number, content=True)
    row = await _file_row(session, version.id, path, f"{kind.value} {item.name}:{number}")
    stat_result = await asyncio.to_thread(checked_blob, store, row.sha256, row.size)
    return file_view(row), store.path(row.sha256), stat_result


async def archive_entries(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    paths: Sequence[str] | None = None,
) -> list[FileEntry]:
    """The files to put in an archive of the version, sorted by path: all of them, or ``paths``.

    Raises:
        NotFound: one of ``paths`` is not a file of the version (the message names it).
    """
    item, version = await load_version(session, actor, kind, item_id, number, content=True)
    columns = (VersionFile.path, VersionFile.size, VersionFile.sha256, VersionFile.mode)
    base = select(*columns).where(VersionFile.version_id == version.id)
    if paths is None:
        rows = (await session.execute(base.order_by(VersionFile.path))).all()
        return [FileEntry(path, size, sha, mode) for path, size, sha, mode in rows]
    wanted = list(dict.fromkeys(paths))
    found: dict[str, FileEntry] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        for path, size, sha, mode in (await session.execute(base.where(VersionFile.path.in_(chunk)))).all():
            found[path] = FileEntry(path, size, sha, mode)
    missing = [p for p in wanted if p not in found]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise NotFound(
            f"{kind.value} {item.name}:{number} has no file {missing[0]}{more}", details={"paths": missing[:100]}
        )
    return sorted(found.values(), key=lambda e: e.path)


def _read_head(store: BlobStore, sha256: str) -> bytes:
    with store.open(sha256) as f:
        data: bytes = f.read(PREVIEW_BYTES)
    return data


def _decode_text(head: bytes, truncated: bool) -> str | None:
    """The head as text, or None if it looks binary: a NUL byte, or bytes that are not UTF-8 (except in the
    last three bytes of a truncated head: a character the 64 KiB limit cut in two)."""
    if b"\x00" in head:
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not truncated or exc.start < len(head) - 3:
            return None
    return head.decode("utf-8", errors="replace")


def _csv_rows(text: str, delimiter: str, truncated: bool) -> list[list[str]]:
    if truncated and "\n" in text:
        text = text[: text.rindex("\n") + 1]  # drop the row the 64 KiB limit cut
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            rows.append(row)
            if len(rows) == PREVIEW_ROWS:
                break
    except csv.Error:
        pass  # a malformed line ends the preview; the rows before it are still worth showing
    return rows


async def preview(
    session: AsyncSession, actor: Actor, store: BlobStore, kind: ItemKind, item_id: int, number: int, path: str
) -> Preview:
    """A preview of one file: ``image`` (by extension: the client fetches the file), ``csv`` (the first
    20 rows of the first 64 KiB, and that text), ``text`` (the first 64 KiB, UTF-8 with replacement) or
    ``binary``."""
    item, version = await load_version(session, actor, kind, item_id, number, content=True)
    row = await _file_row(session, version.id, path, f"{kind.value} {item.name}:{number}")
    suffix = PurePosixPath(row.path).suffix.lower()
    if suffix in IMAGE_TYPES:
        return Preview(kind="image", media_type=IMAGE_TYPES[suffix])
    try:
        head = await asyncio.to_thread(_read_head, store, row.sha256)
    except FileNotFoundError:
        raise NotFound(f"the content of {row.path} is missing from the store") from None
    truncated = row.size > len(head)
    text = _decode_text(head, truncated)
    if text is None:
        return Preview(kind="binary", media_type="application/octet-stream")
    if suffix in CSV_DELIMITERS:
        rows = _csv_rows(text, CSV_DELIMITERS[suffix], truncated)
        return Preview(kind="csv", text=text, rows=rows, media_type="text/csv")
    return Preview(kind="text", text=text, media_type="text/plain")
