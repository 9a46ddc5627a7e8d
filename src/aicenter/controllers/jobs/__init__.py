"""The job reconciler, as a pure decision core (``decide``) and a thin loop that loads, observes, applies and
acts around it (``JobReconciler``). See reconciler.py for the loop and decide.py for what it decides."""

from aicenter.controllers.jobs.act import Hands, outcome
from aicenter.controllers.jobs.decide import GangFailure, decide, gang_failure
from aicenter.controllers.jobs.reconciler import MAX_ROUNDS, JobReconciler, build

__all__ = [
    "MAX_ROUNDS",
    "GangFailure",
    "Hands",
    "JobReconciler",
    "build",
    "decide",
    "gang_failure",
    "outcome",
]
