"""Cluster state: free and used capacity per node and per device, kept in numpy arrays.

Why arrays: a cycle over 1,000 jobs on 10,000 nodes has ~0.5 ms per job. A Python loop over the nodes costs
~2 ms; one numpy comparison over 10,000 entries costs ~5 us. So every index here is an array updated in place
by ``allocate``/``release`` (O(replicas)), and placement scores candidates with vector operations. Nothing is
rebuilt per cycle; only adding or removing a node rebuilds the arrays (rare).

The state is not thread safe: one scheduler cycle at a time owns it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from aicenter.core.errors import Conflict, NotFound, ValidationFailed

from .model import FULL_MILLI, Job, Node, NodeStatus, Quota, ReplicaPlacement, RunningJob

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

RESOURCE_CPU = "cpu"
RESOURCE_MEMORY = "memory"
RESOURCE_ACCELERATORS = "accelerators"


def job_demand(job: Job) -> dict[str, float]:
    """Quota resources a job asks for before placement (a single requested type is charged to that type)."""
    cpu = mem = acc = 0.0
    by_type: dict[str, float] = defaultdict(float)
    for t in job.tasks:
        r = t.request
        cpu += t.replicas * r.cpu_milli
        mem += t.replicas * r.memory_mib
        a = t.replicas * r.milli / FULL_MILLI
        acc += a
        if a and len(r.accelerator_types) == 1:
            by_type[next(iter(r.accelerator_types))] += a
    out = {RESOURCE_CPU: cpu, RESOURCE_MEMORY: mem, RESOURCE_ACCELERATORS: acc}
    out.update(by_type)
    return out


class ClusterState:
    """Free/used capacity with incremental indexes; the one thing a cycle reads and changes.

    Args:
        nodes: The cluster's nodes (names unique).
        quotas: Workspace quotas per pool.

    Raises:
        ValidationFailed: On duplicate node names.
    """

    def __init__(self, nodes: Iterable[Node], quotas: Iterable[Quota] = ()) -> None:
        self.quotas: dict[tuple[str, str], Quota] = {(q.workspace, q.pool): q for q in quotas}
        self.running: dict[str, RunningJob] = {}
        """Job id -> running job record."""
        self.usage: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        """(workspace, pool) -> resource -> amount held by running jobs."""
        self.priorities: Counter[int] = Counter()
        """Priority -> running jobs (lets preemption skip at once when nobody ranks lower)."""
        self.user_jobs: Counter[tuple[str, str]] = Counter()
        """(workspace, user) -> running jobs (round robin)."""
        self._nodes: list[Node] = []
        self._build(list(nodes))

    # ----- construction -------------------------------------------------------------------------------------
    def _build(self, nodes: list[Node]) -> None:
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValidationFailed(f"duplicate node name {dup!r}", field="nodes")
        old_running = list(self.running.values())
        self._nodes = nodes
        # job id -> (running record, footprint) for lift/unlift; node indexes change here, so it starts over.
        self._footprints: dict[
            str, tuple[RunningJob, tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]]
        ] = {}
        self.index: dict[str, int] = {n.name: i for i, n in enumerate(nodes)}
        self.names: list[str] = [n.name for n in nodes]
        n = len(nodes)
        d = max((len(x.devices) for x in nodes), default=0)
        self.max_devices = d
        self.types: list[str] = sorted({dev.type for x in nodes for dev in x.devices})
        self.type_id: dict[str, int] = {t: i for i, t in enumerate(self.types)}
        self.pools: list[str] = sorted({p for x in nodes for p in x.pools})
        leaves: dict[str, int] = {}
        spines: dict[str, int] = {}
        self.cpu_cap = np.array([x.cpu_milli for x in nodes], dtype=np.int64)
        self.mem_cap = np.array([x.memory_mib for x in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.dev_exists = np.zeros((n, d), dtype=bool)
        self.dev_type = np.full((n, d), -1, dtype=np.int64)
        self.dev_free = np.zeros((n, d), dtype=np.int64)
        self.dev_mem_cap = np.zeros((n, d), dtype=np.int64)
        self.dev_mem_free = np.zeros((n, d), dtype=np.int64)
        self.dev_domain = np.full((n, d), -1, dtype=np.int64)
        self.dev_idx = np.full((n, d), -1, dtype=np.int64)
        self.leaf_of = np.zeros(n, dtype=np.int64)
        self.spine_of = np.zeros(n, dtype=np.int64)
        self.leaf_names: list[str] = []
        self.spine_names: list[str] = []
        leaf_spine: list[int] = []
        for i, x in enumerate(nodes):
            leaf = x.leaf if x.leaf is not None else f"node:{x.name}"
            spine = x.spine if x.spine is not None else f"leaf:{leaf}"
            if spine not in spines:
                spines[spine] = len(spines)
                self.spine_names.append(spine)
            if leaf not in leaves:
                leaves[leaf] = len(leaves)
                self.leaf_names.append(leaf)
                leaf_spine.append(spines[spine])
            self.leaf_of[i] = leaves[leaf]
            self.spine_of[i] = spines[spine]
            domains: dict[str, int] = {}
            for j, dev in enumerate(x.devices):
                self.dev_exists[i, j] = True
                self.dev_idx[i, j] = dev.index
                self.dev_type[i, j] = self.type_id[dev.type]
                self.dev_free[i, j] = FULL_MILLI
                self.dev_mem_cap[i, j] = dev.memory_mib
                self.dev_mem_free[i, j] = dev.memory_mib
                if dev.nvlink_domain is not None:
                    self.dev_domain[i, j] = domains.setdefault(dev.nvlink_domain, len(domains))
        self.leaf_spine = np.array(leaf_spine, dtype=np.int64)
        self.dev_pos: list[dict[int, int]] = [{dev.index: j for j, dev in enumerate(x.devices)} for x in nodes]
        # full_free[i, t]: devices of type t on node i with nothing allocated; the gang/whole-device index.
        self.full_free = np.zeros((n, max(1, len(self.types))), dtype=np.int64)
        for t in range(len(self.types)):
            self.full_free[:, t] = ((self.dev_type == t) & (self.dev_free == FULL_MILLI)).sum(axis=1)
        self.full_free_all: IntArray = self.full_free.sum(axis=1)
        # max_partial[i]: the most free on a partly used device of node i (0 if none); finds devices for
        # fractions without scanning every device (most devices are either whole or full).
        self.max_partial = np.zeros(n, dtype=np.int64)
        for i in range(n):
            self._update_partial(i)
        self.dev_count = self.dev_exists.sum(axis=1)
        self.ready = np.array([x.state == "ready" for x in nodes], dtype=bool)
        self.epoch = np.zeros(n, dtype=np.int64)
        """Per node: bumped whenever its free capacity changes; lets scorers cache per-node values."""
        self.version = getattr(self, "version", 0) + 1
        """Bumped by every committed change (allocate, release, node state, nodes): equal versions mean
        equal capacity."""
        self.freed_version = getattr(self, "freed_version", 0) + 1
        """Bumped by every change that can make room (release, node state, nodes, cache drops), not by
        ``allocate``: while it is unchanged capacity only shrank, so a placement that failed still fails
        (the scheduler's per-cycle failure memo relies on it)."""
        self.cache_capacity = np.array([x.cache_capacity_mib for x in nodes], dtype=np.int64)
        self.cached: list[dict[str, int]] = [dict(x.cached) for x in nodes]
        self.cache_used = np.array([sum(c.values()) for c in self.cached], dtype=np.int64)
        self.cache_holders: dict[str, set[int]] = defaultdict(set)
        for i, c in enumerate(self.cached):
            for ds in c:
                self.cache_holders[ds].add(i)
        self.node_jobs: list[dict[str, None]] = [{} for _ in nodes]
        self._demand: dict[str, Mapping[str, float]] = {}
        self.dev_index: list[list[int]] = [[dev.index for dev in x.devices] for x in nodes]
        self._pool_masks: dict[str, BoolArray] = {}
        self.running = {}
        self.usage = defaultdict(lambda: defaultdict(float))
        self.priorities = Counter()
        self.user_jobs = Counter()
        for rj in old_running:
            if all(p.node in self.index for p in rj.placements):
                self.allocate(rj.job, rj.placements, rj.started_at, by_preemption=rj.by_preemption)

    # ----- inventory ----------------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """The nodes, in index order (``state`` reflects ``set_node_state``)."""
        return list(self._nodes)

    def node(self, name: str) -> Node:
        """The node called ``name``.

        Raises:
            NotFound: When there is no such node.
        """
        try:
            return self._nodes[self.index[name]]
        except KeyError:
            raise NotFound(f"node {name!r} not found") from None

    def pool_mask(self, pool: str) -> BoolArray:
        """Boolean array over nodes: member of ``pool`` (pools overlap; cached, rebuilt only when nodes change)."""
        m = self._pool_masks.get(pool)
        if m is None:
            m = np.fromiter((pool in x.pools for x in self._nodes), dtype=bool, count=len(self._nodes))
            self._pool_masks[pool] = m
        return m

    def set_node_state(self, name: str, state: NodeStatus) -> None:
        """Mark a node ready, cordoned or down. Jobs on it keep running until the caller releases them."""
        i = self.index.get(name, -1)
        if i < 0:
            raise NotFound(f"node {name!r} not found")
        self._nodes[i] = replace(self._nodes[i], state=state)
        self.version += 1
        self.freed_version += 1
        self.ready[i] = state == "ready"
        self.epoch[i] += 1

    def add_node(self, node: Node) -> None:
        """Add a node (rebuilds the arrays: O(nodes), rare).

        Raises:
            Conflict: When a node of that name exists.
        """
        if node.name in self.index:
            raise Conflict(f"node {node.name!r} exists")
        self._build([*self._snapshot_nodes(), node])

    def remove_node(self, name: str) -> None:
        """Remove a node; jobs on it must have been released.

        Raises:
            NotFound: When there is no such node.
            Conflict: When jobs still run on it.
        """
        i = self.index.get(name)
        if i is None:
            raise NotFound(f"node {name!r} not found")
        if self.node_jobs[i]:
            raise Conflict(f"node {name!r} still runs {len(self.node_jobs[i])} jobs; release them first")
        self._build([x for x in self._snapshot_nodes() if x.name != name])

    def _snapshot_nodes(self) -> list[Node]:
        return [replace(x, cached=dict(self.cached[i])) for i, x in enumerate(self._nodes)]

    def _update_partial(self, i: int) -> None:
        self.max_partial[i] = max((v for v in self.dev_free[i].tolist() if v < FULL_MILLI), default=0)

    # ----- allocation ---------------------------------------------------------------------------------------
    def take(self, i: int, cols: Iterable[int], milli: int, dev_mem: int, cpu: int, mem: int) -> None:
        """Low level: take capacity on node ``i`` (device columns, not device indexes). No checks."""
        self.cpu_free[i] -= cpu
        self.mem_free[i] -= mem
        for j in cols:
            if self.dev_free[i, j] == FULL_MILLI:
                t = self.dev_type[i, j]
                self.full_free[i, t] -= 1
                self.full_free_all[i] -= 1
            self.dev_free[i, j] -= milli
            self.dev_mem_free[i, j] -= self.dev_mem_cap[i, j] if milli == FULL_MILLI else dev_mem
        if milli != FULL_MILLI:
            self._update_partial(i)
        self.epoch[i] += 1

    def give(self, i: int, cols: Iterable[int], milli: int, dev_mem: int, cpu: int, mem: int) -> None:
        """Low level: return capacity taken by ``take``."""
        self.cpu_free[i] += cpu
        self.mem_free[i] += mem
        for j in cols:
            self.dev_free[i, j] += milli
            self.dev_mem_free[i, j] += self.dev_mem_cap[i, j] if milli == FULL_MILLI else dev_mem
            if self.dev_free[i, j] == FULL_MILLI:
                t = self.dev_type[i, j]
                self.full_free[i, t] += 1
                self.full_free_all[i] += 1
        if milli != FULL_MILLI:
            self._update_partial(i)
        self.epoch[i] += 1

    def _apply(self, job: Job, placements: Iterable[ReplicaPlacement], sign: int) -> None:
        requests = {t.name: t.request for t in job.tasks}
        for p in placements:
            r = requests[p.task]
            i = self.index[p.node]
            cols = [self.dev_pos[i][d] for d in p.devices]
            milli = r.accelerator_milli if r.fractional else FULL_MILLI
            if sign > 0:
                self.take(i, cols, milli, r.accelerator_memory_mib, r.cpu_milli, r.memory_mib)
            else:
                self.give(i, cols, milli, r.accelerator_memory_mib, r.cpu_milli, r.memory_mib)

    def allocate(
        self,
        job: Job,
        placements: Iterable[ReplicaPlacement],
        now: float,
        *,
        by_preemption: bool = False,
        demand: Mapping[str, float] | None = None,
    ) -> RunningJob:
        """Hold resources for a started job.

        Args:
            job: The job.
            placements: Where its replicas run.
            now: Start time.
            by_preemption: Whether others were evicted for it (anti-thrash protection).
            demand: Its ``placed_demand`` when the caller already has it (saves recomputing).

        Returns:
            The running-job record.

        Raises:
            Conflict: When the job already runs or a placement oversubscribes a node or device.
            NotFound: When a placement names an unknown node, task or device.
        """
        if job.id in self.running:
            raise Conflict(f"job {job.id} already holds resources")
        placements = tuple(placements)
        requests = {t.name: t.request for t in job.tasks}
        need_cpu: dict[int, int] = defaultdict(int)
        need_mem: dict[int, int] = defaultdict(int)
        need_dev: dict[tuple[int, int], int] = defaultdict(int)
        need_dev_mem: dict[tuple[int, int], int] = defaultdict(int)
        for p in placements:
            if p.node not in self.index:
                raise NotFound(f"node {p.node!r} not found")
            if p.task not in requests:
                raise NotFound(f"job {job.id} has no task {p.task!r}")
            i = self.index[p.node]
            r = requests[p.task]
            need_cpu[i] += r.cpu_milli
            need_mem[i] += r.memory_mib
            for d in p.devices:
                if d not in self.dev_pos[i]:
                    raise NotFound(f"node {p.node!r} has no device {d}")
                j = self.dev_pos[i][d]
                need_dev[(i, j)] += r.accelerator_milli if r.fractional else FULL_MILLI
                need_dev_mem[(i, j)] += r.accelerator_memory_mib if r.fractional else int(self.dev_mem_cap[i, j])
        for i, c in need_cpu.items():
            if c > self.cpu_free[i] or need_mem[i] > self.mem_free[i]:
                raise Conflict(f"job {job.id} oversubscribes cpu or memory of node {self._nodes[i].name}")
        for (i, j), m in need_dev.items():
            if m > self.dev_free[i, j] or need_dev_mem[(i, j)] > self.dev_mem_free[i, j]:
                raise Conflict(f"job {job.id} oversubscribes device {j} of node {self._nodes[i].name}")
        self._apply(job, placements, +1)
        self.version += 1
        rj = RunningJob(job=job, placements=placements, started_at=now, by_preemption=by_preemption)
        self.running[job.id] = rj
        for i in {self.index[p.node] for p in placements}:
            self.node_jobs[i][job.id] = None
        if demand is None:
            demand = self.placed_demand(job, placements)
        self._demand[job.id] = demand
        self._charge(job, demand, +1)
        self.priorities[job.priority] += 1
        self.user_jobs[(job.workspace, job.user)] += 1
        return rj

    def release(self, job_id: str) -> RunningJob:
        """Return a job's resources (it finished, failed, was preempted or could not be started).

        Raises:
            NotFound: When the job holds nothing.
        """
        rj = self.running.pop(job_id, None)
        if rj is None:
            raise NotFound(f"job {job_id} holds no resources")
        self.version += 1
        self.freed_version += 1
        self._apply(rj.job, rj.placements, -1)
        for i in {self.index[p.node] for p in rj.placements}:
            self.node_jobs[i].pop(job_id, None)
        self._charge(rj.job, self._demand.pop(job_id), -1)
        self.priorities[rj.job.priority] -= 1
        if not self.priorities[rj.job.priority]:
            del self.priorities[rj.job.priority]
        self.user_jobs[(rj.job.workspace, rj.job.user)] -= 1
        return rj

    def lift(self, rjs: Iterable[RunningJob]) -> None:
        """Low level what-if: free the capacity of running jobs but keep them running in every other respect
        (usage, indexes of jobs, versions); undo with ``unlift``. Vectorised: one pass for many jobs."""
        self._shift(rjs, +1)

    def unlift(self, rjs: Iterable[RunningJob]) -> None:
        """Undo ``lift``."""
        self._shift(rjs, -1)

    def _footprint(self, rj: RunningJob) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]:
        """(replica nodes, cpu, memory, device nodes, device columns, device milli, device memory) of a job."""
        requests = {t.name: t.request for t in rj.job.tasks}
        nodes: list[int] = []
        cpu: list[int] = []
        mem: list[int] = []
        dn: list[int] = []
        dc: list[int] = []
        dm: list[int] = []
        dmem: list[int] = []
        for p in rj.placements:
            r = requests[p.task]
            i = self.index[p.node]
            nodes.append(i)
            cpu.append(r.cpu_milli)
            mem.append(r.memory_mib)
            for d in p.devices:
                j = self.dev_pos[i][d]
                dn.append(i)
                dc.append(j)
                if r.fractional:
                    dm.append(r.accelerator_milli)
                    dmem.append(r.accelerator_memory_mib)
                else:
                    dm.append(FULL_MILLI)
                    dmem.append(int(self.dev_mem_cap[i, j]))

        def a(x: list[int]) -> IntArray:
            return np.array(x, dtype=np.int64)

        return a(nodes), a(cpu), a(mem), a(dn), a(dc), a(dm), a(dmem)

    def _shift(self, rjs: Iterable[RunningJob], sign: int) -> None:
        rjs = list(rjs)
        if len(rjs) < 4:  # a few jobs: the scalar path is cheaper than the vector set-up
            for rj in rjs:
                self._apply(rj.job, rj.placements, -sign)
            return
        cache = self._footprints
        if len(cache) > 2 * len(self.running) + 1000:  # forget jobs that ended
            cache.clear()
        fps = []
        for rj in rjs:
            hit = cache.get(rj.job.id)
            if hit is None or hit[0] is not rj:
                hit = (rj, self._footprint(rj))
                cache[rj.job.id] = hit
            fps.append(hit[1])
        nodes, cpu, mem, dn, dc, dm, dmem = (np.concatenate([f[k] for f in fps]) for k in range(7))
        np.add.at(self.cpu_free, nodes, sign * cpu)
        np.add.at(self.mem_free, nodes, sign * mem)
        if dn.size:
            np.add.at(self.dev_free, (dn, dc), sign * dm)
            np.add.at(self.dev_mem_free, (dn, dc), sign * dmem)
            touched = np.unique(dn)
            free = self.dev_free[touched]
            whole = free == FULL_MILLI
            types = self.dev_type[touched]
            for t in range(len(self.types)):
                self.full_free[touched, t] = (whole & (types == t)).sum(axis=1)
            self.full_free_all[touched] = self.full_free[touched].sum(axis=1)
            self.max_partial[touched] = np.where(free < FULL_MILLI, free, 0).max(axis=1, initial=0)
        self.epoch[np.unique(nodes)] += 1

    def restore(self, rj: RunningJob) -> None:
        """Re-allocate a record returned by ``release`` (used to undo what-if releases)."""
        self.allocate(rj.job, rj.placements, rj.started_at, by_preemption=rj.by_preemption)

    def _charge(self, job: Job, demand: Mapping[str, float], sign: int) -> None:
        u = self.usage[(job.workspace, job.pool)]
        for k, v in demand.items():
            u[k] += sign * v

    def placed_demand(self, job: Job, placements: Iterable[ReplicaPlacement]) -> dict[str, float]:
        """Quota resources of a placed job (accelerators charged to the types actually used)."""
        requests = {t.name: t.request for t in job.tasks}
        out: dict[str, float] = defaultdict(float)
        for p in placements:
            r = requests[p.task]
            out[RESOURCE_CPU] += r.cpu_milli
            out[RESOURCE_MEMORY] += r.memory_mib
            if p.devices:
                i = self.index[p.node]
                share = p.accelerator_milli / FULL_MILLI / len(p.devices)
                for d in p.devices:
                    out[RESOURCE_ACCELERATORS] += share
                    out[self.types[self.dev_type[i, self.dev_pos[i][d]]]] += share
        return out

    # ----- quotas -------------------------------------------------------------------------------------------
    def quota(self, workspace: str, pool: str) -> Quota | None:
        """The workspace's quota in the pool, if any."""
        return self.quotas.get((workspace, pool))

    def set_quota(self, quota: Quota) -> None:
        """Add or replace a quota."""
        self.quotas[(quota.workspace, quota.pool)] = quota

    def capacity(self, pool: str) -> dict[str, float]:
        """Total resources of the ready nodes of a pool (DRF denominators)."""
        m = self.pool_mask(pool) & self.ready
        out: dict[str, float] = {
            RESOURCE_CPU: float(self.cpu_cap[m].sum()),
            RESOURCE_MEMORY: float(self.mem_cap[m].sum()),
            RESOURCE_ACCELERATORS: float(self.dev_count[m].sum()),
        }
        for t, name in enumerate(self.types):
            out[name] = float((self.dev_type[m] == t).sum())
        return out

    # ----- caches -------------------------------------------------------------------------------------------
    def cache_add(self, node: str, dataset: str, size_mib: int) -> None:
        """Record that ``node`` now caches ``dataset``."""
        i = self.index[node]
        if dataset in self.cached[i]:
            return
        self.cached[i][dataset] = size_mib
        self.cache_used[i] += size_mib
        self.cache_holders[dataset].add(i)

    def cache_drop(self, node: str, dataset: str) -> None:
        """Record that ``node`` dropped ``dataset`` from its cache."""
        i = self.index[node]
        size = self.cached[i].pop(dataset, None)
        if size is None:
            return
        self.freed_version += 1
        self.cache_used[i] -= size
        self.cache_holders[dataset].discard(i)

    def datasets_in_use(self, i: int) -> set[str]:
        """Datasets read by jobs running on node ``i`` (not obsolete)."""
        out: set[str] = set()
        for jid in self.node_jobs[i]:
            out.update(ds for ds, _ in self.running[jid].job.datasets)
        return out

    # ----- views --------------------------------------------------------------------------------------------
    def free_summary(self, pool: str) -> Mapping[str, int]:
        """Free accelerators (whole) and cpu in a pool's ready nodes, for reasons and reports."""
        m = self.pool_mask(pool) & self.ready
        return {"accelerators": int(self.full_free_all[m].sum()), "cpu_milli": int(self.cpu_free[m].sum())}

    def check_invariants(self) -> None:
        """Assert nothing is oversubscribed and indexes match (tests and debugging)."""
        assert (self.cpu_free >= 0).all(), "cpu oversubscribed"
        assert (self.mem_free >= 0).all(), "memory oversubscribed"
        assert (self.dev_free >= 0).all(), "device oversubscribed"
        assert (self.dev_free[self.dev_exists] <= FULL_MILLI).all()
        assert (self.dev_mem_free >= 0).all(), "device memory oversubscribed"
        for t in range(len(self.types)):
            ff = ((self.dev_type == t) & (self.dev_free == FULL_MILLI)).sum(axis=1)
            assert (ff == self.full_free[:, t]).all(), "full_free index out of date"
        assert (self.full_free.sum(axis=1) == self.full_free_all).all()
        mp = np.where(self.dev_free < FULL_MILLI, self.dev_free, 0).max(axis=1, initial=0)
        assert (mp == self.max_partial).all(), "max_partial index out of date"
