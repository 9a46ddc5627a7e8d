"""``aicenter up``: the embedded server (SQLite under ``$AICENTER_HOME``) or several workers on one port.

Start-up time matters (the goal is a 200 on /api/v1/health within 3 s of the process starting), so this module
imports the server lazily and the CLI's other modules keep the SDK, rich and yaml out of this path.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aicenter.cli.common import CliError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from aicenter.config import Settings
    from aicenter.services.bootstrap import BootstrapResult


def _announce_admin(result: BootstrapResult) -> None:
    # stdout only, never the logger: the password must not end up in log files.
    if result.generated_password:
        print(
            f"Created platform admin '{result.admin_username}' with password: {result.generated_password}\n"
            "  (shown only now; change it in the console or with the API)",
            flush=True,
        )


def worker_app() -> FastAPI:
    """App factory for ``--workers N``: each worker process builds its own app from ``AICENTER_*``."""
    from aicenter.app import create_app
    from aicenter.config import Settings

    return create_app(Settings())


async def _prepare(settings: Settings) -> None:
    """Migrate and bootstrap once in the parent, so that workers find it done and the password prints once."""
    from aicenter.app import create_app

    app = create_app(settings, run_controllers=False, on_bootstrap=_announce_admin)
    async with app.router.lifespan_context(app):
        pass


def _settings() -> Settings:
    from pydantic import ValidationError

    from aicenter.config import Settings

    try:
        return Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise CliError("bad_config", f"{field + ': ' if field else ''}{first.get('msg', exc)}", exit_code=2) from None


def _listen(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port`` now, before the database and the first admin are created.

    uvicorn would bind only after the app's start-up, which creates the admin and prints its one-time password:
    on a busy port that password was printed and then lost with the failed start. Listening early also keeps
    the port: connections made during start-up wait in the backlog and are served once the app is ready.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise CliError("bad_config", f"--host {host}: {exc.strerror or exc}", field="--host", exit_code=2) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart despite TIME_WAIT
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise CliError(
                "port_in_use",
                f"cannot listen on {where}: the port is in use (another aicenter up?); stop that process or "
                f"choose another port with --port. Nothing was created or changed.",
            ) from None
        raise CliError(
            "listen_failed", f"cannot listen on {where}: {exc.strerror or exc}. Nothing was created or changed."
        ) from None
    sock.set_inheritable(True)  # --workers: the worker processes serve on this socket
    return sock


def _wait_ready(url: str, message: str, stop: threading.Event) -> None:
    """Print ``message`` once ``url`` answers 200 (multi-worker mode: the parent does not see startup)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    while not stop.wait(0.05):
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=1)
        try:
            conn.request("GET", parts.path)
            if conn.getresponse().status == 200:
                print(message, flush=True)
                return
        except OSError:
            pass
        finally:
            conn.close()


def up(
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 exposes it to the network).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    home: Annotated[
        Path | None, typer.Option(help="Data directory. Default: $AICENTER_HOME, else ~/.aicenter.", show_default=False)
    ] = None,
    workers: Annotated[int, typer.Option(min=1, help="Server processes sharing the port (production-like).")] = 1,
    log_level: Annotated[str, typer.Option("--log-level", help="critical, error, warning, info or debug.")] = "warning",
    access_log: Annotated[bool, typer.Option("--access-log", help="Log every request.")] = False,
    executor: Annotated[
        str | None,
        typer.Option(
            help="Engines to run replicas on: local, ray, slurm, or several (local,slurm). "
            "Default: $AICENTER_EXECUTOR, else local.",
            show_default=False,
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="The Ray cluster's head (host:port) for --executor ray.", show_default=False),
    ] = None,
    slurm_partition: Annotated[
        str | None,
        typer.Option(help="The Slurm partition the platform owns, for --executor slurm.", show_default=False),
    ] = None,
) -> None:
    """Start the server: REST API, console and controllers, with SQLite under the home directory by default.

    The first start creates the database and a platform admin (password from AICENTER_ADMIN_PASSWORD, else
    generated and printed once). Later starts keep every piece of data. Ctrl-C or SIGTERM stop it cleanly.
    With --executor ray or slurm, replicas run on that engine's nodes (docs/deploy/engines.md).
    """
    if log_level not in ("critical", "error", "warning", "info", "debug"):
        raise CliError(
            "validation_failed", f"--log-level: unknown level {log_level!r}", field="--log-level", exit_code=2
        )
    home_dir = (home or Path(os.environ.get("AICENTER_HOME") or "~/.aicenter")).expanduser().resolve()
    try:
        home_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError("bad_config", f"cannot create the home directory {home_dir}: {exc.strerror}") from None
    # Through the environment rather than arguments: workers (spawned processes) build their settings from it.
    os.environ["AICENTER_HOME"] = str(home_dir)
    os.environ["AICENTER_HOST"] = host
    os.environ["AICENTER_PORT"] = str(port)
    for name, value in (
        ("AICENTER_EXECUTOR", executor),
        ("AICENTER_RAY_ADDRESS", ray_address),
        ("AICENTER_SLURM_PARTITION", slurm_partition),
    ):
        if value is not None:
            os.environ[name] = value
    if workers > 1:  # each worker runs an SSH gateway on the one port
        os.environ["AICENTER_SSH_REUSE_PORT"] = "1"
    settings = _settings()
    sock = _listen(host, port)  # before anything is created: see _listen

    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104 - comparing, not binding
    base = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
    ready = f"aicenter is ready at {base} (console) — API docs at /api/docs"
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": access_log,
        "lifespan": "on",
        "timeout_graceful_shutdown": 10,
        "server_header": False,
        # The app reads X-Forwarded-For itself, from AICENTER_TRUSTED_PROXIES only; uvicorn's own handling
        # would trust it from 127.0.0.1 (any local user or job) and rewrite the client address first.
        "proxy_headers": False,
    }

    import uvicorn  # here, not at the top: ~200 ms that every other CLI command would pay

    if workers == 1:
        from aicenter.app import create_app
        from aicenter.cli._server import Server as _Server

        server = _Server(uvicorn.Config(create_app(settings, on_bootstrap=_announce_admin), **common))
        server.announce = ready
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
        if not server.started:  # a failed start-up, already logged by uvicorn
            sys.exit(1)
        return

    import asyncio

    from uvicorn.supervisors import Multiprocess

    try:
        asyncio.run(_prepare(settings))
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config("aicenter.cli.up:worker_app", factory=True, workers=workers, **common)
    stop = threading.Event()
    watcher = threading.Thread(target=_wait_ready, args=(f"{base}/api/v1/health", ready, stop), daemon=True)
    watcher.start()
    try:
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:  # a second Ctrl-C while the workers stop
        pass
    finally:
        stop.set()
        sock.close()
