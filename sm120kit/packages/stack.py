"""What smoke is told about the serving stack's packages: the descriptors (`registry`, one type
for the packages the tool builds and those it only installs from releases) say which packages
there are, under which names, and which toolchain rule a run-time compiler follows; the
release catalogues (``locks/*/catalogue.toml``, read from the wheels) say what each release
carries: its modules' device code and its loader's per-arch directories.

`smoke` checks every package of the stack an env holds: the compiled ones like a named package,
the ones that compile at run time through their CUDA toolchain (`jit`, the rule in
``remote/lib/jit_toolchain.py``), and the top-level package by importing it.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from .. import engines
from ..errors import RecipeError
from ..memo import Same, once
from ..remote.lib.names import dist_name
from ..stack.catalogue import Catalogue, load_beside
from ..stack.lock import load_lock
from . import registry
from .base import LoaderChoice

#: The shipped lock directories, each with its generated catalogue.toml (docs/catalogue.md).
LOCKS = Path(__file__).resolve().parent.parent.parent / "locks"

#: The package a serving env is for when it holds no engine of `engines.ENGINES`; smoke
#: imports the first engine installed (`engines.probe_engines`).
TOP_LEVEL = engines.DEFAULT


def package_name(name: str) -> str:
    """The package a distribution name belongs to: every name a distribution is published
    under finds the same descriptor and facts (`sglang-kernel`, `sglang_kernel` and
    `sgl-kernel` are all sgl-kernel's). A name nothing knows is returned as given."""
    desc = registry.find(name)
    return desc.name if desc is not None else name


def discover_names() -> tuple[str, ...]:
    """The packages smoke looks for in an env besides those it was asked about: the serving
    stack's descriptors, those the tool builds first."""
    found = registry.serving()
    return tuple(d.name for d in found if d.builds) + tuple(d.name for d in found if not d.builds)


def jit_rules() -> dict[str, dict[str, str]]:
    """``{distribution: {"rule", "source"}}`` of the packages that compile CUDA code at run
    time."""
    return {d.name: {"rule": d.jit, "source": d.jit_source} for d in registry.serving() if d.jit}


def distributions(name: str) -> list[str]:
    """Other distribution names package `name` is published under (sgl-kernel: sglang-kernel;
    sglang-kernel: sgl-kernel), whichever of its names `name` is."""
    desc = registry.find(name)
    if desc is None:
        return []
    return [n for n in registry.published_names(desc) if dist_name(n) != dist_name(name)]


@functools.lru_cache(maxsize=1)
def catalogues() -> tuple[Catalogue, ...]:
    """The catalogues of the shipped lock directories (``locks/*/catalogue.toml``)."""
    if not LOCKS.is_dir():
        return ()
    found = (load_beside(d, f"locks/{d.name}/catalogue.toml") for d in sorted(LOCKS.iterdir()))
    return tuple(c for c in found if c is not None)


def catalogue_archs(names: list[str]) -> list[dict[str, Any]]:
    """The probe's ``module_archs`` facts from the catalogues for a package published under
    `names`: each module without code for a target the catalogue judged (not the module a
    loader imports), for the versions read and the ranges the release names (``when``)."""
    out: list[dict[str, Any]] = []
    for cat in catalogues():
        wanted = set().union(*(cat.names(n) for n in names))
        for rel in cat.releases:
            if rel.distribution not in wanted:
                continue
            loaded = rel.loader.module if rel.loader else None
            for mod in rel.modules():
                for why in mod.not_on.values():
                    fact = {
                        "module": mod.key.replace("/", "."),
                        "sass": list(mod.sass),
                        "versions": list(rel.versions),
                        "when": list(rel.specifiers()),
                        "reason": why,
                        "source": cat.source,
                    }
                    # One fact per module and range (cp311 and cp312 files say the same).
                    same = any(
                        (f["module"], f["versions"]) == (fact["module"], fact["versions"])
                        for f in out
                    )
                    if mod.stem != loaded and not same:
                        out.append(fact)
    return out


def catalogue_wheels(names: list[str]) -> dict[str, dict[str, Any]]:
    """Per wheel sha256 the catalogues read, for a package published under `names`: the device
    code of each module (``{"source", "version", "modules": {path: {"sass", "ptx",
    "relocatable"}}}``). Smoke takes these instead of reading a file again where the env holds
    that very wheel (remote/lib/probe_env.py `catalogued`); a module read with an error is left
    out (read again on the host)."""
    out: dict[str, dict[str, Any]] = {}
    for cat in catalogues():
        wanted = set().union(*(cat.names(n) for n in names))
        beside = locked_torch(cat.path.parent) if cat.path is not None else {}
        for rel in cat.releases:
            if rel.distribution not in wanted:
                continue
            for wheel in rel.wheels:
                mods = {
                    m.path: {"sass": list(m.sass), "ptx": list(m.ptx),
                             "relocatable": list(m.relocatable)}
                    for m in wheel.modules if not m.error
                }  # fmt: skip
                out[wheel.sha256] = {
                    "source": cat.source,
                    "version": wheel.version,
                    "modules": mods,
                }
                if wheel.sha256 in beside:  # the torch the release was locked beside
                    out[wheel.sha256].update(beside[wheel.sha256])
    return out


@once
def locked_torch(folder: Path) -> dict[str, dict[str, str]]:
    """Per wheel sha256 in the locks of lock directory `folder` (its pylock.*.toml, beside its
    catalogue),
    the torch that lock pins (``torch``, ``torch_cuda``, ``torch_source``: the lock file): the
    torch a release was published for when its own metadata pins none (sgl-kernel 0.3.21's
    wheel, sglang 0.5.9's torch 2.9.1)."""
    out: dict[str, dict[str, str]] = {}
    for path in sorted(folder.glob("pylock.*.toml")):
        try:
            lock = load_lock(path)
        except RecipeError:
            continue  # a broken lock is named by whatever loads it for a recipe
        if not lock.torch:
            continue
        where = f"locks/{path.parent.name}/{path.name}"
        for entry in lock.packages:
            out.setdefault(
                entry.sha256,
                {"torch": lock.torch, "torch_cuda": lock.torch_cuda, "torch_source": where},
            )
    return out


def loader(name: str) -> LoaderChoice | None:
    """The per-arch directory rule of the loader of the package published under `name`, from
    the catalogues (read from each release's own loader source), for exactly the versions
    read; None when no catalogue read one. Releases whose loaders differ are not merged: the
    first read is returned and the others are named in the verdict by the catalogues."""
    desc = registry.find(name)
    names = list(registry.published_names(desc)) if desc is not None else [name]
    found: list[tuple[Catalogue, Any]] = []
    for cat in catalogues():
        wanted = set().union(*(cat.names(n) for n in names))
        found += [(cat, r) for r in cat.releases if r.distribution in wanted and r.loader]
    if not found:
        return None
    first = found[0][1].loader
    # Oldest release first, whichever lock directory read it.
    same = sorted(((c, r) for c, r in found if r.loader == first), key=lambda cr: _key(cr[1]))
    variants = dict(first.variants)
    read = [f"{r.distribution} {', '.join(r.versions)} ({c.source})" for c, r in same]
    return LoaderChoice(
        package=first.package,
        module=first.module,
        by_capability=tuple((k, v) for k, v in variants.items() if k != "*"),
        otherwise=variants.get("*", first.without_gpu),
        without_gpu=first.without_gpu,
        versions=tuple(v for _c, r in same for v in r.versions),
        source=f"{first.source} of {'; '.join(read)}",
    )


def _key(release: Any) -> tuple[int, Any]:
    try:
        return (0, Version(release.versions[0]))
    except InvalidVersion:
        return (1, release.versions[0])


def smoke_facts(name: str) -> dict[str, Any]:
    """What the probe is told about package `name`: its loader rule and the modules whose
    device code is known per release, both from the catalogues (read from the wheels);
    ``{}`` when nothing is known."""
    out: dict[str, Any] = {}
    desc = registry.find(name)
    if desc is None:
        return out
    rule = loader(name)
    if rule is not None:
        out["loader"] = rule.to_json()
    names = list(registry.published_names(desc))
    facts = catalogue_archs(names)
    if facts:
        out["module_archs"] = facts
    wheels = catalogue_wheels(names)
    if wheels:
        out["wheels"] = wheels
    return out


def probe_knowledge(names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The probe arguments for a whole-env smoke of `names` plus the stack:
    ``distributions``, ``facts``, ``discover``, ``jit``, ``top``, ``engines``. Derived from
    the shipped catalogues and registry only: computed once per process for the same names
    (each host of a run asks twice) and the same registrations, shared: callers read it,
    never change it."""
    registered = Same((*registry.descriptors(), *engines.ENGINES.values()))
    return _probe_knowledge(tuple(names), registered)


@once
def _probe_knowledge(names: tuple[str, ...], registered: Same) -> dict[str, Any]:
    del registered  # the memo's key only: another registration, another value
    # A package asked for under another of its names (`sglang-kernel`) is not discovered
    # again under the descriptor's (`sgl-kernel`): one row per distribution.
    asked = {package_name(n) for n in names}
    discover = [n for n in discover_names() if n not in names and package_name(n) not in asked]
    every = list(dict.fromkeys([*names, *discover]))
    return {
        "distributions": {n: distributions(n) for n in every if distributions(n)},
        "facts": {n: smoke_facts(n) for n in every if smoke_facts(n)},
        "discover": discover,
        "jit": jit_rules(),
        "top": TOP_LEVEL,
        "engines": engines.probe_engines(),
    }
