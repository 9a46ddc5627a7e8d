"""App factory: settings -> database -> services -> controllers -> routers."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from aicenter import __version__
from aicenter.api.deps import SESSION_COOKIE
from aicenter.api.errors import install_error_handlers
from aicenter.api.metrics import HttpMetricsMiddleware, Metrics
from aicenter.api.metrics import router as metrics_router
from aicenter.api.middleware import ClientAddressMiddleware, HstsMiddleware, RequestIdMiddleware
from aicenter.api.routers import ROUTERS
from aicenter.api.serving_plane import ServingMiddleware, ServingPlane
from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers import (
    alerts,
    billing,
    engine_nodes,
    heartbeat,
    image_builder,
    jobs,
    metrics_series,
    notebook_culler,
    sampler,
    scheduling,
    serving,
    store_gc,
)
from aicenter.controllers.base import Controller
from aicenter.db import migrate
from aicenter.db.engine import Database
from aicenter.events import ssh_keys_changed
from aicenter.executors.base import Executor
from aicenter.executors.local import LocalExecutor, unsandboxed_reason
from aicenter.gateway.notebooks import NotebookGateway
from aicenter.gateway.ssh_notebooks import refresh_keys_soon, start_ssh_gateway
from aicenter.services import billing as services_billing
from aicenter.services import jobs as services_jobs
from aicenter.services.auth import TokenVerifier, use_password_profile
from aicenter.services.bootstrap import BootstrapResult, bootstrap
from aicenter.storage import BlobStore
from aicenter.storage.private import private_dir, private_file, tighten_if_present
from aicenter.web import install as install_console

log = logging.getLogger("aicenter")

_SINGLE_USER_BANNER = """
{rule}
NO SANDBOX: {reason}.
aicenter runs in SINGLE-USER MODE: every job runs unsandboxed as this server's Unix user, so whoever
submits a job is trusted like that user (the database, the store, the server's files and secrets).
{consequence}
For a multi-user center install bubblewrap (Debian/Ubuntu: apt install bubblewrap) and start the
server as root (each workspace's jobs then run as a uid of their own) or where the kernel allows
unprivileged user namespaces. See docs/security.md.
{rule}"""
_SINGLE_USER_RULE = "No second user can be created (HTTP 409 single_user_mode)."
_DEV_MULTI_USER = "AICENTER_DEV is set: users may still be created, for development only, never in production."


def single_user_mode(settings: Settings) -> str | None:
    """Why the server runs in single-user mode, or None when its replicas are sandboxed (or AICENTER_DEV
    lifts the rule); says so once, loudly, in the log (``aicenter up`` prints warnings)."""
    reason = unsandboxed_reason(settings.sandbox)
    if reason is None:
        return None
    consequence = _DEV_MULTI_USER if settings.dev else _SINGLE_USER_RULE
    log.warning(_SINGLE_USER_BANNER.format(rule="=" * 100, reason=reason, consequence=consequence))
    return None if settings.dev else reason


def build_executors(settings: Settings) -> dict[str, Executor]:
    """The executors of ``settings.executors``, by name. Ray's and Slurm's are imported only when configured:
    the ``ray`` package takes a second to import and is an optional dependency."""
    sandbox: dict[str, Any] = {
        "sandbox": settings.sandbox,
        "sandbox_uid_base": settings.sandbox_uid_base,
        "pids_max": settings.replica_pids_max,
        "cgroups": settings.replica_cgroups,
        "cgroup_parent": settings.replica_cgroup_parent,
    }
    executors: dict[str, Executor] = {}
    if "local" in settings.executors:
        executors["local"] = LocalExecutor(
            settings.jobs_path,
            sandbox_network=settings.sandbox_network,
            # A job's API relay goes to this server's own socket, whatever its public URL.
            api_server=(settings.host, settings.port),
            **sandbox,
        )
    if "ray" in settings.executors:
        from aicenter.executors.ray import RayExecutor

        executors["ray"] = RayExecutor(
            settings.jobs_path,
            address=settings.ray_address,
            namespace=settings.ray_namespace,
            auth_mode=settings.ray_auth_mode or None,
            auth_token=settings.ray_auth_token or None,
            **sandbox,
        )
    if "slurm" in settings.executors:
        from aicenter.executors.slurm import SlurmExecutor

        executors["slurm"] = SlurmExecutor(
            settings.jobs_path,
            partition=settings.slurm_partition or None,
            slurm_conf=settings.slurm_conf or None,
            bin_dir=settings.slurm_bin_dir or None,
            python=settings.engine_python or None,
            port_range=settings.slurm_port_range,
            usage_interval_s=settings.metrics_sample_interval_s,
            jobcomp_file=settings.slurm_jobcomp_file or None,
            **sandbox,
        )
    return executors


# Functions that build this process's controllers from the context; areas register theirs here.
CONTROLLER_FACTORIES: list[Callable[[AppContext], Controller | None]] = [
    heartbeat.build,
    engine_nodes.build,
    store_gc.build,
    metrics_series.build_ingest,
    metrics_series.build_prune,
    image_builder.build,
    scheduling.build,
    jobs.build,
    sampler.build,
    alerts.build_evaluator,
    alerts.build_delivery,
    notebook_culler.build,
    serving.build,
    billing.build,
]


def make_server_files_private(settings: Settings) -> list[str]:
    """Create the home, the store root and the SQLite file owner-only; tighten them (and the generated secret
    key) where an older server or an operator left them readable by others. Logs what changed, once.

    Returns:
        One ``"<path>: <old mode> -> <new mode>"`` per path that was tightened.
    """
    changed = [private_dir(settings.home_dir), private_dir(settings.store_dir)]
    if settings.sqlite_path is not None:
        settings.sqlite_path.parent.mkdir(parents=True, exist_ok=True)  # the home, unless configured elsewhere
        changed.append(private_file(settings.sqlite_path))
        db_file = settings.sqlite_path
        changed.extend(tighten_if_present(db_file.with_name(db_file.name + s)) for s in ("-wal", "-shm", "-journal"))
    changed.append(tighten_if_present(settings.secret_key_path))
    done = [c for c in changed if c is not None]
    if done:
        log.warning("made the server's files private to its Unix user: %s", "; ".join(done))
    return done


def create_app(
    settings: Settings | None = None,
    *,
    run_controllers: bool = True,
    on_bootstrap: Callable[[BootstrapResult], None] | None = None,
) -> FastAPI:
    """Build the ASGI app. Start-up applies migrations (under a lock), bootstraps, and starts controllers."""
    settings = settings or Settings()
    make_server_files_private(settings)
    use_password_profile(settings.password_hashing)
    db = Database(settings.effective_database_url, pool_size=settings.db_pool_size)
    ctx = AppContext(
        settings=settings,
        db=db,
        tokens=TokenVerifier(settings.token_cache_s),
        secret_key=settings.resolve_secret_key(),
        store=BlobStore(settings.store_dir, fsync=settings.store_fsync),
        executors=build_executors(settings),
        single_user=single_user_mode(settings),
    )
    # The jobs' quota usage and "version in use" checks, plugged into those areas here, where the app is
    # assembled, rather than as a side effect of some module's import.
    services_jobs.register_usage()
    services_billing.register_facts()  # billing.balance_ratio for the alert rule balance-low

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await migrate.upgrade(db)
        async with db.write() as session:
            result = await bootstrap(
                session, admin_username=settings.admin_username, admin_password=settings.admin_password
            )
        if on_bootstrap is not None:
            on_bootstrap(result)
        controllers = [c for f in CONTROLLER_FACTORIES if (c := f(ctx)) is not None] if run_controllers else []
        for controller in controllers:
            await controller.prepare()
        for controller in controllers:
            controller.start()
        ssh = await start_ssh_gateway(settings, db, app.state.notebook_gateway)
        app.state.ssh_gateway = ssh
        await serving_plane.start()
        unsubscribe = ssh_keys_changed.subscribe(lambda: refresh_keys_soon(db, settings.jobs_path))
        # Move the ~200k objects of imports and start-up out of the collector's view: full collections then
        # scan only request garbage, which shortens the pauses that show up as p99 latency.
        gc.freeze()
        try:
            yield
        finally:
            await app.state.metrics.platform.close()
            unsubscribe()
            if ssh is not None:
                await ssh.close()
            await app.state.notebook_gateway.close()
            await serving_plane.close()
            for controller in controllers:
                await controller.stop()
            for executor in ctx.executors.values():
                await executor.close()
            await db.dispose()

    app = FastAPI(
        title="aicenter",
        version=__version__,
        description="REST API of aicenter, the one-stop platform for AI computing centers.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url="/api/redoc",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.notebook_gateway = NotebookGateway(db, ctx.secret_key, session_cookie=SESSION_COOKIE)
    serving_plane = ServingPlane(ctx)
    app.state.serving_gateway = serving_plane.gateway
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(metrics_router)  # Prometheus' /metrics, outside /api and the OpenAPI document
    install_console(app)
    app.state.metrics = Metrics(ctx.telemetry)
    app.add_middleware(HttpMetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    # /serve/... goes to the serving gateway before any of the API's own middleware and routing: its budget per
    # request is about a millisecond, and it counts its own metrics.
    app.add_middleware(ServingMiddleware, plane=serving_plane)
    if settings.secure_cookies:  # the public URL is https
        app.add_middleware(HstsMiddleware)
    if settings.trusted_proxies:  # outermost: everything inside sees the client's address
        app.add_middleware(ClientAddressMiddleware, trusted_proxies=settings.trusted_proxy_networks)
    return app
