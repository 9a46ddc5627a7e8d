"""Inference services: deploy a model version, new revisions with rolling or canary traffic, scale bounds, stop,
delete, API keys, their events (``list_service_events``); what the serving gateway reads (``load_route_table``) and
reports (``record_load``, ``activate_revision``); what the serving controller reads and applies (``load_controls``,
``apply_decision``).

A service replica is a job of kind ``service`` (``core.jobs.serving``), submitted through the jobs service.
"""

from aicenter.services.serving._access import load_service, require_manager
from aicenter.services.serving._control import Probe, ServiceControl, apply_decision, load_controls, mark_ready
from aicenter.services.serving._deploy import deploy_service, start_replicas, update_service
from aicenter.services.serving._events import list_service_events
from aicenter.services.serving._keys import KEY_PREFIX, CreatedKey, create_key, key_hash, list_keys, revoke_key
from aicenter.services.serving._manage import (
    delete_service,
    promote_service,
    rollback_service,
    scale_service,
    set_traffic,
    start_service,
    stop_for_arrears,
    stop_service,
)
from aicenter.services.serving._routes import (
    LOAD_KEEP_S,
    activate_revision,
    load_route_table,
    member_workspaces,
    owner_actor,
    record_load,
)
from aicenter.services.serving._views import (
    LoadPoint,
    ReplicaSpan,
    ReplicaView,
    ServiceView,
    get_service,
    list_services,
    replica_history,
    service_load,
)

__all__ = [
    "KEY_PREFIX",
    "LOAD_KEEP_S",
    "CreatedKey",
    "LoadPoint",
    "Probe",
    "ReplicaSpan",
    "ReplicaView",
    "ServiceControl",
    "ServiceView",
    "activate_revision",
    "apply_decision",
    "create_key",
    "delete_service",
    "deploy_service",
    "get_service",
    "key_hash",
    "list_keys",
    "list_service_events",
    "list_services",
    "load_controls",
    "load_route_table",
    "load_service",
    "mark_ready",
    "member_workspaces",
    "owner_actor",
    "promote_service",
    "record_load",
    "replica_history",
    "require_manager",
    "revoke_key",
    "rollback_service",
    "scale_service",
    "service_load",
    "set_traffic",
    "start_replicas",
    "start_service",
    "stop_for_arrears",
    "stop_service",
    "update_service",
]
