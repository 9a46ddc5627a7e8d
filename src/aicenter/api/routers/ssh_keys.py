"""The signed-in user's SSH public keys (what the SSH gateway and notebooks accept)."""

from __future__ import annotations

from fastapi import APIRouter, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.api.schemas.ssh_keys import SshKeyCreate, SshKeyOut
from aicenter.services import ssh_keys

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES, tags=["ssh-keys"])


@router.get("/ssh-keys", openapi_extra=access(Access.USER))
async def list_ssh_keys(actor: CurrentActor, session: ReadSession) -> list[SshKeyOut]:
    """The caller's own SSH public keys, oldest first."""
    return [SshKeyOut.model_validate(k) for k in await ssh_keys.list_keys(session, actor)]


@router.post("/ssh-keys", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def add_ssh_key(body: SshKeyCreate, actor: CurrentActor, session: WriteSession) -> SshKeyOut:
    """Register a public key. A key belongs to one user only (409 `conflict` if it is registered already);
    DSA and RSA under 2048 bits are refused (422 `ssh_key_invalid`)."""
    key = await ssh_keys.add_key(session, actor, name=body.name, public_key=body.public_key)
    return SshKeyOut.model_validate(key)


@router.delete("/ssh-keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_ssh_key(key_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete one of the caller's keys (another user's key answers 404)."""
    await ssh_keys.delete_key(session, actor, key_id)
