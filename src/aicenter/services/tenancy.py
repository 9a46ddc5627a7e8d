"""Users and workspaces. Members live in services/members.py, quotas in services/quotas.py.

Who may do what: platform admins manage users and create or delete workspaces; workspace admins rename their
workspace and manage its members; every user edits their own profile and password. What an actor may not see
reads as missing (see services/access.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from types import EllipsisType
from typing import Any

from sqlalchemy import Select, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.errors import (
    AicenterError,
    Conflict,
    Forbidden,
    NotFound,
    RateLimited,
    SingleUserMode,
    ValidationFailed,
)
from aicenter.core.jobs.notebooks import check_idle_timeout
from aicenter.core.names import check_name, check_text, check_username
from aicenter.core.roles import TokenKind, UserState, WorkspaceRole
from aicenter.db.models import ApiToken, LoginAttempt, Membership, Pool, PoolGrant, User, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import (
    get_visible_workspace,
    require_platform_admin,
    require_workspace_admin,
    workspace_role,
)
from aicenter.services.auth import check_password_strength, hash_password, verify_password
from aicenter.services.context import Actor

# Deliberately loose: the only reliable check of an address is a mail to it; this catches typos like "a.b.c".
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
# Tokens that stand for "a person signed in": revoked when the account is frozen or its password changes.
# API tokens survive (they are the user's own named credentials) but are refused while the user is frozen.
_SIGN_IN_KINDS = (TokenKind.SESSION.value, TokenKind.LOGIN.value)


# --- users -------------------------------------------------------------------------------------------------


def _check_email(email: str | None, field: str = "email") -> str | None:
    """Return the address to store: None for an empty one."""
    if email is None or not email.strip():
        return None
    email = email.strip()
    check_text(email, field, 256)
    if not _EMAIL_RE.match(email):
        raise ValidationFailed(f'"{email}" is not an e-mail address', field=field)
    return email


def _check_password(password: str, field: str) -> None:
    try:
        check_password_strength(password)
    except ValidationFailed as exc:
        raise ValidationFailed(exc.message.removeprefix("password: "), field=field) from None


async def create_user(
    session: AsyncSession,
    actor: Actor,
    *,
    username: str,
    password: str | None,
    display_name: str = "",
    email: str | None = None,
    is_platform_admin: bool = False,
    with_default_workspace: bool = True,
    single_user: str | None = None,
) -> User:
    """Create a user and, unless told otherwise, a personal default workspace named after them.

    Args:
        single_user: Why the server runs in single-user mode (``AppContext.single_user``), if it does: then only
            the first user can be created.

    Raises:
        Forbidden: the actor is not a platform admin.
        SingleUserMode: the server runs in single-user mode and a user exists already.
        ValidationFailed: a malformed user name, display name, e-mail address or a weak password.
        Conflict: the user name is taken (``details.field == "username"``).
    """
    require_platform_admin(actor, "user creation")
    if single_user is not None and await session.scalar(select(User.id).limit(1)) is not None:
        raise SingleUserMode(
            f"this server runs in single-user mode ({single_user}): jobs run unsandboxed as the server's own "
            "Unix user, so no second user can be created. Install bubblewrap and restart the server (as root for "
            "a uid per workspace) to run a multi-user center; see docs/security.md"
        )
    check_username(username)
    check_text(display_name, "display_name", 128)
    email = _check_email(email)
    if password is not None:
        _check_password(password, "password")
    if await session.scalar(select(User.id).where(User.username == username)) is not None:
        raise Conflict(f'a user named "{username}" already exists', details={"field": "username"})
    user = User(
        username=username,
        display_name=display_name or username,
        email=email,
        password_hash=hash_password(password) if password else None,
        is_platform_admin=is_platform_admin,
    )
    session.add(user)
    await session.flush()
    audit.record(
        session,
        actor,
        "user.create",
        "user",
        user.id,
        details={"username": username, "is_platform_admin": is_platform_admin},
    )
    if with_default_workspace:
        name = await _free_workspace_name(session, username.lower().replace("_", "-"))
        workspace = await create_workspace(session, actor, name=name, admin=user)
        user.default_workspace_id = workspace.id
    return user


async def _free_workspace_name(session: AsyncSession, base: str) -> str:
    base = base.strip(".-_")[:56] or "user"
    name, n = base, 1
    while await session.scalar(select(Workspace.id).where(Workspace.name == name)) is not None:
        n += 1
        name = f"{base}-{n}"
    return name


async def list_users(
    session: AsyncSession,
    actor: Actor,
    *,
    limit: int = 50,
    cursor: str | None = None,
    username: str | None = None,
    state: UserState | None = None,
    q: str | None = None,
) -> Page[User]:
    """Users in creation order (platform admins only); ``q`` matches a prefix of the user or display name."""
    require_platform_admin(actor, "listing users")
    stmt = select(User)
    if username:
        stmt = stmt.where(User.username == username)
    if state is not None:
        stmt = stmt.where(User.state == state.value)
    if q:
        # Escaped, so that "a_b" is not a pattern; lower() on both sides: case-insensitive on both backends.
        pattern = q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        stmt = stmt.where(
            or_(
                func.lower(User.username).like(pattern, escape="\\"),
                func.lower(User.display_name).like(pattern, escape="\\"),
            )
        )
    return await paginate(session, stmt, User.id, limit=limit, cursor=cursor)


async def get_user(session: AsyncSession, actor: Actor, user_id: int) -> User:
    """A user by id (platform admins only)."""
    require_platform_admin(actor, "reading other users")
    user = await session.get(User, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


async def _ensure_another_admin(session: AsyncSession, user: User, doing: str) -> None:
    """Refuse to leave the platform without an active platform admin (nobody could then undo it)."""
    # FOR UPDATE on PostgreSQL: two admins demoting each other at once must not both succeed.
    # SQLite needs no lock: write transactions there are serialized by BEGIN IMMEDIATE.
    others = await session.scalars(
        select(User.id)
        .where(User.is_platform_admin.is_(True), User.state == UserState.ACTIVE.value, User.id != user.id)
        .with_for_update()
    )
    if not others.first():
        raise Conflict(f"cannot {doing} {user.username}: they are the last active platform admin")


async def _revoke_sign_ins(session: AsyncSession, user_id: int, *, keep_token_id: int | None = None) -> int:
    """Revoke the user's console sessions and CLI logins (all but ``keep_token_id``); return how many."""
    stmt = update(ApiToken).where(
        ApiToken.user_id == user_id, ApiToken.kind.in_(_SIGN_IN_KINDS), ApiToken.revoked_at.is_(None)
    )
    if keep_token_id is not None:
        stmt = stmt.where(ApiToken.id != keep_token_id)
    result = await session.execute(stmt.values(revoked_at=utcnow()))
    return int(getattr(result, "rowcount", 0) or 0)


