"""Private modules stay private: ruff's banned-api list (TID251) names every one, and nothing reaches past it.

ruff bans each ``aicenter.x._y`` everywhere and lets package ``aicenter.x`` import its own through a per-file
ignore; these tests keep both lists equal to the tree, so a new private module is banned without anyone
remembering to, and they check the imports inside exempted packages that ruff no longer sees.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def _private_modules() -> dict[str, str]:
    """Every private module under src/aicenter -> the package that owns it."""
    out: dict[str, str] = {}
    for path in sorted((SRC / "aicenter").rglob("*.py")):
        parts = _module(path).split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                out.setdefault(".".join(parts[: i + 1]), ".".join(parts[:i]))
                break
    return out


def _ruff() -> dict[str, object]:
    lint: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    return lint


def _tid_ignored() -> set[str]:
    ignores = _ruff()["per-file-ignores"]
    assert isinstance(ignores, dict)
    return {glob for glob, rules in ignores.items() if "TID251" in rules}


def test_every_private_module_is_banned_outside_its_package() -> None:
    tidy = _ruff()["flake8-tidy-imports"]
    assert isinstance(tidy, dict)
    banned = set(tidy["banned-api"])
    private = set(_private_modules())
    assert not private - banned, "add these private modules to banned-api in pyproject.toml"
    assert not banned - private, "these banned modules no longer exist: drop them from pyproject.toml"


def test_each_package_may_import_its_own_private_modules() -> None:
    wanted = {f"src/{owner.replace('.', '/')}/**" for owner in _private_modules().values()}
    package_globs = {glob for glob in _tid_ignored() if glob.startswith("src/") and glob.endswith("/**")}
    assert package_globs == wanted


def _imported(path: Path) -> set[str]:
    name = _module(path)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            out |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return out


def test_no_module_imports_another_packages_private_module() -> None:
    """What ruff cannot see: inside a package exempted for its own privates, another package's privates."""
    private = _private_modules()
    # Single files exempted in pyproject.toml (a rewrite in progress) are the only ones allowed through.
    exempt = {glob for glob in _tid_ignored() if glob.endswith(".py")}
    found = []
    for path in sorted((SRC / "aicenter").rglob("*.py")):
        if str(path.relative_to(ROOT)) in exempt:
            continue
        module = _module(path)
        for imported in _imported(path):
            parts = imported.split(".")
            owner = next(
                (private[".".join(parts[:i])] for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in private), None
            )
            if owner is not None and not (module == owner or module.startswith(owner + ".")):
                found.append(f"{module} imports {imported}")
    assert not found
