"""One locked file at its place on the host, with the lock's sha256: already there (hashed, or
trusted as hashed on arrival in this run), or downloaded beside and renamed in only once its
sha256 matched. Shared by `install_lock` and the light `fetch_release` script.

Stdlib only, Python >= 3.8.
"""

import os

from sm120kit.remote.lib.download import DownloadFailed, download
from sm120kit.remote.lib.files import remove, sha256_file


def allowed(url, indexes):
    """Whether `url` is under one of the lock's `indexes` (any URL when the lock names none)."""
    if not indexes:
        return True
    return any(url == i or url.startswith(i.rstrip("/") + "/") for i in indexes)


def obtain(entry, timeout, indexes):
    """The entry's file at its dest with the lock's sha256. Returns (error line or None, bytes
    downloaded, corrupt): a file already there with other bytes is removed and `corrupt`."""
    dest, want = entry["dest"], entry["sha256"]
    fetched = 0
    if not os.path.isfile(dest):
        if not allowed(entry["url"], indexes):
            return (
                (
                    "%s %s: %s is not under the lock's indexes (%s); not fetched"
                    % (entry["name"], entry["version"], entry["url"], ", ".join(indexes))
                ),
                0,
                False,
            )
        parent = os.path.dirname(dest)
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        part = dest + ".part"
        try:
            got = download(entry["url"], part, "", timeout=timeout)
        except DownloadFailed as exc:
            return "%s %s: %s" % (entry["name"], entry["version"], exc), 0, False
        fetched = os.path.getsize(part)
        if got != want:
            remove(part)  # never at its final name: a streaming install takes what is there
            line = "%s %s: sha256 %s differs from the lock's %s (%s)" % (
                entry["name"], entry["version"], got, want, entry["url"])  # fmt: skip
            return line, fetched, False
        os.rename(part, dest)
    elif entry.get("checked"):
        got = want  # arrived in this run, hashed as it arrived (fetch, or the stores' placing)
    else:
        got = sha256_file(dest)
    if got != want:
        remove(dest)  # never install it, never take it for the lock's file again
        line = "%s %s: sha256 %s differs from the lock's %s (%s)" % (
            entry["name"], entry["version"], got, want, entry["url"])  # fmt: skip
        return line, fetched, not fetched
    return None, fetched, False
