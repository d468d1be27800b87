"""The task layer of `invoke cache.*`: settings in, a document from `sm120kit.cache.commands`,
a table or JSON out, and the exit status (2 when an entry was corrupt)."""

from __future__ import annotations

from typing import Any

from invoke.exceptions import Exit
from rich.table import Table

from .cache import commands, manage
from .cli import EXIT_HOST_FAILED, settings, show_document


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def list_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.list`: one row per entry and store (JSON: see commands.list_doc)."""
    show_document(c, commands.list_doc(settings(c), store), json_output, _render_list)


def _render_list(console: Any, doc: dict[str, Any]) -> None:
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
            manage.human_size(r["size"]),
            manage.human_age(r["age"]),
            str(r["hits"]),
            r["store"],
        )
    console.print(table)
    total = sum(r["size"] for r in doc["entries"])
    console.print(f"{len(doc['entries'])} entries, {manage.human_size(total)}")


def verify_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.verify`: check every entry's sha256; corrupt ones are quarantined.
    Exit status 2 when an entry was corrupt."""
    doc = commands.verify_doc(settings(c), store)
    show_document(c, doc, json_output, _render_verify)
    if doc["corrupt"]:
        raise Exit(code=EXIT_HOST_FAILED)


def _render_verify(console: Any, doc: dict[str, Any]) -> None:
    table = _table("wheel cache verify", ["store", "key", "status", "reason"])
    for r in doc["entries"]:
        style = "green" if r["status"] == "ok" else "red"
        table.add_row(r["store"], r["key"][:12], f"[{style}]{r['status']}[/]", r["reason"])
    console.print(table)
    console.print(f"{doc['ok']} ok, {doc['corrupt']} corrupt (quarantined)")


def prune_command(
    c: Any,
    *,
    json_output: bool,
    older_than_days: float | None,
    keep: int | None,
    max_size: str | None,
    store: str | None,
) -> None:
    """`invoke cache.prune`: drop entries by age, keep-N per package, or total size."""
    doc = commands.prune_doc(
        settings(c), older_than_days=older_than_days, keep=keep, max_size=max_size, store=store
    )
    show_document(c, doc, json_output, _render_prune)


def _render_prune(console: Any, doc: dict[str, Any]) -> None:
    table = _table("wheel cache prune", ["store", "package", "version", "key", "size"])
    for r in doc["removed"]:
        what = "(killed put)" if r["incomplete"] else r["package"]
        table.add_row(r["store"], what, r["version"], r["key"][:12], manage.human_size(r["size"]))
    console.print(table)
    console.print(f"removed {len(doc['removed'])}, freed {manage.human_size(doc['freed_bytes'])}")


def export_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.export DIR`: every wheel, flat, plus index.json."""
    show_document(
        c, commands.export_doc(settings(c), directory, store), json_output, _render_export
    )


def _render_export(console: Any, doc: dict[str, Any]) -> None:
    table = _table(f"exported to {doc['directory']}", ["package", "version", "file", "key"])
    for r in doc["exported"]:
        table.add_row(r["package"], r["version"], r["filename"], r["key"][:12])
    console.print(table)
    for r in doc["skipped"]:
        console.print(f"skipped {r['filename']} ({r['key'][:12]}): a newer one has that name")
    console.print(f"install offline: pip install --no-index --find-links {doc['directory']} PKG")


def import_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.import DIR`: an exported directory's wheels back into a store; exit 2 if
    any was corrupt."""
    doc = commands.import_doc(settings(c), directory, store)
    show_document(c, doc, json_output, _render_import)
    if doc["corrupt"]:
        raise Exit(code=EXIT_HOST_FAILED)


def _render_import(console: Any, doc: dict[str, Any]) -> None:
    console.print(
        f"{doc['store']}: imported {len(doc['imported'])}, already present "
        f"{len(doc['present'])}, corrupt {len(doc['corrupt'])}"
    )
    for name in doc["corrupt"]:
        console.print(f"[red]corrupt (not imported):[/] {name}")
