"""Users' SSH public keys: registered in the profile, accepted by the SSH gateway and the notebooks' agents.

A key's fingerprint is unique across all users: the gateway learns who connects from the key alone (one
lookup per connection, ``user_for_key``), so a key registered by one user can never act as another.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from datetime import timedelta

import asyncssh
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound, QuotaExceeded, SshKeyInvalid, Unauthenticated, ValidationFailed
from aicenter.core.names import check_text
from aicenter.core.roles import UserState
from aicenter.db.models import SshKey, User
from aicenter.events import ssh_keys_changed
from aicenter.services import audit
from aicenter.services.context import Actor

MAX_KEYS_PER_USER = 50
MIN_RSA_BITS = 2048
# Longer than any real public key (RSA 16384 is ~2.8 kB in base64), short enough to refuse pasted junk early.
MAX_KEY_TEXT = 16_384
# A key's last use is written at most this often, so that a busy user's connections do not each write a row.
TOUCH_EVERY_S = 300.0

# Algorithms we accept, as the first word of the OpenSSH one-line form. DSA (ssh-dss) is refused: 1024-bit,
# SHA-1 only, and removed from OpenSSH 9.8.
ALLOWED_TYPES = frozenset(
    {
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp256",
        "ecdsa-sha2-nistp384",
        "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com",
        "sk-ecdsa-sha2-nistp256@openssh.com",
    }
)


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """A validated public key: its normalized one-line form, SHA256 fingerprint, algorithm and comment."""

    public_key: str
    fingerprint: str
    algorithm: str
    comment: str


def parse_public_key(text: str) -> ParsedKey:
    """Validate one OpenSSH public key line (``type base64 [comment]``) and normalize it.

    Raises:
        SshKeyInvalid: the text is empty, several lines, a private key, does not parse, or is of a refused type
            or size (DSA, RSA under 2048 bits).
    """
    text = text.strip()
    if not text:
        raise SshKeyInvalid("is empty; paste the contents of your .pub file", field="public_key")
    if len(text) > MAX_KEY_TEXT:
        raise SshKeyInvalid(f"is longer than {MAX_KEY_TEXT} characters", field="public_key")
    if "PRIVATE KEY" in text:
        # asyncssh.import_public_key would accept a private key and derive its public half; refuse it so that a
        # user who pasted the wrong file learns it and knows the secret left their machine.
        raise SshKeyInvalid("is a PRIVATE key; never share it: register the .pub file instead", field="public_key")
    if "\n" in text or "\r" in text:
        raise SshKeyInvalid("must be one line: one key in OpenSSH format (type base64 comment)", field="public_key")
    parts = text.split(None, 2)
    if len(parts) < 2:
        raise SshKeyInvalid("is not an OpenSSH public key (expected: type base64 [comment])", field="public_key")
    kind, data = parts[0], parts[1]
    comment = parts[2].strip() if len(parts) > 2 else ""
    if kind == "ssh-dss":
        raise SshKeyInvalid("DSA keys are too weak; use ed25519 (ssh-keygen -t ed25519)", field="public_key")
    if kind not in ALLOWED_TYPES:
        raise SshKeyInvalid(
            f"key type {kind!r} is not accepted; use ed25519, ecdsa or RSA of at least {MIN_RSA_BITS} bits",
            field="public_key",
        )
    try:
        key = asyncssh.import_public_key(f"{kind} {data}")
    except (asyncssh.KeyImportError, binascii.Error, ValueError) as exc:
        raise SshKeyInvalid(f"does not parse as an SSH public key: {exc}", field="public_key") from None
    if key.get_algorithm() != kind:
        raise SshKeyInvalid(f"says {kind} but holds a {key.get_algorithm()} key", field="public_key")
    if kind == "ssh-rsa":
        bits = int(getattr(key.pyca_key, "key_size", 0))
        if bits < MIN_RSA_BITS:
            raise SshKeyInvalid(
                f"is a {bits}-bit RSA key; at least {MIN_RSA_BITS} bits are required", field="public_key"
            )
    check_text(comment, "public_key", 256)
    line = f"{kind} {data}" + (f" {comment}" if comment else "")
    return ParsedKey(public_key=line, fingerprint=key.get_fingerprint("sha256"), algorithm=kind, comment=comment)


async def add_key(session: AsyncSession, actor: Actor, *, name: str | None, public_key: str) -> SshKey:
    """Register a public key for the actor. ``name`` defaults to the key's comment, else its algorithm.

    Raises:
        SshKeyInvalid: the key is refused (see ``parse_public_key``).
        ValidationFailed: the name is too long or not printable.
        Conflict: this key is already registered (by this user or another), or the user has a key of that name.
        QuotaExceeded: the user already has ``MAX_KEYS_PER_USER`` keys.
    """
    parsed = parse_public_key(public_key)
    name = (name if name is not None else "").strip() or parsed.comment[:64] or parsed.algorithm
    check_text(name, "name", 64)
    if "\n" in name or "\t" in name:
        raise ValidationFailed("must be one line", field="name")
    user = await session.get(User, actor.user_id)
    if user is None:
        raise Unauthenticated("the user no longer exists")
    owned = list((await session.scalars(select(SshKey).where(SshKey.user_id == actor.user_id))).all())
    if len(owned) >= MAX_KEYS_PER_USER:
        raise QuotaExceeded(
            f"you already have {MAX_KEYS_PER_USER} SSH keys; delete one first", details={"limit": MAX_KEYS_PER_USER}
        )
    if any(k.name == name for k in owned):
        raise Conflict(f"you already have an SSH key named {name!r}", details={"field": "name"})
    # Whose key it is stays unsaid when it is another user's: the answer is the same either way.
    if await session.scalar(select(SshKey.id).where(SshKey.fingerprint == parsed.fingerprint)) is not None:
        raise Conflict(
            f"the key {parsed.fingerprint} is already registered; each key may belong to one user only",
            details={"fingerprint": parsed.fingerprint},
        )
    key = SshKey(user_id=actor.user_id, name=name, public_key=parsed.public_key, fingerprint=parsed.fingerprint)
    session.add(key)
    try:
        # Flushed inside a savepoint: a concurrent registration of the same key fails on the unique index here,
        # as a 409 rather than a 500 at commit.
        async with session.begin_nested():
            await session.flush()
    except IntegrityError:
        raise Conflict(
            f"the key {parsed.fingerprint} is already registered; each key may belong to one user only",
            details={"fingerprint": parsed.fingerprint},
        ) from None
    audit.record(
        session, actor, "ssh_key.add", "ssh_key", key.id, details={"name": name, "fingerprint": key.fingerprint}
    )
    ssh_keys_changed.notify_after_commit(session)
    return key


async def list_keys(session: AsyncSession, actor: Actor) -> list[SshKey]:
    """The actor's own keys, oldest first."""
    stmt = select(SshKey).where(SshKey.user_id == actor.user_id).order_by(SshKey.id)
    return list((await session.scalars(stmt)).all())


