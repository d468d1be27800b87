"""A released file whose lock records no size, served on while it arrives (issue 46: the
three-host index-once flake of tests/real/test_stack.py).

A lock drafted from an index that lists no sizes (a PEP 503 HTML page, as the tiny index of
the stack tests) has no ``size`` for a pure-Python wheel, and the controller sends 0 for it.
The host's peer server took that 0 for the file's length: a taker that came while the file
was still arriving (under load, the usual case) got ``Content-Length: 0``, an empty body,
refused it by its sha256 and took the file from the index again. The length a reader is sent
is the index response's, else the lock's size, else none (the body ends with the
connection): never 0 (remote/lib/growing.py).

Real parts: the host's ``fetch_release`` service, run as a host runs it (its own process,
requests on stdin), its peer server on 127.0.0.1, urllib on both ends. Simulated: the index's
slow link, by a loopback server that sends half the file and the rest only when the test
says, so the reader is caught while the file arrives without asserting on time.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

REPO = Path(__file__).resolve().parents[2]
#: More than two of the downloader's 1 MiB blocks in each half, so bytes are in the part
#: file (and sent on) while the index holds the rest.
DATA = secrets.token_bytes((4 << 20) + 5)
SHA = hashlib.sha256(DATA).hexdigest()
NAME = "demo_blob-1.0-py3-none-any.whl"

#: case -> (the lock records the size, the index sends Content-Length)
CASES = {
    "no size in the lock, the index sends its length": (False, True),
    "no size in the lock, no length from the index": (False, False),
    "the lock's size, the index sends its length": (True, True),
    "the lock's size, no length from the index": (True, False),
}


@contextmanager
def held_index(with_length: bool) -> Iterator[tuple[str, threading.Event]]:
    """A loopback index of `NAME`: half of it, the rest once the event is set (at most 60 s
    later); with or without ``Content-Length`` (HTTP/1.0: then the body ends at the close)."""
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            if with_length:
                self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA[: len(DATA) // 2])
            self.wfile.flush()
            release.wait(60)
            try:
                self.wfile.write(DATA[len(DATA) // 2 :])
            except OSError:
                pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/files", release
    finally:
        release.set()
        server.shutdown()
        server.server_close()


@contextmanager
def service() -> Iterator[subprocess.Popen[str]]:
    """The host's ``fetch_release`` service, as a host runs it (no proxy: all on loopback)."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sm120kit.remote.fetch_release", json.dumps({"workers": 4})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    try:
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _ask(proc: subprocess.Popen[str], request: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()


def _reply(out: IO[str]) -> dict[str, Any]:
    line = out.readline()  # the service answers each request (bounded by its timeouts)
    assert line, "the service ended without a reply"
    return dict(json.loads(line))


def _wait_for(test: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_arriving_is_sent_whole_whatever_sizes_are_known(case: str, tmp_path: Path) -> None:
    """The host downloads the file from an index that holds the second half back; a taker
    asks the host's peer server for it meanwhile: it gets the file's length (or none, when
    neither the lock nor the index gave one), the first half at once, and after the index
    sends the rest, every byte: the lock's sha256. The host's own download ends placed."""
    lock_size, with_length = CASES[case]
    releases = tmp_path / "releases"
    dest = releases / SHA / NAME
    token = secrets.token_hex(16)
    with service() as proc, held_index(with_length) as (url, release):
        assert proc.stdout is not None
        _ask(proc, {"id": 1, "serve": {"root": str(releases), "token": token}})
        served = _reply(proc.stdout)
        assert served["ok"], served
        entry = {
            "name": "demo-blob", "version": "1.0", "url": f"{url}/{NAME}", "sha256": SHA,
            "dest": str(dest), "compiled": False,
            "size": len(DATA) if lock_size else 0,  # 0: what the controller sends for none
        }  # fmt: skip
        _ask(proc, {"id": 2, "entry": entry, "indexes": [url]})
        parts = releases / SHA
        _wait_for(
            lambda: any(p.stat().st_size > 0 for p in parts.glob("*.part")),
            "the host's download began",
        )
        peer = f"http://127.0.0.1:{served['port']}/{token}/{SHA}/{NAME}?arriving=1"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(peer, timeout=60) as resp:
            known = lock_size or with_length
            assert resp.headers.get("Content-Length") == (str(len(DATA)) if known else None)
            head = resp.read(1 << 20)  # sent while the file is still arriving
            assert not dest.exists() and head == DATA[: 1 << 20]
            release.set()
            body = head + resp.read()
        assert hashlib.sha256(body).hexdigest() == SHA
        done = _reply(proc.stdout)
        assert done["ok"] and done["source"] == "index", done
    assert dest.read_bytes() == DATA
