"""Tiny real wheels on a real loopback package index, for the lock and stack tests.

`make_wheel` writes a valid wheel (METADATA, WHEEL, RECORD with sha256 lines; pip installs
it) holding one module, and optionally a real shared object copied from this machine (a
"compiled" wheel without device code). `serve` runs a PEP 503 simple index over
`http.server` on 127.0.0.1 in a thread: ``/simple/<name>/`` lists each file with its
``#sha256=`` fragment, as PyPI does, and ``/files/<wheel>`` serves the bytes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import re
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sm120kit.stack.lock import LockEntry

#: A real ELF shared object of this machine (no CUDA in it): what a compiled wheel carries.
SYSTEM_SO = next(
    (
        p
        for p in (
            Path("/lib/x86_64-linux-gnu/libz.so.1"),
            Path("/usr/lib/x86_64-linux-gnu/libz.so.1"),
        )
        if p.exists()
    ),
    None,
)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    out: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    tag: str = "py3-none-any",
    shared_object: Path | None = None,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Write ``<name>-<version>-<tag>.whl`` into `out` and return its path; `extra`: more
    files, by their path in the wheel."""
    mod = re.sub(r"[-.]", "_", name).lower()
    dist = f"{mod}-{version}.dist-info"
    files: dict[str, bytes] = {f"{mod}/__init__.py": f"VERSION = {version!r}\n".encode()}
    if shared_object is not None:
        files[f"{mod}/_native.cpython-311-x86_64-linux-gnu.so"] = shared_object.read_bytes()
    files.update(extra or {})
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    files[f"{dist}/METADATA"] = ("\n".join(meta) + "\n").encode()
    pure = "true" if tag.endswith("-any") else "false"
    wheel = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: {pure}\nTag: {tag}\n"
    files[f"{dist}/WHEEL"] = wheel.encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = out / f"{mod}-{version}-{tag}.whl"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock_entry(wheel: Path, url: str) -> LockEntry:
    """A release lock entry for `wheel` as served by `serve` at `url` (its ``files/`` dir)."""
    name, version = wheel.name.split("-")[:2]
    return LockEntry(
        name=name,
        version=version,
        filename=wheel.name,
        url=f"{url.rsplit('/', 1)[0]}/files/{wheel.name}",
        sha256=sha256_of(wheel),
        source="release",
        compiled=False,
        size=wheel.stat().st_size,
    )


@contextmanager
def serve(
    files: Path,
    log: list[str] | None = None,
    hold: tuple[str, threading.Event] | None = None,
    auth: dict[str, str] | None = None,
) -> Iterator[str]:
    """A simple index of every wheel under `files`; yields its base URL (``.../simple``).
    `log` gets the name of every file served (to count downloads). `hold` (prefix, event): a
    file whose name starts with the prefix is sent half, then the rest once the event is set
    (at most 120 s later): a download caught in flight. `auth`: while it holds ``user`` and
    ``password``, every request needs them as HTTP basic auth (401 otherwise), as a private
    index does."""
    # Wheels, and sdists (a wheel stub's): uv reads both from a page.
    wheels = sorted([*files.glob("*.whl"), *files.glob("*.tar.gz")])

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet test output
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - uv asks for a file's size first
            self.head_only = True
            self.do_GET()

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if auth:
                pair = f"{auth['user']}:{auth['password']}".encode()
                want = "Basic " + base64.b64encode(pair).decode()
                if self.headers.get("Authorization") != want:
                    return self._send(401, b"unauthorized", "text/plain")
            if path.startswith("/files/"):
                target = files / path[len("/files/") :]
                if target.is_file():
                    if log is not None and not getattr(self, "head_only", False):
                        log.append(target.name)
                    data = target.read_bytes()
                    if hold is not None and target.name.startswith(hold[0]):
                        return self._send_held(data, hold[1])
                    return self._send(200, data, "application/octet-stream")
            m = re.fullmatch(r"/simple/([^/]+)/?", path)
            if m:
                want = re.sub(r"[-_.]+", "-", m.group(1)).lower()
                links = [
                    f'<a href="/files/{w.name}#sha256={sha256_of(w)}">{w.name}</a>'
                    for w in wheels
                    if re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() == want
                ]
                if links:
                    body = "<html><body>" + "<br>".join(links) + "</body></html>"
                    return self._send(200, body.encode(), "text/html")
            self._send(404, b"not found", "text/plain")

        def _send_held(self, data: bytes, event: threading.Event) -> None:
            if getattr(self, "head_only", False):
                return self._send(200, data, "application/octet-stream")
            self._send(200, data[: len(data) // 2], "application/octet-stream", size=len(data))
            self.wfile.flush()
            event.wait(120)
            with contextlib.suppress(OSError):  # the reader may be gone (killed)
                self.wfile.write(data[len(data) // 2 :])

        def _send(self, code: int, data: bytes, kind: str, size: int | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data) if size is None else size))
            # One request per connection, said out loud: uv's client would otherwise try to
            # reuse a connection the server is closing.
            self.send_header("Connection", "close")
            self.end_headers()
            if not getattr(self, "head_only", False):
                self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


#: The recipe's own [torch] for a tiny stack: its [stack] is not a shared stack line, so it
#: names no torch (2.14.1: the torch the real 0.5.23 lock holds).
TINY_TORCH = '[torch]\nversion = "2.14.1"\nindex = "pypi"\ncuda = "13.0"\n\n'


def stack_on_lock(root: Path, lock_text: str, top: str, reason: str) -> Path:
    """Write `lock_text` as `root/locks/demo`'s cp311 lock and point the copied recipes'
    r580 [stack] at it (`root/recipes` must be a copy of the repo's recipes); returns the
    recipes directory."""
    (root / "locks" / "demo").mkdir(parents=True, exist_ok=True)
    (root / "locks" / "demo" / "pylock.cp311-manylinux_2_34_x86_64.toml").write_text(lock_text)
    return point_r580_at_demo(root, top, reason)


def point_r580_at_demo(root: Path, top: str, reason: str) -> Path:
    """Replace the copied r580 recipe's [stack] table (and pin its torch) so that its stack is
    `top` from the locks in `root/locks/demo`; returns the recipes directory."""
    recipe = root / "recipes" / "r580.toml"
    body = recipe.read_text()
    start = body.index("\n[stack]\n") + 1
    end = body.find("\n[", start + 1)
    table = TINY_TORCH + f'[stack]\ntop = "{top}"\nlocks = "locks/demo"\nreason = "{reason}"\n'
    recipe.write_text(body[:start] + table + (body[end:] if end != -1 else ""))
    return root / "recipes"
