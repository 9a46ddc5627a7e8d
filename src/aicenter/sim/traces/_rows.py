"""Reading trace rows with errors that name the file, the line and the column."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from aicenter.core.errors import ValidationFailed


def fail(path: Path | str, line: int, column: str | None, message: str) -> NoReturn:
    """Raise ValidationFailed naming ``file:line`` and the column, e.g. ``philly.csv:12: num_gpus: ...``."""
    name = Path(path).name
    where = f"{name}:{line}" + (f": column {column}" if column else "")
    raise ValidationFailed(
        f"{where}: {message}",
        details={"file": str(path), "line": line, "column": column},
    )


def open_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationFailed(f"{path}: no such file", details={"file": str(path)}) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationFailed(f"{path}: cannot read: {exc}", details={"file": str(path)}) from None


class Fields:
    """Typed getters over one record (a CSV row or a JSON object); errors name where the record is."""

    def raw(self, column: str) -> str | None:
        raise NotImplementedError

    def error(self, column: str | None, message: str) -> NoReturn:
        raise NotImplementedError

    def has(self, column: str) -> bool:
        value = self.raw(column)
        return value is not None and value.strip() != ""

    def get_str(self, column: str, default: str | None = None) -> str:
        value = (self.raw(column) or "").strip()
        if value == "":
            if default is None:
                self.error(column, "is required")
            return default
        return value

    def get_int(self, column: str, default: int | None = None, minimum: int | None = 0) -> int:
        if default is not None and not self.has(column):
            return default
        raw = self.get_str(column)
        try:
            value = int(raw)
        except ValueError:
            try:
                as_float = float(raw)
            except ValueError:
                as_float = math.nan
            if not as_float.is_integer():
                self.error(column, f"expected an integer, got {raw!r}")
            value = int(as_float)
        if minimum is not None and value < minimum:
            self.error(column, f"must be >= {minimum}, got {value}")
        return value

    def get_float(self, column: str, default: float | None = None, minimum: float | None = 0.0) -> float:
        if default is not None and not self.has(column):
            return default
        raw = self.get_str(column)
        try:
            value = float(raw)
        except ValueError:
            self.error(column, f"expected a number, got {raw!r}")
        if not math.isfinite(value):
            self.error(column, f"expected a finite number, got {raw!r}")
        if minimum is not None and value < minimum:
            self.error(column, f"must be >= {minimum:g}, got {raw}")
        return value

    def get_bool(self, column: str, default: bool) -> bool:
        if not self.has(column):
            return default
        raw = self.get_str(column).lower()
        if raw in ("1", "true", "yes", "y"):
            return True
        if raw in ("0", "false", "no", "n"):
            return False
        self.error(column, f"expected true or false, got {raw!r}")
        return None

    def timestamp(self, column: str) -> datetime:
        """An ISO 8601 date-time; naive values are UTC."""
        raw = self.get_str(column)
        try:
            return parse_time(raw)
        except ValidationFailed as exc:
            self.error(column, exc.message)


class Rows(Fields):
    """CSV rows with typed getters; blank lines are skipped; ``line`` is the physical line number."""

    def __init__(self, path: Path, required: Sequence[str]) -> None:
        self.path = path
        self._reader = csv.reader(open_text(path).splitlines())
        try:
            header = next(self._reader)
        except StopIteration:
            fail(path, 1, None, "empty file, expected a header line")
        self.header = [h.strip() for h in header]
        missing = [c for c in required if c not in self.header]
        if missing:
            fail(path, 1, missing[0], f"missing column (header is {','.join(self.header)})")
        self.index = {name: i for i, name in enumerate(self.header)}
        self.line = 1
        self._row: list[str] = []

    def __iter__(self) -> Iterator[Rows]:
        for row in self._reader:
            self.line = self._reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) != len(self.header):
                fail(self.path, self.line, None, f"expected {len(self.header)} fields, found {len(row)}")
            self._row = row
            yield self

    def raw(self, column: str) -> str | None:
        i = self.index.get(column)
        return None if i is None else self._row[i]

    def error(self, column: str | None, message: str) -> NoReturn:
        fail(self.path, self.line, column, message)


def parse_time(raw: str) -> datetime:
    """Parse ISO 8601 (``2017-10-01``, ``2017-10-01 07:01:55``, with or without offset) as an aware UTC time.

    Raises:
        ValidationFailed: not an ISO 8601 date or date-time.
    """
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ValidationFailed(f"expected an ISO 8601 date-time such as 2017-10-01 07:01:55, got {raw!r}") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
