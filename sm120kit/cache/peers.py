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

#: The longest a host waits for another host's download of the same file before it
#: downloads the file itself (a large file on a slow link takes minutes).
CLAIM_WAIT_S = 1800.0
#: The longest a host that is done waits for the downloads in flight from it.
LEAVE_WAIT_S = 600.0
#: A file this large goes from a holder to one taker at a time: a holder's link shared by
#: every taker at once ends them all together at the end (7 takers of one 512 MB file: 7
#: file-times for each), while one at a time doubles the holders each file-time (1, 2, 4, 8:
#: 3 file-times for 7 takers). Small files are many and short: any number at once.
BIG_FILE = 64 << 20


class Peers:
    """Run-wide (one per WheelCache): holders of each sha256, and the hosts' peer URLs."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: dict[str, list[str]] = {}
        self._busy: dict[str, str] = {}
        self._urls: dict[str, str] = {}
        self._uploads: Counter[str] = Counter()
        self._big: Counter[str] = Counter()
        self._gone: set[str] = set()
        self._starting: dict[str, threading.Lock] = {}
        #: The run's path prefix on every peer server: its URLs cannot be guessed.
        self.token = secrets.token_hex(16)

    def start_lock(self, host: str) -> threading.Lock:
        """The lock under which `host`'s server is started (once, by one thread)."""
        with self._cond:
            return self._starting.setdefault(host, threading.Lock())

    def base_url(self, host: str) -> str | None:
        """The host's peer server (``http://address:port/token``), once it serves."""
        with self._cond:
            return self._urls.get(host)

    def serving(self, host: str, url: str) -> None:
        """`host` serves its releases at `url`."""
        with self._cond:
            self._urls[host] = url.rstrip("/")

    def claim(
        self, sha256: str, host: str, wait_s: float = CLAIM_WAIT_S, size: int | None = None
    ) -> str | None:
        """A holder of `sha256` for `host` to take it from (its upload counted until
        `uploaded`), or None: `host` gets the file another way, and holds it then
        (`placed`). While another host of the run is getting it (not from a peer), waits for
        that host first, at most `wait_s` seconds; a file of `BIG_FILE` bytes or more also
        waits for a holder that uploads no other big file (the fan-out doubles, see
        `BIG_FILE`), and after `wait_s` takes the least-loaded holder."""
        deadline = time.monotonic() + wait_s
        big = size is not None and size >= BIG_FILE
        with self._cond:
            while True:
                ready = [
                    h
                    for h in self._holders.get(sha256, ())
                    if h != host and h in self._urls and h not in self._gone
                ]
                free = [h for h in ready if not big or self._big[h] == 0]
                left = deadline - time.monotonic()
                if free or (ready and left <= 0):
                    peer = min(free or ready, key=lambda h: (self._uploads[h], h))
                    self._uploads[peer] += 1
                    if big:
                        self._big[peer] += 1
                    return peer
                if ready:
                    self._cond.wait(min(left, 5.0))
                    continue
                owner = self._busy.get(sha256)
                if owner is None or owner == host or owner in self._gone or left <= 0:
                    if owner is None or owner in self._gone:
                        self._busy[sha256] = host
                    return None
                self._cond.wait(min(left, 5.0))

    def uploaded(self, peer: str, size: int | None = None) -> None:
        """One download from `peer` (of `size` bytes, as claimed) has ended (either way)."""
        with self._cond:
            self._uploads[peer] -= 1
            if size is not None and size >= BIG_FILE:
                self._big[peer] -= 1
            self._cond.notify_all()

    def placed(self, sha256: str, host: str, ok: bool) -> None:
        """`host` has the file now (`ok`), or gave up getting it: the hosts waiting for it
        are woken either way."""
        with self._cond:
            if self._busy.get(sha256) == host:
                del self._busy[sha256]
            if ok and host in self._urls and host not in self._gone:
                holders = self._holders.setdefault(sha256, [])
                if host not in holders:
                    holders.append(host)
            self._cond.notify_all()

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
