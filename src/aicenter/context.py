"""What the app factory builds once and the API, the console and the controllers share.

Below ``api``, ``web`` and ``controllers`` (all three read it) and above the services, the store and the
executors it holds: the one place where a process's long-lived objects live.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aicenter.config import Settings
from aicenter.db.engine import Database
from aicenter.events import EventBus, jobs_changed
from aicenter.executors.base import Executor
from aicenter.services.auth import TokenVerifier
from aicenter.services.monitoring import ProcessTelemetry
from aicenter.storage import BlobStore


@dataclass
class AppContext:
    """The process's shared objects.

    Attributes:
        settings: The settings it started with.
        db: The database (engine and sessions).
        tokens: The API token verifier with its per-process cache.
        secret_key: Signs CSRF tokens.
        store: The artifact store.
        executors: The engines replicas run on, by name (``local``, ``ray``, ``slurm``).
        events: Wakes this process's job controllers after a change they act on.
        single_user: Why this server runs in single-user mode (its replicas run unsandboxed, as its own Unix
            user, so every job user is trusted like it), or None when replicas are sandboxed. In single-user
            mode no second user can be created.
        telemetry: What this process counts between scrapes (scheduler cycles, service requests), exposed at
            ``/metrics``.
    """

    settings: Settings
    db: Database
    tokens: TokenVerifier
    secret_key: str
    store: BlobStore
    executors: Mapping[str, Executor] = field(default_factory=dict)
    events: EventBus = field(default_factory=lambda: jobs_changed)
    single_user: str | None = None
    telemetry: ProcessTelemetry = field(default_factory=ProcessTelemetry)
