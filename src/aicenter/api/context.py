"""What the app factory builds once and every request shares."""

from __future__ import annotations

from dataclasses import dataclass

from aicenter.config import Settings
from aicenter.db.engine import Database
from aicenter.services.auth import TokenVerifier
from aicenter.storage import BlobStore


@dataclass
class AppContext:
    settings: Settings
    db: Database
    tokens: TokenVerifier
    secret_key: str
    store: BlobStore
