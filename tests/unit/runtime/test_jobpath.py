"""The job-side helpers on a job's PYTHONPATH: importable by an interpreter that has no aicenter installed,
read-only, and without any server module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aicenter.runtime.jobpath import JOB_MODULES, job_pythonpath, write_job_pythonpath

SCRIPT = """
import importlib.util, json, sys
from aicenter.runtime import report, checkpoint_dir
report(step=3, loss=0.125)
print(json.dumps({
    "server": importlib.util.find_spec("aicenter.config") is not None,
    "launcher": importlib.util.find_spec("aicenter.runtime.launcher") is not None,
    "checkpoints": str(checkpoint_dir()),
}))
"""


def test_helpers_import_in_a_python_without_aicenter(tmp_path: Path) -> None:
    path = write_job_pythonpath(tmp_path / "jobs")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # -S: no site-packages at all (neither the installed aicenter nor any third-party module), like a bare venv.
    env = {"PYTHONPATH": str(path), "AICENTER_RUN_DIR": str(run_dir), "AICENTER_CHECKPOINT_DIR": str(tmp_path / "c")}
    result = subprocess.run(
        [sys.executable, "-S", "-c", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"server": False, "launcher": False, "checkpoints": str(tmp_path / "c")}
    line = json.loads((run_dir / "metrics.jsonl").read_text())
    assert (line["step"], line["loss"]) == (3, 0.125)


def test_the_directory_is_read_only_named_by_content_and_written_once(tmp_path: Path) -> None:
    first = write_job_pythonpath(tmp_path)
    assert first == job_pythonpath(tmp_path)
    assert write_job_pythonpath(tmp_path) == first
    package = first / "aicenter" / "runtime"
    assert sorted(p.name for p in package.iterdir()) == [
        "__init__.py",
        "checkpoint.py",
        "files.py",
        "report.py",
        "serve.py",
        "serve_runtimes.py",
        "serve_v2.py",
    ]
    assert not (first / "aicenter" / "__init__.py").exists()  # a namespace package: an installed aicenter wins
    assert oct((package / "report.py").stat().st_mode & 0o777) == "0o444"
    assert oct(package.stat().st_mode & 0o777) == "0o555"
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary directory left behind


SERVE_IMPORTS = """
import json, sys
before = set(sys.modules)
import aicenter.runtime.serve
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names))))
"""


def test_the_model_server_imports_only_numpy_besides_the_stdlib_and_its_own_files(tmp_path: Path) -> None:
    # A model server image has numpy and the model's framework; the framework is imported when the model loads.
    path = write_job_pythonpath(tmp_path / "jobs")
    numpy_root = Path(np.__file__).parent.parent
    if (numpy_root / "aicenter").exists():
        pytest.skip("numpy shares its directory with an installed aicenter")
    env = {"PYTHONPATH": os.pathsep.join([str(path), str(numpy_root)])}
    result = subprocess.run(
        [sys.executable, "-S", "-c", SERVE_IMPORTS], env=env, cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["aicenter", "numpy"]
    assert {"serve.py", "serve_v2.py", "serve_runtimes.py"} <= set(JOB_MODULES)
