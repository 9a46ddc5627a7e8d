"""Users (platform admins), workspaces, members, quotas and the audit log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, body, query
from aicenter.client.models import AuditEvent, Member, Page, Quota, User, Workspace

Quantity = str | int | float
Resources = Mapping[str, Quantity]


def _time(value: datetime | str | None) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


class TenancyMixin(BaseClient):
    # -- users -------------------------------------------------------------------------------------------------

    def list_users_page(
        self,
        *,
        username: str | None = None,
        state: str | None = None,
        q: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[User]:
        """One page of users (platform admins only).

        Args:
            username: Exactly this user name.
            state: ``active`` or ``frozen``.
            q: A prefix of the user name.
            limit: Items per page (1..500, server default 50).
            cursor: ``next_cursor`` of the previous page.
        """
        return self._page(User, "/users", query(username=username, state=state, q=q), limit=limit, cursor=cursor)

    def list_users(
        self, *, username: str | None = None, state: str | None = None, q: str | None = None
    ) -> Iterator[User]:
        """Every user matching the filters, fetched page by page as the iterator advances."""
        return self._iterate(
            lambda c: self.list_users_page(username=username, state=state, q=q, limit=PAGE_SIZE, cursor=c)
        )

    def create_user(
        self,
        username: str,
        password: str,
        *,
        display_name: str = UNSET,
        email: str | None = UNSET,
        is_platform_admin: bool = UNSET,
    ) -> User:
        """Create a user (platform admins only); the server gives them a default workspace."""
        payload = body(
            username=username,
            password=password,
            display_name=display_name,
            email=email,
            is_platform_admin=is_platform_admin,
        )
        return self._one(User, "POST", "/users", json=payload)

    def get_user(self, user_id: int) -> User:
        return self._one(User, "GET", f"/users/{user_id}")

    def update_user(
        self,
        user_id: int,
        *,
        display_name: str = UNSET,
        email: str | None = UNSET,
        is_platform_admin: bool = UNSET,
        password: str = UNSET,
    ) -> User:
        """Change a user; fields left out stay as they are, ``email=None`` clears the e-mail address."""
        payload = body(
            display_name=display_name,
            email="" if email is None else email,  # the server reads null as "unchanged" and "" as "clear"
            is_platform_admin=is_platform_admin,
            password=password,
        )
        return self._one(User, "PATCH", f"/users/{user_id}", json=payload)

    def freeze_user(self, user_id: int) -> User:
        """Freeze a user: their sessions and tokens stop working and they cannot log in."""
        return self._one(User, "POST", f"/users/{user_id}/freeze")

    def thaw_user(self, user_id: int) -> User:
        return self._one(User, "POST", f"/users/{user_id}/thaw")

    # -- workspaces --------------------------------------------------------------------------------------------

    def list_workspaces_page(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[Workspace]:
        """One page of workspaces: the caller's own, or all for platform admins."""
        return self._page(Workspace, "/workspaces", query(name=name), limit=limit, cursor=cursor)

    def list_workspaces(self, *, name: str | None = None) -> Iterator[Workspace]:
        return self._iterate(lambda c: self.list_workspaces_page(name=name, limit=PAGE_SIZE, cursor=c))

    def create_workspace(self, name: str, *, description: str = UNSET, admin_user_id: int | None = UNSET) -> Workspace:
        """Create a workspace (platform admins only), optionally naming its first workspace admin."""
        payload = body(name=name, description=description, admin_user_id=admin_user_id)
        return self._one(Workspace, "POST", "/workspaces", json=payload)

    def get_workspace(self, workspace_id: int) -> Workspace:
        return self._one(Workspace, "GET", f"/workspaces/{workspace_id}")

    def update_workspace(
        self,
        workspace_id: int,
        *,
        name: str = UNSET,
        description: str = UNSET,
        admins_read_logs: bool = UNSET,
        notebook_idle_timeout_s: int | None = UNSET,
    ) -> Workspace:
        """Rename a workspace, change its description, its notebooks' idle timeout (seconds; 0: never; None: the
        platform's), or let platform admins read its job logs (its admins)."""
        fields = body(
            name=name,
            description=description,
            admins_read_logs=admins_read_logs,
            notebook_idle_timeout_s=notebook_idle_timeout_s,
        )
        return self._one(Workspace, "PATCH", f"/workspaces/{workspace_id}", json=fields)

    def delete_workspace(self, workspace_id: int) -> None:
        self._json("DELETE", f"/workspaces/{workspace_id}")

    # -- members -----------------------------------------------------------------------------------------------

    def list_members_page(
        self, workspace_id: int, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Member]:
        return self._page(Member, f"/workspaces/{workspace_id}/members", limit=limit, cursor=cursor)

    def list_members(self, workspace_id: int) -> Iterator[Member]:
        return self._iterate(lambda c: self.list_members_page(workspace_id, limit=PAGE_SIZE, cursor=c))

    def add_member(
        self, workspace_id: int, *, user_id: int | None = None, username: str | None = None, role: str = "member"
    ) -> Member:
        """Add a user (by id or name) to a workspace with a role: ``member`` or ``workspace_admin``."""
        if (user_id is None) == (username is None):
            raise ValueError("give exactly one of user_id and username")
        payload = body(user_id=user_id if user_id is not None else UNSET, username=username or UNSET, role=role)
        return self._one(Member, "POST", f"/workspaces/{workspace_id}/members", json=payload)

    def set_member_role(self, workspace_id: int, user_id: int, role: str) -> Member:
        return self._one(Member, "PATCH", f"/workspaces/{workspace_id}/members/{user_id}", json={"role": role})

    def remove_member(self, workspace_id: int, user_id: int) -> None:
        self._json("DELETE", f"/workspaces/{workspace_id}/members/{user_id}")

    # -- quotas ------------------------------------------------------------------------------------------------

    def list_quotas(self, workspace_id: int) -> list[Quota]:
        """The workspace's quota in each pool, with current use."""
        return self._array(Quota, f"/workspaces/{workspace_id}/quotas")

    def set_quota(
        self,
        workspace_id: int,
        pool_id: int,
        *,
        maximum: Resources | None = None,
        guaranteed: Resources | None = None,
    ) -> Quota:
        """Create or replace the workspace's quota in a pool (platform admins only).

        Args:
            workspace_id: The workspace.
            pool_id: The pool.
            maximum: Upper limits, e.g. ``{"cpu": 64, "memory": "256Gi", "nvidia-a100": 16}``; a missing name is
                unlimited.
            guaranteed: What the workspace always gets, e.g. ``{"nvidia-a100": 8}``; a missing name is 0.

        Raises:
            ApiError: ``validation_failed`` naming ``guaranteed.<name>`` for an unknown resource or a guarantee above
                the maximum; ``conflict`` when the maximum is below current use.
        """
        payload = {"guaranteed": dict(guaranteed or {}), "maximum": dict(maximum or {})}
        return self._one(Quota, "PUT", f"/workspaces/{workspace_id}/quotas/{pool_id}", json=payload)

    def delete_quota(self, workspace_id: int, pool_id: int) -> None:
        self._json("DELETE", f"/workspaces/{workspace_id}/quotas/{pool_id}")

    # -- audit -------------------------------------------------------------------------------------------------

    def list_audit_events_page(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target_type: str | None = None,
        target_id: str | int | None = None,
        workspace_id: int | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[AuditEvent]:
        """One page of the audit log, newest first (platform admins; a workspace's admins with ``workspace_id``).

        Args:
            actor: The acting user's name.
            action: e.g. ``workspace.create``.
            target_type: e.g. ``workspace``.
            target_id: The target's id.
            workspace_id: Events about this workspace.
            since: Events at or after this time (UTC).
            until: Events before this time (UTC).
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        params = query(
            actor=actor,
            action=action,
            target_type=target_type,
            target_id=target_id,
            since=_time(since),
            until=_time(until),
        )
        # A workspace's events have their own operation, which the workspace's admins may call too.
        path = "/audit-events" if workspace_id is None else f"/workspaces/{workspace_id}/audit-events"
        return self._page(AuditEvent, path, params, limit=limit, cursor=cursor)

    def list_audit_events(
        self,
        *,
        actor: str | None = None,
        action: str | None = None,
        target_type: str | None = None,
        target_id: str | int | None = None,
        workspace_id: int | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
    ) -> Iterator[AuditEvent]:
        """Every matching audit event, newest first, fetched page by page."""
        return self._iterate(
            lambda c: self.list_audit_events_page(
                actor=actor,
                action=action,
                target_type=target_type,
                target_id=target_id,
                workspace_id=workspace_id,
                since=since,
                until=until,
                limit=PAGE_SIZE,
                cursor=c,
            )
        )