async def update_user(
    session: AsyncSession,
    actor: Actor,
    user_id: int,
    *,
    display_name: str | None = None,
    email: str | None = None,
    is_platform_admin: bool | None = None,
    password: str | None = None,
) -> User:
    """Change a user (platform admins only). ``None`` leaves a field as it is; ``email=""`` clears it.

    Setting a password revokes the user's console sessions and CLI logins, so whoever knew the old one is out.

    Raises:
        Conflict: the change would leave no active platform admin.
    """
    user = await get_user(session, actor, user_id)
    changed: list[str] = []
    if display_name is not None:
        check_text(display_name, "display_name", 128)
        user.display_name = display_name or user.username
        changed.append("display_name")
    if email is not None:
        user.email = _check_email(email)
        changed.append("email")
    if password is not None:
        _check_password(password, "password")
    if is_platform_admin is not None and is_platform_admin != user.is_platform_admin:
        if not is_platform_admin:
            await _ensure_another_admin(session, user, "demote")
        user.is_platform_admin = is_platform_admin
        changed.append("is_platform_admin")
    if password is not None:
        user.password_hash = hash_password(password)
        await _revoke_sign_ins(session, user.id)
        changed.append("password")  # the fact, never the value
    if changed:
        details: dict[str, Any] = {"changed": changed}
        if "is_platform_admin" in changed:
            details["is_platform_admin"] = user.is_platform_admin
        audit.record(session, actor, "user.update", "user", user.id, details=details)
    return user


