"""The Slurm executor: replicas as Slurm batch jobs (``executor``) on the nodes ``scontrol`` reports (``inventory``)."""

from aicenter.executors.slurm.executor import SlurmExecutor
from aicenter.executors.slurm.inventory import (
    DEFAULT_GPU_TYPE,
    SlurmNode,
    accelerator_type,
    feature_labels,
    node_up,
    parse_gres,
    parse_nodes,
    scontrol_nodes,
)

__all__ = [
    "DEFAULT_GPU_TYPE",
    "SlurmExecutor",
    "SlurmNode",
    "accelerator_type",
    "feature_labels",
    "node_up",
    "parse_gres",
    "parse_nodes",
    "scontrol_nodes",
]
