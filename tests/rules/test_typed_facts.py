"""Typed facts (#47 item 4): a host's facts are parsed once (`sm120kit/host_facts.py::HostFacts.
from_json`) and read as typed fields (``state.facts.gpu.present``, ``state.facts.arch``).

No module outside the parser reads a key of the probe's raw document through ``facts.json``
(``state.facts.json["gpu"]``, ``state.facts.json.get("os")``): zero, enforced. What is left is
the raw document handed whole to the pure rules still written against the probe's JSON
(`python_choice.pick_python`, `toolchain.toolkit_spec.choose_compiler`, `builds.knobs.
resolve_knobs`, ...): counted per module, and the count may only fall. Lower `HANDED_ON` when
a rule moves to the typed facts; never raise it (extend `HostFacts` instead).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sm120kit"
PARSER = "sm120kit/host_facts.py"

#: Modules that still hand ``<x>.facts.json`` whole to a raw-JSON rule, and how many times.
HANDED_ON = {
    "sm120kit/builds/inputs.py": 2,
    "sm120kit/ops/prerequisites.py": 2,
    "sm120kit/ops/pyenv.py": 1,
    "sm120kit/ops/python.py": 3,
    "sm120kit/ops/toolkit.py": 3,
    "sm120kit/plays/smoke.py": 6,
    "sm120kit/plays/stack.py": 1,
    "sm120kit/python_choice.py": 2,
}


def _is_facts_json(node: ast.AST) -> bool:
    """``<x>.facts.json`` or ``facts.json`` (the HostFacts' raw document)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "json"):
        return False
    value = node.value
    return (isinstance(value, ast.Attribute) and value.attr == "facts") or (
        isinstance(value, ast.Name) and value.id == "facts"
    )


def facts_json_uses(source: str) -> tuple[list[int], list[int]]:
    """(lines reading a key of ``facts.json`` — a subscript or a method call on it —, lines
    handing ``facts.json`` on whole)."""
    reads, handed = [], []
    tree = ast.parse(source)
    inner: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_facts_json(node.value):
            reads.append(node.lineno)
            inner.add(id(node.value))
        elif isinstance(node, ast.Attribute) and _is_facts_json(node.value):
            reads.append(node.lineno)  # facts.json.get(...), .items(), ...
            inner.add(id(node.value))
    for node in ast.walk(tree):
        if _is_facts_json(node) and id(node) not in inner:
            handed.append(node.lineno)
    return sorted(reads), sorted(handed)


def test_finder() -> None:
    src = (
        "a = state.facts.json['gpu']\n"
        "b = ctx.state.facts.json.get('os')\n"
        "rule(state.facts.json, 1)\n"
        "c = state.facts.arch\n"
    )
    assert facts_json_uses(src) == ([1, 2], [3])


def test_no_module_reads_the_raw_facts_and_handing_them_on_only_falls() -> None:
    reads: list[str] = []
    handed: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == PARSER:
            continue
        got_reads, got_handed = facts_json_uses(path.read_text(encoding="utf-8"))
        reads += [f"{rel}:{line}" for line in got_reads]
        handed[rel] += len(got_handed)
    assert not reads, f"read the typed field (extend HostFacts.from_json if missing): {reads}"
    over = {m: n for m, n in handed.items() if n > HANDED_ON.get(m, 0)}
    assert not over, f"new raw facts handed on (pass HostFacts or its field): {over}"
