"""SSH public keys of the signed-in user."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from aicenter.api.schemas.common import Input, Schema


class SshKeyCreate(Input):
    public_key: str = Field(
        max_length=16_384, description="One OpenSSH public key line, e.g. the contents of ~/.ssh/id_ed25519.pub."
    )
    name: str | None = Field(
        default=None, max_length=64, description="A name to recognise the key by; default: the key's comment."
    )


class SshKeyOut(Schema):
    id: int
    name: str
    public_key: str = Field(description="The normalized OpenSSH form: type base64 [comment].")
    fingerprint: str = Field(description="SHA256 fingerprint, as `ssh-keygen -lf` prints it.")
    created_at: datetime
    last_used_at: datetime | None = Field(description="When the key last opened a connection through the gateway.")
