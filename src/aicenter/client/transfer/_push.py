"""Push: a directory (or one file) becomes a new version, resumable, in bundles of small files and parts of big ones."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from aicenter.client._catalog import CHUNK, CatalogMixin, collection
from aicenter.client.errors import ApiError
from aicenter.client.models import Item, Upload, Version
from aicenter.client.transfer._common import Meter, Progress, TransferError
from aicenter.client.transfer._files import LocalFile, ResumeState, file_range, hash_files, home, sha256_range, walk
from aicenter.client.transfer._parallel import bounded_map
from aicenter.client.transfer._retry import retrying
from aicenter.core.bundle import bundle_header, bundle_length

__all__ = ["PushMixin"]

BUNDLE_BYTES = 8 << 20  # small files per bundle request: few round trips, flat memory (the body is a generator)
# Bundles in flight: while the server writes one bundle's files (~4 syscalls per file) the next arrives; a 10,000
# file push went from 3.9 s of sequential bundles to ~1.5 s with 4.
BUNDLE_WORKERS = 4
PART_WORKERS = 4  # parts in flight: enough to hide one request's latency, few enough for a shared server
# The part size the server is expected to choose (Settings.upload_part_size's default): part hashes computed at
# this size in the first pass are used when the upload's part size agrees, else computed while sending.
EXPECTED_PART_SIZE = 16 << 20


class PushMixin(CatalogMixin):
    def push(
        self,
        kind: str,
        source: str | Path,
        *,
        name: str,
        workspace_id: int | None = None,
        description: str = "",
        progress: Progress | None = None,
    ) -> Version:
        """Upload a directory (or one file) as a new version of my item ``name``, created if missing.

        Re-running the same push after an interruption resumes it: unchanged files are not hashed again and only
        the bytes the server has not received are sent. If the files changed meanwhile, the old upload is
        aborted and a new one starts.

        Args:
            kind: ``dataset``, ``algorithm``, ``image`` or ``model``.
            source: A directory (every regular file under it; symlinks are refused) or a single file.
            name: The item's name.
            workspace_id: Workspace of the item if it is created (default: my default workspace).
            description: The new version's description.
            progress: ``progress(done_bytes, total_bytes, done_files, total_files)``.

        Returns:
            The committed version.

        Raises:
            TransferError: A symlink or special file in ``source`` (``validation_failed``).
            ApiError: From the server, e.g. ``quota_exceeded``.
        """
        collection(kind)  # unknown kinds fail before any work
        root = Path(source).absolute()
        files = walk(root)
        key = json.dumps([self.base_url, kind, name, str(root)])
        state = ResumeState(home() / "uploads" / f"{hashlib.sha256(key.encode()).hexdigest()}.json")
        unknown = []
        for f in files:
            f.sha256 = state.hash_of(f) or ""
            if not f.sha256:
                unknown.append(f)
        hash_files(unknown, EXPECTED_PART_SIZE)
        for f in files:
            state.hashes[f.path] = [f.size, f.mtime_ns, f.sha256]
        state.hashes = {f.path: state.hashes[f.path] for f in files}  # forget files that are gone
        state.save()

        item = self._own_item(kind, name, workspace_id)
        manifest = [{"path": f.path, "size": f.size, "sha256": f.sha256, "mode": f.mode} for f in files]
        fingerprint = hashlib.sha256(json.dumps([item.id, description, manifest]).encode()).hexdigest()
        upload = self._resume_upload(state, fingerprint)
        if upload is not None and upload.state == "committed" and upload.version_id is not None:
            state.delete()
            return self.resolve(kind, f"#{upload.version_id}")
        if upload is None:
            upload = self.start_upload(kind, item.id, manifest, description=description)
            state.data.update(upload_id=upload.id, fingerprint=fingerprint)
            state.save()

        by_path = {f.path: f for f in files}
        meter = Meter(progress, sum(f.size for f in files), len(files))
        upload_id = upload.id
        for attempt in range(2):
            self._send_missing(upload, by_path, meter, first=attempt == 0)
            try:
                version = retrying(lambda: self.commit_upload(upload_id))
            except ApiError as exc:
                if exc.code != "upload_incomplete" or attempt == 1:
                    raise
                upload = self.get_upload(upload_id)  # a part went missing (e.g. staging swept): send it again
                continue
            state.delete()
            return version
        raise AssertionError("unreachable")

    def _own_item(self, kind: str, name: str, workspace_id: int | None) -> Item:
        """My item ``name`` of ``kind``, created if I have none."""
        for item in self.list_items(kind, scope="mine", q=name):
            if item.name == name:
                return item
        try:
            if workspace_id is None:
                return self.create_item(kind, name)
            return self.create_item(kind, name, workspace_id=workspace_id)
        except ApiError as exc:
            if exc.code != "conflict":
                raise
        # Created meanwhile by a concurrent push of mine: use it.
        found = next((i for i in self.list_items(kind, scope="mine", q=name) if i.name == name), None)
        if found is None:
            raise ApiError(409, "conflict", f"an item named {name!r} exists but is not yours")
        return found

    def _resume_upload(self, state: ResumeState, fingerprint: str) -> Upload | None:
        """The upload a previous run of this push left open, if it still matches the files; else None."""
        upload_id = state.data.get("upload_id")
        if upload_id is None:
            return None
        try:
            upload = self.get_upload(int(upload_id))
        except ApiError as exc:
            if exc.status != 404:
                raise
            upload = None
        same_files = state.data.get("fingerprint") == fingerprint
        if upload is not None and same_files and upload.state in ("open", "committed"):
            return upload
        if upload is not None and upload.state == "open":
            self.abort_upload(upload.id)  # the files changed: its parts are of no use
        state.data.pop("upload_id", None)
        state.data.pop("fingerprint", None)
        return None

    def _send_missing(self, upload: Upload, by_path: Mapping[str, LocalFile], meter: Meter, *, first: bool) -> None:
        part_size = upload.part_size
        small: list[tuple[int, LocalFile]] = []
        parts: list[tuple[int, LocalFile, int]] = []
        missing_bytes = missing_files = 0
        for entry in upload.missing:
            f = by_path[str(entry["path"])]
            missing_files += 1
            numbers = [int(p) for p in entry.get("parts") or [0]]
            if f.size < part_size:
                small.append((int(entry["index"]), f))
                missing_bytes += f.size
            else:
                parts.extend((int(entry["index"]), f, n) for n in numbers)
                missing_bytes += sum(min(part_size, f.size - n * part_size) for n in numbers)
        if first:  # what is already on the server counts as done
            meter.add(meter.total_bytes - missing_bytes, meter.total_files - missing_files)
        if small:
            self._send_bundles(upload.id, small, meter)
        if parts:
            self._send_parts(upload.id, part_size, parts, meter)

    def _send_bundles(self, upload_id: int, small: Sequence[tuple[int, LocalFile]], meter: Meter) -> None:
        batches: list[list[tuple[int, LocalFile]]] = [[]]
        batch_bytes = 0
        for index, f in small:
            batches[-1].append((index, f))
            batch_bytes += f.size
            if batch_bytes >= BUNDLE_BYTES:
                batches.append([])
                batch_bytes = 0
        if not batches[-1]:
            batches.pop()

        def send(batch: Sequence[tuple[int, LocalFile]]) -> None:
            self._send_bundle(upload_id, batch)

        bounded_map(
            send,
            batches,
            workers=BUNDLE_WORKERS,
            on_result=lambda batch, _: meter.add(sum(f.size for _, f in batch), len(batch)),
            name="aicenter-push",
        )

    def _send_bundle(self, upload_id: int, batch: Sequence[tuple[int, LocalFile]]) -> None:
        """POST one bundle (in a worker thread); TransferError if the server did not take every file."""

        def body() -> Iterator[bytes]:
            buf = bytearray()
            for index, f in batch:
                buf += bundle_header(index, f.size)
                with open(f.abspath, "rb", buffering=0) as fh:
                    data = fh.read(f.size + 1)
                if len(data) != f.size:
                    raise TransferError("validation_failed", f"{f.abspath} changed while it was being pushed")
                buf += data
                if len(buf) >= CHUNK:
                    yield bytes(buf)
                    buf.clear()
            if buf:
                yield bytes(buf)

        length = bundle_length(f.size for _, f in batch)

        def send() -> Any:
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(length)}
            with self._stream("POST", f"/uploads/{upload_id}/bundle", content=body(), headers=headers) as response:
                return json.loads(response.read() or b"{}")

        answer = retrying(send)
        received = set(answer.get("received") or ())
        lost = [f.path for index, f in batch if index not in received]
        if lost:
            raise TransferError("upload_incomplete", f"the server did not accept {len(lost)} files, e.g. {lost[0]}")

    def _send_parts(
        self, upload_id: int, part_size: int, parts: Sequence[tuple[int, LocalFile, int]], meter: Meter
    ) -> None:
        remaining: dict[str, int] = {}
        for _, f, _ in parts:
            remaining[f.path] = remaining.get(f.path, 0) + 1

        def send(task: tuple[int, LocalFile, int]) -> int:
            index, f, number = task
            offset = number * part_size
            length = min(part_size, f.size - offset)
            sha = f.sha256 if f.size <= part_size else None  # one part: the whole file's hash
            if sha is None and part_size == EXPECTED_PART_SIZE:
                sha = f.part_hashes.get(number)
            headers = {
                "X-Part-Sha256": sha or sha256_range(f.abspath, offset, length),
                "Content-Type": "application/octet-stream",
                "Content-Length": str(length),
            }
            url = f"/uploads/{upload_id}/files/{index}/parts/{number}"

            def put() -> None:
                # Streamed from the file: a 16 MiB part held as bytes made a push of big files ~340 MB of RSS.
                with self._stream("PUT", url, content=file_range(f.abspath, offset, length), headers=headers) as r:
                    r.read()

            retrying(put)
            return length

        def sent(task: tuple[int, LocalFile, int], length: int) -> None:
            path = task[1].path
            remaining[path] -= 1
            meter.add(length, 1 if remaining[path] == 0 else 0)

        bounded_map(send, parts, workers=PART_WORKERS, on_result=sent, name="aicenter-push")
