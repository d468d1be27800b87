"""docs/modules.md, the module inventory, against the code: every module of sm120kit is
named there (by its path under sm120kit/, in backticks), and every module it names exists,
so the inventory cannot go stale. docs/architecture.md is the map and names only layers."""

from __future__ import annotations

from tests.conftest import REPO
from tests.rules.test_architecture_doc import PACKAGE, named_paths, resolve

DOC = REPO / "docs" / "modules.md"
#: Scripts run inside the target interpreter: data the probe carries, named by their folder.
IN_TARGET = PACKAGE / "remote" / "lib" / "in_target"


def test_every_named_module_exists() -> None:
    missing = [n for n in named_paths(DOC) if resolve(n) is None]
    assert not missing, f"docs/modules.md names modules that do not exist: {missing}"


def test_every_module_is_named() -> None:
    named = {p for p in (resolve(n) for n in named_paths(DOC)) if p is not None}
    modules = [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "__init__.py" and IN_TARGET not in p.parents
    ]
    unnamed = [str(p.relative_to(PACKAGE)) for p in modules if p.resolve() not in named]
    assert not unnamed, (
        f"docs/modules.md does not name: {unnamed} (add each to the section of its stage)"
    )
    assert IN_TARGET.resolve() in named
