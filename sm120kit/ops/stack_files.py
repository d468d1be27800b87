"""How a host gets a lock's released files: from the wheel stores, so a fleet downloads each once.

A locked file (a released wheel pinned by URL and sha256) is looked up, fetched and shared
through the same wheel cache as a built wheel (sm120kit/cache/wheels.py), under a key made of
its name, version and sha256 alone (`release_inputs`): the host store is left out (the
host's own copy is ``<work_root>/releases/<sha256>/<filename>``), the controller store and the
shared stores serve it. On a miss one host of the run is elected per file and downloads it
from the lock's URL (`install_lock` ``fetch``: sha256 checked on the host); the cache then
puts it in the controller and shared stores, and the other hosts of the run take it from
there. A later run, or a host without access to the index, finds it in the stores.

One shortcut comes first: the controller's own copy of a file (its release cache filled by
``lock.draft``, or a ``file://`` index) goes to the controller's ``local`` host as a copy
(never a hard link: the host's file and the controller's are two files, so a corruption of
one is repaired from the other), and to a remote host over SSH only for a ``file://`` URL a
remote host cannot reach.

uv, which installs the lock on the host, is itself a locked file (`UV`): its PyPI wheel,
pinned by sha256, obtained like the lock's files, so a host without index access gets it
from the stores too. Before anything is fetched, `tag_problems` checks every wheel's tags
against the host (glibc, machine, Python), and `index_problems` every URL against the lock's
``indexes``.
"""

from __future__ import annotations

import os
import posixpath
import re
import secrets
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from ..cache.holders import (
    EARLIER_PER_FILE,
    Held,
    earlier_holders,
    read_record,
    record,
    record_path,
)
from ..cache.key import RELEASE_TAG, KeyInputs
from ..cache.peers import Peers
from ..cache.request import BuiltWheel
from ..cache.wheels import cache_for
from ..errors import HostFailed, one_line
from ..remote.lib.download import DownloadFailed, download, shown
from ..remote.lib.files import sha256_file
from ..remote.lib.obtain import url_problem
from ..runner.pool import HostContext
from ..runner.results import HostResult
from ..stack.draft import cached_copy, local_path
from ..stack.index_auth import authed
from ..stack.lock import LockEntry

#: uv, pinned: the manylinux x86_64 wheel of uv 0.13.9 as PyPI serves it (sha256 and size read
#: from https://pypi.org/simple/uv/ and checked against the downloaded file). Its binary is
#: ``uv-0.13.9.data/scripts/uv`` inside the wheel.
UV_VERSION = "0.13.9"
UV = LockEntry(
    name="uv",
    version=UV_VERSION,
    filename=f"uv-{UV_VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    url=(
        "https://files.pythonhosted.org/packages/3d/aa/"
        "26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/"
        f"uv-{UV_VERSION}-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    ),
    sha256="d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    source="release",
    compiled=False,
    size=17606939,
)

#: Where uv's pinned wheel may be downloaded from (the lock's own `indexes` do not apply).
UV_INDEXES = ("https://files.pythonhosted.org",)

#: glibc of the legacy manylinux names (PEP 600).
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _platform_fits(platform: str, glibc: tuple[int, int] | None, machine: str) -> str | None:
    """Why one platform tag does not fit the host (None when it does): the glibc it needs, or
    another machine. A host whose glibc or machine is unknown is not judged on it."""
    if platform == "any":
        return None
    m = re.match(
        r"^(manylinux_(\d+)_(\d+)|manylinux1|manylinux2010|manylinux2014|linux)_(.+)$", platform
    )
    if not m:
        return f"platform {platform}"
    arch = m.group(4)
    if machine and arch != machine:
        return f"machine {arch}, host is {machine}"
    if m.group(2):
        need = (int(m.group(2)), int(m.group(3)))
    else:
        need = _LEGACY.get(m.group(1), (0, 0))
    if glibc is not None and glibc < need:
        have = f"{glibc[0]}.{glibc[1]}"
        return f"needs glibc {need[0]}.{need[1]}, host has {have}"
    return None


def _python_fits(interpreter: str, abi: str, python: tuple[int, int]) -> bool:
    """Whether a wheel's python tag (``cp311``, ``py3``, ``cp38`` with ``abi3``) installs on
    CPython `python`."""
    m = re.match(r"^(cp|py)(\d)(\d*)$", interpreter)
    if not m:
        return False
    major, minor = int(m.group(2)), int(m.group(3)) if m.group(3) else None
    if major != python[0]:
        return False
    if minor is None or m.group(1) == "py":
        return minor is None or minor <= python[1]
    return minor == python[1] or (abi == "abi3" and minor <= python[1])


