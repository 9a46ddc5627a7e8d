"""Slurm's nodes as aicenter hosts: a pure parser of ``scontrol show nodes --oneliner`` and a thin runner.

The text form is parsed, not ``scontrol --json``: Debian's Slurm 22.05 has no ``--json`` for scontrol (it needs
the data_parser plugins of 23.02+), and the one-line form is stable across the versions sites run. Values may
hold spaces (``OS=Linux 6.1 #1 SMP ...``, ``Reason=test [root@...]``): a field starts only at a word that looks
like ``Key=``; any other word continues the previous value.

Conventions (docs/dev/design-notes.md, "Slurm inventory"):

* GRES ``gpu:<type>:<count>`` gives ``count`` accelerators of type ``nvidia-<type>`` (a type that already names
  its vendor, ``amd-mi250``, is kept); untyped ``gpu:<count>`` gives :data:`DEFAULT_GPU_TYPE`. Other GRES are
  ignored. Slurm does not report device memory: it is 0.
* Features are labels: ``key_value`` or ``key=value`` -> ``key: value`` (split at the first ``=``, else the first
  ``_``); a bare feature -> ``feature: "true"``; one that makes no valid label (``a&b``) is left out.
* State: IDLE, MIXED, ALLOCATED and COMPLETING are up unless a flag says otherwise; DOWN, FAIL, FUTURE,
  UNKNOWN and the flags DRAIN, FAIL, NOT_RESPONDING (``*``), POWERED_DOWN, REBOOT are down.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from aicenter.core.labels import is_label_name, is_label_value
from aicenter.executors.base import AcceleratorInfo, HostInfo, node_labels

__all__ = [
    "DEFAULT_GPU_TYPE",
    "SlurmNode",
    "accelerator_type",
    "feature_labels",
    "node_up",
    "parse_gres",
    "parse_nodes",
    "scontrol_nodes",
]

DEFAULT_GPU_TYPE = "nvidia-unknown"
"""The accelerator type of an untyped ``gpu:<count>`` GRES (as the local executor names an unknown product)."""

VENDORS = ("nvidia", "amd", "intel", "huawei", "cambricon")
UP_STATES = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}
DOWN_FLAGS = {
    "DRAIN",
    "DRAINING",
    "DRAINED",
    "FAIL",
    "FAILING",
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWER_DOWN",
    "POWERING_DOWN",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "INVALID_REG",
}
# Suffixes sinfo-style state strings may carry: * not responding, ~ powered off, # powering up, % powering down,
# ! pending power down, $ maintenance, @ reboot pending, ^ rebooting, - planned.
STATE_SUFFIXES = "*~#%!$@^-"
FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_:.]*=")
# scontrol appends who set a reason and when: ``Reason=disk failed [root@2026-12-03T18:06:10]``.
REASON_STAMP = re.compile(r"\s*\[[^\]]*@[^\]]*\]$")


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One Slurm node as ``scontrol`` reports it.

    Attributes:
        host: The node as an aicenter host (``executor="slurm"``).
        state: Slurm's state string, e.g. ``IDLE``, ``DOWN+NOT_RESPONDING``, ``IDLE+DRAIN``.
        up: Whether work can be placed there now.
        reason: Why an admin or Slurm took it down (``Reason=`` without its ``[user@time]`` stamp); empty if none.
        name: Slurm's own name of the node (``host.name`` is the same; the executor lower-cases it for aicenter).
        partitions: The partitions that hold it.
        gres: Its ``Gres=`` value as Slurm wrote it (``gpu:a100:2``), for the executor's ``--gres`` requests.
        cpu_load: ``CPULoad``, the node's load average as slurmd last reported it; None when Slurm has none.
        free_memory_bytes: ``FreeMem``, the node's free memory as slurmd last reported it; None when unknown.
    """

    host: HostInfo
    state: str
    up: bool
    reason: str = ""
    name: str = ""
    partitions: tuple[str, ...] = ()
    gres: str = ""
    cpu_load: float | None = None
    free_memory_bytes: int | None = None


def split_fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of one ``--oneliner`` line; words without ``Key=`` continue the previous value."""
    fields: dict[str, str] = {}
    key = ""
    for word in line.split():
        if FIELD.match(word):
            key, _, value = word.partition("=")
            fields[key] = value
        elif key:
            fields[key] += " " + word
    return fields


def node_up(state: str) -> bool:
    """Whether a node in this Slurm state takes work (module docstring: State)."""
    parts = state.upper().split("+")
    base = parts[0]
    if base.endswith("*"):
        return False
    base = base.rstrip(STATE_SUFFIXES)
    flags = {p.rstrip(STATE_SUFFIXES) for p in parts[1:]}
    return base in UP_STATES and not flags & DOWN_FLAGS


def accelerator_type(gres_type: str) -> str:
    """aicenter's accelerator type of a GRES gpu type: ``a100`` -> ``nvidia-a100``, ``amd-mi250`` kept."""
    if not gres_type:
        return DEFAULT_GPU_TYPE
    name = re.sub(r"[^a-z0-9._-]+", "-", gres_type.lower()).strip("._-")
    if not name:
        return DEFAULT_GPU_TYPE
    return name if name.split("-", 1)[0] in VENDORS and "-" in name else f"nvidia-{name}"


