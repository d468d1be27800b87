"""Preflight's hand-written rules re-checked against a new release (`lock.draft`).

A rule (sm120kit/preflight/rules.py `RULES`) holds for the versions it was read in, and some
rules state a fact about a module's device code (`Rule.cites`). When a release is drafted,
each rule is checked against that release's locked versions and its catalogue (the facts read
from its wheels): a rule is flagged when the release is outside every version range it was
verified for, when a module it cites is no longer in the release, or when that module now has
code for the target arch (the wheel wins: the rule should go). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..remote.lib.cudaarch import arch_verdict, parse_cc
from ..stack.catalogue import Catalogue, norm
from .rules import RULES, Rule


@dataclass(frozen=True)
class RuleFlag:
    """One rule that may no longer apply to the release, and why."""

    rule: str
    reason: str

    def line(self) -> str:
        """``rule <id>: <why>``, as lock.draft prints it."""
        return f"rule {self.rule}: {self.reason}"


def _contains(spec: str, version: str) -> bool:
    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def recheck_rule(
    rule: Rule, versions: Mapping[str, str], cat: Catalogue | None, arch: str = "12.0"
) -> list[RuleFlag]:
    """Why `rule` may no longer apply to a release locking `versions` ({distribution:
    version}, any spelling) whose catalogue is `cat` (None: only the versions are checked)."""
    have = {norm(k): v for k, v in versions.items()}

    def version_of(dist: str) -> str | None:
        names = cat.names(dist) if cat is not None else {norm(dist)}
        return next((have[n] for n in names if n in have), None)

    flags = []
    named = [(d, s, version_of(d)) for d, s in rule.versions]
    locked = [(d, s, v) for d, s, v in named if v]
    if not locked:
        return []  # none of the distributions it was read in: not a release it is about
    if not any(_contains(s, v) for _d, s, v in locked):
        got = ", ".join(sorted({f"{d} {v}" for d, _s, v in locked}))
        spans = ", ".join(f"{d}{s}" for d, s, _v in named)
        flags.append(
            RuleFlag(rule.id, f"verified for {spans}; the release locks {got}: re-read its source")
        )
    cc = parse_cc(arch)
    for dist, prefix in rule.cites:
        version = version_of(dist)
        if version is None:
            flags.append(RuleFlag(rule.id, f"cites {prefix}* of {dist}, which the release lacks"))
            continue
        if cat is None:
            continue
        found = cat.lookup(dist, version)
        if found.facts is None:
            flags.append(RuleFlag(rule.id, f"cites {prefix}*: {found.reason}"))
            continue
        mods = [m for m in found.facts.modules() if m.path.startswith(prefix)]
        if not mods:
            flags.append(
                RuleFlag(rule.id, f"cites {prefix}*, no longer in {dist} {version} (catalogue)")
            )
            continue
        runs = [
            m
            for m in mods
            if cc is not None and arch_verdict(list(m.sass), list(m.ptx), cc)[0] == "pass"
        ]
        for m in runs:
            have_code = ", ".join(m.sass + m.ptx)
            flags.append(
                RuleFlag(
                    rule.id,
                    f"cites {m.path}, which now has code for {arch} in {dist} {version} "
                    f"({have_code}; catalogue): the wheel wins, drop or narrow the rule",
                )
            )
    return flags


def recheck_rules(
    versions: Mapping[str, str],
    cat: Catalogue | None,
    arches: Iterable[str] = ("12.0",),
    rules: Iterable[Rule] = RULES,
) -> list[RuleFlag]:
    """Every flag of every rule for the release (see `recheck_rule`), per target arch; a rule
    about GPUs of other majors is checked only for the arches it is about."""
    out: list[RuleFlag] = []
    for arch in arches:
        cc = parse_cc(arch)
        for rule in rules:
            if cc is not None and cc[0] not in rule.majors:
                continue
            for flag in recheck_rule(rule, versions, cat, arch):
                if flag not in out:
                    out.append(flag)
    return out
