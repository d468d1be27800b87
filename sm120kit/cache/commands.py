"""What ``invoke cache.*`` (list, verify, prune, export, import) computes, as JSON documents.

These work on the controller store and the shared stores of invoke.yaml; ``store`` (the
``--store NAME`` flag) picks one (``local`` = the controller's). Each function opens the
stores, builds the command's document and closes them again; printing it (a table or JSON)
and the exit status belong to the task layer (``sm120kit.cli.cache``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import manage
from .config import CONTROLLER_STORE, CacheConfig
from .resolve import connect_options, open_store
from .store import CacheError, Store


def command_stores(settings: Mapping[str, Any], store: str | None) -> list[Store]:
    """The controller store and invoke.yaml's shared stores, or only ``--store NAME``."""
    config = CacheConfig.from_settings(settings)
    options = connect_options(settings)
    named: list[tuple[str, Callable[[], Store]]] = []
    controller = config.controller_store()
    if controller is not None:
        named.append((CONTROLLER_STORE, lambda: controller))

    def opener(spec: dict[str, Any]) -> Callable[[], Store]:
        return lambda: open_store(spec, options)

    named += [(spec["name"], opener(spec)) for spec in config.stores]
    if store:
        for name, open_one in named:
            if name == store:
                return [open_one()]
        have = ", ".join(n for n, _ in named) or "none"
        raise CacheError(
            f"--store {store}: no such store in invoke.yaml's sm120kit.cache (have: {have})"
        )
    if not named:
        raise CacheError("invoke.yaml sm120kit.cache: no stores (controller: false, stores: [])")
    return [open_one() for _, open_one in named]


def close_all(stores: list[Store]) -> None:
    """Close every store, ignoring errors (the command's outcome is decided already)."""
    for store in stores:
        try:
            store.close()
        except Exception:  # noqa: BLE001
            pass


def list_doc(settings: Mapping[str, Any], store: str | None) -> dict[str, Any]:
    """`cache.list`: {"stores": [...], "entries": [{package, version, key, full_key, arch,
    cuda, torch, size, age, hits, store, filename}]}."""
    stores = command_stores(settings, store)
    try:
        return {"stores": [s.name for s in stores], "entries": manage.list_entries(stores)}
    finally:
        close_all(stores)


def verify_doc(settings: Mapping[str, Any], store: str | None) -> dict[str, Any]:
    """`cache.verify`: check every entry's sha256; corrupt ones are quarantined.

    {"stores", "entries": [{store, key, status: ok|corrupt, reason}], "ok": n, "corrupt": n}.
    """
    stores = command_stores(settings, store)
    try:
        rows = manage.verify(stores)
    finally:
        close_all(stores)
    bad = sum(1 for r in rows if r["status"] != "ok")
    return {
        "stores": [s.name for s in stores],
        "entries": rows,
        "ok": len(rows) - bad,
        "corrupt": bad,
    }


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?\s*$", re.IGNORECASE)


def parse_size(text: str | int | None) -> int | None:
    """'50G' / '500MiB' / '1.5T' / '1024' -> bytes (binary units); raises CacheError."""
    if text in (None, ""):
        return None
    m = _SIZE.match(str(text))
    if not m:
        raise CacheError(f"--max-size {text!r}: expected a size like 500M, 50G or 1.5T")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * (1024**power))


def prune_doc(
    settings: Mapping[str, Any],
    *,
    older_than_days: float | None,
    keep: int | None,
    max_size: str | None,
    store: str | None,
) -> dict[str, Any]:
    """`cache.prune`: drop entries older than N days, beyond the newest N per package, or
    least recently used ones until the store fits max_size. Killed puts older than
    stale_lock_after go too. {"removed": [{store, key, package, version, size, incomplete}],
    "freed_bytes": n}."""
    limit = parse_size(max_size)
    if older_than_days is None and keep is None and limit is None:
        raise CacheError("cache.prune: give --older-than DAYS, --keep N or --max-size SIZE")
    config = CacheConfig.from_settings(settings)
    stores = command_stores(settings, store)
    removed = []
    try:
        for st in stores:
            for meta in manage.prune(
                st,
                older_than=older_than_days * 86400 if older_than_days is not None else None,
                keep=keep,
                max_total_bytes=limit,
                incomplete_older_than=config.stale_lock_after,
            ):
                inputs = meta.get("inputs") or {}
                removed.append(
                    {
                        "store": st.name,
                        "key": meta["key"],
                        "package": inputs.get("package", "?"),
                        "version": inputs.get("version", "?"),
                        "size": int(meta.get("size", 0)),
                        "incomplete": bool(meta.get("incomplete")),
                    }
                )
    finally:
        close_all(stores)
    return {"removed": removed, "freed_bytes": sum(r["size"] for r in removed)}


def export_doc(
    settings: Mapping[str, Any], directory: str | None, store: str | None
) -> dict[str, Any]:
    """`cache.export DIR`: every wheel, flat, plus index.json; usable offline with
    ``pip install --no-index --find-links DIR``. {"directory", "exported": [{key, filename,
    store, package, version}], "skipped": [...]}."""
    if not directory:
        raise CacheError("cache.export: give the directory to write (invoke cache.export DIR)")
    stores = command_stores(settings, store)
    try:
        result = manage.export_dir(stores, directory)
    except OSError as exc:
        raise CacheError(f"cache.export {directory}: {_os_reason(exc)}") from None
    finally:
        close_all(stores)

    def row(r: Mapping[str, Any]) -> dict[str, Any]:
        inputs = r["meta"].get("inputs") or {}
        return {
            "key": r["key"],
            "filename": r["filename"],
            "store": r["store"],
            "package": inputs.get("package", "?"),
            "version": inputs.get("version", "?"),
        }

    return {
        "directory": str(Path(directory).resolve()),
        "exported": [row(r) for r in result["exported"]],
        "skipped": [row(r) for r in result["skipped"]],
    }


def import_doc(
    settings: Mapping[str, Any], directory: str | None, store: str | None
) -> dict[str, Any]:
    """`cache.import DIR`: put an exported directory's wheels back under their keys, into
    ``store`` (default: the controller store). {"directory", "store", "imported": [keys],
    "present": [keys], "corrupt": [file names]}."""
    if not directory:
        raise CacheError("cache.import: give the directory to read (invoke cache.import DIR)")
    [target] = command_stores(settings, store or CONTROLLER_STORE)
    try:
        result = manage.import_dir(directory, target)
    except OSError as exc:
        raise CacheError(f"cache.import {directory}: {_os_reason(exc)}") from None
    finally:
        close_all([target])
    return {"directory": str(Path(directory).resolve()), "store": target.name, **result}


def _os_reason(exc: OSError) -> str:
    """An OSError as the user's words: what failed on which path (no errno noise)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or type(exc).__name__}{where}"
