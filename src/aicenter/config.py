"""Typed settings. Every field reads ``AICENTER_<NAME>`` (nested: ``AICENTER_<GROUP>__<NAME>``)."""

from __future__ import annotations

import ipaddress
import secrets
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

from aicenter.storage.private import private_dir, write_private

# Well-known values that must never sign anything outside development.
_KNOWN_WEAK_SECRETS = frozenset({"secret", "changeme", "change-me", "dev", "development", "aicenter"})

# The argon2id cost profiles of password hashing (parameters in aicenter.services.auth).
PasswordHashProfile = Literal["production", "fast"]
_HASHING_OUTSIDE_DEV: frozenset[PasswordHashProfile] = frozenset({"production"})

# The engines an executor exists for (aicenter.executors).
ENGINES = ("local", "ray", "slurm")


class Settings(BaseSettings):
    """Server settings. Defaults give the embedded shape: SQLite and local disk under ``home``."""

    model_config = SettingsConfigDict(env_prefix="AICENTER_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(
        default=Path("~/.aicenter"),
        description="Directory holding the embedded database, the artifact store, logs and the CLI config.",
    )
    dev: bool = Field(
        default=False,
        description="Development mode: allows default secrets, insecure cookies and fast password hashing.",
    )
    host: str = Field(default="127.0.0.1", description="Address the API and console listen on.")
    port: int = Field(default=8000, description="Port the API and console listen on.")
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy async URL, e.g. postgresql+asyncpg://user@host/db. Default: SQLite under home.",
    )
    db_pool_size: int = Field(
        default=20,
        description="Database connections per API process, and as many again in overflow. Requests "
        "beyond it wait for a connection, which shows as tail latency under load.",
    )
    secret_key: str | None = Field(
        default=None,
        description="Key that signs CSRF tokens. Default: generated once and kept in home/secret_key.",
    )
    admin_username: str = Field(default="admin", description="Name of the first platform admin.")
    admin_password: str | None = Field(
        default=None, description="Password of the first platform admin; generated and printed once if unset."
    )
    password_hashing: PasswordHashProfile = Field(
        default="production",
        description="Cost of hashing passwords (argon2id): production (RFC 9106's parameters, ~0.3 s per hash "
        "and per login), or fast (the cheapest parameters argon2 accepts, for tests; refused unless dev). A hash "
        "records its parameters, so passwords set under one profile still verify under the other.",
    )
    public_url: str | None = Field(
        default=None,
        description="External URL of the server (https:// makes session cookies Secure and sends "
        "Strict-Transport-Security on every response).",
    )
    session_ttl_s: int = Field(default=12 * 3600, description="Lifetime of a console session, in seconds.")
    login_token_ttl_s: int = Field(
        default=30 * 24 * 3600, description="Lifetime of the token that `aicenter login` gets, in seconds."
    )
    login_max_failures: int = Field(
        default=5,
        ge=1,
        description="Failed logins allowed per user name and client address within login_window_s; a client "
        "address is blocked for every user name after four times as many. A user is never locked out of a "
        "right-password login from another address.",
    )
    login_window_s: int = Field(default=300, ge=1, description="Window over which failed logins are counted.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description='Addresses or networks (JSON list, e.g. ["10.0.0.5", "192.168.0.0/16"]) of reverse '
        "proxies whose X-Forwarded-For header names the client. Empty: the socket peer is the client and the "
        "header is ignored, since anyone can send it.",
    )
    register_host: bool = Field(
        default=True,
        description="Register this host as a node at start-up, when the local executor is one of the engines.",
    )
    heartbeat_s: float = Field(default=15.0, description="Interval of this host's node heartbeat, in seconds.")
    node_lost_after_s: float = Field(
        default=60.0, description="A node whose last heartbeat is older than this is marked not_ready."
    )
    token_cache_s: float = Field(
        default=2.0,
        description="How long a verified API token is trusted without a database read. Revocation takes "
        "effect within this time on every replica.",
    )

    metrics_token: str = Field(
        default="",
        description="Bearer token a Prometheus scraper sends to GET /metrics (prometheus.yml: authorization: "
        "credentials: ...). Empty: /metrics answers platform admins' tokens only; it never answers anonymous "
        "clients, since it names the workspaces.",
    )
    metrics_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="How old the platform counts /metrics serves may be, in seconds: a refresher re-reads them "
        "this often while scrapes come (one within a minute), so no scrape waits on the database and several "
        "scrapers never add up to more than one set of aggregate queries per interval; 0: read on every scrape.",
    )
    metrics_raw_retention_s: int = Field(
        default=24 * 3600,
        ge=300,
        description="How long raw metric points (every sample, every reported value) are kept, in seconds; older "
        "ranges are read from the 5-minute rollups.",
    )
    metrics_5m_retention_s: int = Field(
        default=90 * 24 * 3600,
        ge=3600,
        description="How long the 5-minute rollups (count, sum, min, max per series) are kept, in seconds.",
    )
    metrics_1h_retention_s: int = Field(
        default=5 * 365 * 24 * 3600,
        ge=24 * 3600,
        description="How long the hourly rollups are kept, in seconds.",
    )
    metrics_ingest_interval_s: float = Field(
        default=10.0,
        gt=0,
        description="Interval at which the values jobs report (aicenter.runtime.report, metrics.jsonl) are "
        "copied into the series store as report.<name>, in seconds.",
    )
    metrics_prune_interval_s: float = Field(
        default=300.0,
        gt=0,
        description="Interval at which metric points past their retention are deleted, in seconds.",
    )

    sse_ping_s: float = Field(
        default=15.0,
        gt=0,
        description="Interval of the keep-alive comments on server-sent event streams (a job's live log), in "
        "seconds: proxies close a connection that stays quiet longer (nginx after 60 s by default).",
    )

    store_root: Path | None = Field(
        default=None,
        description="Root of the artifact store (blobs, upload staging, image envs): a local path or a shared "
        "filesystem mount (NFS, GPFS, CephFS). Default: <home>/store.",
    )
    store_fsync: bool = Field(
        default=True, description="fsync blobs before a version that references them commits (durability)."
    )
    upload_part_size: int = Field(
        default=16 * 1024 * 1024, ge=64 * 1024, description="Size of one part of a chunked upload, in bytes."
    )
    upload_ttl_s: int = Field(
        default=7 * 24 * 3600, description="An upload session not committed within this time expires and is removed."
    )
    gc_grace_s: int = Field(
        default=3600,
        description="Unreferenced blobs younger than this are kept by garbage collection: a commit may be about "
        "to reference them.",
    )
    gc_interval_s: float = Field(default=600.0, description="Interval of the store garbage collector, in seconds.")
    alert_eval_interval_s: float = Field(
        default=15.0, description="Interval of the alert evaluator (one replica evaluates per interval), in seconds."
    )
    billing_interval_s: float = Field(
        default=60.0,
        ge=0,
        description="How often the billing meter charges running copies for the machine time since their last "
        "charge, in seconds (one server replica meters at a time); 0: no metering on this replica.",
    )
    alert_webhook_timeout_s: float = Field(
        default=5.0, description="A webhook that has not answered in this many seconds counts as failed (retried)."
    )
    alert_webhook_private_networks: list[str] = Field(
        default_factory=list,
        description='Networks (JSON list, e.g. ["10.20.0.0/16"]) that webhooks of workspace channels may reach '
        "although they are private, loopback or link-local. Empty: a workspace's webhook must resolve to public "
        "addresses only, so a workspace admin cannot make the server probe or call services inside the center. "
        "Platform-wide channels (platform admins') may reach any address.",
    )
    alert_delivery_attempts: int = Field(
        default=8, ge=1, description="Attempts per notification (backoff 10 s doubling, at most 1 h) before giving up."
    )
    smtp_host: str = Field(default="", description="SMTP server for alert e-mail; empty: e-mail channels fail.")
    smtp_port: int = Field(default=25, description="Port of the SMTP server.")
    smtp_from: str = Field(default="aicenter@localhost", description="Sender address of alert e-mail.")
    smtp_username: str = Field(default="", description="SMTP login; empty: no authentication.")
    smtp_password: str = Field(default="", description="SMTP password (with smtp_username).")
    smtp_starttls: bool = Field(default=False, description="Upgrade the SMTP connection with STARTTLS.")
    archive_max_bytes: int = Field(
        default=64 * 1024**3, description="Largest expanded size of an uploaded archive (archive bomb limit)."
    )
    archive_max_entries: int = Field(
        default=1_000_000, description="Most entries in an uploaded archive (archive bomb limit)."
    )
    import_roots: list[Path] = Field(
        default_factory=list,
        description="Server directories that platform admins may import as preset versions; empty: import is off.",
    )
    pip_args: list[str] = Field(
        default_factory=list,
        description='Extra pip arguments for venv image builds, e.g. ["--no-index", "--find-links", "/wheels"].',
    )
    build_timeout_s: float = Field(default=3600.0, description="A venv image build running longer than this fails.")

    jobs_dir: Path | None = Field(
        default=None,
        description="Where jobs' directories live (code, data, output, checkpoints, replica run dirs): "
        "<jobs_dir>/<job id>/. Replicas of several servers must see the same path. Default: <home>/jobs.",
    )
    schedule_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="Longest wait between scheduling cycles. A submit on this replica wakes the scheduler at "
        "once; the interval is the fallback for work submitted through other replicas.",
    )
    reconcile_batch: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Jobs one server replica's reconciler drives at once (launches, stops). Raise it where a "
        "launch waits seconds for the engine (Slurm's scheduling cycle, Ray's worker start) and many jobs start "
        "together: with 50 jobs submitted at once on Slurm, 96 gave a p50 of 6.9 s against 8.9 s (bench/executors.py).",
    )
    reconcile_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="Longest wait between job reconciler passes (launch, watch, restart, stop). Placements "
        "made on this replica wake it at once.",
    )
    stop_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="Time a replica gets after SIGTERM (stop, preemption, gang restart) to checkpoint and exit "
        "before it is killed.",
    )
    sandbox: Literal["auto", "bwrap", "off"] = Field(
        default="auto",
        description="Run each replica of the local executor in a bubblewrap sandbox: auto (where bwrap works "
        "here; elsewhere the server runs in single-user mode), bwrap (always; a launch fails where none can be "
        "made), or off (single-user mode: every job user is trusted like the server's Unix user, and no second "
        "user can be created).",
    )
    sandbox_uid_base: int = Field(
        default=200_000,
        ge=1000,
        lt=2**31 - 2**24,
        description="When the server runs as root, a sandboxed replica runs as uid and gid <this> + its "
        "workspace id, never the server's. Pick a range no local account uses.",
    )
    sandbox_network: Literal["isolated", "host"] = Field(
        default="isolated",
        description="The network of a sandboxed replica when the server runs as root: isolated (its job's own "
        "network namespace on the node: loopback shared by the job's replicas there, nothing of the host, the "
        "API only through a relay at AICENTER_API_URL) or host (the host's network, what executors spanning "
        "several nodes need until they have a policy of their own). An unprivileged server always uses host.",
    )
    replica_cgroups: bool = Field(
        default=True,
        description="Enforce each local replica's memory, CPU and process limits in its own kernel control "
        "group (cgroup v2, else v1) where the server may make one; elsewhere, or when false, a watchdog samples "
        "the replica's memory and kills it past its limit.",
    )
    replica_cgroup_parent: str = Field(
        default="",
        description="The control group (a path as /proc/self/cgroup writes it, e.g. /aicenter.slice) that holds "
        "the replicas' groups. Empty: 'aicenter' below the server's own group's parent (cgroup v2: a systemd "
        "unit with Delegate=yes and DelegateSubgroup=) or below the server's own group (v1).",
    )
    replica_pids_max: int = Field(
        default=4096,
        ge=0,
        description="The most processes and threads one local replica may have at once, where a cgroup "
        "enforces it (a fork bomb stops there); 0: no limit.",
    )
    executor: str = Field(
        default="local",
        description="The engines replicas run on: local (this host), ray (an existing Ray cluster, "
        "AICENTER_RAY_ADDRESS) and slurm (a partition of an existing Slurm cluster, AICENTER_SLURM_PARTITION); "
        "several at once as a list (e.g. local,slurm). Each engine's nodes carry the label "
        "aicenter.io/executor=<engine>, so a pool per engine selects them. Ray and Slurm need the jobs directory "
        "(AICENTER_JOBS_DIR) on a filesystem every node mounts at the same path (docs/deploy/engines.md).",
    )
    ray_address: str = Field(
        default="", description="The Ray cluster's GCS address (host:port of the head node), for executor ray."
    )
    ray_namespace: str = Field(default="aicenter", description="The Ray namespace of the replicas' named actors.")
    ray_auth_mode: str = Field(
        default="", description="Ray's RAY_AUTH_MODE for the server's connection (e.g. token); empty: Ray's default."
    )
    ray_auth_token: str = Field(
        default="", description="Ray's authentication token (RAY_AUTH_TOKEN) when the cluster requires one."
    )
    slurm_partition: str = Field(
        default="", description="The Slurm partition the platform owns (executor slurm); its nodes are ours."
    )
    slurm_conf: str = Field(default="", description="SLURM_CONF for the Slurm commands; empty: Slurm's default.")
    slurm_port_range: str = Field(
        default="20000-29999",
        pattern=r"^\d{1,5}-\d{1,5}$",
        description="Ports handed to replicas on Slurm nodes other than this host (rendezvous, MASTER_PORT), "
        "cycled per node; the site keeps this range free on its nodes. On this host ports are probed instead.",
    )
    slurm_jobcomp_file: str = Field(
        default="",
        description="Slurm's jobcomp/filetxt file, read to tell how a job that left the queue ended when the "
        "cluster has no accounting (sacct); empty: none.",
    )
    slurm_bin_dir: str = Field(
        default="", description="Where sbatch, squeue, sacct, scancel, scontrol and srun are; empty: the PATH."
    )
    engine_python: str = Field(
        default="",
        description="The Python on Slurm nodes that runs the replica's launcher (aicenter must be importable "
        "by it); empty: this server's interpreter, the same path on every node.",
    )
    metrics_sample_interval_s: float = Field(
        default=15.0,
        ge=0.0,
        description="How often the sampler reads every node's CPU, memory, disk, network and accelerators and every "
        "running replica's CPU and memory (series node.*, accelerator.*, replica.*); also how often Slurm replicas' "
        "launchers write their usage file. One read costs ~1 ms of CPU per node. 0: no sampler (a center whose "
        "telemetry comes from its own exporters); at least 1 otherwise.",
    )
    engine_sync_s: float = Field(
        default=5.0,
        gt=0,
        description="How often the nodes of the Ray and Slurm engines are read into the inventory: nodes that "
        "appear are registered, nodes the engine reports down or gone become not_ready.",
    )

    notebook_idle_timeout_s: int = Field(
        default=3600,
        ge=0,
        description="Notebooks idle this long are stopped (culled; their work dir is kept), unless their workspace "
        "or the notebook sets its own. Idle: no kernel busy, no terminal, SSH or browser input, no GPU use. 0: never.",
    )
    notebook_idle_warning_s: int = Field(
        default=600,
        ge=0,
        description="How long before a cull the notebook's owner is warned (an event and a banner on its page).",
    )
    notebook_cull_interval_s: float = Field(
        default=30.0,
        gt=0,
        description="How often the idle culler looks at every running notebook (one status read each).",
    )
    serving_interval_s: float = Field(
        default=1.0,
        gt=0,
        description="How often the serving controller reconciles services (readiness, traffic, autoscaling).",
    )
    serving_gateway_refresh_s: float = Field(
        default=1.0,
        gt=0,
        description="How often each server process reloads the serving gateway's route table (no database "
        "access per request; a change made through this process reloads it at once).",
    )
    ssh_host: str | None = Field(
        default=None,
        description="Address the SSH gateway listens on (ssh, sftp, VS Code and PyCharm reach notebooks through "
        "it). Default: the API's host.",
    )
    ssh_port: int = Field(
        default=2222,
        ge=-1,
        le=65535,
        description="Port of the SSH gateway; 0: any free port (tests); -1: no SSH gateway.",
    )
    ssh_reuse_port: bool = Field(
        default=False,
        description="Let several server processes share the SSH gateway's port (set by `aicenter up --workers N`, "
        "whose workers each run a gateway); otherwise a second server on the port is refused, not mixed in.",
    )
    ssh_public_host: str | None = Field(
        default=None,
        description="Host name users' SSH clients connect to (printed by `aicenter notebook ssh-config`). Default: "
        "the public URL's host, else the SSH gateway's address.",
    )

    @field_validator("executor")
    @classmethod
    def _check_executors(cls, value: str) -> str:
        names = [part.strip() for part in value.split(",") if part.strip()]
        unknown = [n for n in names if n not in ENGINES]
        if not names or unknown:
            raise ValueError(
                f"AICENTER_EXECUTOR (aicenter up --executor) is {value!r}: name one or more of "
                f"{', '.join(ENGINES)}, separated by commas"
            )
        return ",".join(dict.fromkeys(names))

    scheduler_policy: str = Field(
        default="default",
        description="The scheduling policy: a built-in name (fifo, priority, fair-share, tiresias, sjf, "
        "best-fit, random-fit, fgd, default) or the path of a YAML/JSON policy document.",
    )

    @field_validator("trusted_proxies", "alert_webhook_private_networks")
    @classmethod
    def _check_networks(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        for entry in entries:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"AICENTER_{str(info.field_name).upper()}: {entry!r} is neither an IP address nor a network "
                    "such as 10.0.0.0/8"
                ) from None
        return entries

    @field_validator("metrics_sample_interval_s")
    @classmethod
    def _check_sample_interval(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("AICENTER_METRICS_SAMPLE_INTERVAL_S: 0 (off) or at least 1 second")
        return value

    @model_validator(mode="after")
    def _engines_configured(self) -> Settings:
        if "ray" in self.executors and not self.ray_address.strip():
            raise ValueError(
                "the ray executor needs the Ray head's address: set AICENTER_RAY_ADDRESS (aicenter up "
                "--ray-address) to its GCS address, host:port as `ray start --head` printed it"
            )
        return self

    @model_validator(mode="after")
    def _refuse_weak_secrets(self) -> Settings:
        if self.dev:
            return self
        if self.password_hashing not in _HASHING_OUTSIDE_DEV:
            raise ValueError(
                f"AICENTER_PASSWORD_HASHING={self.password_hashing} makes stolen password hashes cheap to crack "
                "and is for tests only; unset it (production is the default), or set AICENTER_DEV=1 for development"
            )
        if self.secret_key is not None and (len(self.secret_key) < 16 or self.secret_key in _KNOWN_WEAK_SECRETS):
            raise ValueError(
                "AICENTER_SECRET_KEY is too weak (at least 16 characters); unset it to have one generated, "
                "or set AICENTER_DEV=1 for development"
            )
        if self.admin_password is not None and self.admin_password.lower() in {"admin", "password", "changeme"}:
            raise ValueError("AICENTER_ADMIN_PASSWORD is a well-known default; choose another or set AICENTER_DEV=1")
        return self

    @cached_property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def store_dir(self) -> Path:
        return self.store_root.expanduser().resolve() if self.store_root else self.home_dir / "store"

    @property
    def executors(self) -> tuple[str, ...]:
        """The engines this server runs replicas on (``executor``, split)."""
        return tuple(self.executor.split(","))

    @property
    def jobs_path(self) -> Path:
        """The jobs directory: ``jobs_dir``, or ``<home>/jobs``."""
        return self.jobs_dir.expanduser().resolve() if self.jobs_dir else self.home_dir / "jobs"

    @property
    def api_url(self) -> str:
        """How a job reaches this server's API (``AICENTER_API_URL``)."""
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{self.home_dir / 'aicenter.db'}"

    @property
    def is_sqlite(self) -> bool:
        return self.effective_database_url.startswith("sqlite")

    @property
    def trusted_proxy_networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        """``trusted_proxies`` as networks (an address is a network of one); checked when settings load."""
        return [ipaddress.ip_network(entry.strip(), strict=False) for entry in self.trusted_proxies]

    @property
    def secure_cookies(self) -> bool:
        return bool(self.public_url and self.public_url.startswith("https://"))

    def resolve_secret_key(self) -> str:
        """Return the signing key: the configured one, else one generated once and kept (0600) in home."""
        if self.secret_key:
            return self.secret_key
        path = self.secret_key_path
        if not path.exists():
            private_dir(self.home_dir)
            write_private(path, secrets.token_urlsafe(48))
        return path.read_text().strip()

    @property
    def secret_key_path(self) -> Path:
        """Where a generated signing key is kept: ``<home>/secret_key``."""
        return self.home_dir / "secret_key"

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file of ``effective_database_url``; None on PostgreSQL."""
        url = make_url(self.effective_database_url)
        if not url.drivername.startswith("sqlite") or not url.database:
            return None
        return Path(url.database).expanduser().resolve()
