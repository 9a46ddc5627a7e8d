"""Alerts, alert rules, silences, notification channels and the cluster event log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.alerts import (
    AlertChannelCreate,
    AlertChannelOut,
    AlertChannelUpdate,
    AlertOut,
    AlertRuleCreate,
    AlertRuleOut,
    AlertRuleUpdate,
    ChannelTestOut,
    ClusterEventOut,
    SilenceCreate,
    SilenceOut,
)
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.services import alerts

router = APIRouter(prefix="/api/v1", tags=["alerts"], responses=ERROR_RESPONSES)

_Kind = Annotated[
    str | None, Query(max_length=64, description="Exact kind (node.lost), or a prefix ending in '.' (node.).")
]
_State = Annotated[str | None, Query(max_length=16, description="pending, firing or resolved.")]


@router.get("/events", openapi_extra=access(Access.USER))
async def list_events(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    kind: _Kind = None,
    workspace_id: Id | None = None,
    node_id: Id | None = None,
    job_id: Id | None = None,
    service_id: Id | None = None,
    since: datetime | None = None,
) -> Page[ClusterEventOut]:
    """Cluster events, newest first: cluster-wide ones (nodes) and your workspaces'; platform admins all."""
    page = await alerts.list_events(
        session,
        actor,
        limit=paging.limit,
        cursor=paging.cursor,
        kind=kind,
        workspace_id=workspace_id,
        node_id=node_id,
        job_id=job_id,
        service_id=service_id,
        since=since,
    )
    return Page(items=[ClusterEventOut.model_validate(e) for e in page.items], next_cursor=page.next_cursor)


@router.get("/alerts", openapi_extra=access(Access.USER))
async def list_alerts(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    state: _State = None,
    workspace_id: Id | None = None,
    rule_id: Id | None = None,
) -> Page[AlertOut]:
    """Alerts, newest first: cluster-wide ones and your workspaces'; platform admins all."""
    page = await alerts.list_alerts(
        session,
        actor,
        state=state,
        workspace_id=workspace_id,
        rule_id=rule_id,
        limit=paging.limit,
        cursor=paging.cursor,
    )
    return Page(
        items=[AlertOut.model_validate({**_columns(v.alert), "rule": v.rule_name}) for v in page.items],
        next_cursor=page.next_cursor,
    )


def _columns(row: object) -> dict[str, object]:
    return {c: getattr(row, c) for c in AlertOut.model_fields if c != "rule"}


@router.get("/alert-rules", openapi_extra=access(Access.USER))
async def list_alert_rules(
    actor: CurrentActor, session: ReadSession, workspace_id: Id | None = None
) -> list[AlertRuleOut]:
    """Platform rules (built-in and admins') and your workspaces' rules."""
    return [AlertRuleOut.model_validate(r) for r in await alerts.list_rules(session, actor, workspace_id=workspace_id)]


