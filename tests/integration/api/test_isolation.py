"""Tenant isolation, generated from the OpenAPI document: every operation, whoever wrote it, is checked.

For each operation (path + method) of ``app.openapi()``:

* it declares ``x-aicenter-access`` (src/aicenter/api/access.py), which says who may call it;
* an anonymous caller gets 401 ``unauthenticated``, unless the operation is ``public``;
* a member of another workspace (``mallory``, who administers her own workspace B) calling it on workspace A's
  resources gets 403 or 404, never 2xx, and exactly what she would get for an id that does not exist (no
  existence leak); ``admin`` operations give a plain member 403; ``workspace_admin`` operations give a plain
  member of A (``amy``) 403; ``user`` operations never give a signed-in user 401;
* the caller who IS allowed (a platform admin for ``admin`` operations, else ``alice``, A's workspace admin) is
  not refused: this proves that the 403/404s above come from authorization and not from wrong ids.

Path parameters are filled by name from real rows (``PATH_PARAMS``): a new parameter name fails the test,
naming it, so that whoever adds the endpoint extends the map. Bodies are synthesized from the request schema
so that body validation (which FastAPI runs before the service checks authorization) does not hide the
check; an operation whose body could not be synthesized is reported at the end of the module as not exercised.
Raw bodies (``application/octet-stream``) are the world's open upload's bytes, with the required headers
(``_HEADER_VALUES``) computed from them.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import count
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from aicenter.api.access import JOB_TOKEN_EXTENSION, Access
from aicenter.app import create_app
from aicenter.core.catalog import ItemKind
from aicenter.core.roles import TokenKind, WorkspaceRole
from aicenter.db.engine import Database
from aicenter.db.models import (
    AcceleratorType,
    Job,
    Membership,
    Node,
    Pool,
    PoolGrant,
    Quota,
    ResourceSpec,
    User,
)
from aicenter.services import alerts, auth, catalog, jobs, monitoring, notebooks, serving, ssh_keys, tenancy
from aicenter.services.context import Actor
from aicenter.services.monitoring import Sample
from tests.support.settings import make_settings

API_PREFIX = "/api/"
_METHODS = ("get", "post", "put", "patch", "delete")
MISSING_ID = 987_654_321  # an id no row has: what a hidden row must look like
PASSWORD = "Isolation-passw0rd"
_names = count(1)


# ------------------------------------------------------------------------------------------------- operations


@dataclass(frozen=True)
class Operation:
    method: str
    path: str

    @property
    def id(self) -> str:
        return f"{self.method.upper()} {self.path}"


def _collect_operations() -> list[Operation]:
    """Every API operation of the app as built now; building the app touches no database."""
    with tempfile.TemporaryDirectory() as home:
        settings = make_settings(Path(home), database_url=f"sqlite+aiosqlite:///{home}/collect.db")
        document = create_app(settings, run_controllers=False).openapi()
    return [
        Operation(method, path)
        for path, item in sorted(document["paths"].items())
        if path.startswith(API_PREFIX)
        for method in _METHODS
        if method in item
    ]


OPERATIONS = _collect_operations()


def _spec(app: FastAPI, op: Operation) -> dict[str, Any]:
    spec: dict[str, Any] = app.openapi()["paths"][op.path][op.method]
    return spec


def _access(app: FastAPI, op: Operation) -> Access:
    declared = _spec(app, op).get("x-aicenter-access")
    assert declared is not None, (
        f"{op.id} declares no x-aicenter-access: add openapi_extra=access(Access.X) to its route "
        f"(src/aicenter/api/access.py)"
    )
    assert declared in set(Access), f"{op.id} declares an unknown x-aicenter-access {declared!r}"
    return Access(declared)


# ------------------------------------------------------------------------------------------------- the world


@dataclass
class Caller:
    user_id: int
    username: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class World:
    """Workspace A with its admin, a plain member and resources; an outsider who administers workspace B."""

    admin: Caller
    alice: Caller  # workspace_admin of A
    amy: Caller  # plain member of A
    mallory: Caller  # workspace_admin of B, not in A
    workspace_a: int
    workspace_b: int
    pool_a: int  # granted to A only
    spec_a: int  # in pool A, so only A's members see it
    node: int
    accelerator_type: int
    accelerator_type_name: str
    alice_token_id: int  # a named API token of alice, not the one she calls with
    items: dict[str, int]  # collection name (datasets, ...) -> a private item of alice, version 1 has README.md
    presets: dict[str, int]  # collection name -> a preset item (imports go into presets only)
    version_id: int  # id of version 1 of alice's dataset (for "#<id>" references)
    upload_id: int  # an open upload of alice: one needed file of one part
    upload_bytes: bytes  # the content of that file
    import_dir: str  # a directory under the server's import roots, with one file
    # --- jobs ---
    job_id: int = 0  # a queued job of alice in workspace A
    template_id: int = 0  # a job template of workspace A, by alice
    job_token: str = ""  # a job token of alice's job (what its replicas get as AICENTER_TOKEN)
    other_job_id: int = 0  # another job of alice, which that token must not reach
    notebook_id: int = 0  # a queued notebook of alice in workspace A
    # --- end jobs ---
    # --- alerts ---
    alert_ids: dict[str, int] = field(default_factory=dict)  # rule, silence, channel of A (alice's)
    # --- end alerts ---
    ssh_key_id: int = 0  # an SSH key of alice
    service_id: int = 0  # a service of alice in workspace A (a custom command: no model needed)
    service_key_id: int = 0  # an API key of that service

    def item_for(self, path: str) -> int:
        """The item an operation's {item_id} names: collections differ by kind, imports need a preset."""
        plural = path.split("/")[3]
        return (self.presets if path.endswith("/imports") else self.items)[plural]


