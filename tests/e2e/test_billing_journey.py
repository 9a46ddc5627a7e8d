"""Issue 15's "Done when" journey on a real ``aicenter up``: machine time billed to the cent while work runs.

The platform admin prices three resource specs and recharges workspace vision; alice, a member, runs a 2-replica
job, a notebook (JupyterLab) and a service (a custom command), each on its own spec. While they run the meter
(every second here) charges them: the ledger grows and the balance falls before anything has ended. The admin
raises a price meanwhile, which changes nothing already submitted. After they end, every copy's charges equal the
seed's formula to the cent, computed in this test from the replica records the API returns (weight x (end -
start) x the price at submit, rounded as docs/billing.md says), the balance is the recharge minus them, and
``aicenter billing verify`` agrees.

The monthly report (``aicenter billing report --period month --by kind``, and its CSV) shows those sums per
kind. Then arrears: the admin sets vision's policy to ``stop`` (no grace) while alice works in a second notebook, and
takes the balance below zero; the billing controller stops the notebook (reason ``arrears``, one event) and
alice's next notebook is refused with the balance in the message, until a recharge admits her again.

(``kill -9`` of the server during metering is test_billing_kill_e2e.py.)
"""

from __future__ import annotations

import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.billing_support import Copy, check_charges, copies, ledger, wait, wait_closed
from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PASSWORD = "alice-password-15"
# name: (weight, coins per machine-hour); what each kind of work runs on
SPECS = {"train-s": ("2", "120.5"), "nb-s": ("0.5", "33.33"), "serve-s": ("1.25", "7.77")}
RECHARGE = Decimal("500.00")

# The service: answers 200 on /health (its readiness path) until stopped.
SERVER = textwrap.dedent(
    """
    import os
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    bind = os.environ.get("AICENTER_SERVE_BIND", "127.0.0.1")
    ThreadingHTTPServer((bind, int(os.environ["PORT"])), Handler).serve_forever()
    """
)

# The training job: runs until the test drops `done` into its output directory (at most 5 minutes).
TRAIN = (
    "import os, time; done = os.path.join(os.environ['AICENTER_OUTPUT_DIR'], 'done'); "
    "end = time.time() + 300\nwhile not os.path.exists(done) and time.time() < end: time.sleep(0.2)"
)


def _statuses(http: httpx.Client, ids: dict[str, int]) -> dict[str, str]:
    return {what: http.get(f"/api/v1/jobs/{i}").json()["status"] for what, i in ids.items()}


def _ended(statuses: dict[str, str]) -> dict[str, str] | None:
    return statuses if all(s in ("succeeded", "stopped", "failed") for s in statuses.values()) else None


def _charges_of(entries: list[dict[str, Any]], job_ids: set[int]) -> list[dict[str, Any]]:
    return [e for e in entries if e["kind"] == "charge" and e["job_id"] in job_ids]


def _setup(tmp_path: Path, server: Server) -> tuple[Cli, Cli]:
    """The admin's part: alice a member of vision, three priced specs, 500 coins on vision."""
    admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
    admin.run("user", "create", "alice", "--password-stdin", stdin=f"{PASSWORD}\n")
    admin.run("workspace", "create", "vision")
    admin.run("member", "add", "alice", "--workspace", "vision")
    for name, (weight, price) in SPECS.items():
        cpu = "500m" if name == "nb-s" else "200m"
        memory = "1Gi" if name == "nb-s" else "256Mi"
        created = admin.json(
            "spec", "create", name, "--cpu", cpu, "--memory", memory, "--price", price, "--billing-weight", weight
        )
        assert Decimal(created["price_per_hour"]) == Decimal(price)
    recharged = admin.json("billing", "recharge", str(RECHARGE), "--reason", "Q4 budget", "-w", "vision")
    assert (recharged["kind"], Decimal(recharged["amount"])) == ("recharge", RECHARGE)
    alice = signed_in(tmp_path, server, "alice", PASSWORD)
    assert alice.run("billing", "balance", "-w", "vision").stdout.splitlines()[0] == "vision: 500.00 coins"
    return admin, alice


