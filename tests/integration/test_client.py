"""The SDK against the real app served by uvicorn: every method of aicenter.client.Client."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest

from aicenter.client import ApiError, Client, ConnectionFailed, Page, User
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD

_n = itertools.count(1)


def uniq(prefix: str) -> str:
    """A fresh name: the server is shared by the module's tests, so names must not collide."""
    return f"{prefix}-{next(_n)}"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_server(tmp_path_factory.mktemp("sdk-home")) as url:
        yield url


@pytest.fixture
def admin(server_url: str) -> Iterator[Client]:
    with Client(server_url) as api:
        api.login("admin", ADMIN_PASSWORD)
        yield api


def new_user(admin: Client, password: str = "user-password-1") -> tuple[User, Client]:
    user = admin.create_user(uniq("user"), password, display_name="A User", email="a@example.org")
    api = Client(admin.base_url)
    api.login(user.username, password)
    return user, api


# -- connection and errors -------------------------------------------------------------------------------------


def test_health_needs_no_token(server_url: str) -> None:
    with Client(server_url + "/api/v1/") as api:
        health = api.health()
    assert health.status == "ok"
    assert health.version


def test_connection_failure_names_the_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", timeout=2) as api, pytest.raises(ConnectionFailed) as info:
        api.health()
    assert info.value.status == 0
    assert info.value.code == "connection_failed"
    assert f"http://127.0.0.1:{port}" in info.value.message
    assert isinstance(info.value, ApiError)


def test_error_envelope_is_parsed(admin: Client) -> None:
    with pytest.raises(ApiError) as info:
        admin.get_user(999_999)
    assert (info.value.status, info.value.code) == (404, "not_found")
    assert info.value.request_id


def test_non_json_error_still_raises_api_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(502, text="Bad gateway\nfrom nginx"))
    with Client("http://proxy.invalid", transport=transport) as api, pytest.raises(ApiError) as info:
        api.health()
    assert (info.value.status, info.value.code, info.value.message) == (502, "http_502", "Bad gateway")


def test_validation_error_names_the_field(admin: Client) -> None:
    with pytest.raises(ApiError) as info:
        admin.create_node(uniq("node"), cpu=4, memory="16Gx")
    assert info.value.status == 422
    assert info.value.code == "validation_failed"
    assert info.value.field == "memory"


# -- auth and tokens -------------------------------------------------------------------------------------------


def test_login_me_logout(server_url: str) -> None:
    api = Client(server_url)
    with pytest.raises(ApiError) as info:
        api.login("admin", "wrong-password")
    assert info.value.code == "unauthenticated"
    result = api.login("admin", ADMIN_PASSWORD, token_name="sdk-test")
    assert api.token == result.token
    assert result.user.username == "admin"
    assert api.me().is_platform_admin
    token = api.token
    api.logout()
    assert api.token is None
    with Client(server_url, token) as stale, pytest.raises(ApiError) as info:
        stale.me()
    assert info.value.status == 401


def test_tokens_create_list_revoke(admin: Client) -> None:
    created = admin.create_token(uniq("ci"), expires_at=datetime.now(UTC) + timedelta(days=1))
    assert created.token
    assert created.expires_at is not None
    with Client(admin.base_url, created.token) as bot:
        assert bot.me().username == "admin"
        assert created.id in [t.id for t in admin.list_tokens()]
        admin.revoke_token(created.id)
        with pytest.raises(ApiError) as info:
            bot.me()
    assert info.value.status == 401
    assert created.id not in [t.id for t in admin.list_tokens()]
    revoked = {t.id: t for t in admin.list_tokens(include_revoked=True)}[created.id]
    assert revoked.revoked_at is not None


def test_my_profile_password_and_workspaces(admin: Client) -> None:
    user, api = new_user(admin)
    with api:
        mine = api.my_workspaces()
        assert [m.workspace.id for m in mine] == [user.default_workspace_id]
        assert api.update_me(display_name="Renamed").display_name == "Renamed"
        api.change_password("user-password-1", "user-password-2")
        api.login(user.username, "user-password-2")
        assert api.me().display_name == "Renamed"


# -- users -----------------------------------------------------------------------------------------------------


def test_users_crud_freeze_thaw(admin: Client) -> None:
    user, api = new_user(admin)
    assert user.default_workspace_id is not None
    assert admin.get_user(user.id).username == user.username
    updated = admin.update_user(user.id, display_name="Dana", email=None, is_platform_admin=False)
    assert (updated.display_name, updated.email) == ("Dana", None)
    assert [u.id for u in admin.list_users(username=user.username)] == [user.id]
    assert user.id in [u.id for u in admin.list_users(q=user.username[:5])]
    assert admin.freeze_user(user.id).state == "frozen"
    with api, pytest.raises(ApiError) as info:
        api.me()
    assert info.value.status == 401
    assert user.id in [u.id for u in admin.list_users(state="frozen")]
    assert admin.thaw_user(user.id).state == "active"
    admin.update_user(user.id, password="user-password-9")
    with Client(admin.base_url) as again:
        again.login(user.username, "user-password-9")


