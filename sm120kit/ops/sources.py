"""`invoke sources.fetch` and `invoke sources.list`: the controller's source store from the
command line (`sm120kit.sources` does the work; this only picks recipes and prints)."""

from __future__ import annotations

from typing import Any

from .. import sources as src
from ..errors import RecipeError


def package_entries(
    package: str, recipes_dir: str | None = None, recipe: str | None = None
) -> list[src.SourceEntry]:
    """The source entries of `package` in every recipe (or only `recipe`), without repeats."""
    from ..recipes import load_recipes

    recipes = load_recipes(recipes_dir)
    if recipe and recipe not in recipes:
        raise RecipeError(f"--recipe {recipe}: no such recipe (have {', '.join(sorted(recipes))})")
    seen: dict[tuple[str, str, str], src.SourceEntry] = {}
    found = False
    for name in [recipe] if recipe else sorted(recipes):
        for pkg in recipes[name].packages:
            if pkg.name != package:
                continue
            found = True
            values = {"source": pkg.source, "dependencies": pkg.dependencies}
            if not src.is_managed(values):
                raise RecipeError(
                    f"--package {package}: recipe {name} lists no dependencies for it; only "
                    "packages with `dependencies` use the source store"
                )
            for entry in src.entries(package, values):
                seen.setdefault((entry.dir, entry.ref, entry.url), entry)
    if not found:
        raise RecipeError(f"--package {package}: no recipe has this package")
    return list(seen.values())


def _size(n: int) -> str:
    from ..cache.manage import human_size

    return str(human_size(n))


def fetch_command(
    c: Any,
    *,
    package: str,
    recipe: str | None,
    mirror: str | None,
    json_output: bool,
) -> None:
    """Fetch the package's source and dependencies into the store; print one row each."""
    from ..cli import settings, show_document

    conf = settings(c)
    store = src.store_dir(conf)
    wanted = package_entries(package, conf.get("recipes_dir"), recipe)
    mirror = mirror or src.mirror_setting(conf)
    rows = []
    for record, changed in src.fetch_all(store, wanted, mirror or None):
        rows.append({**record, "changed": changed})
    doc = {"store": str(store), "mirror": mirror or None, "package": package, "sources": rows}

    def render(console: Any, doc: dict[str, Any]) -> None:
        from rich.table import Table

        table = Table(title=f"{package} sources in {doc['store']}")
        for col in ("dir", "FetchContent", "ref", "digest", "size", "files", "from", "now"):
            table.add_column(col, overflow="fold")
        for r in doc["sources"]:
            table.add_row(
                r["dir"],
                r["fetchcontent"] or "(package)",
                r["ref"][:12],
                r["digest"][:16],
                _size(r["size"]),
                str(r["files"]),
                r["origin"] + (f" ({r['note']})" if r.get("note") else ""),
                "fetched" if r["changed"] else "stored",
            )
        console.print(table)

    show_document(c, doc, json_output, render)


def list_command(c: Any, *, json_output: bool) -> None:
    """Every stored source: package, dir, ref, digest, size, files, origin."""
    from ..cli import settings, show_document

    store = src.store_dir(settings(c))
    doc = {"store": str(store), "sources": src.list_store(store)}

    def render(console: Any, doc: dict[str, Any]) -> None:
        from rich.table import Table

        table = Table(title=f"source store {doc['store']}")
        for col in ("package", "dir", "ref", "digest", "size", "files", "from"):
            table.add_column(col, overflow="fold")
        for r in doc["sources"]:
            table.add_row(
                r["package"],
                r["dir"],
                r["ref"][:12],
                r["digest"][:16],
                _size(r["size"]),
                str(r["files"]),
                r["origin"] + (f" ({r['note']})" if r.get("note") else ""),
            )
        console.print(table)
        total = sum(r["size"] for r in doc["sources"])
        console.print(f"{len(doc['sources'])} trees, {_size(total)}")

    show_document(c, doc, json_output, render)
