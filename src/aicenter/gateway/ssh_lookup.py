"""The SSH gateway's ``authenticate`` callback over the database: one lookup per key per connection."""

from __future__ import annotations

import asyncssh

from aicenter.db.engine import Database
from aicenter.gateway.ssh import Authenticate, GatewayUser
from aicenter.services import ssh_keys

__all__ = ["key_authenticator"]


def key_authenticator(db: Database) -> Authenticate:
    """``authenticate`` for ``SshGateway``: the active user who registered the key, else None.

    A write session: the lookup records the key's last use (at most every few minutes, see
    ``services.ssh_keys.TOUCH_EVERY_S``).
    """

    async def authenticate(key: asyncssh.SSHKey) -> GatewayUser | None:
        async with db.write() as session:
            found = await ssh_keys.user_for_key(session, key)
        return None if found is None else GatewayUser(*found)

    return authenticate
