"""The alert expression language: a small PromQL-like language over instant vectors.

Grammar (lowest precedence first)::

    expr     := or
    or       := and ("or" and)*
    and      := compare ("and" compare)*
    compare  := sum (("==" | "!=" | ">" | ">=" | "<" | "<=") sum)?
    sum      := product (("+" | "-") product)*
    product  := unary (("*" | "/") unary)*
    unary    := "-" unary | primary
    primary  := NUMBER | AGG "(" expr ")" ("by" "(" label ("," label)* ")")? | selector | "(" expr ")"
    selector := NAME ("{" label "=" STRING ("," label "=" STRING)* "}")?      NAME: node.cpu_utilization

Semantics follow PromQL where they overlap: a selector is the instant vector of the latest value of every series
(or platform fact) of that name; binary operators between two vectors match elements with identical labels
(one-to-one), between a vector and a number apply to each element; comparisons *filter* (an element is kept,
with its left-hand value, where the comparison holds); ``and`` keeps left elements whose labels the right side
has, ``or`` adds right elements whose labels the left lacks; aggregations (``avg``, ``sum``, ``min``, ``max``,
``count``) group by the ``by`` labels (none: one element). A rule fires for each element its expression yields.

Errors are :class:`InvalidExpression` (code ``invalid_expression``) with the 0-based character ``position``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from aicenter.core.errors import AicenterError

__all__ = [
    "AGGREGATIONS",
    "Aggregate",
    "BinaryOp",
    "Element",
    "Expr",
    "InvalidExpression",
    "Number",
    "Selector",
    "Vector",
    "evaluate",
    "parse",
    "selector_names",
]

MAX_LENGTH = 1024  # the column's length; a longer rule is refused, not truncated


class InvalidExpression(AicenterError):
    """An alert expression does not parse; ``details['position']`` is the 0-based offset of the problem."""

    code = "invalid_expression"
    status = 400

    def __init__(self, message: str, *, position: int, expression: str) -> None:
        pointer = f"{expression}\n{' ' * position}^"
        super().__init__(
            f"{message} at position {position}:\n{pointer}",
            details={"position": position, "expression": expression, "reason": message},
        )


# --- the syntax tree ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Aggregate:
    op: str
    arg: Expr
    by: tuple[str, ...] = ()


@dataclass(frozen=True)
class BinaryOp:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Negate:
    arg: Expr


Expr = Number | Selector | Aggregate | BinaryOp | Negate

AGGREGATIONS = ("avg", "sum", "min", "max", "count")
_COMPARISONS = ("==", "!=", ">=", "<=", ">", "<")
_KEYWORDS = {*AGGREGATIONS, "by", "and", "or"}

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>==|!=|>=|<=|[-+*/><(){},=])""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # number, name, string, op, end
    text: str
    pos: int


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos] in "\"'":
                raise InvalidExpression("unterminated string", position=pos, expression=text)
            raise InvalidExpression(f"unexpected character {text[pos]!r}", position=pos, expression=text)
        kind = match.lastgroup or ""
        if kind != "ws":
            out.append(_Token(kind, match.group(), pos))
        pos = match.end()
    out.append(_Token("end", "", len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def fail(self, message: str, tok: _Token | None = None) -> InvalidExpression:
        tok = tok or self.tok
        return InvalidExpression(message, position=tok.pos, expression=self.text)

    def describe(self, tok: _Token) -> str:
        return "the end of the expression" if tok.kind == "end" else repr(tok.text)

    def accept(self, text: str) -> bool:
        if self.tok.kind in ("op", "name") and self.tok.text == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str) -> None:
        if not self.accept(text):
            raise self.fail(f"expected {what}, found {self.describe(self.tok)}")

    def parse(self) -> Expr:
        if self.tok.kind == "end":
            raise self.fail("empty expression")
        expr = self.parse_or()
        if self.tok.kind != "end":
            raise self.fail(f"unexpected {self.describe(self.tok)} after a complete expression")
        return expr

    def parse_or(self) -> Expr:
        left = self.parse_and()
        while self.accept("or"):
            left = BinaryOp("or", left, self.parse_and())
        return left

    def parse_and(self) -> Expr:
        left = self.parse_compare()
        while self.accept("and"):
            left = BinaryOp("and", left, self.parse_compare())
        return left

    def parse_compare(self) -> Expr:
        left = self.parse_sum()
        if self.tok.kind == "op" and self.tok.text in _COMPARISONS:
            op = self.tok.text
            self.i += 1
            left = BinaryOp(op, left, self.parse_sum())
            if self.tok.kind == "op" and self.tok.text in _COMPARISONS:
                raise self.fail("comparisons do not chain; combine them with 'and'")
        return left

    def parse_sum(self) -> Expr:
        left = self.parse_product()
        while self.tok.kind == "op" and self.tok.text in "+-":
            op = self.tok.text
            self.i += 1
            left = BinaryOp(op, left, self.parse_product())
        return left

    def parse_product(self) -> Expr:
        left = self.parse_unary()
        while self.tok.kind == "op" and self.tok.text in "*/":
            op = self.tok.text
            self.i += 1
            left = BinaryOp(op, left, self.parse_unary())
        return left

    def parse_unary(self) -> Expr:
        if self.accept("-"):
            return Negate(self.parse_unary())
        return self.parse_primary()

    def parse_primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "number":
            self.i += 1
            return Number(float(tok.text))
        if tok.kind == "op" and tok.text == "(":
            self.i += 1
            inner = self.parse_or()
            self.expect(")", "')'")
            return inner
        if tok.kind == "name" and tok.text in AGGREGATIONS:
            return self.parse_aggregate()
        if tok.kind == "name" and tok.text in _KEYWORDS:
            raise self.fail(f"{tok.text!r} must follow an expression")
        if tok.kind == "name":
            return self.parse_selector()
        raise self.fail(f"expected a series name, a number or '(', found {self.describe(tok)}")

    def parse_aggregate(self) -> Expr:
        op = self.tok.text
        self.i += 1
        self.expect("(", f"'(' after {op}")
        arg = self.parse_or()
        self.expect(")", "')'")
        by: list[str] = []
        if self.accept("by"):
            self.expect("(", "'(' after by")
            by.append(self.label())
            while self.accept(","):
                by.append(self.label())
            self.expect(")", "')'")
        return Aggregate(op, arg, tuple(by))

    def label(self) -> str:
        tok = self.tok
        if tok.kind != "name" or "." in tok.text:
            raise self.fail(f"expected a label name, found {self.describe(tok)}")
        self.i += 1
        return tok.text

    def parse_selector(self) -> Expr:
        name = self.tok.text
        self.i += 1
        if self.tok.kind == "op" and self.tok.text == "(":
            raise self.fail(
                f"unknown function {name!r} (aggregations: {', '.join(AGGREGATIONS)})", self.tokens[self.i - 1]
            )
        if "." not in name:
            raise self.fail(
                f"{name!r} is not a series name (series are named like node.cpu_utilization)", self.tokens[self.i - 1]
            )
        matchers: list[tuple[str, str]] = []
        if self.accept("{"):
            while True:
                key = self.label()
                self.expect("=", "'='")
                if self.tok.kind != "string":
                    raise self.fail(f"expected a quoted label value, found {self.describe(self.tok)}")
                matchers.append((key, _unquote(self.tok.text)))
                self.i += 1
                if not self.accept(","):
                    break
            self.expect("}", "'}' or ','")
        return Selector(name, tuple(matchers))


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def parse(text: str) -> Expr:
    """Parse an alert expression.

    Raises:
        InvalidExpression: It does not parse, is empty or longer than 1,024 characters, or yields a plain number
            (a rule needs a vector: ``1 > 0`` would fire forever with no labels to say about what).
    """
    if len(text) > MAX_LENGTH:
        raise InvalidExpression(f"longer than {MAX_LENGTH} characters", position=MAX_LENGTH, expression=text[:80])
    expr = _Parser(text).parse()
    if not selector_names(expr):
        raise InvalidExpression(
            "the expression names no series, so it cannot fire per anything", position=0, expression=text
        )
    return expr


def selector_names(expr: Expr) -> set[str]:
    """Every series or fact name the expression reads (what the evaluator must load)."""
    if isinstance(expr, Selector):
        return {expr.name}
    if isinstance(expr, Aggregate | Negate):
        return selector_names(expr.arg)
    if isinstance(expr, BinaryOp):
        return selector_names(expr.left) | selector_names(expr.right)
    return set()


# --- evaluation --------------------------------------------------------------------------------------------------

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Element:
    """One value of an instant vector: its labels and whose it is (``workspace_id`` None: cluster-wide)."""

    labels: Mapping[str, str]
    value: float
    workspace_id: int | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    @property
    def key(self) -> LabelKey:
        return tuple(sorted(self.labels.items()))


Vector = list[Element]
Lookup = Callable[[str], Iterable[Element]]


def evaluate(expr: Expr, lookup: Lookup) -> Vector | float:
    """Evaluate ``expr`` with ``lookup(name)`` giving the current elements of each series or fact."""
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Selector):
        wanted = dict(expr.matchers)
        return [e for e in lookup(expr.name) if all(e.labels.get(k) == v for k, v in wanted.items())]
    if isinstance(expr, Negate):
        arg = evaluate(expr.arg, lookup)
        return -arg if isinstance(arg, float) else [_with(e, -e.value) for e in arg]
    if isinstance(expr, Aggregate):
        arg = evaluate(expr.arg, lookup)
        vector = [Element({}, arg)] if isinstance(arg, float) else arg
        return _aggregate(expr.op, vector, expr.by)
    return _binary(expr.op, evaluate(expr.left, lookup), evaluate(expr.right, lookup))


def _with(e: Element, value: float) -> Element:
    return Element(e.labels, value, e.workspace_id, e.extra)


_REDUCE: dict[str, Callable[[list[float]], float]] = {
    "avg": lambda v: sum(v) / len(v),
    "sum": lambda v: float(sum(v)),
    "min": min,
    "max": max,
    "count": lambda v: float(len(v)),
}


def _aggregate(op: str, vector: Vector, by: tuple[str, ...]) -> Vector:
    groups: dict[LabelKey, list[Element]] = defaultdict(list)
    for e in vector:
        groups[tuple((k, e.labels.get(k, "")) for k in by)].append(e)
    out: Vector = []
    for key, members in groups.items():
        values = [m.value for m in members]
        value = _REDUCE[op](values)
        # The group keeps a workspace only when all its members share it: an aggregate across workspaces
        # belongs to none of them.
        owners = {m.workspace_id for m in members}
        out.append(Element(dict(key), float(value), owners.pop() if len(owners) == 1 else None))
    return out


def _apply(op: str, a: float, b: float) -> float | None:
    """The arithmetic result, or for a comparison ``a`` when it holds and None when it does not."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a))
    holds = {"==": a == b, "!=": a != b, ">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[op]
    return a if holds else None


def _binary(op: str, left: Vector | float, right: Vector | float) -> Vector | float:
    if op in ("and", "or"):
        lv = left if isinstance(left, list) else []
        rv = right if isinstance(right, list) else []
        right_keys = {e.key for e in rv}
        if op == "and":
            return [e for e in lv if e.key in right_keys]
        left_keys = {e.key for e in lv}
        return lv + [e for e in rv if e.key not in left_keys]
    if isinstance(left, float) and isinstance(right, float):
        result = _apply(op, left, right)
        return math.nan if result is None else result
    if isinstance(left, float):
        assert isinstance(right, list)
        out = []
        for e in right:
            value = _apply(op, left, e.value)
            if value is not None:
                # A comparison keeps the vector's own value (PromQL's filter semantics).
                out.append(_with(e, e.value if op in _COMPARISONS else value))
        return out
    if isinstance(right, float):
        out = []
        for e in left:
            value = _apply(op, e.value, right)
            if value is not None:
                out.append(_with(e, value))
        return out
    by_key = {e.key: e for e in right}
    out = []
    for e in left:
        other = by_key.get(e.key)
        if other is None:
            continue
        value = _apply(op, e.value, other.value)
        if value is not None:
            out.append(
                Element(
                    e.labels,
                    value,
                    e.workspace_id if e.workspace_id is not None else other.workspace_id,
                    {**other.extra, **e.extra},
                )
            )
    return out
