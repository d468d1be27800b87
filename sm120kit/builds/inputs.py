"""What a build of one package gets on a host: its knobs, its env, and its cache key's inputs.

Knobs come from the descriptor (`sm120kit.builds.knobs`) with the recipe's, the host vars' and the
flags' overrides; the toolkit and host compiler add CUDA_HOME and nvcc_ccbin's GCC; the key
(`sm120kit.cache.key`) covers everything that can change the binary.
"""

from __future__ import annotations

import posixpath
from typing import Any

from .. import python_choice as host_python
from ..cache.key import KeyInputs
from ..packages.base import TreeFacts
from ..state import ProvisionState
from ..toolchain.toolkit_spec import choose_compiler
from . import compile_cache
from .cmake_defines import fetchcontent_defines
from .knobs import Knobs, resolve_knobs
from .patching import Patch, for_package


def package_knobs(state: ProvisionState, name: str) -> Knobs:
    """Knobs for `name` on this host: recipe knobs, host vars max_jobs/nvcc_threads, run flags."""
    desc = state.resolved.packages[name].descriptor
    overrides: dict[str, Any] = dict(state.resolved.packages[name].knobs)
    # Not a build setting: where compiles are cached changes no binary (builds/compile_cache.py).
    overrides.pop(compile_cache.KNOB, None)
    sources = {
        k: state.resolved.sources.get(f"packages.{name}.knobs.{k}", "the recipe") for k in overrides
    }
    layers = [
        (state.host.vars.get("max_jobs"), state.host.vars.get("nvcc_threads"), "host var"),
        (state.flags.max_jobs, state.flags.nvcc_threads, "flag"),
    ]
    for jobs, threads, where in layers:
        if jobs:
            overrides["MAX_JOBS"] = jobs
            sources["MAX_JOBS"] = (
                "--max-jobs" if where == "flag" else state.host.var_sources.get("max_jobs", where)
            )
        if threads and desc.threads_knob:
            overrides[desc.threads_knob] = threads
            sources[desc.threads_knob] = (
                "--nvcc-threads"
                if where == "flag"
                else state.host.var_sources.get("nvcc_threads", where)
            )
    pkg = state.resolved.packages[name]
    chosen, _skipped = for_package(
        state.resolved.recipe.patches_dir, pkg.patches, pkg.version, state.resolved.torch.version
    )
    return resolve_knobs(
        name,
        desc.kind,
        state.arch_list,
        state.facts.json,
        overrides,
        sources=sources,
        patch_options=frozenset().union(*(p.options_added for p in chosen)),
        patch_version=pkg.version,
        tree=tree_facts(state, name, chosen),
    )


def tree_facts(state: ProvisionState, name: str, chosen: list[Patch]) -> TreeFacts:
    """What package `name`'s entry and its chosen patches say about the tree it configures.
    The entry's ``[packages.build]`` facts hold for the entry's own commit and version only:
    with either moved by an override they are left out (nothing known about that tree)."""
    pkg = state.resolved.packages[name]
    options = {o: (p.name, doc) for p in chosen for o, doc in p.option_docs.items()}
    spec = next((s for s in state.resolved.package_specs() if s.name == name), None)
    own = (
        spec is not None
        and spec.version == pkg.version
        and spec.source.get("ref") == pkg.source.get("ref")
    )
    subprojects = tuple(
        (str(d["dir"]), str(d["ref"]), str(d["cmake_minimum"]))
        for d in pkg.dependencies
        if d.get("cmake_minimum")
    )
    return TreeFacts(
        version=pkg.version,
        options=options,
        not_set=dict(spec.not_set) if own and spec is not None else {},
        no_full_build=spec.no_full_build if own and spec is not None else "",
        subprojects=subprojects,
    )


def toolchain_env(state: ProvisionState) -> list[tuple[str, str, str]]:
    """(name, value, reason) of the env the toolkit and host compiler add to every build."""
    rows: list[tuple[str, str, str]] = []
    tk = state.toolkit
    if tk is not None:
        rows.append(
            (
                "CUDA_HOME",
                tk.cuda_home,
                f"CUDA {tk.version} toolkit ({tk.source}); nvcc {tk.nvcc_version}",
            )
        )
    ccbin = state.host.vars.get("nvcc_ccbin")
    if ccbin:
        gcc = str(ccbin)
        gxx = posixpath.join(posixpath.dirname(gcc), posixpath.basename(gcc).replace("gcc", "g++"))
        why = f"host var nvcc_ccbin ({state.host.var_sources.get('nvcc_ccbin', 'inventory')})"
        rows += [
            ("NVCC_CCBIN", gxx, f"{why}: nvcc's host compiler"),
            ("CUDAHOSTCXX", gxx, f"{why}: CMake's CUDA host compiler"),
            ("CC", gcc, f"{why}: the C/C++ parts built with the same GCC"),
            ("CXX", gxx, f"{why}: the C/C++ parts built with the same GCC"),
        ]
    return rows


