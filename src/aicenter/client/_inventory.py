"""Nodes, accelerator types, resource specs, pools and pool grants."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, body, query
from aicenter.client.models import AcceleratorType, Node, Page, Pool, Spec, Workspace

Quantity = str | int | float


def _label_filter(label: Mapping[str, str] | str | None) -> list[str] | str | None:
    if label is None or isinstance(label, str):
        return label
    return [f"{k}={v}" for k, v in label.items()]


class InventoryMixin(BaseClient):
    # -- nodes -------------------------------------------------------------------------------------------------

    def list_nodes_page(
        self,
        *,
        state: str | None = None,
        schedule: str | None = None,
        label: Mapping[str, str] | str | None = None,
        pool: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Node]:
        """One page of nodes (platform admins only).

        Args:
            state: ``ready`` or ``not_ready``.
            schedule: ``schedulable``, ``cordoned`` or ``draining``.
            label: ``"k=v"`` or a mapping of labels every node must carry.
            pool: A pool name: only its nodes.
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        params = query(state=state, schedule=schedule, label=_label_filter(label), pool=pool)
        return self._page(Node, "/nodes", params, limit=limit, cursor=cursor)

    def list_nodes(
        self,
        *,
        state: str | None = None,
        schedule: str | None = None,
        label: Mapping[str, str] | str | None = None,
        pool: str | None = None,
    ) -> Iterator[Node]:
        return self._iterate(
            lambda c: self.list_nodes_page(
                state=state, schedule=schedule, label=label, pool=pool, limit=PAGE_SIZE, cursor=c
            )
        )

    def create_node(
        self,
        name: str,
        *,
        cpu: Quantity,
        memory: Quantity,
        accelerators: Sequence[Mapping[str, Any]] = (),
        address: str = UNSET,
        labels: Mapping[str, str] = UNSET,
        rack: str | None = UNSET,
        leaf: str | None = UNSET,
        spine: str | None = UNSET,
        nvlink_domain: str | None = UNSET,
    ) -> Node:
        """Register a node by hand (executors register their own).

        Args:
            name: The node's name.
            cpu: Cores, e.g. ``64`` or ``"500m"``.
            memory: e.g. ``"512Gi"`` or bytes.
            accelerators: One ``{"index", "type", "memory"?, "nvlink_domain"?}`` per device.
            address: Host name or IP.
            labels: Labels for pool selectors.
            rack: Topology: rack.
            leaf: Topology: leaf switch.
            spine: Topology: spine switch.
            nvlink_domain: Topology: NVLink domain.
        """
        payload = body(
            name=name,
            cpu=cpu,
            memory=memory,
            accelerators=[dict(a) for a in accelerators],
            address=address,
            labels=dict(labels) if labels is not UNSET else UNSET,
            rack=rack,
            leaf=leaf,
            spine=spine,
            nvlink_domain=nvlink_domain,
        )
        return self._one(Node, "POST", "/nodes", json=payload)

    def get_node(self, node_id: int) -> Node:
        return self._one(Node, "GET", f"/nodes/{node_id}")

    def update_node(
        self,
        node_id: int,
        *,
        labels: Mapping[str, str] = UNSET,
        address: str = UNSET,
        rack: str | None = UNSET,
        leaf: str | None = UNSET,
        spine: str | None = UNSET,
        nvlink_domain: str | None = UNSET,
    ) -> Node:
        """Change a node's labels (the whole set), address or topology; fields left out stay as they are."""
        payload = body(
            labels=dict(labels) if labels is not UNSET else UNSET,
            address=address,
            rack=rack,
            leaf=leaf,
            spine=spine,
            nvlink_domain=nvlink_domain,
        )
        return self._one(Node, "PATCH", f"/nodes/{node_id}", json=payload)

    def cordon_node(self, node_id: int) -> Node:
        """Stop placing new work on the node; running work stays."""
        return self._one(Node, "POST", f"/nodes/{node_id}/cordon")

    def drain_node(self, node_id: int) -> Node:
        """Cordon the node and move its work elsewhere."""
        return self._one(Node, "POST", f"/nodes/{node_id}/drain")

    def uncordon_node(self, node_id: int) -> Node:
        return self._one(Node, "POST", f"/nodes/{node_id}/uncordon")

    def delete_node(self, node_id: int) -> None:
        self._json("DELETE", f"/nodes/{node_id}")

    # -- accelerator types -------------------------------------------------------------------------------------

    def list_accelerator_types_page(
        self, *, vendor: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[AcceleratorType]:
        return self._page(AcceleratorType, "/accelerator-types", query(vendor=vendor), limit=limit, cursor=cursor)

    def list_accelerator_types(self, *, vendor: str | None = None) -> Iterator[AcceleratorType]:
        return self._iterate(lambda c: self.list_accelerator_types_page(vendor=vendor, limit=PAGE_SIZE, cursor=c))

    def get_accelerator_type(self, accelerator_type_id: int) -> AcceleratorType:
        return self._one(AcceleratorType, "GET", f"/accelerator-types/{accelerator_type_id}")

    def create_accelerator_type(
        self, name: str, *, vendor: str, memory: Quantity = UNSET, description: str = UNSET
    ) -> AcceleratorType:
        """Declare an accelerator type such as ``nvidia-a100`` (vendor ``nvidia``, memory ``80Gi``)."""
        payload = body(name=name, vendor=vendor, memory=memory, description=description)
        return self._one(AcceleratorType, "POST", "/accelerator-types", json=payload)

    def update_accelerator_type(
        self,
        accelerator_type_id: int,
        *,
        name: str = UNSET,
        vendor: str = UNSET,
        memory: Quantity = UNSET,
        description: str = UNSET,
    ) -> AcceleratorType:
        payload = body(name=name, vendor=vendor, memory=memory, description=description)
        return self._one(AcceleratorType, "PATCH", f"/accelerator-types/{accelerator_type_id}", json=payload)

    def delete_accelerator_type(self, accelerator_type_id: int) -> None:
        """Delete an accelerator type; refused (``conflict``) while a node or spec uses it."""
        self._json("DELETE", f"/accelerator-types/{accelerator_type_id}")

    # -- specs -------------------------------------------------------------------------------------------------

    def list_specs_page(
        self,
        *,
        workspace_id: int | None = None,
        accelerator_type: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Spec]:
        """One page of the specs the caller may use (all of them for platform admins).

        Args:
            workspace_id: Only the specs usable in the pools granted to this workspace.
            accelerator_type: Only specs with this accelerator type.
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        params = query(workspace_id=workspace_id, accelerator_type=accelerator_type)
        return self._page(Spec, "/specs", params, limit=limit, cursor=cursor)

    def list_specs(self, *, workspace_id: int | None = None, accelerator_type: str | None = None) -> Iterator[Spec]:
        return self._iterate(
            lambda c: self.list_specs_page(
                workspace_id=workspace_id, accelerator_type=accelerator_type, limit=PAGE_SIZE, cursor=c
            )
        )

    def create_spec(
        self,
        name: str,
        *,
        cpu: Quantity,
        memory: Quantity,
        price_per_hour: Decimal | str | int,
        accelerators: int = UNSET,
        accelerator_share: int = UNSET,
        accelerator_type: str | None = UNSET,
        billing_weight: float = UNSET,
        pool_id: int | None = UNSET,
        description: str = UNSET,
    ) -> Spec:
        """Create a resource spec, e.g. ``gpu-a100-1``: 1 A100 + 8 CPU + 64Gi at 12.5 coins per machine-hour.

        Args:
            name: The spec's name.
            cpu: Cores.
            memory: Memory quantity.
            price_per_hour: Coins per machine-hour, sent as a decimal string.
            accelerators: Whole devices.
            accelerator_share: Milli of one device, for a fractional spec.
            accelerator_type: e.g. ``nvidia-a100``.
            billing_weight: Machine-time weight.
            pool_id: The only pool it is usable in; None: every pool.
            description: Free text.
        """
        payload = body(
            name=name,
            cpu=cpu,
            memory=memory,
            price_per_hour=str(price_per_hour),
            accelerators=accelerators,
            accelerator_share=accelerator_share,
            accelerator_type=accelerator_type,
            billing_weight=billing_weight,
            pool_id=pool_id,
            description=description,
        )
        return self._one(Spec, "POST", "/specs", json=payload)

    def get_spec(self, spec_id: int) -> Spec:
        return self._one(Spec, "GET", f"/specs/{spec_id}")

    def update_spec(self, spec_id: int, **fields: Any) -> Spec:
        """Change a spec; takes the fields of :meth:`create_spec` plus ``enabled``."""
        if "price_per_hour" in fields:
            fields["price_per_hour"] = str(fields["price_per_hour"])
        return self._one(Spec, "PATCH", f"/specs/{spec_id}", json=fields)

    def delete_spec(self, spec_id: int) -> None:
        self._json("DELETE", f"/specs/{spec_id}")

    # -- pools -------------------------------------------------------------------------------------------------

    def list_pools_page(
        self, *, workspace_id: int | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[Pool]:
        """One page of the pools the caller may use (all of them for platform admins).

        Args:
            workspace_id: Only the pools granted to this workspace.
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        return self._page(Pool, "/pools", query(workspace_id=workspace_id), limit=limit, cursor=cursor)

    def list_pools(self, *, workspace_id: int | None = None) -> Iterator[Pool]:
        return self._iterate(lambda c: self.list_pools_page(workspace_id=workspace_id, limit=PAGE_SIZE, cursor=c))

    def create_pool(self, name: str, *, description: str = UNSET, selector: Mapping[str, str] = UNSET) -> Pool:
        """Create a pool of the nodes whose labels match ``selector`` (empty: every node)."""
        payload = body(name=name, description=description, selector=dict(selector) if selector is not UNSET else UNSET)
        return self._one(Pool, "POST", "/pools", json=payload)

    def get_pool(self, pool_id: int) -> Pool:
        return self._one(Pool, "GET", f"/pools/{pool_id}")

    def update_pool(
        self, pool_id: int, *, name: str = UNSET, description: str = UNSET, selector: Mapping[str, str] = UNSET
    ) -> Pool:
        payload = body(name=name, description=description, selector=dict(selector) if selector is not UNSET else UNSET)
        return self._one(Pool, "PATCH", f"/pools/{pool_id}", json=payload)

    def delete_pool(self, pool_id: int) -> None:
        """Delete a pool; refused (``conflict``) for the default pool or one with quotas or specs."""
        self._json("DELETE", f"/pools/{pool_id}")

    def list_pool_workspaces(self, pool_id: int) -> list[Workspace]:
        """The workspaces that may use the pool."""
        return self._array(Workspace, f"/pools/{pool_id}/workspaces")

    def grant_pool(self, pool_id: int, workspace_id: int) -> None:
        """Let a workspace use a pool."""
        self._json("PUT", f"/pools/{pool_id}/workspaces/{workspace_id}")

    def revoke_pool(self, pool_id: int, workspace_id: int) -> None:
        self._json("DELETE", f"/pools/{pool_id}/workspaces/{workspace_id}")
