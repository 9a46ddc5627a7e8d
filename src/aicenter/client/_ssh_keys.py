"""The signed-in user's SSH public keys (what the SSH gateway and notebooks accept)."""

from __future__ import annotations

from datetime import datetime

from aicenter.client._base import UNSET, BaseClient, body
from aicenter.client.models import ApiModel


class SshKey(ApiModel):
    id: int
    name: str
    public_key: str
    fingerprint: str
    created_at: datetime | None = None
    last_used_at: datetime | None = None


class SshKeysMixin(BaseClient):
    def ssh_keys(self) -> list[SshKey]:
        """Your registered SSH public keys, oldest first."""
        return self._array(SshKey, "/ssh-keys")

    def add_ssh_key(self, public_key: str, name: str | None = None) -> SshKey:
        """Register an OpenSSH public key line (e.g. the contents of ``~/.ssh/id_ed25519.pub``).

        Args:
            public_key: ``type base64 [comment]``.
            name: A name to recognise it by; default: the key's comment.

        Raises:
            ApiError: ``ssh_key_invalid`` (does not parse, a private key, DSA, RSA under 2048 bits), ``conflict``
                (already registered, by you or anyone, or a name you already use), ``quota_exceeded`` (50 keys).
        """
        return self._one(SshKey, "POST", "/ssh-keys", json=body(public_key=public_key, name=name or UNSET))

    def delete_ssh_key(self, key_id: int) -> None:
        """Delete one of your keys; new SSH connections with it are refused."""
        self._json("DELETE", f"/ssh-keys/{key_id}")
