"""Who may do what: the three kinds of person and the visibility of catalog items."""

from __future__ import annotations

from enum import StrEnum


class WorkspaceRole(StrEnum):
    """Role of a user inside one workspace. Platform admin is a flag on the user, not a workspace role."""

    WORKSPACE_ADMIN = "workspace_admin"
    MEMBER = "member"


class UserState(StrEnum):
    ACTIVE = "active"
    FROZEN = "frozen"


class TokenKind(StrEnum):
    API = "api"  # created by the user, named, optional expiry
    LOGIN = "login"  # given to the CLI by `aicenter login`
    SESSION = "session"  # a console session behind a cookie
    JOB = "job"  # given to a job's replicas; reads that job only (``ApiToken.job_id``)


class NodeSchedule(StrEnum):
    """Whether the scheduler may place new work on a node (the operator's intent)."""

    SCHEDULABLE = "schedulable"
    CORDONED = "cordoned"  # no new work; running work stays
    DRAINING = "draining"  # no new work; running work is asked to leave


class NodeState(StrEnum):
    """What the platform observes of a node (from heartbeats)."""

    READY = "ready"
    NOT_READY = "not_ready"
    DOWN = "down"
