"""Whether a version is in a PEP 440 specifier set, for the hosts (no `packaging` there): the
version range a release fact holds for (``">=0.4.10,<0.5"``, Spack's ``when=``).

Semantics are `packaging.specifiers.SpecifierSet(spec).contains(version, prereleases=True)`
(tests/unit/test_version_spec.py compares the two over a table): the comparison key of
`packaging.version`, ``==``/``!=`` with ``.*`` prefixes, ``~=``, ``===``, the exclusive
``<``/``>`` rules for pre-, post-releases and local labels. A local label of the version asked
(``+cu130``) is ignored unless the specifier names one.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

_VERSION = re.compile(
    r"""^\s*v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)
    (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>\d+)?)?
    (?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$""",
    re.VERBOSE | re.IGNORECASE,
)
_SPEC = re.compile(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+?)\s*$")
_PRE = {"alpha": "a", "a": "a", "beta": "b", "b": "b", "c": "rc", "pre": "rc", "preview": "rc",
        "rc": "rc"}  # fmt: skip
_INF = (1, 0)
_NEG = (-1, 0)


class Ver:
    """A parsed PEP 440 version: its parts and `packaging`'s comparison key."""

    def __init__(self, text: str) -> None:
        """Parse `text`; ValueError when it is no PEP 440 version."""
        m = _VERSION.match(text)
        if not m:
            raise ValueError(f"not a PEP 440 version: {text!r}")
        self.text = text
        self.epoch = int(m.group("epoch") or 0)
        self.release = tuple(int(x) for x in m.group("release").split("."))
        self.pre = (
            (_PRE[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
            if m.group("pre_l")
            else None
        )
        post = m.group("post_n1") or m.group("post_n2")
        self.post = int(post or 0) if (m.group("post_n1") or m.group("post_l")) else None
        self.dev = int(m.group("dev_n") or 0) if m.group("dev_l") else None
        self.local = m.group("local")

    @property
    def is_prerelease(self) -> bool:
        """A pre- or development release."""
        return self.pre is not None or self.dev is not None

    def public(self) -> Ver:
        """The same version without its local label."""
        out = Ver(self.text.split("+", 1)[0])
        return out

    def key(self) -> tuple[Any, ...]:
        """`packaging.version._cmpkey`: trailing zeros of the release do not count."""
        rel = list(self.release)
        while len(rel) > 1 and rel[-1] == 0:
            rel.pop()
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple[Any, ...] = _NEG
        elif self.pre is None:
            pre = _INF
        else:
            pre = (0, {"a": 0, "b": 1, "rc": 2}[self.pre[0]], self.pre[1])
        post = _NEG if self.post is None else (0, self.post)
        dev = _INF if self.dev is None else (0, self.dev)
        local: tuple[Any, ...] = ()
        if self.local:
            local = tuple(
                (1, int(p), "") if p.isdigit() else (0, 0, p.lower())
                for p in re.split(r"[-_.]", self.local)
            )
        return (self.epoch, tuple(rel), pre, post, dev, local)

    def base(self) -> tuple[int, tuple[int, ...]]:
        """(epoch, release) with trailing zeros dropped: ``base_version`` compared."""
        rel = list(self.release)
        while len(rel) > 1 and rel[-1] == 0:
            rel.pop()
        return self.epoch, tuple(rel)


def _prefix_match(spec: str, v: Ver) -> bool:
    """``==1.2.*``: the version's epoch and release start with 1.2 (padded with zeros)."""
    want = Ver(spec[:-2])
    if want.epoch != v.epoch:
        return False
    n = len(want.release)
    have = (v.release + (0,) * n)[:n]
    if have != want.release:
        return False
    if want.pre is not None or want.post is not None or want.dev is not None:
        return (want.pre, want.post, want.dev) == (v.pre, v.post, v.dev)
    return True


def _one(op: str, spec: str, version: str) -> bool:
    if op == "===":
        return version.strip().lower() == spec.strip().lower()
    v = Ver(version)
    if op in ("==", "!=") and spec.endswith(".*"):
        hit = _prefix_match(spec, v.public())
        return hit if op == "==" else not hit
    s = Ver(spec)
    if op in ("==", "!="):
        cand = v if s.local else v.public()
        hit = cand.key() == s.key()
        return hit if op == "==" else not hit
    pub = v.public()
    if op == "~=":
        if len(s.release) < 2:
            raise ValueError(f"~={spec}: needs at least two release numbers")
        prefix = ".".join(str(x) for x in s.release[:-1])
        if s.epoch:
            prefix = f"{s.epoch}!{prefix}"
        return pub.key() >= s.key() and _prefix_match(prefix + ".*", pub)
    if op == ">=":
        return pub.key() >= s.key()
    if op == "<=":
        return pub.key() <= s.key()
    if op == "<":
        if not pub.key() < s.key():
            return False
        return s.is_prerelease or not pub.is_prerelease or pub.base() != s.base()
    # ">"
    if not pub.key() > s.key():
        return False
    if s.post is None and pub.post is not None and pub.base() == s.base():
        return False
    return not (v.local and v.base() == s.base())


def contains(spec_set: str, version: str) -> bool:
    """Whether `version` is in the specifier set `spec_set` (``">=0.4.10,<0.5"``; empty: every
    version), pre-releases included. ValueError for a specifier or version it cannot read."""
    for part in spec_set.split(","):
        if not part.strip():
            continue
        m = _SPEC.match(part)
        if not m:
            raise ValueError(f"not a PEP 440 specifier: {part.strip()!r}")
        if not _one(m.group(1), m.group(2), version):
            return False
    return True


def any_contains(spec_sets: Iterable[str], version: Any) -> bool:
    """Whether one of `spec_sets` (a fact's range: one set per range it holds for) contains
    `version`; False for no version, an unreadable one, or no set."""
    if not version:
        return False
    try:
        return any(contains(s, str(version)) for s in spec_sets)
    except ValueError:
        return False