def parse_gres(gres: str) -> list[tuple[str, int]]:
    """``(accelerator type, count)`` per GPU entry of a ``Gres=`` value; ``(null)`` and non-GPU GRES give none.

    ``gpu:a100:2(S:0-1),gpu:t4:1`` -> ``[("nvidia-a100", 2), ("nvidia-t4", 1)]``; ``gpu:4`` -> untyped.
    """
    out: list[tuple[str, int]] = []
    # Commas also appear inside the socket list ``(S:0,1)``: drop the parentheses first.
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count_text = parts[-1]
        gres_type = parts[1] if len(parts) > 2 else ""
        try:
            count = int(count_text)
        except ValueError:  # ``gpu:a100`` without a count means one
            count, gres_type = 1, count_text
        if count > 0:
            out.append((accelerator_type(gres_type), count))
    return out


def feature_labels(features: str) -> dict[str, str]:
    """Labels of a ``Features=`` value (module docstring: Features)."""
    labels: dict[str, str] = {}
    if features in ("", "(null)"):
        return labels
    for feature in features.split(","):
        feature = feature.strip()
        if not feature:
            continue
        sep = "=" if "=" in feature else "_"
        key, found, value = feature.partition(sep)
        value = value if found and value else "true"
        # A feature that makes no valid label is left out rather than failing the whole node's registration.
        if is_label_name(key) and is_label_value(value):
            labels[key] = value
    return labels


def _memory_bytes(fields: Mapping[str, str]) -> int:
    try:
        return int(fields.get("RealMemory", "0")) * 2**20  # MiB
    except ValueError:
        return 0


def _cpus(fields: Mapping[str, str]) -> int:
    # CPUEfctv (22.05+) leaves out the cores Slurm keeps for itself (CoreSpecCount); CPUTot before that.
    for key in ("CPUEfctv", "CPUTot"):
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            continue
    return 0


def parse_node(fields: Mapping[str, str]) -> SlurmNode:
    """One node from its ``Key=value`` fields."""
    name = fields["NodeName"]
    accelerators: list[AcceleratorInfo] = []
    for acc_type, count in parse_gres(fields.get("Gres", "")):
        for _ in range(count):
            accelerators.append(
                AcceleratorInfo(
                    index=len(accelerators),
                    type=acc_type,
                    vendor=acc_type.split("-", 1)[0],
                    model=acc_type,
                    memory_bytes=0,
                )
            )
    features = fields.get("ActiveFeatures", fields.get("AvailableFeatures", fields.get("Features", "")))
    labels = {**feature_labels(features), **node_labels(name, accelerators)}
    state = fields.get("State", "UNKNOWN")
    reason = REASON_STAMP.sub("", fields.get("Reason", ""))
    host = HostInfo(
        name=name,
        address=fields.get("NodeAddr", fields.get("NodeHostName", "")),
        executor="slurm",
        cpu_milli=_cpus(fields) * 1000,
        memory_bytes=_memory_bytes(fields),
        accelerators=tuple(accelerators),
        labels=labels,
    )
    partitions = tuple(p for p in fields.get("Partitions", "").split(",") if p and p != "(null)")
    return SlurmNode(
        host=host,
        state=state,
        up=node_up(state),
        reason="" if reason == "(null)" else reason,
        name=name,
        partitions=partitions,
        gres=fields.get("Gres", ""),
        cpu_load=_number(fields.get("CPULoad", "")),
        free_memory_bytes=None if (free := _number(fields.get("FreeMem", ""))) is None else int(free * 2**20),
    )


def _number(text: str) -> float | None:
    """A float field; None for ``N/A`` and anything else that is not a number."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_nodes(text: str) -> list[SlurmNode]:
    """Every node of ``scontrol show nodes --oneliner`` output, in its order."""
    nodes = []
    for line in text.splitlines():
        fields = split_fields(line)
        if "NodeName" in fields:
            nodes.append(parse_node(fields))
    return nodes


def scontrol_nodes(env: Mapping[str, str] | None = None, timeout: float = 30) -> list[SlurmNode]:
    """Run ``scontrol show nodes --oneliner`` (SLURM_CONF from ``env``, else this process's) and parse it."""
    result = subprocess.run(
        ["scontrol", "show", "nodes", "--oneliner"],
        env=dict(env) if env is not None else dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
        timeout=timeout,
    )
    return parse_nodes(result.stdout)
