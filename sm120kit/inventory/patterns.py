"""``--host`` patterns as Ansible reads them: terms split on ``:`` and ``,``, ad-hoc
``user@host:port`` terms, subscripts (``gpus[0]``, ``gpus[1:3]``), globs and ``~regex``.
Part of `sm120kit.inventory.load`.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from typing import Any

from sm120kit.errors import InventoryError
from sm120kit.inventory.host import Host
from sm120kit.inventory.raw import (
    _BAD_NAME_CHARS,
    _BRACKETED_V6,
    _PATTERN_TOKEN,
    _is_ip,
    _parse_port,
)


def _split_pattern(text: str) -> list[str]:
    """Terms of a --host pattern: commas separate; so does ':' unless a port follows it."""
    terms: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        body = piece.lstrip("!&")
        address = body.rpartition("@")[2]
        bracketed = _BRACKETED_V6.fullmatch(address)
        if _is_ip(address) or (bracketed and _is_ip(bracketed.group(1))):
            terms.append(piece)  # IPv6 colons are not separators
            continue
        out: list[str] = []
        for token in _PATTERN_TOKEN.findall(piece):
            if token.isdigit() and out and ":" not in out[-1]:
                out[-1] += ":" + token  # host:port, not a union with a group named 22
            else:
                out.append(token)
        terms.extend(out)
    return terms


def _parse_adhoc(term: str) -> tuple[str | None, str, int | None] | None:
    """(user, address, port) for an ad hoc host token, None when the token does not look like
    one (no '@', no ':port', not an IP address)."""
    user: str | None = None
    rest = term
    if "@" in term:
        user, _, rest = term.rpartition("@")
        if not user or not rest:
            raise InventoryError(f"bad ad hoc host {term!r} in --host (expected user@addr[:port])")
    port_text: str | None = None
    bracketed = _BRACKETED_V6.fullmatch(rest)
    if bracketed and _is_ip(bracketed.group(1)):
        addr, port_text = bracketed.group(1), bracketed.group(2)
    elif _is_ip(rest) or ":" not in rest:
        addr = rest
    else:
        addr, _, port_text = rest.rpartition(":")
    if user is None and port_text is None and not _is_ip(addr):
        return None
    if not addr or _BAD_NAME_CHARS.search(addr) or (":" in addr and not _is_ip(addr)):
        raise InventoryError(f"bad ad hoc host {term!r} in --host (expected user@addr[:port])")
    port = _parse_port(port_text, term, "--host")
    return user, addr, port


def _close_matches(word: str, candidates: list[str]) -> list[str]:
    """Up to three close names, best first, ties in inventory order."""
    scored = []
    for index, name in enumerate(candidates):
        ratio = difflib.SequenceMatcher(None, word, name).ratio()
        if ratio >= 0.6:
            scored.append((-ratio, index, name))
    return [name for _, _, name in sorted(scored)[:3]]


# Ansible's PATTERN_WITH_SUBSCRIPT (inventory/manager.py): `name[3]`, `name[-1]`, `name[1:3]`,
# `name[1:]`, and the removed-but-still-read `name[1-3]`.
_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")


def _split_subscript(term: str) -> tuple[str, tuple[int, int | None] | None]:
    """(expression, (start, end or None)) as Ansible's `_split_subscript`; a regex term keeps
    its brackets (they are part of the regex)."""
    if term[0] == "~":
        return term, None
    match = _SUBSCRIPT.match(term)
    if not match:
        return term, None
    expr, index, start, _, end = match.groups()
    if index:
        return expr, (int(index), None)
    return expr, (int(start), int(end) if end else -1)


def _apply_subscript(hosts: list[Host], subscript: tuple[int, int | None], term: str) -> list[Host]:
    """Ansible's `_apply_subscript`: [i] one host (an error when out of range), [a:b] the hosts
    a to b inclusive, [a:] from a to the end."""
    start, end = subscript
    if end:
        if end == -1:
            end = len(hosts) - 1
        return hosts[start : end + 1]
    try:
        return [hosts[start]]
    except IndexError:
        raise InventoryError(
            f"host pattern {term!r} in --host: subscript [{start}] is out of range"
            f" ({len(hosts)} hosts match)"
        ) from None


def _name_matcher(expr: str) -> Any:
    """A predicate on names: `~regex` (re.match: anchored at the start only, as in Ansible), or a
    shell glob (fnmatch, case-sensitive; a plain name matches only itself)."""
    try:
        if expr[0] == "~":
            return re.compile(expr[1:]).match
        return re.compile(fnmatch.translate(expr)).match
    except re.error as exc:
        raise InventoryError(f"bad host pattern {expr!r} in --host ({exc})") from None
