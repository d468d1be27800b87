"""The task layer of `invoke sources.fetch` and `invoke sources.list`: the controller's source
store from the command line (`sm120kit.builds.sources` does the work; this picks the recipes' entries
for --package/--recipe, output.listings prints)."""

from __future__ import annotations

import os
from typing import Any

from ..builds import sources as src
from ..errors import RecipeError
from ..output import listings
from ..output.console import show_document
from ..recipes.select import load_recipes
from .core import settings


def package_entries(
    package: str, recipes_dir: str | None = None, recipe: str | None = None
) -> list[src.SourceEntry]:
    """The source entries of `package` in every recipe (or only `recipe`), without repeats."""

    recipes = load_recipes(recipes_dir)
    if recipe and recipe not in recipes:
        raise RecipeError(f"--recipe {recipe}: no such recipe (have {', '.join(sorted(recipes))})")
    seen: dict[tuple[str, str, str], src.SourceEntry] = {}
    found = False
    unmanaged: list[str] = []
    for name in [recipe] if recipe else sorted(recipes):
        for pkg in recipes[name].packages:
            if pkg.name != package:
                continue
            found = True
            if not src.is_managed(pkg):
                # Across recipes, an entry without dependencies (a stack's release whose
                # FetchContent pins are not read yet) does not stop the others' fetch.
                unmanaged.append(f"{name} ({pkg.name} {pkg.version})")
                continue
            for entry in src.entries(package, pkg):
                seen.setdefault((entry.dir, entry.ref, entry.url), entry)
    if not found:
        raise RecipeError(f"--package {package}: no recipe has this package")
    if not seen:
        raise RecipeError(
            f"--package {package}: recipe {unmanaged[0].split(' ')[0]} lists no dependencies "
            "for it; only packages with `dependencies` use the source store"
        )
    return list(seen.values())


def fetch_command(
    c: Any,
    *,
    package: str,
    recipe: str | None,
    mirror: str | None,
    json_output: bool,
    refresh: bool = False,
) -> None:
    """Fetch the package's source and dependencies into the store; print one row each.

    `refresh` re-reads entries already stored and replaces those whose tree changed."""
    conf = settings(c)
    store = src.store_dir(conf)
    wanted = package_entries(package, conf.get("recipes_dir"), recipe)
    given = mirror
    mirror = mirror or src.mirror_setting(conf)
    if mirror and not os.path.isdir(os.path.expanduser(mirror)):
        what = "--mirror" if given else "setting sources_mirror"
        raise RecipeError(f"{what} {mirror}: not a directory (it should hold <dir>/ per source)")
    rows = []
    for record, changed in src.fetch_all(store, wanted, mirror or None, refresh):
        rows.append({**record, "changed": changed})
    doc = {"store": str(store), "mirror": mirror or None, "package": package, "sources": rows}

    show_document(doc, json_output, listings.sources_fetch)


def list_command(c: Any, *, json_output: bool) -> None:
    """Every stored source: package, dir, ref, digest, size, files, origin."""
    store = src.store_dir(settings(c))
    doc = {"store": str(store), "sources": src.list_store(store)}

    show_document(doc, json_output, listings.sources_list)
