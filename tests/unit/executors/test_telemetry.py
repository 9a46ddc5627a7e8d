"""Host and replica telemetry readers: control group files (fake trees), NVML through ctypes (a stand-in for
the driver's library: no GPU on the CI machines), this host's real counters, Slurm's counters."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path
from typing import Any

import pytest

from aicenter.executors.base import ReplicaHandle
from aicenter.executors.local.telemetry import Nvml, read_node
from aicenter.executors.slurm.inventory import parse_nodes
from aicenter.executors.slurm.telemetry import node_counters, usage_file_counters
from aicenter.runtime.files import STATUS_FILE, write_json_atomic
from aicenter.runtime.usage import USAGE_FILE, cgroup_usage, replica_usage

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm" / "scontrol-show-nodes-22.05.txt"


def _group(path: Path, **files: str) -> str:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name.replace("_", ".", 1)).write_text(text)
    return str(path)


def test_cgroup_v2_gives_kernel_cpu_and_resident_memory(tmp_path: Path) -> None:
    d = _group(
        tmp_path / "v2",
        cgroup_procs="12\n13\n",
        cpu_stat="usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
        memory_stat="anon 1048576\nfile 999999999\nfile_mapped 4096\n",
    )
    assert cgroup_usage({"": d}) == (2.5, 1048576 + 4096, [12, 13])


def test_cgroup_v1_gives_cpuacct_when_mounted_with_cpu_and_rss(tmp_path: Path) -> None:
    cpu = _group(tmp_path / "cpu", cgroup_procs="7\n", cpuacct_usage="3000000000\n")
    mem = _group(
        tmp_path / "memory", cgroup_procs="7\n8\n", memory_stat="cache 5\ntotal_rss 8192\ntotal_mapped_file 0\n"
    )
    assert cgroup_usage({"cpu": cpu, "memory": mem}) == (3.0, 8192, [7, 8])
    # cpu without cpuacct (separate hierarchies, as on this CI kind): CPU unknown from the group
    plain = _group(tmp_path / "cpu2", cgroup_procs="7\n", cpu_stat="nr_periods 0\n")
    assert cgroup_usage({"cpu": plain, "memory": mem})[0] is None


def test_replica_usage_falls_back_to_the_process_tree(tmp_path: Path) -> None:
    me = os.getpid()
    found = replica_usage({}, me)
    assert found is not None
    assert found.source == "processes"
    assert me in found.pids
    assert found.cpu_seconds is not None
    assert found.cpu_seconds > 0
    assert found.memory_bytes is not None
    assert found.memory_bytes > 10 * 2**20
    mem = _group(tmp_path / "memory", cgroup_procs=f"{me}\n", memory_stat="total_rss 4096\n")
    mixed = replica_usage({"memory": mem}, me)
    assert mixed is not None
    assert (mixed.memory_bytes, mixed.source) == (4096, "cgroup+processes")
    assert mixed.cpu_seconds is not None
    assert mixed.cpu_seconds > 0
    assert replica_usage({}, me, start_time=1.0) is None  # the pid names another process now
    assert replica_usage({}, None) is None


class FakeNvml:
    """libnvidia-ml's functions as ``ctypes`` calls them: values written through the pointers passed."""

    def __init__(self, init_code: int = 0) -> None:
        self.init_code = init_code
        self.processes = [(101, 2**30), (102, 2**64 - 1)]

    def nvmlInit_v2(self) -> int:
        return self.init_code

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        count._obj.value = 2
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle: Any) -> int:
        handle._obj.value = 1000 + index
        return 0

    def nvmlDeviceGetName(self, handle: Any, buf: Any, size: int) -> int:
        buf.value = b"NVIDIA H100 80GB HBM3"
        return 0

    def nvmlDeviceGetUtilizationRates(self, handle: Any, util: Any) -> int:
        util._obj.gpu = 37
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle: Any, mem: Any) -> int:
        mem._obj.total, mem._obj.used = 80 * 2**30, 3 * 2**30
        return 0

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int, temp: Any) -> int:
        temp._obj.value = 64
        return 0

    def nvmlDeviceGetPowerUsage(self, handle: Any, power: Any) -> int:
        if handle.value == 1001:
            return 3  # NVML_ERROR_NOT_SUPPORTED on this device
        power._obj.value = 312_500
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any, count: Any, infos: Any) -> int:
        if count._obj.value < len(self.processes):
            count._obj.value = len(self.processes)
            return 7
        for i, (pid, used) in enumerate(self.processes):
            infos[i].pid, infos[i].usedGpuMemory = pid, used
        count._obj.value = len(self.processes)
        return 0


