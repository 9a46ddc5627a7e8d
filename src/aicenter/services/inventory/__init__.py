"""The resource inventory: nodes, accelerator types, resource specs, pools and pool grants.

Platform admins manage all of it; members read the specs and pools their workspaces may use. Which pools a
node is in is decided by ``aicenter.core.pools.pools_of`` (re-exported here) and nowhere else: pools overlap. Executors
register the hosts they find through ``register_host`` and keep them alive with ``heartbeat``.
"""

from aicenter.core.pools import is_member, pools_of, selector_matches
from aicenter.services.inventory._common import UNSET, check_labels
from aicenter.services.inventory._hosts import (
    heartbeat,
    mark_lost_nodes,
    node_ids,
    register_host,
    sync_engine_hosts,
)
from aicenter.services.inventory._nodes import (
    AcceleratorInput,
    NodeView,
    create_node,
    delete_node,
    get_node,
    list_nodes,
    set_node_schedule,
    update_node,
)
from aicenter.services.inventory._pools import (
    DEFAULT_POOL,
    PoolView,
    create_pool,
    delete_pool,
    ensure_default_pool,
    get_pool,
    grant_pool,
    granted_pool_ids,
    list_pool_workspaces,
    list_pools,
    pool_nodes,
    revoke_pool,
    update_pool,
)
from aicenter.services.inventory._specs import create_spec, delete_spec, get_spec, list_specs, update_spec
from aicenter.services.inventory._types import (
    create_accelerator_type,
    delete_accelerator_type,
    get_accelerator_type,
    list_accelerator_types,
    types_by_name,
    update_accelerator_type,
)

__all__ = [
    "DEFAULT_POOL",
    "UNSET",
    "AcceleratorInput",
    "NodeView",
    "PoolView",
    "check_labels",
    "create_accelerator_type",
    "create_node",
    "create_pool",
    "create_spec",
    "delete_accelerator_type",
    "delete_node",
    "delete_pool",
    "delete_spec",
    "ensure_default_pool",
    "get_accelerator_type",
    "get_node",
    "get_pool",
    "get_spec",
    "grant_pool",
    "granted_pool_ids",
    "heartbeat",
    "is_member",
    "list_accelerator_types",
    "list_nodes",
    "list_pool_workspaces",
    "list_pools",
    "list_specs",
    "mark_lost_nodes",
    "node_ids",
    "pool_nodes",
    "pools_of",
    "register_host",
    "revoke_pool",
    "selector_matches",
    "set_node_schedule",
    "sync_engine_hosts",
    "types_by_name",
    "update_accelerator_type",
    "update_node",
    "update_pool",
    "update_spec",
]
