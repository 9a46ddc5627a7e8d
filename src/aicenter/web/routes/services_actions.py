"""A service page's actions: traffic, promote and roll back a canary, scale bounds, stop (and a platform admin's
force stop), start, delete, API keys, and the "try it" form.

Each is a CSRF-checked form POST calling the same service function as the REST API; a refusal is shown above the
form it came from, with nothing changed. "Try it" sends the member's request to the serving gateway in this
process as the member (their console session, which the gateway resolves like any of their tokens), so the
gateway's own rules apply: members of the service's workspace only. A platform admin who is no member gets 403
before anything is sent: admins never see a workspace's requests or answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.deps import SESSION_COOKIE, bearer_token
from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, Forbidden, ValidationFailed
from aicenter.core.jobs.serving import MODEL_SERVER_RUNTIMES
from aicenter.services import serving
from aicenter.web.console import Console, Post, redirect
from aicenter.web.forms import FormState, failed_form, message_form, parse_float, parse_int
from aicenter.web.routes.services import TryResult, service_detail

router = APIRouter()

TRY_TIMEOUT_S = 120.0  # the gateway holds a request while a replica starts from zero (activation_timeout_s)
TRY_MAX_BODY = 1024 * 1024  # a form, not a client: bigger payloads go through the API with a key or token
TRY_SHOWN_CHARS = 64 * 1024  # an answer is shown up to this much


async def _failed(cx: Console, service_id: int, state: FormState, status: int) -> Response:
    return await service_detail(cx, service_id, forms=[state], status=status)


@router.post("/services/{service_id:int}/promote")
async def promote(service_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            revision = await serving.promote_service(session, cx.actor, service_id)
    except AicenterError as exc:
        return await _failed(cx, service_id, message_form("service-rollout", exc), exc.status)
    return redirect(cx, f"/services/{service_id}", f"Revision {revision.number} takes all traffic once it serves.")


@router.post("/services/{service_id:int}/rollback")
async def rollback(service_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            revision = await serving.rollback_service(session, cx.actor, service_id)
    except AicenterError as exc:
        return await _failed(cx, service_id, message_form("service-rollout", exc), exc.status)
    return redirect(cx, f"/services/{service_id}", f"Revision {revision.number} was rolled back.")


@router.post("/services/{service_id:int}/traffic")
async def set_traffic(service_id: Id, post: Post) -> Response:
    """Fields ``traffic.<revision number>``: whole percents summing to 100."""
    cx = post.cx
    fields = [k for k in post.values if k.startswith("traffic.")]
    try:
        traffic: dict[str, Any] = {k.removeprefix("traffic."): parse_int(post.get(k), k, default=0) for k in fields}
        if not traffic:
            raise ValidationFailed("give each ready revision's percent", field="traffic")
        async with cx.ctx.db.write() as session:
            await serving.set_traffic(session, cx.actor, service_id, traffic)
    except AicenterError as exc:
        state = failed_form("service-traffic", post.values, exc, ["traffic", *fields])
        return await _failed(cx, service_id, state, exc.status)
    split = ", ".join(f"revision {k}: {v}%" for k, v in traffic.items())
    return redirect(cx, f"/services/{service_id}", f"Traffic set ({split}).")


@router.post("/services/{service_id:int}/scale")
async def scale(service_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        min_replicas = parse_int(post.get("min_replicas"), "min_replicas")
        max_replicas = parse_int(post.get("max_replicas"), "max_replicas")
        concurrency = parse_float(post.get("target_concurrency"), "target_concurrency")
        async with cx.ctx.db.write() as session:
            await serving.scale_service(
                session,
                cx.actor,
                service_id,
                min_replicas=min_replicas,
                max_replicas=max_replicas,
                target_concurrency=concurrency,
            )
    except AicenterError as exc:
        fields = ("min_replicas", "max_replicas", "target_concurrency")
        return await _failed(cx, service_id, failed_form("service-scale", post.values, exc, fields), exc.status)
    return redirect(cx, f"/services/{service_id}", "Scale bounds changed.")


async def _state_change(
    post: Post, service_id: int, change: Callable[..., Awaitable[Any]], to: str, done: str
) -> Response:
    """Stop, start or delete: ``change(session, actor, service_id)``, then to ``to`` saying ``done``; a refusal is
    shown on the service's page."""
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            await change(session, cx.actor, service_id)
    except AicenterError as exc:
        return await _failed(cx, service_id, message_form("service-state", exc), exc.status)
    return redirect(cx, to, done)