def _start_work(tmp_path: Path, alice: Cli) -> tuple[int, int, int]:
    """alice's 2-replica job, notebook and service; their ids (the service's)."""
    spec = tmp_path / "train.yaml"
    spec.write_text(
        textwrap.dedent(
            f"""
            name: train-pair
            tasks:
              - name: worker
                replicas: 2
                resources: {{spec: train-s}}
                command: [{sys.executable}, -c, {TRAIN!r}]
            """
        )
    )
    job_id = alice.json("job", "submit", str(spec), "--workspace", "vision")["id"]
    notebook_id = alice.json(
        "notebook", "create", "scratch", "--spec", "nb-s", "--idle-timeout", "0", "--workspace", "vision"
    )["id"]
    code, model = tmp_path / "web", tmp_path / "weights"
    code.mkdir()
    (code / "server.py").write_text(SERVER)
    model.mkdir()
    (model / "weights.txt").write_text("1\n")
    alice.json("algorithm", "push", str(code), "--name", "web", "--workspace", "vision", "--no-progress")
    alice.json("model", "push", str(model), "--name", "weights", "--workspace", "vision", "--no-progress")
    service_id = alice.json(
        "service", "deploy", "weights:1", "--name", "hello", "--workspace", "vision",
        "--algorithm", "web:1", "--command", "python -u server.py", "--ready-path", "/health",
        "--resources-spec", "serve-s", "--min-replicas", "1", "--max-replicas", "1",
    )["id"]  # fmt: skip
    return job_id, notebook_id, service_id


def _arrears_stop_a_notebook(admin: Cli, alice: Cli, http: httpx.Client, workspace_id: int) -> None:
    """Policy stop, the balance below zero: the running notebook is stopped for arrears, new work is refused with
    the balance in the message, and a recharge admits it again (the stopped notebook stays stopped)."""
    policy = admin.json("billing", "policy", "set", "stop", "--grace", "0", "-w", "vision")
    assert (policy["arrears"], policy["phase"]) == ("stop", "ok")
    late = alice.json("notebook", "create", "late", "--spec", "nb-s", "--idle-timeout", "0", "--workspace", "vision")
    wait("the second notebook running", lambda: http.get(f"/api/v1/jobs/{late['id']}").json()["status"] == "running")
    balance = Decimal(alice.json("billing", "balance", "-w", "vision")["balance"])
    debit = balance + Decimal("1.00")
    admin.run("billing", "adjust", "--reason", "journey: into arrears", "-w", "vision", "--", f"-{debit}")

    def stopped() -> dict[str, Any] | None:
        job = http.get(f"/api/v1/jobs/{late['id']}").json()
        return job if job["status"] == "stopped" else None

    job = wait("arrears to stop the notebook", stopped)
    assert job["failure_reason"] == "arrears", job
    events = http.get("/api/v1/events", params={"kind": "billing."}).json()["items"]
    assert [e["kind"] for e in events if e["workspace_id"] == workspace_id].count("billing.stopped") == 1, events
    refused = alice.run(
        "notebook", "create", "again", "--spec", "nb-s", "--workspace", "vision", check=False
    )  # fmt: skip
    assert (refused.returncode != 0, "Traceback" in refused.stderr) == (True, False), refused.stderr
    assert ("balance is -" in refused.stderr, "recharge" in refused.stderr) == (True, True), refused.stderr
    admin.run("billing", "recharge", "10", "--reason", "journey: back in credit", "-w", "vision")
    admitted = alice.json(
        "notebook", "create", "again", "--spec", "nb-s", "--idle-timeout", "0", "--workspace", "vision"
    )
    alice.run("notebook", "stop", "again", "--workspace", "vision")
    assert http.get(f"/api/v1/jobs/{late['id']}").json()["status"] == "stopped"  # stopped work stays stopped
    assert admitted["id"] != late["id"]


