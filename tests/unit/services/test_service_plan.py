"""A service replica's plan: its one published port, the model server's command, and its serve token (in its
environment for the replica, and in the plan for the launcher's relay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicenter.core.jobs.serving import SERVE_COMMAND
from aicenter.executors import ReplicaPlan
from aicenter.services import jobs

KEY = "k" * 48


def _plan(command: str = SERVE_COMMAND) -> ReplicaPlan:
    return ReplicaPlan(
        job_id=7,
        task="server",
        replica=0,
        attempt=2,
        node="n",
        command=command,
        env={"AICENTER_SERVE_TOKEN": "the user's own", "X": "1"},
        run_dir=Path("/jobs/7/runs/2/server-0"),
        workdir=Path("/jobs/7/code"),
        python_bin=Path("/images/venv/bin"),
    )


def test_the_serve_token_is_per_key_job_and_attempt() -> None:
    token = jobs.serve_token(KEY, 7, 2)
    assert token == jobs.serve_token(KEY, 7, 2)
    assert len(token) == 64
    assert int(token, 16) >= 0
    others = {jobs.serve_token(KEY, 7, 3), jobs.serve_token(KEY, 8, 2), jobs.serve_token("x" * 48, 7, 2)}
    assert token not in others
    assert len(others) == 3
    assert token != jobs.notebook_token(KEY, 7, 2)  # another purpose, another token


def test_the_replica_and_its_relay_get_the_token() -> None:
    token = jobs.serve_token(KEY, 7, 2)
    serving = {"service": "clf", "revision": 1, "runtime": "onnx"}
    plan = jobs.service_plan(_plan(), ports=(40000, 40001), publish_host="10.0.0.5", serving=serving, token=token)
    assert plan.env["AICENTER_SERVE_TOKEN"] == token  # the platform's wins over a variable of the user's
    assert (plan.published, plan.publish_host, plan.publish_token) == ((40001,), "10.0.0.5", token)
    assert (plan.env["PORT"], plan.env["AICENTER_SERVE_BIND"]) == ("40001", "10.0.0.5")
    assert json.loads(plan.env["AICENTER_SERVE_CONFIG"]) == serving
    assert plan.command == "exec /images/venv/bin/python -m aicenter.runtime.serve"


def test_without_a_token_nothing_is_checked() -> None:
    plan = jobs.service_plan(_plan("./serve.sh"), ports=(40000,), publish_host="127.0.0.1", serving={})
    assert plan.publish_token == ""
    assert "AICENTER_SERVE_TOKEN" not in plan.env  # not one the spec's env set: the gateway would not send it
    assert plan.command == "./serve.sh"
    with pytest.raises(ValueError, match="needs 1 port"):
        jobs.service_plan(_plan(), ports=(), publish_host="127.0.0.1", serving={})
