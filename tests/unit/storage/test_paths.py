from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.storage import check_path


@pytest.mark.parametrize(
    "path",
    [
        "a",
        "a/b.txt",
        "dir/sub/file.tar.gz",
        ".hidden",
        "a/.b",
        "..a",
        "a..b/c",
        "名前/データ.csv",
        "/".join(["x" * 204] * 5),
        "a b",
    ],
)
def test_valid_paths_are_returned_unchanged(path: str) -> None:
    assert check_path(path) == path


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", "must not be empty"),
        ("/etc/passwd", "is absolute"),
        ("C:/x", "is absolute"),
        ("c:x", "is absolute"),
        ("a\\b", "backslash"),
        ("a\x00b", "control character"),
        ("a\nb", "control character"),
        ("a\x7fb", "control character"),
        ("a\x85b", "control character"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("./a", '"." segment'),
        ("a/./b", '"." segment'),
        ("..", '".." segment'),
        ("../x", '".." segment'),
        ("a/../../x", '".." segment'),
        ("x" * 1025, "1025 characters long; the limit is 1024"),
        ("a/" + "é" * 128, "longer than 255 bytes"),
        ("bad\udcffname", "not valid UTF-8"),
    ],
)
def test_bad_paths_are_refused_with_the_field_and_a_reason(path: str, message: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_path(path, field="files[3].path")
    assert info.value.details["field"] == "files[3].path"
    assert message in info.value.message
    assert info.value.message.startswith("files[3].path: ")
