"""The task layer of `invoke lock.draft`: a lock drafted from a top-level requirement, and the
recipe's ``[stack]`` edit, for a person to review (`sm120kit.lock_draft` does the work;
output.stack prints)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet

from . import drivers as drv
from .cli import settings
from .errors import RecipeError
from .lock import dump_lock, locks_root
from .lock_draft import Target, default_lock_name, draft_lock, review, stack_table
from .output import stack as stack_out
from .output.console import show_document


def recipe_floor(drivers: SpecifierSet) -> str:
    """The lowest driver a recipe's range admits (its ``>=`` bound), or SM120's minimum."""
    lows = [s.version for s in drivers if s.operator == ">="]
    if not lows:
        return drv.SM120_MIN_DRIVER
    return max(lows, key=drv.parse_driver_version)


def draft_command(c: Any, **f: Any) -> None:
    """Resolve --top, verify its compiled wheels for the recipe's lowest driver and its arch,
    write the lock, print what to review and the [stack] table."""
    from .recipes import default_recipes_dir, load_recipes

    top = f.get("top")
    if not top:
        raise RecipeError("--top is required (e.g. --top sglang==0.5.23)")
    conf = settings(c)
    recipe = None
    if f.get("recipe"):
        recipes = load_recipes(conf.get("recipes_dir"))
        recipe = recipes.get(f["recipe"])
        if recipe is None:
            raise RecipeError(
                f"--recipe {f['recipe']}: no such recipe (have {', '.join(sorted(recipes))})"
            )
    python = f.get("lock_python") or (recipe.python if recipe else "3.11")
    platform = f.get("platform") or "manylinux_2_34_x86_64"
    driver = f.get("driver") or (recipe_floor(recipe.drivers) if recipe else None)
    arch = f.get("arch") or (recipe.arch[0] if recipe else None)
    target = None
    if driver and arch:
        nfa: dict[str, str] = {}
        if recipe is not None:
            for pkg in recipe.packages:
                nfa.update(pkg.not_for_arch)
            if recipe.stack is not None:
                nfa.update(recipe.stack.not_for_arch)
        loaders = recipe.stack.loaders if recipe is not None and recipe.stack else {}
        target = Target(str(driver), str(arch), python, not_for_arch=nfa, loaders=loaders)
    name = f.get("out") or default_lock_name(top, python, platform)
    root = locks_root(Path(conf.get("recipes_dir") or default_recipes_dir()).resolve().parent)
    out = Path(name) if os.path.isabs(name) else root / name
    quiet = bool(f.get("json"))
    lock = draft_lock(
        top,
        python=python,
        platform=platform,
        target=target,
        progress=None if quiet else stack_out.progress_line,
        index=f.get("index"),
    )
    header = [
        f"Lock of {top} for Python {python} on {platform}: drafted by `invoke lock.draft"
        f" --top {top}{' --recipe ' + recipe.name if recipe else ''}` from {lock.resolver}.",
        "Do not edit by hand: review it (verdicts, notes) and draft again to change it.",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(dump_lock(lock, header), encoding="utf-8")
    os.replace(tmp, out)
    sources = {}
    if recipe is not None:
        for pkg in recipe.packages:
            sources[pkg.name.lower().replace("_", "-")] = f"{pkg.name} {pkg.version}"
    lines = review(lock, recipe.torch.version if recipe else None, sources)
    reason = f"{top} for {recipe.name}" if recipe else top
    doc = {
        "lock": str(out),
        "top": top,
        "python": python,
        "platform": platform,
        "torch": lock.torch,
        "torch_cuda": lock.torch_cuda,
        "target": lock.target,
        "packages": len(lock.packages),
        "compiled": sum(1 for e in lock.packages if e.compiled),
        "bytes": sum(e.size or 0 for e in lock.packages),
        "review": lines,
        "stack": stack_table(lock, name if not os.path.isabs(name) else str(out), reason),
        "recipe": recipe.name if recipe else None,
    }
    show_document(doc, bool(f.get("json")), stack_out.draft_report)


def convert_command(c: Any, **f: Any) -> None:
    """Convert the earlier-format lock at --path to PEP 751 (beside ``locks/``, or --out)."""
    from .lock_convert import convert_lock

    if not f.get("path"):
        raise RecipeError("--path is required (an earlier-format lock, locks/<name>.toml)")
    src = Path(f["path"])
    out = convert_lock(src, Path(f["out"]) if f.get("out") else None)
    doc = {"converted": str(src), "lock": str(out)}
    show_document(doc, bool(f.get("json")), _converted)


def _converted(console: Any, doc: dict[str, Any]) -> None:
    console.print(f"wrote {doc['lock']} from {doc['converted']}", markup=False)