def tag_problems(
    entries: Iterable[LockEntry], glibc: object, machine: object, python: str
) -> list[str]:
    """One line per wheel that cannot install on the host: ``cannot install X: needs glibc
    2.34, host has 2.31`` (a file installs when any of its tags fits: glibc, machine,
    Python)."""
    try:
        have = tuple(int(x) for x in str(glibc).split(".")[:2]) if glibc else None
    except ValueError:
        have = None
    host_glibc = (have[0], have[1]) if have and len(have) == 2 else None
    py = tuple(int(x) for x in python.split(".")[:2])
    out = []
    for e in entries:
        if not e.filename.endswith(".whl"):
            continue
        try:
            _n, _v, _b, tags = parse_wheel_filename(e.filename)
        except InvalidWheelFilename:
            out.append(f"cannot install {e.filename}: not a wheel file name")
            continue
        why: list[str] = []
        for tag in tags:
            if not _python_fits(tag.interpreter, tag.abi, (py[0], py[1])):
                why.append(f"Python {tag.interpreter}, host's is {python}")
                continue
            problem = _platform_fits(tag.platform, host_glibc, str(machine or ""))
            if problem is None:
                why = []
                break
            why.append(problem)
        if why:
            out.append(f"cannot install {e.name} {e.version} ({e.filename}): {why[0]}")
    return out


def index_problems(entries: Iterable[LockEntry], indexes: Iterable[str]) -> list[str]:
    """One line per file whose URL may not be fetched for the lock's `indexes` (`url_problem`:
    scheme, host and port of an index, path under its path; any http(s) URL when the lock
    names no index), passwords shown as ``****``."""
    idx = tuple(indexes)
    out = []
    for e in entries:
        problem = url_problem(e.url, idx)
        if problem is not None:
            out.append(f"{e.name} {e.version}: {shown(e.url)} is refused: {problem}")
    return out


def release_inputs(entry: LockEntry) -> KeyInputs:
    """The wheel-cache inputs of a released file: what it is (name, version) and its bytes
    (sha256); nothing about the host that fetches it."""
    return KeyInputs(
        package=entry.name,
        version=entry.version,
        source_digest=RELEASE_TAG + entry.sha256,
        platform=entry.filename,
    )


def controller_copy(
    ctx: HostContext, entry: LockEntry, dest: str, indexes: tuple[str, ...] = ()
) -> bool:
    """Hand the controller's own copy of `entry` to the host at `dest`, when that is cheaper
    than any download: copied for this machine's ``local`` host (a hard link would make one
    file of the two, and one corruption would damage both), sent over
    SSH only for a ``file://`` index a remote host cannot reach. False when it does not
    apply."""
    here = cached_copy(entry)
    if here is None:
        return False
    if not ctx.host.is_local and local_path(entry.url) is None and entry != UV:
        return False
    problem = url_problem(entry.url, indexes) if local_path(entry.url) is not None else None
    if problem is not None:
        # A file:// URL the lock's indexes do not allow: never a reason to send this
        # machine's files anywhere (plan refuses the lock; this is the second line).
        raise HostFailed(f"{ctx.host.name}: {entry.name} {entry.version}: {shown(entry.url)}"
                         f" is refused: {problem}")  # fmt: skip
    # Checked before it goes anywhere: the controller's copy may have been changed since it
    # was fetched (or a file:// index edited), and the host trusts a placed file as checked.
    got = sha256_file(str(here))
    if got != entry.sha256:
        raise HostFailed(
            f"{ctx.host.name}: {entry.name} {entry.version}: the controller's copy {here} has"
            f" sha256 {got}, the lock's is {entry.sha256}; not sent"
        )
    token = secrets.token_hex(6)
    part = f"{dest}.{token}.part"
    if ctx.host.is_local:
        os.makedirs(posixpath.dirname(dest), exist_ok=True)
        try:
            shutil.copyfile(here, part)
            os.replace(part, dest)
        finally:
            if os.path.exists(part):
                os.unlink(part)
        return True
    # uv is the tool's own file (not the lock's): a controller that has it sends it, so a host
    # installs without reaching uv's index even before the stores hold it.
    ctx.run(f"mkdir -p {shlex.quote(posixpath.dirname(dest))}")
    try:
        ctx.put(str(here), part)
        ctx.run(f"mv -f {shlex.quote(part)} {shlex.quote(dest)}")
    except BaseException:
        ctx.run(f"rm -f {shlex.quote(part)}", check=False)
        raise
    return True


