"""Console pages with an id no database column can hold answer the console's bad-address page, not a 500."""

from __future__ import annotations

import pytest

from tests.conftest import ADMIN_PASSWORD
from tests.integration.web.conftest import OpenBrowser


@pytest.mark.parametrize(
    "path", ["/jobs/{id}", "/nodes/{id}", "/pools/{id}", "/users/{id}", "/datasets/{id}", "/models/1/versions/{id}"]
)
async def test_console_pages_refuse_ids_beyond_int64(open_browser: OpenBrowser, path: str) -> None:
    browser = await open_browser("admin", ADMIN_PASSWORD)
    for value in (2**63, 10**30):
        response = await browser.get(path.format(id=value))
        assert response.status_code == 400, response.text[:300]
        assert "cannot read" in response.text
