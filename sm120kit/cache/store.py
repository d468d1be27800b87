"""Wheel stores: the entry/lock logic over a few blob primitives, and the local directory store.

A backend implements only bytes-in/bytes-out primitives on store-relative paths (read, atomic
write, atomic file upload, download, list, delete, exclusive create, rename); everything else
(entry layout, sha256 checks, quarantine, hits, locks) lives in :class:`Store` and is shared.

Entry layout, the same in every store (``key`` is 64 hex chars)::

    <key[:2]>/<key>/<wheel filename>     the wheel
    <key[:2]>/<key>/meta.json            written LAST: an entry without it does not exist
    <key[:2]>/<key>/hits.json            best-effort use counter {"hits": n, "last_used": t}
    locks/<key>.lock                     owner record of whoever builds that key
    quarantine/<key>-<stamp>-<rand>/     a corrupt entry moved aside, with reason.json
"""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import socket
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from sm120kit.cache.filecopy import copy_in_kernel, copy_past_cache
from sm120kit.cache.key import CACHE_FORMAT_VERSION
from sm120kit.errors import Sm120Error
from sm120kit.runner.controller import dead_here, identity

from .key import RELEASE_TAG, KeyInputs, compute_key

log = logging.getLogger(__name__)

META_NAME = "meta.json"
HITS_NAME = "hits.json"
LOCKS_DIR = "locks"
QUARANTINE_DIR = "quarantine"
#: A lock older than this is presumed left by a dead run and may be taken over.
DEFAULT_STALE_AFTER = 2 * 3600.0
#: A takeover claim is held for a few store calls; older ones were left by a killed breaker.
CLAIM_STALE_AFTER = 300.0

_KEY = re.compile(r"^[0-9a-f]{64}$")
_LOCK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_META_PATH = re.compile(r"^([0-9a-f]{2})/([0-9a-f]{64})/meta\.json$")
_ENTRY_FILE = re.compile(r"^([0-9a-f]{2})/([0-9a-f]{64})/[^/]+$")


class CacheError(Sm120Error):
    """A cache store is misconfigured or unusable."""


class EntryMissing(CacheError):
    """No complete entry for this key in this store."""


class StoreUnavailable(CacheError):
    """The store cannot be reached now (connection refused, timeout, credentials refused).

    Only this kind of error makes the wheel cache skip a store, and then only for a back-off
    period: a bad or half-seen entry is a miss (or a quarantine), never a reason to stop
    asking the store.
    """


#: Error classes of paramiko and botocore that mean "cannot reach the store", by name so that
#: neither library has to be importable here.
_UNREACHABLE_NAMES = frozenset(
    {
        "SSHException",
        "NoValidConnectionsError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "NoCredentialsError",
        "PartialCredentialsError",
    }
)


def unreachable(exc: BaseException) -> bool:
    """Whether a store's error means the store cannot be reached (vs. a bad entry or a bug)."""
    if isinstance(exc, (StoreUnavailable, ConnectionError, TimeoutError, socket.timeout)):
        return True
    if isinstance(exc, EOFError):  # an SFTP session that the server closed under us
        return True
    return any(cls.__name__ in _UNREACHABLE_NAMES for cls in type(exc).__mro__)


class CorruptEntry(CacheError):
    """An entry failed its checks; it has been quarantined, so refetch or rebuild."""

    def __init__(self, store: str, key: str, reason: str) -> None:
        super().__init__(f"cache {store}: entry {key[:12]} corrupt ({reason}); quarantined")
        self.store = store
        self.key = key
        self.reason = reason


class BlobInfo(NamedTuple):
    """One stored file: store-relative path ('/'-separated), size in bytes, mtime (epoch s)."""

    path: str
    size: int
    mtime: float


@dataclass
class LockOwner:
    """Who holds a lock. ``token`` tells this holder apart from a reused pid/host.

    ``boot_id`` and ``pid_start`` (see sm120kit/runner/controller.py) let a later run on the same
    controller tell for certain that the holder's process is gone.
    """

    host: str
    pid: int
    user: str
    run_id: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    boot_id: str = ""
    pid_start: str = ""

    @classmethod
    def current(cls, run_id: str = "") -> LockOwner:
        """The owner record of this controller process."""
        try:
            user = os.getlogin()
        except OSError:
            user = os.environ.get("USER", "") or str(os.getuid())
        me = identity()
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            user=user,
            run_id=run_id,
            boot_id=me["boot_id"],
            pid_start=me["pid_start"],
        )


