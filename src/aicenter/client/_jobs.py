"""Training jobs: submit, list, inspect, stop, resubmit, delete, read logs; and job templates.

A spec is given as YAML/JSON text, a path to a file, or a mapping; the server parses all three with one parser,
so a malformed spec raises :class:`~aicenter.client.ApiError` ``validation_failed`` whose ``field`` names the
exact place (``tasks[0].resources.memory``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, _error_from, body, query
from aicenter.client.errors import ConnectionFailed
from aicenter.client.models import Job, JobEvent, JobMetrics, JobReplica, JobTemplate, MetricPoint, Page

SpecSource = str | Path | Mapping[str, Any]


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The ``data`` of each message of a server-sent event stream, until its ``end`` event.

    Comments (the server's keep-alive pings) and fields other than ``data`` and ``event`` are skipped.
    """
    event: str | None = None
    data: list[str] | None = None
    for line in lines:
        if not line:  # a blank line ends an event
            if event == "end":
                return
            if data is not None:
                yield "\n".join(data)
            event, data = None, None
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data = [*(data or []), value]
        elif name == "event":
            event = value


def spec_payload(spec: SpecSource) -> str | dict[str, Any]:
    """What the API's ``spec`` field takes: the text of a file, text as given, or a plain dict."""
    if isinstance(spec, Path):
        return spec.read_text(encoding="utf-8")
    if isinstance(spec, str):
        return spec
    return dict(spec)


