"""Pool membership: a node is in every pool whose selector matches its labels, so pools overlap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aicenter.core.pools import is_member, pools_of, selector_matches


@dataclass
class P:
    name: str
    selector: dict[str, Any] | None


POOLS = [
    P("default", {}),
    P("a100", {"gpu": "a100"}),
    P("rack-1-a100", {"gpu": "a100", "rack": "r1"}),
    P("v100", {"gpu": "v100"}),
]


def test_a_node_is_in_every_pool_whose_selector_matches_not_only_one() -> None:
    assert pools_of({"gpu": "a100", "rack": "r1"}, POOLS) == ["default", "a100", "rack-1-a100"]
    assert pools_of({"gpu": "a100"}, POOLS) == ["default", "a100"]


def test_the_empty_selector_holds_every_node_even_unlabelled_ones() -> None:
    assert pools_of({}, POOLS) == ["default"]
    assert pools_of(None, POOLS) == ["default"]
    assert pools_of({"gpu": "h100"}, [P("default", None)]) == ["default"]


def test_a_node_may_be_in_no_pool_once_no_selector_matches() -> None:
    assert pools_of({"gpu": "t4"}, [P("a100", {"gpu": "a100"})]) == []


def test_every_selector_entry_must_match_and_values_compare_exactly() -> None:
    assert not selector_matches({"gpu": "a100", "rack": "r2"}, {"gpu": "a100", "rack": "r1"})
    assert not selector_matches({"gpu": "A100"}, {"gpu": "a100"})
    assert selector_matches({}, None)
    assert is_member({"gpu": "v100"}, POOLS[3])
    assert not is_member({"gpu": "v100"}, POOLS[1])
