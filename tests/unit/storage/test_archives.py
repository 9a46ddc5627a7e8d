from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from aicenter.core.errors import UnsafeArchive, ValidationFailed
from aicenter.storage import BlobStore, FileEntry, expand_archive
from tests.unit.storage.conftest import blob_names, sha

LIMITS = {"max_bytes": 1 << 20, "max_entries": 100}


def make_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w") -> Path:
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def reg(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def special(name: str, kind: bytes, **attrs: object) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, None


def dir_entry(name: str) -> tuple[tarfile.TarInfo, None]:
    return special(name, tarfile.DIRTYPE)


GOOD = [
    dir_entry("./"),
    dir_entry("./src"),
    reg("./src/train.py", b"print(1)\n", 0o755),
    reg("data.csv", b"a,b\n1,2\n"),
]
EXPECTED = [
    FileEntry("data.csv", 8, sha(b"a,b\n1,2\n"), 0o644),
    FileEntry("src/train.py", 9, sha(b"print(1)\n"), 0o755),
]


@pytest.mark.parametrize(("fmt", "mode"), [("tar", "w"), ("tar.gz", "w:gz")])
def test_tar_and_tgz_expand_into_the_store(store: BlobStore, tmp_path: Path, fmt: str, mode: str) -> None:
    archive = make_tar(tmp_path / "a", GOOD, mode)
    assert expand_archive(archive, fmt, store, **LIMITS) == EXPECTED
    assert blob_names(store) == {e.sha256 for e in EXPECTED}
    assert list(store.tmp_dir.iterdir()) == []


def test_zip_expands_into_the_store(store: BlobStore, tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("src/", b"")
        info = zipfile.ZipInfo("src/train.py")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        info.create_system = 3
        zf.writestr(info, b"print(1)\n")
        dos = zipfile.ZipInfo("data.csv")
        dos.create_system = 0  # made on MS-DOS/Windows: no unix mode, stored as 0o644
        zf.writestr(dos, b"a,b\n1,2\n")
    assert expand_archive(archive, "zip", store, **LIMITS) == EXPECTED


def test_big_member_streams_in_chunks(store: BlobStore, tmp_path: Path) -> None:
    data = bytes(range(256)) * (12 * 4096)  # 12 MiB
    archive = make_tar(tmp_path / "a.tgz", [reg("w.bin", data)], "w:gz")
    (entry,) = expand_archive(archive, "tar.gz", store, max_bytes=64 << 20, max_entries=10)
    assert entry == FileEntry("w.bin", len(data), sha(data), 0o644)


def assert_refused(store: BlobStore, archive: Path, fmt: str, message: str, **limits: int) -> None:
    before = blob_names(store)
    with pytest.raises(UnsafeArchive) as info:
        expand_archive(archive, fmt, store, **{**LIMITS, **limits})
    assert message in info.value.message
    assert blob_names(store) == before
    assert list(store.tmp_dir.iterdir()) == []


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (special("evil-link", tarfile.SYMTYPE, linkname="/etc/passwd"), '"evil-link" is a symbolic link'),
        (special("hard", tarfile.LNKTYPE, linkname="ok.txt"), '"hard" is a hard link'),
        (special("dev/null", tarfile.CHRTYPE, devmajor=1, devminor=3), '"dev/null" is a device'),
        (special("disk", tarfile.BLKTYPE), '"disk" is a device'),
        (special("pipe", tarfile.FIFOTYPE), '"pipe" is a fifo'),
        (reg("../x", b"x"), '"../x" has an unsafe path'),
        (reg("a/../../x", b"x"), '"a/../../x" has an unsafe path'),
        (reg("/abs", b"x"), '"/abs" has an unsafe path'),
        (reg("ok.txt", b"again"), '"ok.txt" is a duplicate'),
        (reg("./ok.txt", b"again"), '"./ok.txt" is a duplicate'),
        (reg("ok.txt/inner", b"x"), '"ok.txt/inner" is inside "ok.txt", which is a file'),
        (dir_entry("ok.txt"), '"ok.txt" is both a file and a directory'),
    ],
)
def test_tar_refusals_leave_nothing(store: BlobStore, tmp_path: Path, member: tuple, message: str) -> None:
    store.put_bytes(b"unrelated")
    archive = make_tar(tmp_path / "a.tar", [reg("ok.txt", b"fine"), reg("z.txt", b"z"), member])
    assert_refused(store, archive, "tar", message)


def test_entry_count_and_declared_size_limits(store: BlobStore, tmp_path: Path) -> None:
    many = make_tar(tmp_path / "many.tar", [reg(f"f{i}", b"x") for i in range(11)])
    assert_refused(store, many, "tar", "more than 10 entries", max_entries=10)
    big = make_tar(tmp_path / "big.tar", [reg("a", b"x" * 600), reg("b", b"x" * 600)])
    assert_refused(store, big, "tar", "expands to more than 1000 bytes", max_bytes=1000)


