"""The in-run election: on a miss, one host thread per key builds and the others wait.

The waiters then take the wheel from the cache. If the builder fails, every waiter fails
with "builder X failed"; when the run is interrupted (the builder's command killed, or a
signal while a host waits), the waiters are interrupted too, not failed; only when the builder was lost (unreachable) does the next waiter
build instead. A host with the var ``build_host: <other>`` never builds and waits for the
cache: woken when that host's build in this run ends, failing at once when it was lost or its
wheel reached no store the waiter reads, and after ``wait_timeout`` when it is outside the run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ..errors import HostFailed, HostUnreachable, Interrupted
from ..runner.connection import cancel_reason, cancelled
from .config import CacheConfig
from .health import StoreHealth
from .locks import LockedBuild
from .lookup import Lookup
from .request import Obtained, WheelRequest

#: Poll interval (s) while an in-run builder works: its end wakes the waiters anyway.
IN_RUN_POLL = 30.0
#: Failed looks in a row after which a wheel published in this run counts as out of reach.
MAX_FAILED_LOOKS = 5
#: The host var naming the one host that builds for this host.
BUILD_HOST_VAR = "build_host"


@dataclass
class _Failure:
    host: str
    message: str
    fatal: bool
    interrupted: bool = False  # the run was cancelled: says nothing about the build


@dataclass
class _Published:
    """A build of this run that succeeded: who built it and which stores took the wheel."""

    host: str
    stores: list[str]
    sha256: str = ""


@dataclass
class _Slot:
    """In-run election state of one key."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    builder: str | None = None
    finished: int = 0  # builds ended (success or failure); a waiter re-looks after each
    failure: _Failure | None = None
    published: _Published | None = None


