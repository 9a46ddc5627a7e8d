"""Topology-aware choice of nodes for a gang and of devices inside a node.

Preference, best first: all replicas on one node, then (inside a node) one NVLink domain, then one leaf switch,
then one spine, then anywhere. Per-leaf and per-spine capacity is a ``bincount`` over the candidate nodes
(~30 us for 10,000 nodes), so no per-leaf structure has to be kept in sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .state import ClusterState

IntArray = npt.NDArray[np.int64]
Strategy = Literal["binpack", "spread", "best-fit", "random-fit", "fgd"]
Level = Literal["node", "leaf", "spine", "cluster"]


@dataclass(frozen=True, slots=True)
class NodeChoice:
    """Nodes for k replicas: ``(node index, replicas on it)``, and the narrowest level they share."""

    nodes: list[tuple[int, int]]
    level: Level


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why k replicas do not fit: the most that fits at the level asked for."""

    level: Level
    most: int


def _fill(nodes: IntArray, cap: IntArray, k: int) -> list[tuple[int, int]]:
    """Fill the fewest nodes: largest capacity first (stable, so lower index wins ties)."""
    order = nodes[np.argsort(-cap[nodes], kind="stable")]
    out: list[tuple[int, int]] = []
    left = k
    for i in order:
        take = int(min(cap[i], left))
        out.append((int(i), take))
        left -= take
        if left == 0:
            break
    return out


def _pick_group(group_cap: npt.NDArray[Any], k: int, strategy: Strategy) -> int:
    """Among groups that fit k, the tightest (binpack) or the roomiest (spread)."""
    ok = np.flatnonzero(group_cap >= k)
    if strategy == "spread":
        return int(ok[np.argmax(group_cap[ok])])
    return int(ok[np.argmin(group_cap[ok])])


def choose_nodes(
    state: ClusterState,
    cap: IntArray,
    k: int,
    strategy: Strategy,
    topology: bool,
    limit: Literal["none", "leaf", "spine"],
    node_score: npt.NDArray[np.float64] | None = None,
) -> NodeChoice | NoFit:
    """Choose nodes for ``k`` replicas given how many fit on each node.

    Args:
        state: The cluster state (for leaf/spine ids).
        cap: (N,) replicas that fit on each node (0 = not a candidate).
        k: Replicas to place.
        strategy: Placement strategy (binpack packs tight groups, spread picks roomy ones).
        topology: Prefer narrow groups.
        limit: Refuse groups wider than this.
        node_score: Lower is better, for choosing one node among several that hold all k replicas.

    Returns:
        The choice, or why it does not fit.
    """
    cand = np.flatnonzero(cap)
    total = int(cap[cand].sum())
    if total < k:
        return NoFit("cluster", total)
    ccap = cap[cand]
    whole = cand[ccap >= k]
    if whole.size:
        if node_score is not None:
            i = int(whole[np.argmin(node_score[whole])])
        elif strategy == "spread":
            i = int(whole[np.argmax(cap[whole])])
        else:
            i = int(whole[np.argmin(cap[whole])])
        return NodeChoice([(i, k)], "node")
    if not topology and limit == "none":
        return NodeChoice(_fill(cand, cap, k), "cluster")
    leaf_cap = np.bincount(state.leaf_of[cand], weights=ccap, minlength=len(state.leaf_names))
    if leaf_cap.max() >= k:
        leaf = _pick_group(leaf_cap, k, strategy)
        return NodeChoice(_fill(cand[state.leaf_of[cand] == leaf], cap, k), "leaf")
    if limit == "leaf":
        return NoFit("leaf", int(leaf_cap.max()))
    spine_cap = np.bincount(state.spine_of[cand], weights=ccap, minlength=len(state.spine_names))
    if spine_cap.max() >= k:
        spine = _pick_group(spine_cap, k, strategy)
        return NodeChoice(_fill_by_leaf(state, cand[state.spine_of[cand] == spine], cap, leaf_cap, k), "spine")
    if limit == "spine":
        return NoFit("spine", int(spine_cap.max()))
    return NodeChoice(_fill_by_leaf(state, cand, cap, leaf_cap, k), "cluster")


def _fill_by_leaf(
    state: ClusterState, nodes: IntArray, cap: IntArray, leaf_cap: npt.NDArray[Any], k: int
) -> list[tuple[int, int]]:
    """Fill the roomiest leaves first so the gang spans as few leaves as possible."""
    key = -leaf_cap[state.leaf_of[nodes]] * 1e6 - cap[nodes]
    order = nodes[np.argsort(key, kind="stable")]
    out: list[tuple[int, int]] = []
    left = k
    for i in order:
        take = int(min(cap[i], left))
        out.append((int(i), take))
        left -= take
        if left == 0:
            break
    return out


def whole_device_columns(
    state: ClusterState, i: int, usable: npt.NDArray[np.bool_], g: int, topology: bool
) -> list[int]:
    """Choose ``g`` fully free device columns of node ``i`` among ``usable`` ones.

    With topology, the tightest NVLink domain that holds all ``g`` devices (keeps big domains whole for big
    replicas); otherwise the lowest columns.
    """
    cols = np.flatnonzero(usable)
    if len(cols) < g:
        raise ValueError("not enough free devices")  # placement checked capacity; this is a bug guard
    if topology and g > 1:
        doms = state.dev_domain[i, cols]
        if (doms >= 0).any():
            uniq, counts = np.unique(doms[doms >= 0], return_counts=True)
            ok = counts >= g
            if ok.any():
                best = uniq[ok][np.argmin(counts[ok])]
                return [int(c) for c in cols[doms == best][:g]]
            # No single domain: take the biggest domains first to cut cross-domain traffic.
            order = np.argsort(-counts, kind="stable")
            picked: list[int] = []
            for dom in uniq[order]:
                picked.extend(int(c) for c in cols[doms == dom])
                if len(picked) >= g:
                    return picked[:g]
            rest = [int(c) for c in cols[doms < 0]]
            return (picked + rest)[:g]
    return [int(c) for c in cols[:g]]
