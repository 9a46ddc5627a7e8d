"""Every ORM model, imported here so that ``Base.metadata`` is complete for Alembic and tests."""

from aicenter.db.models.alerts import Alert, AlertChannel, AlertRule, ClusterEvent, Notification, Silence
from aicenter.db.models.audit import AuditEvent
from aicenter.db.models.billing import BillingMeter, BillingPolicy, BillingRollup, LedgerEntry
from aicenter.db.models.catalog import CatalogItem, CatalogVersion, ImageBuild, UploadSession, VersionFile
from aicenter.db.models.inventory import AcceleratorType, Node, Pool, PoolGrant, ResourceSpec
from aicenter.db.models.jobs import Job, JobEvent, JobTemplate, Replica
from aicenter.db.models.lease import Lease
from aicenter.db.models.monitoring import MetricIngestCursor, MetricPoint, MetricRollup, MetricSeries
from aicenter.db.models.notebooks import Notebook
from aicenter.db.models.serving import Service, ServiceKey, ServiceLoad, ServiceReplica, ServiceRevision
from aicenter.db.models.ssh_keys import SshKey
from aicenter.db.models.tenancy import ApiToken, LoginAttempt, Membership, Quota, User, Workspace

__all__ = [
    "AcceleratorType",
    "Alert",
    "AlertChannel",
    "AlertRule",
    "ApiToken",
    "AuditEvent",
    "BillingMeter",
    "BillingPolicy",
    "BillingRollup",
    "CatalogItem",
    "CatalogVersion",
    "ClusterEvent",
    "ImageBuild",
    "Job",
    "JobEvent",
    "JobTemplate",
    "Lease",
    "LedgerEntry",
    "LoginAttempt",
    "Membership",
    "MetricIngestCursor",
    "MetricPoint",
    "MetricRollup",
    "MetricSeries",
    "Node",
    "Notebook",
    "Notification",
    "Pool",
    "PoolGrant",
    "Quota",
    "Replica",
    "ResourceSpec",
    "Service",
    "ServiceKey",
    "ServiceLoad",
    "ServiceReplica",
    "ServiceRevision",
    "Silence",
    "SshKey",
    "UploadSession",
    "User",
    "VersionFile",
    "Workspace",
]
