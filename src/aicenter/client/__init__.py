"""Python SDK of the aicenter REST API.

>>> from aicenter.client import Client
>>> api = Client("http://127.0.0.1:8000", token="...")
>>> api.me().username
"""

from aicenter.client._base import UNSET
from aicenter.client.client import Client
from aicenter.client.errors import ApiError, ConnectionFailed
from aicenter.client.models import (
    AcceleratorType,
    AuditEvent,
    Health,
    LoginResult,
    Member,
    MyWorkspace,
    Node,
    NodeAccelerator,
    Page,
    Pool,
    Quota,
    Spec,
    Token,
    TokenCreated,
    User,
    Workspace,
)

__all__ = [
    "UNSET",
    "AcceleratorType",
    "ApiError",
    "AuditEvent",
    "Client",
    "ConnectionFailed",
    "Health",
    "LoginResult",
    "Member",
    "MyWorkspace",
    "Node",
    "NodeAccelerator",
    "Page",
    "Pool",
    "Quota",
    "Spec",
    "Token",
    "TokenCreated",
    "User",
    "Workspace",
]
