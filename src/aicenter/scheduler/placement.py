"""Placement: find nodes and devices for every replica of a job, all or nothing.

One job at a time: replicas are taken from the state as they are chosen (``ClusterState.take``) so the next
replica sees what the previous ones used, and everything is given back if the gang cannot be completed. The
caller then commits with ``ClusterState.allocate``.

Strategies: binpack (fewest free devices left), spread (most), best-fit (least normalised leftover of
devices, cpu and memory), random-fit (uniform among feasible), fgd (least growth of expected fragmentation,
see ``fgd.py``). Whole-device replicas and device-sharing replicas each have their own strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .cache import cache_tiers
from .fgd import TaskDistribution, fractional_deltas, whole_deltas
from .model import FULL_MILLI, Job, ReplicaPlacement, ReplicaRequest, Task
from .policy import PlacementName, PolicyConfig
from .state import ClusterState
from .topology import NodeChoice, NoFit, choose_nodes, whole_device_columns

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_BIG = np.int64(1) << 40


@dataclass(slots=True)
class Taken:
    """One replica's tentative allocation."""

    task: str
    replica: int
    node: int
    cols: list[int]
    milli: int
    request: ReplicaRequest


@dataclass(slots=True)
class Outcome:
    """A job's placement, or why it has none."""

    placements: tuple[ReplicaPlacement, ...] = ()
    reason: str = ""
    nodes: set[int] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        """Whether the job was placed."""
        return bool(self.placements)


def no_node_reason(state: ClusterState, pool: str) -> str:
    """Why nothing of ``pool`` can take work: it has no node at all, or none of its nodes is ready."""
    members = state.pool_mask(pool)
    if not members.any():
        return f"pool {pool} has no node"
    return f"no node of pool {pool} is ready: {int(members.sum())} cordoned or down"


def _types_label(r: ReplicaRequest) -> str:
    return "/".join(sorted(r.accelerator_types)) if r.accelerator_types else "accelerators"


