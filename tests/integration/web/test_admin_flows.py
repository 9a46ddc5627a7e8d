"""Create and edit flows of the admin pages, through form posts, checked in the database."""

from __future__ import annotations

import re

import httpx
from sqlalchemy import select

from aicenter.db.engine import Database
from aicenter.db.models import AcceleratorType, Membership, Node, Pool, PoolGrant, Quota, ResourceSpec, User, Workspace
from aicenter.services import auth, inventory
from aicenter.services.context import Actor
from tests.factories import ADMIN, make_user
from tests.integration.web.conftest import Browser, OpenBrowser


async def _one(db: Database, stmt: object) -> object:
    async with db.read() as session:
        return await session.scalar(stmt)  # type: ignore[call-overload]


async def _workspace_id(db: Database, name: str) -> int:
    ws = await _one(db, select(Workspace).where(Workspace.name == name))
    assert isinstance(ws, Workspace)
    return ws.id


async def test_users_create_edit_freeze_thaw(admin: Browser, open_browser: OpenBrowser, db: Database) -> None:
    response = await admin.post(
        "/users",
        {"username": "carol", "password": "carol-password", "display_name": "Carol", "email": "c@example.org"},
    )
    assert response.status_code == 303
    user = await _one(db, select(User).where(User.username == "carol"))
    assert isinstance(user, User)
    assert user.default_workspace_id is not None
    assert response.headers["location"] == f"/users/{user.id}"

    duplicate = await admin.post("/users", {"username": "carol", "password": "carol-password"})
    assert duplicate.status_code == 409
    assert 'data-testid="user-create-username-error"' in duplicate.text
    weak = await admin.post("/users", {"username": "dave", "password": "short"})
    assert weak.status_code == 422
    assert 'data-testid="user-create-password-error"' in weak.text
    assert await _one(db, select(User.id).where(User.username == "dave")) is None

    edit = await admin.post(f"/users/{user.id}", {"display_name": "Carol C", "email": "", "is_platform_admin": "on"})
    assert edit.status_code == 303
    async with db.read() as session:
        fresh = await session.get(User, user.id)
        assert fresh is not None
        assert (fresh.display_name, fresh.email, fresh.is_platform_admin) == ("Carol C", None, True)

    carol = await open_browser("carol", "carol-password")
    assert (await carol.get("/")).status_code == 200
    frozen = await admin.post(f"/users/{user.id}/freeze", {"next": "/users"})
    assert frozen.status_code == 303
    assert frozen.headers["location"] == "/users"
    assert await _one(db, select(User.state).where(User.id == user.id)) == "frozen"
    assert (await carol.get("/")).status_code == 303  # signed out at once
    listing = await admin.get("/users?state=frozen")
    assert 'data-username="carol"' in listing.text
    assert 'data-username="admin"' not in listing.text
    thawed = await admin.post(f"/users/{user.id}/thaw")
    assert thawed.status_code == 303
    assert await _one(db, select(User.state).where(User.id == user.id)) == "active"


async def test_admin_cannot_freeze_themselves(admin: Browser, db: Database) -> None:
    admin_id = await _one(db, select(User.id).where(User.username == "admin"))
    response = await admin.post(f"/users/{admin_id}/freeze")
    assert response.status_code == 409
    assert 'data-testid="user-state-error"' in response.text


