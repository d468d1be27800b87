"""Looking a key up in a host's stores, in order, and installing the first good hit.

A hit is moved to ``dest_dir`` on the host and its sha256 checked there before it gets its
final name; a corrupt entry is quarantined, the event recorded, and the next store tried. In
check mode only metas are read (:meth:`Lookup.peek`): nothing is written anywhere.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import HostFailed, HostUnreachable, Sm120Error
from .context import CacheHost
from .health import StoreHealth, add_event, one_line
from .place import host_dir, place
from .request import Counters, Obtained, Source, WheelRequest
from .resolve import Stores
from .store import META_NAME, CorruptEntry, EntryMissing, entry_dir, unreachable


class Lookup:
    """Finds a key's wheel in a host's stores and puts it in place on the host."""

    def __init__(self, stores: Stores, health: StoreHealth, counters: Counters) -> None:
        self.stores = stores
        self.health = health
        self.counters = counters

    def peek(self, sources: list[Source], key: str) -> Obtained:
        """Look only: read metas without quarantining or counting anything."""
        for src in sources:
            try:
                raw = src.store.read_blob(f"{entry_dir(key)}/{META_NAME}")
                meta = json.loads(raw) if raw else None
            except Exception:  # noqa: BLE001 - a broken or unreachable store is a miss here
                continue
            if isinstance(meta, dict) and meta.get("sha256"):
                return Obtained("", str(meta["sha256"]), f"cache:{src.name}", key)
        return Obtained("", "", "would build", key)

    def find(
        self, req: WheelRequest, failed: set[str] | None = None, sha256: str = ""
    ) -> Obtained | None:
        """The wheel from the first store that has it, or None; ``failed`` collects the stores
        whose lookup went wrong this time (a miss that says nothing). With `sha256` (a rebuild
        of this run), only that wheel counts: another under the key is stale, and is dropped
        from the host's own store so that later runs do not take it either."""
        ctx, key, events = req.ctx, req.key, req.events
        for src in req.sources:
            down = self.health.is_down(src.name)
            if down is not None:
                add_event(events, f"store {src.name} skipped: unreachable ({down.reason})")
                continue
            try:
                meta = src.store.get_meta(key)
                self.health.mark_up(src.name, events)
                if meta is None:
                    continue
                if sha256 and meta.get("sha256") != sha256:
                    if src.host_root is not None:
                        src.store.delete_blob(f"{entry_dir(key)}/{META_NAME}")
                        add_event(events, f"{key[:12]}: replaced wheel dropped from {src.name}")
                    continue
                if src.host_root is not None:
                    got = self._from_host_store(ctx, src, key, meta, req.dest_dir)
                else:
                    got = self._direct(req, src, meta) or self._from_store(
                        ctx, src, key, meta, req.dest_dir
                    )
            except CorruptEntry as exc:
                self.counters.add("quarantined")
                events.append(
                    f"{key[:12]}: entry in {src.name} corrupt ({exc.reason}); quarantined"
                )
                continue
            except EntryMissing:
                continue  # it changed under us (another put of the key): a miss this time
            except (HostFailed, HostUnreachable):
                raise
            except Exception as exc:  # noqa: BLE001 - a store's own errors: try the next one
                ctx.log.warning("lookup of %s in %s failed", key[:12], src.name, exc_info=True)
                if failed is not None:
                    failed.add(src.name)
                if src.host_root is not None:
                    # Per host, not per run: another host's store may be fine.
                    add_event(events, f"host store unusable on {ctx.host.name}: {one_line(exc)}")
                elif unreachable(exc):
                    self.health.mark_down(src.name, exc, events)
                else:
                    # One bad read (an entry caught mid-change, a glitch) says nothing about
                    # the store: a miss this time, and the next look asks it again.
                    add_event(
                        events, f"lookup in {src.name} failed ({one_line(exc)}); taken as a miss"
                    )
                continue
            got.events = events
            self.counters.add(f"hits:{src.name}")
            return got
        return None

    def _direct(self, req: WheelRequest, src: Source, meta: Mapping[str, Any]) -> Obtained | None:
        """The store's wheel taken by the host itself from the store's URL (no byte through
        this process), or None: the store has no URL, or the host could not take it."""
        if req.direct is None:
            return None
        filename, sha = str(meta["filename"]), str(meta["sha256"])
        url = src.store.download_url(f"{entry_dir(req.key)}/{filename}")
        if not url or not req.direct(url, filename, sha):
            return None
        self.counters.add("direct_to_hosts")
        path = posixpath.join(req.dest_dir, filename)
        return Obtained(path, sha, f"cache:{src.name}", req.key)

    def _from_host_store(
        self, ctx: CacheHost, src: Source, key: str, meta: Mapping[str, Any], dest_dir: str
    ) -> Obtained:
        filename = str(meta["filename"])
        assert src.host_root is not None
        path = posixpath.join(src.host_root, entry_dir(key), filename)
        [res] = place(
            ctx, [{"src": path, "dir": dest_dir, "name": filename, "sha256": meta["sha256"]}]
        )
        if not res["ok"]:
            reason = (
                f"wheel {filename} missing"
                if res.get("missing")
                else res.get("error")
                or f"sha256 {str(res.get('sha256'))[:12]} != meta {str(meta['sha256'])[:12]}"
            )
            src.store.quarantine(key, reason)
            raise CorruptEntry(src.name, key, reason)
        src.store.record_hit(key)
        return Obtained(res["path"], res["sha256"], f"cache:{src.name}", key)

    def _from_store(
        self, ctx: CacheHost, src: Source, key: str, meta: Mapping[str, Any], dest_dir: str
    ) -> Obtained:
        with tempfile.TemporaryDirectory(prefix="sm120kit-wheel-") as tmp:
            local = src.store.fetch(key, tmp)  # checks sha256; CorruptEntry after quarantine
            folder = host_dir(ctx, dest_dir)
            part = posixpath.join(folder, f".{local.name}.part-{secrets.token_hex(6)}")
            ctx.log.info("%s from store %s to the host", local.name, src.name)
            try:
                ctx.put(local, part)
            except Sm120Error:
                raise
            except Exception as exc:
                # Some transport errors (paramiko's EOFError, a closed channel) carry no text:
                # the type is then all the user gets, and better than an empty reason.
                why = str(exc) or type(exc).__name__
                raise HostFailed(f"copying {local.name} to {ctx.host.name} failed: {why}") from None
            size = local.stat().st_size
            self.counters.add("bytes_to_hosts", size)
            [res] = place(
                ctx,
                [
                    {
                        "src": part,
                        "dir": folder,
                        "name": local.name,
                        "sha256": meta["sha256"],
                        "move": True,
                    }
                ],
            )
            if not res["ok"]:
                raise HostFailed(
                    f"{local.name} from cache {src.name} arrived on {ctx.host.name} changed "
                    f"(sha256 {str(res.get('sha256'))[:12]} != {str(meta['sha256'])[:12]})"
                )
            if not self.stores.is_controller(src.store) and self.stores.keeps_hits():
                self._keep_locally(ctx, key, local, meta)
        return Obtained(res["path"], res["sha256"], f"cache:{src.name}", key, bytes_moved=size)

    def _keep_locally(self, ctx: CacheHost, key: str, wheel: Path, meta: Mapping[str, Any]) -> None:
        """A shared-store hit is also kept in the controller store (best effort)."""
        controller = self.stores.controller
        try:
            if controller.get_meta(key) is None:
                clean = {k: v for k, v in meta.items() if k not in ("hits", "last_used")}
                controller.put(key, wheel, clean)
        except Exception as exc:  # noqa: BLE001 - the wheel is on the host already
            ctx.log.warning("could not keep %s in the controller store: %s", key[:12], exc)