async def freeze_user(session: AsyncSession, actor: Actor, user_id: int) -> User:
    """Freeze a user: they can no longer sign in or use any token; their sign-ins are revoked.

    API tokens are kept (refused while frozen) so that thawing restores the user's automation.
    The caller must drop cached tokens (``TokenVerifier.forget()``) for the freeze to act at once on its replica;
    other replicas follow within their token cache time.

    Raises:
        Conflict: the actor froze themselves, or the user is the last active platform admin.
    """
    user = await get_user(session, actor, user_id)
    if user.id == actor.user_id:
        raise Conflict("you cannot freeze yourself")
    if user.state == UserState.FROZEN:
        return user
    if user.is_platform_admin:
        await _ensure_another_admin(session, user, "freeze")
    user.state = UserState.FROZEN.value
    revoked = await _revoke_sign_ins(session, user.id)
    audit.record(session, actor, "user.freeze", "user", user.id, details={"revoked_sign_ins": revoked})
    return user


async def thaw_user(session: AsyncSession, actor: Actor, user_id: int) -> User:
    """Let a frozen user sign in and use their API tokens again."""
    user = await get_user(session, actor, user_id)
    if user.state != UserState.ACTIVE:
        user.state = UserState.ACTIVE.value
        audit.record(session, actor, "user.thaw", "user", user.id)
    return user


async def get_me(session: AsyncSession, actor: Actor) -> User:
    """The signed-in user."""
    user = await session.get(User, actor.user_id)
    if user is None:
        raise NotFound("the signed-in user no longer exists")
    return user


async def update_me(
    session: AsyncSession,
    actor: Actor,
    *,
    display_name: str | None = None,
    email: str | None = None,
    default_workspace_id: int | None = None,
) -> User:
    """Change the actor's own profile. ``None`` leaves a field as it is; ``email=""`` clears it.

    Raises:
        ValidationFailed: ``default_workspace_id`` is not a workspace the actor is a member of.
    """
    user = await get_me(session, actor)
    changed: list[str] = []
    if display_name is not None:
        check_text(display_name, "display_name", 128)
        user.display_name = display_name or user.username
        changed.append("display_name")
    if email is not None:
        user.email = _check_email(email)
        changed.append("email")
    if default_workspace_id is not None:
        member = await session.scalar(
            select(Membership.workspace_id).where(
                Membership.workspace_id == default_workspace_id, Membership.user_id == user.id
            )
        )
        if member is None:  # the same words whether it exists or not: no existence leak
            raise ValidationFailed(
                f"workspace {default_workspace_id} is not one of your workspaces", field="default_workspace_id"
            )
        user.default_workspace_id = default_workspace_id
        changed.append("default_workspace_id")
    if changed:
        audit.record(session, actor, "user.update_self", "user", user.id, details={"changed": changed})
    return user


async def change_password(
    session: AsyncSession,
    actor: Actor,
    *,
    current_password: str,
    new_password: str,
    max_failures: int,
    window_s: int,
) -> AicenterError | None:
    """Change the actor's own password after checking the current one.

    A wrong current password is *returned*, not raised, like a failed login: the caller commits the recorded
    failure and then raises it, so a stolen token cannot be used to guess the password without limit.
    On success the actor's other sessions and CLI logins are revoked; the one in use stays valid.

    Raises:
        RateLimited: ``max_failures`` wrong passwords (or failed logins) within ``window_s`` from this address.
        ValidationFailed: the new password is too weak (``details.field == "new_password"``).
    """
    user = await get_me(session, actor)
    now = utcnow()
    address = (actor.client_address or "unknown")[:64]
    # Per user name and address, as logins: failures from elsewhere (anyone can fail a login under this name)
    # must not keep the user from changing their password.
    failures = await session.scalar(
        select(func.count())
        .select_from(LoginAttempt)
        .where(
            LoginAttempt.username == user.username,
            LoginAttempt.address == address,
            LoginAttempt.at >= now - timedelta(seconds=window_s),
        )
    )
    if (failures or 0) >= max_failures:
        raise RateLimited(
            f"too many wrong passwords; try again in {window_s // 60} minutes", details={"retry_after_s": window_s}
        )
    if not verify_password(user.password_hash, current_password):
        session.add(LoginAttempt(username=user.username, address=address, at=now))
        return Forbidden("the current password is wrong", details={"field": "current_password"})
    _check_password(new_password, "new_password")
    user.password_hash = hash_password(new_password)
    revoked = await _revoke_sign_ins(session, user.id, keep_token_id=actor.token_id)
    audit.record(session, actor, "user.password", "user", user.id, details={"revoked_sign_ins": revoked})
    return None


