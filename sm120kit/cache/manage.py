"""Cache housekeeping over one or more stores: list, verify, prune, export, import.

``export_dir`` writes a flat directory usable as ``pip install --no-index --find-links DIR``
on an offline host, plus ``index.json`` (key and meta of each wheel) so ``import_dir`` can put
the wheels back into a store under their keys.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sm120kit.cache.key import CACHE_FORMAT_VERSION, file_sha256
from sm120kit.cache.store import CacheError, CorruptEntry, EntryMissing, Store, check_key

INDEX_NAME = "index.json"


def list_entries(stores: Sequence[Store], now: float | None = None) -> list[dict[str, Any]]:
    """One row per entry and store: package, version, key (12 chars), arch, cuda, torch,
    size (bytes), age (seconds), hits, store; plus ``full_key`` and ``filename``.
    """
    now = time.time() if now is None else now
    rows = []
    for store in stores:
        for meta in store.list():
            inputs = meta.get("inputs") or {}
            rows.append(
                {
                    "package": inputs.get("package", "?"),
                    "version": inputs.get("version", "?"),
                    "key": meta["key"][:12],
                    "arch": ";".join(inputs.get("arch_list", [])),
                    "cuda": inputs.get("cuda_version", ""),
                    "torch": inputs.get("torch_version", ""),
                    "size": int(meta.get("size", 0)),
                    "age": max(0.0, now - float(meta.get("created", now))),
                    "hits": int(meta.get("hits") or 0),
                    "store": store.name,
                    "full_key": meta["key"],
                    "filename": meta.get("filename", ""),
                }
            )
    rows.sort(key=lambda r: (r["package"], r["version"], r["age"]))
    return rows


def human_size(size: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def human_age(seconds: float) -> str:
    """90 -> '1m', 7200 -> '2h', 3 days -> '3d'."""
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{int(seconds // span)}{unit}"
    return f"{int(seconds)}s"


def verify(stores: Sequence[Store]) -> list[dict[str, str]]:
    """Check every entry's sha256; rows {store, key, status: ok|corrupt, reason}.

    Corrupt entries are quarantined by the store as they are found.
    """
    rows = []
    for store in stores:
        for key in store.keys():
            try:
                store.verify_entry(key)
                rows.append({"store": store.name, "key": key, "status": "ok", "reason": ""})
            except CorruptEntry as exc:
                rows.append(
                    {"store": store.name, "key": key, "status": "corrupt", "reason": exc.reason}
                )
            except EntryMissing:
                continue  # deleted while we looked
    return rows


def prune(
    store: Store,
    older_than: float | None = None,
    keep: int | None = None,
    max_total_bytes: int | None = None,
    incomplete_older_than: float | None = None,
    dry_run: bool = False,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Remove entries; returns the metas of those removed (or that would be, with dry_run).

    older_than: seconds since created. keep: keep the N newest entries per package.
    max_total_bytes: then drop least recently used entries until the rest fits.
    incomplete_older_than: also drop entry dirs without meta.json (killed puts) whose newest
    file is older than this and whose key lock is free; these are returned as
    ``{"key": k, "incomplete": True}``.
    """
    now = time.time() if now is None else now
    metas = store.list()
    doomed: dict[str, dict[str, Any]] = {}
    if older_than is not None:
        for meta in metas:
            if now - float(meta.get("created", now)) > older_than:
                doomed[meta["key"]] = meta
    if keep is not None:
        by_package: dict[str, list[dict[str, Any]]] = {}
        for meta in metas:
            package = (meta.get("inputs") or {}).get("package", "?")
            by_package.setdefault(package, []).append(meta)
        for group in by_package.values():
            group.sort(key=lambda m: float(m.get("created", 0)), reverse=True)
            for meta in group[max(keep, 0) :]:
                doomed[meta["key"]] = meta
    if max_total_bytes is not None:
        alive = [m for m in metas if m["key"] not in doomed]
        total = sum(int(m.get("size", 0)) for m in alive)
        alive.sort(key=lambda m: float(m.get("last_used") or m.get("created") or 0))
        for meta in alive:
            if total <= max_total_bytes:
                break
            doomed[meta["key"]] = meta
            total -= int(meta.get("size", 0))
    removed = list(doomed.values())
    if incomplete_older_than is not None:
        for key, newest in store.incomplete().items():
            if now - newest > incomplete_older_than and store.holder(key) is None:
                removed.append({"key": key, "incomplete": True})
    if not dry_run:
        for meta in removed:
            store.delete(meta["key"])
    return removed


