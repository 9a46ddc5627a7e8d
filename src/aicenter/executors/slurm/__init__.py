"""The Slurm executor: runs replicas as Slurm jobs. For now only its node inventory (``scontrol show nodes``)."""

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
    "SlurmNode",
    "accelerator_type",
    "feature_labels",
    "node_up",
    "parse_gres",
    "parse_nodes",
    "scontrol_nodes",
]