@router.post("/alert-rules", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_alert_rule(body: AlertRuleCreate, actor: CurrentActor, session: WriteSession) -> AlertRuleOut:
    """Add a platform-wide rule. A bad expression is a 400 ``invalid_expression`` whose details give the position."""
    return AlertRuleOut.model_validate(await alerts.create_rule(session, actor, **body.model_dump()))


@router.post(
    "/workspaces/{workspace_id}/alert-rules",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=access(Access.WORKSPACE_ADMIN),
)
async def create_workspace_alert_rule(
    workspace_id: Id, body: AlertRuleCreate, actor: CurrentActor, session: WriteSession
) -> AlertRuleOut:
    """Add a rule of the workspace (its admins): it sees cluster series and the workspace's own."""
    rule = await alerts.create_rule(session, actor, workspace_id=workspace_id, **body.model_dump())
    return AlertRuleOut.model_validate(rule)


@router.get("/alert-rules/{rule_id}", openapi_extra=access(Access.USER))
async def get_alert_rule(rule_id: Id, actor: CurrentActor, session: ReadSession) -> AlertRuleOut:
    """One rule you can see."""
    return AlertRuleOut.model_validate(await alerts.get_rule(session, actor, rule_id))


@router.patch("/alert-rules/{rule_id}", openapi_extra=access(Access.USER))
async def update_alert_rule(
    rule_id: Id, body: AlertRuleUpdate, actor: CurrentActor, session: WriteSession
) -> AlertRuleOut:
    """Change a rule, or disable it (built-in rules too)."""
    rule = await alerts.update_rule(session, actor, rule_id, **body.model_dump(exclude_unset=True))
    return AlertRuleOut.model_validate(rule)


@router.delete("/alert-rules/{rule_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_alert_rule(rule_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a rule and its alerts (built-in rules are disabled instead)."""
    await alerts.delete_rule(session, actor, rule_id)


@router.get("/silences", openapi_extra=access(Access.USER))
async def list_silences(actor: CurrentActor, session: ReadSession, all: bool = False) -> list[SilenceOut]:
    """Active silences you can see (``all``: expired ones too)."""
    return [SilenceOut.model_validate(s) for s in await alerts.list_silences(session, actor, active_only=not all)]


@router.post("/silences", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_silence(body: SilenceCreate, actor: CurrentActor, session: WriteSession) -> SilenceOut:
    """Mute notifications of matching alerts, any workspace's, for a while."""
    return SilenceOut.model_validate(await alerts.create_silence(session, actor, **body.model_dump()))


@router.post(
    "/workspaces/{workspace_id}/silences",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=access(Access.WORKSPACE_ADMIN),
)
async def create_workspace_silence(
    workspace_id: Id, body: SilenceCreate, actor: CurrentActor, session: WriteSession
) -> SilenceOut:
    """Mute notifications of the workspace's matching alerts for a while (its admins)."""
    silence = await alerts.create_silence(session, actor, workspace_id=workspace_id, **body.model_dump())
    return SilenceOut.model_validate(silence)


@router.delete("/silences/{silence_id}", openapi_extra=access(Access.USER))
async def expire_silence(silence_id: Id, actor: CurrentActor, session: WriteSession) -> SilenceOut:
    """End a silence now."""
    return SilenceOut.model_validate(await alerts.expire_silence(session, actor, silence_id))


@router.get("/alert-channels", openapi_extra=access(Access.USER))
async def list_alert_channels(
    actor: CurrentActor, session: ReadSession, workspace_id: Id | None = None
) -> list[AlertChannelOut]:
    """Channels you administer: all for platform admins, your workspaces' for workspace admins."""
    channels = await alerts.list_channels(session, actor, workspace_id=workspace_id)
    return [AlertChannelOut.model_validate(c) for c in channels]


@router.post("/alert-channels", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_alert_channel(body: AlertChannelCreate, actor: CurrentActor, session: WriteSession) -> AlertChannelOut:
    """Add a platform-wide webhook or e-mail channel: it receives every platform rule's alerts."""
    return AlertChannelOut.model_validate(await alerts.create_channel(session, actor, **body.model_dump()))


@router.post(
    "/workspaces/{workspace_id}/alert-channels",
    status_code=status.HTTP_201_CREATED,
    openapi_extra=access(Access.WORKSPACE_ADMIN),
)
async def create_workspace_alert_channel(
    workspace_id: Id, body: AlertChannelCreate, actor: CurrentActor, session: WriteSession
) -> AlertChannelOut:
    """Add a channel of the workspace (its admins): it receives every alert about the workspace."""
    channel = await alerts.create_channel(session, actor, workspace_id=workspace_id, **body.model_dump())
    return AlertChannelOut.model_validate(channel)


@router.patch("/alert-channels/{channel_id}", openapi_extra=access(Access.USER))
async def update_alert_channel(
    channel_id: Id, body: AlertChannelUpdate, actor: CurrentActor, session: WriteSession
) -> AlertChannelOut:
    """Change a channel's target, or switch it off and on."""
    channel = await alerts.update_channel(session, actor, channel_id, **body.model_dump(exclude_unset=True))
    return AlertChannelOut.model_validate(channel)


@router.delete(
    "/alert-channels/{channel_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER)
)
async def delete_alert_channel(channel_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a channel and what it has not delivered yet."""
    await alerts.delete_channel(session, actor, channel_id)


@router.post("/alert-channels/{channel_id}/test", openapi_extra=access(Access.USER))
async def test_alert_channel(channel_id: Id, actor: CurrentActor, ctx: Ctx) -> ChannelTestOut:
    """Send a test message now and say whether the receiver took it (a webhook has 5 s to answer)."""
    return ChannelTestOut.model_validate(await alerts.test_channel(ctx.db, actor, channel_id, ctx.settings))