class Election:
    """Elects one builder per key among a run's host threads; the others wait for its wheel."""

    def __init__(
        self, config: CacheConfig, health: StoreHealth, lookup: Lookup, locked: LockedBuild
    ) -> None:
        self.config = config
        self.health = health
        self.lookup = lookup
        self.locked = locked
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}

    def _slot(self, key: str) -> _Slot:
        with self._lock:
            return self._slots.setdefault(key, _Slot())

    def obtain(self, req: WheelRequest) -> Obtained:
        """The wheel from a store, after this host built it or waited for its builder."""
        ctx, inputs, key = req.ctx, req.inputs, req.key
        name = ctx.host.name
        designated = "" if req.any_host else str(ctx.host.vars.get(BUILD_HOST_VAR) or "")
        may_build = not designated or designated == name
        slot = self._slot(key)
        what = req.what
        started = time.monotonic()
        waited_for: str | None = None
        shown = ""
        strikes = 0  # looks in a row whose lookups failed after the designated host published
        # --rebuild: what the stores hold is what is being replaced, until this run's build of
        # the key is published. A host whose build_host is outside this run takes what the
        # cache has: nothing here will replace it.
        replacing = req.rebuild and (may_build or designated in ctx.runner.host_names)
        while True:
            if cancelled():  # a signal while waiting: this host was interrupted, not failed
                raise Interrupted(cancel_reason())
            with slot.cond:
                seen = slot.finished
                fresh = slot.published.sha256 if slot.published is not None else ""
            failed: set[str] = set()
            if replacing and not fresh:
                got = None
            else:
                got = self.lookup.find(req, failed, sha256=fresh if replacing else "")
            if got is not None:
                if waited_for:
                    got.events.append(f"{inputs.package}: waited for {waited_for}'s {req.work}")
                return got
            with slot.cond:
                if slot.finished != seen:
                    continue  # a build ended while we looked: look again
                failure = slot.failure
                if slot.builder is None and failure is not None:
                    if failure.interrupted:
                        raise Interrupted(failure.message)
                    if failure.fatal:
                        raise HostFailed(
                            f"builder {failure.host} failed to build {what}: {failure.message}"
                        )
                    if not may_build and failure.host == designated:
                        raise HostFailed(
                            f"{name}: host var {BUILD_HOST_VAR}={designated}: that host was lost "
                            f"before it built {what}: {failure.message}"
                        )
                if slot.builder is None and may_build:
                    slot.builder = name
                    break
                builder = slot.builder
                in_run = builder is not None
                if builder is None:
                    # The designated host is not building now: it built already in this run,
                    # or it is outside this run (another run, or not started).
                    if failed:
                        strikes += 1
                    elif not any(self.health.is_down(src.name) for src in req.sources):
                        strikes = 0
                    self._check_published(req, slot.published, designated, failed, strikes)
                    elapsed = time.monotonic() - started
                    if elapsed > self.config.wait_timeout:
                        raise HostFailed(
                            f"{name}: host var {BUILD_HOST_VAR}={designated}: no wheel for "
                            f"{what} appeared in the cache within "
                            f"{self.config.wait_timeout:.0f}s"
                        )
                    builder = designated
                waited_for = builder
                detail = f"waiting for {builder}'s {req.work}"
                if not in_run:  # whole minutes, so the line changes once a minute at most
                    detail += f" ({elapsed // 60:.0f} of {self.config.wait_timeout / 60:.0f} min)"
                if detail != shown:  # progress lines only when the wait changes
                    shown = detail
                    ctx.log.info("wheel cache: %s %s", inputs.package, detail)
                    req.progress(detail)
                # An in-run builder wakes every waiter when it ends; until then a slow poll
                # only catches another run publishing the same key.
                slot.cond.wait(
                    max(self.config.poll_interval, IN_RUN_POLL)
                    if in_run
                    else self.config.poll_interval
                )
        return self._build_elected(req, slot)

    def _check_published(
        self,
        req: WheelRequest,
        published: _Published | None,
        designated: str,
        failed: set[str],
        strikes: int,
    ) -> None:
        """Fail at once when the designated host built in this run but the wheel is out of reach.

        Waiting is worth it only while a store the builder published to is in its back-off
        or failed this one look (both are asked again soon, a failing look a few times at
        most); after a clean miss in every such store no later look can find it.
        """
        if published is None or published.host != designated:
            return
        name = req.ctx.host.name
        mine = {s.name for s in req.sources}
        shared = [n for n in published.stores if n in mine]
        retry = [n for n in shared if self.health.is_down(n) or n in failed]
        if retry and strikes < MAX_FAILED_LOOKS:
            return
        if retry:
            where = f"looking it up in {', '.join(retry)} failed {strikes} times in a row"
        elif shared:
            where = f"it is not in {', '.join(shared)} any more"
        elif published.stores:
            where = f"it went to {', '.join(published.stores)}, which {name} does not read"
        else:
            where = "no store took the wheel"
        raise HostFailed(
            f"{name}: host var {BUILD_HOST_VAR}={designated}: {designated} built {req.what} in "
            f"this run, but {where}"
        )

    def _build_elected(self, req: WheelRequest, slot: _Slot) -> Obtained:
        """This thread won the in-run election: build under the cross-run lock."""
        host = req.ctx.host.name
        try:
            got = self.locked.build(req)
        except BaseException as exc:
            with slot.cond:
                slot.builder = None
                slot.finished += 1
                # A lost builder says nothing about the build: let the next waiter try.
                stopped = isinstance(exc, (Interrupted, KeyboardInterrupt)) or cancelled()
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                slot.failure = _Failure(
                    host,
                    (str(exc) or cancel_reason()) if stopped else message,
                    fatal=not isinstance(exc, HostUnreachable),
                    interrupted=stopped,
                )
                slot.cond.notify_all()
            raise
        with slot.cond:
            slot.builder = None
            slot.finished += 1
            slot.failure = None
            if got.wheel_from == "build":
                slot.published = _Published(host, list(got.stored_in), got.sha256)
            slot.cond.notify_all()
        return got