class Placer:
    """Places jobs on a ``ClusterState`` under a policy.

    Args:
        policy: The policy (placement strategies, topology, gang, cache affinity).
        distribution: FGD's task distribution (shared with the scheduler, which may learn it).
    """

    def __init__(self, policy: PolicyConfig, distribution: TaskDistribution) -> None:
        self.policy = policy
        self.dist = distribution
        self.rng = np.random.default_rng(policy.seed)

    # ----- entry point --------------------------------------------------------------------------------------
    def place(self, state: ClusterState, job: Job, allowed: BoolArray | None = None) -> Outcome:
        """Place all replicas of ``job`` (at least its gang minimum) and give the capacity back.

        The state is unchanged on return; commit with ``state.allocate(job, outcome.placements, now)``.

        Args:
            state: The cluster state.
            job: The job.
            allowed: Nodes the job may use (e.g. outside a reservation); ``None`` = all.

        Returns:
            The placements, or a reason.
        """
        base = state.ready & state.pool_mask(job.pool)
        if not base.any():
            return Outcome(reason=no_node_reason(state, job.pool))
        if allowed is not None:
            base = base & allowed
        attempts: list[tuple[BoolArray, FloatArray | None]] = []
        if self.policy.cache_affinity and job.datasets:
            for tier in cache_tiers(state, job, base):
                m = base & tier.mask
                if m.any():
                    attempts.append((m, tier.score))
        attempts.append((base, None))
        out = Outcome(reason="")
        for mask, score in attempts:
            out = self._attempt(state, job, mask, score)
            if out.ok:
                return out
        return out

    def explain(self, state: ClusterState, job: Job, allowed: BoolArray | None = None) -> str:
        """Why ``job`` does not fit, without trying to place it (the caller knows it does not).

        For a job of one task this is what ``place`` would say, at the cost of one capacity pass; for
        several tasks it falls back to ``place``.
        """
        if len(job.tasks) != 1:
            return self.place(state, job, allowed).reason or "does not fit"
        mask = state.ready & state.pool_mask(job.pool)
        if not mask.any():
            return no_node_reason(state, job.pool)
        if allowed is not None:
            mask = mask & allowed
        task = job.tasks[0]
        r = task.request
        k = task.replicas
        if r.fractional or k == 1:
            return self._explain(state, r, 1, mask, NoFit("node", 0))
        cap = self._capacity(state, r, mask)
        got = choose_nodes(state, cap, k, self._strategy(r), self.policy.topology, self.policy.topology_limit)
        nofit = got if isinstance(got, NoFit) else NoFit("cluster", int(cap.sum()))
        return self._explain(state, r, k, mask, nofit)

    def _attempt(self, state: ClusterState, job: Job, mask: BoolArray, score: FloatArray | None) -> Outcome:
        taken: list[Taken] = []
        need = job.gang_min if self.policy.gang else 1
        total = job.replica_count
        # Largest replicas first: they are the hardest to fit and anchor the gang's topology.
        tasks = sorted(job.tasks, key=lambda t: (-t.request.milli, -t.request.cpu_milli))
        reason = ""
        for task in tasks:
            reason = self._place_task(state, task, task.replicas, mask, score, taken)
            if reason:
                break
        if reason and need < total:
            # Elastic gang: place replicas one by one until no more fit; enough if >= the gang minimum.
            self._undo(state, taken)
            taken = []
            for task in tasks:
                for _ in range(task.replicas):
                    if self._place_task(state, task, 1, mask, score, taken):
                        break
            if len(taken) >= need:
                reason = ""
        out = Outcome(reason=reason)
        if not reason:
            out.placements = tuple(
                ReplicaPlacement(
                    t.task,
                    t.replica,
                    state.names[t.node],
                    tuple([state.dev_index[t.node][c] for c in t.cols]),
                    t.milli * len(t.cols),
                )
                for t in sorted(taken, key=lambda t: (t.task, t.replica))
            )
            out.nodes = {t.node for t in taken}
        self._undo(state, taken)
        return out

    @staticmethod
    def _undo(state: ClusterState, taken: list[Taken]) -> None:
        for t in reversed(taken):
            r = t.request
            state.give(t.node, t.cols, t.milli, r.accelerator_memory_mib, r.cpu_milli, r.memory_mib)

    @staticmethod
    def _take(state: ClusterState, task: Task, i: int, cols: list[int], milli: int, taken: list[Taken]) -> None:
        r = task.request
        state.take(i, cols, milli, r.accelerator_memory_mib, r.cpu_milli, r.memory_mib)
        replica = sum(1 for t in taken if t.task == task.name)
        taken.append(Taken(task.name, replica, i, cols, milli, r))

    # ----- per task -----------------------------------------------------------------------------------------
    def _regions(self, state: ClusterState, mask: BoolArray, taken: list[Taken]) -> list[BoolArray]:
        """With replicas already placed: their nodes, then their leaves, then spines, then anywhere."""
        if not taken or not self.policy.topology:
            return [mask]
        nodes = np.array(sorted({t.node for t in taken}), dtype=np.int64)
        on_nodes = np.zeros_like(mask)
        on_nodes[nodes] = True
        leaves = np.isin(state.leaf_of, state.leaf_of[nodes])
        spines = np.isin(state.spine_of, state.spine_of[nodes])
        return [mask & on_nodes, mask & leaves, mask & spines, mask]

    def _place_task(
        self, state: ClusterState, task: Task, k: int, mask: BoolArray, score: FloatArray | None, taken: list[Taken]
    ) -> str:
        """Place ``k`` replicas of ``task``; returns '' or a reason."""
        r = task.request
        if r.fractional or k == 1:
            for _ in range(k):
                reason = ""
                for region in self._regions(state, mask, taken):
                    reason = self._place_one(state, task, region, score, taken)
                    if not reason:
                        break
                if reason:
                    return reason
            return ""
        regions = self._regions(state, mask, taken)
        result: NodeChoice | NoFit = NoFit("cluster", 0)
        for region in regions:
            cap = self._capacity(state, r, region)
            result = choose_nodes(
                state, cap, k, self._strategy(r), self.policy.topology, self.policy.topology_limit, node_score=score
            )
            if isinstance(result, NodeChoice):
                break
        if isinstance(result, NoFit):
            return self._explain(state, r, k, mask, result)
        for i, count in result.nodes:
            for _ in range(count):
                self._take(state, task, i, self._whole_cols(state, r, i), FULL_MILLI, taken)
        return ""

    def _strategy(self, r: ReplicaRequest) -> PlacementName:
        return self.policy.fractional_placement if r.fractional else self.policy.placement

    # ----- vector helpers -----------------------------------------------------------------------------------
    def _type_ids(self, state: ClusterState, r: ReplicaRequest) -> list[int]:
        return [state.type_id[t] for t in r.accelerator_types if t in state.type_id]

    def _full_free(self, state: ClusterState, r: ReplicaRequest, memory: bool = True) -> IntArray:
        """Whole free devices per node usable by ``r`` (``memory``: also big enough in device memory)."""
        if r.accelerator_memory_mib and memory:
            usable = (state.dev_free == FULL_MILLI) & (state.dev_mem_cap >= r.accelerator_memory_mib)
            if r.accelerator_types:
                usable &= np.isin(state.dev_type, self._type_ids(state, r))
            out: IntArray = usable.sum(axis=1)
            return out
        if not r.accelerator_types:
            return state.full_free_all
        ids = self._type_ids(state, r)
        if not ids:
            return np.zeros(len(state.names), dtype=np.int64)
        if len(ids) == 1:
            col: IntArray = state.full_free[:, ids[0]]
            return col
        ff: IntArray = state.full_free[:, ids].sum(axis=1)
        return ff

    def _node_fit(self, state: ClusterState, r: ReplicaRequest, mask: BoolArray) -> BoolArray:
        m = mask
        if r.cpu_milli:
            m = m & (state.cpu_free >= r.cpu_milli)
        if r.memory_mib:
            m = m & (state.mem_free >= r.memory_mib)
        return m

    def _capacity(self, state: ClusterState, r: ReplicaRequest, mask: BoolArray) -> IntArray:
        """Replicas of ``r`` that fit on each node (0 outside ``mask``)."""
        cap = np.where(mask, _BIG, 0)
        if r.accelerators:
            cap = np.minimum(cap, self._full_free(state, r) // r.accelerators)
        if r.cpu_milli:
            cap = np.minimum(cap, state.cpu_free // r.cpu_milli)
        if r.memory_mib:
            cap = np.minimum(cap, state.mem_free // r.memory_mib)
        if not (r.accelerators or r.cpu_milli or r.memory_mib):
            cap = np.where(mask, 1 << 20, 0)
        return cap

    def _whole_cols(self, state: ClusterState, r: ReplicaRequest, i: int) -> list[int]:
        if not r.accelerators:
            return []
        usable = state.dev_free[i] == FULL_MILLI
        if r.accelerator_types:
            usable &= np.isin(state.dev_type[i], self._type_ids(state, r))
        if r.accelerator_memory_mib:
            usable &= state.dev_mem_cap[i] >= r.accelerator_memory_mib
        return whole_device_columns(state, i, usable, r.accelerators, self.policy.topology)

    # ----- one replica --------------------------------------------------------------------------------------
    def _place_one(
        self, state: ClusterState, task: Task, mask: BoolArray, score: FloatArray | None, taken: list[Taken]
    ) -> str:
        r = task.request
        if r.fractional:
            return self._place_fraction(state, task, mask, taken)
        m = self._node_fit(state, r, mask)
        ff = self._full_free(state, r)
        if r.accelerators:
            m = m & (ff >= r.accelerators)
        cand = np.flatnonzero(m)
        if cand.size == 0:
            return self._explain(state, r, 1, mask, NoFit("node", 0))
        i = self._pick_node(state, r, cand, ff, score)
        self._take(state, task, i, self._whole_cols(state, r, i), FULL_MILLI, taken)
        return ""

    def _pick_node(
        self, state: ClusterState, r: ReplicaRequest, cand: IntArray, ff: IntArray, score: FloatArray | None
    ) -> int:
        if score is not None:
            best = cand[score[cand] == score[cand].min()]
            cand = best
        strategy = self.policy.placement
        if cand.size == 1:
            return int(cand[0])
        if strategy == "random-fit":
            return int(cand[self.rng.integers(cand.size)])
        if strategy == "best-fit":
            left = (state.cpu_free[cand] - r.cpu_milli) / np.maximum(state.cpu_cap[cand], 1) + (
                state.mem_free[cand] - r.memory_mib
            ) / np.maximum(state.mem_cap[cand], 1)
            if r.accelerators:
                left = left + (ff[cand] - r.accelerators) / np.maximum(state.dev_count[cand], 1)
            return int(cand[np.argmin(left)])
        if strategy == "fgd":
            if cand.size > self.policy.fgd_candidates:
                cand = cand[np.argpartition(ff[cand], self.policy.fgd_candidates - 1)[: self.policy.fgd_candidates]]
                cand.sort()
            d = whole_deltas(
                state.dev_free,
                state.cpu_free,
                state.mem_free,
                cand,
                r.accelerators,
                r.cpu_milli,
                r.memory_mib,
                self.dist,
            )
            # Ties (often: no change at all) go to the node with the fewest whole devices left.
            return int(cand[np.argmin(d + 1e-6 * ff[cand])])
        key = ff[cand] if r.accelerators else state.cpu_free[cand]
        if strategy == "spread":
            return int(cand[np.argmax(key)])
        return int(cand[np.argmin(key)])

    def _fraction_nodes(self, state: ClusterState, r: ReplicaRequest, node_ok: BoolArray) -> IntArray:
        """Candidate nodes for a fraction: partly used devices that fit, plus a few whole-device nodes.

        Scanning all 80,000 devices of a 10,000-node cluster costs ~3 ms per replica; this costs ~0.1 ms.
        Nodes whose free devices are all whole are interchangeable up to their count of whole devices, so a
        few per count are enough; packing strategies look at the fewest whole devices first, spread at the
        most.
        """
        strategy = self.policy.fractional_placement
        limit = self.policy.fgd_candidates
        part = np.flatnonzero(node_ok & (state.max_partial >= r.accelerator_milli))
        if part.size > limit:
            part = np.sort(part[np.argpartition(state.max_partial[part], limit - 1)[:limit]])
        ff = self._full_free(state, r, memory=False)  # device memory is checked per device below
        counts = range(state.max_devices, 0, -1) if strategy == "spread" else range(1, state.max_devices + 1)
        whole: list[IntArray] = []
        got = 0
        per = 16 if strategy != "random-fit" else limit
        for c in counts:
            sel = np.flatnonzero(node_ok & (ff == c))[:per]
            if sel.size:
                whole.append(sel)
                got += sel.size
                if got >= per:
                    break
        if not whole:
            return part
        return np.concatenate([part, *whole])

    def _place_fraction(self, state: ClusterState, task: Task, mask: BoolArray, taken: list[Taken]) -> str:
        r = task.request
        node_ok = self._node_fit(state, r, mask)
        nodes = self._fraction_nodes(state, r, node_ok)
        if nodes.size == 0:
            return self._explain(state, r, 1, mask, NoFit("node", 0))
        free = state.dev_free[nodes]
        dm = free >= r.accelerator_milli
        if r.accelerator_memory_mib:
            dm &= state.dev_mem_free[nodes] >= r.accelerator_memory_mib
        if r.accelerator_types:
            dm &= np.isin(state.dev_type[nodes], self._type_ids(state, r))
        flat = np.flatnonzero(dm)
        if flat.size == 0:
            return self._explain(state, r, 1, mask, NoFit("node", 0))
        d = free.shape[1]
        rows, cols = flat // d, flat % d
        fr = free.reshape(-1)[flat]
        # Tightest device first, then the node with the fewest whole free devices: keeps whole devices whole.
        key = fr * 64 + state.full_free_all[nodes[rows]]
        strategy = self.policy.fractional_placement
        if strategy == "random-fit":
            k = int(self.rng.integers(flat.size))
        elif strategy == "spread":
            k = int(np.argmax(fr * 64 - state.full_free_all[nodes[rows]]))
        elif strategy == "fgd":
            # Devices of one node with the same free share are interchangeable for fragmentation: score one
            # of each (a node with 8 whole devices is 1 row, not 8; ~3x fewer rows at 10,000 nodes).
            _, first = np.unique(rows * (FULL_MILLI + 1) + fr, return_index=True)
            deltas = fractional_deltas(
                state.dev_free,
                state.cpu_free,
                state.mem_free,
                nodes,
                rows[first],
                cols[first],
                r.accelerator_milli,
                r.cpu_milli,
                r.memory_mib,
                self.dist,
            )
            best = first[np.flatnonzero(deltas <= deltas.min() + 1e-9)]
            k = int(best[np.argmin(key[best])])
        else:
            k = int(np.argmin(key))
        self._take(state, task, int(nodes[rows[k]]), [int(cols[k])], r.accelerator_milli, taken)
        return ""

    # ----- reasons ------------------------------------------------------------------------------------------
    def _explain(self, state: ClusterState, r: ReplicaRequest, k: int, mask: BoolArray, nofit: NoFit) -> str:
        """A reason a person can act on for ``k`` replicas of ``r`` not fitting in ``mask``."""
        if not mask.any():
            return "no ready node in the pool is available to this job"
        label = _types_label(r)
        if r.accelerator_types and not self._type_ids(state, r):
            return f"no node in the cluster has accelerator type {label}"
        if r.milli:
            usable_type = mask & (self._full_free(state, r) >= 0)
            if r.accelerator_types:
                ids = self._type_ids(state, r)
                usable_type = mask & np.isin(state.dev_type, ids).any(axis=1)
            if not usable_type.any():
                return f"no ready node in the pool has accelerator type {label}"
        if r.cpu_milli and not (mask & (state.cpu_free >= r.cpu_milli)).any():
            most = int(state.cpu_free[mask].max())
            return f"needs {r.cpu_milli / 1000:g} cpu on one node; the most free on one node is {most / 1000:g}"
        if r.memory_mib and not (mask & (state.mem_free >= r.memory_mib)).any():
            most = int(state.mem_free[mask].max())
            return f"needs {r.memory_mib} MiB memory on one node; the most free on one node is {most} MiB"
        joint = self._joint_shortfall(state, r, mask, label)
        if joint:
            return joint
        if r.fractional:
            most = int(state.dev_free[mask].max())
            return (
                f"needs {r.accelerator_milli / 1000:g} of one {label.rstrip('s')} "
                f"with {r.accelerator_memory_mib} MiB device memory; the most free on one device is "
                f"{most / 1000:g}"
            )
        if r.accelerators:
            ff = self._full_free(state, r)
            node_most = int(ff[mask].max())
            if node_most < r.accelerators:
                return f"needs {r.accelerators} {label} on one node; the most free on one node is {node_most}"
            if nofit.level in ("leaf", "spine"):
                return (
                    f"needs {k * r.accelerators} {label} under one {nofit.level}; "
                    f"the most free under one {nofit.level} is {nofit.most * r.accelerators}"
                )
            free = int(ff[mask].sum())
            return (
                f"needs {k * r.accelerators} {label} in replicas of {r.accelerators}; "
                f"{nofit.most * r.accelerators} usable of {free} free in the pool"
            )
        return f"needs {k} replicas of {r.cpu_milli / 1000:g} cpu and {r.memory_mib} MiB; not enough room"

    def _joint_shortfall(self, state: ClusterState, r: ReplicaRequest, mask: BoolArray, label: str) -> str:
        """'' unless devices that fit exist but none sits on a node with the cpu/memory free for the replica."""
        if not r.milli or not (r.cpu_milli or r.memory_mib):
            return ""
        if r.fractional:
            dev = (state.dev_free >= r.accelerator_milli) & (state.dev_mem_free >= r.accelerator_memory_mib)
            if r.accelerator_types:
                dev &= np.isin(state.dev_type, self._type_ids(state, r))
            with_dev = mask & dev.any(axis=1)
            one = label.removesuffix("s")
            article = "an" if one[:1] in "aeiou" else "a"
            acc, such = f"{r.accelerator_milli / 1000:g} of one {one}", f"such {article} {one}"
        else:
            with_dev = mask & (self._full_free(state, r) >= r.accelerators)
            acc, such = f"{r.accelerators} {label}", f"{r.accelerators} free {label}"
        if not with_dev.any() or (with_dev & self._node_fit(state, r, mask)).any():
            return ""
        if r.cpu_milli and not (with_dev & (state.cpu_free >= r.cpu_milli)).any():
            most = int(state.cpu_free[with_dev].max())
            return (
                f"needs {r.cpu_milli / 1000:g} CPUs and {acc} on one node; "
                f"the most CPUs free on a node with {such} is {most / 1000:g}"
            )
        most = int(state.mem_free[with_dev].max())
        if r.memory_mib and most < r.memory_mib:
            return (
                f"needs {r.memory_mib} MiB memory and {acc} on one node; "
                f"the most memory free on a node with {such} is {most} MiB"
            )
        # Each resource is free somewhere, but never all of them together on one node.
        return (
            f"needs {r.cpu_milli / 1000:g} CPUs, {r.memory_mib} MiB memory and {acc} together on one node; "
            f"nodes with {such} have the CPUs or the memory free, but none has both"
        )
