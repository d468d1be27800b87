"""Build one recipe package on a host: source -> patches -> knobs -> wheel (via the cache) -> install.

`ensure_package(ctx, state, name)` is the operation `build`, the per-package build tasks
and `provision` share; what differs per package comes from its descriptor (`sm120kit.packages`). Its steps, each "ok" when nothing had to be done:

- ``source:<pkg>``: the pinned source, unpacked under ``work_root/src/<pkg>-<ver>-<digest>``
  by ``remote/fetch_source.py`` (PyPI/mirror sdist with its index sha256 checked, a git commit,
  or a local tree packed on the controller, hashed, and uploaded). That directory stays
  pristine: it is never patched or built in.
- ``patch:<pkg>``: the recipe's patches for this version are classified against a copy of the
  source (``build/<pkg>/tree``) and applied there; a marker records which source and patch set
  the copy holds, so a rerun re-checks (every patch "already applied") and a changed source
  or patch set gets a fresh copy. A patch that does not apply stops the build with the
  rejected hunk; neither tree changes.
- ``wheel:<pkg>``: knobs (`sm120kit.knobs`) and the toolkit/env give the build env and the
  cache key; `WheelCache.obtain` finds the wheel in a store or runs the build (in a throwaway
  copy ``build/<pkg>/work``, log under ``work_root/logs``, progress polled every 2 s).
- ``install:<pkg>``: ``pip install --no-deps --force-reinstall --no-index`` into the env,
  skipped when ``<env>/.sm120kit/installed/<pkg>.json`` already records this key and wheel
  and the env still holds that install (``remote/installed_dist.py``: present, all files of
  its RECORD there, the recorded version); otherwise the wheel is fetched again (from the
  cache) and reinstalled, and the step says why.

In check mode (`invoke plan`) every step only probes and records what it would run.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import compile_cache
from .. import sources as srcstore
from ..cache.key import KeyInputs, compute_key, describe, patch_digests
from ..cache.request import BuiltWheel
from ..cache.resolve import host_store_specs
from ..cache.wheels import cache_for
from ..cmake_defines import defines_from_pip_args, fetchcontent_defines
from ..errors import HostFailed, Interrupted, RecipeError
from ..knobs import Knobs, lowered_for_oom, resolve_knobs
from ..output.report import print_explain
from ..packages import registry
from ..packing import pack_tree
from ..patching import Patch, check_and_apply, load_patch, patch_step, run_patch_steps, select
from ..plan import PlanOptions, package_names, prepare
from ..remote import script_command
from ..remote.lib import sourcetree as fs
from ..remote.lib.frontend import build_command
from ..results import StepResult
from ..runner import HostContext, HostOp, Runner
from ..state import ProvisionState
from ..steps import Step
from ..steps import commands as render_commands
from .deps import ensure_dependencies, store_record

#: Marker the patch step leaves in the patched copy: which source and patches it holds.
PATCHED_MARKER = ".sm120kit-patched.json"

#: A build may take hours on a small host (docs/stack-facts.md section 5); past this it is killed.
DEFAULT_BUILD_TIMEOUT = 8 * 3600
#: Rebuilds after an OOM kill, each with half the jobs (or threads); host var ``oom_retries``.
DEFAULT_OOM_RETRIES = 1

#: Seconds between two reads of the remote progress file.
PROGRESS_POLL_SECONDS = 2.0


def build_kind(name: str) -> str:
    """The build kind (`resolve_knobs`) of recipe package `name`, from its descriptor."""
    return registry.descriptor(name).kind


def _q(text: str) -> str:
    return shlex.quote(text)


# --------------------------------------------------------------------------- per-run cache


def _once(runner: Runner, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()` once per run and key, whichever host thread asks first."""
    return runner.shared.once(key, compute)


# --------------------------------------------------------------------------- sources


@dataclass
class SourcePlan:
    """Where a package's source comes from, known on the controller before touching a host."""

    kind: str  # fetch_source kind: sdist | git | path
    args: dict[str, Any]  # fetch_source arguments without dest/cache_dir
    digest: str  # the key's source digest (sha256:/git:/tree:), "" while a git ref is unresolved
    dir_digest: str  # what names the source directory
    what: str  # one line for messages
    local_tarball: str | None = None  # path kind: the packed tree on the controller
    remote_name: str = ""  # the tarball's name on the host (default: its local name)


def repo_root(state: ProvisionState) -> Path:
    """The directory ``path`` sources are relative to: the one holding recipes/ and patches/."""
    return state.resolved.recipe.patches_dir.parent


def index_sdist(index_url: str, package: str, version: str) -> tuple[str, str]:
    """(url, sha256) of `package` `version`'s sdist on a PEP 691/503 simple index."""
    try:
        sdists = fs.sdist_links(index_url, package, version)
    except fs.FetchError as exc:
        raise HostFailed(f"{package}: {exc}") from None
    for _filename, url, sha in sdists:
        if sha:
            return url, sha
    raise HostFailed(
        f"{package}: the index lists no sha256 for {sdists[0][0]}; "
        "the download could not be verified"
    )


