"""Named leases: a background controller holds one to do a singleton job (e.g. a billing tick)."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, LeaseMixin


class Lease(LeaseMixin, Base):
    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
