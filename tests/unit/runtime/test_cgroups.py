"""The control-group decisions of ``aicenter.runtime.cgroups``: which layout, which files, which values.

The v2 cases run on a fake cgroup2 tree in a temporary directory (``_make_group_dir`` replaced by one that
fills a new directory with interface files, as the kernel does): this host's CI has cgroup v1 only. The v1
path, and v2 wherever it exists, are tested for real in ``tests/security/test_replica_limits.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aicenter.runtime import cgroups
from aicenter.runtime.cgroups import (
    Layout,
    Limits,
    ReplicaGroup,
    cpu_quota_us,
    cpu_shares,
    cpu_weight,
    group_name,
    hierarchies,
    layouts,
    own_groups,
    v1_settings,
    v2_settings,
)

MiB = 2**20
LIMITS = Limits(memory_bytes=64 * MiB, cpu_milli=500, pids_max=64)
# This CI machine: v1 hierarchies plus an empty cgroup2 (the "hybrid" layout of older systemd).
HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n"
V2_FILES = ("cgroup.controllers", "cgroup.subtree_control", "cgroup.procs", "memory.events", "cgroup.kill")
V2_GROUP_FILES = ("memory.max", "memory.swap.max", "memory.oom.group", "cpu.weight", "cpu.max", "pids.max")


@pytest.fixture
def fake_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new group directory gets its interface files, and inherits the controllers its parent hands down."""

    def make(path: str) -> None:
        os.mkdir(path)
        handed = Path(path).parent.joinpath("cgroup.subtree_control").read_text().replace("+", "").split()
        for name in V2_FILES:
            Path(path, name).write_text("")
        Path(path, "cgroup.controllers").write_text(" ".join(handed))
        for name in V2_GROUP_FILES:
            if name.partition(".")[0] in handed:
                Path(path, name).write_text("")

    monkeypatch.setattr(cgroups, "_make_group_dir", make)


def v2_tree(tmp_path: Path, group: str, controllers: str = "cpuset cpu io memory pids") -> Path:
    """A cgroup2 mount at ``tmp_path/cg`` with ``group`` (the server's own) and its parent's controllers."""
    mount = tmp_path / "cg"
    own = mount / group.strip("/")
    own.mkdir(parents=True)
    for d in {own.parent, own}:
        for name in V2_FILES:
            (d / name).write_text("")
    (own.parent / "cgroup.controllers").write_text(controllers)
    return mount


def v2_mountinfo(mount: Path, options: str = "rw,nosuid") -> str:
    return f"25 1 0:22 / {mount} {options} - cgroup2 cgroup2 rw,nsdelegate\n"


def test_cpu_quota_is_milli_cores_of_the_period() -> None:
    assert cpu_quota_us(500) == 100_000  # below one core only the weight applies
    assert cpu_quota_us(10) == 100_000
    assert cpu_quota_us(2500) == 250_000
    assert (cpu_shares(500), cpu_shares(1), cpu_shares(2000)) == (512, 2, 2048)
    assert (cpu_weight(1000), cpu_weight(1), cpu_weight(10**6)) == (39, 1, 10_000)


def test_v2_and_v1_files_and_values() -> None:
    assert v2_settings(LIMITS) == [
        ("memory.max", str(64 * MiB), True),
        ("memory.swap.max", "0", False),
        ("memory.oom.group", "1", False),
        ("cpu.weight", "20", False),
        ("cpu.max", "100000 100000", True),
        ("pids.max", "64", True),
    ]
    assert v1_settings(LIMITS) == {
        "memory": [
            ("memory.limit_in_bytes", str(64 * MiB), True),
            ("memory.memsw.limit_in_bytes", str(64 * MiB), False),
        ],
        "cpu": [
            ("cpu.shares", "512", False),
            ("cpu.cfs_period_us", "100000", True),
            ("cpu.cfs_quota_us", "100000", True),
        ],
        "pids": [("pids.max", "64", True)],
    }
    # A zero is no limit: no file, no controller needed.
    assert v2_settings(Limits(pids_max=10)) == [("pids.max", "10", True)]
    assert list(v1_settings(Limits(cpu_milli=1500))) == ["cpu"]
    assert Limits(memory_bytes=1, pids_max=2).controllers() == ("memory", "pids")
    assert layouts(Limits()) == ([], ["no limit to enforce"])


