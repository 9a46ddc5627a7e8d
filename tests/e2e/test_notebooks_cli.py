"""Notebooks through the `aicenter` command against a real `aicenter up` process, whose controllers run them on this
host (JupyterLab in the sandbox): create, wait until it runs, open (the address), logs, save the work dir as an
algorithm version, train from it, stop, start again with the same work dir, delete."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

DEADLINE_S = 120.0  # generous: JupyterLab starts in a few seconds on an idle machine, CI shares 2 cores

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # a real JupyterLab; the quick suite has the CLI on a server


def _wait(cli: Cli, nb_id: int, statuses: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        nb: dict[str, Any] = cli.json("notebook", "get", str(nb_id))
        if nb["status"] in statuses:
            return nb
        assert time.monotonic() < deadline, f"notebook {nb_id} stayed {nb['status']}: {nb}"
        time.sleep(0.5)


def test_a_notebook_from_the_cli(server: Server, cli: Cli, tmp_path: Path) -> None:
    cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    created = cli.json("notebook", "create", "e2e-nb", "--cpu", "1", "--memory", "1Gi", "--idle-timeout", "0")
    nb_id = created["id"]
    running = _wait(cli, nb_id, {"running", "failed"})
    assert running["status"] == "running", running

    opened = cli.run("notebook", "open", "e2e-nb", "--no-browser")
    url = opened.stdout.strip()
    assert url == f"{server.url}/notebooks/{nb_id}/lab"
    # the address serves JupyterLab to its owner (a browser signs in with the console's cookie, this with a token)
    token = tomllib.loads((cli.home / "config.toml").read_text())["profiles"]["default"]["token"]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        page = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, follow_redirects=True, timeout=30)
        if page.status_code == 200 and "JupyterLab" in page.text:
            break
        assert time.monotonic() < deadline, f"{url}: {page.status_code} {page.text[:300]}"
        time.sleep(0.5)

    deadline = time.monotonic() + DEADLINE_S
    while not cli.run("notebook", "logs", "e2e-nb").stdout.strip():
        assert time.monotonic() < deadline, "JupyterLab printed nothing"
        time.sleep(0.5)

    saved = cli.run("notebook", "save", "e2e-nb", "--algorithm", "e2e-code", "--description", "from e2e")
    assert saved.stdout.strip() == "e2e-code:1"
    spec = cli.run("notebook", "train", "e2e-nb").stdout
    assert "algorithm: admin/e2e-code:1" in spec
    job = cli.json("notebook", "train", "e2e-nb", "--submit")
    assert (job["kind"], job["spec"]["algorithm"]) == ("train", "admin/e2e-code:1")
    cli.run("job", "stop", str(job["id"]))

    again = cli.run("notebook", "start", "e2e-nb", check=False)
    assert again.returncode == 1
    assert again.stderr.startswith("error: invalid_transition: ")
    assert cli.run("notebook", "stop", "e2e-nb").stdout.strip() == f"notebook {nb_id} (e2e-nb) running (stopping)"
    _wait(cli, nb_id, {"stopped"})
    refused = cli.run("notebook", "save", "e2e-nb", check=False)
    assert refused.returncode == 1
    assert "invalid_transition" in refused.stderr

    cli.run("notebook", "start", "e2e-nb")
    restarted = _wait(cli, nb_id, {"running", "failed"})
    assert (restarted["status"], restarted["restart_count"]) == ("running", 1)
    second = cli.run("notebook", "save", "e2e-nb")  # the notebook's own algorithm now: a second version
    assert second.stdout.strip() == "e2e-code:2"

    cli.run("notebook", "stop", "e2e-nb")
    _wait(cli, nb_id, {"stopped"})
    cli.run("notebook", "delete", "e2e-nb", "--yes")
    missing = cli.run("notebook", "get", "e2e-nb", check=False)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: not_found: ")
