"""After a build: the wheel goes once to the controller, is checked, and is put in every store.

The wheel is fetched once from the builder (a ``local`` host's file is taken as it is),
checked against the build's sha256 and put (atomically: wheel first, meta.json last) into
the controller and shared stores: the first store on the controller's disk takes a remote
host's fetched copy by hard link, every other put is a copy (a ``local`` host's file stays
its own); the host store gets an on-host copy, and ``dest_dir`` the wheel under its final name.
A store that refuses the put is recorded in the events; nothing is retried blindly.
"""

from __future__ import annotations

import json
import os
import posixpath
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import HostFailed, Sm120Error
from .health import StoreHealth, one_line
from .key import file_sha256
from .place import place
from .request import BuiltWheel, Counters, Obtained, WheelRequest
from .store import META_NAME, entry_dir, unreachable


class Publisher:
    """Stores a fresh build's wheel in the request's stores and places it on the host."""

    def __init__(self, health: StoreHealth, counters: Counters, run_id: str) -> None:
        self.health = health
        self.counters = counters
        self.run_id = run_id

    def publish(
        self, req: WheelRequest, built: BuiltWheel, fetched: Path | None = None
    ) -> Obtained:
        """Put ``built`` into every store of the request and into ``dest_dir`` on the host.

        A download into its final place with `req.later` is published later: its store puts
        become a call appended there, and the host goes on at once. `fetched`: a controller
        copy of a remote host's file, its sha256 already the build's (not fetched again)."""
        ctx, inputs, key, events = req.ctx, req.inputs, req.key, req.events
        if (
            req.later is not None
            and req.any_host
            and built.path.startswith("/")
            and posixpath.dirname(built.path) == req.dest_dir
            and not any(s.host_root is not None for s in req.sources)
        ):
            req.later.append(DeferredPut(self, replace(req, later=None, events=[]), built))
            return Obtained(built.path, built.sha256, "build", key, events)
        sources, dest_dir = req.sources, req.dest_dir
        filename = posixpath.basename(built.path)
        meta = {
            "inputs": inputs.to_dict(),
            "build_seconds": round(float(built.seconds), 3),
            "builder_host": ctx.host.name,
            "log_path": built.log,
            "run_id": self.run_id,
        }
        moved = 0
        with tempfile.TemporaryDirectory(prefix="sm120kit-built-") as tmp:
            if ctx.host.is_local:
                # This machine's own file: the stores take it as it is, with the sha256 the
                # host just checked; a released file (named by its sha256, never rewritten)
                # is hard-linked by a store on the same disk.
                local = Path(os.path.expanduser(built.path))
                digest: tuple[str, int] | None = (built.sha256, local.stat().st_size)
            else:
                local, digest = Path(tmp) / filename, None
                try:
                    if fetched is not None:
                        os.replace(fetched, local)
                    else:
                        ctx.get(built.path, local)
                except Sm120Error:
                    raise
                except Exception as exc:
                    raise HostFailed(
                        f"fetching {built.path} from {ctx.host.name} failed: {exc}"
                    ) from None
                moved = local.stat().st_size
                self.counters.add("bytes_from_hosts", moved)
                got = built.sha256 if fetched is not None else file_sha256(local)
                if got != built.sha256:
                    raise HostFailed(
                        f"{built.path} on {ctx.host.name}: sha256 {got[:12]} != the build's "
                        f"{built.sha256[:12]}"
                    )
                digest = (got, moved)
            # The fetched copy is this call's own temporary: the first store on its disk may
            # take it by hard link (it is removed below, so the store's file is the only one
            # left); a host's own file never is (one corruption would damage both copies).
            private = not ctx.host.is_local
            stored: list[str] = []
            for src in sources:
                # A store in its back-off is still tried: publishing matters more than a
                # lookup, and one put is the cheapest way to learn that it is back.
                if src.host_root is not None:
                    continue
                try:
                    src.store.put(key, local, meta, link=private, digest=digest)
                    private = False  # a second store sharing its inode would share damage
                except Exception as exc:  # noqa: BLE001 - other stores still get it
                    ctx.log.warning("put of %s into %s failed", key[:12], src.name, exc_info=True)
                    if unreachable(exc):
                        self.health.mark_down(src.name, exc, events)
                    events.append(f"{key[:12]}: not stored in {src.name} ({one_line(exc)})")
                    continue
                self.health.mark_up(src.name, events)
                stored.append(src.name)
        host = next((s for s in sources if s.host_root is not None), None)
        ops = [{"src": built.path, "dir": dest_dir, "name": filename, "sha256": built.sha256}]
        if host is not None:
            assert host.host_root is not None
            host.store.delete_blob(f"{entry_dir(key)}/{META_NAME}")
            entry = posixpath.join(host.host_root, entry_dir(key))
            ops.append({"src": built.path, "dir": entry, "name": filename, "sha256": built.sha256})
        if (
            host is None
            and built.path.startswith("/")
            and posixpath.dirname(built.path) == dest_dir
        ):
            # A download into its final place, its sha256 checked there as it arrived: there
            # is nothing to copy, and reading it once more would only cost time.
            results: list[dict[str, Any]] = [{"ok": True, "path": built.path}]
        else:
            results = place(ctx, ops)
        if not results[0]["ok"]:
            raise HostFailed(
                f"{built.path} on {ctx.host.name}: cannot place it in {dest_dir}: "
                f"{results[0].get('error') or 'sha256 changed'}"
            )
        if host is not None:
            if results[1]["ok"]:
                full = {
                    **meta,
                    "key": key,
                    "filename": filename,
                    "sha256": built.sha256,
                    "size": int(results[1]["size"]),
                    "created": time.time(),
                    "format_version": inputs.format_version,
                }
                host.store.write_blob(
                    f"{entry_dir(key)}/{META_NAME}",
                    json.dumps(full, sort_keys=True, indent=1).encode(),
                )
            else:
                events.append(f"{key[:12]}: not stored in the host store ({results[1]})")
        return Obtained(
            results[0]["path"], built.sha256, "build", key, events, moved, stored_in=stored
        )


@dataclass
class DeferredPut:
    """A download's stores puts, made later (`WheelCache.deferred`): called with a controller
    copy of the file already checked (or None: fetched from the host as a build's is)."""

    publisher: Publisher
    req: WheelRequest
    built: BuiltWheel

    @property
    def sha256(self) -> str:
        return self.built.sha256

    @property
    def filename(self) -> str:
        return posixpath.basename(self.built.path)

    def __call__(self, fetched: Path | None = None) -> list[str]:
        """Put the file into the request's stores; the stores that took it (the events say
        why another did not)."""
        got = self.publisher.publish(self.req, self.built, fetched)
        if self.req.events:
            self.req.ctx.result.data.setdefault("cache_events", []).extend(self.req.events)
        return list(got.stored_in)
