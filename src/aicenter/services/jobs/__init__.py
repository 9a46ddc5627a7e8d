"""Training jobs: submission, the one status transition function, queries, stop, templates, logs access, the
API token of a job's replicas, and the reconciler's reads and writes (``load_jobs``, ``apply_steps``).

Every status change of a job goes through ``transition``, every replica status change through
``change_replica``. ``register_usage`` plugs the jobs' quota usage and catalog "in use" checks into those
areas; the app factory calls it (explicitly: an import must not change other areas' behaviour).
"""

from aicenter.services.jobs._lifecycle import (
    SYSTEM,
    delete_job,
    force_stop,
    record_created,
    request_stop,
    stop_job,
    transition,
)
from aicenter.services.jobs._metrics import (
    DEFAULT_POINTS,
    MAX_POINTS,
    JobMetrics,
    MetricPoint,
    MetricSeries,
    final_metrics,
    job_metrics,
    metric_files,
    read_job_metrics,
)
from aicenter.services.jobs._queries import (
    LogTarget,
    get_job,
    list_events,
    list_jobs,
    list_replicas,
    load_job,
    log_target,
    read_logs,
)
from aicenter.services.jobs._reconcile import (
    Applied,
    JobInfo,
    JobState,
    NodeRef,
    ReplicaInfo,
    Work,
    any_job_to_reconcile,
    apply_steps,
    claim_jobs,
    load_jobs,
    replica_plans,
)
from aicenter.services.jobs._replicas import change_replica
from aicenter.services.jobs._runtime import (
    HOST_IMAGE,
    Content,
    ImageNotReady,
    JobDirs,
    job_dirs,
    load_content,
    materialize,
    python_bin,
)
from aicenter.services.jobs._submit import Amounts, load_spec, resolve_workspace, resubmit_job, submit_job
from aicenter.services.jobs._templates import (
    create_template,
    create_template_from_job,
    delete_template,
    get_template,
    list_templates,
    submit_template,
    update_template,
)
from aicenter.services.jobs._tokens import issue_job_token, job_token_name
from aicenter.services.jobs._usage import register as register_usage
from aicenter.services.jobs._usage import replica_usage, versions_used_by_jobs
from aicenter.services.jobs._views import JobView, TemplateView, job_views, template_views

__all__ = [
    "DEFAULT_POINTS",
    "HOST_IMAGE",
    "MAX_POINTS",
    "SYSTEM",
    "Amounts",
    "Applied",
    "Content",
    "ImageNotReady",
    "JobDirs",
    "JobInfo",
    "JobMetrics",
    "JobState",
    "JobView",
    "LogTarget",
    "MetricPoint",
    "MetricSeries",
    "NodeRef",
    "ReplicaInfo",
    "TemplateView",
    "Work",
    "any_job_to_reconcile",
    "apply_steps",
    "change_replica",
    "claim_jobs",
    "create_template",
    "create_template_from_job",
    "delete_job",
    "delete_template",
    "final_metrics",
    "force_stop",
    "get_job",
    "get_template",
    "issue_job_token",
    "job_dirs",
    "job_metrics",
    "job_token_name",
    "job_views",
    "list_events",
    "list_jobs",
    "list_replicas",
    "list_templates",
    "load_content",
    "load_job",
    "load_jobs",
    "load_spec",
    "log_target",
    "materialize",
    "metric_files",
    "python_bin",
    "read_job_metrics",
    "read_logs",
    "record_created",
    "register_usage",
    "replica_plans",
    "replica_usage",
    "request_stop",
    "resolve_workspace",
    "resubmit_job",
    "stop_job",
    "submit_job",
    "submit_template",
    "template_views",
    "transition",
    "update_template",
    "versions_used_by_jobs",
]
