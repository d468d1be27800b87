"""``--explain``: every build setting of a package with the reason for it, as result rows.

The library computes the rows and records them in the host's result (``explain``);
`sm120kit.output.report.print_explain` prints them once the run is over.
"""

from __future__ import annotations

import posixpath

from ..builds import compile_cache
from ..builds import sources as srcstore
from ..builds.cmake_config import target_rows
from ..builds.cmake_defines import defines_from_pip_args
from ..builds.inputs import toolchain_env
from ..builds.knobs import Knobs
from ..cache.resolve import host_store_specs
from ..cache.wheels import cache_for
from ..ops.build_patches import Patched, package_patches
from ..ops.build_source import Source
from ..ops.compile import configure_targets
from ..runner.host_context import HostContext
from ..state import ProvisionState


def source_rows(
    state: ProvisionState, name: str, source: Source, patched: Patched
) -> list[dict[str, str]]:
    """--explain rows: the source pin and digest, and each patch with its state."""
    pkg = state.resolved.packages[name]
    src = pkg.source
    pin = {
        "git": lambda: (
            f"{src.get('url')}@{src.get('ref')}"
            + (f" ({src['subdir']})" if src.get("subdir") else "")
            + (f": {src['note']}" if src.get("note") else "")
        ),
        "pypi": lambda: f"{name}=={pkg.version} sdist ({src.get('index') or 'pypi'})",
        "path": lambda: str(src.get("path")),
    }.get(str(src.get("kind")), lambda: str(dict(src)))()
    rows = [
        {
            "name": "source",
            "value": pin,
            "reason": f"digest {source.digest or '(known once fetched)'}; {source.path}",
        }
    ]
    chosen, skipped = package_patches(state, name)
    states = {p["name"]: p["state"] for p in patched.patches}
    for patch in chosen:
        rows.append(
            {
                "name": f"patch {patch.name}",
                "value": states.get(patch.name, "unknown (the tree is not on the host yet)"),
                "reason": patch.fixes[:200] or "(no Fixes header)",
            }
        )
    rows += [{"name": "patch", "value": "skipped", "reason": s} for s in skipped]
    return rows


def dependency_rows(state: ProvisionState, name: str) -> list[dict[str, str]]:
    """--explain rows from the recipe alone: each FetchContent dependency and its pin."""
    pkg = state.resolved.packages[name]
    if not srcstore.is_managed(pkg):
        return []
    return [
        {
            "name": e.define,
            "value": f"{e.url}@{e.ref}",
            "reason": f"dependency {e.dir} (recipe pin; fetched by sources.fetch)",
        }
        for e in srcstore.entries(name, pkg)[1:]
    ]


def target_explain(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    knobs: Knobs,
    tree: str,
    *,
    cmake_checked: bool,
) -> list[dict[str, str]]:
    """--explain rows: the gencodes of each target, from a real configure of `tree` when it
    is on the host (a CMake-checked package: `cmake_checked`, the play's one answer), else
    predicted from the recipe (known versions)."""

    if not cmake_checked:
        return []
    if tree:
        doc = configure_targets(ctx, state, name, tree, knobs)
        how = f"from a real configure of {tree} ({doc.get('seconds', 0):.0f}s, compile commands)"
        return target_rows(name, doc.get("targets") or {}, how)
    defines = defines_from_pip_args(knobs.pip_args)
    cuda = state.toolkit.release if state.toolkit is not None else state.resolved.cuda.version.xy
    version = state.resolved.packages[name].version
    predict = state.resolved.packages[name].descriptor.predict_targets
    predicted = predict(version, cuda, defines) if predict is not None else None
    if predicted is None:
        return [
            {
                "package": name,
                "name": "targets",
                "value": "(unknown)",
                "reason": f"no prediction for {name} {version}; the configure shows them once "
                "the source is on the host",
            }
        ]
    how = (
        f"predicted from the recipe for {name} {version} with CUDA {cuda} (x86_64); "
        "a configure replaces this once the source is on the host"
    )
    return target_rows(name, {t: {"sass": c} for t, c in predicted.items()}, how)


def explain(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    knobs: Knobs,
    extra: list[dict[str, str]] | None = None,
) -> None:
    """``--explain``: the env and flags with the reason for each, recorded in the host's
    result (``explain``); the task prints them once the run is over (output/report.py)."""
    rows = [{"package": name, "name": n, "value": v, "reason": r} for n, v, r in knobs.explain]
    rows += list(extra or [])
    rows += [
        {"package": name, "name": n, "value": v, "reason": r} for n, v, r in toolchain_env(state)
    ]
    rows.append({"package": name, **compile_cache_row(ctx, state, name)})
    if state.toolkit is not None:
        rows.append(
            {
                "package": name,
                "name": "PATH",
                "value": f"{state.toolkit.cuda_home}/bin:$PATH",
                "reason": "the toolkit's nvcc first, for build systems that look it up on PATH",
            }
        )
    existing = [r for r in ctx.result.data.get("explain") or [] if r.get("package") != name]
    ctx.set(explain=existing + rows)


def compile_cache_row(ctx: HostContext, state: ProvisionState, name: str) -> dict[str, str]:
    """The ``--explain`` row of the compile cache: on (where it stores) or off (why)."""
    row = {"name": "compile cache"}
    if not compile_cache.enabled_on_host(state.host.vars):
        where = state.host.var_sources.get("compile_cache", "inventory")
        return {**row, "value": "off", "reason": f"host var compile_cache ({where})"}
    if not compile_cache.knob_enabled(name, state.resolved.packages[name].knobs):
        return {**row, "value": "off", "reason": f"knob compile_cache of {name}"}
    s3 = compile_cache.s3_settings(host_store_specs(cache_for(ctx.runner).config, ctx.host))
    store = posixpath.join(state.paths.work_root, "compile-cache")
    size = state.host.vars.get("compile_cache_size") or compile_cache.DEFAULT_SIZE
    value = f"{compile_cache.SCCACHE_REQUIREMENT}: {store} ({size})"
    if s3 is not None:
        value += f" + {s3[1]} ({s3[0]['SCCACHE_S3_KEY_PREFIX']})"
    return {
        **row,
        "value": value,
        "reason": "sccache in front of every compile: PYTORCH_NVCC and a CXX wrapper (torch "
        "extensions), CMAKE_<LANG>_COMPILER_LAUNCHER (CMake); docs/compile-cache.md; not a "
        "wheel-cache key input",
    }


__all__ = ["compile_cache_row", "dependency_rows", "explain", "source_rows", "target_explain"]
