from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.storage import FileEntry, check_manifest, manifest_sha256

H1 = "a" * 64
H2 = "b" * 64


def test_check_manifest_sorts_and_keeps_valid_entries() -> None:
    entries = [FileEntry("b.txt", 1, H1), FileEntry("a/c.txt", 0, H2, 0o755)]
    assert [e.path for e in check_manifest(entries)] == ["a/c.txt", "b.txt"]


def test_duplicate_path_names_the_second_entry() -> None:
    entries = [FileEntry(f"f{i}", 1, H1) for i in range(7)] + [FileEntry("a/b.txt", 1, H1), FileEntry("a/b.txt", 2, H2)]
    with pytest.raises(ValidationFailed) as info:
        check_manifest(entries)
    assert info.value.details["field"] == "files[8].path"
    assert "duplicate path a/b.txt" in info.value.message


@pytest.mark.parametrize(
    "paths",
    [["a", "a/b"], ["a/b", "a"], ["x/y/z", "x/y"], ["x", "x/y/z"], ["m/n.txt", "m/n.txt/o"]],
)
def test_a_file_that_is_also_a_directory_is_refused(paths: list[str]) -> None:
    with pytest.raises(ValidationFailed, match="is also a file"):
        check_manifest([FileEntry(p, 1, H1) for p in paths])


def test_siblings_with_common_prefixes_are_fine() -> None:
    paths = ["a", "ab/c", "a.d/e", "a-b"]
    assert len(check_manifest([FileEntry(p, 1, H1) for p in paths])) == 4


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        (FileEntry("../x", 1, H1), "files[0].path", '".." segment'),
        (FileEntry("x", -1, H1), "files[0].size", ">= 0"),
        (FileEntry("x", 1, "A" * 64), "files[0].sha256", "64 lower-case hex"),
        (FileEntry("x", 1, "a" * 63), "files[0].sha256", "64 lower-case hex"),
        (FileEntry("x", 1, H1, 0o170000), "files[0].mode", "permission bits"),
        (FileEntry("x", 1, H1, -1), "files[0].mode", "permission bits"),
    ],
)
def test_bad_entries_name_their_field(entry: FileEntry, field: str, message: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_manifest([entry])
    assert info.value.details["field"] == field
    assert message in info.value.message


def test_setid_and_sticky_bits_are_dropped() -> None:
    (entry,) = check_manifest([FileEntry("x", 1, H1, 0o4755)])
    assert entry.mode == 0o755


def test_manifest_hash_is_order_independent_and_content_sensitive() -> None:
    a = [FileEntry("a", 1, H1), FileEntry("b", 2, H2)]
    assert manifest_sha256(a) == manifest_sha256(list(reversed(a)))
    assert manifest_sha256(a) != manifest_sha256([FileEntry("a", 1, H1), FileEntry("b", 2, H2, 0o755)])
    assert manifest_sha256(a) != manifest_sha256([FileEntry("a", 1, H2), FileEntry("b", 2, H1)])
    assert len(manifest_sha256([])) == 64