@dataclass(frozen=True)
class PathParam:
    """How to fill a path parameter: its value in the world, and whether it names something of workspace A
    (a pool granted to A, A's user's token, ...) that an outsider must not reach even through a ``user``
    operation, as opposed to platform-wide things (nodes, accelerator types) that only ``admin`` operations touch.
    """

    value: Callable[[World, str], int | str]  # (world, the operation's path) -> value
    of_workspace_a: bool


# Extend this map when you add an endpoint with a new path parameter.
PATH_PARAMS: dict[str, PathParam] = {
    "workspace_id": PathParam(lambda w, p: w.workspace_a, True),
    "user_id": PathParam(lambda w, p: w.alice.user_id, True),
    "member_id": PathParam(lambda w, p: w.amy.user_id, True),
    "pool_id": PathParam(lambda w, p: w.pool_a, True),
    "spec_id": PathParam(lambda w, p: w.spec_a, True),
    "token_id": PathParam(lambda w, p: w.alice_token_id, True),
    "node_id": PathParam(lambda w, p: w.node, False),
    "accelerator_type_id": PathParam(lambda w, p: w.accelerator_type, False),
    "item_id": PathParam(lambda w, p: w.item_for(p), True),
    "number": PathParam(lambda w, p: 1, True),
    "path": PathParam(lambda w, p: "README.md", True),
    "upload_id": PathParam(lambda w, p: w.upload_id, True),
    "index": PathParam(lambda w, p: 0, True),
    "part": PathParam(lambda w, p: 0, True),
    # --- jobs ---
    "job_id": PathParam(lambda w, p: w.job_id, True),
    "template_id": PathParam(lambda w, p: w.template_id, True),
    "notebook_id": PathParam(lambda w, p: w.notebook_id, True),
    # --- end jobs ---
    # --- alerts ---
    "rule_id": PathParam(lambda w, p: w.alert_ids.get("rule", 1), True),
    "silence_id": PathParam(lambda w, p: w.alert_ids.get("silence", 1), True),
    "channel_id": PathParam(lambda w, p: w.alert_ids.get("channel", 1), True),
    # --- end alerts ---
    "key_id": PathParam(lambda w, p: w.service_key_id if "/services/" in p else w.ssh_key_id, True),
    "service_id": PathParam(lambda w, p: w.service_id, True),
}


async def _caller(db: Database, username: str, *, admin: bool = False) -> Caller:
    """A user with a default workspace, created through the service, and an API token.

    Tokens come from the token service rather than /auth/login: a login costs an argon2 verification
    (~60 ms), and the world is rebuilt for each of a few hundred tests.
    """
    async with db.write() as session:
        user = await tenancy.create_user(
            session, Actor.system("test"), username=username, password=None, is_platform_admin=admin
        )
        user.password_hash = _password_hash()
        issued = await auth.issue_token(session, user, name="isolation", kind=TokenKind.API, ttl_s=3600)
    return Caller(user.id, username, issued.secret)


_HASH: list[str] = []


def _password_hash() -> str:
    if not _HASH:
        _HASH.append(auth.hash_password(PASSWORD))
    return _HASH[0]


