"""What this host offers to the ``local`` executor: CPUs, memory and NVIDIA GPUs.

Detection must be fast (``aicenter up`` is ready in under 3 s), so it reads ``/proc`` and ``/sys`` and asks NVML
in-process; it never starts a subprocess such as ``nvidia-smi`` (~300 ms on an idle 8-GPU host, seconds on a busy
one). A host without NVML or without a driver simply has no GPUs: that is never an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from aicenter.executors import HOSTNAME_LABEL, AcceleratorInfo, HostInfo
from aicenter.executors.base import node_labels

log = logging.getLogger(__name__)

__all__ = ["HOSTNAME_LABEL", "detect_host", "detect_nvidia_gpus", "effective_cpu_milli", "node_name", "nvidia_type"]

ARCH_LABEL = "aicenter.io/arch"

# A cgroup v1 memory limit at or above this means "no limit" (the kernel writes PAGE_COUNTER_MAX, ~2**63).
_NO_LIMIT = 2**62
_BRAND_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
_SERIES_WORDS = {"rtx", "gtx", "titan"}


def node_name(hostname: str) -> str:
    """Turn a host name into a valid node name: lower-case, ``[a-z0-9._-]``, at most 64 characters."""
    name = re.sub(r"[^a-z0-9._-]+", "-", hostname.strip().lower())[:64]
    name = name.strip("._-")
    return name or "localhost"


def nvidia_type(product: str) -> str:
    """The accelerator type of an NVIDIA product name.

    ``NVIDIA A100-SXM4-80GB`` -> ``nvidia-a100``, ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100``,
    ``Tesla V100-SXM2-32GB`` -> ``nvidia-v100``, ``NVIDIA GeForce RTX 4090`` -> ``nvidia-rtx-4090``.
    Form factor and memory size are not part of the type: the node keeps each device's memory.
    """
    words = [w for w in re.split(r"\s+", product.strip()) if w and w.lower() not in _BRAND_WORDS]
    if not words:
        return "nvidia-unknown"
    first = words[0].lower()
    if first in _SERIES_WORDS and len(words) > 1:
        model = f"{first}-{words[1].split('-')[0].lower()}"
    else:
        model = first.split("-")[0]
    model = re.sub(r"[^a-z0-9]+", "-", model).strip("-") or "unknown"
    return f"nvidia-{model}"[:64]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cgroup_dirs(mount: Path, relative: str) -> list[Path]:
    """The process's cgroup directory under ``mount`` and its ancestors, leaf first.

    Limits nest, so the effective one is the smallest along the path. Without a cgroup namespace the path
    may start with components that are not mounted here; they are dropped until the rest exists.
    """
    parts = [p for p in relative.strip("/").split("/") if p and p != ".."]
    while parts and not mount.joinpath(*parts).is_dir():
        parts = parts[1:]
    return [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _process_cgroups(proc_self: Path) -> dict[str, str]:
    """Controller -> cgroup path of this process (``""`` is the cgroup v2 unified hierarchy)."""
    out: dict[str, str] = {}
    for line in (_read(proc_self / "cgroup") or "").splitlines():
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


def cgroup_cpu_limit_milli(proc_self: Path = Path("/proc/self"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The CPU quota of this process's cgroup in milli-cores, or None when there is none."""
    groups = _process_cgroups(proc_self)
    limits: list[int] = []
    if (root / "cgroup.controllers").exists():  # cgroup v2
        for d in _cgroup_dirs(root, groups.get("", "/")):
            quota, _, period = (_read(d / "cpu.max") or "max").partition(" ")
            if quota.isdigit() and period.isdigit() and int(period) > 0:
                limits.append(int(quota) * 1000 // int(period))
    elif "cpu" in groups:  # cgroup v1
        mount = root / "cpu" if (root / "cpu").is_dir() else root / "cpu,cpuacct"
        for d in _cgroup_dirs(mount, groups["cpu"]):
            quota_us, period_us = _read(d / "cpu.cfs_quota_us") or "", _read(d / "cpu.cfs_period_us") or ""
            # -1 means no quota
            if quota_us.isdigit() and period_us.isdigit() and int(quota_us) > 0 and int(period_us) > 0:
                limits.append(int(quota_us) * 1000 // int(period_us))
    return min(limits) if limits else None


def cgroup_memory_limit(proc_self: Path = Path("/proc/self"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory limit of this process's cgroup in bytes, or None when there is none."""
    groups = _process_cgroups(proc_self)
    limits: list[int] = []
    if (root / "cgroup.controllers").exists():
        for d in _cgroup_dirs(root, groups.get("", "/")):
            value = _read(d / "memory.max")
            if value and value.isdigit():
                limits.append(int(value))
    elif "memory" in groups:
        for d in _cgroup_dirs(root / "memory", groups["memory"]):
            value = _read(d / "memory.limit_in_bytes")
            if value and value.isdigit() and int(value) < _NO_LIMIT:
                limits.append(int(value))
    return min(limits) if limits else None


def effective_cpu_milli() -> int:
    """CPUs this process may use, in milli-cores: its CPU affinity, capped by its cgroup's CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    milli = count * 1000
    quota = cgroup_cpu_limit_milli()
    return max(1, min(milli, quota) if quota else milli)


def effective_memory_bytes() -> int:
    """Memory of this host, capped by this process's cgroup memory limit."""
    total = int(psutil.virtual_memory().total)
    limit = cgroup_memory_limit()
    return min(total, limit) if limit else total


def _visible(env: str | None) -> tuple[set[int], tuple[str, ...]] | None:
    """Indices and UUID prefixes named by ``CUDA_VISIBLE_DEVICES``; None when it is unset (all devices)."""
    if env is None:
        return None
    indices: set[int] = set()
    uuids: list[str] = []
    for token in (t.strip() for t in env.split(",")):
        if token.isdigit():
            indices.add(int(token))
        elif token.startswith("GPU-"):
            uuids.append(token)
    return indices, tuple(uuids)


def detect_nvidia_gpus(nvml: Any = None, visible_devices: str | None = None) -> tuple[AcceleratorInfo, ...]:
    """This host's NVIDIA GPUs through NVML, ordered by index. No library, no driver or no GPU: ``()``.

    Args:
        nvml: The NVML binding (the ``pynvml`` module of nvidia-ml-py); imported when None.
        visible_devices: The value of ``CUDA_VISIBLE_DEVICES`` if the server was started restricted to some
            devices (indices or ``GPU-<uuid>`` prefixes); None means every device.

    Returns:
        One AcceleratorInfo per visible device, with its NVML index, type, product name and memory.
    """
    if nvml is None:
        try:
            import pynvml  # at call time: only hosts with GPUs pay for loading it
        except ImportError:
            return ()
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: simply no GPUs
        log.debug("NVML unavailable, registering no GPUs: %s", exc)
        return ()
    visible = _visible(visible_devices)
    gpus: list[AcceleratorInfo] = []
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                if visible is not None:
                    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                    if index not in visible[0] and not any(uuid.startswith(u) for u in visible[1]):
                        continue
                product = _text(nvml.nvmlDeviceGetName(handle))
                memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception as exc:  # one broken device (e.g. fallen off the bus) must not hide the others
                log.warning("NVML could not read GPU %d, leaving it out: %s", index, exc)
                continue
            gpus.append(AcceleratorInfo(index, nvidia_type(product), "nvidia", product, memory))
    except Exception as exc:
        log.warning("NVML failed while listing GPUs, registering no GPUs: %s", exc)
        return ()
    finally:
        with contextlib.suppress(Exception):  # nothing to do if shutting NVML down fails
            nvml.nvmlShutdown()
    return tuple(gpus)


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def host_labels(hostname: str, accelerators: Sequence[AcceleratorInfo]) -> dict[str, str]:
    """Labels the local executor puts on this host's node, for pool selectors."""
    return {**node_labels(node_name(hostname), accelerators), ARCH_LABEL: node_name(platform.machine() or "unknown")}


def detect_host(*, nvml: Any = None) -> HostInfo:
    """Detect this host: name, CPUs (affinity and cgroup quota), memory (cgroup limit) and NVIDIA GPUs."""
    hostname = socket.gethostname()
    gpus = detect_nvidia_gpus(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return HostInfo(
        name=node_name(hostname),
        address=hostname,
        executor="local",
        cpu_milli=effective_cpu_milli(),
        memory_bytes=effective_memory_bytes(),
        accelerators=gpus,
        labels=host_labels(hostname, gpus),
    )