@router.post("/services/{service_id:int}/stop")
async def stop(service_id: Id, post: Post) -> Response:
    """Its owner and the workspace's admins stop it; a platform admin's stop of another's service is a force
    stop (the service layer decides and audits which)."""
    done = "The service is stopping: its replicas drain and stop."
    return await _state_change(post, service_id, serving.stop_service, f"/services/{service_id}", done)


@router.post("/services/{service_id:int}/start")
async def start(service_id: Id, post: Post) -> Response:
    return await _state_change(
        post, service_id, serving.start_service, f"/services/{service_id}", "The service was started."
    )


@router.post("/services/{service_id:int}/delete")
async def delete(service_id: Id, post: Post) -> Response:
    done = "The service was deleted; its replica jobs stay, with their machine time."
    return await _state_change(post, service_id, serving.delete_service, "/services", done)


# --- keys ------------------------------------------------------------------------------------------------------


@router.post("/services/{service_id:int}/keys")
async def create_key(service_id: Id, post: Post) -> Response:
    """A new key, shown on the page this once (no redirect: it must not travel in a cookie or a URL)."""
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            created = await serving.create_key(session, cx.actor, service_id, post.get("name"))
    except AicenterError as exc:
        return await _failed(cx, service_id, failed_form("service-key", post.values, exc, ("name",)), exc.status)
    return await service_detail(cx, service_id, new_key=created, status=201)


@router.post("/services/{service_id:int}/keys/{key_id:int}/revoke")
async def revoke_key(service_id: Id, key_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            row = await serving.revoke_key(session, cx.actor, service_id, key_id)
    except AicenterError as exc:
        return await _failed(cx, service_id, message_form("service-keys", exc), exc.status)
    return redirect(cx, f"/services/{service_id}", f"Key {row.name} was revoked.")


# --- try it ----------------------------------------------------------------------------------------------------


@router.post("/services/{service_id:int}/try")
async def try_it(service_id: Id, post: Post) -> Response:
    """Send the typed V2 infer body through the gateway as the signed-in member and show the answer."""
    cx = post.cx
    body = post.get("body")
    try:
        async with cx.ctx.db.read() as session:
            view = await serving.get_service(session, cx.actor, service_id)
        if cx.role_in(view.service.workspace_id) is None:
            raise Forbidden(
                f"only members of workspace {view.workspace_name} call service {view.service.name}; platform "
                "admins see its status, not its requests"
            )
        if view.runtime not in MODEL_SERVER_RUNTIMES:
            raise ValidationFailed("try it sends Open Inference Protocol v2 requests; this runtime serves /v1")
        if len(body.encode()) > TRY_MAX_BODY:
            raise ValidationFailed(f"at most {TRY_MAX_BODY // 1024} KiB here; use the API for more", field="body")
        try:
            json.loads(body)
        except ValueError as exc:
            raise ValidationFailed(f"not JSON: {exc}", field="body") from None
        tried = await _send(cx, f"{view.url_path}/v2/models/{view.service.name}/infer", body)
    except AicenterError as exc:
        return await _failed(cx, service_id, failed_form("service-try", post.values, exc, ("body",)), exc.status)
    state = FormState("service-try", {"body": body})
    return await service_detail(cx, service_id, forms=[state], tried=tried)


async def _send(cx: Console, path: str, body: str) -> TryResult:
    gateway = getattr(cx.request.app.state, "serving_gateway", None)
    if gateway is None:
        raise ValidationFailed("this server runs no serving gateway; call the service's URL instead")
    # The credential this request was authenticated with (the console's own dependency checked it just now).
    session_token = bearer_token(cx.request) or cx.request.cookies.get(SESSION_COOKIE, "")
    transport = httpx.ASGITransport(app=gateway, client=("127.0.0.1", 0))
    headers = {"Authorization": f"Bearer {session_token}", "Content-Type": "application/json"}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
            answer = await asyncio.wait_for(client.post(path, content=body, headers=headers), TRY_TIMEOUT_S)
    except TimeoutError:
        raise ValidationFailed(f"no answer within {int(TRY_TIMEOUT_S)} s; try again", field="body") from None
    text = answer.text
    with contextlib.suppress(ValueError):  # not JSON (a proxy's error page): shown as it came
        text = json.dumps(json.loads(text), indent=2)
    if len(text) > TRY_SHOWN_CHARS:
        text = text[:TRY_SHOWN_CHARS] + "\n… (cut here; the full answer is longer)"
    return TryResult(answer.status_code, answer.headers.get("x-aicenter-revision", ""), text)
