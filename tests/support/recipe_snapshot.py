"""What every shipped recipe resolves to, as plain JSON: the loaded recipe (package entries,
``[stack]``, the locks it picked) and, per driver, the provenance rows `plan` prints
(key, value, source) or the one-line refusal. tests/unit/test_recipe_shared.py compares it with
tests/data/recipe_resolution.json, written before the recipes shared their pins and stacks
(``python3 -m tests.support.recipe_snapshot > tests/data/recipe_resolution.json``).

Packages a recipe does not write but takes from its stack's lock (``PackageSpec.derived``,
tests/fleet/test_stack_kernel_packages.py) came later and are left out: the snapshot is of what the
recipe files say."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from sm120kit.errors import RecipeError
from sm120kit.inventory.host import Host
from sm120kit.recipes.select import load_recipes, resolve_for_host

REPO = Path(__file__).resolve().parents[2]

#: One driver per toolkit choice of each branch, plus branch edges and the refused ones.
DRIVERS = (
    "560.35.03",
    "570.26",
    "570.124.06",
    "570.172.08",
    "575.51.03",
    "575.64.05",
    "580.65.06",
    "580.82.07",
    "580.95.05",
    "590.44.01",
    "595.45.04",
)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _own(packages: list[Any]) -> list[Any]:
    """The recipe's own entries, as the snapshot recorded them (no `derived` field)."""
    out = []
    for p in packages:
        if not p.derived:
            doc = _plain(p)
            doc.pop("derived")
            out.append(doc)
    return out


def _rows(res: Any) -> list[Any]:
    derived = {p.derived for p in res.recipe.packages if p.derived}
    return [list(_plain(row)) for row in res.rows() if row[2] not in derived]


def snapshot(recipes_dir: Path | None = None) -> dict[str, Any]:
    """``{"recipes": {name: loaded}, "resolved": {driver: rows or error}}``."""
    recipes = load_recipes(recipes_dir or REPO / "recipes")
    loaded = {
        name: {
            "packages": _own(r.packages),
            # The engines a stack offers (`StackSpec.engines`) came later, like derived packages.
            "stack": {k: v for k, v in (_plain(r.stack) or {}).items() if k != "engines"}
            if r.stack is not None
            else _plain(r.stack),
            "locks": {
                py: [str(Path(lk.path).relative_to(REPO)), lk.top, lk.torch]
                for py, lk in sorted(r.locks.items())
            },
            "torch": _plain(r.torch),
        }
        for name, r in sorted(recipes.items())
    }
    resolved: dict[str, Any] = {}
    for driver in DRIVERS:
        host = Host("box", vars={"target_driver": driver, "target_arch": "12.0"})
        try:
            res = resolve_for_host(recipes, host, None)
        except RecipeError as exc:
            resolved[driver] = str(exc)
            continue
        own = {p.name for p in res.recipe.packages if not p.derived}
        resolved[driver] = {
            "rows": _rows(res),
            "problems": _plain({k: v for k, v in res.problems.items() if k in own}),
            "notes": list(res.notes),
        }
    for name in sorted(recipes):
        host = Host("box", vars={"target_arch": "12.0"})
        res = resolve_for_host(recipes, host, None, forced=name)
        resolved[f"--recipe {name}"] = {"rows": _rows(res)}
    return {"recipes": loaded, "resolved": resolved}


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