def test_nvml_readings_per_device_and_memory_per_process() -> None:
    nvml = Nvml(FakeNvml())
    readings, per_pid = nvml.read()
    assert nvml.available
    assert [r.index for r in readings] == [0, 1]
    first = readings[0]
    assert (first.type, first.utilization, first.temperature_celsius, first.power_watts) == (
        "nvidia-h100",
        0.37,
        64.0,
        312.5,
    )
    assert (first.memory_used_bytes, first.memory_total_bytes) == (3 * 2**30, 80 * 2**30)
    assert readings[1].power_watts is None  # not supported there: unknown, not 0
    assert per_pid == {101: 2 * 2**30}  # over both devices; the unattributed one is left out


def test_nvml_honours_visible_devices_and_missing_nvml_is_no_telemetry() -> None:
    readings, _ = Nvml(FakeNvml(), visible_devices="1").read()
    assert [r.index for r in readings] == [1]
    failing = Nvml(FakeNvml(init_code=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert failing.read() == ([], {})
    assert not failing.available


def test_this_hosts_counters_are_real(tmp_path: Path) -> None:
    nvml = Nvml(ctypes.CDLL(None))  # a library without NVML's symbols: as on a host with no driver
    counters, per_pid = read_node("n1", tmp_path, nvml=nvml)
    assert counters.node == "n1"
    assert abs(counters.at - time.time()) < 60
    assert counters.cpu_total_seconds
    assert counters.cpu_busy_seconds is not None
    assert 0 <= counters.cpu_busy_seconds <= counters.cpu_total_seconds
    assert counters.memory_total_bytes
    assert 0 < (counters.memory_used_bytes or 0) <= counters.memory_total_bytes
    assert counters.disk_total_bytes
    assert 0 < (counters.disk_used_bytes or 0) <= counters.disk_total_bytes
    assert counters.network_receive_bytes is not None
    assert counters.network_transmit_bytes is not None
    assert (counters.accelerators, counters.accelerator_telemetry, per_pid) == ((), False, {})


def test_slurm_counters_from_scontrol() -> None:
    nodes = {n.host.name: n for n in parse_nodes(DATA.read_text())}
    node1 = node_counters(nodes["node1"], "node1", 5.0)
    assert node1.cpu_utilization == pytest.approx(1.72 / 4)
    # FreeMem (the machine's 23240 MiB) above RealMemory (2048 configured): used is unknown, not 0
    assert node1.memory_total_bytes == 2048 * 2**20
    assert node1.memory_used_bytes is None
    assert not node1.accelerator_telemetry
    line = "NodeName=x CPUTot=8 CPULoad=N/A RealMemory=4096 FreeMem=1024 State=IDLE"
    x = node_counters(parse_nodes(line)[0], "x", 5.0)
    assert (x.cpu_utilization, x.memory_used_bytes) == (None, 3072 * 2**20)


def test_slurm_replica_counters_from_fresh_usage_files_of_running_replicas(tmp_path: Path) -> None:
    def replica(name: str, state: str, at: float | None) -> ReplicaHandle:
        run_dir = tmp_path / name
        run_dir.mkdir()
        write_json_atomic(run_dir / STATUS_FILE, {"launcher_pid": 5, "launcher_start_time": 9.0, "state": state})
        if at is not None:
            write_json_atomic(run_dir / USAGE_FILE, {"at": at, "cpu_seconds": 12.5, "memory_bytes": 4096})
        return ReplicaHandle("slurm", "n", str(run_dir), 5, 9.0)

    handles = [
        replica("fresh", "running", 990.0),
        replica("stale", "running", 900.0),  # its launcher stopped writing 100 s ago (3 x 15 s is the limit)
        replica("ended", "exited", 995.0),
        replica("nofile", "running", None),
    ]
    found = usage_file_counters(handles, now=1000.0, interval_s=15.0)
    assert [(Path(r.run_dir).name, r.cpu_seconds, r.memory_bytes, r.at, r.source) for r in found] == [
        ("fresh", 12.5, 4096, 990.0, "usage-file")
    ]
