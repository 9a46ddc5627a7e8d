"""Every console page renders for a platform admin; admin pages are hidden from and refused to members."""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest

from aicenter.db.engine import Database
from aicenter.db.models import User
from aicenter.services import inventory
from aicenter.web.nav import NAV
from tests.factories import ADMIN, make_user
from tests.integration.web.conftest import Browser, OpenBrowser


@dataclass
class Seeded:
    user_id: int
    workspace_id: int
    type_id: int
    spec_id: int
    pool_id: int
    node_id: int


@pytest.fixture
async def seeded(db: Database, client: httpx.AsyncClient) -> Seeded:
    alice = await make_user(db, client, "alice")
    async with db.write() as session:
        kind = await inventory.create_accelerator_type(
            session, ADMIN, name="nvidia-a100", vendor="nvidia", memory="80Gi"
        )
        pool = await inventory.create_pool(session, ADMIN, name="a100", selector={"gpu": "a100"})
        spec = await inventory.create_spec(
            session,
            ADMIN,
            name="gpu-a100-1",
            cpu="8",
            memory="64Gi",
            accelerators=1,
            accelerator_type="nvidia-a100",
            price_per_hour="2.5",
        )
        node = await inventory.create_node(
            session,
            ADMIN,
            name="gpu-01",
            cpu="64",
            memory="512Gi",
            labels={"gpu": "a100"},
            accelerators=[inventory.AcceleratorInput(index=i, type="nvidia-a100") for i in range(2)],
        )
    async with db.read() as session:
        user = await session.get(User, alice.user_id)
        assert user is not None
        assert user.default_workspace_id is not None
    return Seeded(alice.user_id, user.default_workspace_id, kind.id, spec.id, pool.pool.id, node.node.id)


ADMIN_ONLY = ["/users", "/users/{user_id}", "/nodes", "/nodes/{node_id}", "/audit"]
EVERYONE = [
    "/",
    "/profile",
    "/tokens",
    "/workspaces",
    "/workspaces/{workspace_id}",
    "/specs",
    "/specs/{spec_id}",
    "/pools",
    "/pools/{pool_id}",
    "/accelerator-types",
    "/accelerator-types/{type_id}",
    "/services",
]


def _fill(path: str, seeded: Seeded) -> str:
    return path.format(**seeded.__dict__)


async def test_every_page_renders_for_admin(admin: Browser, seeded: Seeded) -> None:
    for path in EVERYONE + ADMIN_ONLY:
        response = await admin.get(_fill(path, seeded))
        assert response.status_code == 200, (path, response.text[:500])
        assert response.headers["content-type"].startswith("text/html")
        assert 'data-testid="page-title"' in response.text
    home = await admin.get("/")
    for entry in NAV:
        assert f'data-testid="nav-{entry.key}"' in home.text


async def test_admin_pages_are_hidden_and_refused_for_members(open_browser: OpenBrowser, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    home = await alice.get("/")
    for key in ("users", "nodes", "audit"):
        assert f'data-testid="nav-{key}"' not in home.text
    for key in ("home", "workspaces", "specs", "pools", "profile", "tokens"):
        assert f'data-testid="nav-{key}"' in home.text
    for path in ADMIN_ONLY:
        response = await alice.get(_fill(path, seeded))
        assert response.status_code == 403, path
        assert 'data-testid="error-page"' in response.text
    # Members' read-only pages: no admin forms.
    for path in ("/specs", "/pools", "/accelerator-types", "/workspaces"):
        response = await alice.get(path)
        assert response.status_code == 200, path
        assert "-create-form" not in response.text, path


async def test_member_pages_render(open_browser: OpenBrowser, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    for path in (
        "/",
        "/profile",
        "/tokens",
        "/workspaces",
        f"/workspaces/{seeded.workspace_id}",
        "/specs",
        "/pools",
        "/accelerator-types",
    ):
        response = await alice.get(path)
        assert response.status_code == 200, (path, response.text[:500])


async def test_member_sees_only_what_their_workspace_may_use(
    open_browser: OpenBrowser, admin: Browser, seeded: Seeded
) -> None:
    alice = await open_browser("alice")
    specs = await alice.get("/specs")
    assert "gpu-a100-1" in specs.text  # a spec without a pool: usable wherever the workspace may run
    pools = await alice.get("/pools")
    assert 'data-name="default"' in pools.text
    assert 'data-name="a100"' not in pools.text
    assert (await alice.get(f"/pools/{seeded.pool_id}")).status_code == 404
    r = await admin.post(f"/pools/{seeded.pool_id}/workspaces", {"workspace": "alice"})
    assert r.status_code == 303
    assert 'data-name="a100"' in (await alice.get("/pools")).text


async def test_member_cannot_see_other_workspaces(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient, seeded: Seeded
) -> None:
    await make_user(db, client, "bob")
    bob = await open_browser("bob")
    response = await bob.get(f"/workspaces/{seeded.workspace_id}")
    assert response.status_code == 404
    listing = await bob.get("/workspaces")
    assert len(re.findall(r'data-testid="workspace-row"', listing.text)) == 1


async def test_member_forms_that_need_admin_are_refused(open_browser: OpenBrowser, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    for path, form in [
        ("/users", {"username": "mallory", "password": "password-123"}),
        ("/workspaces", {"name": "mine"}),
        ("/specs", {"name": "x", "cpu": "1", "memory": "1Gi", "price_per_hour": "1"}),
        ("/pools", {"name": "p"}),
        ("/accelerator-types", {"name": "t", "vendor": "v"}),
        (f"/nodes/{seeded.node_id}/cordon", {}),
        (f"/workspaces/{seeded.workspace_id}/quotas", {"pool_id": seeded.pool_id, "maximum.cpu": "1"}),
    ]:
        response = await alice.post(path, form)
        assert response.status_code == 403, (path, response.status_code, response.text[:300])
