"""Training jobs: submission, the one status transition function, queries, stop, templates, logs access, and
the API token of a job's replicas.

Every status change of a job goes through ``transition`` (controllers call it too). Importing this package
registers the jobs' quota usage and catalog "in use" hooks (``_usage.py``).
"""

from aicenter.services.jobs._lifecycle import (
    SYSTEM,
    delete_job,
    force_stop,
    record_created,
    request_stop,
    requested_stop_reason,
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
from aicenter.services.jobs._usage import register as _register_usage
from aicenter.services.jobs._usage import replica_usage, versions_used_by_jobs
from aicenter.services.jobs._views import JobView, TemplateView, job_views, template_views

_register_usage()

__all__ = [
    "DEFAULT_POINTS",
    "MAX_POINTS",
    "SYSTEM",
    "Amounts",
    "JobMetrics",
    "JobView",
    "LogTarget",
    "MetricPoint",
    "MetricSeries",
    "TemplateView",
    "create_template",
    "create_template_from_job",
    "delete_job",
    "delete_template",
    "final_metrics",
    "force_stop",
    "get_job",
    "get_template",
    "issue_job_token",
    "job_metrics",
    "job_token_name",
    "job_views",
    "list_events",
    "list_jobs",
    "list_replicas",
    "list_templates",
    "load_job",
    "load_spec",
    "log_target",
    "metric_files",
    "read_job_metrics",
    "read_logs",
    "record_created",
    "replica_usage",
    "request_stop",
    "requested_stop_reason",
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
