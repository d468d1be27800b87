"""docs/architecture.md against the code: every module it names exists, and every module of
sm120kit is named (by its path under sm120kit/, in backticks), so the map cannot go stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "sm120kit"
#: Scripts run inside the target interpreter: data the probe carries, named by their folder.
IN_TARGET = PACKAGE / "remote" / "lib" / "in_target"
#: Folders the doc names that are an inventory's, not the code's.
NOT_CODE = {"group_vars/", "host_vars/"}


def named_paths() -> list[str]:
    """Backticked names that are modules (``*.py``) or package folders (``.../``)."""
    tokens = re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8"))
    return [t for t in tokens if re.fullmatch(r"[\w/]+(\.py|/)", t) and t not in NOT_CODE]


def resolve(name: str) -> Path | None:
    """A named module or folder: from the repository root, else from sm120kit/."""
    for base in (REPO, PACKAGE):
        path = base / name
        if path.exists():
            return path.resolve()
    return None


def test_every_named_module_exists() -> None:
    missing = [n for n in named_paths() if resolve(n) is None]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_module_is_named() -> None:
    named = {p for p in (resolve(n) for n in named_paths()) if p is not None}
    modules = [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "__init__.py" and IN_TARGET not in p.parents
    ]
    unnamed = [str(p.relative_to(PACKAGE)) for p in modules if p.resolve() not in named]
    assert not unnamed, f"docs/architecture.md does not name: {unnamed}"
    assert IN_TARGET.resolve() in named


def walk_names() -> list[tuple[str, str]]:
    """(module, function or class) of each ``module.py::name`` the doc names (its walk)."""
    return re.findall(r"`([\w/]+\.py)::(\w+)`", DOC.read_text(encoding="utf-8"))


def test_the_walk_names_what_exists() -> None:
    pairs = walk_names()
    assert len(pairs) >= 15 and ("plays/provision.py", "plan_or_provision_op") in pairs
    missing = []
    for module, name in pairs:
        path = resolve(module)
        tree = ast.parse(path.read_text(encoding="utf-8")) if path else None
        defined = {
            n.name
            for n in (tree.body if tree else [])
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))
        }
        if name not in defined:
            missing.append(f"{module}::{name}")
    assert not missing, f"docs/architecture.md's walk names what does not exist: {missing}"
