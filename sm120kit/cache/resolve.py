"""Which stores a host reads and writes, in order, and opening them.

A host's sources, in lookup order: its own store (``<work_root>/cache/wheels``, unless turned
off), the controller's store (or a per-run handoff when that is off), then the shared stores
(invoke.yaml ``sm120kit.cache.stores`` merged with the host var ``wheel_cache_stores``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import HostUnreachable
from ..inventory.host import Host
from ..runner.connection import ConnectOptions, SSHConnection
from .config import (
    CONTROLLER_STORE,
    HOST_STORE,
    RUN_STORE,
    CacheConfig,
    check_store_specs,
    truthy,
)
from .context import CacheHost
from .registry import make_store
from .request import Source
from .sftp import SFTPStore
from .store import LocalStore, Store, StoreUnavailable

#: Host vars read here.
STORES_VAR = "wheel_cache_stores"
HOST_STORE_VAR = "wheel_cache_host_store"


def host_store_specs(config: CacheConfig, host: Host) -> list[dict[str, Any]]:
    """invoke.yaml's shared stores merged with the host var ``wheel_cache_stores``.

    A host entry with the name of an invoke.yaml store replaces it for that host; other host
    entries come after invoke.yaml's.
    """
    raw = host.vars.get(STORES_VAR)
    if not raw:
        return list(config.stores)
    source = host.var_sources.get(STORES_VAR, "inventory")
    extra = check_store_specs(raw, f"host {host.name} var {STORES_VAR} ({source})")
    by_name = {s["name"]: s for s in extra}
    merged = [by_name.pop(s["name"], s) for s in config.stores]
    return merged + [s for s in extra if s["name"] in by_name]


def open_store(spec: Mapping[str, Any], connect: ConnectOptions) -> Store:
    """A Store from a checked spec. SFTP stores connect like hosts do (the run's known_hosts,
    ssh_config, key file) and own their connection, so ``close()`` ends it."""
    if spec.get("type") != "sftp":
        store = make_store({k: v for k, v in spec.items()})
        store.name = str(spec["name"])
        return store

    def client() -> Any:
        host = Host(
            str(spec["name"]),
            vars={
                "ansible_host": spec["host"],
                "ansible_port": spec.get("port"),
                "ansible_user": spec.get("user"),
                "ansible_ssh_private_key_file": spec.get("key_filename"),
            },
        )
        options = connect
        if spec.get("known_hosts"):
            options = dataclasses.replace(connect, known_hosts=str(spec["known_hosts"]))
        try:
            return SSHConnection(host, options).sftp()
        except HostUnreachable as exc:
            raise StoreUnavailable(f"cache {spec['name']}: {exc}") from None

    return SFTPStore(client, str(spec["path"]), name=str(spec["name"]), owns_client=True)


def connect_options(settings: Mapping[str, Any]) -> ConnectOptions:
    """SSH settings for SFTP stores from the ``sm120kit`` settings."""
    return ConnectOptions(
        known_hosts=settings.get("known_hosts"),
        accept_new_host_keys=bool(settings.get("accept_new_host_keys", False)),
        connect_timeout=float(settings.get("connect_timeout", 10)),
        connect_retries=int(settings.get("connect_retries", 3)),
        retry_backoff=float(settings.get("retry_backoff", 0.5)),
    )


class Stores:
    """The stores of one run: the controller's, and the shared ones opened once per thread."""

    def __init__(self, config: CacheConfig, connect: ConnectOptions) -> None:
        self.config = config
        self.connect = connect
        self._lock = threading.Lock()
        self._local = threading.local()
        self._opened: list[Store] = []
        self._run_dir: tempfile.TemporaryDirectory[str] | None = None
        controller = config.controller_store()
        if controller is None:
            # No controller store: a per-run handoff still lets one build serve the run.
            self._run_dir = tempfile.TemporaryDirectory(prefix="sm120kit-run-wheels-")
            controller = LocalStore(self._run_dir.name, name=RUN_STORE)
        self.controller: LocalStore = controller

    def shared(self, spec: Mapping[str, Any]) -> Store:
        """This thread's instance of a shared store."""
        # One instance per thread: paramiko SFTP clients and boto3 sessions are not shared
        # across threads safely; each host thread gets its own.
        mine: dict[str, Store] = self._local.__dict__.setdefault("stores", {})
        ident = json.dumps(spec, sort_keys=True, default=str)
        store = mine.get(ident)
        if store is None:
            store = open_store(spec, self.connect)
            mine[ident] = store
            with self._lock:
                self._opened.append(store)
        return store

    def host_store(self, ctx: CacheHost) -> Source | None:
        """The host's own store, reached over its connection, unless turned off."""
        if not self.config.host_store or not truthy(ctx.host.vars.get(HOST_STORE_VAR, True)):
            return None
        if ctx.state is not None:
            root = ctx.state.paths.wheel_cache
        else:
            root = posixpath.join(ctx.host.work_root, "cache", "wheels")
        lease = ctx.sftp_lease()
        if lease is not None:
            store: Store = SFTPStore.leased(lease, root, name=HOST_STORE)
        else:
            store = LocalStore(os.path.expanduser(root), name=HOST_STORE)
        return Source(HOST_STORE, store, host_root=root)

    def sources(self, ctx: CacheHost) -> list[Source]:
        """The stores ctx's host reads, in lookup order."""
        sources = []
        host = self.host_store(ctx)
        if host is not None:
            sources.append(host)
        sources.append(Source(self.controller.name, self.controller))
        for spec in host_store_specs(self.config, ctx.host):
            sources.append(Source(spec["name"], self.shared(spec)))
        return sources

    def lock_source(self, sources: list[Source]) -> Source | None:
        """Where the cross-run lock lives: the first shared store, else the controller's."""
        shared = [s for s in sources if s.host_root is None and s.store is not self.controller]
        if shared:
            return shared[0]
        return None if self.controller.name == RUN_STORE else Source("", self.controller)

    def is_controller(self, store: Store) -> bool:
        """Whether ``store`` is the run's controller store (or its per-run handoff)."""
        return store is self.controller

    def keeps_hits(self) -> bool:
        """Whether shared-store hits are kept on the controller (it has a real store)."""
        return self.controller.name == CONTROLLER_STORE

    def close(self) -> None:
        """Close the shared stores' connections (and the per-run handoff store)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for store in opened:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing must not mask the run's outcome
                pass
        if self._run_dir is not None:
            self._run_dir.cleanup()
