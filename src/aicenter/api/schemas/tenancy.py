"""Users, workspaces, members and quotas."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictFloat, StrictInt, StrictStr

from aicenter.api.params import Id
from aicenter.api.schemas.auth import UserOut
from aicenter.api.schemas.common import Input, Schema
from aicenter.core.roles import WorkspaceRole

_EMAIL_DOC = 'An e-mail address; "" clears it.'


class UserCreate(Input):
    username: str = Field(max_length=64, description="Letters, digits, '.', '_' and '-'.")
    password: str = Field(max_length=256, description="At least 8 characters. Never returned.")
    display_name: str = Field(default="", max_length=128)
    email: str | None = Field(default=None, max_length=256)
    is_platform_admin: bool = False


class UserUpdate(Input):
    """Omitted fields stay as they are."""

    display_name: str | None = Field(default=None, max_length=128)
    email: str | None = Field(default=None, max_length=256, description=_EMAIL_DOC)
    is_platform_admin: bool | None = None
    password: str | None = Field(
        default=None, max_length=256, description="A new password; revokes the user's sessions and CLI logins."
    )


class MeUpdate(Input):
    """Omitted fields stay as they are."""

    display_name: str | None = Field(default=None, max_length=128)
    email: str | None = Field(default=None, max_length=256, description=_EMAIL_DOC)
    default_workspace_id: Id | None = Field(default=None, description="One of your workspaces.")


class PasswordChange(Input):
    current_password: str = Field(max_length=256)
    new_password: str = Field(max_length=256, description="At least 8 characters.")


class WorkspaceOut(Schema):
    id: int
    name: str
    description: str
    balance: Decimal = Field(description="Coins, as a decimal string.")
    created_by_id: int | None
    admins_read_logs: bool = Field(description="Whether platform admins outside the workspace may read its job logs.")
    notebook_idle_timeout_s: int | None = Field(
        description="Its notebooks are culled after this many idle seconds; 0: never; null: the platform's default."
    )
    created_at: datetime
    updated_at: datetime


class MyWorkspaceOut(Schema):
    workspace: WorkspaceOut
    role: WorkspaceRole


class WorkspaceCreate(Input):
    name: str = Field(max_length=64, description="Lower-case letters, digits, '.', '_' and '-'.")
    description: str = Field(default="", max_length=1024)
    admin_user_id: Id | None = Field(default=None, description="Its first workspace admin; default: you.")


class WorkspaceUpdate(Input):
    """Omitted fields stay as they are."""

    name: str | None = Field(default=None, max_length=64)
    description: str | None = Field(default=None, max_length=1024)
    admins_read_logs: bool | None = Field(
        default=None,
        description="Let platform admins who are not members read the workspace's job logs (its own admins only).",
    )
    notebook_idle_timeout_s: int | None = Field(
        default=None,
        description="Cull its notebooks after this many idle seconds (60..2592000); 0: never; null: the platform's "
        "default. Omitted: unchanged.",
    )


class MemberOut(Schema):
    user_id: int
    username: str
    display_name: str
    role: WorkspaceRole
    created_at: datetime


class MemberAdd(Input):
    """Name the user by ``user_id`` or by ``username``, not both."""

    user_id: Id | None = None
    username: str | None = Field(default=None, max_length=64)
    role: WorkspaceRole = WorkspaceRole.MEMBER


class MemberUpdate(Input):
    role: WorkspaceRole


def _quantity(value: Any) -> Any:
    # Checked before the union, so that the error names the resource ("maximum.cpu") rather than a member of
    # the union ("maximum.cpu.str"), and a JSON true never turns into 1 device.
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError('a quantity is a number or a string such as "16", "500m" or "64Gi"')
    return value


Quantity = Annotated[StrictStr | StrictInt | StrictFloat, BeforeValidator(_quantity)]


class QuotaSet(Input):
    guaranteed: dict[str, Quantity] = Field(
        default_factory=dict,
        description='Resources always available, e.g. {"cpu": "16", "memory": "64Gi", "nvidia-a100": 2}.',
    )
    maximum: dict[str, Quantity] = Field(
        default_factory=dict, description="Upper bounds; a resource left out has no limit."
    )


class QuotaOut(Schema):
    id: int
    workspace_id: int
    pool_id: int
    pool_name: str
    guaranteed: dict[str, int] = Field(description="cpu in milli-cores, memory in bytes, devices as counts.")
    maximum: dict[str, int]
    used: dict[str, int] = Field(description="What the workspace uses now in this pool, in the same units.")


__all__ = [
    "MeUpdate",
    "MemberAdd",
    "MemberOut",
    "MemberUpdate",
    "MyWorkspaceOut",
    "PasswordChange",
    "QuotaOut",
    "QuotaSet",
    "UserCreate",
    "UserOut",
    "UserUpdate",
    "WorkspaceCreate",
    "WorkspaceOut",
    "WorkspaceUpdate",
]
