"""One locked file at its place on the host, with the lock's sha256: already there (hashed, or
trusted as hashed on arrival in this run), or downloaded beside and renamed in only once its
sha256 matched. Shared by `install_lock` and the light `fetch_release` script.

Stdlib only, Python >= 3.8.
"""

import os
import re
import threading
from urllib.parse import urlsplit

from sm120kit.remote.lib import growing
from sm120kit.remote.lib.download import DownloadFailed, download, redact_text
from sm120kit.remote.lib.download import shown as redact
from sm120kit.remote.lib.files import remove, sha256_file
from sm120kit.remote.lib.ranges import download_ranges, parts_for

#: Schemes a locked file may be fetched with. ``file`` only under a ``file://`` index the lock
#: names: a lock must never make the controller hand its own files to a host.
_SCHEMES = ("http", "https", "file")
_PORTS = {"http": 80, "https": 443}
#: A control character, a space or a backslash: one regex scan, where a Python loop over
#: each character cost the controller ~0.1 ms per URL (a lock's 207 URLs, checked per read).
_BAD_CHAR = re.compile(r"[\x00-\x20\x7f\\]")


def _origin(url):
    """(scheme, host, port, path segments, userinfo) of `url`, or a string saying why it is
    not a plain absolute URL (urllib.parse: lowercased scheme and host, default ports)."""
    if not isinstance(url, str) or not url or url != url.strip():
        return "not an absolute URL"
    if _BAD_CHAR.search(url):
        return "a control character, space or backslash in it"
    try:
        parsed = urlsplit(url)
        port = parsed.port
    except ValueError as exc:
        return "not a valid URL (%s)" % exc
    scheme = parsed.scheme.lower()
    if scheme not in _SCHEMES:
        return "scheme %r is not one of %s" % (parsed.scheme or "(none)", ", ".join(_SCHEMES))
    host = (parsed.hostname or "").lower()
    if scheme != "file" and not host:
        return "no host"
    if "%" in parsed.netloc:
        return "a percent-encoded host"
    # Percent-encoded dots or slashes in the path could climb out of the index's path.
    raw = parsed.path
    if "%2e" in raw.lower() or "%2f" in raw.lower() or "%5c" in raw.lower():
        return "a percent-encoded dot or slash in its path"
    segments = [x for x in raw.split("/") if x]
    if any(x in (".", "..") for x in segments):
        return "a '.' or '..' path segment"
    userinfo = parsed.netloc.rpartition("@")[0] if "@" in parsed.netloc else ""
    return scheme, host, port or _PORTS.get(scheme), segments, userinfo


def url_problem(url, indexes):
    """Why `url` may not be fetched for a lock naming `indexes` (None when it may): it must be an
    absolute http(s) (or ``file``) URL whose scheme, host and port are one index's and whose
    path is under that index's path. A lock naming no index allows any http(s) URL (an older
    lock) and nothing else. Userinfo in a file's URL must be the index's own (credentials
    come with the index, never from a file entry pointing elsewhere)."""
    got = _origin(url)
    if isinstance(got, str):
        return got
    scheme, host, port, segments, userinfo = got
    if not indexes:
        if scheme == "file":
            return "a file:// URL, and the lock names no index"
        return "userinfo in the URL, and the lock names no index" if userinfo else None
    for index in indexes:
        want = _origin(index.rstrip("/") + "/")
        if isinstance(want, str):
            continue
        w_scheme, w_host, w_port, w_segments, w_userinfo = want
        if (scheme, host, port) != (w_scheme, w_host, w_port) or userinfo != w_userinfo:
            continue
        if segments[: len(w_segments)] == w_segments and len(segments) > len(w_segments):
            return None
    return "not under the lock's indexes (%s)" % ", ".join(redact(i) for i in indexes)


def allowed(url, indexes):
    """Whether `url` may be fetched for a lock naming `indexes` (`url_problem` is None)."""
    return url_problem(url, indexes) is None


def _download(entry, part, timeout, grow):
    """The entry's URL into `part`; its sha256. A big file (the lock's ``size``: `parts_for`)
    over several connections, each range written in place (lib/ranges.py); else one stream,
    the host's peer server sending on what has arrived from the start (`grow`) either way."""
    if _splits(entry):
        return download_ranges(entry["url"], part, entry["size"], timeout=timeout, grow=grow)
    return download(entry["url"], part, "", timeout=timeout, grow=grow)


def _splits(entry):
    """Whether the entry's file is fetched in ranges (big, over HTTP)."""
    size = entry.get("size") or 0
    return parts_for(size) > 1 and entry["url"].startswith(("http://", "https://"))


def obtain(entry, timeout, indexes):
    """The entry's file at its dest with the lock's sha256. Returns (error line or None, bytes
    downloaded, corrupt): a file already there with other bytes is removed and `corrupt`."""
    dest, want = entry["dest"], entry["sha256"]
    fetched = 0
    if not os.path.isfile(dest):
        problem = url_problem(entry["url"], indexes)
        if problem is not None:
            line = "%s %s: %s: %s; not fetched" % (
                entry["name"], entry["version"], redact(entry["url"]), problem)  # fmt: skip
            return line, 0, False
        parent = os.path.dirname(dest)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        # One writer per temporary: a download still running after its connection was given up
        # (or another process fetching the same file) writes its own part file, never this one.
        part = "%s.%d-%d.part" % (dest, os.getpid(), threading.get_ident())
        # This host's peer server may send the file on while it arrives (lib/growing.py).
        grow = growing.begin(want, os.path.basename(dest), part, entry.get("size"))
        placed = False
        try:
            try:
                got = _download(entry, part, timeout, grow)
            except DownloadFailed as exc:
                line = "%s %s: %s" % (entry["name"], entry["version"], redact_text(str(exc)))
                return line, 0, False
            fetched = os.path.getsize(part)
            if got != want:
                remove(part)  # never at its final name: a streaming install takes what is there
                line = "%s %s: sha256 %s differs from the lock's %s (%s)" % (
                    entry["name"], entry["version"], got, want, redact(entry["url"]))  # fmt: skip
                return line, fetched, False
            try:
                os.replace(part, dest)  # only checked bytes ever take the final name
            except OSError as exc:
                remove(part)
                return (
                    "%s %s: cannot place %s: %s" % (entry["name"], entry["version"], dest, exc),
                    0,
                    False,
                )
            placed = True
        finally:
            grow.end(placed)
    elif entry.get("checked"):
        got = want  # arrived in this run, hashed as it arrived (fetch, or the stores' placing)
    else:
        got = sha256_file(dest)
    if got != want:
        remove(dest)  # never install it, never take it for the lock's file again
        line = "%s %s: sha256 %s differs from the lock's %s (%s)" % (
            entry["name"], entry["version"], got, want, redact(entry["url"]))  # fmt: skip
        return line, fetched, not fetched
    return None, fetched, False
