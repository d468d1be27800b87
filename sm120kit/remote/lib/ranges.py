"""One big file over several connections (HTTP ``Range``), written in place, then hashed whole.

A host's downloads share its link and its CPU among the fetches in flight (eight at once from
the controller): one big file on one connection gets an eighth, and a big file whose modules
the compile workers wait for (torch: 555 MB) then arrives last. Split over `parts`
connections it gets that many shares. Each range is written at its offset into the one part
file (sized first), and the whole file's sha256 is computed after the last range, so the
caller checks it against the lock's exactly as for one stream, before the file takes its name.
A server that ignores ``Range`` (``200`` and the whole body) is read as the one stream, on
the same connection: no request is wasted.

Stdlib only, Python >= 3.8.
"""

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
    """How many bytes from the file's start are written: what this host's peer server may
    send on while the ranges still arrive (`grow`, a `lib/growing.Growing`, or None). Only
    the first unfinished range extends it; a later range's bytes count once those before
    it are complete."""

    def __init__(self, spans, grow):
        self.spans = spans
        self.done = [0] * len(spans)
        self.grow = grow
        self.lock = threading.Lock()

    def add(self, index, n):
        if self.grow is None:
            return
        with self.lock:
            self.done[index] += n
            prefix = 0
            for (first, last), done in zip(self.spans, self.done):
                prefix = first + done
                if done < last - first + 1:
                    break
            self.grow.reached(prefix)  # under the lock: range threads report in order


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
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _fill(url, fd, spans, size, timeout, direct, _Prefix(spans, grow))
    except BaseException:
        os.close(fd)
        remove(dest)
        raise
    os.close(fd)
    return sha256_file(dest)


def _fill(url, fd, spans, size, timeout, direct, prefix):
    """Every span of the file into `fd`: the first on this thread (its answer says whether
    the server takes ranges at all), the others each on a thread of its own."""
    first, last = spans[0]
    try:
        resp = _get(url, first, last, timeout, direct)
    except Exception as exc:  # urllib raises many types; all mean "no file"
        raise DownloadFailed(
            "download of %s failed: %s: %s" % (shown(url), type(exc).__name__, exc)
        ) from None
    errors = []  # type: list
    with resp:
        if resp.status == 200:  # Range ignored: this is the whole file, as one stream
            whole = int(resp.headers.get("Content-Length") or size)
            whole_prefix = _Prefix([(0, whole - 1)], prefix.grow)
            got = _copy(resp, fd, 0, whole, (), lambda n: whole_prefix.add(0, n))
            if got != whole or whole != size:
                raise DownloadFailed(
                    "download of %s failed: %d of %d bytes (the lock says %d)"
                    % (shown(url), got, whole, size)
                )
            return
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
