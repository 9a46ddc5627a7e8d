"""A notebook from the console, in Chromium, against a real ``aicenter up`` (local executor, bubblewrap sandbox).

alice, a member (not an admin) of workspace lab, creates a notebook with the console's form, watches its page
turn to running by itself, opens JupyterLab through the platform (``/notebooks/<id>/lab``, her session cookie, no
token), runs a cell of a notebook file she PUT through JupyterLab's contents API, and then types a command into
the console's own terminal page (xterm.js over JupyterLab's terminal WebSocket) and reads its output, saves the
work dir as an algorithm version, follows "Train from here" to a prefilled job, and stops it. bob, another
member, sees the notebook's page without any way in, and the proxy refuses him.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]

RUN_TIMEOUT_MS = 120_000  # scheduling, the sandbox and JupyterLab's start on a shared 2-core machine
CELL = 'print("from-kernel", 6 * 7)'
NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": CELL}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def _sign_in(page: Any, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/login")
    page.fill("#login-username", username)
    page.fill("#login-password", password)
    with page.expect_navigation():
        page.click("#login-submit")


def test_member_creates_opens_runs_a_cell_and_uses_the_terminal(
    server: Server, tmp_path: Path, browser_page: Any
) -> None:
    admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
    for user in ("alice", "bob"):
        admin.run("user", "create", user, "--password-stdin", stdin=f"{user}-Passw0rd-1\n")
    admin.run("workspace", "create", "lab")
    admin.run("member", "add", "alice", "--workspace", "lab")
    admin.run("member", "add", "bob", "--workspace", "lab")

    page = browser_page
    base = server.url
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    _sign_in(page, base, "alice", "alice-Passw0rd-1")

    # Create it from the form.
    page.goto(f"{base}/notebooks")
    with page.expect_navigation():
        page.click("[data-testid=notebook-new]")
    page.fill("#notebook-new-name", "explore")
    page.select_option("#notebook-new-workspace-id", label="lab")
    page.fill("#notebook-new-cpu", "1")
    page.fill("#notebook-new-memory", "1Gi")
    with page.expect_navigation():
        page.click("#notebook-new-submit")
    assert page.locator("[data-testid=page-title]").inner_text() == "explore"
    job_id = int(page.url.rsplit("/", 1)[1])

    # The page follows it to running; then its owner gets the open buttons.
    page.locator("[data-testid=notebook-status][data-status=running]").wait_for(timeout=RUN_TIMEOUT_MS)
    lab = page.locator("[data-testid=notebook-open-lab]")
    assert lab.get_attribute("href") == f"/notebooks/{job_id}/lab"
    assert page.locator("[data-testid=notebook-open-terminal]").get_attribute("href") == f"/notebook-terminal/{job_id}"
    assert "aicenter notebook ssh-config explore" in page.locator("[data-testid=notebook-ssh-config]").inner_text()

    # A notebook file through JupyterLab's contents API (same-origin fetch, the session cookie), JupyterLab may
    # still be starting behind a running replica: retry until it answers.
    put = page.evaluate(
        """async ([url, body]) => {
            for (let i = 0; i < 120; i++) {
                const r = await fetch(url, {method: "PUT", headers: {"Content-Type": "application/json"},
                                            body: JSON.stringify({type: "notebook", format: "json", content: body})});
                if (r.status !== 502 && r.status !== 404) { return r.status; }
                await new Promise(ok => setTimeout(ok, 500));
            }
            return -1;
        }""",
        [f"/notebooks/{job_id}/api/contents/x.ipynb", NOTEBOOK],
    )
    assert put in (200, 201), put

    # JupyterLab through the platform: run the cell, read its output.
    page.goto(f"{base}/notebooks/{job_id}/lab/tree/x.ipynb")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    # Keys typed before the kernel is up are lost: wait for the status bar's "Python 3 (...) | Idle".
    page.locator("#jp-main-statusbar", has_text="Idle").wait_for(timeout=60_000)
    page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
    page.keyboard.press("Shift+Enter")
    page.locator(".jp-OutputArea-output", has_text="from-kernel 42").wait_for(timeout=60_000)

    # The console's terminal page: a shell in the work dir (where x.ipynb is).
    page.goto(f"{base}/notebook-terminal/{job_id}")
    page.locator("[data-testid=terminal-state][data-state=open]").wait_for(timeout=30_000)
    page.locator("[data-testid=terminal]").click()
    page.keyboard.type("echo hi-$((6*7)); test -f x.ipynb && echo in-$((1+1))-workdir\n")
    rows = page.locator("[data-testid=terminal] .xterm-rows")
    rows.filter(has_text="hi-42").wait_for(timeout=30_000)
    rows.filter(has_text="in-2-workdir").wait_for(timeout=30_000)
    csp = [p for p in problems if "Content Security Policy" in p]
    assert csp == [], csp

    # Save the work dir as a version of a new algorithm; Train from here proposes a job on it.
    page.goto(f"{base}/notebooks/{job_id}")
    page.fill("#notebook-save-algorithm", "explore-code")
    with page.expect_navigation():
        page.click("[data-testid=notebook-save-submit]")
    assert "Saved as algorithm version explore-code:1" in page.locator("[data-testid=flash]").inner_text()
    assert "explore-code:1" in page.locator("[data-testid=notebook-saved]").inner_text()
    with page.expect_navigation():
        page.click("[data-testid=notebook-train-link]")
    proposed = page.input_value("#job-yaml-yaml")
    assert "explore-code:1" in proposed
    assert "kind: train" in proposed

    # Stop it (the page follows it to stopped by itself); then it can be deleted.
    page.goto(f"{base}/notebooks/{job_id}")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click("[data-testid=notebook-stop]")
    page.locator("[data-testid=notebook-status][data-status=stopped]").wait_for(timeout=RUN_TIMEOUT_MS)
    assert page.locator("[data-testid=notebook-start]").count() == 1
    assert page.locator("[data-testid=notebook-delete]").count() == 1

    # bob, another member: metadata only, and the proxy refuses him.
    context = page.context.browser.new_context()
    other = context.new_page()
    _sign_in(other, base, "bob", "bob-Passw0rd-1")
    other.goto(f"{base}/notebooks/{job_id}")
    assert other.locator("[data-testid=notebook-owner-only]").count() == 1
    assert other.locator("[data-testid=notebook-delete]").count() == 0  # not his either
    assert other.locator("[data-testid=notebook-open-lab]").count() == 0
    refused = other.goto(f"{base}/notebooks/{job_id}/api/contents")
    assert refused is not None
    assert refused.status == 403, json.dumps(refused.headers)
    context.close()