def test_mountinfo_and_own_groups_parse() -> None:
    found = hierarchies(
        HYBRID_MOUNTINFO + "50 31 0:40 /docker/x /sys/fs/cgroup/cpu\\040set ro - cgroup cgroup ro,cpu\n"
    )
    assert [(h.version, sorted(h.controllers), h.mountpoint) for h in found] == [
        (1, ["cpu"], "/sys/fs/cgroup/cpu"),
        (1, ["cpuacct"], "/sys/fs/cgroup/cpuacct"),
        (1, ["memory"], "/sys/fs/cgroup/memory"),
        (1, ["pids"], "/sys/fs/cgroup/pids"),
        (2, [], "/sys/fs/cgroup/unified"),
        (1, ["cpu"], "/sys/fs/cgroup/cpu set"),
    ]
    assert found[-1].writable is False
    assert found[-1].path("/docker/x/a") == "/sys/fs/cgroup/cpu set/a"  # a container's view of a sub-tree
    assert found[-1].path("/elsewhere") is None
    assert own_groups(HYBRID_CGROUP) == {"pids": "/", "memory": "/process_api/abc", "cpu": "/", "": "/"}


def test_hybrid_host_uses_v1_below_our_own_groups(tmp_path: Path) -> None:
    """The empty cgroup2 of a hybrid host has no controllers: v1, ``aicenter`` below our own group in each."""
    mounts = {c: tmp_path / c for c in ("cpu", "memory", "pids", "unified")}
    for path in mounts.values():
        path.mkdir()
    (mounts["memory"] / "process_api" / "abc").mkdir(parents=True)
    (mounts["unified"] / "cgroup.controllers").write_text("")
    mountinfo = HYBRID_MOUNTINFO.replace("/sys/fs/cgroup/", f"{tmp_path}/")
    usable, reasons = layouts(LIMITS, mountinfo=mountinfo, proc_cgroup=HYBRID_CGROUP)
    assert usable == [
        Layout(
            "cgroup-v1",
            {
                "memory": f"{tmp_path}/memory/process_api/abc/aicenter",
                "cpu": f"{tmp_path}/cpu/aicenter",
                "pids": f"{tmp_path}/pids/aicenter",
            },
        )
    ]
    assert reasons == [f"cgroup2 group {tmp_path}/unified has no memory cpu pids controller"]
    # A configured parent is the replicas' group itself, in every hierarchy.
    (usable_there,), _ = layouts(LIMITS, "/batch", mountinfo=mountinfo, proc_cgroup=HYBRID_CGROUP)
    assert usable_there.parents["memory"] == f"{tmp_path}/memory/batch"


def test_v1_needs_every_wanted_hierarchy(tmp_path: Path) -> None:
    mountinfo = "35 31 0:32 / /m rw - cgroup cgroup rw,memory\n"
    assert layouts(Limits(pids_max=5), mountinfo=mountinfo, proc_cgroup="")[1] == [
        "no cgroup2 mount",
        "no cgroup v1 pids hierarchy",
    ]
    ro = "35 31 0:32 / /m ro - cgroup cgroup rw,memory\n"
    assert layouts(Limits(memory_bytes=1), mountinfo=ro, proc_cgroup="")[1][1] == (
        "cgroup v1 memory hierarchy at /m is read-only"
    )


