"""The layers: `sm120kit/plays/` composes, `sm120kit/ops/` operates. No module under ops/
imports another ops module (what an operation needs from another is passed in by the play, or
is a shared helper in a non-ops module named for its idea), and ops never import plays.
Function-level imports and ``import_module`` calls count (the graph of tests/test_imports.py)."""

from __future__ import annotations

from tests.test_imports import import_graph


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
