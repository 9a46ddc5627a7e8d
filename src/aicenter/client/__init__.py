"""Python SDK of the aicenter REST API.

>>> from aicenter.client import Client
>>> api = Client("http://127.0.0.1:8000", token="...")
>>> api.me().username
"""

from aicenter.client._base import UNSET
from aicenter.client._billing import Balance, BillingStats, LedgerEntry, Report, ReportRow, Verification
from aicenter.client._latest import LatestValue
from aicenter.client._ssh_keys import SshKey
from aicenter.client.client import Client
from aicenter.client.errors import ApiError, ConnectionFailed
from aicenter.client.models import (
    AcceleratorType,
    AuditEvent,
    Build,
    FileInfo,
    FsckReport,
    GcReport,
    Health,
    Item,
    Job,
    JobEvent,
    JobReplica,
    JobTemplate,
    LoginResult,
    Member,
    MyWorkspace,
    Node,
    NodeAccelerator,
    Page,
    Pool,
    Quota,
    Series,
    SeriesData,
    SeriesPoint,
    Spec,
    StorageUsage,
    Token,
    TokenCreated,
    Upload,
    User,
    Version,
    Workspace,
)
from aicenter.client.notebook_models import Notebook, NotebookSaved, NotebookSsh
from aicenter.client.service_models import (
    CreatedServiceKey,
    Service,
    ServiceKey,
    ServiceLoadPoint,
    ServiceReplica,
    ServiceRevision,
)
from aicenter.client.transfer import Progress, PullReport, TransferError

__all__ = [
    "UNSET",
    "AcceleratorType",
    "ApiError",
    "AuditEvent",
    "Balance",
    "BillingStats",
    "Build",
    "Client",
    "ConnectionFailed",
    "CreatedServiceKey",
    "FileInfo",
    "FsckReport",
    "GcReport",
    "Health",
    "Item",
    "Job",
    "JobEvent",
    "JobReplica",
    "JobTemplate",
    "LatestValue",
    "LedgerEntry",
    "LoginResult",
    "Member",
    "MyWorkspace",
    "Node",
    "NodeAccelerator",
    "Notebook",
    "NotebookSaved",
    "NotebookSsh",
    "Page",
    "Pool",
    "Progress",
    "PullReport",
    "Quota",
    "Report",
    "ReportRow",
    "Series",
    "SeriesData",
    "SeriesPoint",
    "Service",
    "ServiceKey",
    "ServiceLoadPoint",
    "ServiceReplica",
    "ServiceRevision",
    "Spec",
    "SshKey",
    "StorageUsage",
    "Token",
    "TokenCreated",
    "TransferError",
    "Upload",
    "User",
    "Verification",
    "Version",
    "Workspace",
]
