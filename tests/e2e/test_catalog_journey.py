"""The catalog end to end on a real ``aicenter up``, once on SQLite and once on PostgreSQL.

A member pushes a dataset directory and an algorithm and shares the dataset with the workspace; another member
copies it and pulls it bit-identical; the admin publishes a preset dataset (a server-side import) and a preset
venv image built from a requirements list (a wheel made here, installed offline), which every user sees under
"preset"; a member's image with the same inputs reuses the built environment; the admin sees the metadata of
private items but every content route answers 403.

Each person is an ``aicenter`` CLI with its own home; the SDK (or plain HTTP) is used only where the CLI has no
command (polling a build, the raw content routes).
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in
from tests.support.wheels import build_tiny_wheel

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BUILD_DEADLINE_S = 120.0  # a venv + one local wheel takes ~15 s on a shared 2-core machine
PART_SIZE = 1 << 20  # small parts, so the 3 MiB file goes through the multi-part path, not a bundle
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the server runs this same interpreter
CONTENT_FORBIDDEN = 403


# -- fixtures --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``tinypkg-0.1.0-py3-none-any.whl``, built here without any index."""
    return build_tiny_wheel(tmp_path_factory.mktemp("tinypkg"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog_server(request: pytest.FixtureRequest, tmp_path: Path, wheelhouse: Path) -> Iterator[Server]:
    """``aicenter up`` with an import root, offline pip arguments and small upload parts, on either database."""
    imports = tmp_path / "imports"
    imports.mkdir()
    env = {
        "AICENTER_IMPORT_ROOTS": json.dumps([str(imports)]),
        "AICENTER_PIP_ARGS": json.dumps(["--no-index", "--find-links", str(wheelhouse)]),
        "AICENTER_UPLOAD_PART_SIZE": str(PART_SIZE),
    }
    if request.param == "postgres":
        env["AICENTER_DATABASE_URL"] = request.getfixturevalue("pg_url")
    srv = Server(tmp_path / "home", env=env).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


# -- helpers ---------------------------------------------------------------------------------------------------


def _digest(root: Path) -> dict[str, str]:
    """Relative POSIX path -> sha256 of every file under ``root``."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _make_dataset(root: Path) -> None:
    """50 files in nested directories: one of 3 MiB + 123 B (not a whole number of parts), an empty one,
    two with equal content (stored once, written twice), the rest small random files."""
    rng = random.Random(4)
    for i in range(45):
        path = root / ("train" if i % 5 else "val") / f"class{i % 3}" / f"img{i:03d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(1, 30_000)))
    (root / "meta").mkdir()
    (root / "meta" / "labels.csv").write_text("file,label\n" + "".join(f"img{i:03d}.bin,{i % 3}\n" for i in range(45)))
    (root / "meta" / "EMPTY").write_bytes(b"")
    (root / "meta" / "deep" / "er").mkdir(parents=True)
    (root / "meta" / "deep" / "er" / "same-a.txt").write_text("identical bytes\n")
    (root / "meta" / "deep" / "er" / "same-b.txt").write_text("identical bytes\n")
    (root / "big.bin").write_bytes(rng.randbytes(3 * (1 << 20) + 123))


def _wait_for_build(api: Client, item_id: int, number: int) -> Any:
    """Poll a venv build until ready or failed; fail with its log after the deadline."""
    deadline = time.monotonic() + BUILD_DEADLINE_S
    while True:
        build = api.get_build(item_id, number)
        if build.state in ("ready", "failed"):
            return build
        if time.monotonic() > deadline:
            pytest.fail(f"image build still {build.state} after {BUILD_DEADLINE_S:g} s:\n{build.log_tail}")
        time.sleep(0.5)  # polling interval, not synchronization: the loop exits on the state it reads


def _content_requests(kind_plural: str, item_id: int, number: int, path: str) -> list[tuple[str, str, Any]]:
    """Every content route of one version: (method, url path, JSON body)."""
    base = f"/api/v1/{kind_plural}/{item_id}/versions/{number}"
    return [
        ("GET", f"{base}/files", None),
        ("GET", f"{base}/files/{path}", None),
        ("GET", f"{base}/archive", None),
        ("POST", f"{base}/archive", {"paths": [path]}),
        ("GET", f"{base}/preview/{path}", None),
        ("POST", f"{base}/copy", {"name": "stolen"}),
    ]


# -- the scenario ----------------------------------------------------------------------------------------------


def test_members_share_datasets_and_admins_publish_presets_through_the_cli(
    catalog_server: Server, tmp_path: Path
) -> None:
    server = catalog_server

    # 1. The admin creates alice and bob and the workspace vision with both (and not the admin) as members.
    admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
    for user in ("alice", "bob"):
        admin.run("user", "create", user, "--password-stdin", stdin=f"{user}-Passw0rd-1\n")
    # alice is its workspace admin: created without --admin, the platform admin would be a member of it.
    admin.run("workspace", "create", "vision", "--admin", "alice")
    admin.run("member", "add", "bob", "--workspace", "vision")
    members = {m["username"] for m in admin.json("member", "list", "--workspace", "vision")}
    assert members == {"alice", "bob"}, members
    alice = signed_in(tmp_path, server, "alice", "alice-Passw0rd-1")
    bob = signed_in(tmp_path, server, "bob", "bob-Passw0rd-1")

    # 4/5 start early: the admin publishes a preset venv image built from a requirements list, which builds
    # in the background while the datasets move.
    admin.run("image", "create", "py-tiny", "--preset", "--type", "venv", "--description", "python + tinypkg")
    preset_image = admin.json("image", "version", "preset/py-tiny", "--python", PYTHON, "--requirement", "tinypkg")
    assert (preset_image["ref"], preset_image["visibility"]) == ("preset/py-tiny:1", "preset")

    # 2. alice pushes a dataset directory and an algorithm directory, and shares the dataset with vision.
    data = tmp_path / "imagenet-mini"
    _make_dataset(data)
    source = _digest(data)
    assert len(source) == 50
    pushed = alice.json("dataset", "push", str(data), "--name", "imagenet-mini", "--no-progress")
    assert (pushed["ref"], pushed["file_count"], pushed["visibility"]) == ("imagenet-mini:1", 50, "private")
    assert pushed["size_bytes"] == sum(p.stat().st_size for p in data.rglob("*") if p.is_file())

    code = tmp_path / "resnet"
    code.mkdir()
    (code / "train.py").write_text("import tinypkg\nprint('training resnet', tinypkg.ANSWER)\n")
    (code / "requirements.txt").write_text("tinypkg==0.1.0\n")
    algorithm = alice.json("algorithm", "push", str(code), "--name", "resnet", "--no-progress")
    assert (algorithm["ref"], algorithm["file_count"], algorithm["visibility"]) == ("resnet:1", 2, "private")

    shared = alice.json("dataset", "share", "imagenet-mini:1", "--workspace", "vision")
    assert (shared["visibility"], shared["shared_workspace_name"]) == ("workspace", "vision")

    # 3. bob sees it under the workspace scope, copies it into his own items and pulls his copy bit-identical.
    in_workspace = bob.json("dataset", "list", "--scope", "workspace")
    assert [(i["name"], i["owner_name"]) for i in in_workspace] == [("imagenet-mini", "alice")]
    assert bob.json("algorithm", "list", "--scope", "workspace") == [], "alice's private algorithm leaked to bob"
    copied = bob.json("dataset", "copy", "alice/imagenet-mini:1")
    assert (copied["ref"], copied["owner_name"], copied["visibility"]) == ("imagenet-mini:1", "bob", "private")
    assert (copied["copied_from_id"], copied["manifest_sha256"]) == (shared["id"], shared["manifest_sha256"])
    dest = tmp_path / "bob-pull"
    pulled = bob.json("dataset", "pull", "imagenet-mini:1", str(dest), "--no-progress")
    assert (pulled["downloaded_files"], pulled["skipped_files"]) == (50, 0)
    assert _digest(dest) == source, "bob's pulled copy differs from what alice pushed"
    assert not list(dest.rglob("*.aicenter-part")), "partial files left behind"

    # 4. The admin imports a preset dataset from a directory on the server; everyone sees both presets.
    mnist = server.home.parent / "imports" / "mnist-mini"
    (mnist / "raw").mkdir(parents=True)
    (mnist / "raw" / "train.csv").write_text("label,pixels\n" + "".join(f"{i % 10},{i}\n" for i in range(500)))
    (mnist / "README").write_text("A tiny MNIST stand-in.\n")
    imported = admin.json("admin", "import", "dataset", "mnist-mini", str(mnist))
    assert (imported["ref"], imported["file_count"], imported["visibility"]) == ("preset/mnist-mini:1", 2, "preset")
    for person in (alice, bob):
        assert [i["name"] for i in person.json("dataset", "list", "--scope", "preset")] == ["mnist-mini"]
        assert [i["name"] for i in person.json("image", "list", "--scope", "preset")] == ["py-tiny"]
    preset_pull = bob.json("dataset", "pull", "preset/mnist-mini:1", str(tmp_path / "bob-mnist"), "--no-progress")
    assert preset_pull["downloaded_files"] == 2
    assert _digest(tmp_path / "bob-mnist") == _digest(mnist)

    # 5. The preset image's build: ready, its log shows pip installing the requirement, the env imports it.
    with Client(server.url) as api:
        api.login("admin", ADMIN_PASSWORD)
        build = _wait_for_build(api, preset_image["item_id"], preset_image["number"])
    assert build.state == "ready", f"the build failed: {build.error}\n{build.log_tail}"
    shown = alice.run("image", "build", "preset/py-tiny:1").stdout  # a preset's log is readable by every user
    assert "ready" in shown
    assert "-m pip install" in shown, shown
    assert "--find-links" in shown, shown  # the server's AICENTER_PIP_ARGS reached pip
    assert "Successfully installed tinypkg-0.1.0" in shown, shown
    env = server.home / "store" / "envs" / str(build.env_hash)
    imported_pkg = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import tinypkg; print(tinypkg.ANSWER)"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (imported_pkg.returncode, imported_pkg.stdout.strip()) == (0, "42"), imported_pkg.stderr

    # ... and a member's own image with the same inputs reuses that environment instead of building again.
    alice.run("image", "create", "my-env", "--type", "venv")
    mine = alice.json("image", "version", "my-env", "--python", PYTHON, "--requirement", "tinypkg")
    with Client(server.url) as api:
        api.login("alice", "alice-Passw0rd-1")
        own = _wait_for_build(api, mine["item_id"], mine["number"])
    assert (own.state, own.env_hash) == ("ready", build.env_hash)
    assert "reusing cached environment" in own.log_tail, own.log_tail

    # 6. The admin sees the metadata of private items, never their content.
    everything = {(i["kind"], i["name"], i["owner_name"]) for i in admin.json("algorithm", "list", "--scope", "all")}
    assert ("algorithm", "resnet", "alice") in everything
    (resnet_v1,) = admin.json("algorithm", "versions", str(algorithm["item_id"]))
    assert (resnet_v1["size_bytes"], resnet_v1["owner_name"]) == (algorithm["size_bytes"], "alice")
    assert resnet_v1["can_read_content"] is False

    with Client(server.url) as api:
        admin_token = api.login("admin", ADMIN_PASSWORD).token
        bob_token = api.login("bob", "bob-Passw0rd-1").token
    targets = [
        ("algorithms", algorithm, "train.py"),  # alice's, private
        ("datasets", copied, "meta/labels.csv"),  # bob's copy, private
        ("datasets", shared, "meta/labels.csv"),  # alice's, shared with vision, of which the admin is no member
    ]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for plural, version, path in targets:
            for method, url, body in _content_requests(plural, version["item_id"], version["number"], path):
                answer = http.request(method, url, json=body, headers={"Authorization": f"Bearer {admin_token}"})
                assert answer.status_code == CONTENT_FORBIDDEN, f"admin {method} {url}: {answer.status_code}"
                assert answer.json()["error"]["code"] == "forbidden", answer.text
            meta = http.get(
                f"/api/v1/{plural}/{version['item_id']}/versions/{version['number']}",
                headers={"Authorization": f"Bearer {admin_token}"},
            )
            assert meta.status_code == 200, meta.text
            assert meta.json()["size_bytes"] == version["size_bytes"]
        # A member who cannot see the version at all learns nothing about it: 404, not 403.
        for method, url, body in _content_requests("algorithms", algorithm["item_id"], algorithm["number"], "train.py"):
            answer = http.request(method, url, json=body, headers={"Authorization": f"Bearer {bob_token}"})
            assert answer.status_code == 404, f"bob {method} {url}: {answer.status_code}"
    # The refused copies created nothing.
    assert admin.json("algorithm", "list") == []
    assert admin.json("dataset", "list") == []
    assert bob.json("algorithm", "list") == []
