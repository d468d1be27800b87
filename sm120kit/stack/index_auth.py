"""Credentials for a private index, from the controller's netrc file, for the hosts' downloads.

A lock names its index without credentials (`https://host/simple`). When the controller's
netrc file (``$NETRC``, else ``~/.netrc``: the file curl, pip and uv read) has a ``machine``
entry for an index's host, `authed` gives the URL the host is sent: the same URL with the
entry's login and password as its userinfo. It reaches the host only inside a remote script's
program or a service's request, both on stdin (never a command line or an environment a
``ps`` on the host shows); the host's downloader turns the userinfo into HTTP basic auth
(`sm120kit.remote.lib.download.request_of`) and every output channel shows a URL's password
as ``****`` (`redact_text`). uv on the host never reaches an index (``--offline
--no-index``), so no netrc file is ever written on a host.
"""

from __future__ import annotations

import functools
import netrc
import os
import urllib.parse

from ..errors import Sm120Error


class NetrcError(Sm120Error):
    """The controller's netrc file cannot be read (its line said)."""


def netrc_path() -> str:
    """The controller's netrc file: ``$NETRC``, else ``~/.netrc``."""
    return os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")


def _machines(path: str) -> dict[str, tuple[str, str]]:
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return _read(path, (st.st_ino, st.st_size, st.st_mtime_ns))


@functools.cache
def _read(path: str, _version: tuple[int, int, int]) -> dict[str, tuple[str, str]]:
    """The file's machines with a password: read once per version of the file."""
    try:
        hosts = netrc.netrc(path).hosts
    except netrc.NetrcParseError as exc:
        where = f"{exc.filename or path}:{exc.lineno}" if exc.lineno else path
        raise NetrcError(f"{where}: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise NetrcError(f"{path}: cannot be read: {exc}") from None
    return {host.lower(): (login or "", password or "") for host, (login, _a, password) in
            hosts.items() if password}  # fmt: skip


def authed(url: str) -> str:
    """`url` with the controller's netrc credentials for its host as userinfo (unchanged when
    it has userinfo already, is not http(s), or the netrc names no such machine)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or "@" in parts.netloc or not parts.hostname:
        return url
    found = _machines(netrc_path()).get(parts.hostname.lower())
    if found is None:
        return url
    user, password = (urllib.parse.quote(v, safe="") for v in found)
    netloc = f"{user}:{password}@{parts.netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