def check_key(key: str) -> str:
    """Return key if it is a cache key (64 lowercase hex chars), else raise CacheError."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise CacheError(f"cache key {key!r}: expected 64 lowercase hex characters")
    return key


def entry_dir(key: str) -> str:
    """Store-relative directory of an entry."""
    return f"{key[:2]}/{check_key(key)}"


def _lock_path(name: str) -> str:
    if not _LOCK_NAME.match(name):
        raise CacheError(f"lock name {name!r}: use letters, digits, '.', '_' and '-'")
    return f"{LOCKS_DIR}/{name}.lock"


def _sha256_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _check_wheel_name(name: str) -> str:
    if not name.endswith(".whl") or "/" in name or "\\" in name or name.startswith("."):
        raise CacheError(f"wheel file name {name!r}: expected a plain '*.whl' file name")
    return name


class Store(ABC):
    """A wheel store. Subclasses implement the ``*_blob`` primitives; the rest is shared.

    Paths given to primitives are store-relative and '/'-separated. Primitives that write must
    be atomic: a reader sees either the old content, the new content, or (for new paths)
    nothing, never a partial file.
    """

    name: str

    # ---- backend primitives -------------------------------------------------------------

    @abstractmethod
    def read_blob(self, path: str) -> bytes | None:
        """Whole content of a small blob, or None when absent."""

    @abstractmethod
    def write_blob(self, path: str, data: bytes) -> None:
        """Atomically create or replace a small blob (creating parent directories)."""

    @abstractmethod
    def upload_blob(self, path: str, src: Path) -> None:
        """Atomically create or replace a blob with a local file's content."""

    def upload_wheel(self, path: str, src: Path, *, link: bool) -> None:
        """`upload_blob` of a wheel; a store on this machine's disk may hard-link it (`link`)."""
        self.upload_blob(path, src)

    @abstractmethod
    def download_blob(self, path: str, dest: Path) -> bool:
        """Copy a blob to a local file path; False when the blob is absent."""

    def download_url(self, path: str) -> str | None:
        """A URL a host can download the blob from itself, without this process relaying its
        bytes (a presigned S3 URL), or None: this store has none."""
        return None

    @abstractmethod
    def list_blobs(self, prefix: str = "") -> list[BlobInfo]:
        """Every blob under a store-relative directory ('' = the whole store), recursively."""

    @abstractmethod
    def delete_blob(self, path: str) -> None:
        """Remove a blob; absent is fine."""

    @abstractmethod
    def create_blob_exclusive(self, path: str, data: bytes) -> bool:
        """Create a blob with its full content only if absent; False when it already exists."""

    @abstractmethod
    def rename_blob(self, src: str, dst: str) -> bool:
        """Move a blob to a new (absent) path; False when ``src`` is absent (quarantine)."""

    def blob_digest(self, path: str) -> tuple[str, int] | None:
        """(sha256 hex, size) of a blob, or None when absent. Default: download and hash."""
        with tempfile.TemporaryDirectory(prefix="sm120kit-verify-") as tmp:
            local = Path(tmp) / "blob"
            if not self.download_blob(path, local):
                return None
            return _sha256_file(local)

    def replace_blob_if(self, path: str, expected: bytes, data: bytes) -> bool:
        """Replace a blob only if its content is still ``expected``; True when replaced.

        Default: first claim this exact old content by exclusively creating
        ``<path>.claim-<sha256(expected)>``, so of many racers breaking the same stale lock
        only one proceeds; it re-reads the blob and overwrites it atomically. The blob is
        never absent meanwhile, so a plain acquire cannot slip in. The one window left: the
        old holder itself releasing or refreshing between that re-read and the overwrite,
        i.e. a holder that outlived ``stale_after`` without refreshing.
        """
        claim = f"{path}.claim-{hashlib.sha256(expected).hexdigest()[:16]}"
        if not self.create_blob_exclusive(claim, _dumps({"time": time.time()})):
            self._clear_dead_claim(claim)
            return False
        try:
            if self.read_blob(path) != expected:
                return False
            self.write_blob(path, data)
            return True
        finally:
            self.delete_blob(claim)

    def _clear_dead_claim(self, claim: str) -> None:
        # A claim outlives its breaker only if that process died within a few calls; without
        # this the stale lock it was breaking could never be broken again.
        held = _parse_lock(self.read_blob(claim) or b"{}")
        if time.time() - held["time"] > CLAIM_STALE_AFTER:
            self.delete_blob(claim)

    def remove_empty_dirs(self, prefix: str) -> None:
        """Drop now-empty directories at and above a prefix; no-op for flat stores (S3)."""
        return

    def close(self) -> None:
        """Release connections; the store must not be used afterwards."""
        return

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # ---- entries ------------------------------------------------------------------------

    def get_meta(self, key: str) -> dict[str, Any] | None:
        """The meta of a complete entry, or None. Raises CorruptEntry for an unreadable meta."""
        raw = self.read_blob(f"{entry_dir(key)}/{META_NAME}")
        if raw is None:
            return None
        try:
            meta = json.loads(raw)
            if not isinstance(meta, dict):
                raise ValueError("not an object")
            _check_wheel_name(str(meta["filename"]))
            str(meta["sha256"])
            int(meta["size"])
        except (ValueError, KeyError, TypeError, CacheError) as exc:
            reason = f"unreadable meta.json: {type(exc).__name__}: {exc}"
            self.quarantine(key, reason)
            raise CorruptEntry(self.name, key, reason) from None
        reason = key_unproven(meta, key)
        if reason:
            # An entry copied (or written) under another key's directory would otherwise be
            # served for that key: a wheel built from other inputs, with a matching sha256.
            self.quarantine(key, reason)
            raise CorruptEntry(self.name, key, reason)
        return meta

    def keys(self) -> list[str]:
        """Keys of every complete entry (those with a meta.json), sorted."""
        found = set()
        for blob in self.list_blobs():
            m = _META_PATH.match(blob.path)
            if m and m.group(2).startswith(m.group(1)):
                found.add(m.group(2))
        return sorted(found)

    def incomplete(self) -> dict[str, float]:
        """Entry dirs without meta.json (killed or running puts): key -> newest file mtime."""
        newest: dict[str, float] = {}
        complete: set[str] = set()
        for blob in self.list_blobs():
            m = _ENTRY_FILE.match(blob.path)
            if not m:
                continue
            key = m.group(2)
            if blob.path.endswith("/" + META_NAME):
                complete.add(key)
            newest[key] = max(newest.get(key, 0.0), blob.mtime)
        return {k: t for k, t in newest.items() if k not in complete}

    def list(self) -> list[dict[str, Any]]:
        """Meta of every complete entry, with ``hits``/``last_used`` merged in.

        Corrupt metas are quarantined and left out (``verify`` reports them).
        """
        rows = []
        for key in self.keys():
            try:
                meta = self.get_meta(key)
            except CorruptEntry as exc:
                log.warning("%s", exc)
                continue
            if meta is None:
                continue
            meta.update(self._read_hits(key))
            rows.append(meta)
        return rows

    def put(
        self,
        key: str,
        wheel_path: str | os.PathLike[str],
        meta: Mapping[str, Any],
        *,
        link: bool = False,
        digest: tuple[str, int] | None = None,
    ) -> dict:
        """Store a wheel under a key; returns the meta written.

        `link`: the file is one nobody rewrites (a host's own copy of a released file, a
        fetched build), so a store on this machine's disk may hard-link it rather than copy
        it. `digest`: its (sha256, size) when the caller has just checked them.

        ``meta`` carries the caller's fields (``inputs``, ``build_seconds``, ``builder_host``,
        ``log_path``, ...); ``key``, ``filename``, ``sha256``, ``size`` and ``format_version``
        are filled in here, and ``created`` (epoch seconds) unless the caller gives it (an
        import or a copy between stores keeps the original). The wheel goes first and meta.json last, so a
        put killed midway leaves no entry. A previous entry under the key is replaced.
        """
        src = Path(wheel_path)
        filename = _check_wheel_name(src.name)
        base = entry_dir(key)
        sha256, size = digest or _sha256_file(src)
        # Hide any previous entry first: from here until meta.json is back, the key is absent.
        self.delete_blob(f"{base}/{META_NAME}")
        self.upload_wheel(f"{base}/{filename}", src, link=link)
        for blob in self.list_blobs(base):
            name = blob.path.rsplit("/", 1)[-1]
            if name.endswith(".whl") and name != filename:
                self.delete_blob(blob.path)
        full = dict(meta)
        full.update(
            key=key,
            filename=filename,
            sha256=sha256,
            size=size,
            created=float(meta.get("created") or time.time()),
            format_version=CACHE_FORMAT_VERSION,
        )
        full.pop("hits", None)
        full.pop("last_used", None)
        self.write_blob(f"{base}/{META_NAME}", _dumps(full))
        return full

    def fetch(self, key: str, dest_dir: str | os.PathLike[str], count_hit: bool = True) -> Path:
        """Copy an entry's wheel into dest_dir and return its path.

        Raises EntryMissing when absent; CorruptEntry (after quarantining) when the wheel is
        missing or its sha256/size differ from meta.json.
        """
        meta = self.get_meta(key)
        if meta is None:
            raise EntryMissing(f"cache {self.name}: no entry {key[:12]}")
        filename = meta["filename"]
        dest = Path(dest_dir)
        dest.mkdir(parents=True, exist_ok=True)
        part = dest / f".{filename}.part-{secrets.token_hex(6)}"
        try:
            if not self.download_blob(f"{entry_dir(key)}/{filename}", part):
                reason = f"wheel {filename} missing"
            else:
                got_sha, got_size = _sha256_file(part)
                reason = _mismatch(meta, got_sha, got_size)
            if reason:
                if self._replaced(key, meta):
                    # A put of the same key ran between our meta read and the download: the
                    # entry is new, not corrupt. A miss now; the next look finds it whole.
                    raise EntryMissing(
                        f"cache {self.name}: entry {key[:12]} was replaced while being read"
                    )
                self.quarantine(key, reason)
                raise CorruptEntry(self.name, key, reason)
            final = dest / filename
            os.replace(part, final)
        finally:
            part.unlink(missing_ok=True)
        if count_hit:
            self.record_hit(key)
        return final

    def _replaced(self, key: str, meta: Mapping[str, Any]) -> bool:
        """Whether the entry's meta.json no longer describes the wheel ``meta`` did."""
        raw = self.read_blob(f"{entry_dir(key)}/{META_NAME}")
        try:
            now = json.loads(raw) if raw else None
        except ValueError:
            return True
        return not isinstance(now, dict) or now.get("sha256") != meta.get("sha256")

    def verify_entry(self, key: str) -> None:
        """Check an entry's wheel against its meta; quarantine and raise CorruptEntry if bad."""
        meta = self.get_meta(key)
        if meta is None:
            raise EntryMissing(f"cache {self.name}: no entry {key[:12]}")
        got = self.blob_digest(f"{entry_dir(key)}/{meta['filename']}")
        reason = f"wheel {meta['filename']} missing" if got is None else _mismatch(meta, *got)
        if reason:
            self.quarantine(key, reason)
            raise CorruptEntry(self.name, key, reason)

    def delete(self, key: str) -> None:
        """Remove an entry (meta.json first, so it vanishes at once) and its leftovers."""
        base = entry_dir(key)
        self.delete_blob(f"{base}/{META_NAME}")
        for blob in self.list_blobs(base):
            self.delete_blob(blob.path)
        self.remove_empty_dirs(base)

    def quarantine(self, key: str, reason: str) -> str:
        """Move an entry under quarantine/ with a reason.json; returns the quarantine dir."""
        base = entry_dir(key)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        qdir = f"{QUARANTINE_DIR}/{key}-{stamp}-{secrets.token_hex(3)}"
        # meta.json first: the entry stops existing before anything else moves.
        names = [b.path.rsplit("/", 1)[-1] for b in self.list_blobs(base)]
        names.sort(key=lambda n: n != META_NAME)
        for name in names:
            self.rename_blob(f"{base}/{name}", f"{qdir}/{name}")
        record = {"key": key, "reason": reason, "time": time.time(), "store": self.name}
        self.write_blob(f"{qdir}/reason.json", _dumps(record))
        self.remove_empty_dirs(base)
        log.warning("cache %s: quarantined %s: %s", self.name, key[:12], reason)
        return qdir

    def quarantined(self) -> builtins.list[dict[str, Any]]:
        """The reason.json records of quarantined entries, with their ``dir``."""
        rows = []
        for blob in self.list_blobs(QUARANTINE_DIR):
            if blob.path.endswith("/reason.json"):
                raw = self.read_blob(blob.path)
                try:
                    record = json.loads(raw or b"{}")
                except ValueError:
                    record = {}
                record["dir"] = blob.path.rsplit("/", 1)[0]
                rows.append(record)
        return rows

    def record_hit(self, key: str) -> None:
        """Count one use of an entry. Best-effort: concurrent hits may be lost, errors ignored."""
        path = f"{entry_dir(key)}/{HITS_NAME}"
        try:
            hits = int(self._read_hits(key).get("hits", 0)) + 1
            self.write_blob(path, _dumps({"hits": hits, "last_used": time.time()}))
        except Exception as exc:  # noqa: BLE001 - a lost hit must never fail a fetch
            log.debug("cache %s: hit not recorded for %s: %s", self.name, key[:12], exc)

    def _read_hits(self, key: str) -> dict[str, Any]:
        raw = self.read_blob(f"{entry_dir(key)}/{HITS_NAME}")
        try:
            data = json.loads(raw) if raw else {}
            return {"hits": int(data.get("hits", 0)), "last_used": data.get("last_used")}
        except (ValueError, TypeError, AttributeError):
            return {"hits": 0, "last_used": None}

    # ---- locks --------------------------------------------------------------------------

    def acquire(self, key: str, owner: LockOwner, stale_after: float = DEFAULT_STALE_AFTER) -> bool:
        """Take the lock ``locks/<key>.lock``; True when this owner holds it now.

        A lock older than ``stale_after`` seconds (by its recorded time) is taken over, and so
        is one recorded by this same controller (host name and boot id) whose process is gone
        (logged as a warning). Re-acquiring a lock this owner (same token) already holds
        succeeds.
        """
        path = _lock_path(key)
        for _ in range(4):
            record = _dumps({**asdict(owner), "time": time.time()})
            if self.create_blob_exclusive(path, record):
                return True
            raw = self.read_blob(path)
            if raw is None:
                continue  # released between our two calls: try again
            held = _parse_lock(raw)
            if held.get("token") == owner.token:
                return True
            if dead_here(held, controller_key="host"):
                log.warning(
                    "cache %s: taking over lock %s: its holder, pid %s on this controller, is gone",
                    self.name,
                    key,
                    held.get("pid"),
                )
            elif time.time() - float(held.get("time", 0.0)) < stale_after:
                return False
            else:
                log.warning("cache %s: taking over stale lock %s held by %s", self.name, key, held)
            if self.replace_blob_if(path, raw, record):
                return True
        return False

    def release(self, key: str, owner: LockOwner) -> bool:
        """Drop the lock if this owner holds it; False when someone else (or no one) does."""
        path = _lock_path(key)
        raw = self.read_blob(path)
        if raw is None or _parse_lock(raw).get("token") != owner.token:
            return False
        self.delete_blob(path)
        return True

    def refresh(self, key: str, owner: LockOwner) -> bool:
        """Renew the time of a lock this owner holds (for builds longer than stale_after)."""
        path = _lock_path(key)
        raw = self.read_blob(path)
        if raw is None or _parse_lock(raw).get("token") != owner.token:
            return False
        return self.replace_blob_if(path, raw, _dumps({**asdict(owner), "time": time.time()}))

    def holder(self, key: str) -> dict[str, Any] | None:
        """The owner record of a held lock (host, pid, user, run_id, time), or None."""
        raw = self.read_blob(_lock_path(key))
        if raw is None:
            return None
        held = _parse_lock(raw)
        held.pop("token", None)
        return held


