"""The notebook SSH agent's files: a host key made once and kept, authorized_keys replaced atomically."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh
import pytest

from aicenter.runtime.notebook_ssh import AuthorizedKeys
from aicenter.runtime.sshfiles import public_host_key, write_authorized_keys, write_host_key


def test_host_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "host_key"
    first = write_host_key(path)
    assert first.startswith("ssh-ed25519 ")
    assert path.stat().st_mode & 0o777 == 0o600
    assert write_host_key(path) == first == public_host_key(path)
    assert [p.name for p in tmp_path.iterdir()] == ["host_key"]  # no temporary file left


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_host_key_can_belong_to_the_notebooks_uid(tmp_path: Path) -> None:
    path = tmp_path / "host_key"
    write_host_key(path, owner=(65534, 65534))
    assert (path.stat().st_uid, path.stat().st_gid) == (65534, 65534)


def test_authorized_keys_are_replaced_and_reread(tmp_path: Path) -> None:
    one, two = (asyncssh.generate_private_key("ssh-ed25519") for _ in range(2))
    path = tmp_path / "authorized_keys"
    keys = AuthorizedKeys(path)
    assert not keys.allows(one)  # no file: nobody
    write_authorized_keys(path, [one.export_public_key().decode(), "", "junk\nmore"])
    assert path.stat().st_mode & 0o777 == 0o644
    assert path.read_text().count("\n") == 1  # blank and multi-line entries dropped
    assert keys.allows(one)
    assert not keys.allows(two)
    write_authorized_keys(path, [two.export_public_key().decode()])
    assert keys.allows(two)  # the replaced file is read again
    assert not keys.allows(one)