@dataclass(frozen=True)
class PasswordReset:
    """What ``reset_password`` did: the user, and how many console sessions and CLI logins it revoked."""

    user: User
    revoked_sign_ins: int


async def reset_password(session: AsyncSession, actor: Actor, *, username: str, password: str) -> PasswordReset:
    """Set a user's password without knowing the current one: ``aicenter admin reset-password`` on the
    server's host (its database, no API), for a forgotten or lost password such as the first admin's.

    The user's console sessions and CLI logins are revoked (whoever knew the old password may hold them); API
    tokens, made for scripts, stay. Failed logins recorded for the name are forgotten, so a user locked out by
    guesses can sign in at once.

    Raises:
        NotFound: No user has this name (``field`` is ``username``).
        ValidationFailed: The password is too short or too long (``field`` is ``password``).
    """
    user = await session.scalar(select(User).where(User.username == username))
    if user is None:
        raise NotFound(f'no user is named "{username}"', details={"field": "username"})
    _check_password(password, "password")
    user.password_hash = hash_password(password)
    revoked = await _revoke_sign_ins(session, user.id)
    await session.execute(delete(LoginAttempt).where(LoginAttempt.username == username))
    audit.record(session, actor, "user.reset_password", "user", user.id, details={"revoked_sign_ins": revoked})
    return PasswordReset(user, revoked)


@dataclass(frozen=True)
class MyWorkspace:
    workspace: Workspace
    role: WorkspaceRole


async def my_workspaces(session: AsyncSession, actor: Actor) -> list[MyWorkspace]:
    """The workspaces the actor is a member of, by name, with their role in each."""
    rows = await session.execute(
        select(Workspace, Membership.role)
        .join(Membership, Membership.workspace_id == Workspace.id)
        .where(Membership.user_id == actor.user_id)
        .order_by(Workspace.name)
    )
    return [MyWorkspace(ws, WorkspaceRole(role)) for ws, role in rows]


# --- workspaces --------------------------------------------------------------------------------------------


async def create_workspace(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    description: str = "",
    admin: User | None = None,
    admin_user_id: int | None = None,
) -> Workspace:
    """Create a workspace, allowed in the default pool, with one workspace admin.

    The admin is ``admin`` or the user ``admin_user_id``; by default the actor (the system actor has no user,
    so its workspaces start without members).

    Raises:
        Forbidden: the actor is not a platform admin.
        ValidationFailed: a malformed name or description, or ``admin_user_id`` names no user.
        Conflict: the name is taken (``details.field == "name"``).
    """
    require_platform_admin(actor, "workspace creation")
    check_name(name)
    check_text(description, "description", 1024)
    if admin is None and admin_user_id is not None:
        admin = await session.get(User, admin_user_id)
        if admin is None:
            raise ValidationFailed(f"no user has id {admin_user_id}", field="admin_user_id")
    if await session.scalar(select(Workspace.id).where(Workspace.name == name)) is not None:
        raise Conflict(f'a workspace named "{name}" already exists', details={"field": "name"})
    workspace = Workspace(name=name, description=description, created_by_id=actor.user_id or None)
    session.add(workspace)
    await session.flush()
    admin_id = admin.id if admin is not None else actor.user_id
    if admin_id:
        session.add(Membership(workspace_id=workspace.id, user_id=admin_id, role=WorkspaceRole.WORKSPACE_ADMIN.value))
    default_pool_id = await session.scalar(select(Pool.id).where(Pool.is_default.is_(True)))
    if default_pool_id is not None:
        session.add(PoolGrant(pool_id=default_pool_id, workspace_id=workspace.id))
    audit.record(
        session,
        actor,
        "workspace.create",
        "workspace",
        workspace.id,
        workspace_id=workspace.id,
        details={"name": name, "admin_user_id": admin_id or None},
    )
    await session.flush()
    return workspace


