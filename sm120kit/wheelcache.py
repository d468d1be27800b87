"""Wheel reuse across hosts and runs: look a key up before building, store every build.

`cache_for(runner).obtain(ctx, inputs, build, dest_dir)` is the one entry point for builds:

1. Look the key up, in order: the host's own store (``<work_root>/cache/wheels``), the
   controller's store, then the shared stores (invoke.yaml ``sm120kit.cache.stores`` merged
   with the host var ``wheel_cache_stores``). A hit is moved to ``dest_dir`` on the host and
   its sha256 checked there before it gets its final name; a corrupt entry is quarantined, the
   event recorded (``cache_events``), and the next store (or a build) is tried.
2. On a miss, one host thread per key builds (in-run election); the others wait and then take
   the wheel from the cache. If the builder fails, every waiter fails with "builder X failed";
   only when the builder was lost (unreachable) does the next waiter build instead. A host
   with the var ``build_host: <other>`` never builds and waits for the cache: woken when that
   host's build in this run ends, failing at once when it was lost or its wheel reached no
   store the waiter reads, and after ``wait_timeout`` when it is outside the run.
   A store is skipped only while it is unreachable (``store.unreachable``: connection, timeout,
   credentials), for a back-off that doubles up to ``MAX_DOWN_BACKOFF``; any other lookup
   error is a miss for that look.
3. The builder first takes the key's lock in the first shared store (else the controller
   store), so two runs never build one key at once; a run that finds the lock held polls the
   stores until the wheel appears, the lock is released (then it builds) or goes stale
   (``stale_lock_after``, taken over), giving up after ``wait_timeout``. The lock is
   refreshed while the build runs.
4. After a build the wheel is fetched once to the controller, checked against the build's
   sha256 and put (atomically: wheel first, meta.json last) into the controller and shared
   stores; the host store gets an on-host copy. Nothing is retried blindly.

``wheel_from`` is ``"build"`` or ``"cache:<store>"`` with store ``host``, ``local`` (the
controller), ``run`` (a per-run handoff used only when the controller store is off) or a
shared store's name. In check mode only metas are read: ``"cache:<store>"`` or
``"would build"``, and nothing is written anywhere (no hits, no quarantine).

The ``cache.*`` commands (list, verify, prune, export, import) work on the controller store
and the shared stores of invoke.yaml; ``--store NAME`` picks one (``local`` = controller).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import secrets
import shlex
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cache import manage
from .cache.key import KeyInputs, compute_key, file_sha256
from .cache.store import (
    META_NAME,
    CacheError,
    CorruptEntry,
    EntryMissing,
    LocalStore,
    LockOwner,
    Store,
    StoreUnavailable,
    default_local_root,
    entry_dir,
    make_store,
    unreachable,
)
from .connection import ConnectOptions, SSHConnection
from .controller import dead_here
from .errors import HostFailed, HostUnreachable, Sm120Error
from .host import Host
from .remote import parse_last_json

#: Reserved store names (wheel_from "cache:<name>").
HOST_STORE = "host"
CONTROLLER_STORE = "local"
RUN_STORE = "run"

#: Defaults of invoke.yaml's ``sm120kit.cache`` block.
CACHE_DEFAULTS: dict[str, Any] = {
    "controller": None,  # None: $XDG_CACHE_HOME/sm120kit/wheels; false: no controller store
    "host_store": True,
    "stores": [],
    "wait_timeout": 7200.0,
    "stale_lock_after": 300.0,
    "poll_interval": 2.0,
}

#: Longest back-off (s) before a store that could not be reached is asked again.
MAX_DOWN_BACKOFF = 60.0
#: Poll interval (s) while an in-run builder works: its end wakes the waiters anyway.
IN_RUN_POLL = 30.0
#: Failed looks in a row after which a wheel published in this run counts as out of reach.
MAX_FAILED_LOOKS = 5

#: Host vars read here.
STORES_VAR = "wheel_cache_stores"
HOST_STORE_VAR = "wheel_cache_host_store"
BUILD_HOST_VAR = "build_host"


@dataclass
class BuiltWheel:
    """What a build closure returns: the wheel's path ON THE HOST and how it came about."""

    path: str
    sha256: str
    seconds: float
    log: str


@dataclass
class Obtained:
    """A wheel ready on the host (``path`` is "" in check mode) and where it came from."""

    path: str
    sha256: str
    wheel_from: str
    key: str
    #: One-line cache events of this lookup (quarantines, unavailable stores, waits).
    events: list[str] = field(default_factory=list)
    #: Wheel bytes sent between controller and host for this wheel (both directions).
    bytes_moved: int = 0
    #: After a build: the controller/shared stores the wheel was put into.
    stored_in: list[str] = field(default_factory=list)


