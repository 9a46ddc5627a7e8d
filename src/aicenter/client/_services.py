"""Inference services: deploy, list, inspect, update (new revisions), traffic, promote, rollback, scale, stop,
start, delete, API keys, load, events, replica logs, and a small Open Inference Protocol v2 call (:meth:`infer`).

A service's replicas are jobs of kind ``service``: their logs come through the jobs log API. The service itself
answers under ``<server>/serve/<workspace>/<service>/`` (the gateway), not under ``/api/v1``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from aicenter.client._base import PAGE_SIZE, UNSET, body, query
from aicenter.client._jobs import JobsMixin, SpecSource, spec_payload
from aicenter.client.alert_models import ClusterEvent
from aicenter.client.errors import ApiError, ConnectionFailed
from aicenter.client.inference import v2_outputs, v2_tensor
from aicenter.client.models import Page
from aicenter.client.service_models import CreatedServiceKey, Service, ServiceKey, ServiceLoadPoint

ServiceRef = Service | int | str


class ServicesMixin(JobsMixin):
    def deploy_service(self, spec: SpecSource, workspace_id: int | None = None) -> Service:
        """Deploy a model version as a service: its first revision starts one replica and takes all traffic
        once ready.

        Args:
            spec: The service: YAML or JSON text, a :class:`~pathlib.Path`, or a mapping with ``name``, ``model``
                (``name:version``), ``runtime``, ``resources``, ``env``, ``min_replicas``, ``max_replicas``,
                ``target_concurrency``, ``command``/``ready_path`` (custom servers), ...
            workspace_id: The workspace; default: the spec's ``workspace``, else my default workspace.

        Raises:
            ApiError: ``validation_failed`` naming the field; ``not_found`` for a model version I cannot see;
                ``conflict`` when the workspace already has a service of that name.
        """
        payload = body(spec=spec_payload(spec), workspace_id=workspace_id if workspace_id is not None else UNSET)
        return self._one(Service, "POST", "/services", json=payload)

    def list_services_page(
        self,
        *,
        workspace_id: int | None = None,
        name: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Service]:
        """One page of the services of my workspaces (platform admins: every workspace's), newest first."""
        params = query(workspace_id=workspace_id, name=name, status=status)
        return self._page(Service, "/services", params, limit=limit, cursor=cursor)

    def list_services(
        self, *, workspace_id: int | None = None, name: str | None = None, status: str | None = None
    ) -> Iterator[Service]:
        """Every matching service, fetched page by page as the iterator advances."""
        return self._iterate(
            lambda c: self.list_services_page(
                workspace_id=workspace_id, name=name, status=status, limit=PAGE_SIZE, cursor=c
            )
        )

    def service_id(self, service: ServiceRef, workspace_id: int | None = None) -> int:
        """The id of a service given as a :class:`Service`, an id, or a name (looked up in ``workspace_id``, else
        in all my workspaces, where a name found in several is refused rather than guessed)."""
        if isinstance(service, Service):
            return service.id
        if isinstance(service, int):
            return service
        bare = service.removeprefix("#")
        if bare.isdigit():
            return int(bare)
        found = [s for s in self.list_services(workspace_id=workspace_id, name=service) if s.name == service]
        if not found:
            where = f" in workspace {workspace_id}" if workspace_id is not None else ""
            raise ApiError(404, "not_found", f"no service named {service!r}{where}")
        if len(found) > 1:
            places = ", ".join(f"{s.workspace_name or s.workspace_id} (service {s.id})" for s in found)
            raise ApiError(
                409,
                "conflict",
                f"services named {service!r} exist in several workspaces: {places}; name the workspace or the id",
                {"service_ids": [s.id for s in found]},
            )
        return found[0].id

    def get_service(self, service: ServiceRef, workspace_id: int | None = None) -> Service:
        """A service with its revisions (traffic, state) and live replicas, by id or name."""
        return self._one(Service, "GET", f"/services/{self.service_id(service, workspace_id)}")

    def update_service(self, service: ServiceRef, spec: SpecSource) -> Service:
        """Deploy a new revision: the current one's spec with these changes (``model``, ``runtime``, ``env``, ...)
        and ``rollout``: ``{"strategy": "all" | "steps" | "canary", "canary_percent", "step_percent",
        "step_interval_s"}``. Traffic moves to it once it is ready."""
        sid = self.service_id(service)
        return self._one(Service, "PATCH", f"/services/{sid}", json={"spec": spec_payload(spec)})

    def set_traffic(self, service: ServiceRef, traffic: Mapping[int, int] | Mapping[str, int]) -> Service:
        """Split traffic between ready revisions: ``{1: 90, 2: 10}`` (percentages summing to 100)."""
        split = {str(k): int(v) for k, v in traffic.items()}
        return self._one(Service, "PUT", f"/services/{self.service_id(service)}/traffic", json={"traffic": split})

    def promote_service(self, service: ServiceRef) -> Service:
        """Send all traffic to the revision rolling out; the old one drains and stops (``invalid_transition``
        when nothing is rolling out)."""
        return self._one(Service, "POST", f"/services/{self.service_id(service)}/promote")

    def rollback_service(self, service: ServiceRef) -> Service:
        """Retire the revision rolling out: all traffic returns to the stable revision at once."""
        return self._one(Service, "POST", f"/services/{self.service_id(service)}/rollback")

    def scale_service(
        self,
        service: ServiceRef,
        *,
        min_replicas: int | None = None,
        max_replicas: int | None = None,
        target_concurrency: float | None = None,
    ) -> Service:
        """Change the scale bounds (``min_replicas=0`` allows scale to zero) or the target concurrency per
        replica; the values left None stay as they are."""
        payload = {
            k: v
            for k, v in {
                "min_replicas": min_replicas,
                "max_replicas": max_replicas,
                "target_concurrency": target_concurrency,
            }.items()
            if v is not None
        }
        return self._one(Service, "POST", f"/services/{self.service_id(service)}/scale", json=payload)

    def stop_service(self, service: ServiceRef) -> Service:
        """Stop it: replicas drain and stop; requests get 503 until it is started again."""
        return self._one(Service, "POST", f"/services/{self.service_id(service)}/stop")

    def start_service(self, service: ServiceRef) -> Service:
        """Start a stopped service again."""
        return self._one(Service, "POST", f"/services/{self.service_id(service)}/start")

    def delete_service(self, service: ServiceRef) -> None:
        """Delete a stopped service (its replica jobs stay, with their machine time)."""
        self._json("DELETE", f"/services/{self.service_id(service)}")

    def list_service_keys(self, service: ServiceRef) -> list[ServiceKey]:
        """The service's live API keys: names and prefixes."""
        return self._array(ServiceKey, f"/services/{self.service_id(service)}/keys")

    def create_service_key(self, service: ServiceRef, name: str) -> CreatedServiceKey:
        """A new API key for the service; its ``key`` is shown this once (send it as ``Authorization: Bearer``)."""
        sid = self.service_id(service)
        return self._one(CreatedServiceKey, "POST", f"/services/{sid}/keys", json={"name": name})

    def revoke_service_key(self, service: ServiceRef, key_id: int) -> None:
        """Revoke a key: calls with it are refused within a second."""
        self._json("DELETE", f"/services/{self.service_id(service)}/keys/{key_id}")

    def service_load(self, service: ServiceRef, minutes: int = 60) -> list[ServiceLoadPoint]:
        """Requests, errors, concurrency and latency per revision over the last ``minutes`` (1..60)."""
        sid = self.service_id(service)
        return self._array(ServiceLoadPoint, f"/services/{sid}/load", query(minutes=minutes))

    def service_events_page(
        self, service: ServiceRef, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[ClusterEvent]:
        """One page of the service's events, newest first: deployed, updated, revisions ready or failed, traffic
        moves, scaling with the autoscaler's reason, stopped, started."""
        return self._page(ClusterEvent, f"/services/{self.service_id(service)}/events", {}, limit=limit, cursor=cursor)

    def service_events(self, service: ServiceRef, *, limit: int = 50) -> list[ClusterEvent]:
        """The service's latest ``limit`` events, newest first."""
        return self.service_events_page(service, limit=limit).items

    def service_logs(self, service: ServiceRef, *, job_id: int | None = None, follow: bool = False) -> Iterator[str]:
        """The log lines of the service's live replicas (jobs), one replica after the other, each line prefixed
        by ``[job <id>] `` when there are several; ``job_id`` picks one replica. Nothing from a replica that has
        not launched yet, nor when none runs.

        ``follow`` keeps reading (one replica only: give ``job_id`` when several run)."""
        detail = self.get_service(service)
        jobs = [r.job_id for r in detail.replicas if job_id is None or r.job_id == job_id]
        if job_id is not None and not jobs:
            raise ApiError(404, "not_found", f"job {job_id} is not a live replica of service {detail.name!r}")
        if follow and len(jobs) > 1:
            raise ApiError(
                422, "validation_failed", f"service {detail.name!r} has {len(jobs)} replicas: follow one (job_id)"
            )
        for job in jobs:
            prefix = f"[job {job}] " if len(jobs) > 1 else ""
            try:
                for line in self.job_logs(job, follow=follow):
                    yield prefix + line
            except ApiError as exc:
                if exc.code != "conflict":  # conflict: this replica has not launched, so it has no log yet
                    raise

    def infer(
        self,
        service: ServiceRef,
        inputs: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        outputs: Sequence[str] | None = None,
        api_key: str | None = None,
        raw: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """One Open Inference Protocol v2 JSON request to the service, through the gateway
        (``<server>/serve/<workspace>/<service>/v2/models/<service>/infer``).

        Args:
            service: The service (object, id or name).
            inputs: Input name -> numpy array or nested list; or ready v2 input tensors (dicts with ``name``,
                ``shape``, ``datatype``, ``data``).
            outputs: Only these outputs.
            api_key: A service API key; default: the client's own token.
            raw: Return the answer's JSON as sent instead of the outputs by name.
            timeout: Seconds to wait (default: the client's).

        Returns:
            Output name -> numpy array (a list when numpy is not importable); with ``raw`` the JSON answer.

        Raises:
            ApiError: The gateway's or the model server's refusal (400 bad input, 401/403, 404, 503 no ready
                replica, ...), with its message.
        """
        detail = service if isinstance(service, Service) and service.url else self.get_service(service)
        if isinstance(inputs, Mapping):
            tensors = [v2_tensor(name, value) for name, value in inputs.items()]
        else:
            tensors = [dict(t) for t in inputs]
        request: dict[str, Any] = {"inputs": tensors}
        if outputs:
            request["outputs"] = [{"name": n} for n in outputs]
        answer = self.infer_raw(detail, request, api_key=api_key, timeout=timeout)
        return answer if raw else v2_outputs(answer)

    def infer_raw(
        self,
        service: ServiceRef,
        request: Mapping[str, Any],
        *,
        api_key: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Post a v2 inference request body as given; the JSON answer as sent."""
        detail = service if isinstance(service, Service) and service.url else self.get_service(service)
        url = f"{self.base_url}{detail.url.rstrip('/')}/v2/models/{detail.name}/infer"
        token = api_key or self.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            response = self._http.post(
                url, json=dict(request), headers=headers, timeout=timeout if timeout is not None else UNSET_TIMEOUT
            )
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(self.base_url, f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        if response.is_error:
            raise _inference_error(response)
        try:
            return response.json()
        except ValueError as exc:
            raise ApiError(response.status_code, "bad_response", f"{url}: the answer is not JSON") from exc


UNSET_TIMEOUT: Any = httpx.USE_CLIENT_DEFAULT


def _inference_error(response: httpx.Response) -> ApiError:
    """The gateway and the model server answer ``{"error": "..."}`` (the v2 protocol's form); the API's own
    ``{"error": {"code", "message"}}`` is read too."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        return ApiError(response.status_code, str(error.get("code") or "error"), str(error.get("message") or ""))
    if isinstance(error, str):
        return ApiError(response.status_code, f"http_{response.status_code}", error)
    text = response.text.strip().splitlines()[0][:200] if response.text.strip() else response.reason_phrase
    return ApiError(response.status_code, f"http_{response.status_code}", text)
