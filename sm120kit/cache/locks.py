"""The cross-run lock: two runs never build one key at once.

The builder first takes the key's lock in the first shared store (else the controller
store). A run that finds the lock held polls the stores until the wheel appears, the lock is
released (then it builds) or goes stale (``stale_lock_after``, taken over), giving up after
``wait_timeout``. The lock is refreshed while the build runs and released after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import HostFailed, Interrupted
from ..runner.connection import cancel_reason, cancelled
from ..runner.controller import dead_here
from .config import CacheConfig
from .health import StoreHealth, one_line
from .lookup import Lookup
from .publish import Publisher
from .request import Counters, Obtained, Source, WheelRequest
from .resolve import Stores
from .store import LockOwner, unreachable


class LockedBuild:
    """Builds a key under its cross-run lock and publishes the wheel."""

    def __init__(
        self,
        config: CacheConfig,
        stores: Stores,
        health: StoreHealth,
        counters: Counters,
        lookup: Lookup,
        publisher: Publisher,
        run_id: str,
    ) -> None:
        self.config = config
        self.stores = stores
        self.health = health
        self.counters = counters
        self.lookup = lookup
        self.publisher = publisher
        self.run_id = run_id

    def build(self, req: WheelRequest) -> Obtained:
        """Take the lock (or take another run's wheel), build, publish, release."""
        ctx, key = req.ctx, req.key
        lock = self.stores.lock_source(req.sources)
        owner = LockOwner.current(run_id=self.run_id)
        held = False
        if lock is not None:
            held, got = self._take(req, lock, owner)
            if got is not None:
                return got
        try:
            if held and not req.rebuild:
                # Another run may have stored it between our lookup and the lock.
                got = self.lookup.find(req)
                if got is not None:
                    return got
            with self._refreshing(lock if held else None, key, owner):
                req.progress(f"{req.work}ing")
                built = req.build()
            self.counters.add("builds")
            return self.publisher.publish(req, built)
        finally:
            if held and lock is not None:
                try:
                    lock.store.release(key, owner)
                except Exception as exc:  # noqa: BLE001 - a stale lock times out anyway
                    ctx.log.warning("could not release cache lock %s: %s", key[:12], exc)

    def _take(
        self, req: WheelRequest, lock: Source, owner: LockOwner
    ) -> tuple[bool, Obtained | None]:
        """(True, None) once held; (False, hit) when another run's build showed up first."""
        key, events = req.key, req.events
        deadline = time.monotonic() + self.config.wait_timeout
        announced = False
        while True:
            try:
                prior = lock.store.holder(key)
                if lock.store.acquire(key, owner, stale_after=self.config.stale_lock_after):
                    if prior and dead_here(prior, controller_key="host"):
                        events.append(
                            f"{key[:12]}: took over the build lock of pid {prior.get('pid')} "
                            "on this controller: that process is gone"
                        )
                    return True, None
                holder = lock.store.holder(key) or {}
            except Exception as exc:  # noqa: BLE001 - no lock store: build without one
                if unreachable(exc):
                    self.health.mark_down(lock.store.name, exc, events)
                events.append(
                    f"{key[:12]}: built without a cross-run lock ({lock.store.name}: "
                    f"{one_line(exc)})"
                )
                return False, None
            who = (
                f"{holder.get('user', '?')}@{holder.get('host', '?')} pid {holder.get('pid', '?')}"
            )
            if not announced:
                announced = True
                req.ctx.log.info("cache lock %s held by %s; waiting", key[:12], who)
                req.progress(f"another run {req.work}s it ({who})")
            time.sleep(self.config.poll_interval)
            if cancelled():  # a signal while waiting for another run: interrupted, not failed
                raise Interrupted(cancel_reason())
            # --rebuild waits for the lock itself: a wheel that shows up meanwhile may be the
            # one being replaced.
            got = None if req.rebuild else self.lookup.find(req)
            if got is not None:
                got.events.append(f"{req.inputs.package}: waited for another run's build ({who})")
                return False, got
            if time.monotonic() > deadline:
                raise HostFailed(
                    f"{req.what} is being built by another run ({who}) "
                    f"for over {self.config.wait_timeout:.0f}s; its lock in {lock.store.name} "
                    f"goes stale after {self.config.stale_lock_after:.0f}s"
                )

    @contextmanager
    def _refreshing(self, lock: Source | None, key: str, owner: LockOwner) -> Iterator[None]:
        """Keep the lock fresh while a (possibly hours long) build runs."""
        if lock is None:
            yield
            return
        stop = threading.Event()
        # Several refreshes fit in the stale period, so one slow or failed refresh is no
        # takeover; a dead run's lock still goes stale within minutes.
        interval = max(0.5, min(self.config.stale_lock_after / 5, 60.0))

        def refresh() -> None:
            while not stop.wait(interval):
                try:
                    lock.store.refresh(key, owner)
                except Exception:  # noqa: BLE001 - retried at the next interval
                    pass

        thread = threading.Thread(target=refresh, name="cache-lock-refresh", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