# ---- configuration ---------------------------------------------------------------------------


@dataclass
class CacheConfig:
    """invoke.yaml's ``sm120kit.cache`` block, checked."""

    controller: str | None | bool = None
    host_store: bool = True
    stores: list[dict[str, Any]] = field(default_factory=list)
    wait_timeout: float = 7200.0
    stale_lock_after: float = 300.0
    poll_interval: float = 2.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> CacheConfig:
        """From the merged ``sm120kit`` settings (``settings(c)``); raises CacheError."""
        where = "invoke.yaml sm120kit.cache"
        section = settings.get("cache") or {}
        if not isinstance(section, Mapping):
            raise CacheError(f"{where}: expected a mapping, got {type(section).__name__}")
        unknown = sorted(set(section) - set(CACHE_DEFAULTS))
        if unknown:
            raise CacheError(
                f"{where}: unknown key {unknown[0]!r} (known: {', '.join(CACHE_DEFAULTS)})"
            )
        merged = {**CACHE_DEFAULTS, **dict(section)}
        controller = merged["controller"]
        if isinstance(controller, str) and controller.strip().lower() in ("", "default", "null"):
            controller = None
        elif isinstance(controller, str) and controller.strip().lower() in ("false", "off", "no"):
            controller = False  # as set from the environment (INVOKE_SM120KIT_CACHE_...)
        if controller is not None and not isinstance(controller, (str, bool)):
            raise CacheError(f"{where}.controller: expected a path, null or false")
        if controller is True:
            controller = None
        numbers = {}
        for name in ("wait_timeout", "stale_lock_after", "poll_interval"):
            try:
                numbers[name] = float(merged[name])
            except (TypeError, ValueError):
                raise CacheError(f"{where}.{name}: {merged[name]!r} is not a number") from None
            if numbers[name] <= 0:
                raise CacheError(f"{where}.{name}: must be > 0, got {merged[name]!r}")
        stores = check_store_specs(merged["stores"], f"{where}.stores")
        return cls(
            controller=controller,
            host_store=_truthy(merged["host_store"]),
            stores=stores,
            **numbers,
        )

    def controller_store(self) -> LocalStore | None:
        """The controller's LocalStore (named ``local``), or None when turned off."""
        if self.controller is False:
            return None
        root = default_local_root() if self.controller is None else Path(str(self.controller))
        return LocalStore(root.expanduser(), name=CONTROLLER_STORE)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(value)


def store_name(spec: Mapping[str, Any]) -> str:
    """A shared store's name: ``name``, else derived from its type and location."""
    if spec.get("name"):
        return str(spec["name"])
    if spec.get("type") == "s3":
        return f"s3:{spec.get('bucket')}/{str(spec.get('prefix') or '').strip('/')}".rstrip("/")
    if spec.get("type") == "sftp":
        return f"sftp:{spec.get('host')}:{spec.get('path')}"
    return f"{spec.get('type')}:{spec.get('path') or 'default'}"


def check_store_specs(value: Any, where: str) -> list[dict[str, Any]]:
    """Validate a list of store specs (without connecting); returns plain dicts with names."""
    if value in (None, ""):
        return []
    if not isinstance(value, (list, tuple)):
        raise CacheError(f"{where}: expected a list of stores, got {type(value).__name__}")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        if not isinstance(raw, Mapping):
            raise CacheError(f"{where}[{i}]: expected a mapping with a 'type'")
        spec = dict(raw)
        try:
            make_store(spec, sftp_connect=lambda s: None)  # validation only; nothing connects
        except CacheError as exc:
            raise CacheError(f"{where}[{i}]: {exc}") from None
        name = store_name(spec)
        if name in (HOST_STORE, CONTROLLER_STORE, RUN_STORE):
            raise CacheError(f"{where}[{i}]: store name {name!r} is reserved")
        if name in seen:
            raise CacheError(f"{where}[{i}]: duplicate store name {name!r}")
        seen.add(name)
        spec["name"] = name
        out.append(spec)
    return out


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
    from .cache.sftp import SFTPStore

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


# ---- the on-host part: copy/verify/rename in one command --------------------------------------

