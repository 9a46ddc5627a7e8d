"""`kill -9` of a real server with 20 running jobs, then `aicenter up` again: every job completes exactly once.

Each job sleeps 3-8 s and appends its id to a shared file. The server dies while they run (its replicas keep
running: the launchers are not its children); the restarted server re-adopts them, collects the exits of those
that ended meanwhile, and finishes every job. Run on SQLite (embedded) and on PostgreSQL.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server
from tests.support.postgres import fresh_database

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOBS = 20
DEADLINE_S = 180.0


@pytest.fixture(params=["sqlite", "postgres"])
def server_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Settings of the server under test: SQLite in its home, or a fresh PostgreSQL database."""
    env = {"AICENTER_JOBS_DIR": str(tmp_path / "jobs"), "AICENTER_STOP_GRACE_S": "5"}
    if request.param == "sqlite":
        yield env
        return
    with fresh_database("aicenter_e2e") as url:
        yield {**env, "AICENTER_DATABASE_URL": url}


def _login(url: str) -> dict[str, str]:
    response = httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _wait(what: str, check: Any, server: Server) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{server.log()}")
        time.sleep(0.25)


def test_kill_9_with_running_jobs_loses_and_duplicates_nothing(tmp_path: Path, server_env: dict[str, str]) -> None:
    home = tmp_path / "home"
    server = Server(home, env=server_env).start()
    try:
        headers = _login(server.url)
        ids = []
        for i in range(JOBS):
            seconds = 3 + i % 6
            code = (
                f"import os, time; time.sleep({seconds}); "
                # Into its own output dir: a sandboxed job sees no other host path.
                "open(os.path.join(os.environ['AICENTER_OUTPUT_DIR'], 'marks.txt'), 'a')"
                ".write(os.environ['AICENTER_JOB_ID'] + chr(10))"
            )
            spec = {
                "name": f"sleep-{i}",
                "tasks": [
                    {
                        "name": "worker",
                        "resources": {"cpu": "50m", "memory": "128Mi"},
                        "command": [sys.executable, "-c", code],
                    }
                ],
            }
            response = httpx.post(f"{server.url}/api/v1/jobs", json={"spec": spec}, headers=headers, timeout=30)
            assert response.status_code == 201, response.text
            ids.append(response.json()["id"])

        def running() -> bool:
            # Kill while some run: the rest are at every other stage (queued, scheduled, starting, done).
            statuses = [
                httpx.get(f"{server.url}/api/v1/jobs/{i}", headers=headers, timeout=10).json()["status"] for i in ids
            ]
            return statuses.count("running") >= 5

        _wait("the jobs to run", running, server)
    finally:
        assert server.proc is not None
        server.proc.kill()  # kill -9: no shutdown, no lease released, no status written
        server.proc.wait(timeout=30)
        server.proc = None

    restarted = Server(home, env=server_env).start()
    try:
        headers = _login(restarted.url)

        def finished() -> dict[int, str] | None:
            statuses = {
                i: httpx.get(f"{restarted.url}/api/v1/jobs/{i}", headers=headers, timeout=10).json()["status"]
                for i in ids
            }
            return statuses if all(s in ("succeeded", "failed", "stopped") for s in statuses.values()) else None

        statuses = _wait("every job to finish after the restart", finished, restarted)
        assert set(statuses.values()) == {"succeeded"}, statuses
        jobs_dir = Path(server_env["AICENTER_JOBS_DIR"])
        counts = Counter(
            int(line) for i in ids for line in (jobs_dir / str(i) / "output" / "marks.txt").read_text().split()
        )
        assert counts == Counter(ids), f"each job must run exactly once: {counts}"
        for job_id in ids:
            detail = httpx.get(f"{restarted.url}/api/v1/jobs/{job_id}", headers=headers, timeout=10).json()
            [replica] = detail["replicas"]
            assert (replica["attempt"], replica["status"]) == (0, "succeeded")
            assert replica["started_at"] is not None
            assert replica["finished_at"] is not None
    finally:
        restarted.stop()
