"""One big file over several connections (HTTP ``Range``), written in place, hashed as it comes.

A host's downloads share its link and its CPU among the fetches in flight (eight at once from
the controller): one big file on one connection gets an eighth, and a big file whose modules
the compile workers wait for (torch: 555 MB) then arrives last. Split over `parts`
connections it gets that many shares. Each range is written at its offset into the one part
file (sized first), and the file's sha256 is computed over the prefix from its start as it
grows (`_Prefix`), so it is ready at the last range's end; the caller checks it against the
lock's exactly as for one stream, before the file takes its name.
A server that ignores ``Range`` (``200`` and the whole body) is read as the one stream, on
the same connection: no request is wasted.

Stdlib only, Python >= 3.8.
"""

import hashlib
import os
import re
import threading

from sm120kit.remote.lib.download import DownloadFailed, direct_opener, opener, request_of, shown
from sm120kit.remote.lib.files import CHUNK, remove, sha256_file

#: A file is split only when each part would be at least this big: below it, another
#: connection's request costs more than its share of the bytes saves.
PART_MIN = 32 << 20
#: At most this many connections for one file (the host's other fetches keep theirs).
PARTS_MAX = 4

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)$")


def parts_for(size):
    """How many ranges a file of `size` bytes is fetched in (1: one plain stream)."""
    if not size or size < 2 * PART_MIN:
        return 1
    return int(min(PARTS_MAX, size // PART_MIN))


def bounds(size, parts):
    """`parts` contiguous ``(first, last)`` byte ranges covering `size` bytes."""
    step = -(-size // parts)
    return [(s, min(size, s + step) - 1) for s in range(0, size, step)]


def _get(url, first, last, timeout, direct):
    req = request_of(url)
    req.add_header("Range", "bytes=%d-%d" % (first, last))
    return (direct_opener() if direct else opener()).open(req, timeout=timeout)


class _Prefix:
    """How many bytes from the file's start are written, and their sha256 as they come.

    What this host's peer server may send on while the ranges still arrive (`grow`, a
    `lib/growing.Growing`, or None) is that prefix. Only the first unfinished range extends
    it; a later range's bytes count once those before it are complete. The prefix is
    hashed as it grows (read back from `fd` while its pages are fresh), so the whole file's
    sha256 is ready when the last range ends: no second pass over the file (3.4 GB of the
    real lock's 4.4 GB come in ranges) between its last byte and its install."""

    def __init__(self, spans, grow, fd=None):
        self.spans = spans
        self.done = [0] * len(spans)
        self.grow = grow
        self.fd = fd
        self.digest = hashlib.sha256()
        self.hashed = 0
        self.prefix = 0
        self.lock = threading.Lock()
        self.hash_lock = threading.Lock()  # one hasher at a time, in file order

    def add(self, index, n):
        with self.lock:
            self.done[index] += n
            prefix = 0
            for (first, last), done in zip(self.spans, self.done):
                prefix = first + done
                if done < last - first + 1:
                    break
            self.prefix = prefix
            if self.grow is not None:
                self.grow.reached(prefix)  # under the lock: range threads report in order
        # A range thread never waits on another's hashing (its socket would stall): the
        # hasher at work takes this prefix too, as it loops to the latest one.
        if self.hash_lock.acquire(False):
            try:
                self._hash_to(None)
            finally:
                self.hash_lock.release()

    def _hash_to(self, end):
        """Hash on from `hashed` to `end` (None: the latest prefix); under `hash_lock`."""
        if self.fd is None:
            return
        while True:
            stop = self.prefix if end is None else end
            if self.hashed >= stop:
                return
            block = os.pread(self.fd, min(CHUNK, stop - self.hashed), self.hashed)
            if not block:
                return
            self.digest.update(block)
            self.hashed += len(block)

    def hexdigest(self, size):
        """The sha256 of the file's `size` bytes: what was hashed as it came, the rest (none
        once every range is in) read now; None when the file is shorter."""
        with self.hash_lock:
            self._hash_to(size)
        return self.digest.hexdigest() if self.hashed == size else None


def _copy(resp, fd, offset, want, errors=(), told=None):
    """Write `resp`'s body at `offset` of `fd`; the bytes written (at most `want`). Stops
    early once another range has failed (`errors`): the file is lost anyway. `told`: called
    with each block's length once it is in the file."""
    done = 0
    while done < want and not errors:
        block = resp.read(min(CHUNK, want - done))
        if not block:
            break
        os.pwrite(fd, block, offset + done)
        done += len(block)
        if told is not None:
            told(len(block))
    return done


def _answered(resp, first, last, size):
    """Why a ranged answer is not the bytes asked for, or None."""
    got = _CONTENT_RANGE.match(resp.headers.get("Content-Range") or "")
    if resp.status != 206 or got is None:
        return "answered %s without the range asked for" % resp.status
    if (int(got.group(1)), int(got.group(2))) != (first, last) or got.group(3) not in (
        str(size),
        "*",
    ):
        return "asked for bytes %d-%d/%d, got %s" % (
            first, last, size, resp.headers.get("Content-Range"))  # fmt: skip
    return None


def download_ranges(url, dest, size, timeout=60, direct=False, parts=None, grow=None):
    """Fetch `url` (`size` bytes, the lock's) to `dest` over `parts` connections (default
    `parts_for`); the sha256 hex digest of what was written. Raises `DownloadFailed` (with
    `dest` removed) when any range fails, is short, or is not the range asked for; a server
    that answers the first range with the whole file (``200``) is read as one stream.
    `grow` (a `lib/growing.Growing` of `dest`): told how many bytes from the start are in,
    so this host's peer server can send the file on while its ranges arrive."""
    spans = bounds(size, parts or parts_for(size))
    parent = os.path.dirname(dest)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    # Read and write: the prefix is hashed back from this descriptor as it grows.
    fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        got = _fill(url, fd, spans, size, timeout, direct, grow).hexdigest(size)
    except BaseException:
        os.close(fd)
        remove(dest)
        raise
    os.close(fd)
    return got if got is not None else sha256_file(dest)


def _fill(url, fd, spans, size, timeout, direct, grow):
    """Every span of the file into `fd`: the first on this thread (its answer says whether
    the server takes ranges at all), the others each on a thread of its own. Returns the
    `_Prefix` that hashed what was written."""
    first, last = spans[0]
    try:
        resp = _get(url, first, last, timeout, direct)
    except Exception as exc:  # urllib raises many types; all mean "no file"
        raise DownloadFailed(
            "download of %s failed: %s: %s" % (shown(url), type(exc).__name__, exc)
        ) from None
    errors = []  # type: list
    prefix = _Prefix(spans, grow, fd)
    with resp:
        if resp.status == 200:  # Range ignored: this is the whole file, as one stream
            whole = int(resp.headers.get("Content-Length") or size)
            prefix = _Prefix([(0, whole - 1)], grow, fd)
            got = _copy(resp, fd, 0, whole, (), lambda n: prefix.add(0, n))
            if got != whole or whole != size:
                raise DownloadFailed(
                    "download of %s failed: %d of %d bytes (the lock says %d)"
                    % (shown(url), got, whole, size)
                )
            return prefix
        why = _answered(resp, first, last, size)
        if why:
            raise DownloadFailed("download of %s failed: %s" % (shown(url), why))
        os.ftruncate(fd, size)
        threads = [
            threading.Thread(
                target=_one, args=(url, fd, i, span, size, timeout, direct, errors, prefix)
            )
            for i, span in enumerate(spans[1:], 1)
        ]
        for thread in threads:
            thread.daemon = True
            thread.start()
        got = _copy(resp, fd, first, last - first + 1, errors, lambda n: prefix.add(0, n))
        if got != last - first + 1 and not errors:
            errors.append("bytes %d-%d: connection closed after %d" % (first, last, got))
        for thread in threads:
            thread.join()
    if errors:
        raise DownloadFailed("download of %s failed: %s" % (shown(url), errors[0]))
    return prefix


def _one(url, fd, index, span, size, timeout, direct, errors, prefix):
    """One range of `download_ranges`, in its own thread; a failure goes into `errors`."""
    first, last = span
    try:
        with _get(url, first, last, timeout, direct) as resp:
            why = _answered(resp, first, last, size)
            if why:
                errors.append(why)
                return
            got = _copy(resp, fd, first, last - first + 1, errors, lambda n: prefix.add(index, n))
            if got != last - first + 1 and not errors:
                errors.append("bytes %d-%d: connection closed after %d" % (first, last, got))
    except Exception as exc:  # urllib raises many types; all mean "no file"
        errors.append("bytes %d-%d: %s: %s" % (first, last, type(exc).__name__, exc))
