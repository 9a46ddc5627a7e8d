"""`kill -9` of whole `aicenter up` servers while they meter real work: no charge lost, none duplicated.

A server meters every second (AICENTER_BILLING_INTERVAL_S=1) while jobs run `sleep` on this host: a 2-replica
job and one job more after every restart, their copies starting and ending throughout. The server is killed
(SIGKILL, wherever it is: between passes, mid-transaction, mid-commit) at random moments several times and
started again on the same home and database; the replicas keep running meanwhile (their launchers are not its
children) and the next server re-adopts them. On PostgreSQL two servers then run at once on the one database
and one of them is killed. At the end `aicenter billing verify` exits 0, and this test checks independently,
from the replica records the API returns, that every copy's charges tile its run and equal the formula to the
cent, that no idempotency key appears twice, and that the balance equals the ledger.

(The meter-process kill test, three bare meters on one database, is tests/integration/controllers/
test_billing_kill.py.)
"""

from __future__ import annotations

import random
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.billing_support import Copy, check_charges, copies, ledger, wait, wait_closed
from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

KILLS = 4
SPECS = {"meter-a": ("1.5", "997.12"), "meter-b": ("0.333", "12345.5")}  # weight, coins per machine-hour


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """The servers' settings: the meter every second, SQLite in the home or a fresh PostgreSQL database."""
    env = {
        "AICENTER_BILLING_INTERVAL_S": "1",
        "AICENTER_JOBS_DIR": str(tmp_path / "jobs"),  # shared by the two servers on PostgreSQL
        "AICENTER_STOP_GRACE_S": "5",
    }
    if request.param == "postgres":
        env["AICENTER_DATABASE_URL"] = request.getfixturevalue("pg_url")
    return env


def _kill(server: Server) -> None:
    assert server.proc is not None
    server.proc.kill()  # kill -9: no shutdown, no lease released, no status written
    server.proc.wait(timeout=30)
    server.proc = None


def _submit(http: httpx.Client, name: str, spec: str, seconds: float, replicas: int = 1) -> dict[str, Any]:
    body = {
        "name": name,
        "tasks": [
            {
                "name": "worker",
                "replicas": replicas,
                "resources": {"spec": spec},
                "command": [sys.executable, "-c", f"import time; time.sleep({seconds})"],
            }
        ],
    }
    response = http.post("/api/v1/jobs", json={"spec": body})
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


def _ended(http: httpx.Client, job_ids: list[int]) -> dict[int, str] | None:
    statuses = {i: http.get(f"/api/v1/jobs/{i}").json()["status"] for i in job_ids}
    return statuses if all(s in ("succeeded", "failed", "stopped") for s in statuses.values()) else None


def _running_copies(http: httpx.Client, job_ids: list[int]) -> int:
    return sum(
        1
        for i in job_ids
        for r in http.get(f"/api/v1/jobs/{i}/replicas").json()
        if r["started_at"] and not r["finished_at"]
    )


def test_kill_9_of_servers_while_metering_charges_exactly_once(
    tmp_path: Path, database: dict[str, str], request: pytest.FixtureRequest
) -> None:
    began = time.monotonic()
    rng = random.Random(1509)
    server = Server(tmp_path / "home", env=database).start()
    second: Server | None = None
    token = httpx.post(f"{server.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD})
    headers = {"Authorization": f"Bearer {token.json()['token']}"}
    try:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            for name, (weight, price) in SPECS.items():
                created = http.post(
                    "/api/v1/specs",
                    json={
                        "name": name,
                        "cpu": "100m",
                        "memory": "128Mi",
                        "price_per_hour": price,
                        "billing_weight": weight,
                    },
                )
                assert created.status_code == 201, created.text
            first = _submit(http, "pair", "meter-a", 14, replicas=2)
            workspace_id = first["workspace_id"]
            recharge = {"kind": "recharge", "amount": "100.00", "reason": "e2e budget"}
            assert http.post(f"/api/v1/workspaces/{workspace_id}/ledger", json=recharge).status_code == 201
            jobs = {first["id"]: "meter-a", _submit(http, "short", "meter-b", 3)["id"]: "meter-b"}
            wait("copies running", lambda: _running_copies(http, list(jobs)) >= 2)

        # kill -9 at a random moment 1.5-4.5 s after the server is up (the killed one's lease, three intervals,
        # must lapse before the next one meters), start it again, and give it one more job each time.
        for k in range(KILLS):
            time.sleep(rng.uniform(1.5, 4.5))
            _kill(server)
            server.start()
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
                spec = list(SPECS)[k % 2]
                jobs[_submit(http, f"after-kill-{k}", spec, rng.uniform(2, 6))["id"]] = spec

        if "AICENTER_DATABASE_URL" in database:  # two servers at once on one PostgreSQL; one of them killed
            second = Server(tmp_path / "home-2", env=database).start()
            with httpx.Client(base_url=second.url, headers=headers, timeout=30) as http:
                jobs[_submit(http, "on-second", "meter-a", 5, replicas=2)["id"]] = "meter-a"
            time.sleep(rng.uniform(2, 5))
            _kill(server)
            server = second  # the survivor meters the rest
            second = None

        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
            statuses = wait("every job to end", lambda: _ended(http, list(jobs)), 180)
            assert set(statuses.values()) == {"succeeded"}, statuses
            all_copies: list[Copy] = []
            for job_id, spec in jobs.items():
                all_copies += copies(http, job_id, Decimal(SPECS[spec][1]))
            wait_closed(http, workspace_id, all_copies)
            entries = ledger(http, workspace_id)
            balance = Decimal(http.get(f"/api/v1/workspaces/{workspace_id}/balance").json()["balance"])

        cli = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
        verified = cli.run("billing", "verify", check=False)
        assert verified.returncode == 0, verified.stdout + verified.stderr

        charged = check_charges(all_copies, entries)
        assert balance == sum(Decimal(e["amount"]) for e in entries) == Decimal("100.00") - sum(charged.values())
        charges = [e for e in entries if e["kind"] == "charge"]
        assert len(charges) > len(all_copies)  # metered while running, not only closed at the end
        # Give-backs: a copy that ended while no server ran was charged as running past its end, then closed.
        give_backs = sum(1 for e in charges if Decimal(e["amount"]) > 0)
        print(
            f"{request.node.callspec.id}: {KILLS} kills, {len(all_copies)} copies, {len(charges)} charges "
            f"({give_backs} give-backs), "
            f"{sum(charged.values())} coins, balance {balance}, {time.monotonic() - began:.1f} s"
        )
    finally:
        for srv in (server, second):
            if srv is not None and srv.proc is not None:
                srv.stop(check=False)
