"""Passwords, API tokens, console sessions and login with rate limiting.

Token format: ``aic_<id>_<secret>``. The id finds the row by primary key; only sha256(secret) is stored.
A fast hash is right here (unlike passwords): the secret has 256 bits of entropy, so it cannot be guessed
offline, and verifying must cost microseconds on every request.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import PasswordHashProfile
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, Forbidden, NotFound, RateLimited, Unauthenticated, ValidationFailed
from aicenter.core.names import check_text
from aicenter.core.roles import TokenKind, UserState
from aicenter.db.engine import Database
from aicenter.db.models import ApiToken, LoginAttempt, User
from aicenter.services import audit
from aicenter.services.context import Actor

# A token's last use is recorded at most this often, so that reads do not turn into writes.
TOUCH_EVERY_S = 300.0
# Failed logins from one address, for any user names, that block the address: a multiple of the per-user limit.
ADDRESS_FACTOR = 4
TOKEN_PREFIX = "aic_"  # noqa: S105 - a prefix, not a secret

# argon2id parameters of each hashing profile (``Settings.password_hashing``). production is argon2-cffi's default,
# RFC 9106's second recommendation (t=3, 64 MiB, p=4), ~0.3 s per hash and per verification on a server core;
# fast is the least argon2 accepts (t=1, 8 KiB, p=1), ~0.1 ms, so that tests which create users and log in do
# not spend half the suite hashing. Settings refuses fast outside development.
PASSWORD_PROFILES: dict[PasswordHashProfile, PasswordHasher] = {
    "production": PasswordHasher(),
    "fast": PasswordHasher(time_cost=1, memory_cost=8, parallelism=1),
}
_profile: PasswordHashProfile = "production"


def use_password_profile(profile: PasswordHashProfile) -> None:
    """Hash passwords set from now on in this process with ``profile``; the app factory calls it from settings.

    Verification reads the parameters from the stored hash, so passwords hashed under any profile keep working.

    Raises:
        ValueError: ``profile`` is not one of PASSWORD_PROFILES.
    """
    global _profile
    if profile not in PASSWORD_PROFILES:
        raise ValueError(f"unknown password hashing profile {profile!r}; known: {', '.join(PASSWORD_PROFILES)}")
    _profile = profile


def password_profile() -> PasswordHashProfile:
    """The profile that new password hashes of this process use."""
    return _profile


@functools.cache
def _dummy_hash(profile: PasswordHashProfile) -> str:
    """Verified against when the user does not exist, so that timing does not reveal which user names exist.

    Computed on first use rather than at import: an argon2 hash costs ~0.2 s of `aicenter up`'s start-up.
    """
    return PASSWORD_PROFILES[profile].hash("not-a-password")


def hash_password(password: str) -> str:
    """Check the password's strength and hash it with the process's profile (``use_password_profile``)."""
    check_password_strength(password)
    return PASSWORD_PROFILES[_profile].hash(password)


def check_password_strength(password: str) -> None:
    if len(password) < 8:
        raise ValidationFailed("must be at least 8 characters long", field="password")
    if len(password) > 256:
        raise ValidationFailed("must be at most 256 characters long", field="password")


def verify_password(password_hash: str | None, password: str) -> bool:
    """Whether ``password`` matches the stored hash, under whatever parameters that hash was made with."""
    hasher = PASSWORD_PROFILES[_profile]
    try:
        return hasher.verify(password_hash or _dummy_hash(_profile), password) and password_hash is not None
    except (VerificationError, InvalidHashError):
        return False


def upgraded_password_hash(password_hash: str, password: str) -> str | None:
    """A production-cost hash of a just verified ``password`` whose stored hash is cheaper, else None.

    A database that began on a development server (fast profile) is thereby upgraded one login at a time once
    the server runs with production parameters; a production hash is never weakened by a fast-profile server.
    """
    if _profile != "production":
        return None
    hasher = PASSWORD_PROFILES["production"]
    try:
        stale = hasher.check_needs_rehash(password_hash)
    except InvalidHashError:
        return None
    return hasher.hash(password) if stale else None


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _split_token(raw: str) -> tuple[int, str] | None:
    if not raw.startswith(TOKEN_PREFIX):
        return None
    ident, _, secret = raw[len(TOKEN_PREFIX) :].partition("_")
    if not ident.isdigit() or not secret:
        return None
    return int(ident), secret


@dataclass(frozen=True)
class IssuedToken:
    """A token row and its secret, which exists only in this object and is shown to the user once."""

    token: ApiToken
    secret: str


async def issue_token(
    session: AsyncSession,
    user: User,
    *,
    name: str,
    kind: TokenKind,
    ttl_s: float | None,
    job_id: int | None = None,
) -> IssuedToken:
    """A new token of ``user``; ``job_id`` is required for, and only for, ``TokenKind.JOB`` tokens."""
    if (kind == TokenKind.JOB) != (job_id is not None):
        raise ValueError("job tokens, and only they, name their job")
    now = utcnow()
    secret = secrets.token_urlsafe(32)
    row = ApiToken(
        user_id=user.id,
        name=name,
        kind=kind.value,
        secret_hash=_hash_secret(secret),
        created_at=now,
        expires_at=now + timedelta(seconds=ttl_s) if ttl_s else None,
        job_id=job_id,
    )
    session.add(row)
    await session.flush()
    return IssuedToken(row, f"{TOKEN_PREFIX}{row.id}_{secret}")


@dataclass(frozen=True, slots=True)
class _Cached:
    user_id: int
    username: str
    is_platform_admin: bool
    token_id: int
    kind: str
    job_id: int | None
    valid_until: float  # monotonic

    def actor(self) -> Actor:
        return Actor(self.user_id, self.username, self.is_platform_admin, self.token_id, job_id=self.job_id)


class TokenVerifier:
    """Checks bearer tokens, keeping verified ones for ``cache_s`` seconds to spare a database read per request.

    Revocation, freezing and expiry therefore take effect within ``cache_s`` on every replica; 0 disables it.
    """

    def __init__(self, cache_s: float) -> None:
        self.cache_s = cache_s
        self._cache: dict[str, _Cached] = {}
        self._inflight: dict[str, asyncio.Future[tuple[Actor, str]]] = {}

    def forget(self, token_id: int | None = None) -> None:
        """Drop cached entries (of one token, or all): called when this replica revokes or freezes."""
        if token_id is None:
            self._cache.clear()
        else:
            self._cache = {k: v for k, v in self._cache.items() if v.token_id != token_id}

    async def verify(self, db: Database, raw: str) -> tuple[Actor, str]:
        """Return the actor and the token kind, or raise Unauthenticated.

        Concurrent requests with the same uncached token share one database read: when a cache entry
        expires under load, 64 requests in flight would otherwise all read the same row at once.
        """
        cached = self._cache.get(raw)
        if cached is not None and cached.valid_until > time.monotonic():
            return cached.actor(), cached.kind
        pending = self._inflight.get(raw)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[tuple[Actor, str]] = asyncio.get_running_loop().create_future()
        self._inflight[raw] = future
        try:
            result = await self._verify_uncached(db, raw)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark it retrieved: nobody may be waiting
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._inflight[raw]

    async def _verify_uncached(self, db: Database, raw: str) -> tuple[Actor, str]:
        parts = _split_token(raw)
        if parts is None:
            raise Unauthenticated("the token is malformed; create a new one with `aicenter login`")
        token_id, secret = parts
        async with db.read() as session:
            row = (
                await session.execute(
                    select(ApiToken, User).join(User, User.id == ApiToken.user_id).where(ApiToken.id == token_id)
                )
            ).first()
        if row is None or not hmac.compare_digest(row[0].secret_hash, _hash_secret(secret)):
            raise Unauthenticated("the token is not valid")
        token, user = row
        now = utcnow()
        if token.revoked_at is not None:
            raise Unauthenticated("the token was revoked")
        if token.expires_at is not None and token.expires_at <= now:
            raise Unauthenticated("the token has expired; log in again")
        if user.state != UserState.ACTIVE:
            raise Unauthenticated("the account is frozen; ask a platform admin")
        if token.last_used_at is None or token.last_used_at < now - timedelta(seconds=TOUCH_EVERY_S):
            async with db.write() as session:
                await touch_token(session, token.id)
        valid = min(self.cache_s, (token.expires_at - now).total_seconds()) if token.expires_at else self.cache_s
        entry = _Cached(
            user.id, user.username, user.is_platform_admin, token.id, token.kind, token.job_id, time.monotonic() + valid
        )
        if self.cache_s > 0:
            if len(self._cache) > 50_000:  # bound memory; a rare full reset costs one read per active token
                self._cache.clear()
            self._cache[raw] = entry
        return entry.actor(), token.kind


async def touch_token(session: AsyncSession, token_id: int, *, every_s: float = TOUCH_EVERY_S) -> None:
    """Record last use, at most once per ``every_s``, so that reads do not turn into writes."""
    now = utcnow()
    await session.execute(
        update(ApiToken)
        .where(
            ApiToken.id == token_id,
            or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < now - timedelta(seconds=every_s)),
        )
        .values(last_used_at=now)
    )


async def login(
    session: AsyncSession,
    *,
    username: str,
    password: str,
    address: str,
    max_failures: int,
    window_s: int,
    kind: TokenKind,
    ttl_s: float,
    token_name: str,
) -> tuple[User, IssuedToken] | AicenterError:
    """Check a password and issue a login (CLI) or session (console) token.

    A wrong password is *returned* as an error, not raised: the caller commits the recorded failure and
    then raises it (raising here would roll the record back). A failure is recorded even for unknown users, so
    guessing names is limited too. RateLimited follows ``max_failures`` failures within ``window_s`` for this
    user name from this address, or ``ADDRESS_FACTOR`` times as many from this address for any user names.
    Failures never block a user name on its own: anyone could then lock a user out by failing from
    anywhere, so the right password from another address always gets in.
    """
    now = utcnow()
    since = now - timedelta(seconds=window_s)
    recent = select(func.count()).select_from(LoginAttempt).where(LoginAttempt.at >= since)
    by_pair = await session.scalar(
        recent.where(LoginAttempt.address == address[:64], LoginAttempt.username == username[:64])
    )
    # The address limit is wider: many people may share one NAT address.
    by_address = await session.scalar(recent.where(LoginAttempt.address == address[:64]))
    if (by_pair or 0) >= max_failures or (by_address or 0) >= max_failures * ADDRESS_FACTOR:
        raise RateLimited(
            f"too many failed logins from your address; try again in {max(1, window_s // 60)} minutes",
            details={"retry_after_s": window_s},
        )
    user = await session.scalar(select(User).where(User.username == username))
    if user is None or not verify_password(user.password_hash, password):
        session.add(LoginAttempt(username=username[:64], address=address[:64], at=now))
        return Unauthenticated("wrong user name or password")
    if user.state != UserState.ACTIVE:
        raise Forbidden("the account is frozen; ask a platform admin")
    if user.password_hash is not None and (upgraded := upgraded_password_hash(user.password_hash, password)):
        user.password_hash = upgraded
    await session.execute(delete(LoginAttempt).where(LoginAttempt.username == username, LoginAttempt.at < since))
    issued = await issue_token(session, user, name=token_name, kind=kind, ttl_s=ttl_s)
    actor = Actor(user.id, user.username, user.is_platform_admin, issued.token.id, client_address=address)
    audit.record(session, actor, f"auth.{kind.value}", "user", user.id)
    return user, issued


async def logout(session: AsyncSession, actor: Actor) -> None:
    """Revoke the token or session the actor used."""
    if actor.token_id is None:
        return
    await session.execute(update(ApiToken).where(ApiToken.id == actor.token_id).values(revoked_at=utcnow()))
    audit.record(session, actor, "auth.logout", "token", actor.token_id)


async def create_api_token(
    session: AsyncSession, actor: Actor, *, name: str, expires_at: datetime | None
) -> IssuedToken:
    check_text(name, "name", 128)
    if not name.strip():
        raise ValidationFailed("must not be empty", field="name")
    now = utcnow()
    if expires_at is not None and expires_at <= now:
        raise ValidationFailed("must be in the future", field="expires_at")
    user = await session.get(User, actor.user_id)
    if user is None:
        raise Unauthenticated("the user no longer exists")
    ttl = (expires_at - now).total_seconds() if expires_at else None
    issued = await issue_token(session, user, name=name, kind=TokenKind.API, ttl_s=ttl)
    audit.record(session, actor, "token.create", "token", issued.token.id, details={"name": name})
    return issued


async def list_tokens(session: AsyncSession, actor: Actor, *, include_revoked: bool = False) -> list[ApiToken]:
    """The actor's own tokens (never their secrets), newest first; console sessions are not listed."""
    stmt = select(ApiToken).where(ApiToken.user_id == actor.user_id, ApiToken.kind != TokenKind.SESSION.value)
    if not include_revoked:
        stmt = stmt.where(ApiToken.revoked_at.is_(None))
    return list((await session.scalars(stmt.order_by(ApiToken.id.desc()))).all())


async def revoke_token(session: AsyncSession, actor: Actor, token_id: int) -> ApiToken:
    token = await session.get(ApiToken, token_id)
    # Another user's token reads as missing: no existence leak.
    if token is None or (token.user_id != actor.user_id and not actor.is_platform_admin):
        raise NotFound(f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = utcnow()
        audit.record(session, actor, "token.revoke", "token", token.id, details={"name": token.name})
    return token


def csrf_token(secret_key: str, session_token_id: int) -> str:
    """The CSRF token bound to one console session (HMAC, so no server-side storage)."""
    return hmac.new(secret_key.encode(), f"csrf:{session_token_id}".encode(), hashlib.sha256).hexdigest()
