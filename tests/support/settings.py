"""Settings for servers under test: development mode with the cheapest password hashing.

argon2 with production parameters costs ~0.3 s per hash and per login, which every test that bootstraps an admin
or makes a user pays; tests of the production default build their own Settings (tests/unit/test_config.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aicenter.config import Settings

ADMIN_PASSWORD = "admin-password-1"
SECRET_KEY = "test-secret-key-0123456789"

# The environment that gives a server process the same cheap hashing (``aicenter up`` subprocesses).
FAST_HASHING_ENV = {"AICENTER_DEV": "1", "AICENTER_PASSWORD_HASHING": "fast"}
# Test servers run side by side: each SSH gateway on a free port of its own, not the default 2222.
SSH_ANY_PORT_ENV = {"AICENTER_SSH_PORT": "0"}


def make_settings(home: Path, **overrides: Any) -> Settings:
    """Settings of a test server on ``home``: known admin password and secret key, no host registration."""
    values: dict[str, Any] = {
        "home": home,
        "admin_password": ADMIN_PASSWORD,
        "secret_key": SECRET_KEY,
        "register_host": False,
        "dev": True,
        "password_hashing": "fast",
        "ssh_port": 0,
    }
    values.update(overrides)
    return Settings(**values)