def export_dir(
    stores: Sequence[Store],
    dest: str | os.PathLike[str],
    keys: Iterable[str] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Write every (or the selected) wheel flat into dest, plus index.json.

    The first store holding a key wins. Two entries with the same wheel file name (one
    version built for two arch lists) cannot share a flat directory: the newest is exported
    and the other listed under ``skipped``. Returns {"exported": [...], "skipped": [...]}.
    """
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(keys) if keys is not None else None
    chosen: dict[str, tuple[Store, dict[str, Any]]] = {}  # filename -> (store, meta)
    seen: set[str] = set()
    skipped: list[dict[str, Any]] = []
    for store in stores:
        for meta in store.list():
            key = meta["key"]
            if key in seen or (wanted is not None and key not in wanted):
                continue
            seen.add(key)
            name = meta["filename"]
            other = chosen.get(name)
            if other is None or float(meta.get("created", 0)) > float(other[1].get("created", 0)):
                if other is not None:
                    skipped.append(_index_row(other[1], other[0]))
                chosen[name] = (store, meta)
            else:
                skipped.append(_index_row(meta, store))
    exported = []
    for _name, (store, meta) in sorted(chosen.items()):
        store.fetch(meta["key"], out, count_hit=False)
        exported.append(_index_row(meta, store))
    index = {"format_version": CACHE_FORMAT_VERSION, "entries": exported}
    tmp = out / f".{INDEX_NAME}.tmp"
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    os.replace(tmp, out / INDEX_NAME)
    return {"exported": exported, "skipped": skipped}


def _index_row(meta: dict[str, Any], store: Store) -> dict[str, Any]:
    clean = {k: v for k, v in meta.items() if k not in ("hits", "last_used")}
    return {"key": meta["key"], "filename": meta["filename"], "store": store.name, "meta": clean}


def import_dir(src: str | os.PathLike[str], store: Store) -> dict[str, list[str]]:
    """Put the wheels of an exported directory back into a store under their keys.

    Returns {"imported": keys, "present": keys already there with the same sha256,
    "corrupt": file names whose sha256 does not match index.json (not imported)}.
    """
    root = Path(src)
    index_path = root / INDEX_NAME
    try:
        index = json.loads(index_path.read_text())
        entries = index["entries"]
    except FileNotFoundError:
        raise CacheError(f"{index_path}: no index.json; export with sm120kit") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CacheError(f"{index_path}: unreadable index ({exc})") from None
    result: dict[str, list[str]] = {"imported": [], "present": [], "corrupt": []}
    if not isinstance(entries, list):
        raise CacheError(f"{index_path}: unreadable index (entries is not a list)")
    for i, row in enumerate(entries):
        try:
            key = check_key(str(row["key"]))
            meta = dict(row["meta"])
            wheel = root / Path(str(row["filename"])).name
        except (KeyError, TypeError, ValueError) as exc:
            raise CacheError(f"{index_path}: unreadable entry {i} ({exc!r})") from None
        if not wheel.is_file() or file_sha256(wheel) != meta.get("sha256"):
            result["corrupt"].append(wheel.name)
            continue
        try:
            existing = store.get_meta(key)
        except CorruptEntry:
            existing = None
        if existing is not None and existing.get("sha256") == meta.get("sha256"):
            result["present"].append(key)
            continue
        # put() keeps the original build facts and 'created'; it recomputes sha256/size.
        store.put(key, wheel, meta)
        result["imported"].append(key)
    return result


def copy_entry(src: Store, dst: Store, key: str, workdir: str | os.PathLike[str]) -> None:
    """Copy one entry between stores (verified on the way), e.g. S3 -> local on a hit."""
    meta = src.get_meta(key)
    if meta is None:
        raise EntryMissing(f"cache {src.name}: no entry {key[:12]}")
    wheel = src.fetch(key, workdir)
    try:
        dst.put(key, wheel, {k: v for k, v in meta.items() if k not in ("hits", "last_used")})
    finally:
        wheel.unlink(missing_ok=True)