@pytest_asyncio.fixture(loop_scope="session")
async def world(db: Database, app: FastAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    admin = await _caller(db, "iso-admin", admin=True)
    alice = await _caller(db, "alice")
    amy = await _caller(db, "amy")
    mallory = await _caller(db, "mallory")
    async with db.write() as session:
        alice_user = await session.get(User, alice.user_id)
        mallory_user = await session.get(User, mallory.user_id)
        assert alice_user is not None
        assert mallory_user is not None
        workspace_a = alice_user.default_workspace_id
        workspace_b = mallory_user.default_workspace_id
        assert workspace_a is not None
        assert workspace_b is not None
        session.add(Membership(workspace_id=workspace_a, user_id=amy.user_id, role=WorkspaceRole.MEMBER.value))

        accelerator_type = AcceleratorType(name="nvidia-a100", vendor="nvidia", memory_bytes=80 * 2**30)
        pool = Pool(name="pool-a", description="granted to workspace A only", selector={"team": "a"})
        node = Node(
            name="node-1",
            cpu_milli=64_000,
            memory_bytes=512 * 2**30,
            accelerators=[{"index": 0, "type": "nvidia-a100", "memory_bytes": 80 * 2**30}],
            labels={"team": "a"},
        )
        session.add_all([accelerator_type, pool, node])
        await session.flush()
        session.add(PoolGrant(pool_id=pool.id, workspace_id=workspace_a))
        session.add(
            Quota(
                workspace_id=workspace_a,
                pool_id=pool.id,
                guaranteed={"cpu": 8000, "memory": 64 * 2**30},
                maximum={"cpu": 16000, "memory": 128 * 2**30, "nvidia-a100": 2},
            )
        )
        spec = ResourceSpec(
            name="gpu-a100-1",
            cpu_milli=8000,
            memory_bytes=64 * 2**30,
            accelerators=1,
            accelerator_type="nvidia-a100",
            price_per_hour=Decimal("10"),
            pool_id=pool.id,
        )
        session.add(spec)
        alice_token = await auth.issue_token(session, alice_user, name="laptop", kind=TokenKind.API, ttl_s=None)
        await session.flush()
        ids = (pool.id, spec.id, node.id, accelerator_type.id, alice_token.token.id)
    items, presets, version_id, upload_id, upload_bytes = await _catalog_world(app, tmp_path, alice, admin)
    import_dir = tmp_path / "imports" / "one"
    import_dir.mkdir(parents=True)
    (import_dir / "data.txt").write_bytes(b"imported")
    monkeypatch.setattr(app.state.ctx.settings, "import_roots", [tmp_path / "imports"])
    job_id, template_id, job_token, other_job_id, notebook_id = await _jobs_world(db, alice)  # jobs
    await _series_world(db, job_id)  # series
    alert_ids = await _alerts_world(db, alice, workspace_a)  # alerts
    ssh_key_id = await _ssh_keys_world(db, alice)  # ssh keys
    service_id, service_key_id = await _services_world(db, alice)  # services
    return World(
        admin=admin,
        alice=alice,
        amy=amy,
        mallory=mallory,
        workspace_a=workspace_a,
        workspace_b=workspace_b,
        pool_a=ids[0],
        spec_a=ids[1],
        node=ids[2],
        accelerator_type=ids[3],
        accelerator_type_name=accelerator_type.name,
        alice_token_id=ids[4],
        items=items,
        presets=presets,
        version_id=version_id,
        upload_id=upload_id,
        upload_bytes=upload_bytes,
        import_dir=str(import_dir),
        job_id=job_id,
        template_id=template_id,
        job_token=job_token,
        other_job_id=other_job_id,
        notebook_id=notebook_id,
        alert_ids=alert_ids,
        ssh_key_id=ssh_key_id,
        service_id=service_id,
        service_key_id=service_key_id,
    )


async def _catalog_world(
    app: FastAPI, tmp_path: Path, alice: Caller, admin: Caller
) -> tuple[dict[str, int], dict[str, int], int, int, bytes]:
    """Per kind a private item of alice whose version 1 holds README.md, and a preset item; an open upload of
    alice whose one file (fresh random bytes, so the store cannot already hold them) still needs its part."""
    ctx = app.state.ctx
    as_alice = Actor(alice.user_id, alice.username)
    as_admin = Actor(admin.user_id, admin.username, is_platform_admin=True)
    content = tmp_path / "content"
    content.mkdir()
    (content / "README.md").write_bytes(b"alice's notes")
    items: dict[str, int] = {}
    presets: dict[str, int] = {}
    for kind in ItemKind:
        async with ctx.db.write() as session:
            item = await catalog.create_item(session, as_alice, kind, name=f"private-{kind.value}")
            preset = await catalog.create_item(session, as_admin, kind, name=f"preset-{kind.value}", preset=True)
        await catalog.create_version_from_directory(ctx.db, as_alice, ctx.store, kind, item.id, content)
        items[kind.plural], presets[kind.plural] = item.id, preset.id
    upload_bytes = os.urandom(16)
    async with ctx.db.write() as session:
        version = await catalog.get_version(session, as_alice, ItemKind.DATASET, items["datasets"], 1)
        upload = await catalog.start_upload(
            session,
            as_alice,
            ctx.store,
            ctx.settings,
            ItemKind.DATASET,
            items["datasets"],
            files=[{"path": "part.bin", "size": len(upload_bytes), "sha256": hashlib.sha256(upload_bytes).hexdigest()}],
        )
    assert upload.needed == [0]
    return items, presets, version.id, upload.id, upload_bytes


# --- jobs ---
async def _jobs_world(db: Database, alice: Caller) -> tuple[int, int, str, int, int]:
    """A queued job of alice in workspace A on spec gpu-a100-1 (pool A), a template of A, a job token of that
    job, a second job of alice and a queued notebook of hers."""
    as_alice = Actor(alice.user_id, alice.username)
    job_spec = {
        "name": "iso-job",
        "tasks": [{"resources": {"spec": "gpu-a100-1"}, "command": "echo hi"}],
    }
    async with db.write() as session:
        job = await jobs.submit_job(session, as_alice, job_spec)
        template = await jobs.create_template(session, as_alice, name="iso-template", spec=job_spec)
        other = await jobs.submit_job(session, as_alice, {**job_spec, "name": "iso-other-job"})
        user = await session.get(User, alice.user_id)
        assert user is not None
        token = await auth.issue_token(
            session, user, name="iso job token", kind=TokenKind.JOB, ttl_s=None, job_id=job.job.id
        )
        notebook = await notebooks.create_notebook(
            session, as_alice, {"name": "iso-notebook", "resources": {"spec": "gpu-a100-1"}}
        )
    return job.job.id, template.template.id, token.secret, other.job.id, notebook


# --- end jobs ---


async def _services_world(db: Database, alice: Caller) -> tuple[int, int]:
    """A service of alice in workspace A (its first replica queued) and an API key of it."""
    as_alice = Actor(alice.user_id, alice.username)
    spec = {
        "name": "iso-service",
        "runtime": "command",
        "command": "python -m http.server $PORT",
        "resources": {"spec": "gpu-a100-1"},
    }
    async with db.write() as session:
        service_id = await serving.deploy_service(session, as_alice, spec)
        key = await serving.create_key(session, as_alice, service_id, "iso-key")
    return service_id, key.row.id


# --- series ---
SERIES_NAME = "report.iso_loss"


async def _series_world(db: Database, job_id: int) -> None:
    """A reported series of alice's job (workspace A): the allowed caller's series query finds it."""
    async with db.write() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        at = datetime.now(UTC) - timedelta(minutes=1)
        sample = Sample(SERIES_NAME, at, 0.5, {"task": "worker"}, workspace_id=job.workspace_id, job_id=job_id)
        await monitoring.record_samples(session, [sample])


# --- end series ---


# --- alerts ---
async def _alerts_world(db: Database, alice: Caller, workspace_a: int) -> dict[str, int]:
    """A rule, a silence and a channel of workspace A, made by alice (its admin)."""
    as_alice = Actor(alice.user_id, alice.username)
    async with db.write() as session:
        rule = await alerts.create_rule(
            session, as_alice, name="iso-rule", expression="job.pending_seconds > 60", workspace_id=workspace_a
        )
        silence = await alerts.create_silence(
            session, as_alice, matchers={"rule": "iso-rule"}, duration_s=600, workspace_id=workspace_a
        )
        # A webhook nobody listens on (port 9 is discard): the test endpoint reports the failure, fast.
        channel = await alerts.create_channel(
            session,
            as_alice,
            name="iso-channel",
            kind="webhook",
            target="http://127.0.0.1:9/",
            workspace_id=workspace_a,
        )
    return {"rule": rule.id, "silence": silence.id, "channel": channel.id}


# --- end alerts ---


# --- ssh keys ---
def _fresh_public_key() -> str:
    """A new ed25519 public key line: each registration needs a key nobody has registered."""
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


async def _ssh_keys_world(db: Database, alice: Caller) -> int:
    """An SSH key of alice."""
    async with db.write() as session:
        key = await ssh_keys.add_key(
            session, Actor(alice.user_id, alice.username), name="laptop", public_key=_fresh_public_key()
        )
    return key.id


# --- end ssh keys ---


# ------------------------------------------------------------------------------------------------- requests


def _path_params(op: Operation) -> list[str]:
    return re.findall(r"{([^}]+)}", op.path)


def _url(op: Operation, world: World, missing: str | None = None) -> str:
    """The operation's URL on A's resources; ``missing`` names one parameter to point at a nonexistent id."""
    url = op.path
    for name in _path_params(op):
        param = PATH_PARAMS.get(name)
        if param is None:
            pytest.fail(
                f"{op.id}: unknown path parameter {{{name}}}; add it to PATH_PARAMS in "
                f"tests/integration/api/test_isolation.py with a real row of workspace A"
            )
        value = MISSING_ID if name == missing else param.value(world, op.path)
        url = url.replace(f"{{{name}}}", str(value))
    return url


class _Unsynthesizable(Exception):
    """The request schema asks for something the synthesizer cannot make up."""


@dataclass
class BodyFactory:
    """Minimal valid-shaped JSON bodies from the OpenAPI request schema, with plausible values by field name."""

    components: dict[str, Any]
    world: World
    all_fields: bool = False  # False: required fields only; True: every field (for "one of a or b" bodies)
    trail: list[str] = field(default_factory=list)

    def make(self, schema: dict[str, Any], name: str = "") -> Any:
        if name in _OBJECT_VALUES:
            return _OBJECT_VALUES[name](self.world)
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return schema["enum"][0]
        if "default" in schema and schema["default"] is not None and not self.all_fields:
            return schema["default"]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if self._resolve(o).get("type") != "null"]
                if not options:
                    return None
                # A name-based string ("1Gi", "1.5") beats a bare number for quantities that accept both.
                strings = [o for o in options if self._resolve(o).get("type") == "string"]
                return self.make(strings[0] if strings and name in _STRING_VALUES else options[0], name)
        if "allOf" in schema:
            return self.make(schema["allOf"][0], name)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            props: dict[str, Any] = schema.get("properties", {})
            wanted = props if self.all_fields else schema.get("required", [])
            return {key: self.make(props.get(key, {}), key) for key in wanted}
        if kind == "array":
            n = int(schema.get("minItems", 0))
            return [self.make(schema.get("items", {}), name) for _ in range(n)]
        if kind == "string":
            return self._string(schema, name)
        if kind == "integer":
            return self._integer(schema, name)
        if kind == "number":
            return float(max(1, schema.get("minimum", 1)))
        if kind == "boolean":
            return False
        if not schema:
            return self._string({}, name) if name else {}
        raise _Unsynthesizable(f"{name}: {schema}")

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            resolved: dict[str, Any] = self.components[schema["$ref"].rsplit("/", 1)[1]]
            schema = resolved
        return schema

    def _string(self, schema: dict[str, Any], name: str) -> str:
        fmt = schema.get("format")
        if fmt == "date-time":
            return (datetime.now(UTC) + timedelta(days=1)).isoformat()
        if fmt == "email" or name == "email":
            return "someone@example.com"
        if name in _STRING_VALUES:
            return _STRING_VALUES[name](self.world)
        if name.endswith("_id"):
            return str(self._integer({}, name))
        return f"iso-{next(_names)}"

    def _integer(self, schema: dict[str, Any], name: str) -> int:
        ids = {
            "user_id": self.world.amy.user_id,
            "admin_user_id": self.world.alice.user_id,
            "workspace_id": self.world.workspace_a,
            "default_workspace_id": self.world.workspace_a,
            "pool_id": self.world.pool_a,
            "spec_id": self.world.spec_a,
            "node_id": self.world.node,
            "accelerator_type_id": self.world.accelerator_type,
        }
        if name in ids:
            return ids[name]
        return int(max(1, schema.get("minimum", 1), schema.get("exclusiveMinimum", 0) + 1))


