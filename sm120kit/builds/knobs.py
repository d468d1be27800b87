"""Build knobs: one arch list and the host's facts, translated into each package's own settings.

Every package reads its target architectures and its parallelism from a different place (a
torch extension: ``TORCH_CUDA_ARCH_LIST`` and ``MAX_JOBS``; others their own variables or CMake
defines). What a package reads is its descriptor's business (`sm120kit.packages`); this module
holds what all builds share: the `Knobs` record, the parallelism arithmetic, the override rules
and the OOM retry.

`resolve_knobs` returns the env, the extra front-end arguments and, for ``--explain``, the
reason for every value. Parallelism is sized so that jobs x nvcc threads x GB per thread fits
the host's available memory: an over-parallel CUDA build gets killed by the OOM killer.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import RecipeError
from ..packages import registry

# Knobs, Parallelism and plan_parallelism live with the descriptors (packages/base.py) so
# that descriptor modules need not import this module, which imports their registry: that
# was a cycle through the registry's import_module (tests/rules/test_imports.py).
from ..packages.base import (
    DEFAULT_GB_PER_NVCC_THREAD,
    KnobRequest,
    Knobs,
    Parallelism,
    TreeFacts,
    plan_parallelism,
)
from ..remote.lib.arch import Arch, parse_list
from ..remote.lib.buildlog import PARALLEL_KNOBS
from ..remote.lib.buildlog import classify as _classify
from .cmake_defines import defines_from_pip_args


def parse_arch_list(arch_list: list[str] | str, where: str = "arch_list") -> list[Arch]:
    """Parse ``["12.0", "9.0a"]`` or ``"12.0;9.0a"``; a bad entry raises a one-line RecipeError."""
    try:
        return parse_list(arch_list)
    except ValueError as exc:
        raise RecipeError(f"{where}: {exc}") from None


def resolve_knobs(
    package: str,
    kind: str,
    arch_list: list[str] | str,
    facts: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    *,
    sources: dict[str, str] | None = None,
    version: str | None = None,
    patch_options: frozenset[str] | None = None,
    patch_version: str = "",
    tree: TreeFacts | None = None,
) -> Knobs:
    """Translate one arch list and a host's facts into `package`'s build settings, as the
    descriptor of build `kind` (`sm120kit.packages`) says.

    `facts` needs ``facts["cpu"]["count"]`` and ``facts["memory"]["available_bytes"]`` (or
    ``total_bytes``). `overrides` (inventory vars or ``--set`` flags, already merged) may set
    the job and thread knobs the descriptor reads (``MAX_JOBS``, ``NVCC_THREADS`` ...),
    ``gb_per_nvcc_thread``, the descriptor's switches, ``cmake.define.X`` or ``cmake_defines``
    (a dict; CMake-built packages only) and ``env`` (a dict of extra variables, applied last);
    any other upper-case key is taken as an env var. `sources` names where each override came
    from, for the explain text. `version` (the package's) lets a descriptor that checks its
    arch knob's values (`PackageDescriptor.arch_value_problem`) refuse a value that release
    would drop: RecipeError. `patch_options` (with `patch_version`, the version they were
    selected for) are the build options the entry's patches add, `tree` what the entry and
    those patches say about the tree (`KnobRequest`).
    """
    desc = registry.for_kind(kind)
    if desc is None:
        raise RecipeError(
            f"package {package}: build kind '{kind}' is not one of {', '.join(registry.kinds())}"
        )
    overrides = dict(overrides or {})
    sources = sources or {}
    archs = parse_arch_list(arch_list, where=f"package {package}: arch_list")
    raw_switches: dict[str, Any] = {}
    for switch in registry.knob_names("switches"):
        value = overrides.pop(switch, None)
        if value is not None and switch not in desc.switches:
            owners = " / ".join(registry.owners("switches", switch))
            raise RecipeError(f"package {package}: knob {switch} is for {owners} only")
        raw_switches[switch] = value
    cpus, mem_bytes, mem_what = _host_size(facts, package)
    gb = _positive_number(
        overrides.pop("gb_per_nvcc_thread", desc.gb_per_nvcc_thread), "gb_per_nvcc_thread", package
    )

    def given(name: str) -> int | None:
        if name not in overrides:
            return None
        return _positive_int(overrides.pop(name), name, package)

    def origin(name: str) -> str:
        return f"override from {sources.get(name, 'the run')}"

    switches = {s: _switch(raw_switches.get(s), s, package) for s in desc.switches}
    request = KnobRequest(
        package,
        archs,
        cpus,
        mem_bytes,
        gb,
        mem_what,
        given,
        origin,
        switches,
        overrides,
        patch_options,
        patch_version,
        tree or TreeFacts(version=version or patch_version),
    )
    knobs = Knobs()
    assert desc.knobs is not None  # for_kind answers only descriptors that build
    desc.knobs(knobs, request)
    if desc.arch_value_problem is not None and version:
        value = (overrides.get("env") or {}).get(desc.arch_knob)
        value = overrides.get(desc.arch_knob, value)
        value = knobs.env[desc.arch_knob] if value is None else str(value)
        problem = desc.arch_value_problem(version, value)
        if problem:
            raise RecipeError(f"package {package}: {problem}")
    extra_env = overrides.pop("env", None) or {}
    for name, value in list(overrides.items()) + list(dict(extra_env).items()):
        name = str(name)
        if name.startswith("cmake.define.") and desc.cmake_defines:
            knobs.define(name[len("cmake.define.") :], value, origin(name))
        elif re.match(r"^[A-Z_][A-Z0-9_]*$", name):
            knobs.set_env(name, value, origin(name))
        else:
            cmake = " / ".join(registry.owners("cmake_defines"))
            raise RecipeError(
                f"package {package}: unknown build override '{name}' (env vars are upper "
                f"case; cmake.define.X is for {cmake})"
            )
    return knobs


def _switch(value: Any, name: str, package: str) -> bool | None:
    """A boolean knob (true/false, on/off, 1/0); None when unset."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("true", "1", "on", "yes"):
        return True
    if text in ("false", "0", "off", "no"):
        return False
    raise RecipeError(f"package {package}: knob {name}={value!r} is not true or false")


def _host_size(facts: dict[str, Any], package: str) -> tuple[int, int, str]:
    try:
        cpus = int(facts["cpu"]["count"])
        memory = facts["memory"]
    except (KeyError, TypeError, ValueError):
        raise RecipeError(
            f"package {package}: host facts lack cpu.count / memory (gather facts first)"
        ) from None
    if memory.get("available_bytes"):
        return cpus, int(memory["available_bytes"]), "memory available now"
    if memory.get("total_bytes"):
        return cpus, int(memory["total_bytes"]), "total memory (available unknown)"
    raise RecipeError(f"package {package}: host facts lack memory.available_bytes")


def _positive_int(value: Any, name: str, package: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        number = 0
    if number < 1:
        raise RecipeError(f"package {package}: override {name}={value!r} is not a positive integer")
    return number


def _positive_number(value: Any, name: str, package: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.0
    if number <= 0:
        raise RecipeError(f"package {package}: override {name}={value!r} is not a positive number")
    return number


def classify_build_failure(
    log_text: str, exit_code: int | None = None, env: dict[str, str] | None = None
) -> tuple[str, str]:
    """(kind, advice) for a failed build's log; kinds: oom, nvcc_too_old_for_arch,
    cuda_home_missing, cxx_std, torch_cuda_mismatch, other.

    The patterns live in `sm120kit.remote.lib.buildlog` (which runs on hosts and must stand
    alone); this is the controller's entry point to the same code.
    """
    kind, advice = _classify(log_text, exit_code, env)
    return str(kind), str(advice)


def _positive(value: str | None) -> int | None:
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None


def lowered_for_oom(knobs: Knobs) -> tuple[Knobs, str] | None:
    """A copy of `knobs` with half the parallel jobs (or, at one job, half the nvcc threads),
    and a line saying what changed; None when everything is already at 1. The knobs are the
    descriptors' (`PackageDescriptor.oom_job_knobs` ...), jobs first: each job is a whole nvcc.

    None of these knobs is a wheel-cache key input, so the retry builds under the same key.
    """
    lowered = Knobs(dict(knobs.env), list(knobs.pip_args), list(knobs.explain))
    why = "halved after the OOM killer stopped the build"
    changes = []
    for name in registry.knob_names("oom_job_knobs"):
        value = _positive(knobs.env.get(name))
        if value and value > 1:
            lowered.set_env(name, value // 2, why)
            changes.append(f"{name} {value} -> {value // 2}")
    if changes:
        return lowered, ", ".join(changes)
    for name in registry.knob_names("oom_thread_env"):
        value = _positive(knobs.env.get(name))
        if value and value > 1:
            lowered.set_env(name, value // 2, why)
            return lowered, f"{name} {value} -> {value // 2}"
    defines = defines_from_pip_args(knobs.pip_args)
    for name in registry.knob_names("oom_thread_defines"):
        value = _positive(defines.get(name))
        if value and value > 1:
            lowered.define(name, value // 2, why)
            return lowered, f"{name} {value} -> {value // 2}"
    return None


__all__ = [
    "DEFAULT_GB_PER_NVCC_THREAD",
    "PARALLEL_KNOBS",
    "Arch",
    "Knobs",
    "Parallelism",
    "classify_build_failure",
    "defines_from_pip_args",
    "lowered_for_oom",
    "parse_arch_list",
    "plan_parallelism",
    "resolve_knobs",
]
