"""The task layer of `invoke cache.*`: settings in, a document from `sm120kit.cache.commands`,
a table (sm120kit.output.listings) or JSON out, and the exit status (2 when an entry was
corrupt)."""

from __future__ import annotations

from typing import Any

from invoke.exceptions import Exit

from ..cache import commands
from ..output import listings
from ..output.console import show_document
from .core import EXIT_HOST_FAILED, settings


def list_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.list`: one row per entry and store (JSON: see commands.list_doc)."""
    show_document(commands.list_doc(settings(c), store), json_output, listings.cache_list)


def verify_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.verify`: check every entry's sha256; corrupt ones are quarantined.
    Exit status 2 when an entry was corrupt."""
    doc = commands.verify_doc(settings(c), store)
    show_document(doc, json_output, listings.cache_verify)
    if doc["corrupt"]:
        raise Exit(code=EXIT_HOST_FAILED)


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
    show_document(doc, json_output, listings.cache_prune)


def export_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.export DIR`: every wheel, flat, plus index.json."""
    doc = commands.export_doc(settings(c), directory, store)
    show_document(doc, json_output, listings.cache_export)


def import_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.import DIR`: an exported directory's wheels back into a store; exit 2 if
    any was corrupt."""
    doc = commands.import_doc(settings(c), directory, store)
    show_document(doc, json_output, listings.cache_import)
    if doc["corrupt"]:
        raise Exit(code=EXIT_HOST_FAILED)