def test_admin_prices_member_runs_charges_are_the_formula_to_the_cent(tmp_path: Path) -> None:
    began = time.monotonic()
    jobs_dir = tmp_path / "jobs"
    env = {
        "AICENTER_BILLING_INTERVAL_S": "1",
        "AICENTER_SERVING_INTERVAL_S": "0.5",
        "AICENTER_JOBS_DIR": str(jobs_dir),
        "AICENTER_STOP_GRACE_S": "5",
    }
    server = Server(tmp_path / "home", env=env).start()
    try:
        admin, alice = _setup(tmp_path, server)
        token = httpx.post(f"{server.url}/api/v1/auth/login", json={"username": "alice", "password": PASSWORD})
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token.json()['token']}"})
        admin_token = httpx.post(
            f"{server.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        ).json()["token"]
        as_admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {admin_token}"})
        workspace_id = alice.json("billing", "balance", "-w", "vision")["workspace_id"]

        job_id, notebook_id, service_id = _start_work(tmp_path, alice)

        def service_jobs() -> set[int]:
            return {r["job_id"] for r in http.get(f"/api/v1/services/{service_id}").json()["replicas"]}

        wait("the service ready", lambda: http.get(f"/api/v1/services/{service_id}").json()["status"] == "ready")
        served = service_jobs()
        ids = {"train": job_id, "notebook": notebook_id, **{f"service-{i}": i for i in served}}
        wait(
            "all three running",
            lambda: set(_statuses(http, ids).values()) == {"running"},
            show=lambda: _statuses(http, ids),
        )

        # A later price does not change what is already submitted (the prices are snapshotted at submit).
        train_spec = next(s for s in as_admin.get("/api/v1/specs").json()["items"] if s["name"] == "train-s")
        raised = as_admin.patch(f"/api/v1/specs/{train_spec['id']}", json={"price_per_hour": "999"})
        assert raised.status_code == 200, raised.text

        # Charges appear while they run: every one of the three is charged, and charged again, before any ends.
        first = ledger(http, workspace_id, "charge")
        by_kind = {
            "train": {job_id},
            "notebook": {notebook_id},
            "service": served,
        }

        def charged_again() -> bool:
            now = ledger(http, workspace_id, "charge")
            return len(now) > len(first) and all(_charges_of(now, jobs) for jobs in by_kind.values())

        wait("charges of all three while they run", charged_again)
        assert set(_statuses(http, ids).values()) == {"running"}  # nothing has ended: these are running charges
        running_balance = Decimal(alice.json("billing", "balance", "-w", "vision")["balance"])
        assert running_balance < RECHARGE

        # They end: the job finishes, alice stops the notebook and the service.
        (jobs_dir / str(job_id) / "output" / "done").write_text("")
        alice.run("notebook", "stop", "scratch", "--workspace", "vision")
        alice.run("service", "stop", "hello", "--workspace", "vision")
        final = wait("all three ended", lambda: _ended(_statuses(http, ids)))
        assert final["train"] == "succeeded", final
        prices = {"train": SPECS["train-s"][1], "notebook": SPECS["nb-s"][1], "service": SPECS["serve-s"][1]}
        all_copies: dict[str, list[Copy]] = {
            kind: [c for j in jobs for c in copies(http, j, Decimal(prices[kind]))] for kind, jobs in by_kind.items()
        }
        assert [c.weight for c in all_copies["train"]] == [2.0, 2.0]  # the 2 replicas, once each
        flat = [c for cs in all_copies.values() for c in cs]
        wait_closed(http, workspace_id, flat)
        entries = ledger(http, workspace_id)
        charged = check_charges(flat, entries)  # to the cent, each copy, from its replica record
        cost = {kind: sum((charged[c.id] for c in cs), Decimal(0)) for kind, cs in all_copies.items()}
        assert all(cost.values()), cost  # each kind cost something

        balance = Decimal(alice.json("billing", "balance", "-w", "vision")["balance"])
        assert balance == RECHARGE - sum(cost.values())
        verified = admin.run("billing", "verify")
        assert "The ledger equals the formula" in verified.stdout
        # The monthly report shows them by kind, as the formula has them (a charge counts on the UTC day its
        # period ends: all of this run's are in this month).
        report = alice.json("billing", "report", "--period", "month", "--by", "kind", "-w", "vision")
        reported = {row["group"]: Decimal(str(row["amount"])) for row in report["rows"]}
        assert reported == cost, (reported, cost)
        assert Decimal(str(report["amount"])) == RECHARGE - balance
        csv = alice.run("billing", "report", "--period", "month", "--by", "kind", "-w", "vision", "--csv").stdout
        assert csv.splitlines()[0].startswith("period_start,kind,machine_hours,amount"), csv
        _arrears_stop_a_notebook(admin, alice, http, workspace_id)
        print(
            f"journey: costs {cost}, balance {balance} (while running {running_balance}), "
            f"{sum(1 for e in entries if e['kind'] == 'charge')} charges, {time.monotonic() - began:.1f} s"
        )
    finally:
        if server.proc is not None:
            server.stop()
