"""Released files from host to host, without the controller: a host that has a locked file
serves its ``releases/`` over HTTP, and another host of the run takes the file from it,
checked against the lock's sha256 before it takes its final name.

Why HTTP and not scp/ssh from host to host: the hosts of a fleet need not have keys to each
other (the controller's key reaches each of them, nothing reaches one from another), while
any host the controller reaches by address can usually reach another on the same LAN. The
server answers only ``GET /<token>/<sha256>/<filename>`` (the token is the run's, random:
the URLs cannot be guessed by others on the network), reads only regular files under its
root (no symlink followed), binds to the address the controller's SSH connection arrived on
(``SSH_CONNECTION``; 127.0.0.1 without one), and lives as long as the host's ``fetch_release``
service (its stdin: the host's part of the run). The bytes are public released files; what
the taker installs is what the lock's sha256 says, whoever served it.

A file still arriving here (from the index or from another peer: `lib/growing.py`) is served
while it arrives, every byte written so far and then the next as they come (bounded), with
the final size as its length when known: the pipelined fan-out, where each taker is a holder
from its first byte. A writer that fails cuts its readers short; their takers see a short or
wrong file, refuse it by its sha256 and try another holder.

Stdlib only, Python >= 3.8.
"""

import hmac
import os
import re
import socket
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from sm120kit.remote.lib import growing
from sm120kit.remote.lib.download import DownloadFailed, download, redact_text
from sm120kit.remote.lib.files import remove

_SHA = re.compile(r"^[0-9a-f]{64}$")
#: A released file's name: one path component, no hidden or partial file.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")

#: The longest a request waits for a file that is neither here nor arriving yet (this host's
#: own download of it is queued behind others).
FIND_WAIT_S = 60.0

_SERVER = []  # type: list[ThreadingHTTPServer]
_STARTING = threading.Lock()


def _name_ok(name):
    return bool(_NAME.match(name)) and not name.endswith(".part")


class _Handler(BaseHTTPRequestHandler):
    server_version = "sm120kit-peer/1"

    def log_message(self, *args):  # the run's log is the controller's
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        path_part, _, query = self.path.partition("?")
        parts = path_part.split("/")
        ok = (
            len(parts) == 4
            and parts[0] == ""
            and hmac.compare_digest(parts[1], self.server.token)
            and _SHA.match(parts[2]) is not None
            and _name_ok(parts[3])
        )
        if not ok:
            self.send_error(404)
            return
        path = os.path.join(self.server.root, parts[2], parts[3])
        fd = _open_file(path)
        if fd < 0:
            # Not here yet: still arriving (sent on as it grows), or about to (the controller
            # names a host as a holder the moment its own download is asked for).
            # Waited for only when the controller said so (``?arriving=1``): a file an earlier
            # run's record names and that is gone since is a 404 at once.
            wait = FIND_WAIT_S if query == "arriving=1" else 0.0
            entry = growing.find(parts[2], parts[3], wait, lambda: os.path.isfile(path))
            if entry is not None:
                self._send_growing(entry, path)
                return
            fd = _open_file(path)
        if fd < 0:
            self.send_error(404)
            return
        self._send_whole(fd)

    def _send_whole(self, fd):
        with os.fdopen(fd, "rb") as f:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
            self.end_headers()
            self.wfile.flush()
            try:
                # The kernel sends the file (no copy through this process).
                self.connection.sendfile(f)
            except OSError:
                pass  # the taker went away; it checks what it got anyway

    def _send_growing(self, entry, path):
        """Every byte of `entry`'s part file as it is written; the connection is cut (a
        short body for the taker, who then tries another holder) when the writer fails or
        stalls for `growing.IDLE_S`."""
        # The part file is made once the download's first bytes are on their way.
        entry.wait_past(0)
        fd = _open_file(entry.path)
        if fd < 0:  # renamed in (or removed) a moment ago
            fd = _open_file(path)
            if fd < 0:
                self.send_error(404)
            else:
                self._send_whole(fd)
            return
        with os.fdopen(fd, "rb") as f:
            total = entry.wait_sized()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if total is not None:
                self.send_header("Content-Length", str(total))
            self.end_headers()
            self.wfile.flush()
            offset = 0
            try:
                while True:
                    written, total, ended = entry.wait_past(offset)
                    if written > offset:
                        offset += self.connection.sendfile(f, offset, written - offset)
                        continue
                    if not (ended and (total is None or offset >= total)):
                        self.close_connection = True  # failed or stalled: cut short
                    return
            except OSError:
                return  # the taker went away