#: Stdlib-only (Python 3.8+) helper run on the host with its stdin: for each op, copy `src`
#: (or take it as is with "move") to a temp name in `dir`, check its sha256, and rename it to
#: `dir/name` only when it matches. A killed copy leaves a hidden `.part` file, never a wheel.
PLACE_SNIPPET = r"""
import hashlib, json, os, shutil, sys

def digest(path):
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                return h.hexdigest(), n
            h.update(chunk)
            n += len(chunk)

results = []
for op in json.loads(sys.argv[1])["ops"]:
    src = os.path.expanduser(op["src"])
    folder = os.path.expanduser(op["dir"])
    final = os.path.join(folder, op["name"])
    res = {"path": os.path.abspath(final), "ok": False}
    tmp = None
    try:
        if not os.path.isfile(src):
            res["missing"] = True
            raise IOError("no such file: " + src)
        if not os.path.isdir(folder):
            os.makedirs(folder)
        if os.path.abspath(src) == os.path.abspath(final):
            res["sha256"], res["size"] = digest(final)
        else:
            if op.get("move"):
                tmp = src
            else:
                tmp = os.path.join(folder, ".%s.part-%s" % (op["name"], os.urandom(6).hex()))
                shutil.copyfile(src, tmp)
            res["sha256"], res["size"] = digest(tmp)
        res["ok"] = res["sha256"] == op["sha256"]
        if tmp is not None:
            if res["ok"]:
                os.replace(tmp, final)
            else:
                os.unlink(tmp)
            tmp = None
    except (IOError, OSError) as exc:
        res["error"] = "%s: %s" % (type(exc).__name__, exc)
        if tmp is not None and not op.get("move"):
            try:
                os.unlink(tmp)
            except OSError:
                pass
    results.append(res)
print(json.dumps({"results": results}))
"""