_STRING_VALUES: dict[str, Callable[[World], str]] = {
    "password": lambda w: PASSWORD,
    "current_password": lambda w: PASSWORD,
    "new_password": lambda w: "Another-passw0rd",
    "cpu": lambda w: "1",
    "memory": lambda w: "1Gi",
    "price_per_hour": lambda w: "1.5",
    "amount": lambda w: "10",
    "vendor": lambda w: "nvidia",
    "role": lambda w: WorkspaceRole.MEMBER.value,
    "username": lambda w: w.amy.username,
    "accelerator_type": lambda w: w.accelerator_type_name,
    "type": lambda w: w.accelerator_type_name,
    "address": lambda w: "10.0.0.9",
    "limit": lambda w: "1Gi",
    "ref": lambda w: f"#{w.version_id}",
    "path": lambda w: w.import_dir,
    "public_key": lambda w: _fresh_public_key(),
}


# Fields whose schema is too loose to synthesize a valid value from (a job spec is "an object or YAML text").
_OBJECT_VALUES: dict[str, Callable[[World], Any]] = {
    "spec": lambda w: {
        "name": f"iso-{next(_names)}",
        "tasks": [{"name": "worker", "command": "true", "resources": {"cpu": "100m", "memory": "64Mi"}}],
    },
}


