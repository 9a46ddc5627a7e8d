"""The SSH gateway's ``resolve`` callback: ``notebook-<id>`` -> the owner's running notebook's SSH agent.

It reads the notebook proxy's endpoint cache (``gateway.notebooks``), so a connection costs no database read
beyond that cache's, and only the notebook's owner is let through: anyone else's request for the channel is
refused as if the notebook did not exist.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

from aicenter.config import Settings
from aicenter.db.engine import Database
from aicenter.gateway.notebooks import NotebookGateway
from aicenter.gateway.ssh import GatewayUser, Resolve, SshGateway, gateway_host_key_path
from aicenter.gateway.ssh_lookup import key_authenticator
from aicenter.services import notebooks as notebooks_service

log = logging.getLogger(__name__)

__all__ = ["SSH_PORTS", "notebook_resolver", "refresh_keys_soon", "start_ssh_gateway"]

_ALIAS = re.compile(r"notebook-([1-9][0-9]{0,17})")
SSH_PORTS = frozenset({22})
"""The ports a client may ask for behind a notebook alias: its SSH agent's (what ProxyJump asks for)."""


def notebook_resolver(notebooks: NotebookGateway) -> Resolve:
    async def resolve(user: GatewayUser, host: str, port: int) -> tuple[str, int] | None:
        match = _ALIAS.fullmatch(host)
        if match is None or port not in SSH_PORTS:
            return None
        endpoint = await notebooks.endpoint(int(match[1]))
        if endpoint is None or endpoint.owner_id != user.user_id:
            return None
        return endpoint.host, endpoint.ssh_port

    return resolve


async def start_ssh_gateway(settings: Settings, db: Database, notebooks: NotebookGateway) -> SshGateway | None:
    """The SSH gateway on ``ssh_host``:``ssh_port`` (None when ``ssh_port`` is -1, or when it cannot listen:
    the platform runs on, and says so, without SSH access to notebooks)."""
    if settings.ssh_port < 0:
        return None
    gateway = SshGateway(
        host_key_path=gateway_host_key_path(settings.home_dir),
        authenticate=key_authenticator(db),
        resolve=notebook_resolver(notebooks),
    )
    host = settings.ssh_host or settings.host
    try:
        await gateway.start(host, settings.ssh_port, reuse_port=settings.ssh_reuse_port and settings.ssh_port != 0)
    except OSError as exc:
        log.error(
            "the SSH gateway cannot listen on %s:%s (%s): no SSH access to notebooks", host, settings.ssh_port, exc
        )
        return None
    log.info("SSH gateway for notebooks on %s:%s", host, gateway.port)
    return gateway


def refresh_keys_soon(db: Database, jobs_path: Path) -> None:
    """A user's SSH keys changed: rewrite the running notebooks' authorized keys (in the background)."""
    task = asyncio.get_running_loop().create_task(notebooks_service.refresh_authorized_keys(db, jobs_path))
    _background.add(task)
    task.add_done_callback(_background.discard)


_background: set[asyncio.Task[int]] = set()
