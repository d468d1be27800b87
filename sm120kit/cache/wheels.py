"""Wheel reuse across hosts and runs: look a key up before building, store every build.

``cache_for(runner).obtain(ctx, inputs, build, dest_dir)`` is the one entry point for builds;
:class:`WheelCache` is a small front over the parts, one job each:

1. Resolve the stores (``resolve``): in order, the host's own store
   (``<work_root>/cache/wheels``), the controller's store, then the shared stores
   (invoke.yaml ``sm120kit.cache.stores`` merged with the host var ``wheel_cache_stores``).
2. Look the key up (``lookup``): a hit is moved to ``dest_dir`` on the host and its sha256
   checked there (``place``) before it gets its final name; a corrupt entry is quarantined,
   the event recorded (``cache_events``), and the next store (or a build) is tried. A store
   is skipped only while it is unreachable, for a back-off (``health``).
3. On a miss, elect one builder per key in the run (``election``); the others wait and then
   take the wheel from the cache (a host with ``build_host: <other>`` never builds).
4. The builder builds under the key's cross-run lock (``locks``), so two runs never build one
   key at once.
5. After a build the wheel is published (``publish``): fetched once to the controller,
   checked against the build's sha256 and put (wheel first, meta.json last) into the
   controller and shared stores; the host store gets an on-host copy.

``wheel_from`` is ``"build"`` or ``"cache:<store>"`` with store ``host``, ``local`` (the
controller), ``run`` (a per-run handoff used only when the controller store is off) or a
shared store's name. In check mode only metas are read: ``"cache:<store>"`` or
``"would build"``, and nothing is written anywhere (no hits, no quarantine).
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import invoke

from ..runner.connection import ConnectOptions
from ..settings import config_layers, resolve
from .config import CacheConfig
from .context import CacheHost
from .election import Election
from .health import StoreHealth
from .key import KeyInputs, compute_key
from .locks import LockedBuild
from .lookup import Lookup
from .peers import Peers
from .publish import DeferredPut, Publisher
from .request import BuiltWheel, Counters, Obtained, WheelRequest
from .resolve import Stores
from .store import LocalStore

if TYPE_CHECKING:
    from ..runner.pool import Runner


class WheelCache:
    """One per run (see :func:`cache_for`); safe to use from every host thread at once."""

    def __init__(
        self,
        config: CacheConfig | None = None,
        connect: ConnectOptions | None = None,
        run_id: str = "",
    ) -> None:
        self.config = config or CacheConfig()
        self.connect = connect or ConnectOptions()
        self.run_id = run_id or secrets.token_hex(6)
        self._counters = Counters()
        self._stores = Stores(self.config, self.connect)
        health = StoreHealth(self.config)
        self._lookup = Lookup(self._stores, health, self._counters)
        publisher = Publisher(health, self._counters, self.run_id)
        locked = LockedBuild(
            self.config, self._stores, health, self._counters, self._lookup, publisher, self.run_id
        )
        self._election = Election(self.config, health, self._lookup, locked)
        #: Which hosts of the run hold which released files (the data path between hosts).
        self.peers = Peers()
        self._later: dict[str, list[DeferredPut]] = {}
        self._later_lock = threading.Lock()

    @property
    def controller(self) -> LocalStore:
        """The controller store (named ``local``), or the per-run handoff (``run``)."""
        return self._stores.controller

    @controller.setter
    def controller(self, store: LocalStore) -> None:
        self._stores.controller = store

    @property
    def stats(self) -> dict[str, int]:
        """Counters: builds, hits:<store>, bytes_to_hosts, bytes_from_hosts, quarantined."""
        return self._counters.values

    def obtain(
        self,
        ctx: CacheHost,
        inputs: KeyInputs,
        build: Callable[[], BuiltWheel],
        dest_dir: str,
        rebuild: bool = False,
        *,
        download: bool = False,
        defer: bool = False,
        direct: Callable[[str, str, str], bool] | None = None,
    ) -> Obtained:
        """The wheel for ``inputs`` in ``dest_dir`` on ctx's host, from a cache or a build.

        `rebuild`: a wheel already stored under the key is not taken; this run builds it once
        (one host per key, as for a miss) and replaces the stored one. `download`: `build`
        fetches a released file (sm120kit/ops/stack_files.py): any host may, and ``dest_dir``
        is the host's own copy, so the host store is left out. `defer` (with `download`): a
        download's store puts wait for `deferred` (the host goes on at once). `direct`: how the host
        takes a store's wheel from the store's own URL (`WheelRequest.direct`)."""
        key = compute_key(inputs)
        sources = self._stores.sources(ctx)
        if download:
            sources = [s for s in sources if s.host_root is None]
        ctx.log.info(
            "wheel cache: %s key %s, stores %s", inputs.package, key, [s.name for s in sources]
        )
        if ctx.check_mode:
            if rebuild:
                return Obtained("", "", "would build", key)
            return self._lookup.peek(sources, key)
        req = WheelRequest(
            ctx, inputs, key, build, dest_dir, sources, rebuild=rebuild, any_host=download
        )
        if download:
            req.direct = direct
        if defer and download:
            with self._later_lock:
                req.later = self._later.setdefault(ctx.host.name, [])
        try:
            return self._election.obtain(req)
        finally:
            if req.events:
                ctx.result.data.setdefault("cache_events", []).extend(req.events)

    def deferred(self, host: str) -> list[DeferredPut]:
        """The store puts deferred for `host`'s downloads so far (taken: each runs once)."""
        with self._later_lock:
            pending = self._later.get(host) or []
        calls = []
        while pending:  # pop by pop: a download ending now appends to the same list
            calls.append(pending.pop(0))
        return calls

    def close(self) -> None:
        """Close the shared stores' connections (and the per-run handoff store), and the
        earlier runs' holders' peer servers started for this run."""
        self.peers.close()
        self._stores.close()


def cache_for(runner: Runner, settings: Mapping[str, Any] | None = None) -> WheelCache:
    """The WheelCache of a Runner's run (``runner.shared``), created on first use (thread-safe).

    Settings come from ``settings``, else the run's settings (the CLI's ``settings(c)``),
    else invoke's config files and ``INVOKE_SM120KIT_*`` env read from the project directory.
    """
    shared = runner.shared
    with shared.lock:
        cache = shared.wheel_cache
        if cache is None:
            conf = settings if settings is not None else shared.settings
            if conf is None:
                conf = discover_settings()
            run_id = runner.run_dir.name if runner.run_dir else ""
            cache = WheelCache(
                CacheConfig.from_settings(conf), connect=runner.options.connect, run_id=run_id
            )
            shared.wheel_cache = cache
            # Shared stores hold SSH connections: end them when the runner goes away.
            weakref.finalize(runner, cache.close)
        return cache


def discover_settings() -> dict[str, Any]:
    """The ``sm120kit`` section as invoke would load it for the tasks' project directory."""

    tasks_file = getattr(sys.modules.get("tasks"), "__file__", None)
    project = os.path.dirname(os.path.abspath(tasks_file)) if tasks_file else os.getcwd()
    config = invoke.Config(project_location=project)  # type: ignore[arg-type]
    config.load_project()
    # The environment through the tool's own parser, not invoke's (which reads "false" as
    # true): the same values the CLI would use.

    return resolve(config_layers(config), os.environ)


__all__ = ["BuiltWheel", "CacheConfig", "Obtained", "WheelCache", "cache_for", "discover_settings"]