def build_env(state: ProvisionState, knobs: Knobs) -> dict[str, str]:
    """The knob env plus the toolchain (CUDA_HOME, nvcc_ccbin); PATH gets the toolkit's bin/
    prepended on the host, where its value is known."""
    env = dict(knobs.env)
    env.update({name: value for name, value, _ in toolchain_env(state)})
    return env


def _key_env(knobs: Knobs, parallelism: tuple[str, ...] = ()) -> dict[str, str]:
    """The knob env and the CMake defines: both can change the binary (key.py drops the
    parallelism env; `parallelism`: the package's thread defines, which change no binary)."""
    env = dict(knobs.env)
    for arg in knobs.pip_args:
        if arg.startswith("-Ccmake.define."):
            define, _, value = arg[len("-Ccmake.define.") :].partition("=")
            # Parallelism, and where the host keeps things: the dependency trees' digests
            # and the toolkit version are key inputs of their own.
            if define in parallelism or define == "CUDA_cuda_driver_LIBRARY":
                continue
            if define.startswith("FETCHCONTENT_"):
                continue
            env[f"cmake.define.{define}"] = value
        else:
            env[f"arg:{arg}"] = "1"
    return env


def cc_version(state: ProvisionState) -> str:
    """The host compiler nvcc uses: host var nvcc_ccbin's GCC, else the first gcc on PATH."""

    ccbin = state.host.vars.get("nvcc_ccbin")
    chosen = choose_compiler(state.facts.json, str(ccbin) if ccbin else None)
    if not chosen or not chosen.get("version"):
        return ""
    # With nvcc_ccbin the path is part of the key too: two hosts with different compilers
    # never share a build.
    return f"gcc {chosen['version']}" + (f" at {chosen['path']}" if ccbin else "")


#: What cache.key shows for torch, and instead of the key, before the build env exists: the
#: recipe's `2.13.0` is not what the build hashes (torch reports `2.13.0+cpu` or
#: `2.9.1+cu130`, a label that depends on the index), so no key is guessed from it.
UNKNOWN_UNTIL_ENV = "unknown until the build env exists"


def key_unknown(state: ProvisionState) -> str | None:
    """Why the key cannot be known yet on this host (None when it can): the build env is
    only planned (check mode), so torch's real version string is not known."""
    if state.env is None or state.env.planned:
        return f"torch {UNKNOWN_UNTIL_ENV}"
    return None


def key_inputs(
    state: ProvisionState,
    name: str,
    source_digest: str,
    patches: tuple[tuple[str, str], ...],
    knobs: Knobs,
    dependencies: tuple[tuple[str, str], ...] = (),
) -> KeyInputs:
    """Every input of the package's cache key, from the toolkit and env this host has."""
    pkg = state.resolved.packages[name]
    toolkit, env = state.toolkit, state.env
    if toolkit is not None:
        cuda = toolkit.nvcc_version or toolkit.version
    else:
        cuda = str(state.resolved.cuda.version)
    if env is not None:
        torch, abi, py_abi, platform = (
            env.torch_version,
            env.cxx11_abi,
            env.python_abi,
            env.platform,
        )
    else:
        torch, abi = state.resolved.torch.version, True
        py_abi = "cp" + host_python.python_version(state).replace(".", "")
        platform = f"linux_{state.facts.arch or 'x86_64'}"
    return KeyInputs(
        package=name,
        version=pkg.version,
        source_digest=source_digest,
        patches=patches,
        build_env=_key_env(knobs, pkg.descriptor.oom_thread_defines),
        arch_list=tuple(state.arch_list),
        cuda_version=cuda,
        torch_version=torch,
        torch_cxx11_abi=abi,
        python_abi=py_abi,
        platform=platform,
        cc_version=cc_version(state),
        dependencies=dependencies,
    )


def add_dependency_defines(
    knobs: Knobs, dirs: list[tuple[str, str]], reasons: dict[str, str] | None = None
) -> None:
    """``FETCHCONTENT_SOURCE_DIR_<NAME>`` per uploaded tree and FULLY_DISCONNECTED: CMake
    configures with no network (host paths: the key has the trees' digests instead)."""
    reasons = reasons or {}
    for fetchcontent, path in dirs:
        (define,) = [
            d
            for d in fetchcontent_defines([(fetchcontent, path)])
            if d != "FETCHCONTENT_FULLY_DISCONNECTED"
        ]
        knobs.define(define, path, reasons.get(fetchcontent, "the tool's copy of this dependency"))
    knobs.define(
        "FETCHCONTENT_FULLY_DISCONNECTED",
        "ON",
        "every FetchContent tree is supplied: CMake never reaches the network",
    )


__all__ = [
    "add_dependency_defines",
    "build_env",
    "cc_version",
    "key_inputs",
    "package_knobs",
    "toolchain_env",
]
