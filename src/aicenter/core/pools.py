"""Pool membership: the one rule that says which pools a node belongs to.

A pool is a label selector. A node belongs to EVERY pool whose selector its labels match, so pools overlap:
the default pool (empty selector) holds every node, and a node labelled ``gpu=a100`` is also in a pool with the
selector ``{gpu: a100}``. The scheduler, the node and pool views and job admission all ask this module, so they
never disagree about where a node is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

DEFAULT_POOL = "default"
"""The name of the pool created on first start; its selector is empty, so it holds every node."""


class PoolSelector(Protocol):
    """What membership needs of a pool: its name and label selector (the ORM ``Pool`` row fits)."""

    @property
    def name(self) -> str: ...

    @property
    def selector(self) -> Mapping[str, Any] | None: ...


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, Any] | None) -> bool:
    """Whether a node with ``labels`` belongs to a pool with ``selector`` (an empty selector matches all).

    Args:
        selector: Label key -> required value; every entry must match.
        labels: The node's labels.
    """
    labels = labels or {}
    return all(labels.get(key) == value for key, value in (selector or {}).items())


def pools_of(labels: Mapping[str, Any] | None, pools: Iterable[PoolSelector]) -> list[str]:
    """The names of every pool a node with ``labels`` belongs to, in the order of ``pools``.

    Args:
        labels: The node's labels.
        pools: Every pool (tens, not thousands: one pass per node is cheap).

    Returns:
        The pool names; empty when no selector matches (possible only once the default pool's selector is
        narrowed by an admin).
    """
    return [p.name for p in pools if selector_matches(p.selector, labels)]


def is_member(labels: Mapping[str, Any] | None, pool: PoolSelector) -> bool:
    """Whether a node with ``labels`` belongs to ``pool``."""
    return selector_matches(pool.selector, labels)
