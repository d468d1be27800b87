"""Which hosts of a run hold which released files: the controller's part of the data path
between hosts, which carries no bytes.

A host that has placed a locked file (downloaded from the index, or taken from a store or a
peer) serves its ``releases/`` (`remote/lib/peers.py`, in its ``fetch_release`` service) and
is recorded here as a holder of that file's sha256. Another host that wants the file is
given a holder (the one with the fewest downloads in flight from it) and takes the file from
it over HTTP, host to host, checked against the lock's sha256 (`ops/stack_files.py`). While
one host downloads a file that no host holds yet, the others wait for it (bounded) instead
of asking the index too, as the wheel cache's election does for a build. A host that ends
its part of the run leaves: it is offered to nobody, and waits (bounded) for the downloads
already in flight from it.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Collection
from typing import Any

#: The longest a host waits for another host's download of the same file before it
#: downloads the file itself (a large file on a slow link takes minutes).
CLAIM_WAIT_S = 1800.0
#: The longest a host that is done waits for the downloads in flight from it.
LEAVE_WAIT_S = 600.0


class Peers:
    """Run-wide (one per WheelCache): holders of each sha256 (hosts that have it, and hosts
    receiving it, which serve it as it arrives), and the hosts' peer URLs.

    The fan-out is pipelined: a taker is offered to the next taker from the moment its own
    download begins (`remote/lib/growing.py` on the host), and each taker is given the holder
    with the fewest takers in flight, so the hosts of a run form chains in which every
    host's uplink and downlink carry one copy at once, from the start: N hosts end about one
    file-time after the first byte, not log2(N) or N file-times (docs/reference.md)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: dict[str, list[str]] = {}
        self._receiving: dict[str, set[str]] = {}
        #: (sha256, taker) -> the holder it takes the file from (a chain never loops back).
        self._source: dict[tuple[str, str], str] = {}
        self._busy: dict[str, str] = {}
        self._urls: dict[str, str] = {}
        self._roots: dict[str, str] = {}
        self._uploads: Counter[str] = Counter()
        self._gone: set[str] = set()
        self._starting: dict[str, threading.Lock] = {}
        #: The run's path prefix on every peer server: its URLs cannot be guessed.
        self.token = secrets.token_hex(16)
        #: Earlier runs' holders started for this run (`ops/stack_files.py`): name -> what
        #: ends its server (its connection), or None when it could not be started.
        self.earlier: dict[str, Any] = {}

    def start_lock(self, host: str) -> threading.Lock:
        """The lock under which `host`'s server is started (once, by one thread)."""
        with self._cond:
            return self._starting.setdefault(host, threading.Lock())

    def base_url(self, host: str) -> str | None:
        """The host's peer server (``http://address:port/token``), once it serves."""
        with self._cond:
            return self._urls.get(host)

    def serving(self, host: str, url: str, root: str = "") -> None:
        """`host` serves its releases (the dir `root` there) at `url`."""
        with self._cond:
            self._urls[host] = url.rstrip("/")
            self._roots[host] = root
            self._cond.notify_all()

    def root_of(self, host: str) -> str:
        """The releases dir `host` serves ("" when it does not)."""
        with self._cond:
            return self._roots.get(host, "")

    def _downstream(self, sha256: str, peer: str, host: str) -> bool:
        """Whether `peer` takes `sha256` from `host`, directly or down a chain."""
        seen = set()
        while peer not in seen:
            seen.add(peer)
            up = self._source.get((sha256, peer))
            if up is None:
                return False
            if up == host:
                return True
            peer = up
        return True  # a loop (never made): not offered

    def claim(
        self,
        sha256: str,
        host: str,
        wait_s: float = CLAIM_WAIT_S,
        size: int | None = None,
        avoid: Collection[str] = (),
        until_whole: Collection[str] = (),
    ) -> str | None:
        """A holder of `sha256` for `host` to take it from (its upload counted until
        `uploaded`), or None: `host` gets the file another way (`receiving` once its own
        download begins, `placed` at the end). The holder is the one with the fewest takers
        in flight, hosts that have the whole file first among equals; a host still receiving
        the file counts (it serves what it has); none in `avoid` (they failed `host` before),
        none in `until_whole` until it has the whole file (it failed `host` while the file
        was still arriving there: its own download may have stalled or been cut, and what it
        has whole it serves from its disk), and none that takes the file from `host`. A taker that serves is a holder of the file
        from now on (receiving it). While another host of the run is getting the file and no
        holder is there yet, waits for that host first, at most `wait_s` seconds. `size` is
        the locked size (unused by the choice: every file is pipelined)."""
        del size
        deadline = time.monotonic() + wait_s
        with self._cond:
            while True:
                whole = set(self._holders.get(sha256, ()))
                ready = [
                    h
                    for h in (*self._holders.get(sha256, ()), *self._receiving.get(sha256, ()))
                    if h != host
                    and h in self._urls
                    and h not in self._gone
                    and h not in avoid
                    and (h in whole or h not in until_whole)
                    and not self._downstream(sha256, h, host)
                ]
                left = deadline - time.monotonic()
                if ready:
                    peer = min(ready, key=lambda h: (self._uploads[h], h not in whole, h))
                    self._uploads[peer] += 1
                    self._source[(sha256, host)] = peer
                    if host in self._urls and host not in self._gone:
                        self._receiving.setdefault(sha256, set()).add(host)
                        self._cond.notify_all()
                    return peer
                owner = self._busy.get(sha256)
                if owner is None or owner == host or owner in self._gone or left <= 0:
                    if owner is None or owner in self._gone:
                        self._busy[sha256] = host
                    return None
                self._cond.wait(min(left, 5.0))

    def receiving(self, sha256: str, host: str) -> None:
        """`host`'s own download of the file (from the index, by its peer-serving process)
        has been asked for: it serves the file as it arrives, so the hosts waiting for it
        chain on now instead of after the whole file."""
        with self._cond:
            if host in self._urls and host not in self._gone:
                self._receiving.setdefault(sha256, set()).add(host)
                self._cond.notify_all()

    def uploaded(self, peer: str, size: int | None = None) -> None:
        """One download from `peer` has ended (either way)."""
        del size
        with self._cond:
            self._uploads[peer] -= 1
            self._cond.notify_all()

    def placed(self, sha256: str, host: str, ok: bool) -> None:
        """`host` has the file now (`ok`), or gave up getting it (no longer offered as
        receiving it): the hosts waiting for it are woken either way."""
        with self._cond:
            if self._busy.get(sha256) == host:
                del self._busy[sha256]
            self._receiving.get(sha256, set()).discard(host)
            self._source.pop((sha256, host), None)
            if ok and host in self._urls and host not in self._gone:
                holders = self._holders.setdefault(sha256, [])
                if host not in holders:
                    holders.append(host)
            self._cond.notify_all()

    def has_whole(self, sha256: str, host: str) -> bool:
        """Whether `host` has the whole file (not still receiving it)."""
        with self._cond:
            return host in self._holders.get(sha256, ())

    def held_by(self, host: str) -> list[str]:
        """The sha256s `host` holds whole in this run (what the holder record keeps)."""
        with self._cond:
            return sorted(sha for sha, hosts in self._holders.items() if host in hosts)

    def leave(self, host: str, wait_s: float = LEAVE_WAIT_S) -> None:
        """`host` is done: offered to nobody from now on; returns once no download from it
        is in flight (or after `wait_s`)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            self._gone.add(host)
            for sha, owner in list(self._busy.items()):
                if owner == host:
                    del self._busy[sha]
            self._cond.notify_all()
            while self._uploads[host] > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(min(left, 5.0))

    def close(self) -> None:
        """End the earlier runs' holders' servers started for this run (their connections)."""
        with self._cond:
            started, self.earlier = list(self.earlier.values()), {}
        for ctx in started:
            if ctx is not None:
                try:
                    ctx.close()
                except Exception:  # noqa: BLE001 - closing must not mask the run's outcome
                    pass
