"""The layers: `sm120kit/plays/` composes, `sm120kit/ops/` operates. No module under ops/
imports another ops module (what an operation needs from another is passed in by the play, or
is a shared helper in a non-ops module named for its idea), and ops never import plays.
Function-level imports and ``import_module`` calls count (the graph of tests/rules/test_imports.py)."""

from __future__ import annotations

import ast

from tests.rules.test_imports import PACKAGE, import_graph

#: The only imports a controller-side function may make: optional dependencies, absent where
#: their extra is not installed (pyproject.toml [project.optional-dependencies]).
OPTIONAL_IMPORTS = {
    "boto3": "the s3 extra: the team's S3 wheel store and compile cache",
    "botocore": "the s3 extra (boto3's own dependency)",
}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_no_ops_module_imports_another_or_a_play() -> None:
    graph = import_graph()
    ops = {m for m in graph if _under(m, "sm120kit.ops")}
    assert {"sm120kit.ops.toolkit", "sm120kit.ops.pyenv", "sm120kit.ops.compile"} <= ops
    offenders = {
        m: sorted(e for e in graph[m] if _under(e, "sm120kit.ops") or _under(e, "sm120kit.plays"))
        for m in ops
    }
    assert not {m: e for m, e in offenders.items() if e}


def test_every_task_flow_is_a_play() -> None:
    """The entry points tasks.py calls for host work live in plays/."""
    graph = import_graph()
    plays = {m for m in graph if _under(m, "sm120kit.plays")}
    for flow in ("plan", "provision", "build", "stack", "smoke", "preflight", "serve_check"):
        assert f"sm120kit.plays.{flow}" in plays
    assert graph["sm120kit.plays.provision"] & {m for m in graph if _under(m, "sm120kit.ops")}


def function_level_imports(source: str) -> list[tuple[int, str]]:
    """(line, top-level module) of each import made inside a function."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found += [(node.lineno, a.name.split(".")[0]) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    mod = "." if node.level else (node.module or "").split(".")[0]
                    found.append((node.lineno, mod))
    return sorted(set(found))


def test_function_level_imports_finder() -> None:
    src = "import os\ndef f():\n    import boto3\n    from . import x\n    from a.b import c\n"
    assert function_level_imports(src) == [(3, "boto3"), (4, "."), (5, "a")]


def test_no_function_level_import_on_the_controller_side() -> None:
    """Imports at module top, so the import graph is what the file says; remote/ scripts run
    on hosts (stdlib only, Python 3.8) and are exempt."""
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line}: {mod}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "remote" not in path.relative_to(PACKAGE).parts
        for line, mod in function_level_imports(path.read_text(encoding="utf-8"))
        if mod not in OPTIONAL_IMPORTS
    ]
    assert not offenders, offenders


#: The lower layers: what plays and operations build on (records, rules, parsing, output). They
#: never import an operation or a play, so reading a recipe, a build's inputs or a report runs
#: no host work and cannot cycle back up.
LOWER = ("sm120kit.output", "sm120kit.recipes", "sm120kit.facts", "sm120kit.builds")
UPPER = ("sm120kit.plays", "sm120kit.ops")


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each lower-layer module's imports of plays/ or ops/ (empty: none)."""
    return {
        m: sorted(e for e in edges if any(_under(e, p) for p in UPPER))
        for m, edges in graph.items()
        if any(_under(m, p) for p in LOWER) and any(any(_under(e, p) for p in UPPER) for e in edges)
    }


def test_upward_imports_finder() -> None:
    graph = {
        "sm120kit.output.checks": {"sm120kit.plays.smoke", "sm120kit.smoke.verdicts"},
        "sm120kit.facts": {"sm120kit.runner.pool"},
        "sm120kit.builds.x": {"sm120kit.ops.compile"},
        "sm120kit.plays.smoke": {"sm120kit.ops.pyenv"},
        "sm120kit.factsheet": {"sm120kit.plays.plan"},  # not sm120kit.facts
    }
    assert upward_imports(graph) == {
        "sm120kit.output.checks": ["sm120kit.plays.smoke"],
        "sm120kit.builds.x": ["sm120kit.ops.compile"],
    }


def test_lower_layers_never_import_plays_or_ops() -> None:
    """output/, recipes/, facts and builds/ import no play and no operation (function-level
    imports and ``import_module`` count)."""
    graph = import_graph()
    assert {"sm120kit.output.checks", "sm120kit.recipes.select", "sm120kit.facts"} <= set(graph)
    assert upward_imports(graph) == {}