def _dumps(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, indent=1).encode("utf-8")


def _parse_lock(raw: bytes) -> dict[str, Any]:
    # An unparseable lock cannot be told apart from a dead one: its time 0 makes it stale.
    try:
        held = json.loads(raw)
        if isinstance(held, dict):
            held["time"] = float(held.get("time", 0.0))
            return held
    except (ValueError, TypeError):
        pass
    return {"time": 0.0}


def key_unproven(meta: Mapping[str, Any], key: str) -> str:
    """Why `meta` does not prove it belongs under `key` ("" when it does): its own ``key``
    must be `key`, and its recorded ``inputs`` must hash to `key`."""

    named = meta.get("key")
    if named != key:
        return f"meta.json names key {str(named)[:12]}, found under {key[:12]}"
    inputs = meta.get("inputs")
    if not isinstance(inputs, Mapping):
        return "meta.json records no inputs to prove its key"
    try:
        hashed = compute_key(KeyInputs.from_dict(inputs))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"meta.json's inputs are unreadable ({type(exc).__name__}: {exc})"
    if hashed != key:
        return f"meta.json's inputs hash to {hashed[:12]}, not to its key {key[:12]}"
    # A released file's key is its sha256: the entry's recorded sha256 (which serving, placing
    # and verify check the bytes against) must be that one, or another valid wheel with a
    # meta.json edited to match would be served for the lock's file.
    digest = str(inputs.get("source_digest") or "")
    if digest.startswith(RELEASE_TAG) and str(meta.get("sha256")) != digest[len(RELEASE_TAG) :]:
        return (
            f"released file's sha256 {str(meta.get('sha256'))[:12]} is not its key's"
            f" {digest[len(RELEASE_TAG) :][:12]}"
        )
    return ""