async def test_workspace_members_and_quotas(admin: Browser, db: Database, client: httpx.AsyncClient) -> None:
    await make_user(db, client, "alice")
    created = await admin.post("/workspaces", {"name": "vision", "description": "CV team", "admin_username": "alice"})
    assert created.status_code == 303
    ws_id = await _workspace_id(db, "vision")
    assert created.headers["location"] == f"/workspaces/{ws_id}"
    bad = await admin.post("/workspaces", {"name": "Not A Name"})
    assert bad.status_code == 422
    assert 'data-testid="workspace-create-name-error"' in bad.text
    nobody = await admin.post("/workspaces", {"name": "x", "admin_username": "nobody"})
    assert nobody.status_code == 422
    assert 'data-testid="workspace-create-admin-username-error"' in nobody.text

    renamed = await admin.post(f"/workspaces/{ws_id}", {"name": "vision2", "description": "CV"})
    assert renamed.status_code == 303
    assert await _one(db, select(Workspace.name).where(Workspace.id == ws_id)) == "vision2"

    await make_user(db, client, "bob")
    added = await admin.post(f"/workspaces/{ws_id}/members", {"username": "bob", "role": "member"})
    assert added.status_code == 303
    again = await admin.post(f"/workspaces/{ws_id}/members", {"username": "bob", "role": "member"})
    assert again.status_code == 409
    assert 'data-testid="member-add-username-error"' in again.text
    bob_id = await _one(db, select(User.id).where(User.username == "bob"))
    promoted = await admin.post(f"/workspaces/{ws_id}/members/{bob_id}", {"role": "workspace_admin"})
    assert promoted.status_code == 303
    role = await _one(db, select(Membership.role).where(Membership.workspace_id == ws_id, Membership.user_id == bob_id))
    assert role == "workspace_admin"
    removed = await admin.post(f"/workspaces/{ws_id}/members/{bob_id}/remove")
    assert removed.status_code == 303
    assert (
        await _one(db, select(Membership.role).where(Membership.user_id == bob_id, Membership.workspace_id == ws_id))
        is None
    )
    alice_id = await _one(db, select(User.id).where(User.username == "alice"))
    last = await admin.post(f"/workspaces/{ws_id}/members/{alice_id}/remove")
    assert last.status_code == 409  # the last workspace admin stays
    assert "last admin" in last.text

    pool_id = await _one(db, select(Pool.id).where(Pool.is_default.is_(True)))
    quota = await admin.post(
        f"/workspaces/{ws_id}/quotas",
        {
            "pool_id": pool_id,
            "guaranteed.cpu": "8",
            "maximum.cpu": "16",
            "maximum.memory": "64Gi",
            "guaranteed.memory": "",
        },
    )
    assert quota.status_code == 303
    row = await _one(db, select(Quota).where(Quota.workspace_id == ws_id))
    assert isinstance(row, Quota)
    assert row.guaranteed == {"cpu": 8000}
    assert row.maximum == {"cpu": 16000, "memory": 64 * 2**30}
    page = await admin.get(f"/workspaces/{ws_id}")
    assert 'data-resource="memory"' in page.text
    assert "64Gi" in page.text

    bad_quota = await admin.post(f"/workspaces/{ws_id}/quotas", {"pool_id": pool_id, "maximum.memory": "16Gx"})
    assert bad_quota.status_code == 422
    assert 'data-testid="quota-maximum-memory-error"' in bad_quota.text
    assert 'value="16Gx"' in bad_quota.text
    over = await admin.post(
        f"/workspaces/{ws_id}/quotas", {"pool_id": pool_id, "guaranteed.cpu": "32", "maximum.cpu": "16"}
    )
    assert over.status_code == 422
    assert 'data-testid="quota-guaranteed-cpu-error"' in over.text
    row = await _one(db, select(Quota.maximum).where(Quota.workspace_id == ws_id))
    assert row == {"cpu": 16000, "memory": 64 * 2**30}  # unchanged

    dropped = await admin.post(f"/workspaces/{ws_id}/quotas/{pool_id}/delete")
    assert dropped.status_code == 303
    assert await _one(db, select(Quota.id).where(Quota.workspace_id == ws_id)) is None

    deleted = await admin.post(f"/workspaces/{ws_id}/delete")
    assert deleted.status_code == 303
    assert await _one(db, select(Workspace.id).where(Workspace.id == ws_id)) is None


