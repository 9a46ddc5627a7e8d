"""Names of things people create, user names, and free text."""

from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.names import check_name, check_text, check_username


@pytest.mark.parametrize("name", ["a", "team", "gpu-a100-1", "v1.2", "my_ws", "0", "a" * 64, "x9"])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "A", "Team", "-a", "a-", ".a", "a.", "_a", "a b", "a/b", "ä", "a" * 65, "a\n", "a:b", "😀"],
)
def test_invalid_names(name: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_name(name, field="workspace.name")
    assert caught.value.details["field"] == "workspace.name"
    assert caught.value.code == "validation_failed"


def test_name_messages_say_what_to_do() -> None:
    with pytest.raises(ValidationFailed) as bad:
        check_name("Bad Name")
    assert "lower-case" in bad.value.message
    assert bad.value.details["field"] == "name"
    with pytest.raises(ValidationFailed) as long:
        check_name("a" * 70)
    assert "70 characters" in long.value.message
    with pytest.raises(ValidationFailed) as empty:
        check_name("")
    assert "empty" in empty.value.message


@pytest.mark.parametrize("username", ["alice", "Alice", "a.b", "john_doe", "x-1", "A", "1234", "a" * 64])
def test_valid_usernames(username: str) -> None:
    assert check_username(username) == username


@pytest.mark.parametrize("username", ["", "a b", "-a", "a-", "_a", "a@b", "a" * 65, "ünï", "a\t", "alice\n"])
def test_invalid_usernames(username: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_username(username)
    assert caught.value.details["field"] == "username"


@pytest.mark.parametrize("text", ["", "A description.", "line\nbreak", "tab\there", "中文说明", "x" * 100])
def test_valid_text(text: str) -> None:
    assert check_text(text, "description", 100) == text


@pytest.mark.parametrize("text", ["bell\x07", "nul\x00", "esc\x1b[31m", "x" * 101, "cr\r"])
def test_invalid_text(text: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_text(text, "description", 100)
    assert caught.value.details["field"] == "description"