def git_resolve(url: str, ref: str) -> str:
    """The full commit id of `ref` (a full id is returned as is; else `git ls-remote`)."""
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref
    proc = subprocess.run(
        ["git", "ls-remote", url, ref], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    line = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not line:
        raise RecipeError(
            f"git ref {ref!r} of {url} is not a full commit id and `git ls-remote` cannot "
            "resolve it: pin a full commit (recipe.packages.<pkg>.source.ref)"
        )
    return line[0].split()[0]


def plan_source(ctx: HostContext, state: ProvisionState, name: str) -> SourcePlan:
    """Resolve the package's source on the controller: nothing runs on the host."""
    pkg = state.resolved.package(name)
    source: dict[str, str] = pkg["source"]
    version = str(pkg["version"])
    kind = source.get("kind")
    if kind == "git" and srcstore.is_managed(pkg):
        return _store_plan(ctx, state, srcstore.entries(name, pkg)[0], f"{name} {version}")
    if kind == "pypi":
        index = source.get("index") or "pypi"
        index_url = fs.DEFAULT_INDEX if index in ("pypi", "") else index
        if source.get("sha256"):
            sha, url = source["sha256"], ""
        else:
            url, sha = _once(
                ctx.runner,
                f"index:{index_url}:{name}:{version}",
                lambda: index_sdist(index_url, name, version),
            )
        args: dict[str, Any] = {
            "kind": "sdist",
            "package": name,
            "version": version,
            "sha256": sha,
            "index_url": index_url,
        }
        if url:
            args["url"] = url
        return SourcePlan("sdist", args, f"sha256:{sha}", sha, f"{name} {version} sdist ({index})")
    if kind == "git":
        url, ref, subdir = source["url"], source["ref"], source.get("subdir") or ""
        args = {"kind": "git", "repo": url, "commit": ref, "subdir": subdir}
        digest = f"git:{ref}" if re.fullmatch(r"[0-9a-f]{40}", ref) else ""
        where = f"{url}@{ref}" + (f":{subdir}" if subdir else "")
        return SourcePlan("git", args, digest, ref, f"{name} {version} from {where}")
    if kind == "path":
        root = Path(source["path"])
        if not root.is_absolute():
            root = repo_root(state) / root
        root = root.resolve()
        if not root.is_dir():
            raise RecipeError(
                f"package {name}: source path {root} is not a directory "
                f"({state.resolved.sources.get(f'packages.{name}.source.path', 'recipe')})"
            )
        out = Path(str(ctx.runner.run_dir or tempfile.gettempdir())) / "sources"
        tarball, digest = _once(
            ctx.runner,
            f"path:{root}",
            lambda: pack_tree(root, out, f"{name}-{version}"),
        )
        args = {"kind": "path", "tree_sha256": digest}
        return SourcePlan(
            "path", args, f"tree:{digest}", digest, f"{name} {version} from {root}", str(tarball)
        )
    raise RecipeError(f"package {name}: source kind {kind!r} cannot be fetched")


def _store_plan(
    ctx: HostContext, state: ProvisionState, entry: srcstore.SourceEntry, what: str
) -> SourcePlan:
    where = f"{entry.url}@{entry.ref}" + (f":{entry.subdir}" if entry.subdir else "")
    record = store_record(ctx, state, entry)
    if record is None:
        return SourcePlan(
            "path",
            {"kind": "path"},
            "",
            entry.ref,
            f"{what} from {where} (not in the controller's source store yet)",
        )
    digest = str(record["digest"])
    return SourcePlan(
        "path",
        {"kind": "path", "tree_sha256": digest},
        f"tree:{digest}",
        digest,
        f"{what} from {where} via the source store",
        str(record["tarball"]),
        f"{entry.dir}-{digest[:12]}.tar",
    )


@dataclass
class Source:
    """A source tree on the host (or, in check mode, where it would be)."""

    path: str
    digest: str
    present: bool


def ensure_source(ctx: HostContext, state: ProvisionState, name: str) -> Source:
    """Step ``source:<pkg>``: the pinned, verified, pristine source tree on the host."""
    version = str(state.resolved.package(name)["version"])
    with ctx.step(f"source:{name}") as step:
        plan = plan_source(ctx, state, name)
        dest = state.paths.source(name, version, plan.dir_digest)
        remote_tar = posixpath.join(
            state.paths.downloads, plan.remote_name or os.path.basename(plan.local_tarball or "")
        )
        args = {**plan.args, "dest": dest, "cache_dir": state.paths.downloads}
        if plan.kind == "path" and not plan.local_tarball:
            # Check mode, and the source store lacks it: nothing to compare yet.
            ctx.may_act(
                step,
                f"fetch {plan.what} into the source store and upload it",
                [f"invoke sources.fetch --package {name}"],
            )
            return Source(dest, "", False)
        if plan.local_tarball:
            args["tarball"] = remote_tar
        marker = ctx.read_json(posixpath.join(dest, fs.MARKER))
        if fs.matches(marker, fs.identity(args)):
            step.message = f"{plan.what}: {dest}"
            return Source(dest, plan.digest or _git_digest(marker), True)
        commands = [script_command(ctx.host.python, args)]
        if plan.local_tarball:
            commands.insert(0, f"upload {plan.local_tarball} -> {remote_tar}")
        if not ctx.may_act(step, f"fetch {plan.what} into {dest}", commands):
            return Source(dest, plan.digest, False)
        if plan.local_tarball:
            ctx.run(f"mkdir -p {_q(state.paths.downloads)}")
            ctx.put(plan.local_tarball, remote_tar)
        doc = ctx.script("fetch_source", args, timeout=3 * 3600)
        if not doc.get("ok"):
            raise HostFailed(f"{name}: fetching {plan.what} failed: {doc.get('error')}")
        step.message = f"fetched {plan.what} into {dest}"
        return Source(dest, plan.digest or _git_digest(doc), True)


def _git_digest(doc: dict[str, Any] | None) -> str:
    ident = (doc or {}).get("identity") or {}
    resolved = ident.get("resolved") or ident.get("commit") or ""
    return f"git:{resolved}" if resolved else ""


# --------------------------------------------------------------------------- patches


@dataclass
class Patched:
    """The tree a build starts from, and what each patch was found to be."""

    tree: str
    patches: list[dict[str, str]] = field(default_factory=list)


def package_patches(state: ProvisionState, name: str) -> tuple[list[Patch], list[str]]:
    """The recipe's patches that apply to this version and the recipe's torch, and a note per
    skipped one."""
    pkg = state.resolved.package(name)
    files = list(pkg.get("patches") or [])
    patches_dir = state.resolved.recipe.patches_dir
    loaded = [load_patch(patches_dir / f) for f in files]
    torch = str(state.resolved.values.get("torch.version") or "")
    chosen, skipped = select(loaded, str(pkg["version"]), torch=torch)
    return chosen, [f"{p.name} skipped: {why}" for p, why in skipped]


def patch_key(patches: list[Patch]) -> tuple[tuple[str, str], ...]:
    """(file name, sha256 of the file) per patch, in application order."""
    return patch_digests([p.path for p in patches])


def ensure_patched(ctx: HostContext, state: ProvisionState, name: str, source: Source) -> Patched:
    """Step ``patch:<pkg>``: a patched copy of the pristine source (or the source itself)."""
    chosen, skipped = package_patches(state, name)
    if not chosen:
        if skipped:
            with ctx.step(f"patch:{name}") as step:
                step.message = "; ".join(skipped)
        return Patched(source.path)
    digests = patch_key(chosen)
    tree = posixpath.join(state.paths.build(name), "tree")
    want = {"source": source.digest, "patches": [list(d) for d in digests]}
    names = ", ".join(p.name for p in chosen)
    with ctx.step(f"patch:{name}") as step:
        marker = ctx.read_json(posixpath.join(tree, PATCHED_MARKER)) if source.present else None
        if marker == want:
            # The patched copy exists: classify there first, act only where a patch is new.
            report = check_and_apply(ctx, tree, chosen, apply=False, python=ctx.host.python)
            states = _states(report.states, digests)
            fresh = [s["name"] for s in states if s["state"] != "already applied"]
            if not fresh:
                step.message = f"already applied: {names}"
                return Patched(tree, states)
            steps = patch_steps(source.path, tree, chosen, want, in_place=True)
            what = f"apply {', '.join(fresh)} in {tree}"
            if ctx.may_act(step, what, render_commands(steps)):
                step.commands = render_commands(steps)
                report = run_patch_steps(ctx, steps, [], python=ctx.host.python)
                states = _states(report.states, digests)
            return Patched(tree, states)
        steps = patch_steps(source.path, tree, chosen, want, in_place=False)
        commands = render_commands(steps)
        if not ctx.may_act(step, f"apply {names} to a copy of {source.path}", commands):
            states = [{"name": n, "sha256": d, "state": "unknown"} for n, d in digests]
            if source.present:  # classify now, so a plan already shows a patch that fails
                report = check_and_apply(
                    ctx, source.path, chosen, apply=False, python=ctx.host.python
                )
                states = _states(report.states, digests)
            return Patched(tree, states)
        step.commands = commands
        report = run_patch_steps(ctx, steps, [tree + ".new"], python=ctx.host.python)
        states = _states(report.states, digests)
        step.message = "; ".join(f"{s['name']}: {s['state']}" for s in states)
        return Patched(tree, states)


def patch_steps(
    source: str, tree: str, patches: list[Patch], want: dict[str, Any], *, in_place: bool
) -> list[Step]:
    """The patch operation as a pure function: the steps that make `tree` the patched `source`.

    In place (the tree's marker already says `want`), only the new patches go in. Otherwise a
    copy of the pristine source is patched beside the tree, its marker (`want`: the source's
    digest and the patches') written, and only then renamed over the tree, so an interrupted
    run never leaves a tree that looks patched.
    """
    if in_place:
        return [patch_step(tree, patches)]
    new = tree + ".new"
    return [
        Step("copy", src=source, dest=new),
        patch_step(new, patches),
        Step("write", path=posixpath.join(new, PATCHED_MARKER), text=json.dumps(want) + "\n"),
        Step("rename", src=new, dest=tree),
    ]


def _states(
    entries: list[dict[str, Any]], digests: tuple[tuple[str, str], ...]
) -> list[dict[str, str]]:
    sha = dict(digests)
    return [
        {"name": str(e["name"]), "sha256": sha.get(str(e["name"]), ""), "state": str(e["state"])}
        for e in entries
    ]


# --------------------------------------------------------------------------- knobs and key


def package_knobs(state: ProvisionState, name: str) -> Knobs:
    """Knobs for `name` on this host: recipe knobs, host vars max_jobs/nvcc_threads, run flags."""
    desc = registry.descriptor(name)
    pkg = state.resolved.package(name)
    overrides: dict[str, Any] = dict(pkg.get("knobs") or {})
    # Not a build setting: where compiles are cached changes no binary (compile_cache.py).
    overrides.pop(compile_cache.KNOB, None)
    sources = {
        k: state.resolved.sources.get(f"packages.{name}.knobs.{k}", "the recipe") for k in overrides
    }
    layers = [
        (state.host.vars.get("max_jobs"), state.host.vars.get("nvcc_threads"), "host var"),
        (state.options.get("max_jobs"), state.options.get("nvcc_threads"), "flag"),
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
    return resolve_knobs(name, desc.kind, state.arch_list, state.facts, overrides, sources=sources)


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


def _key_env(knobs: Knobs) -> dict[str, str]:
    """The knob env and the CMake defines: both can change the binary (key.py drops the
    parallelism ones)."""
    env = dict(knobs.env)
    for arg in knobs.pip_args:
        if arg.startswith("-Ccmake.define."):
            define, _, value = arg[len("-Ccmake.define.") :].partition("=")
            # Parallelism, and where the host keeps things: the dependency trees' digests
            # and the toolkit version are key inputs of their own.
            if define in ("SGL_KERNEL_COMPILE_THREADS", "CUDA_cuda_driver_LIBRARY"):
                continue
            if define.startswith("FETCHCONTENT_"):
                continue
            env[f"cmake.define.{define}"] = value
        else:
            env[f"arg:{arg}"] = "1"
    return env


def cc_version(state: ProvisionState) -> str:
    """The host compiler nvcc uses: host var nvcc_ccbin's GCC, else the first gcc on PATH."""
    from .toolkit import choose_compiler

    ccbin = state.host.vars.get("nvcc_ccbin")
    chosen = choose_compiler(state.facts, str(ccbin) if ccbin else None)
    if not chosen or not chosen.get("version"):
        return ""
    # With nvcc_ccbin the path is part of the key too: two hosts with different compilers
    # never share a build.
    return f"gcc {chosen['version']}" + (f" at {chosen['path']}" if ccbin else "")


def key_inputs(
    state: ProvisionState,
    name: str,
    source_digest: str,
    patches: tuple[tuple[str, str], ...],
    knobs: Knobs,
    dependencies: tuple[tuple[str, str], ...] = (),
) -> KeyInputs:
    """Every input of the package's cache key, from the toolkit and env this host has."""
    pkg = state.resolved.package(name)
    values = state.resolved.values
    toolkit, env = state.toolkit, state.env
    if toolkit is not None:
        cuda = toolkit.nvcc_version or toolkit.version
    else:
        cuda = str(values.get("cuda.version", ""))
    if env is not None:
        torch, abi, py_abi, platform = (
            env.torch_version,
            env.cxx11_abi,
            env.python_abi,
            env.platform,
        )
    else:
        torch, abi = str(values.get("torch.version", "")), True
        py_abi = "cp" + str(values.get("python", "")).replace(".", "")
        platform = f"linux_{state.facts.get('arch') or 'x86_64'}"
    return KeyInputs(
        package=name,
        version=str(pkg["version"]),
        source_digest=source_digest,
        patches=patches,
        build_env=_key_env(knobs),
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


def source_rows(
    state: ProvisionState, name: str, source: Source, patched: Patched
) -> list[dict[str, str]]:
    """--explain rows: the source pin and digest, and each patch with its state."""
    pkg = state.resolved.package(name)
    src = pkg["source"]
    pin = {
        "git": lambda: (
            f"{src.get('url')}@{src.get('ref')}"
            + (f" ({src['subdir']})" if src.get("subdir") else "")
        ),
        "pypi": lambda: f"{name}=={pkg['version']} sdist ({src.get('index') or 'pypi'})",
        "path": lambda: str(src.get("path")),
    }.get(str(src.get("kind")), lambda: str(src))()
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
    pkg = state.resolved.package(name)
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
    ctx: HostContext, state: ProvisionState, name: str, knobs: Knobs, tree: str
) -> list[dict[str, str]]:
    """--explain rows: the gencodes of each target, from a real configure of `tree` when it
    is on the host (a CMake-checked package), else predicted from the recipe (known versions)."""
    from .cmake_check import cmake_checked, configure_targets, target_rows

    if not cmake_checked(state, name):
        return []
    if tree:
        doc = configure_targets(ctx, state, name, tree, knobs)
        how = f"from a real configure of {tree} ({doc.get('seconds', 0):.0f}s, compile commands)"
        return target_rows(name, doc.get("targets") or {}, how)
    defines = defines_from_pip_args(knobs.pip_args)
    cuda = (
        state.toolkit.release
        if state.toolkit is not None
        else ".".join(str(state.resolved.values.get("cuda.version", "")).split(".")[:2])
    )
    version = str(state.resolved.package(name)["version"])
    predict = registry.descriptor(name).predict_targets
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
    """``--explain``: the env and flags with the reason for each, on stderr and in the JSON."""
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
    print_explain(ctx.host.name, name, rows)


# --------------------------------------------------------------------------- build


def _progress_detail(text: str, seconds: float) -> str:
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError:
        doc = {}
    if doc.get("total"):
        return f"[{doc.get('done', 0)}/{doc['total']}] {seconds:.0f}s"
    if doc.get("units"):
        return f"{doc['units']} units {seconds:.0f}s"
    return f"{seconds:.0f}s"


@contextmanager
def _poll_progress(ctx: HostContext, step: str, path: str) -> Iterator[None]:
    """While the block runs, show the remote build's progress file on the live display."""
    stop = threading.Event()
    start = time.monotonic()

    def poll() -> None:
        while not stop.wait(PROGRESS_POLL_SECONDS):
            try:
                text = ctx.read_text(path, timeout=30, quiet=True)
            except (Exception, Interrupted):
                # A poll never fails the build (the build's own result decides), and a
                # cancelled run is reported by the main thread, not by a traceback here.
                return
            ctx.runner.progress.step(
                ctx.host.name, step, _progress_detail(text, time.monotonic() - start)
            )

    thread = threading.Thread(target=poll, name=f"progress-{ctx.host.name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=35)


def _build_paths(state: ProvisionState, name: str, key: str) -> dict[str, str]:
    """Where a build of `name` works, writes its wheel, its progress and its log on the host."""
    bdir = state.paths.build(name)
    return {
        "bdir": bdir,
        "work": posixpath.join(bdir, "work"),
        "out": posixpath.join(bdir, "out"),
        "progress": posixpath.join(bdir, "progress.json"),
        "log": posixpath.join(state.paths.logs, f"build-{name}-{key[:12]}.log"),
    }


def _build_once(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    cache_spec: dict[str, Any] | None,
    key: str,
) -> dict[str, Any]:
    """One run of build_wheel.py in a fresh copy of `tree`: its JSON result."""
    assert state.env is not None and state.toolkit is not None
    where = _build_paths(state, name, key)
    work, out, progress = where["work"], where["out"], where["progress"]
    timeout = float(state.options.get("build_timeout") or DEFAULT_BUILD_TIMEOUT)
    ctx.run(
        f"rm -rf {_q(work)} {_q(out)} {_q(progress)} && mkdir -p {_q(where['bdir'])} && "
        f"cp -a {_q(tree)} {_q(work)}",
        what=f"copy the {name} tree to build in",
    )
    from .cmake_check import link_driver

    link_driver(ctx, knobs)
    pip_args = _private_dependency_copies(ctx, knobs.pip_args, work)
    args = {
        "src": work,
        "python": state.env.python,
        "env": build_env(state, knobs),
        "pip_args": pip_args,
        "out_dir": out,
        "log": where["log"],
        "progress": progress,
        "front_end": "pip",
        "timeout": timeout,
        "provenance": provenance_fields(state, name, key),
    }
    if cache_spec is not None:
        args["compile_cache"] = cache_spec
    cuda_bin = posixpath.join(state.toolkit.cuda_home, "bin")
    ctx.log.info("build %s: %s", name, " ".join(build_command(args, out)))
    with _poll_progress(ctx, f"wheel:{name}", progress):
        try:
            doc = ctx.script("build_wheel", args, path=[cuda_bin], timeout=timeout + 300)
        except HostFailed as exc:
            raise HostFailed(f"{name}: the build script failed: {exc}") from None
    if doc.get("compile_cache") is not None:
        state.packages.setdefault(name, {})["compile_cache"] = _cache_counts(doc["compile_cache"])
    return doc


def make_builder(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    key: str,
) -> Callable[[], BuiltWheel]:
    """The closure `WheelCache.obtain` runs on a miss: build_wheel.py in a fresh copy of `tree`."""

    def build() -> BuiltWheel:
        where = _build_paths(state, name, key)
        work, log = where["work"], where["log"]
        from .cmake_check import cmake_checked, configure_targets, require_arch

        if cmake_checked(state, name):
            # A few seconds of configure before hours of compiling: the compile commands
            # must carry code for the recipe's arch.
            configured = configure_targets(ctx, state, name, tree, knobs)
            require_arch(name, configured.get("targets") or {}, list(state.arch_list))
        cache_spec = compile_cache_spec(ctx, state, name)
        retries = int(state.host.vars.get("oom_retries", DEFAULT_OOM_RETRIES))
        now = knobs
        while True:
            doc = _build_once(ctx, state, name, tree, now, cache_spec, key)
            failure = doc.get("failure") or {}
            lowered = lowered_for_oom(now) if failure.get("kind") == "oom" and retries else None
            if doc.get("ok") or lowered is None:
                break
            retries -= 1
            now, change = lowered
            # The failed run's log stays beside the next one as <log>.1; with the compile
            # cache, every unit that finished is a hit the second time.
            ctx.log.warning("build %s was OOM-killed; retrying with %s", name, change)
            ctx.runner.progress.step(ctx.host.name, f"wheel:{name}", f"OOM; retrying: {change}")
            state.packages.setdefault(name, {}).setdefault("oom_retries", []).append(change)
        if not doc.get("ok"):
            _fetch_log(ctx, log, name)
            tail = [ln.strip() for ln in doc.get("log_tail") or [] if ln.strip()]
            ctx.log.error("build %s failed; log tail:\n%s", name, "\n".join(tail))
            last = last_error_line(tail) or doc.get("error") or ""
            retried = state.packages.get(name, {}).get("oom_retries")
            raise HostFailed(
                f"{name}: build failed ({failure.get('kind', 'error')}): "
                f"{failure.get('advice') or doc.get('error')}"
                + (f" (after an OOM retry with {'; '.join(retried)})" if retried else "")
                + f"; log {log} on {ctx.host.name}, last line: {last}"
            )
        ctx.run(f"rm -rf {_q(work)}", check=False)
        return BuiltWheel(
            path=str(doc["wheel"]),
            sha256=str(doc["sha256"]),
            seconds=float(doc.get("seconds") or 0.0),
            log=log,
        )

    return build


def compile_cache_spec(ctx: HostContext, state: ProvisionState, name: str) -> dict[str, Any] | None:
    """build_wheel.py's ``compile_cache`` argument for `name` on this host, or None when the
    host var or the package's knob turns it off. S3 credentials for the team store go into
    a file only the host's user can read (the script deletes it), never into the arguments."""
    pkg = state.resolved.package(name)
    if not compile_cache.enabled_on_host(state.host.vars):
        return None
    if not compile_cache.knob_enabled(name, pkg.get("knobs") or {}):
        return None
    assert state.env is not None
    stores = host_store_specs(cache_for(ctx.runner).config, ctx.host)
    spec = compile_cache.host_spec(
        state.host.vars,
        state.paths.work_root,
        state.env.path,
        name,
        stores,
        cmake=registry.descriptor(name).cmake,
    )
    if "s3" in spec:
        profile = next((s.get("profile") for s in stores if s.get("type") == "s3"), None)
        creds = compile_cache.s3_credentials(profile)
        if creds:
            path = posixpath.join(state.paths.tmp, f"compile-cache-{name}-{os.getpid()}.json")
            ctx.run(
                f"umask 077 && mkdir -p {_q(state.paths.tmp)} && cat > {_q(path)}",
                stdin=json.dumps(creds),
                check=False,
            )
            spec["secrets"] = path
    return spec


def compile_cache_row(ctx: HostContext, state: ProvisionState, name: str) -> dict[str, str]:
    """The ``--explain`` row of the compile cache: on (where it stores) or off (why)."""
    row = {"name": "compile cache"}
    if not compile_cache.enabled_on_host(state.host.vars):
        where = state.host.var_sources.get("compile_cache", "inventory")
        return {**row, "value": "off", "reason": f"host var compile_cache ({where})"}
    if not compile_cache.knob_enabled(name, state.resolved.package(name).get("knobs") or {}):
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


def _cache_counts(doc: dict[str, Any]) -> dict[str, Any]:
    """The JSON's ``compile_cache`` block: hits and misses first, then the detail."""
    if not doc.get("enabled"):
        return {"enabled": False, "reason": doc.get("reason")}
    keep = ("hits", "misses", "hits_by_kind", "misses_by_kind", "compile_requests", "errors")
    out: dict[str, Any] = {k: doc[k] for k in keep if k in doc}
    out.update(
        {
            k: doc[k]
            for k in ("tool", "version", "store", "levels", "team_store", "warning")
            if doc.get(k)
        }
    )
    return out


def provenance_fields(state: ProvisionState, name: str, key: str) -> dict[str, Any]:
    """What only the controller knows for the wheel's build record (``sm120kit-build.json``,
    written by build_wheel.py, which adds the torch, nvcc and device code it measures)."""
    record = state.packages.get(name) or {}
    pkg = state.resolved.package(name)
    return {
        "package": name,
        "recipe": state.resolved.recipe.name,
        "cache_key": key,
        "arch_list": list(state.arch_list),
        "source": {**dict(pkg.get("source") or {}), "digest": record.get("source_digest")},
        "patches": list(record.get("patches") or []),
        "recipe_torch": {
            "version": state.resolved.values.get("torch.version"),
            "cuda": state.resolved.values.get("torch.cuda"),
            "pin": pkg.get("torch") or None,
        },
    }


def _private_dependency_copies(ctx: HostContext, pip_args: list[str], work: str) -> list[str]:
    """Copies of the FetchContent trees inside the build's throwaway tree, and the pip
    arguments pointing at them: a full build writes into some of them (dlpack's ``bin/``,
    mscclpp's ``python/``), and the stored trees stay as verified."""
    prefix = "-Ccmake.define.FETCHCONTENT_SOURCE_DIR_"
    out, copies = [], []
    for arg in pip_args:
        if arg.startswith(prefix):
            define, _, path = arg.partition("=")
            copy = posixpath.join(work, ".sm120kit-deps", posixpath.basename(path))
            copies.append(f"cp -a {_q(path)} {_q(copy)}")
            arg = f"{define}={copy}"
        out.append(arg)
    if copies:
        ctx.run(
            f"mkdir -p {_q(posixpath.join(work, '.sm120kit-deps'))} && " + " && ".join(copies),
            what="copy the dependency trees into the build tree",
        )
    return out


#: Lines pip and the front end wrap a failed build in: they never say what went wrong.
_WRAPPER = re.compile(
    r"^(\[notice\]|# sm120kit|ERROR: Failed|Failed to build|error: subprocess-exited|note: |"
    r"full command: |cwd: |[×│╰]|exit code: |Building wheel for .* finished)"
)
_ERRORISH = re.compile(r"error|FAILED|Killed|fatal|Traceback|No such file", re.IGNORECASE)


def last_error_line(tail: list[str]) -> str:
    """The log line that best says why a build failed: the last error-like line that is not
    pip's wrapping, else the last line that is not (at most 200 characters)."""
    useful = [ln for ln in tail if ln and not _WRAPPER.match(ln)]
    for line in reversed(useful):
        if _ERRORISH.search(line):
            return line[:200]
    return useful[-1][:200] if useful else ""


def _fetch_log(ctx: HostContext, log: str, name: str) -> None:
    """A failed build's full log, copied beside the run's host log on the controller."""
    run_dir = ctx.runner.run_dir
    if run_dir is None:
        return
    try:
        ctx.get(log, str(Path(run_dir) / f"{ctx.host.name}-build-{name}.log"))
    except Exception as exc:  # the error message already names the log on the host
        ctx.log.warning("could not copy %s: %s", log, exc)


# --------------------------------------------------------------------------- the operation


def _ensure_prerequisites(ctx: HostContext, state: ProvisionState) -> None:
    """The toolkit and env, so that `invoke build` works on its own (provision did them)."""
    if state.toolkit is None:
        from . import toolkit as toolkit_ops

        state.toolkit = toolkit_ops.ensure_toolkit(ctx, state)
    if state.env is None:
        from . import pyenv as pyenv_ops

        state.env = pyenv_ops.ensure_env(ctx, state)


def installed_marker(state: ProvisionState, name: str) -> str | None:
    if state.env is None:
        return None
    return posixpath.join(state.env.path, ".sm120kit", "installed", f"{name}.json")


def ensure_package(ctx: HostContext, state: ProvisionState, name: str) -> dict[str, Any]:
    """Source, patches, wheel (built or from the cache), install: see the module docstring."""
    pkg = state.resolved.package(name)
    version = str(pkg["version"])
    knobs = package_knobs(state, name)
    problems = state.resolved.problems.get(name)
    if problems:
        if state.options.get("explain"):
            extra = source_rows(state, name, Source("", "", False), Patched(""))
            extra += dependency_rows(state, name)
            extra += target_explain(ctx, state, name, knobs, "")
            explain(ctx, state, name, knobs, extra)
        raise HostFailed(
            f"{name} {version} cannot be built with recipe {state.resolved.recipe.name}: "
            + "; ".join(problems)
        )
    from .cmake_check import cmake_checked, ensure_prerequisites

    record: dict[str, Any] = {"version": version, "wheel_from": None}
    state.packages[name] = record
    source = ensure_source(ctx, state, name)
    record["source_digest"] = source.digest
    deps = ensure_dependencies(ctx, state, name)
    if deps is not None:
        add_dependency_defines(knobs, deps.dirs, deps.reasons)
        record["dependencies"] = [list(d) for d in deps.digests]
    patched = ensure_patched(ctx, state, name, source)
    record["patches"] = patched.patches
    _ensure_prerequisites(ctx, state)
    if cmake_checked(state, name):
        ensure_prerequisites(ctx, state, name, knobs)
    ready = (
        source.present
        and (deps is None or deps.complete)
        and state.toolkit is not None
        and state.env is not None
    )
    if state.options.get("explain"):
        extra = source_rows(state, name, source, patched)
        extra += deps.rows if deps is not None else []
        extra += target_explain(ctx, state, name, knobs, patched.tree if ready else "")
        for row in extra:
            row.setdefault("package", name)
        explain(ctx, state, name, knobs, extra)
    record["env"] = build_env(state, knobs)
    record["pip_args"] = list(knobs.pip_args)
    if deps is not None and not deps.complete:
        source = Source(source.path, "", source.present)  # the key needs every digest
    if not source.digest or state.toolkit is None or state.env is None:
        # Check mode before the toolkit/env/source exist: the key is not known yet.
        with ctx.step(f"wheel:{name}") as step:
            ctx.may_act(step, f"build or fetch {name} {version} (key known once it exists)")
        with ctx.step(f"install:{name}") as step:
            ctx.may_act(step, f"install {name} {version}")
        return record
    digests = tuple((p["name"], p["sha256"]) for p in patched.patches) or patch_key(
        package_patches(state, name)[0]
    )
    inputs = key_inputs(
        state, name, source.digest, digests, knobs, deps.digests if deps is not None else ()
    )
    key = compute_key(inputs)
    record["key"] = key
    marker_path = installed_marker(state, name)
    assert marker_path is not None
    installed = ctx.read_json(marker_path)
    rebuild = bool(state.options.get("rebuild"))
    already = bool(
        installed and installed.get("key") == key and installed.get("sha256") and not rebuild
    )
    # The record says what was installed; the env says what is there now (a `pip uninstall`,
    # another version by hand). A record the env no longer matches is repaired, not trusted.
    drift = env_drift(ctx, state, name, installed) if already and installed else ""
    if drift:
        already = False
        record["reinstall_reason"] = drift
    with ctx.step(f"wheel:{name}") as step:
        if already and installed is not None:
            record.update(
                wheel=installed.get("wheel"),
                sha256=installed.get("sha256"),
                wheel_from=installed.get("wheel_from"),
                log=installed.get("log"),
                seconds=0.0,
            )
            step.message = f"installed wheel has key {key[:12]}"
        else:
            _obtain(ctx, state, name, inputs, key, patched.tree, knobs, record, step)
    with ctx.step(f"install:{name}") as step:
        if already:
            step.message = f"{name} {version} installed ({key[:12]})"
            record["installed"] = "already"
        else:
            _install(ctx, state, name, record, marker_path, step, why=drift)
    return record


def env_drift(ctx: HostContext, state: ProvisionState, name: str, installed: dict[str, Any]) -> str:
    """Why the env no longer holds the install `installed` records ("" when it does): the
    distribution gone, files of it gone, or another version."""
    assert state.env is not None
    if installed.get("dist_present") is False:
        return ""  # its distribution is named otherwise: nothing to compare with
    env = state.env.path
    dist_name, wheel_version = _wheel_name(str(installed.get("wheel") or ""))
    dist = str(installed.get("dist") or dist_name or name)
    found = ctx.script("installed_dist", {"env": env, "name": dist}, timeout=120)
    if not found.get("present"):
        return f"{name} is not installed in {env} (removed by hand?)"
    if found.get("missing"):
        return f"files of {name} are gone from the env: {', '.join(found['missing'][:3])}"
    want = installed.get("dist_version") or wheel_version
    have = str(found.get("version") or "")
    if want and have and not _same_version(want, have):
        return f"the env has {name} {have}, the install record {want}"
    # Another build of the same version (another RECORD, kept as dist_record) is left to the
    # smoke step, which checks it afresh (its verdict is keyed on RECORD): reinstalling over a
    # build someone installed on purpose is not asked for (tests/test_provision.py).
    return ""


def _wheel_name(wheel: str) -> tuple[str, str]:
    """(distribution name, version) from a wheel's file name; ("", "") if it is not one."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    try:
        parsed = parse_wheel_filename(os.path.basename(wheel))
    except (InvalidWheelFilename, ValueError):
        return "", ""
    return str(parsed[0]), str(parsed[1])


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _obtain(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    inputs: KeyInputs,
    key: str,
    tree: str,
    knobs: Knobs,
    record: dict[str, Any],
    step: StepResult,
) -> None:
    builder = make_builder(ctx, state, name, tree, knobs, key)
    dest = posixpath.join(state.paths.build(name), "wheels")
    built: dict[str, Any] = {}

    def build() -> BuiltWheel:
        wheel = builder()
        built.update(seconds=wheel.seconds, log=wheel.log)
        return wheel

    rebuild = bool(state.options.get("rebuild"))
    obtained = cache_for(ctx.runner).obtain(ctx, inputs, build, dest, rebuild=rebuild)
    record.update(
        wheel=obtained.path or None,
        sha256=obtained.sha256 or None,
        wheel_from=obtained.wheel_from,
        log=built.get("log"),
        seconds=round(float(built.get("seconds") or 0.0), 3),
    )
    if ctx.check_mode:
        if obtained.wheel_from.startswith("cache:"):
            ctx.may_act(step, f"fetch {name} ({key[:12]}) from {obtained.wheel_from[6:]}")
        else:
            args = {"src": tree, "python": state.env.python if state.env else "python"}
            cmd = build_command({**args, "pip_args": knobs.pip_args}, dest)
            env = " ".join(f"{k}={_q(v)}" for k, v in sorted(build_env(state, knobs).items()))
            ctx.may_act(step, f"build {name} ({key[:12]})", [f"{env} {shlex.join(cmd)}"])
        return
    what = (
        f"built in {record['seconds']:.0f}s"
        if obtained.wheel_from == "build"
        else f"from {obtained.wheel_from}"
    )
    if obtained.wheel_from == "build" and record.get("compile_cache"):
        what += f", {compile_cache.summary(record['compile_cache'])}"
    ctx.may_act(step, f"{os.path.basename(obtained.path)} {what} (key {key[:12]})")


def _install(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    record: dict[str, Any],
    marker_path: str,
    step: StepResult,
    why: str = "",
) -> None:
    assert state.env is not None
    wheel = record.get("wheel") or f"<{name} wheel>"
    pip = (
        f"{_q(state.env.python)} -m pip install --no-deps --force-reinstall --no-index {_q(wheel)}"
    )
    verb = f"reinstall ({why}):" if why else "install"
    if not ctx.may_act(step, f"{verb} {os.path.basename(wheel)} into {state.env.path}", [pip]):
        return
    doc = {
        "package": name,
        "version": record["version"],
        "key": record["key"],
        "sha256": record["sha256"],
        "wheel": record["wheel"],
        "wheel_from": record["wheel_from"],
        "log": record.get("log"),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    ctx.run(pip, timeout=1800, what=f"pip install {os.path.basename(wheel)}")
    # What pip left in the env, for the next run's drift check (env_drift).
    dist = _wheel_name(str(wheel))[0] or name
    found = ctx.script("installed_dist", {"env": state.env.path, "name": dist}, timeout=120)
    doc.update(
        dist=dist,
        dist_present=bool(found.get("present")),
        dist_version=found.get("version"),
        dist_record=found.get("record"),
    )
    ctx.run(
        f"mkdir -p {_q(posixpath.dirname(marker_path))} && "
        f"printf '%s' {_q(json.dumps(doc, sort_keys=True))} > {_q(marker_path)}",
        what=f"record the {name} install",
    )
    record["installed"] = "now"


# --------------------------------------------------------------------------- tasks


def build_op(opts: PlanOptions, package: str, runner: Runner | None = None) -> HostOp:
    """`invoke build --package P` (and the per-package build tasks)."""

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        package_names(state, opts)  # an unknown package: one line naming the recipe
        try:
            ensure_package(ctx, state, package)
        finally:
            ctx.set(
                packages=state.packages,
                toolkit=state.toolkit.to_dict() if state.toolkit else None,
                env=state.env.to_dict() if state.env else None,
            )

    return run


class _Probe:
    """A HostContext seen in check mode: ensure_* only probe (for cache.key, which changes
    nothing: a step that would change stays "ok" and says "would ...")."""

    def __init__(self, ctx: HostContext) -> None:
        self._ctx = ctx

    @property
    def check_mode(self) -> bool:
        return True

    def may_act(self, step: StepResult, message: str, commands: list[str] | None = None) -> bool:
        step.message, step.commands = f"would {message}", list(commands or [])
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def key_op(opts: PlanOptions, package: str) -> HostOp:
    """`invoke cache.key --package P`: every key input on each host, and the key; builds nothing.

    The toolkit and env are probed in check mode: where they do not exist yet, the key is the
    one they would give (recipe versions), and the JSON says ``"predicted": true``.
    """

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        package_names(state, opts)
        _ensure_prerequisites(_Probe(ctx), state)  # type: ignore[arg-type]
        with ctx.step(f"key:{package}") as step:
            plan = plan_source(ctx, state, package)
            digest = plan.digest
            if not digest and plan.kind == "git":
                digest = "git:" + git_resolve(plan.args["repo"], plan.args["commit"])
            pkg = state.resolved.package(package)
            dep_digests: list[tuple[str, str]] = []
            if srcstore.is_managed(pkg):
                for entry in srcstore.entries(package, pkg)[1:]:
                    rec = store_record(ctx, state, entry)
                    if rec is None:
                        break
                    dep_digests.append((entry.dir, f"tree:{rec['digest']}"))
                else:
                    rec = {}
                if not digest or rec is None:
                    raise HostFailed(
                        f"{package}: its sources are not all in the controller's source store: "
                        f"run `invoke sources.fetch --package {package}` first"
                    )
            patches = patch_key(package_patches(state, package)[0])
            inputs = key_inputs(
                state,
                package,
                digest,
                patches,
                package_knobs(state, package),
                tuple(dep_digests),
            )
            key = compute_key(inputs)
            step.message = key
        ctx.set(
            package=package,
            key=key,
            inputs=[list(row) for row in describe(inputs)],
            key_inputs=inputs.to_dict(),
            # A toolkit or env that would be installed: its versions are the recipe's.
            predicted=any(s.message.startswith("would ") for s in ctx.result.steps),
        )

    return run


__all__ = [
    "Patched",
    "Source",
    "SourcePlan",
    "build_env",
    "build_kind",
    "build_op",
    "ensure_package",
    "ensure_patched",
    "ensure_source",
    "explain",
    "index_sdist",
    "key_inputs",
    "key_op",
    "make_builder",
    "pack_tree",
    "package_knobs",
    "package_patches",
    "plan_source",
]
