"""Who is acting: every service call takes an Actor, built by the API from a token or a console session."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Actor:
    user_id: int
    username: str
    is_platform_admin: bool = False
    token_id: int | None = None
    client_address: str | None = None
    request_id: str | None = None
    # Set when acting with a job token: the only job this actor may read (enforced by the API's authentication).
    job_id: int | None = None

    @classmethod
    def system(cls, reason: str = "system") -> Actor:
        """The platform itself (start-up, controllers). Audited under the name ``system``."""
        return cls(user_id=0, username=reason, is_platform_admin=True)
