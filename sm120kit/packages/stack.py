"""The serving stack smoke knows: sglang and the released packages it requires, with what smoke
must know about each, read from the released files (named per entry).

sglang 0.5.23's METADATA requires sglang-kernel==0.4.10, flashinfer_python[cu13]==0.7.2,
sgl-flash-mla==1.0.0, flash-attn-4>=4.0.0b18, quack-kernels==0.6.5,
humming-kernels[cu13]==0.1.12, sgl-deep-gemm==0.2.3.post2 and sgl-deep-ep==0.1.2.post1
(docs/stack-facts.md section 8), and it pins tilelang==0.1.12, which ships TVM's compiled
libraries and compiles its kernels at run time with nvcc. Kernel packages the tool builds
have a descriptor (`registry`); the others are only installed from releases and are listed
here. `smoke` checks every one of them an env holds: the compiled ones like a named package,
the ones that compile at run time through their CUDA toolchain (`jit`, the rule in
``remote/lib/jit_toolchain.py``), and the top-level package by importing it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..remote.lib.names import dist_name
from ..stack.catalogue import Catalogue, load_beside
from . import registry
from .base import ModuleArchs

#: The shipped lock directories, each with its generated catalogue.toml (docs/catalogue.md).
LOCKS = Path(__file__).resolve().parent.parent.parent / "locks"

#: The package a serving env is for; smoke imports it.
TOP_LEVEL = "sglang"


@dataclass(frozen=True)
class StackPackage:
    """A package of the serving stack that the tool installs from releases, never builds.

    - `name`: its distribution name; `distributions`: other names it was published under;
    - `jit`: the toolchain lookup rule (``remote/lib/jit_toolchain.RULES``) of a package that
      compiles CUDA code at run time, None for one that ships compiled code;
    - `module_archs`: its modules' device code for releases no catalogue read (the
      catalogues, ``locks/*/catalogue.toml``, give the rest);
    - `jit_source`: the files of the package its toolchain rule was read from.
    """

    name: str
    jit: str | None = None
    jit_source: str = ""
    distributions: tuple[str, ...] = ()
    module_archs: tuple[ModuleArchs, ...] = ()


#: The released packages of sglang 0.5.23 other than sglang-kernel (a descriptor's).
STACK = (
    # sgl-flash-mla 1.0.0 and sgl-deep-ep 0.1.2.post1: their modules' device code (no 12.0
    # code in either: FlashMLA; DeepEP keeps sm_120 only as relocatable device code) is in
    # locks/sglang-0.5.23/catalogue.toml, read from the wheels.
    StackPackage("sgl-flash-mla"),
    StackPackage("sgl-deep-ep"),
    # sgl-deep-gemm 0.2.3.post2's deep_gemm/_C.so holds no device code: its kernels are
    # compiled at run time (deep_gemm/__init__.py, _C.init with find_cuda_home()).
    StackPackage(
        "sgl-deep-gemm",
        jit="deep-gemm",
        jit_source="deep_gemm/cuda_helpers.py find_cuda_home(); deep_gemm/__init__.py _C.init; "
        "deep_gemm/build_ext.py include dirs (sgl-deep-gemm 0.2.3.post2)",
    ),
    StackPackage(
        "flashinfer-python",
        jit="flashinfer",
        jit_source="flashinfer/jit/cpp_ext.py get_cuda_path(), generate_ninja_build_for_op(); "
        "flashinfer/compilation_context.py _normalize_cuda_arch() (flashinfer-python 0.7.2)",
    ),
    StackPackage(
        "flash-attn-4",
        jit="cute-dsl",
        jit_source="Requires-Dist nvidia-cutlass-dsl>=4.6.2, no nvcc or CUDA_HOME lookup in its "
        "sources; flash_attn/cute/cute_dsl_ptxas.py runs CUTE_DSL_PTXAS_PATH (flash-attn-4 "
        "4.0.0b36)",
    ),
    StackPackage(
        "quack-kernels",
        jit="cute-dsl",
        jit_source="Requires-Dist nvidia-cutlass-dsl>=4.7, no nvcc or CUDA_HOME lookup in its "
        "sources (quack-kernels 0.6.5)",
    ),
    StackPackage(
        "tilelang",
        jit="tilelang",
        jit_source="tilelang/env.py _find_cuda_home(); tilelang/contrib/nvcc.py "
        "get_nvcc_compiler(), -I<home>/include (tilelang 0.1.12)",
    ),
    StackPackage(
        "humming-kernels",
        jit="humming",
        jit_source="humming/utils/cuda.py find_all_cuda_paths(), filter_cuda_paths(); "
        "humming/jit/compiler.py; humming/jit/runtime.py _get_compiler() (humming-kernels 0.1.12)",
    ),
)


def _names(name: str, others: tuple[str, ...]) -> set[str]:
    return {dist_name(n) for n in (name, *others) if n}


def stack_package(name: str) -> StackPackage | None:
    """The stack entry called `name` (or published under it), or None."""
    return next((p for p in STACK if dist_name(name) in _names(p.name, p.distributions)), None)


def package_name(name: str) -> str:
    """The package a distribution name belongs to: every name a distribution is published
    under finds the same facts (`sglang-kernel`, `sglang_kernel` and `sgl-kernel` are all
    the sgl-kernel descriptor's). A name nothing knows is returned as given."""
    for d in registry.descriptors():
        if d.name and dist_name(name) in _names(d.name, tuple(d.distributions)):
            return d.name
    entry = stack_package(name)
    return entry.name if entry is not None else name


def discover_names() -> tuple[str, ...]:
    """The packages smoke looks for in an env besides those it was asked about: the built-in
    descriptors that name their released distributions, then the stack's."""
    built = [d.name for d in registry.descriptors() if d.name and (d.distributions or d.loader)]
    return tuple(built) + tuple(p.name for p in STACK)


def jit_rules() -> dict[str, dict[str, str]]:
    """``{distribution: {"rule", "source"}}`` of the packages that compile CUDA code at run
    time."""
    return {p.name: {"rule": p.jit, "source": p.jit_source} for p in STACK if p.jit}


def distributions(name: str) -> list[str]:
    """Other distribution names package `name` is published under (sgl-kernel: sglang-kernel;
    sglang-kernel: sgl-kernel), whichever of its names `name` is."""
    entry = stack_package(name)
    if entry is not None:
        every = [entry.name, *entry.distributions]
    elif _has_descriptor(name):
        desc = registry.descriptor(package_name(name))
        every = [desc.name, *desc.distributions]
    else:
        return []
    return [n for n in every if dist_name(n) != dist_name(name)]


def _has_descriptor(name: str) -> bool:
    canonical = package_name(name)
    return any(d.name == canonical for d in registry.descriptors())


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
    loader imports), for exactly the versions read."""
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


def smoke_facts(name: str) -> dict[str, Any]:
    """What the probe is told about package `name`: its loader rule and the modules whose
    device code is known per release: from the catalogues (read from the wheels), then the
    descriptor's own for releases no catalogue read (``{}`` when nothing is known)."""
    out: dict[str, Any] = {}
    entry = stack_package(name)
    if entry is not None:
        archs = entry.module_archs
        loader = None
        names = [entry.name, *entry.distributions]
    elif _has_descriptor(name):
        desc = registry.descriptor(package_name(name))
        archs, loader = desc.module_archs, desc.loader
        names = [desc.name, *desc.distributions]
    else:
        return out
    if loader is not None:
        out["loader"] = loader.to_json()
    facts = catalogue_archs(names) + [m.to_json() for m in archs]
    if facts:
        out["module_archs"] = facts
    return out


def probe_knowledge(names: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """The probe arguments for a whole-env smoke of `names` plus the stack:
    ``distributions``, ``facts``, ``discover``, ``jit``, ``top``."""
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
    }
