"""Alerts, alert rules, silences, notification channels and the cluster event log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, body, query
from aicenter.client.alert_models import Alert, AlertChannel, AlertRule, ChannelTest, ClusterEvent, Silence
from aicenter.client.models import Page


def _scope(workspace_id: int | None) -> str:
    """Where a platform-wide (None) or a workspace's rule, silence or channel is created."""
    return "" if workspace_id is None else f"/workspaces/{workspace_id}"


class AlertsMixin(BaseClient):
    # -- events and alerts ----------------------------------------------------------------------------------------

    def list_events_page(
        self,
        *,
        kind: str | None = None,
        workspace_id: int | None = None,
        node_id: int | None = None,
        job_id: int | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[ClusterEvent]:
        """One page of cluster events, newest first (``kind``: exact, or a prefix ending in ``.``)."""
        params = query(
            kind=kind,
            workspace_id=workspace_id,
            node_id=node_id,
            job_id=job_id,
            since=since.isoformat() if since else None,
        )
        return self._page(ClusterEvent, "/events", params, limit=limit, cursor=cursor)

    def list_events(self, *, kind: str | None = None, limit: int = 50) -> list[ClusterEvent]:
        """The newest ``limit`` cluster events you can see."""
        return self.list_events_page(kind=kind, limit=limit).items

    def list_alerts_page(
        self,
        *,
        state: str | None = None,
        workspace_id: int | None = None,
        rule_id: int | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Alert]:
        """One page of alerts, newest first (``state``: pending, firing or resolved)."""
        params = query(state=state, workspace_id=workspace_id, rule_id=rule_id)
        return self._page(Alert, "/alerts", params, limit=limit, cursor=cursor)

    def list_alerts(self, *, state: str | None = None) -> Iterator[Alert]:
        return self._iterate(lambda c: self.list_alerts_page(state=state, limit=PAGE_SIZE, cursor=c))

    # -- rules ----------------------------------------------------------------------------------------------------

    def list_alert_rules(self, *, workspace_id: int | None = None) -> list[AlertRule]:
        """Platform rules and your workspaces' rules."""
        return self._array(AlertRule, "/alert-rules", query(workspace_id=workspace_id))

    def create_alert_rule(
        self,
        name: str,
        expression: str,
        *,
        for_s: int = 0,
        severity: str = "warning",
        description: str = "",
        workspace_id: int | None = None,
    ) -> AlertRule:
        """Add a rule: platform-wide (``workspace_id`` None; platform admins) or a workspace's (its admins).

        Raises:
            ApiError: ``invalid_expression`` (400) with ``details['position']`` for an expression that does not
                parse.
        """
        payload = body(name=name, expression=expression, for_s=for_s, severity=severity, description=description)
        return self._one(AlertRule, "POST", f"{_scope(workspace_id)}/alert-rules", json=payload)

    def update_alert_rule(
        self,
        rule_id: int,
        *,
        expression: str = UNSET,
        for_s: int = UNSET,
        severity: str = UNSET,
        description: str = UNSET,
        enabled: bool = UNSET,
    ) -> AlertRule:
        payload = body(expression=expression, for_s=for_s, severity=severity, description=description, enabled=enabled)
        return self._one(AlertRule, "PATCH", f"/alert-rules/{rule_id}", json=payload)

    def delete_alert_rule(self, rule_id: int) -> None:
        self._request("DELETE", f"/alert-rules/{rule_id}")

    # -- silences -------------------------------------------------------------------------------------------------

    def list_silences(self, *, include_expired: bool = False) -> list[Silence]:
        return self._array(Silence, "/silences", query(all=include_expired or None))

    def create_silence(
        self,
        matchers: Mapping[str, str],
        *,
        duration_s: int = 3600,
        comment: str = "",
        workspace_id: int | None = None,
    ) -> Silence:
        """Mute notifications of alerts whose labels match (``rule`` matches the rule's name) for a while."""
        payload = body(matchers=dict(matchers), duration_s=duration_s, comment=comment)
        return self._one(Silence, "POST", f"{_scope(workspace_id)}/silences", json=payload)

    def expire_silence(self, silence_id: int) -> Silence:
        return self._one(Silence, "DELETE", f"/silences/{silence_id}")

    # -- channels -------------------------------------------------------------------------------------------------

    def list_alert_channels(self, *, workspace_id: int | None = None) -> list[AlertChannel]:
        return self._array(AlertChannel, "/alert-channels", query(workspace_id=workspace_id))

    def create_alert_channel(
        self, name: str, kind: str, target: str, *, workspace_id: int | None = None
    ) -> AlertChannel:
        """Add a ``webhook`` (an http(s) URL) or ``email`` (an address) channel."""
        payload = body(name=name, kind=kind, target=target)
        return self._one(AlertChannel, "POST", f"{_scope(workspace_id)}/alert-channels", json=payload)

    def update_alert_channel(self, channel_id: int, *, target: str = UNSET, enabled: bool = UNSET) -> AlertChannel:
        return self._one(
            AlertChannel, "PATCH", f"/alert-channels/{channel_id}", json=body(target=target, enabled=enabled)
        )

    def delete_alert_channel(self, channel_id: int) -> None:
        self._request("DELETE", f"/alert-channels/{channel_id}")

    def test_alert_channel(self, channel_id: int) -> ChannelTest:
        """Send a test message now; ``ok`` says whether the receiver took it, ``error`` why not."""
        return self._one(ChannelTest, "POST", f"/alert-channels/{channel_id}/test")