def _row(entry: LockEntry, dest: str) -> dict[str, Any]:
    return {
        "name": entry.name,
        "version": entry.version,
        "url": authed(entry.url),  # to the host only (stdin), never shown as is
        "sha256": entry.sha256,
        "compiled": entry.compiled,
        "dest": dest,
        # the lock's size: a big file is fetched in ranges over several connections, and the
        # host serves a file on as it arrives, with this length
        "size": entry.size or 0,
    }


def _serve(ctx: HostContext, peers: Peers, dest: str) -> bool:
    """Whether the host serves its ``releases/`` to the run's other hosts (started on first
    use: `remote/lib/peers.py`). A ``local`` host does not: it is the controller's machine, and
    its address for other hosts is not known here."""
    if ctx.host.is_local:
        return False
    name = ctx.host.name
    with peers.start_lock(name):
        if peers.base_url(name) is not None:
            return True
        root = posixpath.dirname(posixpath.dirname(dest))
        try:
            doc = ctx.ask("fetch_release", {"serve": {"root": root, "token": peers.token}})
        except HostFailed as exc:
            ctx.log.warning("peer server not started: %s", exc)
            return False
        if not doc.get("ok"):
            ctx.log.warning("peer server not started: %s", doc.get("error"))
            return False
        address = str(doc["address"])
        host = f"[{address}]" if ":" in address else address
        peers.serving(name, f"http://{host}:{int(doc['port'])}/{peers.token}", root)
        ctx.log.info("serving releases to peers at %s:%s", address, doc["port"])
        return True


def _from_peer(
    ctx: HostContext, entry: LockEntry, dest: str, peer: str, url: str, arriving: bool
) -> tuple[str, int] | None:
    """The file from peer `peer` (its URL `url`), host to host, its sha256 checked before it
    takes its name; None when refused (other bytes, a cut stream, no answer): the caller
    tries another holder, then the stores and the index."""
    mirror = f"{url}/{entry.sha256}/{entry.filename}"
    if arriving:
        mirror += "?arriving=1"  # the peer waits (bounded) for its own download to begin
    row = {**_row(entry, dest), "url": "", "mirrors": [mirror]}
    doc = ctx.ask("fetch_release", {"entry": row, "indexes": []})
    for line in doc.get("refused") or []:
        ctx.log.warning("from peer %s: %s", peer, line)
        ctx.result.data.setdefault("cache_events", []).append(f"peer {peer}: {line}")
    if doc.get("ok") and doc.get("source") == "peer":
        return f"peer:{peer}", 0
    return None


def _serve_earlier(ctx: HostContext, peers: Peers, held: Held) -> bool:
    """Start the peer server of `held.host`, a host of the inventory outside this run that
    held files at the end of an earlier run (`cache/holders.py`), for this run's token;
    its recorded files become holders. False when it cannot be reached (once per run)."""
    with peers.start_lock(held.host):
        if held.host in peers.earlier:
            return peers.earlier[held.host] is not None
        host = ctx.runner.shared.inventory.get(held.host)
        other = None
        try:
            if host is None or host.is_local:
                raise HostFailed(f"{held.host}: not a remote host of the inventory")
            other = HostContext(host, ctx.runner, HostResult(host.name), ctx.log)
            doc = other.ask(
                "fetch_release", {"serve": {"root": held.releases, "token": peers.token}}
            )
            if not doc.get("ok"):
                raise HostFailed(f"{held.host}: {doc.get('error')}")
        except Exception as exc:  # noqa: BLE001 - a holder down costs only the store's relay
            line = f"earlier holder {held.host} not started: {one_line(str(exc))}"
            ctx.log.warning("%s", line)
            ctx.result.data.setdefault("cache_events", []).append(line)
            if other is not None:
                other.close()
            peers.earlier[held.host] = None
            return False
        address = str(doc["address"])
        at = f"[{address}]" if ":" in address else address
        peers.serving(held.host, f"http://{at}:{int(doc['port'])}/{peers.token}", held.releases)
        for sha in held.sha256:
            peers.placed(sha, held.host, True)
        peers.earlier[held.host] = other
        ctx.log.info("earlier holder %s serves at %s:%s", held.host, address, doc["port"])
        return True


def _earlier_holders(ctx: HostContext, peers: Peers, entry: LockEntry) -> bool:
    """Whether a host of an earlier run that held `entry`'s file serves it to this run now
    (its server started by `_serve_earlier`, at most `EARLIER_PER_FILE` tried per file)."""
    runner = ctx.runner
    held = runner.shared.once("holders", lambda: read_record(record_path(runner.options.run_root)))
    known = frozenset(runner.shared.inventory)
    started = False
    for h in earlier_holders(held, entry.sha256, runner.host_names, known)[:EARLIER_PER_FILE]:
        started = _serve_earlier(ctx, peers, h) or started
    return started