def _open_file(path):
    """A read-only descriptor of the regular file at `path` (no symlink followed), or -1."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return -1
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return -1
    return fd


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def bind_address():
    """The address this host was reached on by the controller's SSH connection."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    return parts[2] if len(parts) == 4 else "127.0.0.1"


def serve(root, token):
    """Start (once per process) the server of `root` (``<work_root>/releases``); returns
    ``{"ok", "address", "port"}``."""
    with _STARTING:
        if not _SERVER:
            address = bind_address()
            kind = _V6Server if ":" in address else ThreadingHTTPServer
            server = kind((address, 0), _Handler)
            server.daemon_threads = True
            server.root = root
            server.token = token
            thread = threading.Thread(target=server.serve_forever, name="peer-serve")
            thread.daemon = True
            thread.start()
            _SERVER.append(server)
        server = _SERVER[0]
    if server.root != root or not hmac.compare_digest(server.token, token):
        return {"ok": False, "error": "already serving %s for another run" % server.root}
    return {"ok": True, "address": server.server_address[0], "port": server.server_address[1]}


def mirror_problem(url, entry):
    """Why `url` is not a peer's URL of `entry`'s file (None when it is): plain http, a host,
    a path ending in the lock's ``<sha256>/<filename>``."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return "not a valid URL (%s)" % exc
    if parts.scheme != "http" or not parts.hostname or "@" in parts.netloc:
        return "not a plain http://host URL"
    want = "/%s/%s" % (entry["sha256"], os.path.basename(entry["dest"]))
    if not parts.path.endswith(want):
        return "its path does not end in %s" % want
    return None


def store_url_problem(url):
    """Why `url` is not a store's download URL (a presigned S3 URL; None when it is): http(s),
    a host, no userinfo (its credentials, if any, are in its signed query)."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return "not a valid URL (%s)" % exc
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return "not an http(s)://host URL"
    return None


def from_mirrors(entry, timeout):
    """Try `entry`'s ``mirrors`` in order; returns (placed, bytes, refusals).

    A mirror is a peer's URL (a string: downloaded past any proxy, a peer is on the hosts'
    own network) or a store's (``{"url", "store"}``: a presigned S3 URL, through the proxy
    the index would use). Each is downloaded beside `dest` and renamed in only once its
    sha256 is the lock's; a file with other bytes is removed and refused (one line in
    `refusals`), and the next mirror is tried. Nothing is tried when `dest` is there already
    (`obtain` judges that file)."""
    dest, want = entry["dest"], entry["sha256"]
    refusals = []
    if os.path.isfile(dest):
        return False, 0, refusals
    for mirror in entry.get("mirrors") or []:
        store = isinstance(mirror, dict)
        url = mirror["url"] if store else mirror
        problem = store_url_problem(url) if store else mirror_problem(url, entry)
        if problem is not None:
            refusals.append("%s: %s; not used" % (redact_text(url), problem))
            continue
        parent = os.path.dirname(dest)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        part = "%s.%d-%d.peer.part" % (dest, os.getpid(), threading.get_ident())
        # A taker is a holder too from its first byte: its own takers chain on (growing.py).
        grow = growing.begin(want, os.path.basename(dest), part, entry.get("size"))
        placed = False
        try:
            placed, size, line = _one_mirror(url, part, dest, want, store, timeout, grow)
        finally:
            grow.end(placed)
        if placed:
            return True, size, refusals
        refusals.append(line)
    return False, 0, refusals


def _one_mirror(url, part, dest, want, store, timeout, grow):
    """(placed, bytes, refusal line) of one mirror's download into `part`."""
    try:
        got = download(url, part, "", timeout=timeout, direct=not store, grow=grow)
    except DownloadFailed as exc:
        return False, 0, redact_text(str(exc))
    size = os.path.getsize(part)
    if got != want:
        remove(part)
        return False, 0, "%s: sha256 %s differs from the lock's %s; refused" % (
            redact_text(url), got, want)  # fmt: skip
    try:
        os.replace(part, dest)
    except OSError as exc:
        remove(part)
        return False, 0, "cannot place %s: %s" % (dest, exc)
    return True, size, None
