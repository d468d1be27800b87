"""docs/architecture.md against the code: it stays a map (under 10 KB: the module inventory
is docs/modules.md, tests/rules/test_modules_doc.py), every module it names exists, and every
``module.py::name`` of its walk of a provision names a function or class defined there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

DOC = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "sm120kit"
#: Folders docs name that are an inventory's, not the code's.
NOT_CODE = {"group_vars/", "host_vars/"}
#: The map's budget: the layers, their rules and one walk; the inventory lives elsewhere.
MAX_BYTES = 10_000


def named_paths(doc: Path) -> list[str]:
    """Backticked names in `doc` that are modules (``*.py``) or package folders (``.../``)."""
    tokens = re.findall(r"`([^`\s]+)`", doc.read_text(encoding="utf-8"))
    paths = [t.split("::")[0] for t in tokens]
    return [t for t in paths if re.fullmatch(r"[\w/]+(\.py|/)", t) and t not in NOT_CODE]


def resolve(name: str) -> Path | None:
    """A named module or folder: from the repository root, else from sm120kit/."""
    for base in (REPO, PACKAGE):
        path = base / name
        if path.exists():
            return path.resolve()
    return None


def test_the_map_is_under_10_kb() -> None:
    size = len(DOC.read_bytes())
    assert size < MAX_BYTES, (
        f"docs/architecture.md is {size} bytes (limit {MAX_BYTES}): it is the map (layers, "
        "rules, one walk); put module detail in docs/modules.md"
    )


def test_every_named_module_exists() -> None:
    missing = [n for n in named_paths(DOC) if resolve(n) is None]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


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


def test_the_walk_goes_through_every_layer() -> None:
    """The walk starts at the task layer and ends at the report, through each layer between."""
    text = DOC.read_text(encoding="utf-8")
    walk = text[text.index("## One provision through the layers") :]
    modules = re.findall(r"`([\w/]+\.py)::\w+`", walk)
    for layer in (
        "tasks.py",
        "cli/",
        "inventory/",
        "runner/",
        "facts.py",
        "recipes/",
        "state.py",
        "plays/",
        "ops/",
        "runner/results.py",
        "output/",
    ):
        assert any(m.startswith(layer) for m in modules), layer
    assert modules[0] == "tasks.py" and modules[-1].startswith("output/")
