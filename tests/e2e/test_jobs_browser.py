"""Jobs in a real browser against a real server: submit a job from the console's form and watch its output
arrive in the job page's live log view (EventSource over the API's SSE endpoint) and its status change."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]  # a browser journey


def test_submit_from_the_form_and_watch_the_live_log(server: Server, browser_page: Any) -> None:
    page = browser_page
    base = server.url
    page.goto(f"{base}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")

    page.goto(f"{base}/jobs")
    with page.expect_navigation():
        page.click("[data-testid=job-new]")
    # A mistake first: the error is shown at its field and the typed values stay.
    page.fill("#job-submit-name", "browser-job")
    page.fill("#job-submit-cpu", "500m")
    page.fill("#job-submit-memory", "128Mx")
    page.fill("#job-submit-command", "echo hello-from-browser; sleep 2; echo done")
    with page.expect_navigation():
        page.click("#job-submit-submit")
    assert "is not a quantity" in page.locator("[data-testid=job-submit-memory-error]").inner_text()
    assert page.input_value("#job-submit-name") == "browser-job"

    page.fill("#job-submit-memory", "128Mi")
    with page.expect_navigation():
        page.click("#job-submit-submit")
    assert page.locator("[data-testid=page-title]").inner_text() == "browser-job"

    log = page.locator("[data-testid=log-view]")
    log.filter(has_text="hello-from-browser").wait_for(timeout=60_000)
    log.filter(has_text="done").wait_for(timeout=60_000)
    lines = log.inner_text().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["hello-from-browser", "done"]
    # The status refreshes by itself until the job has ended; then the stop button goes away.
    page.locator("[data-testid=job-status][data-status=succeeded]").wait_for(timeout=60_000)
    assert page.locator("[data-testid=job-stop]").count() == 0