class JobsMixin(BaseClient):
    # -- jobs --------------------------------------------------------------------------------------------------

    def submit_job(self, spec: SpecSource, overrides: Sequence[str] = (), workspace_id: int | None = None) -> Job:
        """Submit a job; it comes back ``queued`` (or ``pending`` while its references resolve).

        Args:
            spec: The job spec: YAML or JSON text, a :class:`~pathlib.Path` to a spec file, or a mapping.
            overrides: ``PATH=VALUE`` changes applied before the spec is checked (``tasks[0].replicas=4``).
            workspace_id: The workspace; default: the spec's ``workspace``, else my default workspace.

        Raises:
            ApiError: ``validation_failed`` naming the field; ``not_found`` for an image, algorithm or dataset
                version I cannot see; ``quota_exceeded`` for a job larger than the workspace may ever run.
        """
        payload = body(
            spec=spec_payload(spec),
            overrides=list(overrides),
            workspace_id=workspace_id if workspace_id is not None else UNSET,
        )
        return self._one(Job, "POST", "/jobs", json=payload)

    def list_jobs_page(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workspace_id: int | None = None,
        user: str | None = None,
        kind: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Job]:
        """One page of jobs, newest first: of my workspaces (platform admins: of every workspace).

        Args:
            status: A status (``running``) or several (``["queued", "running"]``).
            workspace_id: Only this workspace's jobs.
            user: Only the jobs of the user with this name.
            kind: ``train``, ``notebook`` or ``trial``.
            name: Only jobs of this name (names need not be unique; newest first).
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        statuses = status if status is None or isinstance(status, str) else ",".join(status)
        params = query(status=statuses, workspace_id=workspace_id, user=user, kind=kind, name=name)
        return self._page(Job, "/jobs", params, limit=limit, cursor=cursor)

    def list_jobs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workspace_id: int | None = None,
        user: str | None = None,
        kind: str | None = None,
        name: str | None = None,
    ) -> Iterator[Job]:
        """Every matching job, fetched page by page as the iterator advances."""
        return self._iterate(
            lambda c: self.list_jobs_page(
                status=status, workspace_id=workspace_id, user=user, kind=kind, name=name, limit=PAGE_SIZE, cursor=c
            )
        )

    def get_job(self, job_id: int) -> Job:
        """A job with every replica attempt (node, devices, status) and its events."""
        return self._one(Job, "GET", f"/jobs/{job_id}")

    def job_events(self, job_id: int) -> list[JobEvent]:
        """The job's status changes, oldest first."""
        return self._array(JobEvent, f"/jobs/{job_id}/events")

    def job_replicas(self, job_id: int) -> list[JobReplica]:
        """Every replica attempt of the job: by attempt, then rank order."""
        return self._array(JobReplica, f"/jobs/{job_id}/replicas")

    def stop_job(self, job_id: int) -> Job:
        """Ask the job to stop: its replicas get SIGTERM, then SIGKILL after the grace period.

        Raises:
            ApiError: ``invalid_transition`` (409) when the job has already finished.
        """
        return self._one(Job, "POST", f"/jobs/{job_id}/stop")

    def force_stop_job(self, job_id: int) -> Job:
        """Stop any job as a platform admin (failure reason ``stopped_by_admin``)."""
        return self._one(Job, "POST", f"/jobs/{job_id}/force-stop")

    def resubmit_job(self, job_id: int, overrides: Sequence[str] = ()) -> Job:
        """Submit a new job with the (normalized) spec of job ``job_id``, changed by ``overrides``."""
        return self._one(Job, "POST", f"/jobs/{job_id}/resubmit", json={"overrides": list(overrides)})

    def delete_job(self, job_id: int) -> None:
        """Delete a finished job and its records (``invalid_transition`` while it is still active)."""
        self._json("DELETE", f"/jobs/{job_id}")

    def job_logs(
        self,
        job_id: int,
        task: str | None = None,
        replica: int | None = None,
        follow: bool = False,
        *,
        attempt: int | None = None,
        since: int | None = None,
    ) -> Iterator[str]:
        """The output lines of one replica, each prefixed by its UTC timestamp, without the newline.

        Args:
            job_id: The job.
            task: The task (default: the job's first).
            replica: The replica index within the task (default 0).
            follow: Keep reading until the replica ends (the iterator then stops), like ``tail -f``.
            attempt: Which attempt (default: the latest launched one).
            since: Start at this byte offset of the log.
        """
        params = query(task=task, replica=replica, attempt=attempt, since=since)
        # Followed, the log comes as server-sent events: the server's keep-alive comments keep a quiet job's
        # stream open through proxies that close idle connections, which a plain text stream cannot do.
        path = f"/jobs/{job_id}/logs/stream" if follow else f"/jobs/{job_id}/logs"
        # A followed log is quiet for as long as the job prints nothing: no read timeout then.
        timeout = httpx.Timeout(self._http.timeout.connect, read=None) if follow else self._http.timeout
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        request = self._http.build_request("GET", path, params=params, headers=headers, timeout=timeout)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        try:
            if response.is_error:
                response.read()
                raise _error_from(response)
            yield from sse_data(response.iter_lines()) if follow else response.iter_lines()
        except httpx.TransportError as exc:  # the connection broke while the log was streamed
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        finally:
            response.close()

    # -- metrics ----------------------------------------------------------------------------------------------

    def job_metrics(
        self,
        job_id: int,
        *,
        task: str | None = None,
        replica: int | None = None,
        name: str | None = None,
        since: datetime | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> JobMetrics:
        """One page of what a replica reported with ``aicenter.runtime.report``, and the latest value of each metric.

        Args:
            job_id: The job.
            task: The task (default: the first replica in rank order that reported anything).
            replica: The replica index within the task (default 0).
            name: Only this metric's series.
            since: Only points reported at or after this time.
            cursor: ``next_cursor`` (the next page) or ``cursor`` (what was reported since) of an earlier page.
            limit: Most points in the page, over all series (server default 2000, at most 10000).
        """
        params = query(
            task=task,
            replica=replica,
            name=name,
            since=since.isoformat() if since else None,
            cursor=cursor,
            limit=limit,
        )
        return self._one(JobMetrics, "GET", f"/jobs/{job_id}/metrics", params=params)

    def job_metric_series(
        self, job_id: int, name: str, *, task: str | None = None, replica: int | None = None
    ) -> Iterator[MetricPoint]:
        """Every point of metric ``name`` reported so far, oldest first, fetched page by page."""
        cursor: str | None = None
        while True:
            page = self.job_metrics(job_id, task=task, replica=replica, name=name, cursor=cursor)
            for series in page.series:
                yield from series.points
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # -- templates ---------------------------------------------------------------------------------------------

    def list_templates_page(
        self, *, workspace_id: int | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[JobTemplate]:
        """One page of job templates of my workspaces (or of ``workspace_id``), by name."""
        return self._page(JobTemplate, "/job-templates", query(workspace_id=workspace_id), limit=limit, cursor=cursor)

    def list_templates(self, *, workspace_id: int | None = None) -> Iterator[JobTemplate]:
        return self._iterate(lambda c: self.list_templates_page(workspace_id=workspace_id, limit=PAGE_SIZE, cursor=c))

    def create_template(
        self, name: str, spec: SpecSource, *, workspace_id: int | None = None, description: str = UNSET
    ) -> JobTemplate:
        """Save a spec (checked like a submission, references resolved only when submitted) as template ``name``
        of a workspace (default: the spec's ``workspace``, else my default workspace).

        Raises:
            ApiError: ``conflict`` when the workspace already has a template of that name.
        """
        payload = body(
            name=name,
            spec=spec_payload(spec),
            workspace_id=workspace_id if workspace_id is not None else UNSET,
            description=description,
        )
        return self._one(JobTemplate, "POST", "/job-templates", json=payload)

    def save_job_as_template(self, job_id: int, name: str, *, description: str = UNSET) -> JobTemplate:
        """Save the spec of job ``job_id`` as template ``name`` of the job's workspace."""
        payload = body(name=name, description=description)
        return self._one(JobTemplate, "POST", f"/jobs/{job_id}/template", json=payload)

    def get_template(self, template_id: int) -> JobTemplate:
        return self._one(JobTemplate, "GET", f"/job-templates/{template_id}")

    def update_template(
        self, template_id: int, *, name: str = UNSET, description: str = UNSET, spec: SpecSource = UNSET
    ) -> JobTemplate:
        """Rename a template, or change its description or spec (checked again); what is left out stays."""
        payload = body(name=name, description=description, spec=spec_payload(spec) if spec is not UNSET else UNSET)
        return self._one(JobTemplate, "PATCH", f"/job-templates/{template_id}", json=payload)

    def delete_template(self, template_id: int) -> None:
        self._json("DELETE", f"/job-templates/{template_id}")

    def submit_template(self, template_id: int, overrides: Sequence[str] = ()) -> Job:
        """Submit a job from a template, changed by ``overrides``; it goes to the template's workspace."""
        return self._one(Job, "POST", f"/job-templates/{template_id}/submit", json={"overrides": list(overrides)})