def obtain_release(
    ctx: HostContext,
    entry: LockEntry,
    dest: str,
    *,
    target: dict[str, Any] | None = None,
    indexes: tuple[str, ...] = (),
) -> tuple[str, int]:
    """Put `entry`'s file at `dest` on the host. Returns where it came from (``"controller"``,
    ``"index"`` when this host downloaded it, ``"cache:<store>"``, ``"peer:<host>"``) and the
    bytes this host downloaded from the index. A download is only from under `indexes` (when
    given), and a compiled file is verified for `target` on the host as soon as it has
    arrived.

    The data path: another host of the run that holds the file serves it, host to host
    (`cache/peers.py`); else the stores or the index, through the wheel cache, whose puts of
    a download into the controller and shared stores wait for `fill_stores` (the host goes on
    at once). The host then serves the file to the others."""
    cache = cache_for(ctx.runner)
    peers = cache.peers if target is None and not ctx.host.is_local else None
    # uv (the tool's own file, which the controller sends) goes host to host like the lock's
    # files once a host of the run has it: one SFTP copy of its 17.6 MB per run, not per host
    # (the controller's CPU per extra host).
    relayed = entry == UV and peers is not None
    if not relayed and controller_copy(ctx, entry, dest, UV_INDEXES if entry == UV else indexes):
        return "controller", 0
    if peers is not None:
        # Serving before the first byte arrives: a taker is a holder from its first byte.
        serves = _serve(ctx, peers, dest)
        failed: list[str] = []
        # Holders that failed this host while the file was still arriving there: asked
        # again once they have it whole (a cut stream of a growing file says nothing about
        # the file they end up with), before this host falls back to the stores and index.
        cut: list[str] = []
        earlier = False
        while True:
            peer = peers.claim(
                entry.sha256, ctx.host.name, size=entry.size, avoid=failed, until_whole=cut
            )
            if peer is None:
                if not earlier and _earlier_holders(ctx, peers, entry):
                    earlier = True
                    continue
                break
            got = None
            arriving = not peers.has_whole(entry.sha256, peer)
            try:
                got = _from_peer(ctx, entry, dest, peer, str(peers.base_url(peer)), arriving)
            finally:
                peers.uploaded(peer, entry.size)
                # Placed, or no longer offered as receiving it (this host's service died too).
                peers.placed(entry.sha256, ctx.host.name, got is not None and serves)
            if got is not None:
                return got
            # Cut short or other bytes: this holder again once whole, else the next holder,
            # then the stores and the index.
            (cut if arriving and peer not in cut else failed).append(peer)
        if failed or cut:
            # Why this host goes to the stores or the index (the run's JSON and log say so).
            asked = ", ".join(dict.fromkeys([*cut, *failed]))
            line = f"{entry.name} {entry.version}: no holder served it ({asked}); not from a peer"
            ctx.log.warning("%s", line)
            ctx.result.data.setdefault("cache_events", []).append(line)
        if relayed:
            sent = False
            try:
                sent = controller_copy(ctx, entry, dest, UV_INDEXES)
            finally:
                if not sent:
                    peers.placed(entry.sha256, ctx.host.name, False)
            if sent:
                peers.placed(entry.sha256, ctx.host.name, serves)
                return "controller", 0
    fetched: list[int] = []

    def download() -> BuiltWheel:
        start = time.monotonic()
        row = _row(entry, dest)
        if target:
            # Verified for the target as it lands: the installer's fetch, a start of its own.
            doc = ctx.script(
                "install_lock",
                {
                    "action": "fetch",
                    "entries": [row],
                    "verify": target,
                    "indexes": [authed(i) for i in indexes],
                },
            )
            got = sum(int(n) for _, n in doc.get("downloaded") or [])
        else:
            # Nothing to verify on arrival: the host's downloader, one process for the run,
            # which serves the file on to the hosts waiting for it as it arrives.
            if peers is not None:
                peers.receiving(entry.sha256, ctx.host.name)
            doc = ctx.ask("fetch_release", {"entry": row, "indexes": [authed(i) for i in indexes]})
            got = int(doc.get("downloaded") or 0)
        if not doc.get("ok"):
            raise HostFailed(f"{ctx.host.name}: {doc.get('error')}")
        fetched.append(got)
        return BuiltWheel(dest, entry.sha256, time.monotonic() - start, "")

    def direct(url: str, filename: str, sha256: str) -> bool:
        # A store's presigned URL: the host downloads from the store, not through here.
        if filename != entry.filename or sha256 != entry.sha256:
            return False
        row = {**_row(entry, dest), "url": "", "mirrors": [{"url": url, "store": True}]}
        doc = ctx.ask("fetch_release", {"entry": row, "indexes": [authed(i) for i in indexes]})
        for line in doc.get("refused") or []:
            ctx.result.data.setdefault("cache_events", []).append(f"store URL: {line}")
        return bool(doc.get("ok"))

    ok = False
    try:
        obtained = cache.obtain(
            ctx, release_inputs(entry), download, posixpath.dirname(dest), download=True,
            defer=True, direct=None if ctx.host.is_local else direct,
        )  # fmt: skip
        if obtained.path and posixpath.basename(obtained.path) != entry.filename:
            raise HostFailed(f"{ctx.host.name}: {entry.filename} arrived as {obtained.path}")
        ok = True
    finally:
        if peers is not None:
            peers.placed(entry.sha256, ctx.host.name, ok and _serve(ctx, peers, dest))
    origin = obtained.wheel_from
    return ("index" if origin == "build" else origin), sum(fetched)