def _mismatch(meta: Mapping[str, Any], sha256: str, size: int) -> str:
    if sha256 != meta["sha256"]:
        return f"sha256 {sha256[:12]} != meta {str(meta['sha256'])[:12]}"
    if size != int(meta["size"]):
        return f"size {size} != meta {meta['size']}"
    return ""


def default_local_root() -> Path:
    """``$XDG_CACHE_HOME/sm120kit/wheels``, else ``~/.cache/sm120kit/wheels``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says a relative value is invalid and must be ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "sm120kit" / "wheels"


class LocalStore(Store):
    """A store in a local directory (the controller's cache)."""

    def __init__(self, root: str | os.PathLike[str] | None = None, name: str | None = None):
        self.root = Path(root).expanduser() if root is not None else default_local_root()
        self.name = name or str(self.root)

    def _p(self, path: str) -> Path:
        if path.startswith("/") or ".." in path.split("/"):
            raise CacheError(f"cache {self.name}: bad store path {path!r}")
        return self.root / path

    def _temp_beside(self, target: Path) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        return target.with_name(f".tmp-{target.name}-{secrets.token_hex(6)}")

    def read_blob(self, path: str) -> bytes | None:
        try:
            return self._p(path).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _write_temp(self, target: Path, fill: Callable[[Any], None]) -> Path:
        tmp = self._temp_beside(target)
        try:
            with open(tmp, "xb") as fh:
                fill(fh)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def write_blob(self, path: str, data: bytes) -> None:
        target = self._p(path)
        os.replace(self._write_temp(target, lambda fh: fh.write(data)), target)

    def upload_blob(self, path: str, src: Path) -> None:
        target = self._p(path)
        tmp = self._temp_beside(target)
        if copy_past_cache(src, tmp):
            os.replace(tmp, target)
            return

        def fill(fh: Any) -> None:
            with open(src, "rb") as sfh:
                copy_in_kernel(sfh, fh)

        os.replace(self._write_temp(target, fill), target)

    def upload_wheel(self, path: str, src: Path, *, link: bool) -> None:
        if link:
            target = self._p(path)
            tmp = self._temp_beside(target)
            try:
                os.link(src, tmp)
            except OSError:
                pass  # another filesystem (or no links there): copied below
            else:
                os.replace(tmp, target)
                return
        self.upload_blob(path, src)

    def download_blob(self, path: str, dest: Path) -> bool:
        try:
            shutil.copyfile(self._p(path), dest)
        except (FileNotFoundError, NotADirectoryError):
            if not self._p(path).exists():
                return False
            raise
        return True

    def blob_digest(self, path: str) -> tuple[str, int] | None:
        try:
            return _sha256_file(self._p(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list_blobs(self, prefix: str = "") -> list[BlobInfo]:
        top = self._p(prefix) if prefix else self.root
        found = []
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                full = Path(dirpath) / name
                try:
                    st = full.stat()
                except FileNotFoundError:
                    continue  # removed while we walked
                found.append(
                    BlobInfo(full.relative_to(self.root).as_posix(), st.st_size, st.st_mtime)
                )
        return sorted(found)

    def delete_blob(self, path: str) -> None:
        self._p(path).unlink(missing_ok=True)

    def create_blob_exclusive(self, path: str, data: bytes) -> bool:
        target = self._p(path)
        tmp = self._write_temp(target, lambda fh: fh.write(data))
        try:
            # link() fails if the target exists and shows the full content at once; a bare
            # O_EXCL create would let a reader see an empty lock between create and write.
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        except OSError:
            return self._create_excl_fallback(target, data)
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _create_excl_fallback(target: Path, data: bytes) -> bool:
        # Filesystems without hard links: O_EXCL is still exclusive, only not content-atomic.
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return True

    def rename_blob(self, src: str, dst: str) -> bool:
        target = self._p(dst)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(self._p(src), target)
        except FileNotFoundError:
            return False
        return True

    def remove_empty_dirs(self, prefix: str) -> None:
        here = self._p(prefix)
        while here != self.root and self.root in here.parents:
            try:
                here.rmdir()
            except OSError:
                return
            here = here.parent
