"""Training jobs: submission, the status transition function, queries, stop, templates, logs access.

Every status change of a job goes through ``transition`` (here); controllers call it too.
"""

from aicenter.services.jobs._lifecycle import SYSTEM, record_created, transition

__all__ = ["SYSTEM", "record_created", "transition"]
