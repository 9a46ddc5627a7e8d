"""My profile (name, e-mail, default workspace, password, SSH keys) and my API tokens."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.services import auth, ssh_keys, tenancy
from aicenter.web.console import Console, Page, Post, redirect, render
from aicenter.web.forms import FormState, failed_form

router = APIRouter()

PROFILE_FIELDS = ("display_name", "email", "default_workspace_id")
PASSWORD_FIELDS = ("current_password", "new_password", "new_password_confirm")
TOKEN_FIELDS = ("name", "expires_on")
SSH_KEY_FIELDS = ("public_key", "name")


# --- profile -----------------------------------------------------------------------------------------------


async def _profile(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        keys = await ssh_keys.list_keys(session, cx.actor)
    return render(
        cx, "account/profile.html", active="profile", title="My profile", forms=forms, status=status, ssh_keys=keys
    )


@router.get("/profile")
async def profile(cx: Page) -> Response:
    return await _profile(cx)


@router.post("/profile")
async def update_profile(post: Post) -> Response:
    cx = post.cx
    raw_default = post.get("default_workspace_id")
    try:
        if raw_default and not raw_default.isdigit():
            raise ValidationFailed("choose one of your workspaces", field="default_workspace_id")
        async with cx.ctx.db.write() as session:
            await tenancy.update_me(
                session,
                cx.actor,
                display_name=post.get("display_name"),
                email=post.get("email"),
                default_workspace_id=int(raw_default) if raw_default else None,
            )
    except AicenterError as exc:
        return await _profile(cx, forms=[failed_form("profile", post.values, exc, PROFILE_FIELDS)], status=exc.status)
    return redirect(cx, "/profile", "Your profile was saved.")


@router.post("/profile/password")
async def change_password(post: Post) -> Response:
    cx = post.cx
    new = post.secret("new_password")
    try:
        if new != post.secret("new_password_confirm"):
            raise ValidationFailed("the two new passwords differ", field="new_password_confirm")
        async with cx.ctx.db.write() as session:  # committed even when the password is wrong: the failure counts
            wrong = await tenancy.change_password(
                session,
                cx.actor,
                current_password=post.secret("current_password"),
                new_password=new,
                max_failures=cx.ctx.settings.login_max_failures,
                window_s=cx.ctx.settings.login_window_s,
            )
        if wrong is not None:
            raise wrong
    except AicenterError as exc:
        state = failed_form("password", {}, exc, PASSWORD_FIELDS, aliases={"password": "new_password"})
        return await _profile(cx, forms=[state], status=exc.status)
    # Other sessions and CLI logins were revoked; drop them from this replica's cache at once.
    cx.ctx.tokens.forget()
    return redirect(cx, "/profile", "Your password was changed. Your other sessions were signed out.")


@router.post("/profile/ssh-keys")
async def add_ssh_key(post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            key = await ssh_keys.add_key(session, cx.actor, name=post.get("name"), public_key=post.get("public_key"))
    except AicenterError as exc:
        state = failed_form("ssh-key", post.values, exc, SSH_KEY_FIELDS)
        return await _profile(cx, forms=[state], status=exc.status)
    return redirect(cx, "/profile#ssh-keys", f"SSH key {key.name} was added.")


@router.post("/profile/ssh-keys/{key_id:int}/delete")
async def delete_ssh_key(key_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        await ssh_keys.delete_key(session, cx.actor, key_id)
    return redirect(cx, "/profile#ssh-keys", "The SSH key was deleted.")


# --- tokens ------------------------------------------------------------------------------------------------


async def _tokens(
    cx: Console,
    *,
    show_revoked: bool = False,
    forms: list[FormState] | None = None,
    new_token: tuple[str, str] | None = None,
    status: int = 200,
) -> Response:
    async with cx.ctx.db.read() as session:
        tokens = await auth.list_tokens(session, cx.actor, include_revoked=show_revoked)
    response = render(
        cx,
        "account/tokens.html",
        active="tokens",
        title="My tokens",
        forms=forms,
        status=status,
        tokens=tokens,
        show_revoked=show_revoked,
        new_token=new_token,
        today=datetime.now(UTC).date().isoformat(),
    )
    if new_token is not None:
        response.headers["Cache-Control"] = "no-store"  # the secret must not stay in any cache
    return response


@router.get("/tokens")
async def tokens(cx: Page, revoked: bool = False) -> Response:
    return await _tokens(cx, show_revoked=revoked)


def _expiry(raw: str) -> datetime | None:
    """``2025-06-30`` -> the end of that day, UTC (the token works through the whole day named)."""
    if not raw:
        return None
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        raise ValidationFailed(f'"{raw}" is not a date (YYYY-MM-DD)', field="expires_on") from None
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=UTC)


@router.post("/tokens")
async def create_token(post: Post) -> Response:
    cx = post.cx
    try:
        expires_at = _expiry(post.get("expires_on"))
        async with cx.ctx.db.write() as session:
            issued = await auth.create_api_token(session, cx.actor, name=post.get("name"), expires_at=expires_at)
    except AicenterError as exc:
        state = failed_form("token-create", post.values, exc, TOKEN_FIELDS, aliases={"expires_at": "expires_on"})
        return await _tokens(cx, forms=[state], status=exc.status)
    # Shown in this response only, never put in a cookie or a redirect: the secret is not stored anywhere.
    return await _tokens(cx, new_token=(issued.token.name, issued.secret))


@router.post("/tokens/{token_id:int}/revoke")
async def revoke_token(token_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        token = await auth.revoke_token(session, cx.actor, token_id)
    cx.ctx.tokens.forget(token_id)
    return redirect(cx, "/tokens", f"Token {token.name} was revoked.")
