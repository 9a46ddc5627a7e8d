"""A notebook replica's command: JupyterLab and the SSH agent, inside the replica's sandbox.

``python -m aicenter.runtime.notebook`` is what a notebook's plan runs (with the server's interpreter, which the
sandbox always shows read-only): it writes JupyterLab's configuration into the sandbox's private ``/tmp``, starts
JupyterLab and, where asyncssh is installed, the SSH agent (``aicenter.runtime.notebook_ssh``), and lives as long
as JupyterLab does. A stop reaches both through the launcher's signal to the process group.

What it reads (the plan's environment, ``services.jobs`` builds it):

- ``AICENTER_NOTEBOOK_BIND``: the address both listen on: 127.0.0.1 inside the job's own network namespace (the
  launcher publishes the ports on the node, ``aicenter.runtime.replica_network``), else the node's address.
- ``AICENTER_NOTEBOOK_PORTS``: ``<jupyter>,<ssh>``.
- ``AICENTER_NOTEBOOK_BASE_URL``: ``/notebooks/<id>/``, the path the platform's proxy serves it under.
- ``AICENTER_NOTEBOOK_TOKEN``: JupyterLab's token, derived by the server from its secret key (the proxy adds it
  to every request; the user never sees it). It goes into a 0600 config file and leaves the environment, so
  kernels and terminals do not inherit it.
- ``AICENTER_NOTEBOOK_KERNEL_PYTHON``: the image's interpreter, the kernel's Python (the user's packages import).
- ``AICENTER_NOTEBOOK_STATE``: the directory with the SSH agent's host key and authorized keys (read-only).
- ``AICENTER_NOTEBOOK_ACTIVITY``: the file the SSH agent writes the time of the last input to.
- ``AICENTER_CODE_DIR``: the work dir (JupyterLab's root, the terminals' and SSH sessions' directory).

Standard library only: it runs before anything of JupyterLab is imported, in whatever the sandbox shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["jupyter_argv", "kernel_spec", "main"]

# The sandbox's private /tmp (tmpfs): JupyterLab's config, kernel specs and connection files; gone with it.
STATE_ROOT = "/tmp/aicenter-notebook"  # noqa: S108 - the sandbox's own tmpfs, not the host's /tmp
_KERNEL_NAME = "python3"
_STOP_GRACE_S = 10.0
_EXTENSION = "aicenter.runtime.notebook"  # this module by its name: run with -m, its __name__ is __main__


def kernel_spec(kernel_python: str, server_python: str = sys.executable) -> dict[str, object]:
    """The kernel spec of the image's Python.

    The server's own interpreter has ipykernel. An image's venv (built from the same base Python) may not: its
    kernel appends the server's ``site-packages`` at the END of ``sys.path`` before starting ipykernel, so the
    user's packages still win and only what the image lacks (ipykernel and its dependencies) comes from the
    server's, read-only.
    """
    # Not realpath: a venv's python is a symlink to its base interpreter, yet it has its own site-packages.
    if os.path.abspath(kernel_python) == os.path.abspath(server_python):
        argv = [kernel_python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    else:
        sites = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
        code = (
            "import sys; "
            f"sys.path.extend(p for p in {sorted(set(sites))!r} if p not in sys.path); "
            "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
        )
        argv = [kernel_python, "-c", code, "-f", "{connection_file}"]
    return {"argv": argv, "display_name": "Python 3 (image)", "language": "python", "metadata": {"debugger": True}}


def jupyter_argv(bind: str, port: int, base_url: str, root_dir: str, config_dir: str) -> list[str]:
    """JupyterLab's command line. Nothing reaches the network beyond the node: no update checks, no news."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--config={config_dir}/jupyter_server_config.json",
        "--no-browser",
        f"--ServerApp.ip={bind}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={base_url}",
        f"--ServerApp.root_dir={root_dir}",
        # Requests arrive through the platform's proxy, whose Host is the platform's name, not this address.
        "--ServerApp.allow_remote_access=True",
        "--LabApp.news_url=",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--ServerApp.log_level=WARN",
    ]


