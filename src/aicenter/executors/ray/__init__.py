"""The ``ray`` executor: replicas as detached Ray actors on the nodes of an existing Ray cluster.

Importing this package does not import ``ray`` (~1 s of imports, and an optional dependency: ``aicenter[ray]``):
the executor loads it on its first call into Ray. ``inventory`` maps Ray's nodes to hosts without Ray.
"""

from aicenter.executors.ray.executor import RayExecutor

__all__ = ["RayExecutor"]
