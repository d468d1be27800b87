"""No operation reads a recipe value by a dotted string key: they read the typed `Resolved`
(sm120kit/recipes/resolved.py: ``state.resolved.torch.version``, ``.cuda.version.xy``,
``.target.arch``, ``.packages[name]``), which mypy checks field by field.

A pure scan of the source (``ast``, nothing imported or run). Outside the recipe-resolution
modules it refuses:

- any use of ``<...>.resolved.values`` or ``resolved.values`` (the flat dict, for plan's rows
  only: reading it, or aliasing it, is the untyped path);
- a subscript or ``.get`` of a dotted recipe key (``values.get("torch.version")``,
  ``v["cuda.method"]``, ``x.get(f"packages.{p}.needs_cuda_torch")``) on anything but a
  ``sources`` mapping: where a value came from is keyed by the override scheme's names,
  which is what plan's provenance table shows.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The modules that resolve a recipe: they work on the flat keys (the override scheme's names).
RESOLUTION = {
    "sm120kit/recipes/select.py",
    "sm120kit/recipes/model.py",
    "sm120kit/recipes/checks.py",
    "sm120kit/recipes/files.py",
    "sm120kit/recipes/resolved.py",
}
#: The first part of every dotted key `ResolvedRecipe.values` has.
ROOTS = ("cuda.", "torch.", "target.", "stack.", "packages.")


def _sources() -> list[Path]:
    files = sorted((ROOT / "sm120kit").rglob("*.py")) + [ROOT / "tasks.py"]
    return [p for p in files if p.relative_to(ROOT).as_posix() not in RESOLUTION]


def _key_text(node: ast.expr) -> str | None:
    """The literal (or an f-string's leading literal) of a key expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return None


def _is_sources(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name in ("sources", "src")


def dotted_reads(text: str, name: str = "<text>") -> list[str]:
    """``line: what`` for each forbidden read in one module's source."""
    found = []
    for node in ast.walk(ast.parse(text, name)):
        if isinstance(node, ast.Attribute) and node.attr == "values":
            inner = node.value
            owner = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", "")
            if owner == "resolved":
                found.append(f"{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
        key: ast.expr | None = None
        target: ast.expr | None = None
        if isinstance(node, ast.Subscript):
            key, target = node.slice, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            key, target = node.args[0], node.func.value
        if key is None or target is None or _is_sources(target):
            continue
        text_key = _key_text(key)
        if text_key is not None and text_key.startswith(ROOTS):
            found.append(f"{getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize(
    ("code", "bad"),
    [
        ('x = state.resolved.values.get("torch.version")', True),
        ("v = state.resolved.values", True),
        ('version = v["cuda.version"]', True),
        ('ok = values.get(f"packages.{p}.needs_cuda_torch", True)', True),
        ('where = state.resolved.sources.get("torch.cuda")', False),
        ('where = src.get("cuda.sha256", "?")', False),
        ("x = state.resolved.torch.version", False),
        ('x = facts.get("gpu")', False),
        ('x = doc["packages"]', False),
    ],
)
def test_the_scan_tells_dotted_reads(code: str, bad: bool) -> None:
    assert bool(dotted_reads(code)) is bad


def test_no_module_reads_a_dotted_recipe_key() -> None:
    found = {
        p.relative_to(ROOT).as_posix(): hits
        for p in _sources()
        if (hits := dotted_reads(p.read_text(encoding="utf-8"), str(p)))
    }
    assert found == {}, "read the typed Resolved (sm120kit/recipes/resolved.py) instead"
