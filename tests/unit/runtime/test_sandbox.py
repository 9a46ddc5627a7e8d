"""``bwrap_argv``: what a replica's sandbox binds, read-only or read-write, and who runs inside; checked on the
argument list and, where bwrap works, by running it for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aicenter.runtime.sandbox import NSENTER, SandboxSpec, bwrap_argv, probe

SUPPORT = probe()
needs_bwrap = pytest.mark.skipif(not SUPPORT.available, reason=f"no bwrap sandbox here: {SUPPORT.reason}")
JOB_UID = 231_007


def _pairs(argv: list[str], flag: str) -> list[str]:
    """The destinations of every ``flag SRC DEST`` in ``argv``."""
    return [argv[i + 2] for i, arg in enumerate(argv) if arg == flag]


def _spec(tmp_path: Path, **changes: object) -> SandboxSpec:
    code, out = tmp_path / "code", tmp_path / "out"
    code.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    base: dict[str, object] = {
        "read_only": (str(code), sys.prefix, sys.base_prefix),
        "read_write": (str(out),),
        "workdir": str(code),
        "bwrap": SUPPORT.bwrap or "bwrap",
    }
    base.update(changes)
    return SandboxSpec(**base)  # type: ignore[arg-type]


def test_inputs_are_read_only_and_outputs_read_write(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    argv = bwrap_argv(spec, ["/bin/sh", "-c", "true"])
    assert str(tmp_path / "code") in _pairs(argv, "--ro-bind")
    assert _pairs(argv, "--bind") == [str(tmp_path / "out")]
    assert argv[-3:] == ["/bin/sh", "-c", "true"]
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"):
        assert flag in argv
    # The home and its parents are never bound whole: only the listed paths.
    assert "/" not in _pairs(argv, "--ro-bind") + _pairs(argv, "--bind")
    assert "--die-with-parent" not in argv


def test_only_chosen_files_of_etc_are_bound() -> None:
    argv = bwrap_argv(SandboxSpec(), ["true"])
    etc = _pairs(argv, "--ro-bind-try")
    assert "/etc/passwd" in etc
    assert "/etc/resolv.conf" in etc
    assert "/etc" not in etc
    assert "/etc/shadow" not in etc


def test_the_environment_is_never_in_the_argument_list(tmp_path: Path) -> None:
    """Arguments are world-readable in /proc/<pid>/cmdline; the job token must travel in the environment."""
    argv = bwrap_argv(_spec(tmp_path), ["true"])
    assert "--setenv" not in argv
    assert not any("TOKEN" in a for a in argv)


def test_a_writable_file_inside_a_read_only_dir_is_bound_after_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    argv = bwrap_argv(_spec(tmp_path, read_only=(str(run),), read_write=(str(metrics),)), ["true"])
    assert argv.index(str(metrics)) > argv.index(str(run))


def test_a_root_server_switches_to_the_job_uid_and_drops_capabilities(tmp_path: Path) -> None:
    argv = bwrap_argv(_spec(tmp_path, uid=JOB_UID, gid=JOB_UID), ["true"])
    tail = argv[argv.index("--") + 1 :]
    assert tail[0].endswith("setpriv")
    assert f"--reuid={JOB_UID}" in tail
    assert "--clear-groups" in tail
    assert "--bounding-set=-all" in tail
    # Without a uid switch, bwrap drops the capabilities itself.
    assert "--cap-drop" in bwrap_argv(_spec(tmp_path), ["true"])


def test_the_spec_survives_the_launcher_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path, uid=JOB_UID, gid=JOB_UID, devices=("/dev/nvidia0",))
    assert SandboxSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    spec = spec._replace(netns="/run/netns/aicenter-x-job-1", api_upstream=("127.0.0.1", 8000))
    assert SandboxSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    spec = spec._replace(published=(("10.0.0.5", 41000),), publish_token="ab" * 32)  # a service replica's
    assert SandboxSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_job_network_namespace_is_entered_before_bwrap_which_keeps_it(tmp_path: Path) -> None:
    """bwrap runs inside the job's namespace (nsenter execs it: the launcher's child is still bwrap's pid) and
    never makes one of its own: the job's replicas share the namespace's loopback."""
    argv = bwrap_argv(_spec(tmp_path, netns="/run/netns/aicenter-x-job-1", uid=JOB_UID), ["true"])
    assert argv[:3] == [NSENTER, "--net=/run/netns/aicenter-x-job-1", SUPPORT.bwrap or "bwrap"]
    assert "--unshare-net" not in argv
    assert "--share-net" not in argv
    assert argv[argv.index("--") + 1].endswith("setpriv")  # the uid switch still happens inside
    # Without a namespace: bwrap first, on the caller's network.
    plain = bwrap_argv(_spec(tmp_path), ["true"])
    assert plain[0] == (SUPPORT.bwrap or "bwrap")
    assert not any(a.startswith("--net") or a == NSENTER for a in plain)


@needs_bwrap
def test_a_sandboxed_command_writes_outputs_only(tmp_path: Path) -> None:
    """For real: the code dir refuses writes, the output dir takes them, /tmp and /dev/shm are private, the
    host's other files and processes are not there."""
    tmp_path.chmod(0o700)  # like a root-only home: the job must still reach its binds
    uid = JOB_UID if os.geteuid() == 0 else None
    spec = _spec(tmp_path, uid=uid, gid=uid)
    if uid is not None:
        os.chown(tmp_path / "out", JOB_UID, JOB_UID)
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    (tmp_path / "secret.db").write_text("hashes")
    script = (
        f"touch {tmp_path}/code/new 2>/dev/null && echo code-writable || echo code-read-only;"
        f" touch {tmp_path}/out/result && echo out-writable;"
        f" cat {tmp_path}/secret.db 2>/dev/null || echo no-secret;"
        " touch /tmp/x /dev/shm/y && echo tmp-writable;"
        " id -u; ls /proc | grep -c '^[0-9]'"
    )
    done = subprocess.run(
        bwrap_argv(spec, ["/bin/sh", "-c", script]),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.split()
    assert out[:4] == ["code-read-only", "out-writable", "no-secret", "tmp-writable"]
    assert int(out[4]) == (os.geteuid() if uid is None else uid)
    assert int(out[5]) <= 5  # bwrap's init, sh, ls, grep (and a subshell): nothing of the host
    assert (tmp_path / "out" / "result").exists()
    assert not (tmp_path / "code" / "new").exists()
