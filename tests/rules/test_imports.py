"""Every sm120kit module imports on its own (in a process where no other sm120kit module is
loaded), and sm120kit's modules import each other
without cycles (function-level imports included, so a lazy import cannot hide one, and imports
by name through ``importlib.import_module``: a registry that loads its plugins by name and a
plugin that imports the registry are a cycle at run time)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "sm120kit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: Scripts the extension probe runs inside the target interpreter (with its ARGS and helpers
#: in scope), carried as data by the hosts' bundle: files, not importable modules.
SCRIPTS = PACKAGE / "remote" / "lib" / "in_target"

MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if SCRIPTS not in p.parents}


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The sm120kit modules an import statement names (``from pkg import mod`` names pkg.mod,
    ``from mod import name`` names mod)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        names = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            names.append(sub if sub in MODULES else base)
    return [n for n in names if n in MODULES]


def _is_import_module(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id == "import_module") or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )


def _by_name(call: ast.Call, tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """The sm120kit modules an ``import_module(...)`` call may load: its argument when it is
    a string; else every module name written as a string in the calling module (a table such
    as ``BUILTIN_MODULES``), and for ``f"{__name__}.{x}"`` every submodule of the package."""
    arg = call.args[0] if call.args else None
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value} & MODULES.keys()
    found = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in MODULES
    }
    if is_package and isinstance(arg, ast.JoinedStr) and "__name__" in ast.unparse(arg):
        found |= {m for m in MODULES if m.rpartition(".")[0] == name}
    return found


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the sm120kit modules it imports anywhere but under ``if TYPE_CHECKING:``,
    with ``import ...`` statements and ``import_module`` calls alike."""
    graph: dict[str, set[str]] = {}
    for name, path in (modules or MODULES).items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"

        def by_name(
            call: ast.Call, tree: ast.AST = tree, name: str = name, pkg: bool = is_package
        ) -> set[str]:
            return _by_name(call, tree, name, pkg)

        def visit(node: ast.AST, package: str = package, edges: set[str] = edges) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for other in child.orelse:
                        visit(other)
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    edges.update(_imported(child, package))
                if isinstance(child, ast.Call) and _is_import_module(child):
                    edges.update(by_name(child))
                visit(child)

        visit(tree)
        # A submodule's import of its own package is implied by Python; it is no edge here.
        graph[name] = {e for e in edges if e != name and not name.startswith(e + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "sm120kit.cache.store" in graph and graph["sm120kit.cache.sftp"]
    assert find_cycle(graph) is None


def test_import_module_by_name_is_an_edge(tmp_path: Path) -> None:
    """A registry that loads a plugin by name, from a table or a literal, and a plugin that
    imports the registry: the cycle the statement-only graph missed (knobs -> packages.registry
    -> import_module("...sgl_kernel") -> knobs, before Knobs moved to packages/base.py)."""
    registry = tmp_path / "registry.py"
    registry.write_text(
        "from importlib import import_module\n"
        "PLUGINS = ('sm120kit.builds.knobs',)\n"
        "def load():\n"
        "    return [import_module(m) for m in PLUGINS]\n"
    )
    literal = tmp_path / "literal.py"
    literal.write_text("import importlib\nimportlib.import_module('sm120kit.builds.knobs')\n")
    graph = import_graph({"fake.registry": registry, "fake.literal": literal})
    assert graph == {
        "fake.registry": {"sm120kit.builds.knobs"},
        "fake.literal": {"sm120kit.builds.knobs"},
    }
    whole = import_graph()
    whole["sm120kit.builds.knobs"].add("fake.registry")
    whole["fake.registry"] = {"sm120kit.builds.knobs"}
    assert find_cycle(whole) == ["fake.registry", "sm120kit.builds.knobs", "fake.registry"]
    # The real registries' edges are seen: both load their plugins by name.
    assert "sm120kit.packages.sgl_kernel" in whole["sm120kit.packages.registry"]
    assert "sm120kit.cache.sftp" in whole["sm120kit.cache.registry"]


def test_cycle_finder_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


#: Run in one fresh interpreter: third-party libraries load once, then each sm120kit module is
#: imported in its own forked child, which starts with no sm120kit module loaded.
FORK_EACH = r"""
import importlib, json, os, sys, traceback
for lib in ("fabric", "invoke", "jinja2", "packaging", "paramiko", "rich", "tenacity", "yaml"):
    try:
        importlib.import_module(lib)
    except ImportError:
        pass
assert not [m for m in sys.modules if m.split(".")[0] == "sm120kit"]
failed = {}
for name in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(name)
            os._exit(0)
        except BaseException:
            os.write(write, traceback.format_exc()[-600:].encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        err = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        failed[name] = err or "exit status %d" % status
print(json.dumps(failed))
"""


def test_every_module_imports_alone() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FORK_EACH, json.dumps(sorted(MODULES))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{name}: {err}" for name, err in failed.items())


def test_only_the_task_layer_imports_it() -> None:
    """Data flows one way: the library never reaches back into the task layer (cli/), so
    every operation stays callable without invoke's context."""
    graph = import_graph()
    task_layer = {m for m in graph if m == "sm120kit.cli" or m.startswith("sm120kit.cli.")}
    assert {"sm120kit.cli.core", "sm120kit.cli.cache", "sm120kit.cli.sources"} <= task_layer
    offenders = {m: sorted(e & task_layer) for m, e in graph.items() if m not in task_layer}
    assert not {m: e for m, e in offenders.items() if e}
