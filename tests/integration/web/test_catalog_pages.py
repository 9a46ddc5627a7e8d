"""The catalog in the console: list tabs, the new-item form, the version page's file browser and previews,
share / unshare / copy buttons, what a platform admin sees of a user's item, and an image's build status."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from aicenter.core.catalog import ItemKind, Scope, Visibility
from aicenter.db.engine import Database
from aicenter.services import catalog, members
from aicenter.services.context import Actor
from tests.factories import ADMIN, Login, make_user
from tests.integration.web.conftest import Browser, OpenBrowser

# A 1x1 PNG: the preview shows it with <img>, so only its name matters to the page, its bytes to the download.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000105e227d40000000049454e44ae426082"
)
FILES = {
    "README.md": b"# cifar-mini\nTen classes of tiny pictures.\n",
    "data/train.csv": b"label,width,height\ncat,32,32\ndog,32,32\n",
    "data/test.csv": b"label,width,height\nbird,32,32\n",
    "images/cat.png": PNG,
    "weights.bin": b"\x00\x01\x02binary\xff\xfe",
}


def actor(user: Login, *, admin: bool = False) -> Actor:
    return Actor(user_id=user.user_id, username=user.username, is_platform_admin=admin)


@dataclass
class Seeded:
    alice: Login
    bob: Login
    dataset_id: int  # alice's "cifar-mini", version 1 holds FILES, private
    workspace_id: int  # alice's default workspace; bob is a member


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for path, data in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


@pytest.fixture
async def seeded(app: FastAPI, db: Database, client: httpx.AsyncClient, tmp_path: Path) -> Seeded:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    async with db.write() as session:
        item = await catalog.create_item(
            session, actor(alice), ItemKind.DATASET, name="cifar-mini", description="tiny pictures", tags=["vision"]
        )
        assert item.workspace_id is not None
        await members.add_member(session, ADMIN, item.workspace_id, user_id=bob.user_id)
    await catalog.create_version_from_directory(
        db, actor(alice), app.state.ctx.store, ItemKind.DATASET, item.id, write_tree(tmp_path / "cifar", FILES)
    )
    return Seeded(alice, bob, item.id, item.workspace_id)


def names_in(page: str) -> set[str]:
    return set(re.findall(r'data-testid="item-row" data-name="([^"]+)"', page))


def version_url(seeded: Seeded, number: int = 1, query: str = "") -> str:
    return f"/datasets/{seeded.dataset_id}/versions/{number}{query}"


async def test_each_tab_lists_the_right_items(
    app: FastAPI, db: Database, open_browser: OpenBrowser, admin: Browser, seeded: Seeded, tmp_path: Path
) -> None:
    bob = actor(seeded.bob)
    store = app.state.ctx.store
    tree = write_tree(tmp_path / "small", {"a.txt": b"a"})
    async with db.write() as session:
        shared = await catalog.create_item(session, bob, ItemKind.DATASET, name="team-data")
        public = await catalog.create_item(session, bob, ItemKind.DATASET, name="open-data", tags=["mart"])
        preset = await catalog.create_item(session, ADMIN, ItemKind.DATASET, name="preset-data", preset=True)
        await catalog.create_item(session, bob, ItemKind.DATASET, name="bob-private")
        await catalog.create_item(session, bob, ItemKind.MODEL, name="a-model")
    for item in (shared, public, preset):
        await catalog.create_version_from_directory(
            db, ADMIN if item is preset else bob, store, ItemKind.DATASET, item.id, tree
        )
    async with db.write() as session:
        await catalog.share_version(
            session,
            bob,
            ItemKind.DATASET,
            shared.id,
            1,
            visibility=Visibility.WORKSPACE,
            workspace_id=seeded.workspace_id,
        )
        await catalog.share_version(session, bob, ItemKind.DATASET, public.id, 1, visibility=Visibility.PUBLIC)

    alice = await open_browser("alice")
    expected = {
        Scope.MINE: {"cifar-mini"},
        Scope.WORKSPACE: {"team-data"},
        Scope.PUBLIC: {"open-data"},
        Scope.PRESET: {"preset-data"},
    }
    for scope, names in expected.items():
        page = await alice.get(f"/datasets?scope={scope.value}")
        assert page.status_code == 200, page.text[:500]
        assert names_in(page.text) == names, scope
        assert f'data-testid="tab-{scope.value}" ' in page.text or f'data-testid="tab-{scope.value}"' in page.text
    assert 'data-testid="tab-all"' not in (await alice.get("/datasets")).text
    assert names_in((await alice.get("/datasets?scope=all")).text) == {"cifar-mini"}  # members fall back to mine

    # Search, tag filter and sort.
    assert names_in((await alice.get("/datasets?scope=public&q=OPEN")).text) == {"open-data"}
    assert names_in((await alice.get("/datasets?scope=public&q=nothing")).text) == set()
    assert names_in((await alice.get("/datasets?scope=public&tag=mart")).text) == {"open-data"}
    assert names_in((await alice.get("/datasets?scope=mine&tag=mart")).text) == set()
    everything = await admin.get("/datasets?scope=all&sort=name")
    order = re.findall(r'data-testid="item-row" data-name="([^"]+)"', everything.text)
    assert order == sorted(["cifar-mini", "team-data", "open-data", "preset-data", "bob-private"])
    assert names_in((await admin.get("/models?scope=all")).text) == {"a-model"}


async def test_create_item_form(open_browser: OpenBrowser, db: Database, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    bad = await alice.post("/datasets", {"name": "Bad Name!", "description": "x", "metadata.data_type": "image"})
    assert bad.status_code == 422
    assert 'data-testid="item-create-name-error"' in bad.text
    assert 'value="Bad Name!"' in bad.text  # what was typed is kept
    bad_meta = await alice.post("/datasets", {"name": "fine", "metadata.data_type": "smell"})
    assert bad_meta.status_code == 422
    assert 'data-testid="item-create-metadata-data-type-error"' in bad_meta.text
    async with db.read() as session:
        page = await catalog.list_items(session, actor(seeded.alice), ItemKind.DATASET)
    assert [i.name for i in page.items] == ["cifar-mini"]  # nothing was created

    made = await alice.post(
        "/algorithms",
        {
            "name": "resnet-train",
            "tags": "vision, cnn",
            "metadata.framework": "pytorch",
            "metadata.entrypoint": "train.py",
            "metadata.requirements": "torch\n\ntorchvision\n",
        },
    )
    assert made.status_code == 303, made.text[:500]
    item_id = int(made.headers["location"].rsplit("/", 1)[1])
    async with db.read() as session:
        item = await catalog.get_item(session, actor(seeded.alice), ItemKind.ALGORITHM, item_id)
    assert item.tags == ["vision", "cnn"]
    assert item.metadata["requirements"] == ["torch", "torchvision"]
    assert item.metadata["entrypoint"] == "train.py"
    item_page = await alice.get(f"/algorithms/{item_id}")
    assert item_page.status_code == 200
    assert 'data-testid="upload-panel"' in item_page.text
    assert 'data-testid="item-edit-form"' in item_page.text

    # Members have no preset checkbox, and a forged one makes an ordinary item.
    assert "item-create-preset" not in (await alice.get("/models")).text
    forged = await alice.post("/models", {"name": "m1", "preset": "on"})
    assert forged.status_code == 303
    async with db.read() as session:
        models = await catalog.list_items(session, actor(seeded.alice), ItemKind.MODEL)
    assert [(m.name, m.is_preset) for m in models.items] == [("m1", False)]


async def test_edit_and_delete_an_item_and_a_version(open_browser: OpenBrowser, db: Database, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    bob = await open_browser("bob")
    url = f"/datasets/{seeded.dataset_id}"
    bad = await alice.post(url, {"name": "", "description": "new words", "metadata.data_type": "image"})
    assert bad.status_code == 422
    assert 'data-testid="item-edit-name-error"' in bad.text
    saved = await alice.post(url, {"name": "cifar-tiny", "tags": "a b", "metadata.data_type": "image"})
    assert saved.status_code == 303
    async with db.read() as session:
        item = await catalog.get_item(session, actor(seeded.alice), ItemKind.DATASET, seeded.dataset_id)
    assert (item.name, item.tags, item.metadata["data_type"]) == ("cifar-tiny", ["a", "b"], "image")

    assert (await bob.post(f"{url}/versions/1/delete")).status_code == 404  # not visible to bob
    gone = await alice.post(f"{url}/versions/1/delete")
    assert gone.status_code == 303
    assert gone.headers["location"] == url
    assert (await alice.get(f"{url}/versions/1")).status_code == 404
    deleted = await alice.post(f"{url}/delete")
    assert deleted.status_code == 303
    assert deleted.headers["location"] == "/datasets"
    assert (await alice.get(url)).status_code == 404


async def test_version_page_browses_directories_and_previews(open_browser: OpenBrowser, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    item_page = await alice.get(f"/datasets/{seeded.dataset_id}")
    assert 'data-testid="version-row" data-number="1"' in item_page.text

    root = await alice.get(version_url(seeded))
    assert root.status_code == 200, root.text[:500]
    assert re.findall(r'data-testid="dir-row" data-path="([^"]+)"', root.text) == ["data", "images"]
    assert re.findall(r'data-testid="file-row" data-path="([^"]+)"', root.text) == ["README.md", "weights.bin"]
    assert f'href="/api/v1/datasets/{seeded.dataset_id}/versions/1/archive"' in root.text

    data = await alice.get(version_url(seeded, query="?dir=data"))
    assert re.findall(r'data-testid="file-row" data-path="([^"]+)"', data.text) == ["data/test.csv", "data/train.csv"]
    assert 'data-testid="dir-row"' not in data.text
    assert 'data-testid="dir-crumbs"' in data.text

    text = await alice.get(version_url(seeded, query="?file=README.md"))
    assert re.search(r'data-testid="preview-text">#\s*cifar-mini\nTen classes', text.text)

    table = await alice.get(version_url(seeded, query="?dir=data&file=data/train.csv"))
    assert re.search(r'data-testid="preview-csv">\s*<thead><tr><th>label</th><th>width</th><th>height</th>', table.text)
    assert "<td>dog</td>" in table.text

    image = await alice.get(version_url(seeded, query="?dir=images&file=images/cat.png"))
    src = f"/api/v1/datasets/{seeded.dataset_id}/versions/1/files/images/cat.png"
    assert f'src="{src}"' in image.text
    download = await alice.get(src)  # the API takes the console's session cookie for GET
    assert download.status_code == 200
    assert download.content == PNG

    binary = await alice.get(version_url(seeded, query="?file=weights.bin"))
    assert 'data-testid="preview-binary"' in binary.text

    missing = await alice.get(version_url(seeded, query="?file=nope.txt"))
    assert missing.status_code == 200
    assert 'data-testid="preview-error"' in missing.text


async def test_share_unshare_and_copy_buttons(open_browser: OpenBrowser, db: Database, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    bob = await open_browser("bob")

    async def visibility() -> tuple[str, int | None]:
        async with db.read() as session:
            v = await catalog.get_version(session, actor(seeded.alice), ItemKind.DATASET, seeded.dataset_id, 1)
        return v.visibility, v.shared_workspace_id

    assert (await bob.get(version_url(seeded))).status_code == 404  # private: no existence leak
    shared = await alice.post(
        version_url(seeded, query="/share"), {"visibility": "workspace", "workspace_id": str(seeded.workspace_id)}
    )
    assert shared.status_code == 303
    assert await visibility() == ("workspace", seeded.workspace_id)
    assert (await bob.get(version_url(seeded, query="?file=README.md"))).status_code == 200

    # Bob sees it but does not own it: no share buttons, and a forged share is refused.
    bob_page = await bob.get(version_url(seeded))
    assert 'data-testid="share-public"' not in bob_page.text
    assert 'data-testid="copy-submit"' in bob_page.text
    forged = await bob.post(version_url(seeded, query="/share"), {"visibility": "public"})
    assert forged.status_code in (403, 404)
    assert await visibility() == ("workspace", seeded.workspace_id)

    assert (await alice.post(version_url(seeded, query="/share"), {"visibility": "public"})).status_code == 303
    assert (await visibility())[0] == "public"
    bad = await alice.post(version_url(seeded, query="/share"), {"visibility": "preset"})
    assert bad.status_code == 422
    assert (await visibility())[0] == "public"

    copied = await bob.post(version_url(seeded, query="/copy"), {"name": "my-cifar"})
    assert copied.status_code == 303, copied.text[:500]
    async with db.read() as session:
        page = await catalog.list_items(session, actor(seeded.bob), ItemKind.DATASET)
        (mine,) = [i for i in page.items if i.name == "my-cifar"]
        copy = await catalog.get_version(session, actor(seeded.bob), ItemKind.DATASET, mine.id, 1)
    assert copied.headers["location"] == f"/datasets/{mine.id}/versions/1"
    assert (copy.visibility, copy.file_count) == ("private", len(FILES))
    assert copy.copied_from_id is not None

    assert (await alice.post(version_url(seeded, query="/unshare"))).status_code == 303
    assert await visibility() == ("private", None)
    assert (await bob.get(version_url(seeded))).status_code == 404

    bad_name = await bob.post(version_url(seeded, query="/copy"), {"name": "x"})
    assert bad_name.status_code == 404  # private again: bob cannot see it, so cannot copy it


async def test_admin_sees_metadata_but_not_content_of_a_private_item(admin: Browser, seeded: Seeded) -> None:
    page = await admin.get(version_url(seeded))
    assert page.status_code == 200, page.text[:500]
    assert 'data-testid="content-forbidden"' in page.text
    assert "not available to platform admins" in page.text
    assert 'data-testid="version-facts"' in page.text
    for path in FILES:
        assert path not in page.text
    assert "/archive" not in page.text
    previewed = await admin.get(version_url(seeded, query="?file=README.md"))
    assert "Ten classes" not in previewed.text
    assert 'data-testid="content-forbidden"' in previewed.text
    item = await admin.get(f"/datasets/{seeded.dataset_id}")
    assert item.status_code == 200
    assert 'data-testid="version-row" data-number="1"' in item.text


async def test_image_versions_show_their_build(open_browser: OpenBrowser, seeded: Seeded) -> None:
    alice = await open_browser("alice")
    made = await alice.post("/images", {"name": "torch-env", "metadata.image_type": "venv"})
    assert made.status_code == 303, made.text[:500]
    item_url = made.headers["location"]
    page = await alice.get(item_url)
    assert 'data-testid="version-create-form"' in page.text
    assert 'data-testid="upload-panel"' not in page.text

    bad = await alice.post(f"{item_url}/versions", {"metadata.python": "two"})
    assert bad.status_code == 422
    assert 'data-testid="version-create-metadata-python-error"' in bad.text

    built = await alice.post(f"{item_url}/versions", {"metadata.python": "3.11", "metadata.requirements": "numpy\n"})
    assert built.status_code == 303, built.text[:500]
    version_page = await alice.get(built.headers["location"])
    assert version_page.status_code == 200
    assert 'data-testid="build-panel" data-build-state="pending"' in version_page.text
    refresh = re.search(r'data-refresh="([^"]+)"', version_page.text)
    assert refresh is not None
    assert '<script src="/static/catalog.js' in version_page.text
    fragment = await alice.get(refresh.group(1))
    assert fragment.status_code == 200
    assert 'data-testid="build-state">pending<' in fragment.text
    assert "<html" not in fragment.text

    container = await alice.post("/images", {"name": "cuda-base", "metadata.image_type": "container"})
    container_url = container.headers["location"]
    assert 'id="version-create-metadata-reference"' in (await alice.get(container_url)).text
    ready = await alice.post(f"{container_url}/versions", {"metadata.reference": "registry.local/cuda:12"})
    assert ready.status_code == 303, ready.text[:500]
    ready_page = await alice.get(ready.headers["location"])
    assert "registry.local/cuda:12" in ready_page.text
    assert "data-refresh" not in ready_page.text


async def test_long_lists_page_with_a_next_link(open_browser: OpenBrowser, db: Database, seeded: Seeded) -> None:
    async with db.write() as session:
        for i in range(55):
            await catalog.create_item(session, actor(seeded.bob), ItemKind.MODEL, name=f"model-{i:02d}")
    bob = await open_browser("bob")
    first = await bob.get("/models?sort=name")
    assert len(names_in(first.text)) == 50
    link = re.search(r'href="([^"]+)" data-testid="page-next"', first.text)
    assert link is not None
    second = await bob.get(html.unescape(link.group(1)))
    assert second.status_code == 200
    assert names_in(second.text) == {f"model-{i:02d}" for i in range(50, 55)}
    assert 'data-testid="page-next"' not in second.text


async def test_the_shared_tab_and_an_items_home_workspace_are_named_apart(
    open_browser: OpenBrowser, seeded: Seeded
) -> None:
    # The "workspace" scope lists items shared with my workspaces; an item's own workspace is its home (storage).
    alice = await open_browser("alice")
    page = (await alice.get("/datasets?scope=mine")).text
    assert re.search(r'data-testid="tab-workspace"[^>]*>Shared with my workspaces<', page)
    assert ">Home workspace</th>" in page
    item = (await alice.get(f"/datasets/{seeded.dataset_id}")).text
    assert "<dt>Home workspace</dt>" in item