def _raw_body(op: Operation, world: World) -> bytes:
    """A raw body that the allowed caller's request would accept: the open upload's one part, or a bundle
    carrying that file (a 48-byte header: index, size, reserved, 16 hex digits each)."""
    data = world.upload_bytes
    if op.path.endswith("/bundle"):
        return f"{0:016x}{len(data):016x}{0:016x}".encode() + data
    return data


_HEADER_VALUES: dict[str, Callable[[World, Any], str]] = {
    "X-Part-Sha256": lambda w, body: hashlib.sha256(body if isinstance(body, bytes) else b"").hexdigest(),
    "Content-Type": lambda w, body: "application/octet-stream",
}


def _bodies(app: FastAPI, op: Operation, world: World) -> list[Any]:
    """Candidate JSON bodies, most minimal first; [raw bytes] for operations that take application/octet-stream
    (upload parts and bundles); [None] for operations without a body."""
    spec = _spec(app, op)
    content = spec.get("requestBody", {}).get("content", {})
    if "application/octet-stream" in content:
        return [_raw_body(op, world)]
    if "application/json" not in content:
        return [None]
    schema = content["application/json"].get("schema", {})
    components = app.openapi().get("components", {}).get("schemas", {})
    try:
        required = BodyFactory(components, world).make(schema)
        full = BodyFactory(components, world, all_fields=True).make(schema)
    except _Unsynthesizable:
        return [{}]
    out = [required]
    if isinstance(required, dict) and isinstance(full, dict):
        # Required fields plus one optional field at a time, for bodies that need "exactly one of a or b".
        out += [{**required, key: value} for key, value in full.items() if key not in required]
    out.append(full)
    unique: list[Any] = []
    for body in out:
        if body not in unique:
            unique.append(body)
    return unique


