"""Users' SSH public keys: what the SSH gateway and the notebooks' in-sandbox agents accept."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.core.clock import utcnow
from aicenter.db.base import Base, BigIntId, IdMixin


class SshKey(IdMixin, Base):
    """One registered public key. The fingerprint is unique across all users: the gateway knows who connects
    from the key alone, so one key may identify only one user."""

    __tablename__ = "ssh_keys"

    user_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    # The normalized OpenSSH one-line form: ``type base64 [comment]``.
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(128), unique=True)  # SHA256:...
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