def _fetch_from_peer_server(ctx: HostContext, url: str, sha256: str, tmp: str) -> Path | None:
    """A controller copy of a file the host serves (`url`), its sha256 checked as it arrives;
    None when that fails (the store put then copies it over SSH)."""
    part = Path(tmp) / f"{sha256}.part"
    try:
        download(url, str(part), sha256, timeout=3600, direct=True)
    except DownloadFailed as exc:
        ctx.log.warning("store fill from the host's peer server failed: %s", exc)
        return None
    return part


def fill_stores(ctx: HostContext) -> dict[str, Any]:
    """Make the controller and shared stores' puts deferred for this host's downloads (off
    the stack step's path: a later run's host, or one without the index, takes them from the
    stores). A remote host's file comes from its peer server over HTTP when it serves (the
    kernel's sendfile there, one HTTP read here), else over SSH. Returns ``{"files",
    "seconds"}``; a failed put is a cache event, never a failed host."""
    cache = cache_for(ctx.runner)
    calls = cache.deferred(ctx.host.name)
    start = time.monotonic()
    done = 0
    base = cache.peers.base_url(ctx.host.name)
    for call in calls:
        try:
            fetched = None
            with tempfile.TemporaryDirectory(prefix="sm120kit-fill-") as tmp:
                if base is not None:
                    url = f"{base}/{call.sha256}/{call.filename}"
                    fetched = _fetch_from_peer_server(ctx, url, call.sha256, tmp)
                stored = call(fetched)
            done += 1 if stored else 0
        except Exception as exc:  # noqa: BLE001 - the host has its file; a store misses one
            ctx.log.warning("deferred store put failed", exc_info=True)
            ctx.result.data.setdefault("cache_events", []).append(
                f"store put after the step failed: {one_line(str(exc) or type(exc).__name__)}"
            )
    return {"files": done, "seconds": round(time.monotonic() - start, 2)}


@contextmanager
def filling_stores(ctx: HostContext) -> Iterator[None]:
    """`fill_stores` in a thread of its own while the block runs (the host's smoke: CPU
    there, bytes here), joined after it; what it did goes in the host's ``stack`` result."""
    box: dict[str, Any] = {}

    def fill() -> None:
        try:
            box.update(fill_stores(ctx))
        except Exception as exc:  # noqa: BLE001 - fill_stores records its own failures
            ctx.log.warning("store fill: %s", exc)

    thread = threading.Thread(target=fill, name=f"fill-{ctx.host.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
        if box.get("files"):
            stack = ctx.result.data.get("stack")
            if isinstance(stack, dict):
                stack["stores_filled"] = box


def leave_peers(ctx: HostContext) -> None:
    """This host's part of the run is over: no host is sent to it from now on, and the
    downloads in flight from it end first (bounded)."""
    wheel_cache = ctx.runner.wheel_cache
    if wheel_cache is None:
        return
    peers = wheel_cache.peers
    name = ctx.host.name
    peers.leave(name)
    held, root = peers.held_by(name), peers.root_of(name)
    if held and root:
        # For a later run's new hosts: this host serves these files then (cache/holders.py).
        try:
            record(record_path(ctx.runner.options.run_root), name, root, held)
        except OSError as exc:
            ctx.log.warning("holder record not written: %s", exc)


__all__ = [
    "RELEASE_TAG",
    "UV",
    "UV_INDEXES",
    "UV_VERSION",
    "controller_copy",
    "index_problems",
    "fill_stores",
    "leave_peers",
    "obtain_release",
    "release_inputs",
    "tag_problems",
]
