"""One URL to one file on the host, checked: the download both the steps and the source
fetcher use."""

import base64
import hashlib
import http.client
import os
import re
import urllib.parse
import urllib.request

from sm120kit.remote.lib.files import CHUNK, remove

_OPENER = []  # type: list[urllib.request.OpenerDirector]


def loopback_source(host):
    """The address a connection to `host` leaves from: this host's own (the address the
    controller's SSH connection arrived on) when both are loopback addresses, else None (the
    kernel's choice). Loopback hosts on one machine (tests, bench/fleet.py's hosts on
    127.0.0.101..) otherwise all connect from 127.0.0.1, and no traffic could be told apart
    by host, as a LAN host's can by its own address; elsewhere the kernel's routing decides."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    own = parts[2] if len(parts) == 4 else ""
    if own.startswith("127.") and own != "127.0.0.1" and host.startswith("127."):
        return own
    return None


class _HTTPHandler(urllib.request.HTTPHandler):
    """urllib's plain-HTTP handler with `loopback_source`'s source address (the connection's
    host is the proxy's when one is used, so a proxy elsewhere is reached as before)."""

    def http_open(self, req):
        return self.do_open(_connection, req)


def _connection(host, **kwargs):
    source = loopback_source(host.rpartition(":")[0] if host.count(":") == 1 else host)
    if source is not None:
        kwargs["source_address"] = (source, 0)
    return http.client.HTTPConnection(host, **kwargs)


def opener():
    """One urllib opener for every download of this process, with one TLS context: each
    HTTPS connection otherwise loads the CA bundle again (about 50 ms of CPU, more than a
    small file's whole download)."""
    if not _OPENER:
        import ssl

        context = ssl.create_default_context()
        _OPENER.append(
            urllib.request.build_opener(
                urllib.request.HTTPSHandler(context=context), _HTTPHandler()
            )
        )
    return _OPENER[0]


_DIRECT = []  # type: list[urllib.request.OpenerDirector]


def direct_opener():
    """An opener that never goes through a proxy: for a peer host on the hosts' own network
    (a proxy from the environment could not reach it, or would relay its bytes)."""
    if not _DIRECT:
        _DIRECT.append(urllib.request.build_opener(urllib.request.ProxyHandler({}), _HTTPHandler()))
    return _DIRECT[0]


class DownloadFailed(Exception):
    """No file: the request, the connection or the write failed (the message says which)."""


class ChecksumMismatch(DownloadFailed):
    """The whole file arrived and is not the one asked for (no other mirror should be tried)."""


def request_of(url):
    """A urllib request for `url`; userinfo in it (``https://user:pass@host/...``) is taken out
    of the URL and sent as HTTP basic auth (urllib would read ``pass@host`` as the port)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return urllib.request.Request(url)
    host = parts.netloc.rpartition("@")[2]
    plain = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(("%s:%s" % (user, password)).encode("utf-8")).decode("ascii")
    req = urllib.request.Request(plain)
    # Not on a redirect: an index that redirects to another host (a CDN) must not get the
    # credentials passed on to it.
    req.add_unredirected_header("Authorization", "Basic " + token)
    return req


def shown(url):
    """`url` as messages print it: a password in its userinfo as ``****``."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    netloc = "%s:****@%s" % (user, host)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


#: ``scheme://user:password@``: the userinfo of any URL inside a text (a command line, a log
#: line, a JSON document).
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@\"'<>]*):[^/\s@\"'<>]*@")


#: The parts of a presigned URL's query that are its credentials (S3's SigV4 and SigV2).
_SIGNED = re.compile(
    r"((?:X-Amz-(?:Signature|Credential|Security-Token)|Signature|AWSAccessKeyId)=)[^&\s\"'<>]+",
    re.IGNORECASE,
)


def redact_text(text):
    """`text` with the password of every URL in it shown as ``****``, and a presigned URL's
    signature and credential too: the one filter every output channel (console, --json, run
    logs, result.json) passes text through."""
    if "@" in text:
        text = _USERINFO.sub(r"\1:****@", text)
    if "=" in text:
        text = _SIGNED.sub(r"\1****", text)
    return text


def download(url, dest, sha256="", timeout=60, direct=False, grow=None):
    """Fetch `url` to `dest`, checking `sha256` when given; the hex digest it had (`direct`:
    past any proxy, `direct_opener`). `grow` (a `lib/growing.Growing` of `dest`): told each
    block once it is in the file, and the response's length, so this host's peer server can
    send the file on while it arrives (the caller ends it).

    `dest` is removed on any failure. The file exists before the request goes out, so a run
    killed at any point leaves it for the caller's cleanup (callers name it as a part file).
    """
    parent = os.path.dirname(dest)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    digest = hashlib.sha256()
    try:
        chosen = direct_opener() if direct else opener()
        with open(dest, "wb") as out, chosen.open(request_of(url), timeout=timeout) as resp:
            expected = resp.headers.get("Content-Length")
            if grow is not None:
                grow.sized(int(expected) if expected is not None else None)
            total = 0
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                total += len(block)
                digest.update(block)
                out.write(block)
                if grow is not None:
                    out.flush()  # in the file before a reader is told it is there
                    grow.wrote(len(block))
        # http.client's read(n) returns b"" when the server hangs up early instead of raising:
        # a dropped connection must not pass for a short file.
        if expected is not None and total != int(expected):
            raise OSError("connection closed after %d of %s bytes" % (total, expected))
    except Exception as exc:  # urllib raises many types; all mean "no file"
        remove(dest)
        raise DownloadFailed(
            "download of %s failed: %s: %s" % (shown(url), type(exc).__name__, exc)
        ) from None
    got = digest.hexdigest()
    if sha256 and got.lower() != sha256.lower():
        remove(dest)
        raise ChecksumMismatch(
            "sha256 mismatch for %s: expected %s, got %s" % (shown(url), sha256, got)
        )
    return got
