"""The host's downloader of a locked file (remote/lib/obtain.py, remote/lib/download.py)
against a real loopback HTTP server: two downloaders of one file at once (served slowly), a
connection dropped mid-file and its retry, and an index that demands HTTP basic auth."""

from __future__ import annotations

import base64
import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.remote.lib.download import download, loopback_source
from sm120kit.remote.lib.obtain import obtain

BODY = bytes(range(256)) * 4096  # 1 MiB
SHA = hashlib.sha256(BODY).hexdigest()
AUTH = "Basic " + base64.b64encode(b"reader:s3cret-pw").decode()


class _Handler(http.server.BaseHTTPRequestHandler):
    drops = 0  # requests still to cut off half-way

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != AUTH:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="idx"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        cut = type(self).drops > 0
        type(self).drops -= 1 if cut else 0
        for i in range(0, len(BODY), 65536):
            if cut and i >= len(BODY) // 2:
                self.connection.close()  # the dropped connection: half the file, then EOF
                return
            self.wfile.write(BODY[i : i + 65536])
            time.sleep(0.002)  # slow enough that two downloads overlap


@pytest.fixture
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://reader:s3cret-pw@127.0.0.1:{server.server_address[1]}/files"
    finally:
        server.shutdown()
        server.server_close()
        _Handler.drops = 0


def _entry(index: str, dest: Path) -> dict[str, object]:
    return {"name": "demo", "version": "1", "url": index + "/demo-1-py3-none-any.whl",
            "sha256": SHA, "dest": str(dest)}  # fmt: skip


def test_two_downloaders_of_one_file_never_share_a_temporary(index: str, tmp_path: Path) -> None:
    dest = tmp_path / "releases" / SHA / "demo-1-py3-none-any.whl"
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(obtain(_entry(index, dest), 30, [index])))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r[0] for r in results] == [None, None]  # type: ignore[index]
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == SHA
    assert sorted(p.name for p in dest.parent.iterdir()) == [dest.name]


def test_a_dropped_connection_leaves_nothing_and_the_retry_succeeds(
    index: str, tmp_path: Path
) -> None:
    _Handler.drops = 1
    dest = tmp_path / "releases" / "demo-1-py3-none-any.whl"
    line, _got, _corrupt = obtain(_entry(index, dest), 30, [index])
    assert line is not None and "connection closed after" in line, line
    assert "s3cret-pw" not in line and "reader:****@" in line
    assert not dest.parent.exists() or list(dest.parent.iterdir()) == []
    again, _got, _corrupt = obtain(_entry(index, dest), 30, [index])
    assert again is None and hashlib.sha256(dest.read_bytes()).hexdigest() == SHA
    assert list(dest.parent.iterdir()) == [dest]


def test_wrong_credentials_are_refused_without_the_password(index: str, tmp_path: Path) -> None:
    wrong = index.replace("s3cret-pw", "wr0ng-pw")
    dest = tmp_path / "demo-1-py3-none-any.whl"
    line, _got, _corrupt = obtain(_entry(wrong, dest), 30, [wrong])
    assert line is not None and "401" in line and "wr0ng-pw" not in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("ssh_connection", "url_host", "source"),
    [
        ("127.0.0.1 5022 127.0.0.77 22", "127.0.0.1", "127.0.0.77"),  # a loopback fleet host
        ("127.0.0.1 5022 127.0.0.1 22", "127.0.0.1", "127.0.0.1"),  # the plain loopback host
        ("", "127.0.0.1", "127.0.0.1"),  # no SSH connection: the kernel's choice
    ],
)
def test_a_loopback_host_connects_from_its_own_address(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ssh_connection: str, url_host: str,
    source: str,
) -> None:  # fmt: skip
    """A loopback host's downloads leave from the address it is reached on, as a LAN host's
    do from its NIC's (bench/fleet.py shapes each host's link by it); a real server sees it."""
    seen: list[str] = []

    class Peer(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.client_address[0])
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"abc")

    monkeypatch.setenv("SSH_CONNECTION", ssh_connection)
    assert loopback_source("10.0.0.5") is None  # never for an address off the machine
    server = http.server.ThreadingHTTPServer((url_host, 0), Peer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for direct in (True, False):
            url = f"http://{url_host}:{server.server_address[1]}/f"
            download(url, str(tmp_path / "f"), hashlib.sha256(b"abc").hexdigest(), direct=direct)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [source, source]
