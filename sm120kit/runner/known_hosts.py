"""known_hosts read as OpenSSH reads it, for the verdict on one host's presented key.

paramiko's HostKeys parser fails the whole file on an ``@cert-authority`` or ``@revoked``
line ("Incorrect padding") and keeps one key per type per host (a wrong line followed by the
right one reads as CHANGED). The rules here follow ``man 8 sshd`` (section SSH_KNOWN_HOSTS
FILE FORMAT) and OpenSSH's hostfile.c (``hostkeys_foreach``, ``check_key_in_hostkeys``):

- blank lines and ``#`` comments are skipped; a line that does not parse is skipped, not fatal;
- an optional marker ``@revoked`` or ``@cert-authority`` comes first; any other ``@`` word
  makes the line invalid (skipped);
- the host field is a hashed name (``|1|salt|hmac-sha1``) or a comma list of patterns with
  ``*``, ``?`` and ``!`` negation (a negated match rejects the line), compared case-insensitively
  against the name OpenSSH uses: ``host`` for port 22, ``[host]:port`` otherwise;
- a matching ``@revoked`` key is refused even when another line accepts it;
- ``@cert-authority`` lines do not vouch for plain host keys (skipped here);
- several keys may be listed for one host: any equal key accepts; keys listed but none equal
  is CHANGED, whatever their type (OpenSSH 9.2's ssh says "REMOTE HOST IDENTIFICATION HAS
  CHANGED" for a host known only by an RSA key that presents its ED25519 key);
- for a non-22 port an unknown ``[host]:port`` falls back to the bare host name (see
  `check_host`).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import struct
from dataclasses import dataclass
from pathlib import Path


class Verdict(enum.Enum):
    """What known_hosts says about one presented key."""

    ACCEPT = "accept"
    CHANGED = "changed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Entry:
    """One usable known_hosts line."""

    line: int
    marker: str  # "", "@revoked" or "@cert-authority"
    hosts: str
    key_type: str  # the type named inside the key blob
    blob: bytes


@dataclass(frozen=True)
class Result:
    """The verdict and the lines it rests on (for the message)."""

    verdict: Verdict
    lines: tuple[int, ...] = ()


def host_name(address: str, port: int | None) -> str:
    """The name OpenSSH looks up: ``host`` on port 22, ``[host]:port`` otherwise."""
    return f"[{address}]:{port}" if port and port != 22 else address


def _blob_type(blob: bytes) -> str | None:
    if len(blob) < 4:
        return None
    (size,) = struct.unpack(">I", blob[:4])
    if size == 0 or size > len(blob) - 4:
        return None
    try:
        return blob[4 : 4 + size].decode("ascii")
    except UnicodeDecodeError:
        return None


def parse(text: str) -> list[Entry]:
    """The usable lines of a known_hosts text; bad lines are dropped as OpenSSH drops them."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = ""
        if fields[0].startswith("@"):
            if fields[0] not in ("@revoked", "@cert-authority"):
                continue
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue
        key_type = _blob_type(blob)
        if key_type is None:
            continue
        entries.append(Entry(number, marker, fields[0], key_type, blob))
    return entries


def _hashed_match(field: str, name: str) -> bool:
    parts = field.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        want = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    got = hmac.new(salt, name.lower().encode(), hashlib.sha1).digest()
    return hmac.compare_digest(got, want)


def _glob(pattern: str) -> re.Pattern[str]:
    # OpenSSH's match_pattern knows only `*` and `?`: `[` is literal (as in `[host]:port`).
    return re.compile(
        ".*".join(".".join(re.escape(p) for p in part.split("?")) for part in pattern.split("*")),
        re.S,
    )


def host_matches(field: str, name: str) -> bool:
    """Whether a known_hosts host field names ``name`` (OpenSSH's match_hostname)."""
    if field.startswith("|"):
        return _hashed_match(field, name)
    name = name.lower()
    positive = False
    for pattern in field.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        hit = _glob(pattern.lower()).fullmatch(name) is not None
        if hit and negated:
            return False
        positive = positive or hit
    return positive


def check(entries: list[Entry], name: str, blob: bytes) -> Result:
    """The verdict for the key ``blob`` presented by ``name``."""
    mine = [e for e in entries if host_matches(e.hosts, name)]
    revoked = [e.line for e in mine if e.marker == "@revoked" and e.blob == blob]
    if revoked:
        return Result(Verdict.REVOKED, tuple(revoked))
    plain = [e for e in mine if not e.marker]
    equal = [e.line for e in plain if e.blob == blob]
    if equal:
        return Result(Verdict.ACCEPT, tuple(equal))
    if plain:
        return Result(Verdict.CHANGED, tuple(e.line for e in plain))
    return Result(Verdict.UNKNOWN)


def check_host(path: Path, address: str, port: int | None, blob: bytes) -> Result:
    """`check` against a known_hosts file; a missing file knows no host.

    As ssh does for a non-22 port (sshconnect.c, "found matching key w/out port"): when
    ``[host]:port`` is not known at all, an entry for the bare host name with the same key
    accepts and a revoked one refuses; a different key there leaves the host unknown.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Result(Verdict.UNKNOWN)
    entries = parse(text)
    result = check(entries, host_name(address, port), blob)
    if result.verdict is Verdict.UNKNOWN and port and port != 22:
        bare = check(entries, address, blob)
        if bare.verdict in (Verdict.ACCEPT, Verdict.REVOKED):
            return bare
    return result


def refusal(result: Result, name: str, fingerprint: str, path: Path) -> str | None:
    """The one-line refusal for a revoked or changed key; None for accept/unknown."""
    lines = ", ".join(str(n) for n in result.lines)
    if result.verdict is Verdict.REVOKED:
        return (
            f"host key of {name} ({fingerprint}) is REVOKED in {path} (line {lines}); "
            "refusing to connect"
        )
    if result.verdict is Verdict.CHANGED:
        return (
            f"host key for {name} CHANGED: {path} (line {lines}) lists other keys for it, the "
            f"host presented {fingerprint}; refusing to connect (if the change is expected, "
            f"remove the old entry with ssh-keygen -R '{name}')"
        )
    return None