def test_zip_with_lying_sizes_stops_at_the_limit(store: BlobStore, tmp_path: Path) -> None:
    payload = b"\0" * (1 << 20)
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("ok.txt", b"fine")
        zf.writestr("bomb.bin", payload)
    # Rewrite the declared uncompressed size of bomb.bin (local header and central directory) to 10 bytes.
    raw = bytearray(archive.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        start = 0
        while (pos := raw.find(signature, start)) >= 0:
            name_len = int.from_bytes(raw[pos + (26 if signature == b"PK\x03\x04" else 28) :][:2], "little")
            name_at = pos + (30 if signature == b"PK\x03\x04" else 46)
            if raw[name_at : name_at + name_len] == b"bomb.bin":
                raw[pos + offset : pos + offset + 4] = (10).to_bytes(4, "little")
            start = pos + 4
    archive.write_bytes(bytes(raw))
    with zipfile.ZipFile(archive) as zf:
        assert zf.getinfo("bomb.bin").file_size == 10  # the lie passes the first pass
    assert_refused(store, archive, "zip", '"bomb.bin" does not match its header', max_bytes=1000)


@pytest.mark.parametrize(
    ("mode", "message"),
    [(stat.S_IFLNK | 0o777, "is a symbolic link"), (stat.S_IFCHR | 0o600, "is a device"), (stat.S_IFIFO, "is a fifo")],
)
def test_zip_special_files_are_refused(store: BlobStore, tmp_path: Path, mode: int, message: str) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ok.txt", b"fine")
        info = zipfile.ZipInfo("special")
        info.create_system = 3
        info.external_attr = mode << 16
        zf.writestr(info, b"/etc/passwd")
    assert_refused(store, archive, "zip", f'"special" {message}')


def test_zip_duplicate_and_traversal(store: BlobStore, tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.txt", b"1")
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("a.txt", b"2")
    assert_refused(store, archive, "zip", '"a.txt" is a duplicate')
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../etc/cron.d/x", b"1")
    assert_refused(store, archive, "zip", "has an unsafe path")


def test_unreadable_archive_and_unknown_format(store: BlobStore, tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"this is not an archive" * 100)
    for fmt in ("tar", "tar.gz", "zip"):
        with pytest.raises(ValidationFailed, match=f"cannot read the {fmt} archive") as info:
            expand_archive(junk, fmt, store, **LIMITS)
        assert info.value.details["field"] == "archive"
    with pytest.raises(ValidationFailed, match="unknown archive format"):
        expand_archive(junk, "rar", store, **LIMITS)


def test_huge_pax_header_is_refused_without_reading_it(store: BlobStore, tmp_path: Path) -> None:
    info = tarfile.TarInfo("x")
    info.type = tarfile.XHDTYPE
    info.size = 1 << 30  # declared 1 GiB of pax records
    archive = tmp_path / "a.tar"
    archive.write_bytes(info.tobuf(tarfile.USTAR_FORMAT) + b"\0" * 1024)
    with pytest.raises(UnsafeArchive, match="header larger than 16 MiB"):
        expand_archive(archive, "tar", store, **LIMITS)


class _Refused(Exception):
    pass


@pytest.mark.parametrize("fmt", ["tar.gz", "zip"])
def test_a_declared_size_the_caller_refuses_stops_the_expansion_before_a_byte_is_written(
    store: BlobStore, tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = [100, 200, 300]
    archive = tmp_path / "a"
    if fmt == "zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for i, size in enumerate(sizes):
                zf.writestr(f"f{i}", bytes(size))
    else:
        make_tar(archive, [reg(f"f{i}", bytes(size)) for i, size in enumerate(sizes)], "w:gz")
    seen: list[int] = []

    def quota(declared: int) -> None:
        seen.append(declared)
        if declared > 250:
            raise _Refused(declared)

    def no_writes(*_: object) -> None:
        raise AssertionError("the second pass started")

    monkeypatch.setattr("aicenter.storage.archives._Writer.__init__", no_writes)
    before = blob_names(store)
    with pytest.raises(_Refused):
        expand_archive(archive, fmt, store, check_declared=quota, **LIMITS)
    assert seen == [100, 300]  # the running total, refused at the entry that passes the quota
    assert blob_names(store) == before
    assert list(store.tmp_dir.iterdir()) == []


def test_expansion_reports_the_blobs_it_added_not_those_already_stored(store: BlobStore, tmp_path: Path) -> None:
    store.put_bytes(b"a,b\n1,2\n")
    created: set[str] = set()
    expand_archive(make_tar(tmp_path / "a", GOOD), "tar", store, created=created, **LIMITS)
    assert created == {sha(b"print(1)\n")}
