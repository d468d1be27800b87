"""A big locked file fetched in HTTP ranges over several connections (remote/lib/ranges.py,
through remote/lib/obtain.py), against real loopback HTTP servers: one that answers ranges,
one that ignores ``Range`` (the whole file, one stream), and ones whose range answers are
wrong (other bytes, another range, cut short). The index is simulated by a local server
because the tests reach no real one; the bytes, files and connections are real."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sm120kit.remote.lib import growing, ranges
from sm120kit.remote.lib.download import DownloadFailed
from sm120kit.remote.lib.obtain import obtain

DATA = os.urandom(3 * 1024 * 1024 + 12345)  # not a multiple of the parts: the last is short
SHA = hashlib.sha256(DATA).hexdigest()


@contextmanager
def server(mode: str) -> Iterator[tuple[str, list[str]]]:
    """A loopback server of `DATA` at ``/f.whl``; yields (URL, the Range header of each
    request, "" for none). `mode`: ``ranges`` (206 for the range asked), ``ignore`` (200
    and the whole file, whatever was asked), ``corrupt`` (206, one byte of a later range
    flipped), ``other`` (206 with a range other than the one asked), ``short`` (a later
    range's connection closed half way)."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked = self.headers.get("Range") or ""
            seen.append(asked)
            got = re.fullmatch(r"bytes=(\d+)-(\d+)", asked)
            if mode == "ignore" or got is None:
                return self._send(200, DATA, {})
            first, last = int(got.group(1)), int(got.group(2))
            body = DATA[first : last + 1]
            shown = f"bytes {first}-{last}/{len(DATA)}"
            if mode == "corrupt" and first > 0:
                body = bytes([body[0] ^ 0xFF]) + body[1:]
            if mode == "other" and first > 0:
                shown = f"bytes {first + 1}-{last + 1}/{len(DATA)}"
            if mode == "short" and first > 0:
                return self._send(206, body[: len(body) // 2], {"Content-Range": shown}, len(body))
            self._send(206, body, {"Content-Range": shown})

        def _send(self, code: int, body: bytes, headers: dict[str, str], size: int = 0) -> None:
            self.send_response(code)
            self.send_header("Content-Length", str(size or len(body)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/f.whl", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    ("size", "parts"),
    [
        (0, 1),
        (ranges.PART_MIN, 1),
        (2 * ranges.PART_MIN - 1, 1),
        (2 * ranges.PART_MIN, 2),
        (3 * ranges.PART_MIN + 5, 3),
        (555 * 10**6, ranges.PARTS_MAX),
    ],
)
def test_parts_for(size: int, parts: int) -> None:
    """A file is split only when each part is at least PART_MIN; at most PARTS_MAX parts."""
    assert ranges.parts_for(size) == parts


@pytest.mark.parametrize(("size", "parts"), [(10, 3), (12, 4), (1, 1), (len(DATA), 4)])
def test_bounds_cover_the_file_once(size: int, parts: int) -> None:
    spans = ranges.bounds(size, parts)
    assert len(spans) == parts
    assert spans[0][0] == 0 and spans[-1][1] == size - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(spans, spans[1:], strict=False))


def test_ranges_written_in_place(tmp_path: Path) -> None:
    """Four ranges, four connections, each written at its offset: the file is the whole."""
    dest = tmp_path / "f.whl.part"
    with server("ranges") as (url, seen):
        got = ranges.download_ranges(url, str(dest), len(DATA), parts=4)
    assert got == SHA and dest.read_bytes() == DATA
    assert sorted(seen) == sorted(f"bytes={a}-{b}" for a, b in ranges.bounds(len(DATA), 4))


def test_a_server_ignoring_range_is_read_as_one_stream(tmp_path: Path) -> None:
    """A 200 to the first range is the whole file: read on that one connection, no more."""
    dest = tmp_path / "f.whl.part"
    with server("ignore") as (url, seen):
        got = ranges.download_ranges(url, str(dest), len(DATA), parts=4)
    assert got == SHA and dest.read_bytes() == DATA
    assert len(seen) == 1


@pytest.mark.parametrize(
    ("mode", "words"),
    [("other", "asked for bytes"), ("short", "connection closed after")],
)
def test_a_wrong_range_fails_the_file_and_leaves_nothing(
    tmp_path: Path, mode: str, words: str
) -> None:
    dest = tmp_path / "f.whl.part"
    with server(mode) as (url, _seen), pytest.raises(DownloadFailed) as err:
        ranges.download_ranges(url, str(dest), len(DATA), parts=4)
    assert words in str(err.value) and "\n" not in str(err.value)
    assert not dest.exists()


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of 1 MiB, so that the 3 MiB file is split as a 555 MB one is."""
    monkeypatch.setattr(ranges, "PART_MIN", 1 << 20)


def _entry(tmp_path: Path, url: str) -> dict[str, object]:
    return {
        "name": "big",
        "version": "1.0",
        "url": url,
        "sha256": SHA,
        "dest": str(tmp_path / "releases" / "f.whl"),
        "size": len(DATA),
    }


@pytest.mark.parametrize("mode", ["ranges", "ignore"])
def test_obtain_splits_a_big_file_and_places_it_checked(
    tmp_path: Path, small_parts: None, mode: str
) -> None:
    """obtain() takes the lock's size from the entry: split (or one stream where the server
    ignores ranges), checked, and only then at its name."""
    with server(mode) as (url, seen):
        entry = _entry(tmp_path, url)
        line, fetched, corrupt = obtain(entry, 30, [])
    assert line is None and fetched == len(DATA) and not corrupt
    assert Path(str(entry["dest"])).read_bytes() == DATA
    assert len(seen) == (3 if mode == "ranges" else 1)
    assert os.listdir(tmp_path / "releases") == ["f.whl"]


def test_obtain_a_corrupt_range_is_one_error_and_nothing_placed(
    tmp_path: Path, small_parts: None
) -> None:
    """A range with other bytes: every range arrives, the whole file's sha256 is not the
    lock's: one line naming the file, nothing at its name, no part file left."""
    with server("corrupt") as (url, _seen):
        entry = _entry(tmp_path, url)
        line, _fetched, corrupt = obtain(entry, 30, [])
    assert line is not None and "\n" not in line
    assert line.startswith("big 1.0: sha256 ") and f"differs from the lock's {SHA}" in line
    assert not corrupt
    assert os.listdir(tmp_path / "releases") == []


@pytest.mark.parametrize("mode", ["ranges", "ignore"])
def test_ranges_report_only_the_prefix_from_the_start(tmp_path: Path, mode: str) -> None:
    """What the host's peer server may send on while ranges arrive (`growing.Growing`): the
    bytes written from the file's start, never past a range still arriving, ending at the
    whole file; each reported prefix is really in the part file (read back as it is told)."""
    dest = tmp_path / "f.whl.part"
    told: list[int] = []

    class Watch:
        def reached(self, n: int) -> None:
            with open(dest, "rb") as f:
                assert f.read(n) == DATA[:n]  # reported bytes are in the file already
            told.append(n)

    with server(mode) as (url, _seen):
        got = ranges.download_ranges(url, str(dest), len(DATA), parts=4, grow=Watch())
    assert got == SHA
    assert told == sorted(told) and told[-1] == len(DATA)


def test_growing_reached_only_moves_forward() -> None:
    """`Growing.reached` from range threads that report out of order keeps the largest."""
    entry = growing.begin("0" * 64, "f.whl", "/nonexistent.part", 100)
    try:
        entry.reached(40)
        entry.reached(10)
        assert entry.wait_past(0, idle_s=0)[0] == 40
    finally:
        entry.end(False)