def _query(app: FastAPI, op: Operation, world: World) -> dict[str, Any]:
    """Values for required query parameters (optional ones are left out)."""
    components = app.openapi().get("components", {}).get("schemas", {})
    factory = BodyFactory(components, world)
    return {
        p["name"]: _QUERY_VALUES[(op.path, p["name"])](world)
        if (op.path, p["name"]) in _QUERY_VALUES
        else factory.make(p.get("schema", {}), p["name"])
        for p in _spec(app, op).get("parameters", [])
        if p.get("in") == "query" and p.get("required")
    }


# Required query parameters whose value must name something of the world, by (path, parameter).
_QUERY_VALUES: dict[tuple[str, str], Callable[[World], Any]] = {
    ("/api/v1/series", "name"): lambda w: SERIES_NAME,
    ("/api/v1/series/latest", "name"): lambda w: [SERIES_NAME],
}


def _headers(app: FastAPI, op: Operation, world: World, body: Any) -> dict[str, str]:
    """Values for required header parameters (the part hash of a raw body, its content type)."""
    out = {}
    for p in _spec(app, op).get("parameters", []):
        if p.get("in") == "header" and p.get("required"):
            make = _HEADER_VALUES.get(p["name"])
            if make is None:
                pytest.fail(f"{op.id}: add a value for the required header {p['name']} to _HEADER_VALUES")
            out[p["name"]] = make(world, body)
    return out


