"""Preflight's backends checked against the catalogue of release facts (sm120kit/catalogue.py):
the device code of the modules a chosen backend loads, as read from the locked wheels by
`lock.draft` / `lock.catalogue`, for the version the serving env has installed.

Pure: the probe's module entries (what the env holds, with the fatbins read on the host) and
the catalogues in, the files each verdict judges out, each saying where it was read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..stack.catalogue import Catalogue

#: Where a module's device code was read, as the verdict's evidence says it.
FROM_CATALOGUE = "catalogue"
FROM_ENV = "env"


def catalogue_files(
    entry: Mapping[str, Any], cats: Iterable[Catalogue]
) -> tuple[list[dict[str, Any]], str] | None:
    """The files of one probe module entry (``{"installed_dist", "version", "prefix"}``) as the
    first catalogue that read that distribution's version knows them, with that catalogue's
    name; None when no catalogue read it (the env's own files are judged then)."""
    dist, version = entry.get("installed_dist"), entry.get("version")
    if not dist or not version:
        return None
    prefix = str(entry.get("prefix") or "")
    for cat in cats:
        found = cat.lookup(str(dist), str(version))
        if found.facts is None:
            continue
        files = []
        for mod in found.facts.modules():
            if not mod.path.startswith(prefix) or mod.error:
                continue
            files.append(
                {
                    "rel": mod.path,
                    "sass": list(mod.sass),
                    "ptx": list(mod.ptx),
                    "has_fatbin": mod.device_code,
                    "read_from": FROM_CATALOGUE,
                }
            )
        return files, cat.source or str(cat.path or "catalogue")
    return None


def with_catalogue(entry: Mapping[str, Any], cats: Iterable[Catalogue]) -> dict[str, Any]:
    """The probe's module entry, its files replaced by the catalogue's facts when a catalogue
    read the installed version (``"read_from": "catalogue <file>"``), else the env's files
    marked as read there. A catalogue that read the version but has no such module leaves the
    env's files (the verdict then names both)."""
    out = dict(entry)
    env_files = [dict(f, read_from=FROM_ENV) for f in entry.get("files") or []]
    found = catalogue_files(entry, cats)
    if found is not None and found[0]:
        out["files"], out["read_from"] = found[0], f"the catalogue {found[1]}"
    else:
        out["files"], out["read_from"] = env_files, "the env's files"
        if found is not None:
            out["catalogue_note"] = f"{found[1]} read {entry.get('installed_dist')} " + (
                f"{entry.get('version')} and lists no module under {entry.get('prefix')!r}"
            )
    return out


def cubin_coverage(
    dist: str, version: str | None, names: Iterable[str], arch: str, cats: Iterable[Catalogue]
) -> tuple[str, str]:
    """Whether the cubin sets `names` of `dist` `version` have kernels for `arch`, from the
    catalogue's cubin-set facts (``Catalogue.cubin_sets`` / ``CubinSet.coverage``): ("pass" |
    "fail" | "unknown", why). Unknown, saying why, when no catalogue read that version, the
    sets are not among those read, or their coverage cannot be known from the wheel (cubins
    downloaded at run time: flashinfer-python 0.7.2's trtllm-gen sets)."""
    wanted = list(names)
    if not version:
        return "unknown", f"{dist} is not installed in the env"
    for cat in cats:
        if not cat.lookup(dist, version).known:
            continue
        found = {s.name: s for s in cat.cubin_sets(dist, version)}
        lines, worst = [], "pass"
        for name in wanted:
            got = found.get(name)
            if got is None:
                lines.append(f"{name}: not among the cubin sets read")
                worst = "unknown" if worst == "pass" else worst
                continue
            verdict, why = got.coverage(arch)
            lines.append(why if name in why else f"{name}: {why}")
            if verdict == "no":
                worst = "fail"
            elif verdict != "yes" and worst == "pass":
                worst = "unknown"
        where = cat.source or "catalogue"
        return worst, f"{dist} {version} cubin sets ({where}): " + "; ".join(lines)
    return "unknown", (
        f"no catalogue read the cubin sets of {dist} {version} ({', '.join(wanted)}): "
        "their kernels are loaded at run time and were not read"
    )


def gate_refusals(
    gates: Iterable[tuple[str, str]],
    versions: Mapping[str, str | None],
    arch: str,
    cats: Iterable[Catalogue],
) -> list[str]:
    """Why the arch gates `gates` ((distribution, gate name) pairs, rules.py
    ``Backend.gates``) of the installed `versions` refuse `arch`: one line per refusing gate,
    quoting it with its source and the catalogue it was read in. A gate of a distribution not
    installed, of a version no catalogue read, or not among the gates read for that version
    refuses nothing here (the backend's other facts judge it)."""
    cats = list(cats)
    out = []
    for dist, name in gates:
        version = versions.get(dist)
        if not version:
            continue
        for cat in cats:
            found = cat.lookup(dist, version)
            if found.facts is None:
                continue
            gate = found.facts.gate(name)
            if gate is not None and not gate.admits(arch):
                why = gate.not_on.get(arch) or (
                    f"{dist} {version} {gate.source}: {gate.text}: admits "
                    f"{', '.join(gate.archs)} only, not {arch}"
                )
                out.append(f"{why} (read from the catalogue {cat.source or cat.path})")
            break
    return out


def gate_admissions(
    gates: Iterable[tuple[str, str]],
    versions: Mapping[str, str | None],
    arch: str,
    cats: Iterable[Catalogue],
) -> list[str] | None:
    """The arch gates `gates` that admit `arch`, quoted with their source, for a backend that
    is judged by its gates alone (rules.py ``Backend.by_gates``). None when one of them was not
    read for the installed version (not installed, or no catalogue read that version or that
    gate): the backend is then undecided, never a pass resting on a gate nobody read."""
    cats = list(cats)
    out = []
    for dist, name in gates:
        version = versions.get(dist)
        gate, where = None, None
        for cat in cats:
            found = cat.lookup(dist, version) if version else None
            if found is not None and found.facts is not None:
                gate, where = found.facts.gate(name), cat
                break
        if gate is None or where is None:
            return None
        if gate.admits(arch):
            out.append(
                f"{dist} {version} {gate.source}: {gate.text} admits {arch} "
                f"(read from the catalogue {where.source or where.path})"
            )
    return out


def kernel_sources(
    kernels: Iterable[tuple[str, str]],
    versions: Mapping[str, str | None],
    arch: str,
    cats: Iterable[Catalogue],
) -> tuple[str, str] | None:
    """A JIT package's verdict from its per-arch kernel sources (rules.py ``Backend.kernels``:
    (distribution, ``kernel_sources`` gate name)), as the catalogue read them for the
    installed version: ("pass" | "fail", why). None when a distribution is not installed or
    no catalogue read those sources (the backend's module facts judge it then)."""
    cats = list(cats)
    lines, worst = [], "pass"
    for dist, name in kernels:
        version = versions.get(dist)
        if not version:
            return None
        gate = None
        for cat in cats:
            found = cat.lookup(dist, version)
            if found.facts is not None:
                gate, where = found.facts.gate(name), cat.source or str(cat.path)
                break
        if gate is None:
            return None
        if gate.admits(arch):
            lines.append(
                f"JIT-compiled at run time from {dist} {version} {gate.source} "
                f"({gate.text}; read from the catalogue {where})"
            )
        else:
            worst = "fail"
            lines.append(f"{gate.not_on.get(arch) or gate.text} (read from the catalogue {where})")
    return (worst, "; ".join(lines)) if lines else None
