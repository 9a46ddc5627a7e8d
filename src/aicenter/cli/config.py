"""The CLI's profiles in ``$AICENTER_HOME/config.toml`` (default ``~/.aicenter``): a server URL and a token each.

The file holds bearer tokens, so it is written with mode 0600 (atomically: a temporary file in the same
directory, created 0600 from the start, then renamed), never world-readable even for an instant.

    current = "default"

    [profiles.default]
    server = "http://127.0.0.1:8000"
    username = "admin"
    token = "..."
    workspace = "team-a"   # set by `aicenter workspace use`: commands act in it when -w is not given
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

DEFAULT_SERVER = "http://127.0.0.1:8000"
DEFAULT_PROFILE = "default"


def home_dir() -> Path:
    """``$AICENTER_HOME``, else ``~/.aicenter`` (the same directory ``aicenter up`` uses)."""
    return Path(os.environ.get("AICENTER_HOME") or "~/.aicenter").expanduser()


def config_path() -> Path:
    return home_dir() / "config.toml"


@dataclass
class Profile:
    name: str
    server: str = DEFAULT_SERVER
    token: str | None = None
    username: str | None = None
    workspace: str | None = None  # the default workspace's name (``aicenter workspace use``)

    def as_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server}
        if self.username:
            out["username"] = self.username
        if self.token:
            out["token"] = self.token
        if self.workspace:
            out["workspace"] = self.workspace
        return out


@dataclass
class CliConfig:
    """Every profile, and which one is current."""

    current: str | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    path: Path = field(default_factory=config_path)

    @classmethod
    def load(cls, path: Path | None = None) -> CliConfig:
        """Read the config file; a missing file is an empty config.

        Raises:
            ValueError: The file is not valid TOML.
        """
        path = path or config_path()
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            return cls(path=path)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{path} is not valid TOML: {exc}") from exc
        profiles = {
            name: Profile(
                name=name,
                server=str(raw.get("server") or DEFAULT_SERVER),
                token=raw.get("token") or None,
                username=raw.get("username") or None,
                workspace=raw.get("workspace") or None,
            )
            for name, raw in (data.get("profiles") or {}).items()
            if isinstance(raw, dict)
        }
        current = data.get("current")
        return cls(current=str(current) if current else None, profiles=profiles, path=path)

    def save(self) -> None:
        """Write the file atomically with mode 0600."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data: dict[str, Any] = {}
        if self.current:
            data["current"] = self.current
        data["profiles"] = {name: p.as_toml() for name, p in sorted(self.profiles.items())}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                tomli_w.dump(data, fh)
            os.chmod(tmp, 0o600)  # the umask may have narrowed it further; never wider
            tmp.replace(self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def active(self, override: str | None = None) -> Profile:
        """The profile to use: ``override`` (``--profile``), ``$AICENTER_PROFILE``, the current one, ``default``.

        ``$AICENTER_SERVER`` and ``$AICENTER_TOKEN`` override the profile's server and token (jobs get
        ``AICENTER_API_URL`` and ``AICENTER_TOKEN`` in their environment, so the CLI works inside them too).
        """
        name = override or os.environ.get("AICENTER_PROFILE") or self.current or DEFAULT_PROFILE
        stored = self.profiles.get(name)
        profile = (
            Profile(name=name)
            if stored is None
            else Profile(name, stored.server, stored.token, stored.username, stored.workspace)
        )
        server = os.environ.get("AICENTER_SERVER") or (None if stored else os.environ.get("AICENTER_API_URL"))
        if server:
            profile.server = server
        token = os.environ.get("AICENTER_TOKEN")
        if token:
            profile.token = token
        return profile
