"""Helpers of the serving journeys (tests/e2e/test_serving_*.py): polling for what the platform does in the
background, a service's revisions as the API shows them, and a steady load that counts every answer."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from tests.e2e.polling import DEADLINE_S, wait

__all__ = ["DEADLINE_S", "SteadyLoad", "revision_replicas", "traffic", "user_http", "wait"]


def user_http(world: dict[str, Any], user: str) -> httpx.Client:
    """The API as ``user`` (``world["tokens"]``), at ``world["server"]``."""
    token = world["tokens"][user]
    return httpx.Client(base_url=world["server"].url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def traffic(http: httpx.Client, sid: int) -> list[int]:
    """Each revision's share of the traffic now, by revision number."""
    return [r["traffic"] for r in http.get(f"/api/v1/services/{sid}").json()["revisions"]]


def revision_replicas(http: httpx.Client, sid: int) -> list[tuple[str, int]]:
    """Each revision's state and its live replicas."""
    svc = http.get(f"/api/v1/services/{sid}").json()
    return [(r["state"], sum(1 for p in svc["replicas"] if p["revision"] == r["number"])) for r in svc["revisions"]]


V2_LIN = ("v2/models/lin/infer", {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 0.5]}]})


class SteadyLoad:
    """Requests one after another from two threads until stopped; every answer's status and revision counted,
    in order (``served``: the revision of each successful answer, as it came)."""

    def __init__(self, base: str, path: str, key: str, request: tuple[str, dict[str, Any]] = V2_LIN) -> None:
        self.base, self.path, self.key = base, path, key
        self.route, self.body = request
        self.statuses: dict[int, int] = {}
        self.revisions: dict[str, int] = {}
        self.served: list[str] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(2)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, headers={"X-Api-Key": self.key}, timeout=60) as client:
            while not self._stop.is_set():
                try:
                    r = client.post(f"{self.path}/{self.route}", json=self.body)
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                revision = r.headers.get("x-aicenter-revision", "?")
                with self._lock:
                    self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
                    if r.status_code != 200:
                        self.failures.append(f"{r.status_code} {r.text[:200]}")
                    else:
                        self.served.append(revision)
                    self.revisions[revision] = self.revisions.get(revision, 0) + 1
                time.sleep(0.02)

    def __enter__(self) -> SteadyLoad:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=70)
