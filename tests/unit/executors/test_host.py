"""Host detection on this machine, the NVML adapter, product-name normalization and cgroup limits."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from aicenter.executors.local import host
from aicenter.executors.local.host import (
    HOSTNAME_LABEL,
    cgroup_cpu_limit_milli,
    cgroup_memory_limit,
    detect_host,
    detect_nvidia_gpus,
    node_name,
    nvidia_type,
)


def test_detects_this_host_fast() -> None:
    started = time.perf_counter()
    info = detect_host()
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"detection took {elapsed:.2f}s; `aicenter up` must be ready in under 3 s"
    assert info.executor == "local"
    assert info.name == node_name(os.uname().nodename)
    assert info.labels[HOSTNAME_LABEL] == info.name
    # This machine has no GPU (and no NVML library): zero accelerators, and no error.
    assert info.accelerators == ()
    allowed = len(os.sched_getaffinity(0)) * 1000
    assert 0 < info.cpu_milli <= allowed
    quota = cgroup_cpu_limit_milli()
    assert info.cpu_milli == (min(allowed, quota) if quota else allowed)
    total = psutil.virtual_memory().total
    assert 0 < info.memory_bytes <= total


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100"),
        ("NVIDIA A100-PCIE-40GB", "nvidia-a100"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100"),
        ("NVIDIA H200", "nvidia-h200"),
        ("Tesla V100-SXM2-32GB", "nvidia-v100"),
        ("Tesla T4", "nvidia-t4"),
        ("NVIDIA GeForce RTX 4090", "nvidia-rtx-4090"),
        ("NVIDIA RTX A6000", "nvidia-rtx-a6000"),
        ("Quadro RTX 8000", "nvidia-rtx-8000"),
        ("NVIDIA L40S", "nvidia-l40s"),
        ("NVIDIA", "nvidia-unknown"),
    ],
)
def test_nvidia_type(product: str, expected: str) -> None:
    assert nvidia_type(product) == expected


@pytest.mark.parametrize(
    ("hostname", "expected"),
    [("gpu-01", "gpu-01"), ("GPU_Node.Example.COM", "gpu_node.example.com"), ("-x y-", "x-y"), ("", "localhost")],
)
def test_node_name(hostname: str, expected: str) -> None:
    assert node_name(hostname) == expected


class FakeNvml:
    """Stands in for the NVML library (an external engine): the pynvml names and call signatures."""

    def __init__(self, devices: list[tuple[str, str, int]], *, init_error: Exception | None = None) -> None:
        self.devices = devices
        self.init_error = init_error
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> Any:
        name = self.devices[handle][0]
        if name == "broken":
            raise RuntimeError("GPU has fallen off the bus")
        return name.encode() if handle % 2 else name  # old bindings return bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.devices[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=self.devices[handle][2], free=0, used=0)


GIB = 2**30
EIGHT_A100 = [("NVIDIA A100-SXM4-80GB", f"GPU-{i}aaa", 80 * GIB) for i in range(8)]


def test_nvml_gpus() -> None:
    nvml = FakeNvml(EIGHT_A100)
    gpus = detect_nvidia_gpus(nvml)
    assert [g.index for g in gpus] == list(range(8))
    assert {(g.type, g.vendor, g.model, g.memory_bytes) for g in gpus} == {
        ("nvidia-a100", "nvidia", "NVIDIA A100-SXM4-80GB", 80 * GIB)
    }
    assert nvml.shut_down


def test_no_driver_means_no_gpus() -> None:
    assert detect_nvidia_gpus(FakeNvml(EIGHT_A100, init_error=RuntimeError("Driver Not Loaded"))) == ()
    # The real library on this machine has no driver to load.
    assert detect_nvidia_gpus() == ()


def test_broken_device_is_left_out() -> None:
    devices = [*EIGHT_A100[:2], ("broken", "GPU-x", 0)]
    assert [g.index for g in detect_nvidia_gpus(FakeNvml(devices))] == [0, 1]


def test_cuda_visible_devices_restricts() -> None:
    nvml = FakeNvml(EIGHT_A100)
    assert [g.index for g in detect_nvidia_gpus(nvml, "2,5")] == [2, 5]
    assert [g.index for g in detect_nvidia_gpus(nvml, "GPU-3")] == [3]
    assert detect_nvidia_gpus(nvml, "") == ()


def test_labels_name_the_accelerator_type() -> None:
    gpus = detect_nvidia_gpus(FakeNvml(EIGHT_A100))
    labels = host.host_labels("gpu-01", gpus)
    assert labels[HOSTNAME_LABEL] == "gpu-01"
    assert labels["aicenter.io/accelerator"] == "nvidia-a100"
    assert "aicenter.io/accelerator" not in host.host_labels("cpu-01", ())


def _cgroup_tree(tmp_path: Path, cgroup_line: str) -> tuple[Path, Path]:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup_line + "\n")
    root = tmp_path / "cgroup"
    root.mkdir()
    return proc, root


def test_cgroup_v2_limits(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(tmp_path, "0::/kubepods/pod1/ctr")
    (root / "cgroup.controllers").write_text("cpu memory\n")
    leaf = root / "kubepods" / "pod1" / "ctr"
    leaf.mkdir(parents=True)
    (root / "kubepods" / "cpu.max").write_text("400000 100000\n")
    (leaf / "cpu.max").write_text("150000 100000\n")
    (leaf / "memory.max").write_text(f"{8 * GIB}\n")
    (root / "kubepods" / "pod1" / "memory.max").write_text("max\n")
    assert cgroup_cpu_limit_milli(proc, root) == 1500
    assert cgroup_memory_limit(proc, root) == 8 * GIB


def test_cgroup_v2_without_limits(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(tmp_path, "0::/")
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit_milli(proc, root) is None
    assert cgroup_memory_limit(proc, root) is None


def test_cgroup_v1_limits(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(tmp_path, "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc")
    cpu = root / "cpu" / "docker" / "abc"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("200000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    # Inside a container without a cgroup namespace the host path is not mounted: its own group is the root.
    (root / "memory").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{4 * GIB}\n")
    assert cgroup_cpu_limit_milli(proc, root) == 2000
    assert cgroup_memory_limit(proc, root) == 4 * GIB


def test_cgroup_v1_unlimited(tmp_path: Path) -> None:
    proc, root = _cgroup_tree(tmp_path, "4:memory:/\n3:cpu:/")
    (root / "cpu").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (root / "memory").mkdir()
    (root / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cgroup_cpu_limit_milli(proc, root) is None
    assert cgroup_memory_limit(proc, root) is None
