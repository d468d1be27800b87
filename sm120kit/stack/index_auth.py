"""Credentials for a lock's private index, from the controller's netrc.

A lock names its indexes without credentials (it is committed and shared). When an index
needs HTTP basic auth, the controller reads them from its netrc (``$NETRC``, else
``~/.netrc``; the format curl, pip and uv read: ``machine HOST login USER password PASS``) and
gives the host's downloader ``scheme://user:password@host:port/`` per index inside the
remote program (stdin: never a command line, an environment or a file on the host;
remote/lib/obtain.py keeps them in its process). Every output channel masks a URL's
password (`redact_text`, remote/lib/download.py); the lock, the plan and the state files
only ever hold the lock's own URLs.
"""

from __future__ import annotations

import functools
import netrc
import os
from pathlib import Path
from urllib.parse import quote, urlsplit

from ..errors import Sm120Error


class NetrcError(Sm120Error):
    """The controller's netrc cannot be read: one line naming the file and line."""


def netrc_path() -> Path:
    """The netrc file the controller reads: ``$NETRC`` when set, else ``~/.netrc``."""
    return Path(os.environ.get("NETRC") or "~/.netrc").expanduser()


@functools.lru_cache(maxsize=8)
def _logins(path: str, stamp: float) -> dict[str, tuple[str, str]]:
    try:
        doc = netrc.netrc(path)
    except netrc.NetrcParseError as exc:
        raise NetrcError(f"{exc.filename}:{exc.lineno}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NetrcError(f"{path}: cannot be read: {exc}") from None
    out = {}
    for host, (login, _account, password) in doc.hosts.items():
        if login and password:
            out[host.lower()] = (login, password)
    return out


def index_auth(indexes: tuple[str, ...] | list[str]) -> list[str]:
    """``scheme://user:password@host[:port]/`` for each of `indexes` (without userinfo of its
    own) whose host the controller's netrc has a login and password for."""
    path = netrc_path()
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return []
    logins = _logins(str(path), stamp)
    out = []
    for url in indexes:
        parts = urlsplit(url)
        if "@" in parts.netloc or not parts.hostname:
            continue
        found = logins.get(parts.hostname.lower())
        if found:
            user, password = (quote(x, safe="") for x in found)
            out.append(f"{parts.scheme}://{user}:{password}@{parts.netloc}/")
    return out
