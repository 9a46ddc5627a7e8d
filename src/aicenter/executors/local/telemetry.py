"""Telemetry of this host and of the replicas running on it: the raw counters of ``aicenter.core.telemetry``.

Everything here reads ``/proc``, ``/sys`` and NVML in-process: no subprocess (``nvidia-smi`` costs ~300 ms on
an idle 8-GPU host), so one read of the node costs 0.4 ms of CPU, and 4 ms with 10 running replicas
(bench/monitoring_sampler.py, section ``sampler``, on 2 shared cores): 0.03 % of one core at the 15 s interval,
far under the 1 % (150 ms per tick) that the sampler may use.

- Node: ``psutil`` over ``/proc/stat`` (CPU times), ``/proc/meminfo`` (used = total - available, what the
  kernel can give without swapping), ``statvfs`` of the jobs' filesystem, ``/proc/net/dev`` (loopback left out:
  a job's replicas talking to each other on one host is not network traffic).
- Accelerators: NVML through ``ctypes`` on ``libnvidia-ml.so.1`` (``Nvml``), so telemetry needs no Python
  binding installed; no library, no driver or no device is "no accelerator telemetry", never an error.
- Replicas: the launcher's ``status.json`` (checked against the handle, as ``status`` does) names the command's
  pid and its control group, read by ``aicenter.runtime.usage``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from aicenter.core.telemetry import AcceleratorReading, NodeCounters, ReplicaCounters
from aicenter.executors.base import ReplicaHandle
from aicenter.executors.local.host import nvidia_type
from aicenter.executors.rundir import launcher_record
from aicenter.runtime.usage import children_map, replica_usage

__all__ = ["Nvml", "default_nvml", "read_node", "read_replica", "read_replicas", "sample_host"]

log = logging.getLogger(__name__)

_NVML_SUCCESS = 0
_NVML_INSUFFICIENT_SIZE = 7
_NVML_TEMPERATURE_GPU = 0
# NVML writes this into usedGpuMemory when it cannot attribute memory to a process (e.g. without privileges).
_NVML_VALUE_NOT_AVAILABLE = 2**64 - 1
_MAX_PROCESSES = 256


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _ProcessInfo(ctypes.Structure):
    # nvmlProcessInfo_t as ``nvmlDeviceGetComputeRunningProcesses_v3`` fills it (NVML 11.5+ drivers, R470+).
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class Nvml:
    """NVML through ``ctypes``: initialized once per process, on first use; ``available`` False without it.

    Args:
        library: The loaded library (tests pass a stand-in); None loads ``libnvidia-ml.so.1``.
        visible_devices: ``CUDA_VISIBLE_DEVICES`` of the server (indices only are honoured; None: all).
    """

    def __init__(self, library: Any = None, visible_devices: str | None = None) -> None:
        self._lib = library
        self._lock = threading.Lock()
        self._ready: bool | None = None
        self._visible: set[int] | None = None
        if visible_devices is not None:
            self._visible = {int(t) for t in visible_devices.split(",") if t.strip().isdigit()}

    @property
    def available(self) -> bool:
        """Whether NVML loaded and initialized (tried once)."""
        with self._lock:
            if self._ready is None:
                self._ready = self._init()
            return self._ready

    def _init(self) -> bool:
        try:
            if self._lib is None:
                self._lib = ctypes.CDLL("libnvidia-ml.so.1")
            init = getattr(self._lib, "nvmlInit_v2", None) or self._lib.nvmlInit
            code = init()
        except (OSError, AttributeError) as exc:
            log.debug("no NVML, no accelerator telemetry: %s", exc)
            return False
        if code != _NVML_SUCCESS:
            log.info("NVML did not initialize (error %s): no accelerator telemetry", code)
            return False
        return True

    def _handles(self) -> list[tuple[int, Any]]:
        count = ctypes.c_uint(0)
        if self._lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != _NVML_SUCCESS:
            return []
        out = []
        for index in range(count.value):
            if self._visible is not None and index not in self._visible:
                continue
            handle = ctypes.c_void_p()
            if self._lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == _NVML_SUCCESS:
                out.append((index, handle))
        return out

    def read(self) -> tuple[list[AcceleratorReading], dict[int, int]]:
        """Every device's reading, and the device memory each process holds (pid -> bytes, over devices)."""
        if not self.available:
            return [], {}
        lib = self._lib
        readings: list[AcceleratorReading] = []
        per_pid: dict[int, int] = {}
        for index, handle in self._handles():
            name = ctypes.create_string_buffer(96)
            product = name.value.decode(errors="replace") if lib.nvmlDeviceGetName(handle, name, 96) == 0 else ""
            util, mem = _Utilization(), _Memory()
            temp, power = ctypes.c_uint(0), ctypes.c_uint(0)
            ok_util = lib.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(util)) == _NVML_SUCCESS
            ok_mem = lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)) == _NVML_SUCCESS
            ok_temp = lib.nvmlDeviceGetTemperature(handle, _NVML_TEMPERATURE_GPU, ctypes.byref(temp)) == 0
            ok_power = lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(power)) == _NVML_SUCCESS  # milliwatts
            readings.append(
                AcceleratorReading(
                    index=index,
                    type=nvidia_type(product) if product else "nvidia-unknown",
                    utilization=util.gpu / 100.0 if ok_util else None,
                    memory_used_bytes=int(mem.used) if ok_mem else None,
                    memory_total_bytes=int(mem.total) if ok_mem else None,
                    temperature_celsius=float(temp.value) if ok_temp else None,
                    power_watts=power.value / 1000.0 if ok_power else None,
                )
            )
            for pid, used in self._processes(handle):
                per_pid[pid] = per_pid.get(pid, 0) + used
        return readings, per_pid

    def _processes(self, handle: Any) -> list[tuple[int, int]]:
        fn = getattr(self._lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
        if fn is None:
            return []
        size = 64
        while True:
            count = ctypes.c_uint(size)
            infos = (_ProcessInfo * size)()
            code = fn(handle, ctypes.byref(count), infos)
            if code == _NVML_INSUFFICIENT_SIZE and size < _MAX_PROCESSES:
                size = min(_MAX_PROCESSES, max(size * 2, count.value))
                continue
            if code != _NVML_SUCCESS:
                return []
            return [
                (int(i.pid), int(i.usedGpuMemory))
                for i in infos[: count.value]
                if i.usedGpuMemory != _NVML_VALUE_NOT_AVAILABLE
            ]


_nvml: Nvml | None = None
_nvml_lock = threading.Lock()


def default_nvml() -> Nvml:
    """The process's NVML (one init per process: ``nvmlInit`` costs ~100 ms on an 8-GPU host)."""
    global _nvml
    with _nvml_lock:
        if _nvml is None:
            _nvml = Nvml(visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
        return _nvml


def _network() -> tuple[int, int] | tuple[None, None]:
    try:
        nics = psutil.net_io_counters(pernic=True)
    except OSError:
        return None, None
    rx = sum(c.bytes_recv for name, c in nics.items() if name != "lo")
    tx = sum(c.bytes_sent for name, c in nics.items() if name != "lo")
    return rx, tx


def read_node(node: str, disk_path: Path | None, *, nvml: Nvml | None = None) -> tuple[NodeCounters, dict[int, int]]:
    """This host's counters (no replicas yet), and the device memory per pid that ``read_replicas`` uses.

    Args:
        node: The node's name.
        disk_path: A path on the filesystem whose use is reported (the jobs' directories); None: ``/``.
        nvml: The NVML to ask; None: the process's.
    """
    times = psutil.cpu_times()
    # As psutil.cpu_percent counts: guest time is already part of user time on Linux.
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    busy = total - times.idle - getattr(times, "iowait", 0.0)
    memory = psutil.virtual_memory()
    disk_used: int | None = None
    disk_total: int | None = None
    with contextlib.suppress(OSError):  # the jobs path not there yet: no disk sample this tick
        disk = psutil.disk_usage(str(disk_path or "/"))
        disk_used, disk_total = int(disk.used), int(disk.total)
    rx, tx = _network()
    nvml = nvml or default_nvml()
    accelerators, per_pid = nvml.read()
    counters = NodeCounters(
        node=node,
        at=time.time(),
        cpu_busy_seconds=busy,
        cpu_total_seconds=total,
        memory_used_bytes=int(memory.total - memory.available),
        memory_total_bytes=int(memory.total),
        disk_used_bytes=disk_used,
        disk_total_bytes=disk_total,
        network_receive_bytes=rx,
        network_transmit_bytes=tx,
        accelerators=tuple(accelerators),
        accelerator_telemetry=nvml.available,
    )
    return counters, per_pid


def read_replica(
    handle: ReplicaHandle,
    gpu_per_pid: dict[int, int] | None = None,
    children: Callable[[], dict[int, list[int]]] | None = None,
) -> ReplicaCounters | None:
    """A running replica's counters; None when it is not running (no record, ended, or another launcher's).

    Args:
        handle: The replica's handle.
        gpu_per_pid: Device memory per pid (``Nvml.read``).
        children: Gives ``runtime.usage.children_map()``, shared by a tick's replicas; None: psutil's own scan.
    """
    record = launcher_record(handle)
    if record.get("state") != "running":
        return None
    found = replica_usage(record.get("cgroups"), record.get("child_pid"), record.get("child_start_time"), children)
    if found is None:
        return None
    cpu, memory, pids, source = found
    gpu = None
    if gpu_per_pid:
        held = [gpu_per_pid[p] for p in pids if p in gpu_per_pid]
        gpu = sum(held) if held else None
    return ReplicaCounters(handle.run_dir, cpu, memory, gpu, source)


def read_replicas(handles: Sequence[ReplicaHandle], gpu_per_pid: dict[int, int]) -> tuple[ReplicaCounters, ...]:
    """``read_replica`` of each handle; those not running are left out."""
    out = []
    scanned: list[dict[int, list[int]]] = []

    def children() -> dict[int, list[int]]:  # one /proc scan per tick, and only if a replica has no group
        if not scanned:
            scanned.append(children_map())
        return scanned[0]

    for handle in handles:
        with contextlib.suppress(OSError):
            if (counters := read_replica(handle, gpu_per_pid, children)) is not None:
                out.append(counters)
    return tuple(out)


def sample_host(
    node: str, disk_path: Path | None, handles: Sequence[ReplicaHandle], *, nvml: Nvml | None = None
) -> NodeCounters:
    """This host's counters with those of the running replicas among ``handles`` (blocking: 0.4 ms of CPU,
    and ~0.4 ms more per replica)."""
    counters, per_pid = read_node(node, disk_path, nvml=nvml)
    return replace(counters, replicas=read_replicas(handles, per_pid))
