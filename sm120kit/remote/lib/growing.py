"""Files this process is writing that its peer server may already serve: a host serves a
released file while it is still arriving (the pipelined fan-out, `lib/peers.py`).

A download into a part file registers it here (`begin`) with the lock's sha256, its file
name and its final size when known, and reports each block once it is flushed to the file
(`Growing.wrote`), so another thread of the same process (the peer server) may send every
byte up to there and wait, bounded, for more. The writer ends the entry (`Growing.end`) only
after the part file took its final name (the bytes were the lock's) or was removed (they
were not, or the download failed): a reader that finds no entry finds the final file, or
nothing. A reader never judges the bytes: its taker checks the whole file's sha256 before
the file takes its name there.

Stdlib only, Python >= 3.8.
"""

import threading
import time

#: The longest a reader waits for the next bytes of a file still arriving before it gives up
#: (the writer's own download has stalled: the taker then tries another holder).
IDLE_S = 60.0

_LOCK = threading.Condition()
_FILES = {}  # type: dict[tuple[str, str], Growing]


class Growing:
    """One file being written: its part file's path, the bytes flushed to it so far, its
    final size once known, and how it ended (None while it is still arriving).

    The size readers send as the length (``Content-Length``) is the response's when it
    gives one, else the lock's: never a size of 0 or None, which only say the lock recorded
    none (a lock drafted from an index that lists no sizes; the controller sends 0 for it).
    Taken for a length, a 0 makes every reader that comes while the file arrives send an
    empty body, which its taker refuses by its sha256 and then fetches from the index."""

    def __init__(self, key, path, total):
        self.key = key
        self.path = path
        self.total = known_size(total)
        self.headed = False  # the response's headers are in (`sized`)
        self.written = 0
        self.ok = None  # None while arriving, then whether it took its final name

    def sized(self, total):
        """The response's headers are in, with its length (`total`, None when it gave
        none): that length is what the bytes coming are, so it wins over the lock's."""
        with _LOCK:
            self.headed = True
            if known_size(total) is not None:
                self.total = total
            _LOCK.notify_all()

    def wrote(self, n):
        """`n` more bytes are in the part file (flushed: another open file sees them)."""
        with _LOCK:
            self.written += n
            _LOCK.notify_all()

    def reached(self, n):
        """The first `n` bytes of the part file are in (a file written in ranges: only its
        prefix from the start may be sent)."""
        with _LOCK:
            if n > self.written:
                self.written = n
                _LOCK.notify_all()

    def end(self, ok):
        """The file took its final name (`ok`), or its part file is gone: readers still
        sending finish from their open file (`ok`) or stop (not `ok`)."""
        with _LOCK:
            self.ok = bool(ok)
            if _FILES.get(self.key) is self:
                del _FILES[self.key]
            _LOCK.notify_all()

    def wait_past(self, offset, idle_s=IDLE_S):
        """(bytes written, final size or None, ended ok or None) once more than `offset`
        bytes are written or the file has ended; after `idle_s` with nothing new, the state
        as it is (the caller sees no progress and gives up)."""
        deadline = time.monotonic() + idle_s
        with _LOCK:
            while self.written <= offset and self.ok is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _LOCK.wait(min(left, 5.0))
            return self.written, self.total, self.ok

    def wait_sized(self, wait_s=IDLE_S):
        """The final size, waited for (bounded) while the response's headers are on their
        way; None when still unknown once they are in (the reader sends without a length,
        and the end of its body is the connection's)."""
        deadline = time.monotonic() + wait_s
        with _LOCK:
            while self.total is None and not self.headed and self.ok is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                _LOCK.wait(min(left, 5.0))
            return self.total


def known_size(size):
    """`size` when it is a byte count a file can have been recorded with, else None: a lock
    entry's size of 0 or None means none was recorded (a released wheel is never empty)."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        return None
    return size


def begin(sha256, name, path, total=None):
    """Register `path` (a part file, just created) as the file `name` of `sha256` arriving;
    `total`: the lock's size (0 or None: not recorded, `known_size`)."""
    entry = Growing((sha256, name), path, total)
    with _LOCK:
        _FILES[entry.key] = entry
        _LOCK.notify_all()
    return entry


def find(sha256, name, wait_s, there):
    """The entry of `name` arriving, or None once `there()` (the final file exists) is true
    or after `wait_s`: the controller may name this host as a holder a moment before its
    own download of the file has begun."""
    deadline = time.monotonic() + wait_s
    with _LOCK:
        while True:
            entry = _FILES.get((sha256, name))
            if entry is not None:
                return entry
            left = deadline - time.monotonic()
            if there() or left <= 0:
                return None
            _LOCK.wait(min(left, 0.5))