def test_list_pages_follow_cursors(admin: Client) -> None:
    prefix = uniq("page")
    ids = [admin.create_user(f"{prefix}-{i}", "user-password-1").id for i in range(5)]
    first = admin.list_users_page(q=prefix, limit=2)
    assert isinstance(first, Page)
    assert len(first.items) == 2
    assert first.next_cursor
    second = admin.list_users_page(q=prefix, limit=2, cursor=first.next_cursor)
    assert {u.id for u in first.items}.isdisjoint(u.id for u in second.items)
    assert sorted(u.id for u in admin.list_users(q=prefix)) == sorted(ids)


def test_non_admin_is_refused(admin: Client) -> None:
    _, api = new_user(admin)
    with api, pytest.raises(ApiError) as info:
        api.create_user(uniq("user"), "user-password-1")
    assert info.value.status == 403


# -- workspaces, members, quotas, audit ------------------------------------------------------------------------


def test_workspaces_and_members(admin: Client) -> None:
    owner, owner_api = new_user(admin)
    other, _ = new_user(admin)
    ws = admin.create_workspace(uniq("ws"), description="vision team", admin_user_id=owner.id)
    assert admin.get_workspace(ws.id).description == "vision team"
    assert [w.id for w in admin.list_workspaces(name=ws.name)] == [ws.id]
    assert admin.list_workspaces_page(limit=1).items
    with owner_api:
        renamed = owner_api.update_workspace(ws.id, name=ws.name + "-x", description="")
        assert renamed.name == ws.name + "-x"
        added = owner_api.add_member(ws.id, username=other.username)
        assert (added.user_id, added.role) == (other.id, "member")
        assert owner_api.set_member_role(ws.id, other.id, "workspace_admin").role == "workspace_admin"
        members = {m.user_id: m.role for m in owner_api.list_members(ws.id)}
        assert members == {owner.id: "workspace_admin", other.id: "workspace_admin"}
        assert owner_api.list_members_page(ws.id, limit=1).next_cursor
        owner_api.remove_member(ws.id, other.id)
        assert [m.user_id for m in owner_api.list_members(ws.id)] == [owner.id]
    third, _ = new_user(admin)
    assert admin.add_member(ws.id, user_id=third.id).username == third.username
    with pytest.raises(ValueError, match="exactly one"):
        admin.add_member(ws.id)
    admin.delete_workspace(ws.id)
    with pytest.raises(ApiError) as info:
        admin.get_workspace(ws.id)
    assert info.value.status == 404


def test_quotas(admin: Client) -> None:
    ws = admin.create_workspace(uniq("ws"))
    admin.create_accelerator_type(uniq("gpu"), vendor="nvidia", memory="80Gi")
    accel = admin.create_accelerator_type(uniq("gpu"), vendor="nvidia", memory="80Gi")
    pool = admin.create_pool(uniq("pool"))
    quota = admin.set_quota(
        ws.id,
        pool.id,
        maximum={"cpu": 64, "memory": "256Gi", accel.name: 16},
        guaranteed={accel.name: 8},
    )
    assert quota.maximum == {"cpu": 64_000, "memory": 256 << 30, accel.name: 16}
    assert quota.guaranteed == {accel.name: 8}
    assert quota.pool_name == pool.name
    assert [q.pool_id for q in admin.list_quotas(ws.id)] == [pool.id]
    with pytest.raises(ApiError) as info:
        admin.set_quota(ws.id, pool.id, guaranteed={"bogus": 1})
    assert (info.value.code, info.value.field) == ("validation_failed", "guaranteed.bogus")
    admin.delete_quota(ws.id, pool.id)
    assert admin.list_quotas(ws.id) == []


def test_audit_events(admin: Client) -> None:
    ws = admin.create_workspace(uniq("audited"))
    events = list(admin.list_audit_events(workspace_id=ws.id))
    assert events
    assert all(e.workspace_id == ws.id for e in events)
    assert events[0].actor_name == "admin"
    page = admin.list_audit_events_page(actor="admin", since=datetime.now(UTC) - timedelta(hours=1), limit=1)
    assert len(page.items) == 1
    assert not list(admin.list_audit_events(until=datetime(2000, 1, 1, tzinfo=UTC)))
    action = events[0].action
    assert all(e.action == action for e in admin.list_audit_events_page(action=action, limit=5).items)
    target = admin.list_audit_events_page(target_type=events[0].target_type, target_id=events[0].target_id)
    assert events[0].id in [e.id for e in target.items]


# -- inventory -------------------------------------------------------------------------------------------------


