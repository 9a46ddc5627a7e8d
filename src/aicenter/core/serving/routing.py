"""The gateway's route table, pure: what the data plane knows of every service, and its routing choices.

The control plane (``services.serving``) builds a ``RouteTable`` from the database every second or so; the gateway
(``aicenter.gateway.serving``) swaps it in whole and routes every request from it, so a request never touches the
database. A table is immutable: a request that started with one table finishes with it.

Routing a request is two choices:

1. **Which revision** (``choose_revision``): a request that names one (the ``X-Aicenter-Revision`` header, or the
   service's own A/B header with a value a revision is bound to) goes there; otherwise the traffic percentages
   split requests by a uniform draw.
2. **Which replica** of it (``least_outstanding``): the ready endpoint with the fewest requests in flight from
   this gateway, ties broken by the draw so that equal replicas share the load.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "REVISION_HEADER",
    "Endpoint",
    "RevisionLoad",
    "RevisionRoute",
    "RouteTable",
    "ServiceRoute",
    "ServingProtocol",
    "TokenInfo",
    "choose_revision",
    "least_outstanding",
]

REVISION_HEADER = "x-aicenter-revision"
"""A request that carries this header (a revision number) is routed to that revision, whatever its traffic."""


class ServingProtocol(StrEnum):
    """What a revision's replicas speak: the platform's model server (Open Inference Protocol v2), or a user's
    command serving HTTP itself (an OpenAI-compatible server; everything under ``v1/`` is passed through)."""

    V2 = "v2"
    COMMAND = "command"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One replica the gateway may send requests to.

    Attributes:
        replica_job_id: The replica's job (a service replica is a job of kind ``service``).
        host: Where the replica's port is published (the node's address; 127.0.0.1 for the local executor).
        port: Its published port.
        draining: Being scaled down or replaced: no new request goes to it, the ones in flight finish.
        token: Its serve token, sent with every request to it (``core.jobs.serving.SERVE_TOKEN_HEADER``): its port
            answers nothing else. "" for none. Kept out of ``repr`` (logs).
    """

    replica_job_id: int
    host: str
    port: int
    draining: bool = False
    token: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class RevisionRoute:
    """One revision of a service as the gateway routes to it.

    Attributes:
        revision_id: Its row id (load reports and activations name it).
        number: Its number within the service (1, 2, ...), what users and the revision header name.
        traffic: Its share of unpinned requests, in percent (the service's revisions sum to 100).
        protocol: What its replicas speak.
        ready_path: The readiness probe's path on a replica (``/v2/health/ready`` for the model server).
        endpoints: Its running replicas (ready or not: the gateway probes each before sending it requests).
        header_value: The value of the service's A/B header that routes to this revision ("" for none).
        max_replicas: 0 means it may be scaled to zero, and so the activator may hold requests for it.
        min_replicas: Its floor.
        activation_timeout_s: How long a held request waits for a replica before 503.
        max_held: How many requests the activator holds for it at most (more get 503 at once).
    """

    revision_id: int
    number: int
    traffic: int
    protocol: ServingProtocol = ServingProtocol.V2
    ready_path: str = "/v2/health/ready"
    endpoints: tuple[Endpoint, ...] = ()
    header_value: str = ""
    min_replicas: int = 0
    max_replicas: int = 1
    activation_timeout_s: float = 60.0
    max_held: int = 1000


@dataclass(frozen=True, slots=True)
class ServiceRoute:
    """One service as the gateway sees it.

    Attributes:
        service_id: Its row id.
        workspace: The workspace's name (the first path segment under ``/serve/``).
        workspace_id: The workspace whose members' tokens are accepted.
        name: The service's name (the second segment; also the model name in V2 paths).
        revisions: Its revisions that take traffic or are pinned by header, by number.
        key_hashes: sha256 hex digests of its live API keys.
        ab_header: The request header (lower case) whose value picks a revision ("" for none).
        max_body_bytes: Larger request bodies get 413.
        stopped: Stopped by its owner or an admin: every request gets 503.
    """

    service_id: int
    workspace: str
    workspace_id: int
    name: str
    revisions: tuple[RevisionRoute, ...]
    key_hashes: frozenset[str] = frozenset()
    ab_header: str = ""
    max_body_bytes: int = 64 * 1024 * 1024
    stopped: bool = False

    def revision(self, number: int) -> RevisionRoute | None:
        return next((r for r in self.revisions if r.number == number), None)