async def list_workspaces(
    session: AsyncSession, actor: Actor, *, limit: int = 50, cursor: str | None = None, name: str | None = None
) -> Page[Workspace]:
    """Workspaces in creation order: all of them for platform admins, the actor's own for everyone else."""
    stmt: Select[Any] = select(Workspace)
    if not actor.is_platform_admin:
        stmt = stmt.where(Workspace.id.in_(select(Membership.workspace_id).where(Membership.user_id == actor.user_id)))
    if name:
        stmt = stmt.where(Workspace.name == name)
    return await paginate(session, stmt, Workspace.id, limit=limit, cursor=cursor)


async def get_workspace(session: AsyncSession, actor: Actor, workspace_id: int) -> Workspace:
    """A workspace the actor is a member of (or any, for platform admins)."""
    return await get_visible_workspace(session, actor, workspace_id)


async def update_workspace(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    *,
    name: str | None = None,
    description: str | None = None,
    admins_read_logs: bool | None = None,
    notebook_idle_timeout_s: int | EllipsisType | None = ...,
) -> Workspace:
    """Rename a workspace, change its description or whether platform admins read its jobs' logs (workspace
    admins). ``None`` leaves a field as it is; ``...`` leaves the notebooks' idle timeout, whose ``None`` means
    the platform's default (0: never cull).

    ``admins_read_logs`` is the workspace's own admins' decision: a platform admin who is not one of them is
    refused (they may add themselves as an admin, which the workspace's audit list then shows).
    """
    workspace = await require_workspace_admin(session, actor, workspace_id)
    details: dict[str, Any] = {}
    if name is not None and name != workspace.name:
        check_name(name)
        taken = await session.scalar(select(Workspace.id).where(Workspace.name == name, Workspace.id != workspace.id))
        if taken is not None:
            raise Conflict(f'a workspace named "{name}" already exists', details={"field": "name"})
        details["name"] = {"from": workspace.name, "to": name}
        workspace.name = name
    if description is not None and description != workspace.description:
        check_text(description, "description", 1024)
        workspace.description = description
        details["description"] = True
    if admins_read_logs is not None and admins_read_logs != workspace.admins_read_logs:
        if await workspace_role(session, actor, workspace.id) != WorkspaceRole.WORKSPACE_ADMIN:
            raise Forbidden(
                f"only the admins of workspace {workspace.name} decide whether platform admins read its job logs",
                details={"field": "admins_read_logs"},
            )
        details["admins_read_logs"] = {"from": workspace.admins_read_logs, "to": admins_read_logs}
        workspace.admins_read_logs = admins_read_logs
    if notebook_idle_timeout_s is not ... and notebook_idle_timeout_s != workspace.notebook_idle_timeout_s:
        check_idle_timeout(notebook_idle_timeout_s, "notebook_idle_timeout_s")
        details["notebook_idle_timeout_s"] = {"from": workspace.notebook_idle_timeout_s, "to": notebook_idle_timeout_s}
        workspace.notebook_idle_timeout_s = notebook_idle_timeout_s
    if details:
        audit.record(
            session, actor, "workspace.update", "workspace", workspace.id, workspace_id=workspace.id, details=details
        )
    return workspace


async def delete_workspace(session: AsyncSession, actor: Actor, workspace_id: int) -> None:
    """Delete a workspace with its memberships, quotas and pool grants (platform admins).

    Users whose default workspace it was are left without one. Later issues refuse this while the workspace
    still has running work.
    """
    require_platform_admin(actor, "workspace deletion")
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    await session.execute(
        update(User).where(User.default_workspace_id == workspace.id).values(default_workspace_id=None)
    )
    audit.record(
        session,
        actor,
        "workspace.delete",
        "workspace",
        workspace.id,
        workspace_id=workspace.id,
        details={"name": workspace.name},
    )
    # Core DELETE, not session.delete(): the database cascades to memberships, quotas and grants in one
    # statement instead of the ORM loading every member first.
    await session.execute(delete(Workspace).where(Workspace.id == workspace.id))
    session.expunge(workspace)
