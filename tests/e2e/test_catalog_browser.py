"""The catalog in a real browser: a member creates a dataset, uploads a folder from the page (small files in a
bundle, a bigger one in parts), sees the progress reach 100% and the version's files, previews a CSV, and
downloads the files back through the API, byte for byte. An upload cut off midway resumes after a reload by
sending only what is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]  # a browser journey

MEMBER = "dora"
MEMBER_PASSWORD = "dora-Passw0rd-1"
PART_SIZE = 64 * 1024  # the smallest part the server accepts: a 200 KiB file takes four parts


@pytest.fixture
def small_parts_server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "home", env={"AICENTER_UPLOAD_PART_SIZE": str(PART_SIZE)}).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


def make_folder(root: Path) -> dict[str, bytes]:
    """The folder to upload, as {path inside it: bytes}; one file is bigger than a part."""
    files = {
        "labels.csv": b"image,label\nimg/0.png,cat\nimg/1.png,dog\n",
        "notes/README.txt": "Müller's pictures\n".encode(),
        "notes/empty.txt": b"",
        "big/weights.bin": os.urandom(200 * 1024 + 123),
    }
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return files


def test_member_uploads_a_folder_and_previews_and_downloads_it(
    small_parts_server: Server, browser_page: Any, tmp_path: Path
) -> None:
    base = small_parts_server.url
    page = browser_page
    folder = tmp_path / "pictures"
    files = make_folder(folder)
    with Client(base) as api:
        api.login("admin", ADMIN_PASSWORD)
        api.create_user(MEMBER, password=MEMBER_PASSWORD)

    page.goto(f"{base}/login")
    page.fill("#login-username", MEMBER)
    page.fill("#login-password", MEMBER_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")

    # A new dataset.
    page.goto(f"{base}/datasets")
    page.click("[data-testid=item-create-toggle]")
    page.fill("#item-create-name", "pictures")
    page.select_option("#item-create-metadata-data-type", "image")
    with page.expect_navigation():
        page.click("#item-create-submit")
    assert page.locator("[data-testid=item-create-error]").count() == 0
    assert page.locator("[data-testid=page-title]").inner_text() == "pictures"

    # The folder, from the page: the input takes a directory (webkitdirectory).
    page.set_input_files("#upload-folder", str(folder))
    summary = page.locator("[data-testid=upload-summary]")
    summary.filter(has_text="4 files").wait_for()
    page.fill("#upload-description", "first pictures")
    page.click("[data-testid=upload-start]")
    done = page.locator("[data-testid=upload-status]").filter(has_text="100%")
    done.wait_for(timeout=60_000)
    error = page.locator("[data-testid=upload-error]")
    assert error.is_hidden(), error.inner_text()
    assert page.locator("[data-testid=upload-bar]").get_attribute("value") == "100"
    with page.expect_navigation():
        page.click("[data-testid=upload-version-link]")
    assert page.url.endswith("/versions/1")

    # The version lists the folder's content: directories first, then files.
    dirs = page.locator("[data-testid=dir-row]").evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert dirs == ["big", "notes"]
    top = page.locator("[data-testid=file-row]").evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert top == ["labels.csv"]
    with page.expect_navigation():
        page.click("[data-testid=dir-row][data-path=notes] a")
    inner = page.locator("[data-testid=file-row]").evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert inner == ["notes/README.txt", "notes/empty.txt"]

    # A CSV preview is a table.
    page.goto(f"{base}{page.url.split(base, 1)[1].split('?', 1)[0]}")
    with page.expect_navigation():
        page.click("[data-testid=file-row][data-path='labels.csv'] [data-testid=preview-link]")
    table = page.locator("[data-testid=preview-csv]")
    assert table.locator("th").all_inner_texts() == ["image", "label"]
    assert table.locator("tbody tr").count() == 2

    # Every file comes back through the API with the page's session, byte for byte.
    links = page.locator("[data-testid=download-link]").evaluate_all("links => links.map(a => a.href)")
    assert len(links) == 1
    assert links[0].endswith("/files/labels.csv")
    api_base = links[0].rsplit("/files/", 1)[0]
    for path, data in files.items():
        response = page.request.get(f"{api_base}/files/{path}")
        assert response.status == 200, (path, response.status)
        assert response.body() == data, path

    # An upload that loses a part (the connection drops) resumes after a reload, sending only what is missing.
    page.goto(f"{base}/datasets")
    with page.expect_navigation():
        page.click("[data-testid=item-link-pictures]")
    item_url = page.url
    page.route("**/parts/2", lambda route: route.abort())
    page.set_input_files("#upload-folder", str(folder))
    page.locator("[data-testid=upload-summary]").filter(has_text="4 files").wait_for()
    page.click("[data-testid=upload-start]")
    page.locator("[data-testid=upload-error]").filter(has_text="connection").wait_for()
    page.unroute("**/parts/2")

    page.goto(item_url)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(f"{r.method} {r.url.split(base, 1)[1]}"))
    page.set_input_files("#upload-folder", str(folder))
    page.locator("[data-testid=upload-summary]").filter(has_text="will be resumed").wait_for()
    page.click("[data-testid=upload-start]")
    page.locator("[data-testid=upload-status]").filter(has_text="100%").wait_for(timeout=60_000)
    api_calls = [s for s in sent if " /api/" in s]
    assert any(s.startswith("GET /api/v1/uploads/") for s in api_calls), api_calls
    assert not any(s.endswith(("/uploads", "/bundle")) for s in api_calls), api_calls
    assert any(s.startswith("PUT ") and s.endswith("/parts/2") for s in api_calls), api_calls
    assert not any(s.startswith("PUT ") and s.endswith("/parts/0") for s in api_calls), api_calls
    with page.expect_navigation():
        page.click("[data-testid=upload-version-link]")
    assert page.url.endswith("/versions/2")
    assert page.locator("[data-testid=version-facts]").inner_text().count("4 files") == 1