def _write_private(path: Path, data: Mapping[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)


def prepare(env: Mapping[str, str], root: str = STATE_ROOT) -> tuple[dict[str, str], str]:
    """JupyterLab's config and kernel spec under ``root``; the environment its children get (without the token)
    and the config dir."""
    base = Path(root)
    config, data, runtime = base / "config", base / "data", base / "runtime"
    for d in (config, data / "kernels" / _KERNEL_NAME, runtime):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = env.get("AICENTER_NOTEBOOK_TOKEN", "")
    if len(token) < 32:
        raise SystemExit("aicenter notebook: no token (AICENTER_NOTEBOOK_TOKEN): JupyterLab never runs without one")
    shell = _shell(env.get("SHELL"))
    server_config = {
        "IdentityProvider": {"token": token},
        "ServerApp": {
            # This module, as a server extension: it keeps the token out of the pages.
            "jpserver_extensions": {_EXTENSION: True},
            # An interactive shell, not a login one: the system's /etc/profile would reset PATH (and the sandbox
            # does not show it), hiding the image's python and the notebook's environment.
            "terminado_settings": {"shell_command": [shell, "-i"] if shell.endswith("bash") else [shell]},
        },
    }
    _write_private(config / "jupyter_server_config.json", server_config)
    kernel_python = env.get("AICENTER_NOTEBOOK_KERNEL_PYTHON") or sys.executable
    _write_private(data / "kernels" / _KERNEL_NAME / "kernel.json", kernel_spec(kernel_python))
    child = {k: v for k, v in env.items() if k != "AICENTER_NOTEBOOK_TOKEN" and not k.startswith("JUPYTER")}
    child.update(
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_DATA_DIR=str(data),
        JUPYTER_RUNTIME_DIR=str(runtime),
        JUPYTER_PATH=str(data),
        # The image's python first: `python`, `pip` in a terminal are the kernel's.
        PATH=os.pathsep.join(p for p in (str(Path(kernel_python).parent), env.get("PATH", "")) if p),
        SHELL=shell,
    )
    return child, str(config)


def _shell(preferred: str | None) -> str:
    """The terminals' shell: the environment's when the sandbox has it, else bash, else sh."""
    return next((s for s in (preferred, "/bin/bash", "/bin/sh") if s and os.path.exists(s)), "/bin/sh")


def _agent_argv(env: Mapping[str, str], bind: str, port: int, workdir: str) -> list[str] | None:
    """The SSH agent's command, or None where it cannot run (no asyncssh, no state dir)."""
    state = env.get("AICENTER_NOTEBOOK_STATE")
    activity = env.get("AICENTER_NOTEBOOK_ACTIVITY")
    if not state or not activity or not os.path.exists(os.path.join(state, "host_key")):
        return None
    try:
        import importlib.util

        if importlib.util.find_spec("asyncssh") is None:
            return None
    except (ImportError, ValueError):
        return None
    return [
        sys.executable,
        "-m",
        "aicenter.runtime.notebook_ssh",
        "--listen",
        f"{bind}:{port}",
        "--host-key",
        os.path.join(state, "host_key"),
        "--authorized-keys",
        os.path.join(state, "authorized_keys"),
        "--activity",
        activity,
        "--workdir",
        workdir,
    ]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter Server's entry point: this module is a server extension too (see below)."""
    return [{"module": _EXTENSION}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Keep JupyterLab's token out of the pages it serves.

    JupyterLab writes its token into every page's configuration (JupyterHub blanks it the same way), where the
    browser would keep a credential that opens the notebook's port directly, past the platform's proxy, its
    owner check and its activity tracking. The browser needs none: the proxy adds the token to each request.
    Run once the extensions are loaded, after JupyterLab has filled the page configuration.
    """
    from tornado.ioloop import IOLoop

    def blank() -> None:
        serverapp.web_app.settings.setdefault("page_config_data", {})["token"] = ""

    IOLoop.current().add_callback(blank)


def main() -> int:
    env = dict(os.environ)
    bind = env.get("AICENTER_NOTEBOOK_BIND", "127.0.0.1")
    ports = [int(p) for p in env.get("AICENTER_NOTEBOOK_PORTS", "").split(",") if p.strip()]
    if not ports:
        print("aicenter notebook: AICENTER_NOTEBOOK_PORTS is not set", file=sys.stderr)
        return 2
    workdir = env.get("AICENTER_CODE_DIR") or os.getcwd()
    base_url = env.get("AICENTER_NOTEBOOK_BASE_URL", "/")
    child_env, config_dir = prepare(env)
    children: list[subprocess.Popen[bytes]] = []
    agent = _agent_argv(env, bind, ports[1], workdir) if len(ports) > 1 else None
    if agent is not None:
        children.append(subprocess.Popen(agent, env=child_env, cwd=workdir))
    else:
        print("aicenter notebook: SSH is not available in this notebook (no asyncssh or no host key)", flush=True)
    lab = subprocess.Popen(jupyter_argv(bind, ports[0], base_url, workdir, config_dir), env=child_env, cwd=workdir)
    children.append(lab)
    print(f"aicenter notebook: JupyterLab on {bind}:{ports[0]}{base_url}", flush=True)

    def forward(signum: int, _frame: FrameType | None) -> None:
        for c in children:
            with contextlib.suppress(OSError):
                c.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = lab.wait()
    for c in children:  # JupyterLab ended: the agent goes with it (the launcher kills what is left anyway)
        if c.poll() is None:
            with contextlib.suppress(OSError):
                c.terminate()
    deadline = time.monotonic() + _STOP_GRACE_S
    for c in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.wait(max(0.0, deadline - time.monotonic()))
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