async def _call(
    client: httpx.AsyncClient,
    op: Operation,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    body: Any = None,
    params: dict[str, Any] | None = None,
    extra_headers: dict[str, str] | None = None,
) -> httpx.Response:
    sent = {**(extra_headers or {}), **(headers or {})}
    if isinstance(body, bytes):
        return await client.request(op.method.upper(), url, headers=sent, params=params, content=body)
    return await client.request(
        op.method.upper(), url, headers=sent, params=params, json=body if body is not None else None
    )


def _shape(response: httpx.Response) -> tuple[int, Any]:
    """What an error response tells the caller, with ids and numbers blanked out."""
    try:
        payload = response.json()
    except ValueError:
        return response.status_code, response.text
    error = payload.get("error", {}) if isinstance(payload, dict) else {}
    return response.status_code, (
        error.get("code"),
        re.sub(r"\d+", "N", str(error.get("message", ""))),
        sorted(error.get("details", {}) or {}),
    )


def _explain(response: httpx.Response) -> str:
    return f"{response.status_code} {response.text[:300]}"


# ------------------------------------------------------------------------------------------------- report


@dataclass
class _Report:
    checked: set[str] = field(default_factory=set)
    unexercised: dict[str, str] = field(default_factory=dict)


_REPORT = _Report()


