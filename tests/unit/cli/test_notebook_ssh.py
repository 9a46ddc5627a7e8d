"""The CLI's SSH helpers, pure: the known_hosts merge, the ssh command line, the config block, idle minutes."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import pytest

from aicenter.cli.common import CliError
from aicenter.cli.notebook_ssh import known_hosts_path, ssh_argv, ssh_config_block, write_known_hosts
from aicenter.cli.notebooks import parse_idle_minutes
from aicenter.client import NotebookSsh

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
INFO = NotebookSsh(
    user="alice", gateway_host="gw.example", gateway_port=2222, host_alias="notebook-7", known_hosts=[], config=""
)


def test_known_hosts_live_in_the_cli_home(home: Path) -> None:
    assert known_hosts_path() == home / "ssh" / "known_hosts"


def test_known_hosts_merge_replaces_lines_of_the_same_hosts(home: Path) -> None:
    path = write_known_hosts([f"[gw.example]:2222 {KEY}", f"notebook-1 {KEY}", "", "# a comment"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    write_known_hosts([f"[gw.example]:2222 {KEY} new", f"notebook-2 {KEY}", f"@cert-authority *.example {KEY}"])
    assert path.read_text().splitlines() == [
        f"notebook-1 {KEY}",
        "# a comment",
        f"[gw.example]:2222 {KEY} new",
        f"notebook-2 {KEY}",
        f"@cert-authority *.example {KEY}",
    ]


def test_ssh_argv_checks_both_hops_and_orders_options_host_command() -> None:
    known = Path("/home/a b/.aicenter/ssh/known_hosts")
    argv = ssh_argv("/usr/bin/ssh", INFO, known, ["-i", "/k/id", "-L", "8888:localhost:8888", "nvidia-smi", "-q"])
    checked = ["-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes"]
    assert argv[:5] == ["/usr/bin/ssh", *checked]
    assert argv[7:] == ["-i", "/k/id", "-L", "8888:localhost:8888", "alice@notebook-7", "nvidia-smi", "-q"]
    proxy = argv[6].removeprefix("ProxyCommand=")
    assert shlex.split(proxy) == [
        "/usr/bin/ssh",
        *checked,
        "-i",
        "/k/id",  # the gateway knows the user by the same key
        "-p",
        "2222",
        "-l",
        "alice",
        "-W",
        "[%h]:%p",
        "gw.example",
    ]


def test_ssh_argv_double_dash_ends_the_options() -> None:
    argv = ssh_argv("ssh", INFO, Path("/kh"), ["-v", "--", "-not-an-option"])
    assert argv[-3:] == ["-v", "alice@notebook-7", "-not-an-option"]
    assert ssh_argv("ssh", INFO, Path("/kh"))[-1] == "alice@notebook-7"


def test_config_block_points_at_the_cli_known_hosts() -> None:
    config = "Host notebook-7\n    ProxyJump alice@gw.example:2222\nHost gw.example\n    UserKnownHostsFile ~/x\n"
    block = ssh_config_block(config, Path("/h/ssh/known_hosts"))
    assert block == (
        "Host notebook-7\n"
        "    UserKnownHostsFile /h/ssh/known_hosts\n"
        "    ProxyJump alice@gw.example:2222\n"
        "Host gw.example\n"
        "    UserKnownHostsFile /h/ssh/known_hosts\n"
    )
    assert 'UserKnownHostsFile "/a b/kh"' in ssh_config_block("Host x\n", Path("/a b/kh"))
    # gw.example has its block already; another gateway gets one, for the ProxyJump hop
    assert ssh_config_block(config, Path("/kh"), "gw.example").count("Host ") == 2
    assert ssh_config_block("Host notebook-7\n    ProxyJump gw2\n", Path("/kh"), "gw2").endswith(
        "Host gw2\n    UserKnownHostsFile /kh\n"
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("30", 1800), ("0", 0), ("never", 0), ("default", None), (" Default ", None)]
)
def test_idle_minutes(text: str, seconds: int | None) -> None:
    assert parse_idle_minutes(text, "MINUTES") == seconds


@pytest.mark.parametrize("text", ["", "abc", "1.5", "-1", "43201"])
def test_bad_idle_minutes(text: str) -> None:
    with pytest.raises(CliError) as bad:
        parse_idle_minutes(text, "MINUTES")
    assert (bad.value.code, bad.value.exit_code) == ("validation_failed", 2)