async def delete_key(session: AsyncSession, actor: Actor, key_id: int) -> None:
    """Delete one of the actor's keys. Running notebooks stop accepting it when their key file is next written.

    Raises:
        NotFound: no such key among the actor's (another user's key reads as missing).
    """
    key = await session.get(SshKey, key_id)
    if key is None or key.user_id != actor.user_id:
        raise NotFound(f"SSH key {key_id} not found")
    audit.record(
        session, actor, "ssh_key.delete", "ssh_key", key.id, details={"name": key.name, "fingerprint": key.fingerprint}
    )
    await session.delete(key)
    ssh_keys_changed.notify_after_commit(session)


async def authorized_keys(session: AsyncSession, user_id: int) -> list[str]:
    """The user's public keys as authorized_keys lines (what a notebook's agent accepts)."""
    stmt = select(SshKey.public_key).where(SshKey.user_id == user_id).order_by(SshKey.id)
    return list((await session.scalars(stmt)).all())


async def user_for_key(session: AsyncSession, key: asyncssh.SSHKey | str) -> tuple[int, str] | None:
    """Who a key (or its ``SHA256:`` fingerprint) belongs to: ``(user_id, username)``, or None for an unknown
    key or a frozen user. Records the key's last use (at most every ``TOUCH_EVERY_S``)."""
    fingerprint = key if isinstance(key, str) else key.get_fingerprint("sha256")
    row = (
        await session.execute(
            select(SshKey, User.username, User.state)
            .join(User, User.id == SshKey.user_id)
            .where(SshKey.fingerprint == fingerprint)
        )
    ).first()
    if row is None:
        return None
    ssh_key, username, state = row
    if state != UserState.ACTIVE.value:
        return None
    now = utcnow()
    if ssh_key.last_used_at is None or now - ssh_key.last_used_at > timedelta(seconds=TOUCH_EVERY_S):
        ssh_key.last_used_at = now
    return ssh_key.user_id, str(username)