def _place(ctx: Any, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run PLACE_SNIPPET on the host (one command) and return one result per op."""
    args = json.dumps({"ops": ops}, sort_keys=True)
    cmd = f"{shlex.quote(ctx.host.python)} - {shlex.quote(args)}"
    res = ctx.run(cmd, stdin=PLACE_SNIPPET, what="place wheel")
    doc = parse_last_json(res.stdout)
    if not doc or len(doc.get("results", [])) != len(ops):
        raise HostFailed(f"{ctx.host.name}: placing a wheel printed no result: {res.stdout[-200:]}")
    results: list[dict[str, Any]] = doc["results"]
    return results


def _shell_path(path: str) -> str:
    """Quote a host path for the shell, keeping a leading ~/ expandable."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


# ---- the cache ------------------------------------------------------------------------------


@dataclass
class _Failure:
    host: str
    message: str
    fatal: bool


@dataclass
class _Published:
    """A build of this run that succeeded: who built it and which stores took the wheel."""

    host: str
    stores: list[str]


@dataclass
class _Slot:
    """In-run election state of one key."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    builder: str | None = None
    finished: int = 0  # builds ended (success or failure); a waiter re-looks after each
    failure: _Failure | None = None
    published: _Published | None = None


@dataclass
class _Down:
    """A store that could not be reached: skipped until ``until`` (monotonic), then asked again."""

    reason: str
    until: float
    failures: int


@dataclass
class _Source:
    name: str
    store: Store
    host_root: str | None = None  # set for the host store: its root as a host path


class WheelCache:
    """One per Runner (see :func:`cache_for`); safe to use from every host thread at once."""

    def __init__(
        self,
        config: CacheConfig | None = None,
        connect: ConnectOptions | None = None,
        run_id: str = "",
    ) -> None:
        self.config = config or CacheConfig()
        self.connect = connect or ConnectOptions()
        self.run_id = run_id or secrets.token_hex(6)
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self._local = threading.local()
        self._opened: list[Store] = []
        self._down: dict[str, _Down] = {}
        self._run_dir: tempfile.TemporaryDirectory[str] | None = None
        controller = self.config.controller_store()
        if controller is None:
            # No controller store: a per-run handoff still lets one build serve the run.
            self._run_dir = tempfile.TemporaryDirectory(prefix="sm120kit-run-wheels-")
            controller = LocalStore(self._run_dir.name, name=RUN_STORE)
        self.controller: LocalStore = controller
        #: Counters: builds, hits:<store>, bytes_to_hosts, bytes_from_hosts, quarantined.
        self.stats: dict[str, int] = {}

    # ---- public -----------------------------------------------------------------------------

    def obtain(
        self,
        ctx: Any,
        inputs: KeyInputs,
        build: Callable[[], BuiltWheel],
        dest_dir: str,
    ) -> Obtained:
        """The wheel for ``inputs`` in ``dest_dir`` on ctx's host, from a cache or a build."""
        key = compute_key(inputs)
        sources = self._sources(ctx)
        events: list[str] = []
        ctx.log.info(
            "wheel cache: %s key %s, stores %s", inputs.package, key, [s.name for s in sources]
        )
        if ctx.check_mode:
            return self._peek(sources, key)
        try:
            return self._obtain(ctx, inputs, key, build, dest_dir, sources, events)
        finally:
            if events:
                ctx.result.data.setdefault("cache_events", []).extend(events)

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

    # ---- stores -----------------------------------------------------------------------------

    def _shared(self, spec: Mapping[str, Any]) -> Store:
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

    def _host_store(self, ctx: Any) -> _Source | None:
        if not self.config.host_store or not _truthy(ctx.host.vars.get(HOST_STORE_VAR, True)):
            return None
        state = getattr(ctx, "state", None)
        if state is not None:
            root = state.paths.wheel_cache
        else:
            root = posixpath.join(ctx.host.work_root, "cache", "wheels")
        conn = ctx.conn
        if hasattr(conn, "sftp"):
            from .cache.sftp import SFTPStore

            store: Store = SFTPStore(conn.sftp, root, name=HOST_STORE)
        else:
            store = LocalStore(os.path.expanduser(root), name=HOST_STORE)
        return _Source(HOST_STORE, store, host_root=root)

    def _sources(self, ctx: Any) -> list[_Source]:
        sources = []
        host = self._host_store(ctx)
        if host is not None:
            sources.append(host)
        sources.append(_Source(self.controller.name, self.controller))
        for spec in host_store_specs(self.config, ctx.host):
            sources.append(_Source(spec["name"], self._shared(spec)))
        return sources

    def _lock_source(self, sources: list[_Source]) -> _Source | None:
        """Where the cross-run lock lives: the first shared store, else the controller's."""
        shared = [s for s in sources if s.host_root is None and s.store is not self.controller]
        if shared:
            return shared[0]
        return None if self.controller.name == RUN_STORE else _Source("", self.controller)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] = self.stats.get(name, 0) + n

    def _is_down(self, name: str) -> _Down | None:
        """The down mark of a store while its back-off lasts, else None."""
        with self._lock:
            down = self._down.get(name)
        return down if down is not None and time.monotonic() < down.until else None

    def _mark_down(self, name: str, exc: BaseException, events: list[str]) -> None:
        """A store could not be reached: skip it for a back-off that doubles per failure."""
        reason = _one_line(exc)
        with self._lock:
            prev = self._down.get(name)
            failures = (prev.failures if prev else 0) + 1
            backoff = min(MAX_DOWN_BACKOFF, self.config.poll_interval * 2 ** (failures - 1))
            self._down[name] = _Down(reason, time.monotonic() + backoff, failures)
        _add_event(
            events, f"store {name} unreachable ({reason}); skipped, asked again in {backoff:.1f}s"
        )

    def _mark_up(self, name: str, events: list[str]) -> None:
        with self._lock:
            prev = self._down.pop(name, None)
        if prev is not None:
            _add_event(events, f"store {name} reachable again")

    # ---- check mode -------------------------------------------------------------------------

    def _peek(self, sources: list[_Source], key: str) -> Obtained:
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

    # ---- lookup and install ---------------------------------------------------------------

    def _try_cache(
        self,
        ctx: Any,
        key: str,
        sources: list[_Source],
        dest_dir: str,
        events: list[str],
        failed: set[str] | None = None,
    ) -> Obtained | None:
        """The wheel from the first store that has it, or None; ``failed`` collects the stores
        whose lookup went wrong this time (a miss that says nothing)."""
        for src in sources:
            down = self._is_down(src.name)
            if down is not None:
                _add_event(events, f"store {src.name} skipped: unreachable ({down.reason})")
                continue
            try:
                meta = src.store.get_meta(key)
                self._mark_up(src.name, events)
                if meta is None:
                    continue
                if src.host_root is not None:
                    got = self._install_from_host_store(ctx, src, key, meta, dest_dir)
                else:
                    got = self._install_from_store(ctx, src, key, meta, dest_dir)
            except CorruptEntry as exc:
                self._count("quarantined")
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
                    _add_event(events, f"host store unusable on {ctx.host.name}: {_one_line(exc)}")
                elif unreachable(exc):
                    self._mark_down(src.name, exc, events)
                else:
                    # One bad read (an entry caught mid-change, a glitch) says nothing about
                    # the store: a miss this time, and the next look asks it again.
                    _add_event(
                        events, f"lookup in {src.name} failed ({_one_line(exc)}); taken as a miss"
                    )
                continue
            got.events = events
            self._count(f"hits:{src.name}")
            return got
        return None

    def _install_from_host_store(
        self, ctx: Any, src: _Source, key: str, meta: Mapping[str, Any], dest_dir: str
    ) -> Obtained:
        filename = str(meta["filename"])
        assert src.host_root is not None
        path = posixpath.join(src.host_root, entry_dir(key), filename)
        [res] = _place(
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

    def _host_dir(self, ctx: Any, dest_dir: str) -> str:
        """Create dest_dir on the host and return it as an absolute path (for SFTP puts)."""
        quoted = _shell_path(dest_dir)
        res = ctx.run(f"mkdir -p -- {quoted} && cd -- {quoted} && pwd", what="mkdir")
        lines = res.stdout.strip().splitlines()
        if not lines or not lines[-1].startswith("/"):
            raise HostFailed(
                f"{ctx.host.name}: creating {dest_dir} printed no directory: {res.stdout!r:.200}"
            )
        return lines[-1]

    def _install_from_store(
        self, ctx: Any, src: _Source, key: str, meta: Mapping[str, Any], dest_dir: str
    ) -> Obtained:
        with tempfile.TemporaryDirectory(prefix="sm120kit-wheel-") as tmp:
            local = src.store.fetch(key, tmp)  # checks sha256; CorruptEntry after quarantine
            folder = self._host_dir(ctx, dest_dir)
            part = posixpath.join(folder, f".{local.name}.part-{secrets.token_hex(6)}")
            ctx.log.info("put %s from %s -> %s", local.name, src.name, part)
            try:
                ctx.conn.put(local, part)
            except Sm120Error:
                raise
            except Exception as exc:
                raise HostFailed(f"copying {local.name} to {ctx.host.name} failed: {exc}") from None
            size = local.stat().st_size
            self._count("bytes_to_hosts", size)
            [res] = _place(
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
            if src.store is not self.controller and self.controller.name == CONTROLLER_STORE:
                self._keep_locally(ctx, key, local, meta)
        return Obtained(res["path"], res["sha256"], f"cache:{src.name}", key, bytes_moved=size)

    def _keep_locally(self, ctx: Any, key: str, wheel: Path, meta: Mapping[str, Any]) -> None:
        """A shared-store hit is also kept in the controller store (best effort)."""
        try:
            if self.controller.get_meta(key) is None:
                clean = {k: v for k, v in meta.items() if k not in ("hits", "last_used")}
                self.controller.put(key, wheel, clean)
        except Exception as exc:  # noqa: BLE001 - the wheel is on the host already
            ctx.log.warning("could not keep %s in the controller store: %s", key[:12], exc)

    # ---- build --------------------------------------------------------------------------

    def _slot(self, key: str) -> _Slot:
        with self._lock:
            return self._slots.setdefault(key, _Slot())

    def _obtain(
        self,
        ctx: Any,
        inputs: KeyInputs,
        key: str,
        build: Callable[[], BuiltWheel],
        dest_dir: str,
        sources: list[_Source],
        events: list[str],
    ) -> Obtained:
        name = ctx.host.name
        designated = str(ctx.host.vars.get(BUILD_HOST_VAR) or "")
        may_build = not designated or designated == name
        slot = self._slot(key)
        what = f"{inputs.package} (key {key[:12]})"
        started = time.monotonic()
        waited_for: str | None = None
        shown = ""
        strikes = 0  # looks in a row whose lookups failed after the designated host published
        while True:
            with slot.cond:
                seen = slot.finished
            failed: set[str] = set()
            got = self._try_cache(ctx, key, sources, dest_dir, events, failed)
            if got is not None:
                if waited_for:
                    got.events.append(f"{inputs.package}: waited for {waited_for}'s build")
                return got
            with slot.cond:
                if slot.finished != seen:
                    continue  # a build ended while we looked: look again
                failure = slot.failure
                if slot.builder is None and failure is not None:
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
                    elif not any(self._is_down(src.name) for src in sources):
                        strikes = 0
                    self._check_published(
                        slot.published, designated, sources, failed, strikes, name, what
                    )
                    elapsed = time.monotonic() - started
                    if elapsed > self.config.wait_timeout:
                        raise HostFailed(
                            f"{name}: host var {BUILD_HOST_VAR}={designated}: no wheel for "
                            f"{what} appeared in the cache within "
                            f"{self.config.wait_timeout:.0f}s"
                        )
                    builder = designated
                waited_for = builder
                detail = f"waiting for {builder}'s build"
                if not in_run:  # whole minutes, so the line changes once a minute at most
                    detail += f" ({elapsed // 60:.0f} of {self.config.wait_timeout / 60:.0f} min)"
                if detail != shown:  # progress lines only when the wait changes
                    shown = detail
                    ctx.log.info("wheel cache: %s %s", inputs.package, detail)
                    ctx.runner.progress.step(name, f"wheel {inputs.package}", detail)
                # An in-run builder wakes every waiter when it ends; until then a slow poll
                # only catches another run publishing the same key.
                slot.cond.wait(
                    max(self.config.poll_interval, IN_RUN_POLL)
                    if in_run
                    else self.config.poll_interval
                )
        return self._build_elected(ctx, inputs, key, build, dest_dir, sources, events, slot)

    def _check_published(
        self,
        published: _Published | None,
        designated: str,
        sources: list[_Source],
        failed: set[str],
        strikes: int,
        name: str,
        what: str,
    ) -> None:
        """Fail at once when the designated host built in this run but the wheel is out of reach.

        Waiting is worth it only while a store the builder published to is in its back-off
        or failed this one look (both are asked again soon, a failing look a few times at
        most); after a clean miss in every such store no later look can find it.
        """
        if published is None or published.host != designated:
            return
        mine = {s.name for s in sources}
        shared = [n for n in published.stores if n in mine]
        retry = [n for n in shared if self._is_down(n) or n in failed]
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
            f"{name}: host var {BUILD_HOST_VAR}={designated}: {designated} built {what} in "
            f"this run, but {where}"
        )

    def _build_elected(
        self,
        ctx: Any,
        inputs: KeyInputs,
        key: str,
        build: Callable[[], BuiltWheel],
        dest_dir: str,
        sources: list[_Source],
        events: list[str],
        slot: _Slot,
    ) -> Obtained:
        """This thread won the in-run election: build under the cross-run lock."""
        try:
            got = self._build_locked(ctx, inputs, key, build, dest_dir, sources, events)
        except BaseException as exc:
            with slot.cond:
                slot.builder = None
                slot.finished += 1
                # A lost builder says nothing about the build: let the next waiter try.
                slot.failure = _Failure(
                    ctx.host.name,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    fatal=not isinstance(exc, HostUnreachable),
                )
                slot.cond.notify_all()
            raise
        with slot.cond:
            slot.builder = None
            slot.finished += 1
            slot.failure = None
            if got.wheel_from == "build":
                slot.published = _Published(ctx.host.name, list(got.stored_in))
            slot.cond.notify_all()
        return got

    def _build_locked(
        self,
        ctx: Any,
        inputs: KeyInputs,
        key: str,
        build: Callable[[], BuiltWheel],
        dest_dir: str,
        sources: list[_Source],
        events: list[str],
    ) -> Obtained:
        lock = self._lock_source(sources)
        owner = LockOwner.current(run_id=self.run_id)
        held = False
        if lock is not None:
            held, got = self._take_lock(ctx, inputs, key, lock, owner, sources, dest_dir, events)
            if got is not None:
                return got
        try:
            if held:
                # Another run may have stored it between our lookup and the lock.
                got = self._try_cache(ctx, key, sources, dest_dir, events)
                if got is not None:
                    return got
            with self._refreshing(lock if held else None, key, owner):
                ctx.runner.progress.step(ctx.host.name, f"wheel {inputs.package}", "building")
                built = build()
            self._count("builds")
            return self._store_built(ctx, inputs, key, built, dest_dir, sources, events)
        finally:
            if held and lock is not None:
                try:
                    lock.store.release(key, owner)
                except Exception as exc:  # noqa: BLE001 - a stale lock times out anyway
                    ctx.log.warning("could not release cache lock %s: %s", key[:12], exc)

    def _take_lock(
        self,
        ctx: Any,
        inputs: KeyInputs,
        key: str,
        lock: _Source,
        owner: LockOwner,
        sources: list[_Source],
        dest_dir: str,
        events: list[str],
    ) -> tuple[bool, Obtained | None]:
        """(True, None) once held; (False, hit) when another run's build showed up first."""
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
                    self._mark_down(lock.store.name, exc, events)
                events.append(
                    f"{key[:12]}: built without a cross-run lock ({lock.store.name}: "
                    f"{_one_line(exc)})"
                )
                return False, None
            who = (
                f"{holder.get('user', '?')}@{holder.get('host', '?')} pid {holder.get('pid', '?')}"
            )
            if not announced:
                announced = True
                ctx.log.info("cache lock %s held by %s; waiting", key[:12], who)
                ctx.runner.progress.step(
                    ctx.host.name, f"wheel {inputs.package}", f"another run builds it ({who})"
                )
            time.sleep(self.config.poll_interval)
            got = self._try_cache(ctx, key, sources, dest_dir, events)
            if got is not None:
                got.events.append(f"{inputs.package}: waited for another run's build ({who})")
                return False, got
            if time.monotonic() > deadline:
                raise HostFailed(
                    f"{inputs.package} (key {key[:12]}) is being built by another run ({who}) "
                    f"for over {self.config.wait_timeout:.0f}s; its lock in {lock.store.name} "
                    f"goes stale after {self.config.stale_lock_after:.0f}s"
                )

    @contextmanager
    def _refreshing(self, lock: _Source | None, key: str, owner: LockOwner) -> Iterator[None]:
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

    def _store_built(
        self,
        ctx: Any,
        inputs: KeyInputs,
        key: str,
        built: BuiltWheel,
        dest_dir: str,
        sources: list[_Source],
        events: list[str],
    ) -> Obtained:
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
            local = Path(tmp) / filename
            try:
                ctx.conn.get(built.path, local)
            except Sm120Error:
                raise
            except Exception as exc:
                raise HostFailed(
                    f"fetching {built.path} from {ctx.host.name} failed: {exc}"
                ) from None
            moved = local.stat().st_size
            self._count("bytes_from_hosts", moved)
            got = file_sha256(local)
            if got != built.sha256:
                raise HostFailed(
                    f"{built.path} on {ctx.host.name}: sha256 {got[:12]} != the build's "
                    f"{built.sha256[:12]}"
                )
            stored: list[str] = []
            for src in sources:
                # A store in its back-off is still tried: publishing matters more than a
                # lookup, and one put is the cheapest way to learn that it is back.
                if src.host_root is not None:
                    continue
                try:
                    src.store.put(key, local, meta)
                except Exception as exc:  # noqa: BLE001 - other stores still get it
                    ctx.log.warning("put of %s into %s failed", key[:12], src.name, exc_info=True)
                    if unreachable(exc):
                        self._mark_down(src.name, exc, events)
                    events.append(f"{key[:12]}: not stored in {src.name} ({_one_line(exc)})")
                    continue
                self._mark_up(src.name, events)
                stored.append(src.name)
        host = next((s for s in sources if s.host_root is not None), None)
        ops = [{"src": built.path, "dir": dest_dir, "name": filename, "sha256": built.sha256}]
        if host is not None:
            assert host.host_root is not None
            host.store.delete_blob(f"{entry_dir(key)}/{META_NAME}")
            entry = posixpath.join(host.host_root, entry_dir(key))
            ops.append({"src": built.path, "dir": entry, "name": filename, "sha256": built.sha256})
        results = _place(ctx, ops)
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


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _add_event(events: list[str], event: str) -> None:
    """Record an event once per lookup: a waiter that polls must not repeat the same line."""
    if event not in events:
        events.append(event)


# ---- one cache per run ------------------------------------------------------------------------

_RUNNER_LOCK = threading.Lock()


def cache_for(runner: Any, settings: Mapping[str, Any] | None = None) -> WheelCache:
    """The WheelCache of a Runner, created on first use (thread-safe).

    Settings come from ``settings``, else ``runner.settings`` (the CLI's ``settings(c)``),
    else invoke's config files and ``INVOKE_SM120KIT_*`` env read from the project directory.
    """
    with _RUNNER_LOCK:
        cache: WheelCache | None = getattr(runner, "wheel_cache", None)
        if cache is None:
            conf = settings if settings is not None else getattr(runner, "settings", None)
            if conf is None:
                conf = discover_settings()
            run_id = runner.run_dir.name if getattr(runner, "run_dir", None) else ""
            cache = WheelCache(
                CacheConfig.from_settings(conf), connect=runner.options.connect, run_id=run_id
            )
            runner.wheel_cache = cache
            # Shared stores hold SSH connections: end them when the runner goes away.
            weakref.finalize(runner, cache.close)
        return cache


def discover_settings() -> dict[str, Any]:
    """The ``sm120kit`` section as invoke would load it for the tasks' project directory."""
    import invoke

    tasks_file = getattr(sys.modules.get("tasks"), "__file__", None)
    project = os.path.dirname(os.path.abspath(tasks_file)) if tasks_file else os.getcwd()
    config = invoke.Config(project_location=project)  # type: ignore[arg-type]
    config.load_project()
    config.load_shell_env()
    section = config.get("sm120kit", {}) or {}
    return {k: v for k, v in dict(section).items()}


# ---- cache.* commands -------------------------------------------------------------------------


def command_stores(c: Any, store: str | None) -> list[Store]:
    """The controller store and invoke.yaml's shared stores, or only ``--store NAME``."""
    from .cli import settings

    conf = settings(c)
    config = CacheConfig.from_settings(conf)
    options = connect_options(conf)
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


def _close_all(stores: list[Store]) -> None:
    for store in stores:
        try:
            store.close()
        except Exception:  # noqa: BLE001
            pass


def _fail_exit(doc: Mapping[str, Any], bad: int) -> None:
    if bad:
        from invoke.exceptions import Exit

        from .cli import EXIT_HOST_FAILED

        raise Exit(code=EXIT_HOST_FAILED)


def list_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.list`: one row per entry and store. JSON: {"stores": [...],
    "entries": [{package, version, key, full_key, arch, cuda, torch, size, age, hits, store,
    filename}]}."""
    from .output import listings
    from .output.console import show_document

    stores = command_stores(c, store)
    try:
        doc = {"stores": [s.name for s in stores], "entries": manage.list_entries(stores)}
    finally:
        _close_all(stores)

    show_document(doc, json_output, listings.cache_list)


def verify_command(c: Any, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.verify`: check every entry's sha256; corrupt ones are quarantined.

    JSON: {"stores", "entries": [{store, key, status: ok|corrupt, reason}], "ok": n,
    "corrupt": n}. Exit status 2 when an entry was corrupt.
    """
    from .output import listings
    from .output.console import show_document

    stores = command_stores(c, store)
    try:
        rows = manage.verify(stores)
    finally:
        _close_all(stores)
    bad = sum(1 for r in rows if r["status"] != "ok")
    doc = {
        "stores": [s.name for s in stores],
        "entries": rows,
        "ok": len(rows) - bad,
        "corrupt": bad,
    }

    show_document(doc, json_output, listings.cache_verify)
    _fail_exit(doc, bad)


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


def prune_command(
    c: Any,
    *,
    json_output: bool,
    older_than_days: float | None,
    keep: int | None,
    max_size: str | None,
    store: str | None,
) -> None:
    """`invoke cache.prune`: drop entries older than N days, beyond the newest N per package,
    or least recently used ones until the store fits --max-size. Killed puts older than
    stale_lock_after go too. JSON: {"removed": [{store, key, package, version, size,
    incomplete}], "freed_bytes": n}."""
    from .cli import settings
    from .output import listings
    from .output.console import show_document

    limit = parse_size(max_size)
    if older_than_days is None and keep is None and limit is None:
        raise CacheError("cache.prune: give --older-than DAYS, --keep N or --max-size SIZE")
    config = CacheConfig.from_settings(settings(c))
    stores = command_stores(c, store)
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
        _close_all(stores)
    doc = {"removed": removed, "freed_bytes": sum(r["size"] for r in removed)}

    show_document(doc, json_output, listings.cache_prune)


def export_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.export DIR`: every wheel, flat, plus index.json; usable offline with
    ``pip install --no-index --find-links DIR``. JSON: {"directory", "exported": [{key,
    filename, store, package, version}], "skipped": [...]}."""
    from .output import listings
    from .output.console import show_document

    if not directory:
        raise CacheError("cache.export: give the directory to write (invoke cache.export DIR)")
    stores = command_stores(c, store)
    try:
        result = manage.export_dir(stores, directory)
    finally:
        _close_all(stores)

    def row(r: Mapping[str, Any]) -> dict[str, Any]:
        inputs = r["meta"].get("inputs") or {}
        return {
            "key": r["key"],
            "filename": r["filename"],
            "store": r["store"],
            "package": inputs.get("package", "?"),
            "version": inputs.get("version", "?"),
        }

    doc = {
        "directory": str(Path(directory).resolve()),
        "exported": [row(r) for r in result["exported"]],
        "skipped": [row(r) for r in result["skipped"]],
    }

    show_document(doc, json_output, listings.cache_export)


def import_command(c: Any, directory: str | None, *, json_output: bool, store: str | None) -> None:
    """`invoke cache.import DIR`: put an exported directory's wheels back under their keys,
    into ``--store`` (default: the controller store). JSON: {"directory", "store",
    "imported": [keys], "present": [keys], "corrupt": [file names]}; exit 2 if any corrupt."""
    from .output import listings
    from .output.console import show_document

    if not directory:
        raise CacheError("cache.import: give the directory to read (invoke cache.import DIR)")
    [target] = command_stores(c, store or CONTROLLER_STORE)
    try:
        result = manage.import_dir(directory, target)
    finally:
        _close_all([target])
    doc = {"directory": str(Path(directory).resolve()), "store": target.name, **result}

    show_document(doc, json_output, listings.cache_import)
    _fail_exit(doc, len(result["corrupt"]))
