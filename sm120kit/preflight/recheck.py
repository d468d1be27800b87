"""Preflight's hand-written rules re-checked against a release's files (`lock.draft`, and
preflight itself for the installed versions).

A rule (sm120kit/preflight/rules.py `RULES`) holds for the version range it was verified in,
and some rules state a fact about a package's device code (`Rule.cites`: a distribution and
a path prefix in its wheel). When a release is drafted, each rule is checked against that
release's locked versions and its catalogue (the facts read from its wheels): a rule is
flagged when the release is outside the range it was verified for, when a module it cites is
no longer in the release, or when the release's files disprove its premise: a cited module
now has code for the target arch, or the cited package now ships kernel sources for it
(``smNNN_*.cuh`` under the prefix, the catalogue's ``kernel_sources`` arch gates: a JIT
package such as sgl-deep-gemm has no device code in its module to read). The wheel wins:
the rule should go or be narrowed. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..remote.lib.cudaarch import arch_verdict, parse_cc
from ..stack.catalogue import Catalogue, ReleaseFacts, norm
from .rules import RULES, Rule


@dataclass(frozen=True)
class RuleFlag:
    """One rule that may no longer apply to the release, and why."""

    rule: str
    reason: str

    def line(self) -> str:
        """``rule <id>: <why>``, as lock.draft prints it."""
        return f"rule {self.rule}: {self.reason}"


def disproofs(prefix: str, dist: str, version: str, facts: ReleaseFacts, arch: str) -> list[str]:
    """Why the release's files of `dist` `version` (`facts`, from the catalogue) under
    `prefix` have code for `arch`, one line per witness: a module whose SASS/PTX runs there,
    or per-arch kernel sources for it. Empty when none does (the premise holds)."""
    cc = parse_cc(arch)
    out = []
    for m in facts.modules():
        if not m.path.startswith(prefix) or cc is None:
            continue
        if arch_verdict(list(m.sass), list(m.ptx), cc)[0] == "pass":
            have = ", ".join(m.sass + m.ptx)
            out.append(
                f"cites {m.path}, which now has code for {arch} in {dist} {version} "
                f"({have}; catalogue): the wheel wins, drop or narrow the rule"
            )
    sources = [
        f"{g.source}: {g.text}"
        for g in facts.arch_gates
        if g.kind == "kernel_sources" and g.name.startswith(prefix) and g.admits(arch)
    ]
    if sources:
        out.append(
            f"cites {prefix}*, and {dist} {version} ships kernel sources for {arch} "
            f"({'; '.join(sources)}; catalogue): the release's files disprove the rule's "
            "premise, drop or narrow the rule"
        )
    return out


def recheck_rule(
    rule: Rule, versions: Mapping[str, str], cat: Catalogue | None, arch: str = "12.0"
) -> list[RuleFlag]:
    """Why `rule` may no longer apply to a release locking `versions` ({distribution:
    version}, any spelling) whose catalogue is `cat` (None: only the versions are checked)."""
    have = {norm(k): v for k, v in versions.items()}

    def locked_name(dist: str) -> str | None:
        names = cat.names(dist) if cat is not None else {norm(dist)}
        return norm(dist) if norm(dist) in have else next((n for n in names if n in have), None)

    def version_of(dist: str) -> str | None:
        name = locked_name(dist)
        return have[name] if name else None

    flags = []
    # A distribution published under two names (the kernel package renamed) is one locked
    # release: judged under the name the lock spells, once.
    exact = {norm(d) for d, _s in rule.versions if norm(d) in have}
    locked: dict[str, str | None] = {}
    for dist, _spec in rule.versions:
        name = locked_name(dist)
        alias = name is not None and name != norm(dist) and name in exact
        locked[dist] = have[name] if name and not alias else None
    if not any(locked.values()):
        return []  # none of the distributions it was read in: not a release it is about
    inside, why = rule.scope(locked, "the release locks")
    if not inside:
        flags.append(RuleFlag(rule.id, f"{why}: re-read its source"))
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
        if not any(m.path.startswith(prefix) for m in found.facts.modules()):
            flags.append(
                RuleFlag(rule.id, f"cites {prefix}*, no longer in {dist} {version} (catalogue)")
            )
            continue
        flags += [
            RuleFlag(rule.id, line) for line in disproofs(prefix, dist, version, found.facts, arch)
        ]
    return flags


def premise_disproved(
    rule: Rule, versions: Mapping[str, str | None], cats: Iterable[Catalogue], arch: str
) -> list[str]:
    """Preflight's side: why the installed release's files (as the first catalogue that read
    each cited distribution's installed version knows them) disprove `rule`'s premise on
    `arch`; empty when they do not or no catalogue read them."""
    cats = list(cats)
    out: list[str] = []
    for dist, prefix in rule.cites:
        version = versions.get(dist)
        if not version:
            continue
        for cat in cats:
            found = cat.lookup(dist, str(version))
            if found.facts is not None:
                out += disproofs(prefix, dist, str(version), found.facts, arch)
                break
    return out


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
