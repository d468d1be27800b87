"""A loopback index with a slow link the test controls, for the fan-out tests.

The index's slow link is simulated (no real index is slow on cue): a request the test
holds gets half of the file at once and the rest only when the test sets the event (at
most 60 s later), so a file is caught while it arrives without asserting on time.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def held_index(
    body: Callable[[str], bytes | None],
    hold: Callable[[str], bool] = lambda name: True,
    with_length: bool = True,
) -> Iterator[tuple[str, threading.Event]]:
    """A loopback server of the files `body(name)` gives (None: 404) at ``<base>/<name>``:
    a request `hold(name)` holds gets half of the file, the rest once the event is set;
    with or without ``Content-Length`` (HTTP/1.0: without, the body ends at the close).
    Yields the base URL and the event."""
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            name = self.path.rsplit("/", 1)[-1]
            data = body(name)
            if data is None:
                self.send_error(404)
                return
            held = hold(name)
            self.send_response(200)
            if with_length:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not held:
                self.wfile.write(data)
                return
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            release.wait(60)
            try:
                self.wfile.write(data[len(data) // 2 :])
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


def wait_for(test: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
    """Poll `test` until it is true; an AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)