def test_accelerator_types(admin: Client) -> None:
    created = admin.create_accelerator_type(uniq("npu"), vendor="huawei", memory="64Gi", description="910B")
    assert created.memory_bytes == 64 << 30
    assert admin.get_accelerator_type(created.id).description == "910B"
    assert created.id in [a.id for a in admin.list_accelerator_types(vendor="huawei")]
    assert admin.list_accelerator_types_page(limit=1).items
    assert admin.update_accelerator_type(created.id, description="Ascend").description == "Ascend"
    admin.delete_accelerator_type(created.id)
    assert created.id not in [a.id for a in admin.list_accelerator_types()]


def test_nodes(admin: Client) -> None:
    accel = admin.create_accelerator_type(uniq("gpu"), vendor="nvidia", memory="80Gi")
    node = admin.create_node(
        uniq("node"),
        cpu=64,
        memory="512Gi",
        accelerators=[{"index": i, "type": accel.name} for i in range(2)],
        address="10.0.0.7",
        labels={"zone": "a"},
        rack="r1",
        leaf="l1",
        spine="s1",
        nvlink_domain="nv1",
    )
    assert (node.cpu_milli, node.memory_bytes, len(node.accelerators)) == (64_000, 512 << 30, 2)
    assert admin.get_node(node.id).labels == {"zone": "a"}
    assert [n.id for n in admin.list_nodes(label={"zone": "a"})] == [node.id]
    assert node.id in [n.id for n in admin.list_nodes(label="zone=a", state=node.state)]
    assert admin.list_nodes_page(limit=1).items
    assert admin.update_node(node.id, labels={"zone": "b"}, rack=None).labels == {"zone": "b"}
    assert admin.cordon_node(node.id).schedule == "cordoned"
    assert node.id in [n.id for n in admin.list_nodes(schedule="cordoned")]
    assert admin.uncordon_node(node.id).schedule == "schedulable"
    assert admin.drain_node(node.id).schedule == "draining"
    pool = admin.create_pool(uniq("pool"), selector={"zone": "b"})
    assert [n.id for n in admin.list_nodes(pool=pool.name)] == [node.id]
    admin.delete_node(node.id)
    with pytest.raises(ApiError) as info:
        admin.get_node(node.id)
    assert info.value.status == 404


def test_specs_and_pools_as_member_and_admin(admin: Client) -> None:
    member, member_api = new_user(admin)
    ws_id = member.default_workspace_id
    assert ws_id is not None
    pool = admin.create_pool(uniq("pool"), description="a100 nodes", selector={"gpu": "a100"})
    assert admin.get_pool(pool.id).selector == {"gpu": "a100"}
    assert admin.update_pool(pool.id, description="A100 nodes").description == "A100 nodes"
    accel = admin.create_accelerator_type(uniq("gpu"), vendor="nvidia")
    spec = admin.create_spec(
        uniq("spec"),
        cpu=8,
        memory="64Gi",
        accelerators=1,
        accelerator_type=accel.name,
        price_per_hour=Decimal("12.5"),
        billing_weight=2.0,
        pool_id=pool.id,
        description="one A100",
    )
    assert (spec.cpu_milli, spec.price_per_hour, spec.pool_id) == (8000, Decimal("12.5"), pool.id)
    assert admin.get_spec(spec.id).description == "one A100"
    assert spec.id in [s.id for s in admin.list_specs(accelerator_type=accel.name)]
    assert admin.list_specs_page(limit=1).items
    assert admin.update_spec(spec.id, price_per_hour="15", enabled=False).price_per_hour == Decimal(15)
    admin.update_spec(spec.id, enabled=True)
    with member_api:
        assert pool.id not in [p.id for p in member_api.list_pools()]
        with pytest.raises(ApiError) as info:
            member_api.get_spec(spec.id)
        assert info.value.status == 404
        admin.grant_pool(pool.id, ws_id)
        assert [w.id for w in admin.list_pool_workspaces(pool.id)] == [ws_id]
        assert pool.id in [p.id for p in member_api.list_pools()]
        assert pool.id in [p.id for p in admin.list_pools(workspace_id=ws_id)]
        assert admin.list_pools_page(limit=1).items
        assert spec.id in [s.id for s in member_api.list_specs(workspace_id=ws_id)]
        assert member_api.get_spec(spec.id).name == spec.name
        admin.revoke_pool(pool.id, ws_id)
        assert pool.id not in [p.id for p in member_api.list_pools()]
    with pytest.raises(ApiError) as info:
        admin.delete_pool(pool.id)  # a spec still uses it
    assert info.value.code == "conflict"
    admin.delete_spec(spec.id)
    admin.delete_pool(pool.id)
    assert pool.id not in [p.id for p in admin.list_pools()]


def test_from_env(server_url: str, admin: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    token = admin.create_token(uniq("job")).token
    monkeypatch.setenv("AICENTER_API_URL", server_url)
    monkeypatch.setenv("AICENTER_TOKEN", token)
    with Client.from_env() as api:
        assert api.me().username == "admin"
