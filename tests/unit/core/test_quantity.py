"""Resource quantities as people write them."""

from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.quantity import format_cpu, format_memory, parse_cpu, parse_memory

GI = 2**30


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("16Gi", 16 * GI),
        ("512Mi", 512 * 2**20),
        ("1Ki", 1024),
        ("2Ti", 2 * 2**40),
        ("1Pi", 2**50),
        ("512M", 512_000_000),
        ("1G", 10**9),
        ("1k", 1000),
        ("1K", 1000),
        ("1T", 10**12),
        ("1GiB", GI),
        ("512MB", 512_000_000),
        ("1.5Gi", 3 * GI // 2),
        ("0.5Ki", 512),
        (" 16 Gi ", 16 * GI),
        ("1024", 1024),
        ("0", 0),
        (1024, 1024),
        (2**60 + 1, 2**60 + 1),  # ints stay exact, never through a float
        (1.9, 1),
    ],
)
def test_parse_memory(given: str | int | float, expected: int) -> None:
    assert parse_memory(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        "16Gx",
        "",
        " ",
        "Gi",
        "-1",
        "-1Gi",
        "1e9",
        "1m",
        "1 G i",
        "16 GiB!",
        "1,5Gi",
        "0x10",
        -1,
        -0.5,
        True,
        False,
        float("nan"),
        float("inf"),
        "9" * 400,
    ],
)
def test_parse_memory_refuses(given: str | int | float) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_memory(given, field="maximum.memory")
    assert caught.value.details["field"] == "maximum.memory"
    assert caught.value.code == "validation_failed"


def test_parse_memory_names_the_field_and_shows_examples() -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_memory("16Gx", field="tasks[0].memory")
    assert caught.value.message.startswith("tasks[0].memory: ")
    assert "16Gi" in caught.value.message
    with pytest.raises(ValidationFailed) as default:
        parse_memory("x")
    assert default.value.details["field"] == "memory"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("500m", 500),
        ("2", 2000),
        ("0.5", 500),
        ("0.25", 250),
        (" 2 ", 2000),
        ("1000m", 1000),
        ("0", 0),
        ("1.5m", 2),  # below one milli-core rounds
        (2, 2000),
        (0.5, 500),
        (64, 64000),
    ],
)
def test_parse_cpu(given: str | int | float, expected: int) -> None:
    assert parse_cpu(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        "",
        "two",
        "2 cores",
        "-1",
        "-500m",
        "500M",
        "1e3",
        "2Gi",
        -1,
        -0.001,
        True,
        float("nan"),
        float("-inf"),
        "9" * 400,
    ],
)
def test_parse_cpu_refuses(given: str | int | float) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_cpu(given, field="guaranteed.cpu")
    assert caught.value.details["field"] == "guaranteed.cpu"


@pytest.mark.parametrize(
    ("n_bytes", "expected"),
    [
        (16 * GI, "16Gi"),
        (3 * GI // 2, "1.5Gi"),
        (25275719680, "23.54Gi"),  # a host's memory: rounded, never 2.46836e+07Ki
        (512 * 2**20, "512Mi"),
        (2**40, "1Ti"),
        (2048, "2Ki"),
        (1000, "1000"),
        (0, "0"),
    ],
)
def test_format_memory(n_bytes: int, expected: str) -> None:
    assert format_memory(n_bytes) == expected


@pytest.mark.parametrize(("milli", "expected"), [(2000, "2"), (500, "500m"), (1500, "1500m"), (0, "0")])
def test_format_cpu(milli: int, expected: str) -> None:
    assert format_cpu(milli) == expected


@pytest.mark.parametrize("milli", [0, 250, 1000, 1500, 64000])
def test_cpu_round_trip(milli: int) -> None:
    assert parse_cpu(format_cpu(milli)) == milli


@pytest.mark.parametrize("n_bytes", [GI, 16 * GI, 512 * 2**20, 3 * GI // 2, 1000])
def test_memory_round_trip(n_bytes: int) -> None:
    assert parse_memory(format_memory(n_bytes)) == n_bytes
