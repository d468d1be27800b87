"""A package passed as its descriptor (#47 item 5): the registry is asked who a package is only
where the package enters a run, never by the layers it is passed down to.

The entry layer: the registry's own package (`sm120kit/packages/`: the descriptors and the
release data beside them), the recipe layer where a recipe's packages are read and resolved
(`recipes/files.py`, `recipes/model.py`: `PackageValues.descriptor`), the plays and tasks.py.
Everything below (ops/, builds/, toolchain/, cache/, ...) reads ``pkg.descriptor`` or takes a
descriptor as its argument. The check reads each module's AST: ``registry.descriptor(...)``
and ``registry.find(...)`` through any name bound to `sm120kit.packages.registry`, and the two
functions imported by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sm120kit"
REGISTRY = "sm120kit.packages.registry"
LOOKUPS = {"descriptor", "find"}

#: Where a package enters (paths relative to the repository; a trailing "/" is a folder).
ENTRY = (
    "sm120kit/packages/",
    "sm120kit/recipes/files.py",
    "sm120kit/recipes/model.py",
    "sm120kit/plays/",
    "tasks.py",
)


def _module(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom in `module` names."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def lookups(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, call) of each registry.descriptor / registry.find lookup in `source`, the text
    of module `module`."""
    tree = ast.parse(source)
    aliases: set[str] = set()  # names bound to the registry module
    direct: dict[str, str] = {}  # local name -> descriptor | find
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == REGISTRY and a.asname}
        elif isinstance(node, ast.ImportFrom):
            where = _absolute(module, is_package, node)
            for a in node.names:
                if f"{where}.{a.name}" == REGISTRY:
                    aliases.add(a.asname or a.name)
                elif where == REGISTRY and a.name in LOOKUPS:
                    direct[a.asname or a.name] = a.name
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Attribute) and fn.attr in LOOKUPS:
            if isinstance(fn.value, ast.Name) and fn.value.id in aliases:
                found.append((node.lineno, f"registry.{fn.attr}"))
        elif isinstance(fn, ast.Name) and fn.id in direct:
            found.append((node.lineno, f"registry.{direct[fn.id]}"))
    return sorted(found)


def test_lookup_finder() -> None:
    src = (
        "from ..packages import registry\n"
        "from ..packages.registry import find as f\n"
        "from ..cache import registry as stores\n"
        "registry.descriptor('a')\n"
        "f('b')\n"
        "stores.find('c')\n"
        "registry.kinds()\n"
    )
    assert lookups(src, "sm120kit.ops.x") == [(4, "registry.descriptor"), (5, "registry.find")]
    assert lookups("from . import registry\nregistry.find('x')\n", "sm120kit.packages.y") == [
        (2, "registry.find")
    ]
    assert lookups("from . import registry\nregistry.find('x')\n", "sm120kit.cache.y") == []


def test_only_the_entry_layer_asks_the_registry_who_a_package_is() -> None:
    files = [*sorted(PACKAGE.rglob("*.py")), REPO / "tasks.py"]
    offenders = []
    entered = []
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        found = lookups(path.read_text(encoding="utf-8"), _module(path), path.stem == "__init__")
        inside = any(rel.startswith(e) if e.endswith("/") else rel == e for e in ENTRY)
        (entered if inside else offenders).extend(f"{rel}:{line}: {call}" for line, call in found)
    assert not offenders, (
        "pass the package's descriptor (PackageValues.descriptor) instead of asking the "
        f"registry again: {offenders}"
    )
    # The one lookup a recipe package gets, where it is resolved.
    assert any(e.startswith("sm120kit/recipes/model.py:") for e in entered), entered


def test_the_cmake_check_is_asked_in_one_place() -> None:
    """`cmake_checked` (a package's CMake prerequisites and real configure) is asked once, where
    a build starts (`plays/build.py::ensure_package`); the steps after it are handed the answer
    (tests/fleet/test_cmake_check_once.py counts the calls of a real plan)."""
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                for call in ast.walk(node):
                    fn = call.func if isinstance(call, ast.Call) else None
                    name = getattr(fn, "id", None) or getattr(fn, "attr", None)
                    if name == "cmake_checked":
                        callers.append(f"{path.relative_to(REPO).as_posix()}::{node.name}")
    assert callers == ["sm120kit/plays/build.py::ensure_package"], callers
