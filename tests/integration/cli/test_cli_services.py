"""``aicenter service ...`` against a real server (no controllers, no model server: replicas stay queued, so the
service stays ``deploying``). What runs: every command's request and answer, name resolution, and every bad
input's one-line message (exit 2 for the CLI's own checks, 1 for the server's refusals), never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.integration.cli.conftest import Run
from tests.integration.cli.test_cli import as_json, one_error_line


def _model(cli: Run, tmp_path: Path, name: str) -> None:
    """A model item with one version holding ``model.onnx`` (the bytes need not be a real model: nothing loads
    it here), and a node the replica could run on."""
    node = cli("node", "create", "cli-svc-node", "--cpu", "8", "--memory", "16Gi")
    assert node.exit_code == 0 or "already" in node.output, node.output
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not really onnx")
    pushed = cli("model", "push", str(folder), "--name", name)
    assert pushed.exit_code == 0, pushed.output


def _deploy(cli: Run, model: str, name: str, *extra: str) -> dict[str, Any]:
    result = as_json(
        cli("service", "deploy", model, "--name", name, "--cpu", "1", "--memory", "256Mi", "-o", "json", *extra)
    )
    assert isinstance(result, dict)
    return result


def test_deploy_list_get_update_scale_keys_stop_start_delete(admin_cli: Run, tmp_path: Path) -> None:
    _model(admin_cli, tmp_path, "cli-iris")
    svc = _deploy(admin_cli, "cli-iris:1", "cli-iris", "--env", "A=1", "--max-replicas", "3")
    assert (svc["name"], svc["status"], svc["model"], svc["runtime"]) == ("cli-iris", "deploying", "cli-iris:1", "onnx")
    assert [(r["number"], r["state"], r["target_traffic"]) for r in svc["revisions"]] == [(1, "starting", 100)]
    assert svc["revisions"][0]["spec"]["env"] == {"A": "1"}

    listed = admin_cli("service", "list")
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if "cli-iris" in line)
    for cell in ("cli-iris", "1", "deploying", "0/1", "/serve/"):
        assert cell in row, row
    assert "REPLICAS" in listed.stdout
    assert "URL" in listed.stdout
    only_stopped = as_json(admin_cli("service", "list", "--status", "stopped", "-o", "json"))
    assert all(s["name"] != "cli-iris" for s in only_stopped)  # type: ignore[union-attr]

    got = admin_cli("service", "get", "cli-iris")
    assert got.exit_code == 0, got.output
    assert "Revisions" in got.stdout
    assert "starting" in got.stdout
    assert "Replicas" in got.stdout
    assert "/v2/models/cli-iris/infer" in got.stdout
    by_id = as_json(admin_cli("service", "get", str(svc["id"]), "-o", "json"))
    assert by_id["name"] == "cli-iris"  # type: ignore[index]

    # One rollout at a time: revision 1 is still starting, so a new revision is refused by the server.
    busy = admin_cli("service", "update", "cli-iris", "cli-iris:1", "--canary", "10")
    assert busy.exit_code == 1
    one_error_line(busy, "conflict")
    refused = admin_cli("service", "promote", "cli-iris")
    assert refused.exit_code == 1
    one_error_line(refused, "conflict")
    traffic = admin_cli("service", "traffic", "cli-iris", "1=50", "7=50")
    assert traffic.exit_code == 2  # the server's validation_failed, like the CLI's own
    assert "traffic" in one_error_line(traffic, "validation_failed")

    scaled = as_json(
        admin_cli("service", "scale", "cli-iris", "--min", "0", "--max", "4", "--target-concurrency", "8", "-o", "json")
    )
    spec = scaled["revisions"][0]["spec"]  # type: ignore[index]
    assert (spec["min_replicas"], spec["max_replicas"], spec["target_concurrency"]) == (0, 4, 8)

    created = admin_cli("service", "keys", "create", "cli-iris", "app")
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    assert len(key) > 16
    assert "shown this once" in created.stderr
    keys = as_json(admin_cli("service", "keys", "list", "cli-iris", "-o", "json"))
    assert [(k["name"], key.startswith(k["prefix"])) for k in keys] == [("app", True)]  # type: ignore[union-attr]
    assert "app" in admin_cli("service", "keys", "list", "cli-iris").stdout
    missing_key = admin_cli("service", "keys", "revoke", "cli-iris", "nope")
    one_error_line(missing_key, "not_found")
    revoked = admin_cli("service", "keys", "revoke", "cli-iris", "app")
    assert revoked.exit_code == 0, revoked.output
    assert "Revoked key" in revoked.stdout
    assert as_json(admin_cli("service", "keys", "list", "cli-iris", "-o", "json")) == []

    # The replica has not launched: no log to show, and a clear word instead of a traceback.
    logs = admin_cli("service", "logs", "cli-iris")
    assert logs.exit_code == 0, logs.output
    assert logs.stdout == ""
    assert "has not launched yet" in logs.stderr
    followed_other = admin_cli("service", "logs", "cli-iris", "--job", "999999")
    assert followed_other.exit_code == 2
    one_error_line(followed_other, "validation_failed")

    undeletable = admin_cli("service", "delete", "cli-iris", "--yes")
    assert undeletable.exit_code == 1
    assert "Traceback" not in undeletable.output
    stopped = admin_cli("service", "stop", "cli-iris")
    assert stopped.exit_code == 0, stopped.output
    assert "cli-iris" in stopped.stdout
    assert as_json(admin_cli("service", "get", "cli-iris", "-o", "json"))["status"] == "stopped"  # type: ignore[index]
    # Stop and start reload this process's gateway as they commit: the very next call sees each.
    call = ("service", "infer", "cli-iris", "--input", "input=[[1.0]]")
    assert "service 'cli-iris' is stopped" in one_error_line(admin_cli(*call), "http_503")
    started = as_json(admin_cli("service", "start", "cli-iris", "-o", "json"))
    assert started["status"] != "stopped"  # type: ignore[index]
    assert "no revision of service 'cli-iris' takes traffic" in one_error_line(admin_cli(*call), "http_503")
    admin_cli("service", "stop", "cli-iris")
    no_yes = admin_cli("service", "delete", "cli-iris")
    assert no_yes.exit_code == 2
    one_error_line(no_yes, "confirmation_required")
    still = admin_cli("service", "delete", "cli-iris", "--yes")
    assert "replicas stopping" in one_error_line(still, "conflict")
    # No serving controller runs here to stop the drained replica: its queued job is stopped by hand.
    for replica in svc["replicas"]:
        job_stopped = admin_cli("job", "stop", str(replica["job_id"]))
        assert job_stopped.exit_code == 0, job_stopped.output
    deleted = admin_cli("service", "delete", "cli-iris", "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert "Deleted service" in deleted.stdout
    gone = admin_cli("service", "get", "cli-iris")
    assert gone.exit_code == 1
    one_error_line(gone, "not_found")


def test_deploy_from_a_spec_file_and_infer_without_a_ready_replica(admin_cli: Run, tmp_path: Path) -> None:
    _model(admin_cli, tmp_path, "cli-spec")
    path = tmp_path / "svc.yaml"
    path.write_text("name: from-file\nmodel: cli-spec:1\nresources: {cpu: 500m, memory: 128Mi}\ndescription: d\n")
    svc = as_json(admin_cli("service", "deploy", "--spec", str(path), "--env", "B=2", "-o", "json"))
    assert (svc["name"], svc["description"]) == ("from-file", "d")  # type: ignore[index]
    assert svc["revisions"][0]["spec"]["env"] == {"B": "2"}  # type: ignore[index]

    answer = admin_cli("service", "infer", "from-file", "--input", "input=[[1.0, 2.0]]")
    assert answer.exit_code == 1
    assert "Traceback" not in answer.output
    line = answer.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), answer.stderr
    # The deploy's commit reloaded this process's gateway at once: the service is known (never "no service"),
    # and its only revision is still starting (no controller runs here), so nothing takes its traffic yet.
    assert "no service" not in line, line
    assert "no revision of service 'from-file' takes traffic" in line, line
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"inputs": [{"name": "input", "shape": [1], "datatype": "FP32", "data": [1]}]}))
    by_body = admin_cli("service", "infer", "from-file", "--body", str(body))
    assert by_body.exit_code == 1
    assert "Traceback" not in by_body.output


def test_events_table_and_json(admin_cli: Run, tmp_path: Path) -> None:
    _model(admin_cli, tmp_path, "cli-ev")
    _deploy(admin_cli, "cli-ev:1", "cli-ev")
    assert admin_cli("service", "stop", "cli-ev").exit_code == 0
    shown = admin_cli("service", "events", "cli-ev")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["TIME", "KIND", "MESSAGE"]
    assert "stopped" in lines[1]
    assert "stopped by admin" in lines[1]
    assert "deployed" in lines[2]
    assert "deployed by admin: revision 1, model cli-ev:1 (onnx)" in lines[2]
    assert "service cli-ev:" not in shown.stdout  # the table is about that service already
    newest = as_json(admin_cli("service", "events", "cli-ev", "--limit", "1", "-o", "json"))
    assert [e["kind"] for e in newest] == ["service.stopped"]  # type: ignore[index]
    one_error_line(admin_cli("service", "events", "no-such-service"), "not_found")


def test_bad_input_is_one_line_and_no_traceback(admin_cli: Run, tmp_path: Path) -> None:
    cases: list[tuple[tuple[str, ...], int, str, str]] = [
        (("deploy", "iris", "--name", "x", "--cpu", "1", "--memory", "1Gi"), 2, "validation_failed", "MODEL:VERSION"),
        (("deploy", "iris:1", "--cpu", "1", "--memory", "1Gi"), 2, "validation_failed", "--name"),
        (("deploy", "iris:1", "--name", "x"), 2, "validation_failed", "--cpu"),
        (("deploy", "iris:1", "--name", "x", "--cpu", "1"), 2, "validation_failed", "--memory"),
        (
            ("deploy", "iris:1", "--name", "x", "--resources-spec", "s", "--cpu", "1"),
            2,
            "validation_failed",
            "--resources-spec",
        ),
        (("deploy", "iris:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--env", "NOVALUE"), 2, "", "--env"),
        (("deploy", "--spec", str(tmp_path / "missing.yaml")), 2, "validation_failed", "no such file"),
        (("deploy", "nosuch:1", "--name", "x", "--cpu", "1", "--memory", "1Gi"), 1, "", "nosuch"),
        (("get", "no-such-service"), 1, "not_found", "no-such-service"),
        (("traffic", "no-such-service", "1=90", "2=5"), 2, "validation_failed", "sum to 100"),
        (("traffic", "no-such-service", "one=100"), 2, "validation_failed", "REVISION=PERCENT"),
        (("update", "no-such-service"), 2, "validation_failed", "nothing to change"),
        (
            ("deploy", "iris:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--ready-path", "health"),
            2,
            "validation_failed",
            "--ready-path",
        ),
        (
            ("deploy", "iris:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--image", "python"),
            2,
            "validation_failed",
            "NAME:VERSION",
        ),
        (
            ("deploy", "iris:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--algorithm", "code"),
            2,
            "validation_failed",
            "--algorithm",
        ),
        (
            (
                "deploy",
                "iris:1",
                "--name",
                "x",
                "--cpu",
                "1",
                "--memory",
                "1Gi",
                "--min-replicas",
                "3",
                "--max-replicas",
                "1",
            ),
            2,
            "validation_failed",
            "above --max-replicas",
        ),
        (
            ("deploy", "iris:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--target-concurrency", "0"),
            2,
            "validation_failed",
            "above 0",
        ),
        (("deploy", "iris:1", "--name", "x", "--gpu", "1"), 2, "validation_failed", "--cpu and --memory"),
        (
            ("deploy", "nosuch:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--runtime", "bogus"),
            2,
            "validation_failed",
            "not a runtime",
        ),
        (
            ("deploy", "nosuch:1", "--name", "x", "--cpu", "1", "--memory", "1Gi", "--ab-header", "X Y"),
            2,
            "validation_failed",
            "header",
        ),
        (("update", "x", "--ready-path", "nope"), 2, "validation_failed", "--ready-path"),
        (("update", "x", "--cpu", "2"), 2, "validation_failed", "--memory"),
        (("update", "x", "--canary", "10", "--steps", "20"), 2, "validation_failed", "--canary"),
        (("update", "x", "--step-interval", "5"), 2, "validation_failed", "--step-interval"),
        (("scale", "x"), 2, "validation_failed", "--min"),
        (("scale", "x", "--min", "5", "--max", "2"), 2, "validation_failed", "above --max"),
        (("infer", "x"), 2, "validation_failed", "--input"),
        (("infer", "x", "--input", "a=[1,"), 2, "validation_failed", "not JSON"),
        (("infer", "x", "--input", "noequals"), 2, "validation_failed", "NAME=JSON"),
    ]
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("- a list\n- not a service\n")
    cases.append((("deploy", "--spec", str(bad_yaml)), 2, "validation_failed", "mapping"))
    for args, code, error, text in cases:
        result = admin_cli("service", *args)
        assert result.exit_code == code, (args, result.output)
        assert "Traceback" not in result.output, args
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("error: " + (f"{error}: " if error else "")), (args, result.stderr)
        assert text in result.stderr, (args, result.stderr)


def test_deploy_a_custom_server_and_a_predictor_with_options(admin_cli: Run, tmp_path: Path) -> None:
    """Every revision field has its option: a custom command with its code, readiness path and A/B header value;
    a python predictor (--entry); and the options of a new revision (refused here while the first one starts)."""
    _model(admin_cli, tmp_path, "cli-opts")
    code = tmp_path / "srv"
    code.mkdir()
    (code / "serve.py").write_text("print('a server')\n")
    pushed = admin_cli("algorithm", "push", str(code), "--name", "cli-srv", "--no-progress")
    assert pushed.exit_code == 0, pushed.output
    svc = _deploy(
        admin_cli, "cli-opts:1", "cli-chat",
        "--command", "python -u serve.py", "--ready-path", "/health", "--algorithm", "cli-srv:1",
        "--min-replicas", "0", "--max-replicas", "2", "--target-concurrency", "4", "--ready-timeout", "30",
        "--ab-header", "X-Variant", "--header-value", "a", "--description", "chat", "--pool", "default",
    )  # fmt: skip
    assert (svc["runtime"], svc["description"]) == ("command", "chat")
    spec = svc["revisions"][0]["spec"]
    assert {k: spec[k] for k in ("runtime", "command", "ready_path", "algorithm", "header_value", "pool")} == {
        "runtime": "command",
        "command": "python -u serve.py",
        "ready_path": "/health",
        "algorithm": "cli-srv:1",
        "header_value": "a",
        "pool": "default",
    }
    assert (spec["min_replicas"], spec["max_replicas"], spec["target_concurrency"], spec["ready_timeout_s"]) == (
        0, 2, 4, 30,
    )  # fmt: skip
    job = as_json(admin_cli("job", "get", str(svc["replicas"][0]["job_id"]), "-o", "json"))
    assert job["algorithm_version_id"] is not None  # type: ignore[index]  # the replica runs the code pushed

    predictor = _deploy(admin_cli, "cli-opts:1", "cli-pred", "--entry", "predictor.py:Model", "--gpu", "0")
    assert (predictor["runtime"], predictor["revisions"][0]["spec"]["entry"]) == ("python", "predictor.py:Model")

    # A new revision takes the same options (the first one is still starting: no controller runs here).
    busy = admin_cli("service", "update", "cli-chat", "--command", "python -u serve.py --v2", "--header-value", "b")
    assert "still rolling out" in one_error_line(busy, "conflict")
    nowhere = admin_cli(
        "service", "deploy", "cli-opts:1", "--name", "cli-nowhere", "--cpu", "1", "--memory", "256Mi",
        "--pool", "no-such-pool",
    )  # fmt: skip
    assert nowhere.exit_code == 2, nowhere.output
    assert 'pool "no-such-pool"; pools it may use: default' in one_error_line(nowhere, "validation_failed")
    for name in ("cli-chat", "cli-pred"):
        admin_cli("service", "stop", name)