@pytest.fixture(scope="module", autouse=True)
def _report_coverage(request: pytest.FixtureRequest) -> Iterator[None]:
    """Say, once, how many operations the cross-tenant check really exercised past body validation."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not _REPORT.checked:
        return
    with capture.global_and_fixture_disabled():
        _write_report(reporter)


def _write_report(reporter: Any) -> None:
    reporter.write_line(
        f"\nisolation: {len(OPERATIONS)} operations; cross-tenant check exercised past body validation for "
        f"{len(_REPORT.checked - set(_REPORT.unexercised))}, not exercised (no valid body could be synthesized) "
        f"for {len(_REPORT.unexercised)}"
    )
    for op_id, why in sorted(_REPORT.unexercised.items()):
        reporter.write_line(f"  not exercised: {op_id}: {why}")


# ------------------------------------------------------------------------------------------------- tests


def test_the_document_lists_the_api() -> None:
    ids = {op.id for op in OPERATIONS}
    assert "POST /api/v1/auth/login" in ids
    assert "GET /api/v1/users/me" in ids


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.id)
async def test_anonymous_caller_is_refused(op: Operation, app: FastAPI, client: httpx.AsyncClient) -> None:
    level = _access(app, op)
    if level is Access.PUBLIC:
        return
    fake_world = _FAKE_WORLD
    response = await _call(client, op, _url(op, fake_world), body={}, params=_query(app, op, fake_world))
    assert response.status_code == 401, f"{op.id} ({level}) answered an anonymous caller: {_explain(response)}"
    assert response.json()["error"]["code"] == "unauthenticated", _explain(response)


@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.id)
async def test_other_workspace_cannot_reach_workspace_a(
    op: Operation, app: FastAPI, client: httpx.AsyncClient, world: World
) -> None:
    level = _access(app, op)
    if level is Access.PUBLIC:
        return
    _REPORT.checked.add(op.id)
    url = _url(op, world)
    params = _query(app, op, world)
    owned = [n for n in _path_params(op) if PATH_PARAMS[n].of_workspace_a]
    outsider_refused = level in (Access.ADMIN, Access.WORKSPACE, Access.WORKSPACE_ADMIN) or bool(owned)

    allowed = world.admin if level is Access.ADMIN else world.alice

    def hdrs(body: Any) -> dict[str, str]:
        return _headers(app, op, world, body)

    # The outsider first, while every row of A is intact.
    candidates = _bodies(app, op, world)
    body: Any = None
    response: httpx.Response | None = None
    for body in candidates:
        response = await _call(
            client, op, url, headers=world.mallory.headers, body=body, params=params, extra_headers=hdrs(body)
        )
        if response.status_code != 422:
            break
    assert response is not None
    if response.status_code == 422:
        # Validation answered before authorization. Fine only if the bodies are what is wrong, for everyone.
        for candidate in candidates:
            check = await _call(
                client, op, url, headers=allowed.headers, body=candidate, params=params, extra_headers=hdrs(candidate)
            )
            assert check.status_code == 422, (
                f"{op.id}: a member of another workspace got 422 for body {candidate} where the allowed caller "
                f"got {check.status_code}: authorization must come before business validation"
            )
        _REPORT.unexercised[op.id] = response.json().get("error", {}).get("message", "")[:120]
        return

    assert response.status_code != 401, f"{op.id}: a signed-in user got 401: {_explain(response)}"
    assert response.status_code < 500, f"{op.id}: {_explain(response)}"
    if outsider_refused:
        assert response.status_code in (403, 404), (
            f"{op.id} ({level}) let a member of another workspace reach workspace A: {_explain(response)}"
        )
        if level is Access.ADMIN:
            assert response.status_code == 403, f"{op.id} (admin) must answer 403 to a member: {_explain(response)}"
        for name in owned:
            missing = await _call(
                client,
                op,
                _url(op, world, missing=name),
                headers=world.mallory.headers,
                body=body,
                params=params,
                extra_headers=hdrs(body),
            )
            assert _shape(missing) == _shape(response), (
                f"{op.id}: existence leak through {{{name}}}: a hidden row answers {_explain(response)} "
                f"but a missing one {_explain(missing)}"
            )

    # A plain member of A.
    if level in (Access.ADMIN, Access.WORKSPACE_ADMIN, Access.WORKSPACE):
        member = await _call(
            client, op, url, headers=world.amy.headers, body=body, params=params, extra_headers=hdrs(body)
        )
        if level is Access.WORKSPACE:
            assert member.status_code not in (401, 403), f"{op.id}: a member of A was refused: {_explain(member)}"
        else:
            assert member.status_code == 403, f"{op.id} ({level}) must answer 403 to a plain member of A: " + (
                _explain(member)
            )

    # The allowed caller last (it may change or delete A's rows): proves the ids above were right.
    ok = await _call(client, op, url, headers=allowed.headers, body=body, params=params, extra_headers=hdrs(body))
    assert ok.status_code not in (401, 403, 404), (
        f"{op.id} ({level}): the allowed caller {allowed.username} was refused, so the 403/404 above proves "
        f"nothing (wrong ids in PATH_PARAMS or the world?): {_explain(ok)}"
    )
    assert ok.status_code < 500, f"{op.id}: {_explain(ok)}"


async def test_job_token_reads_only_its_own_job(app: FastAPI, client: httpx.AsyncClient, world: World) -> None:
    """A replica's token acts as its user but reaches nothing except the reads of its own job.

    One test over every operation (not one per operation): a job token is refused before any handler runs, so
    the operations share one world, and 330 worlds built for it cost about a minute of the suite.
    """
    problems = [p for op in OPERATIONS if (p := await _job_token_problem(op, app, client, world))]
    assert not problems, "\n".join(problems)


async def _job_token_problem(op: Operation, app: FastAPI, client: httpx.AsyncClient, world: World) -> str:
    """What is wrong with how ``op`` answers a job token ("" when nothing is)."""
    level = _access(app, op)
    if level is Access.PUBLIC:
        return ""
    headers = {"Authorization": f"Bearer {world.job_token}"}
    params = _query(app, op, world)
    readable = bool(_spec(app, op).get(JOB_TOKEN_EXTENSION))
    if readable:
        if op.method != "get" or "job_id" not in _path_params(op):
            return f"{op.id}: job tokens may only read a job"
        own = await _call(client, op, _url(op, world), headers=headers, params=params)
        if own.status_code in (401, 403, 404) or own.status_code >= 500:
            return f"{op.id}: its own job refused a job token: {_explain(own)}"
        other_url = _url(op, world).replace(f"/jobs/{world.job_id}", f"/jobs/{world.other_job_id}")
        response = await _call(client, op, other_url, headers=headers, params=params)
    else:
        body = _bodies(app, op, world)[0]
        response = await _call(
            client,
            op,
            _url(op, world),
            headers=headers,
            body=body,
            params=params,
            extra_headers=_headers(app, op, world, body),
        )
    if response.status_code != 403:
        return f"{op.id} answered a job token: {_explain(response)}"
    error = response.json()["error"]
    if error["code"] != "forbidden" or "job token may only read its own job" not in error["message"]:
        return f"{op.id}: refused a job token without saying why: {_explain(response)}"
    return ""


def _fake_world() -> World:
    """Ids for the anonymous check, which must be refused before any row is looked up."""
    nobody = Caller(0, "nobody", "")
    kinds = {kind.plural: 1 for kind in ItemKind}
    return World(nobody, nobody, nobody, nobody, 1, 2, 1, 1, 1, 1, "nvidia-a100", 1, kinds, kinds, 1, 1, b"", "/")


_FAKE_WORLD = _fake_world()
