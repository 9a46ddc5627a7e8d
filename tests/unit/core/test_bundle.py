"""The bundle wire format shared by the client (writer) and the store (parser)."""

from __future__ import annotations

import pytest

from aicenter.core.bundle import HEADER_SIZE, bundle_header, bundle_length, parse_bundle_header


@pytest.mark.parametrize(("index", "size"), [(0, 0), (7, 1), (2**40, 2**63 - 1)])
def test_a_header_parses_back_to_its_index_and_size(index: int, size: int) -> None:
    header = bundle_header(index, size)
    assert len(header) == HEADER_SIZE
    assert parse_bundle_header(header) == (index, size)


@pytest.mark.parametrize(
    "raw",
    [
        b"0" * 47,  # short
        b"0" * 32 + b"1" * 16,  # reserved digits not zero
        b"000000000000000A" + b"0" * 32,  # upper-case hex
        b" " * 48,
    ],
)
def test_a_malformed_header_is_none(raw: bytes) -> None:
    assert parse_bundle_header(raw) is None


def test_the_length_of_a_bundle_counts_a_header_per_file() -> None:
    assert bundle_length([3, 0, 10]) == 3 * HEADER_SIZE + 13
    assert bundle_length([]) == 0