def test_v2_groups_go_above_our_own_and_get_every_limit(tmp_path: Path, fake_kernel: None) -> None:
    """systemd's ``DelegateSubgroup=server``: the server runs in ``aicenter.service/server``; the replicas'
    groups go in ``aicenter.service/aicenter``, with the controllers handed down on the way."""
    mount = v2_tree(tmp_path, "/system.slice/aicenter.service/server")
    service = mount / "system.slice" / "aicenter.service"
    usable, reasons = layouts(
        LIMITS, mountinfo=v2_mountinfo(mount), proc_cgroup="0::/system.slice/aicenter.service/server\n"
    )
    top = str(service / "aicenter")
    assert usable == [Layout("cgroup-v2", {"": top}, (str(service), top))]
    assert reasons == ["no cgroup v1 memory hierarchy"]

    group = ReplicaGroup.create(usable[0], group_name("job 7 worker/1 attempt 0", 4242), LIMITS)
    leaf = service / "aicenter" / "job-7-worker-1-attempt-0.4242"
    assert group.dirs == {"": str(leaf)}
    assert (service / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    assert (service / "aicenter" / "cgroup.subtree_control").read_text() == "+memory +cpu +pids"
    written = {name: (leaf / name).read_text() for name in V2_GROUP_FILES}
    assert written == {
        "memory.max": str(64 * MiB),
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "cpu.weight": "20",
        "cpu.max": "100000 100000",
        "pids.max": "64",
    }
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n")
    assert group.oom_kills() == 1
    assert group.describe() == f"cgroup-v2 at {leaf}"
    group.close_files()


def test_v2_controllers_already_handed_down_are_not_written_again(tmp_path: Path, fake_kernel: None) -> None:
    mount = v2_tree(tmp_path, "/svc/server")
    (mount / "svc" / "cgroup.subtree_control").write_text("memory pids")
    (usable,), _ = layouts(
        Limits(memory_bytes=MiB, pids_max=8), mountinfo=v2_mountinfo(mount), proc_cgroup="0::/svc/server"
    )
    ReplicaGroup.create(usable, "r.1", Limits(memory_bytes=MiB, pids_max=8)).close_files()
    assert (mount / "svc" / "cgroup.subtree_control").read_text() == "memory pids"  # untouched
    leaf = mount / "svc" / "aicenter" / "r.1"
    written = sorted(p.name for p in leaf.iterdir() if p.read_text() and p.name in V2_GROUP_FILES)
    assert written == ["memory.max", "memory.oom.group", "memory.swap.max", "pids.max"]
    assert not (leaf / "cpu.max").exists()  # no cpu limit asked, so no cpu controller handed down


def test_v2_refusals_say_why(tmp_path: Path) -> None:
    mount = v2_tree(tmp_path, "/svc/server", controllers="memory io")
    info = v2_mountinfo(mount)
    assert layouts(LIMITS, mountinfo=info, proc_cgroup="0::/svc/server")[1][0] == (
        f"cgroup2 group {mount}/svc has no cpu pids controller"
    )
    assert layouts(LIMITS, mountinfo=v2_mountinfo(mount, "ro"), proc_cgroup="0::/svc/server")[1][0] == (
        f"cgroup2 at {mount} is read-only"
    )
    # Only what the limits need: a memory limit alone is enforceable there.
    assert (
        layouts(Limits(memory_bytes=MiB), mountinfo=info, proc_cgroup="0::/svc/server")[0][0].mechanism == "cgroup-v2"
    )


def test_v2_at_the_root_and_with_a_configured_parent(tmp_path: Path) -> None:
    mount = tmp_path / "cg"
    (mount / "aicenter.slice").mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpu memory pids")
    (mount / "aicenter.slice" / "cgroup.controllers").write_text("cpu memory pids")
    info = v2_mountinfo(mount)
    # Our own group is the root (a host's, or a container's namespace): ``/aicenter``.
    assert layouts(LIMITS, mountinfo=info, proc_cgroup="0::/\n")[0] == [
        Layout("cgroup-v2", {"": f"{mount}/aicenter"}, (str(mount), f"{mount}/aicenter"))
    ]
    top = f"{mount}/aicenter.slice/replicas"
    assert layouts(LIMITS, "/aicenter.slice/replicas", mountinfo=info, proc_cgroup="0::/x/y\n")[0] == [
        Layout("cgroup-v2", {"": top}, (f"{mount}/aicenter.slice", top))
    ]


def test_group_names_and_pruning_of_dead_launchers(tmp_path: Path) -> None:
    assert group_name("job 7 worker/1 attempt 0", 12) == "job-7-worker-1-attempt-0.12"
    assert group_name("", 3) == "replica.3"
    assert group_name("../../etc", 3) == "etc.3"
    dead = 2**22 + 1  # above any pid_max: no such process
    for name in (f"old.{dead}", f"mine.{os.getpid()}", "not-a-replica"):
        (tmp_path / name).mkdir()
    cgroups._prune(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"mine.{os.getpid()}", "not-a-replica"]