async def test_workspace_admin_manages_members_but_not_quotas(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")  # workspace admin of "alice"
    await make_user(db, client, "bob")
    alice = await open_browser("alice")
    ws_id = await _workspace_id(db, "alice")
    page = await alice.get(f"/workspaces/{ws_id}")
    assert 'data-testid="member-add-form"' in page.text
    assert 'data-testid="quota-form"' not in page.text
    added = await alice.post(f"/workspaces/{ws_id}/members", {"username": "bob", "role": "member"})
    assert added.status_code == 303
    bob = await open_browser("bob")
    bob_page = await bob.get(f"/workspaces/{ws_id}")
    assert bob_page.status_code == 200
    assert 'data-testid="member-add-form"' not in bob_page.text
    refused = await bob.post(f"/workspaces/{ws_id}/members", {"username": "alice", "role": "member"})
    assert refused.status_code == 403


async def test_workspace_admin_lets_platform_admins_read_job_logs(
    admin: Browser, open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")  # workspace admin of "alice"
    alice = await open_browser("alice")
    ws_id = await _workspace_id(db, "alice")
    page = await alice.get(f"/workspaces/{ws_id}")
    assert 'id="workspace-edit-admins-read-logs"' in page.text
    assert 'data-testid="workspace-admins-read-logs">no<' in page.text
    form = {"name": "alice", "description": "", "admins_read_logs_shown": "1"}
    allowed = await alice.post(f"/workspaces/{ws_id}", {**form, "admins_read_logs": "on"})
    assert allowed.status_code == 303
    assert 'data-testid="workspace-admins-read-logs">yes<' in (await alice.get(f"/workspaces/{ws_id}")).text
    # The platform admin edits the workspace without the box, so the setting stays as its admins left it.
    admin_page = await admin.get(f"/workspaces/{ws_id}")
    assert 'id="workspace-edit-admins-read-logs"' not in admin_page.text
    renamed = await admin.post(f"/workspaces/{ws_id}", {"name": "alice", "description": "by the admin"})
    assert renamed.status_code == 303
    assert 'data-testid="workspace-admins-read-logs">yes<' in (await alice.get(f"/workspaces/{ws_id}")).text
    denied = await alice.post(f"/workspaces/{ws_id}", form)  # unticked
    assert denied.status_code == 303
    assert 'data-testid="workspace-admins-read-logs">no<' in (await alice.get(f"/workspaces/{ws_id}")).text


async def test_inventory_crud(admin: Browser, db: Database) -> None:
    made = await admin.post("/accelerator-types", {"name": "ascend-910b", "vendor": "huawei", "memory": "64Gi"})
    assert made.status_code == 303
    kind = await _one(db, select(AcceleratorType).where(AcceleratorType.name == "ascend-910b"))
    assert isinstance(kind, AcceleratorType)
    assert kind.memory_bytes == 64 * 2**30
    dup = await admin.post("/accelerator-types", {"name": "ascend-910b", "vendor": "huawei"})
    assert dup.status_code == 409
    assert 'data-testid="type-create-name-error"' in dup.text

    pool = await admin.post("/pools", {"name": "npu", "description": "Ascend nodes", "selector": "accel=ascend"})
    assert pool.status_code == 303
    pool_row = await _one(db, select(Pool).where(Pool.name == "npu"))
    assert isinstance(pool_row, Pool)
    assert pool_row.selector == {"accel": "ascend"}
    bad_selector = await admin.post("/pools", {"name": "p2", "selector": "no-equals-sign"})
    assert bad_selector.status_code == 422
    assert 'data-testid="pool-create-selector-error"' in bad_selector.text

    spec = await admin.post(
        "/specs",
        {
            "name": "npu-1",
            "cpu": "16",
            "memory": "128Gi",
            "accelerators": "1",
            "accelerator_type": "ascend-910b",
            "price_per_hour": "3.25",
            "billing_weight": "1.5",
            "pool_id": str(pool_row.id),
            "enabled": "on",
        },
    )
    assert spec.status_code == 303, spec.text[:500]
    spec_row = await _one(db, select(ResourceSpec).where(ResourceSpec.name == "npu-1"))
    assert isinstance(spec_row, ResourceSpec)
    assert (spec_row.cpu_milli, spec_row.accelerators, spec_row.pool_id) == (16000, 1, pool_row.id)
    bad_spec = await admin.post("/specs", {"name": "bad", "cpu": "16", "memory": "16Gx", "price_per_hour": "1"})
    assert bad_spec.status_code == 422
    assert 'data-testid="spec-create-memory-error"' in bad_spec.text
    edit = await admin.post(
        f"/specs/{spec_row.id}",
        {
            "name": "npu-1",
            "cpu": "32",
            "memory": "128Gi",
            "accelerators": "1",
            "accelerator_type": "ascend-910b",
            "price_per_hour": "3.25",
            "billing_weight": "1.5",
            "pool_id": str(pool_row.id),
        },
    )
    assert edit.status_code == 303
    async with db.read() as session:
        fresh = await session.get(ResourceSpec, spec_row.id)
        assert fresh is not None
        assert fresh.cpu_milli == 32000
        assert fresh.enabled is False  # an unchecked box

    in_use = await admin.post(f"/accelerator-types/{kind.id}/delete")
    assert in_use.status_code == 409
    assert 'data-testid="type-delete-error"' in in_use.text
    pool_in_use = await admin.post(f"/pools/{pool_row.id}/delete")
    assert pool_in_use.status_code == 409
    assert (await admin.post(f"/specs/{spec_row.id}/delete")).status_code == 303
    assert (await admin.post(f"/pools/{pool_row.id}/delete")).status_code == 303
    assert (await admin.post(f"/accelerator-types/{kind.id}/delete")).status_code == 303
    assert await _one(db, select(AcceleratorType.id).where(AcceleratorType.id == kind.id)) is None


async def test_pool_grants(admin: Browser, db: Database, client: httpx.AsyncClient) -> None:
    await make_user(db, client, "alice")
    async with db.write() as session:
        view = await inventory.create_pool(session, ADMIN, name="a100")
    granted = await admin.post(f"/pools/{view.pool.id}/workspaces", {"workspace": "alice"})
    assert granted.status_code == 303
    ws_id = await _workspace_id(db, "alice")
    grant = await _one(
        db, select(PoolGrant.pool_id).where(PoolGrant.workspace_id == ws_id, PoolGrant.pool_id == view.pool.id)
    )
    assert grant == view.pool.id
    unknown = await admin.post(f"/pools/{view.pool.id}/workspaces", {"workspace": "nope"})
    assert unknown.status_code == 422
    assert 'data-testid="pool-grant-workspace-error"' in unknown.text
    revoked = await admin.post(f"/pools/{view.pool.id}/workspaces/{ws_id}/revoke")
    assert revoked.status_code == 303
    assert (
        await _one(
            db, select(PoolGrant.pool_id).where(PoolGrant.workspace_id == ws_id, PoolGrant.pool_id == view.pool.id)
        )
        is None
    )


async def test_nodes_register_label_cordon_drain(admin: Browser, db: Database) -> None:
    async with db.write() as session:
        await inventory.create_accelerator_type(session, ADMIN, name="nvidia-a100", vendor="nvidia", memory="80Gi")
    created = await admin.post(
        "/nodes",
        {
            "name": "gpu-01",
            "cpu": "64",
            "memory": "512Gi",
            "accelerator_type": "nvidia-a100",
            "accelerator_count": "4",
            "labels": "gpu=a100\nzone=b",
            "rack": "r1",
        },
    )
    assert created.status_code == 303, created.text[:500]
    node = await _one(db, select(Node).where(Node.name == "gpu-01"))
    assert isinstance(node, Node)
    assert len(node.accelerators) == 4
    assert node.labels == {"gpu": "a100", "zone": "b"}
    bad = await admin.post("/nodes", {"name": "gpu-02", "cpu": "lots", "memory": "1Gi"})
    assert bad.status_code == 422
    assert 'data-testid="node-create-cpu-error"' in bad.text

    listing = await admin.get("/nodes?label=gpu=a100")
    assert 'data-node-name="gpu-01"' in listing.text
    assert "4 \u00d7 nvidia-a100" in listing.text
    assert 'data-node-name="gpu-01"' not in (await admin.get("/nodes?label=gpu=h100")).text
    assert (await admin.get("/nodes?label=oops")).status_code == 422

    for action, expected in (("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "schedulable")):
        response = await admin.post(f"/nodes/{node.id}/{action}", {"next": "/nodes"})
        assert response.status_code == 303
        assert response.headers["location"] == "/nodes"
        assert await _one(db, select(Node.schedule).where(Node.id == node.id)) == expected
    assert (await admin.post(f"/nodes/{node.id}/explode")).status_code == 404

    edited = await admin.post(
        f"/nodes/{node.id}", {"labels": "gpu=a100", "address": "10.0.0.1", "rack": "", "leaf": "l1"}
    )
    assert edited.status_code == 303
    async with db.read() as session:
        fresh = await session.get(Node, node.id)
        assert fresh is not None
        assert (fresh.labels, fresh.address, fresh.rack, fresh.leaf) == ({"gpu": "a100"}, "10.0.0.1", None, "l1")
    bad_label = await admin.post(f"/nodes/{node.id}", {"labels": "bad key!=x"})
    assert bad_label.status_code == 422
    assert 'data-testid="node-edit-labels-error"' in bad_label.text
    assert (await admin.post(f"/nodes/{node.id}/delete")).status_code == 303
    assert await _one(db, select(Node.id).where(Node.id == node.id)) is None


async def test_audit_log_filters_and_pages(admin: Browser, db: Database) -> None:
    admin_id = await _one(db, select(User.id).where(User.username == "admin"))
    assert isinstance(admin_id, int)
    async with db.write() as session:  # through the service: 55 form posts would only slow the test
        for i in range(55):
            await auth.create_api_token(session, Actor(admin_id, "admin", True), name=f"t{i}", expires_at=None)
    page = await admin.get("/audit?action=token.create")
    assert page.status_code == 200
    assert len(re.findall(r'data-testid="audit-row"', page.text)) == 50
    next_link = re.search(r'href="([^"]+)" data-testid="page-next"', page.text)
    assert next_link
    second = await admin.get(next_link.group(1).replace("&amp;", "&"))
    assert len(re.findall(r'data-testid="audit-row"', second.text)) == 5
    prefix = await admin.get("/audit?action=auth.")
    assert 'data-action="auth.session"' in prefix.text
    assert 'data-action="token.create"' not in prefix.text
    bad = await admin.get("/audit?since=yesterday")
    assert bad.status_code == 422
    assert 'data-testid="audit-filter-since-error"' in bad.text
    backwards = await admin.get("/audit?since=2030-01-02&until=2030-01-01")
    assert backwards.status_code == 422
