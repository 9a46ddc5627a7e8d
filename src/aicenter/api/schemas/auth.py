"""Login, the signed-in user and API tokens."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from aicenter.api.schemas.common import Input, Schema


class LoginRequest(Input):
    username: str = Field(max_length=64)
    password: str = Field(max_length=256)
    token_name: str = Field(default="cli", max_length=128, description="A name to recognise the token by.")


class UserOut(Schema):
    id: int
    username: str
    display_name: str
    email: str | None
    is_platform_admin: bool
    state: str
    default_workspace_id: int | None
    created_at: datetime


class LoginResponse(Schema):
    token: str = Field(description="The bearer token. It is shown only now.")
    expires_at: datetime | None
    user: UserOut


class TokenCreate(Input):
    name: str = Field(min_length=1, max_length=128)
    expires_at: datetime | None = Field(default=None, description="UTC; omitted means no expiry.")


class TokenOut(Schema):
    id: int
    name: str
    kind: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The secret bearer token. It is shown only now and never again.")
