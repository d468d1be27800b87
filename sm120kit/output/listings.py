"""Host-less documents for people: the recipe catalog, the wheel cache, the source store.

Each function draws one command's document (the same dict --json prints) on a console.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..cache.manage import human_age, human_size


def recipes_table(console: Console, doc: dict[str, Any]) -> None:
    """`invoke recipes` without --host: every recipe (and the one a --driver selects)."""
    table = Table(title="recipes", show_lines=True)
    for col in ("recipe", "drivers", "cuda (by driver)", "torch", "arch", "packages"):
        table.add_column(col, overflow="fold")
    for name, r in doc["recipes"].items():
        choices = "\n".join(
            f"{c['version']} ({c['method']}) for {c['drivers']}" for c in r["cuda_choices"]
        )
        table.add_row(
            f"{name}\n[dim]{r['file']}[/]",
            r["drivers"],
            f"{r['cuda']} ({r['cuda_method']})" + (f"\n{choices}" if choices else ""),
            f"{r['torch']}\n[dim]{r['torch_index']}[/]",
            ", ".join(r["arch"]),
            "\n".join(r["packages"]),
        )
    console.print(table)
    if "selected" in doc:
        sel = doc["selected"]
        console.print(
            f"driver {sel['driver']}: [bold]{sel['recipe']}[/], CUDA {sel['cuda']} — {sel['reason']}",
            highlight=False,
        )


def _table(title: str, columns: list[str]) -> Table:
    """A table with these folding columns."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def cache_list(console: Console, doc: dict[str, Any]) -> None:
    """`invoke cache.list`: one row per entry and store, then the count and total size."""
    cols = ["package", "version", "key", "arch", "CUDA", "torch", "size", "age", "hits"]
    table = _table(f"wheel cache ({', '.join(doc['stores'])})", [*cols, "store"])
    for r in doc["entries"]:
        table.add_row(
            r["package"],
            r["version"],
            r["key"],
            r["arch"] or "-",
            r["cuda"] or "-",
            r["torch"] or "-",
            human_size(r["size"]),
            human_age(r["age"]),
            str(r["hits"]),
            r["store"],
        )
    console.print(table)
    total = sum(r["size"] for r in doc["entries"])
    console.print(f"{len(doc['entries'])} entries, {human_size(total)}")


def cache_verify(console: Console, doc: dict[str, Any]) -> None:
    """`invoke cache.verify`: each entry's status, then how many were ok and corrupt."""
    table = _table("wheel cache verify", ["store", "key", "status", "reason"])
    for r in doc["entries"]:
        style = "green" if r["status"] == "ok" else "red"
        table.add_row(r["store"], r["key"][:12], f"[{style}]{r['status']}[/]", r["reason"])
    console.print(table)
    console.print(f"{doc['ok']} ok, {doc['corrupt']} corrupt (quarantined)")


def cache_prune(console: Console, doc: dict[str, Any]) -> None:
    """`invoke cache.prune`: each removed entry, then how much was freed."""
    table = _table("wheel cache prune", ["store", "package", "version", "key", "size"])
    for r in doc["removed"]:
        what = "(killed put)" if r["incomplete"] else r["package"]
        table.add_row(r["store"], what, r["version"], r["key"][:12], human_size(r["size"]))
    console.print(table)
    console.print(f"removed {len(doc['removed'])}, freed {human_size(doc['freed_bytes'])}")


def cache_export(console: Console, doc: dict[str, Any]) -> None:
    """`invoke cache.export`: each exported wheel, the skipped ones, and the pip line to use."""
    table = _table(f"exported to {doc['directory']}", ["package", "version", "file", "key"])
    for r in doc["exported"]:
        table.add_row(r["package"], r["version"], r["filename"], r["key"][:12])
    console.print(table)
    for r in doc["skipped"]:
        console.print(f"skipped {r['filename']} ({r['key'][:12]}): a newer one has that name")
    console.print(f"install offline: pip install --no-index --find-links {doc['directory']} PKG")


def cache_import(console: Console, doc: dict[str, Any]) -> None:
    """`invoke cache.import`: counts per outcome, then each corrupt file."""
    console.print(
        f"{doc['store']}: imported {len(doc['imported'])}, already present "
        f"{len(doc['present'])}, corrupt {len(doc['corrupt'])}"
    )
    for name in doc["corrupt"]:
        console.print(f"[red]corrupt (not imported):[/] {name}")


def sources_fetch(console: Console, doc: dict[str, Any]) -> None:
    """`invoke sources.fetch`: one row per source tree, fetched now or already stored."""
    table = Table(title=f"{doc['package']} sources in {doc['store']}")
    for col in ("dir", "FetchContent", "ref", "digest", "size", "files", "from", "now"):
        table.add_column(col, overflow="fold")
    for r in doc["sources"]:
        table.add_row(
            r["dir"],
            r["fetchcontent"] or "(package)",
            r["ref"][:12],
            r["digest"][:16],
            human_size(r["size"]),
            str(r["files"]),
            r["origin"] + (f" ({r['note']})" if r.get("note") else ""),
            "fetched" if r["changed"] else "stored",
        )
    console.print(table)


def sources_list(console: Console, doc: dict[str, Any]) -> None:
    """`invoke sources.list`: every stored tree, then the count and total size."""
    table = Table(title=f"source store {doc['store']}")
    for col in ("package", "dir", "ref", "digest", "size", "files", "from"):
        table.add_column(col, overflow="fold")
    for r in doc["sources"]:
        table.add_row(
            r["package"],
            r["dir"],
            r["ref"][:12],
            r["digest"][:16],
            human_size(r["size"]),
            str(r["files"]),
            r["origin"] + (f" ({r['note']})" if r.get("note") else ""),
        )
    console.print(table)
    total = sum(r["size"] for r in doc["sources"])
    console.print(f"{len(doc['sources'])} trees, {human_size(total)}")
