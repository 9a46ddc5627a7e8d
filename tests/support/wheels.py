"""A tiny wheel built offline, for venv images that must install something real without an index."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TINY_WHEEL = "tinypkg-0.1.0-py3-none-any.whl"


def build_tiny_wheel(root: Path) -> Path:
    """Build ``tinypkg`` 0.1.0 (``tinypkg.ANSWER == 42``) under ``root``; the directory holding its wheel."""
    (root / "src" / "tinypkg").mkdir(parents=True)
    (root / "src" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "tinypkg"\nversion = "0.1.0"\n'
    )
    (root / "src" / "tinypkg" / "__init__.py").write_text("ANSWER = 42\n")
    wheels = root / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-index", "--no-build-isolation", "--no-deps",
         "--wheel-dir", str(wheels), str(root / "src")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert built.returncode == 0, f"building the test wheel failed:\n{built.stdout}\n{built.stderr}"
    assert [p.name for p in wheels.iterdir()] == [TINY_WHEEL]
    return wheels
