"""Two real server processes (`aicenter up` on two ports) on one PostgreSQL database, controllers enabled:
every replica is launched exactly once. Each job appends its id to a shared file; the file is counted."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.slow]

JOBS = 10
DEADLINE_S = 180.0


@pytest.fixture
def shared_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """One PostgreSQL database, jobs directory and store for both servers; both reconcile every 0.2 s."""
    with fresh_database("aicenter_two") as url:
        yield {
            "AICENTER_DATABASE_URL": url,
            "AICENTER_JOBS_DIR": str(tmp_path / "jobs"),
            "AICENTER_STORE_ROOT": str(tmp_path / "store"),
            "AICENTER_RECONCILE_INTERVAL_S": "0.2",
            "AICENTER_SCHEDULE_INTERVAL_S": "0.2",
        }


def _headers(url: str) -> dict[str, str]:
    response = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def test_two_servers_launch_every_replica_exactly_once(tmp_path: Path, shared_env: dict[str, str]) -> None:
    first = Server(tmp_path / "home-a", env=shared_env).start()
    second = Server(tmp_path / "home-b", env=shared_env).start()
    try:
        servers = [(first.url, _headers(first.url)), (second.url, _headers(second.url))]
        ids = []
        for i in range(JOBS):
            url, headers = servers[i % 2]
            # Into the job's own output dir (shared by its replicas): a sandboxed job sees no other host path.
            code = (
                "import os; open(os.path.join(os.environ['AICENTER_OUTPUT_DIR'], 'marks.txt'), 'a')"
                ".write(os.environ['AICENTER_JOB_ID'] + chr(10))"
            )
            spec = {
                "name": f"once-{i}",
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "resources": {"cpu": "50m", "memory": "128Mi"},
                        "command": [sys.executable, "-c", code],
                    }
                ],
            }
            response = httpx.post(f"{url}/api/v1/jobs", json={"spec": spec}, headers=headers, timeout=30)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])

        url, headers = servers[0]
        deadline = time.monotonic() + DEADLINE_S
        while True:
            statuses = {i: httpx.get(f"{url}/api/v1/jobs/{i}", headers=headers, timeout=10).json() for i in ids}
            if all(j["status"] in ("succeeded", "failed", "stopped") for j in statuses.values()):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"timed out: {[j['status'] for j in statuses.values()]}")
            time.sleep(0.25)
        assert {j["status"] for j in statuses.values()} == {"succeeded"}
        output = tmp_path / "jobs"
        counts = Counter(
            int(line) for i in ids for line in (output / str(i) / "output" / "marks.txt").read_text().split()
        )
        assert counts == Counter(dict.fromkeys(ids, 2)), "every replica runs exactly once"  # 2 replicas per job
        for job in statuses.values():
            detail = httpx.get(f"{url}/api/v1/jobs/{job['id']}", headers=headers, timeout=10).json()
            assert [(r["attempt"], r["status"]) for r in detail["replicas"]] == [(0, "succeeded")] * 2
            assert [e["to_status"] for e in detail["events"]].count("starting") == 1
    finally:
        for server in (first, second):
            if server.proc is not None:
                server.stop()