@dataclass(frozen=True, slots=True)
class RouteTable:
    """Every service, by ``(workspace, service name)``; built whole and swapped in whole."""

    services: Mapping[tuple[str, str], ServiceRoute] = field(default_factory=dict)
    version: int = 0

    def get(self, workspace: str, name: str) -> ServiceRoute | None:
        return self.services.get((workspace, name))


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What a user token (not a service key) resolves to: the gateway lets members of the service's workspace pass.

    Attributes:
        user_id: The token's user.
        workspace_ids: The workspaces the user is a member of.
    """

    user_id: int
    workspace_ids: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class RevisionLoad:
    """What one gateway saw of a revision between two ``take_load`` calls (the autoscaler's and drain's input).

    Concurrency counts the requests in flight at its replicas plus those held by the activator, as Knative's
    KPA does: a held request is demand the replicas do not see yet.

    Attributes:
        revision_id: The revision.
        window_s: The seconds the numbers cover (since the previous call).
        average_concurrency: Time-weighted average of (in flight + held) over the window.
        peak_concurrency: Its maximum in the window.
        requests: Requests finished in the window (answered, refused with 503 after holding, or failed).
        errors: Those that ended in a 5xx produced by the gateway or a replica.
        held: Requests held by the activator now.
        in_flight: Requests in flight now, per replica job id (a draining replica is idle once it reads 0).
        latency_p50_s: Median time to the response's start of the window's requests (None: no request).
        latency_p99_s: Its 99th percentile.
    """

    revision_id: int
    window_s: float
    average_concurrency: float
    peak_concurrency: int
    requests: int
    errors: int
    held: int
    in_flight: Mapping[int, int] = field(default_factory=dict)
    latency_p50_s: float | None = None
    latency_p99_s: float | None = None


def choose_revision(
    service: ServiceRoute, *, pinned: str | None, ab_value: str | None, draw: float
) -> RevisionRoute | None:
    """The revision a request goes to.

    Args:
        service: The service.
        pinned: The ``X-Aicenter-Revision`` header's value, if any (a revision number).
        ab_value: The value of the service's A/B header in the request, if any.
        draw: A uniform number in [0, 1) (the caller's random draw).

    Returns:
        The revision, or None when a pinned revision does not exist (the caller answers 404) or nothing takes
        traffic.
    """
    if pinned is not None:
        try:
            return service.revision(int(pinned.strip()))
        except ValueError:
            return None
    if ab_value is not None:
        for revision in service.revisions:
            if revision.header_value and revision.header_value == ab_value:
                return revision
    point = draw * 100.0
    upto = 0.0
    chosen = None
    for revision in service.revisions:
        if revision.traffic <= 0:
            continue
        upto += revision.traffic
        chosen = revision
        if point < upto:
            return revision
    return chosen  # rounding: the last revision with traffic


def least_outstanding(
    endpoints: Sequence[Endpoint],
    outstanding: Callable[[Endpoint], int],
    *,
    ready: Callable[[Endpoint], bool],
    draw: float,
    exclude: frozenset[int] = frozenset(),
) -> Endpoint | None:
    """The ready, not draining endpoint with the fewest requests in flight (ties: the draw picks), or None.

    Args:
        endpoints: The revision's endpoints.
        outstanding: Requests in flight at an endpoint from this gateway.
        ready: Whether the gateway saw the endpoint ready.
        draw: A uniform number in [0, 1) breaking ties.
        exclude: Replica job ids already tried for this request (a retry goes elsewhere).
    """
    best: list[Endpoint] = []
    least = 0
    for endpoint in endpoints:
        if endpoint.draining or endpoint.replica_job_id in exclude or not ready(endpoint):
            continue
        count = outstanding(endpoint)
        if not best or count < least:
            best, least = [endpoint], count
        elif count == least:
            best.append(endpoint)
    if not best:
        return None
    return best[min(int(draw * len(best)), len(best) - 1)]
