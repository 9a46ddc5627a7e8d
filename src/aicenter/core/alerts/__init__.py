"""Alert rules: the expression language (expr), what an evaluation changes (decide), built-in rules (rules)."""

from aicenter.core.alerts.decide import Action, AlertState, Current, Decision, Severity, decide, fingerprint
from aicenter.core.alerts.expr import Element, Expr, InvalidExpression, Vector, evaluate, parse, selector_names
from aicenter.core.alerts.rules import BUILTIN_RULES, FACTS, BuiltinRule, silence_matches

__all__ = [
    "BUILTIN_RULES",
    "FACTS",
    "Action",
    "AlertState",
    "BuiltinRule",
    "Current",
    "Decision",
    "Element",
    "Expr",
    "InvalidExpression",
    "Severity",
    "Vector",
    "decide",
    "evaluate",
    "fingerprint",
    "parse",
    "selector_names",
    "silence_matches",
]
