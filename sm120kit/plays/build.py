"""Build one recipe package on a host: source -> patches -> knobs -> wheel (via the cache) -> install.

`ensure_package(ctx, state, name)` is the operation `build`, the per-package build tasks
and `provision` share; what differs per package comes from its descriptor (`sm120kit.packages`).
Its steps, each "ok" when nothing had to be done, one module each:

- ``source:<pkg>`` (`ops/build_source.py`): the pinned, verified, pristine source tree;
- ``patch:<pkg>`` (`ops/build_patches.py`): the recipe's patches on a copy of it;
- ``wheel:<pkg>``: knobs, env and cache key (`builds/inputs.py`); `WheelCache.obtain`
  finds the wheel in a store or runs the build (`ops/compile.py`, its progress polled by
  `runner/build_progress.py`);
- ``install:<pkg>`` (`ops/install.py`): into the env, unless the env still holds it.

``--explain`` rows come from `plays/build_explain.py`. In check mode (`invoke plan`,
`invoke build --check`) every step only probes and records what it would run.
"""

from __future__ import annotations

import os
import posixpath
import shlex
from typing import Any

from ..builds import compile_cache
from ..builds import sources as srcstore
from ..builds.cmake_config import cmake_checked, configure_steps
from ..builds.inputs import (
    UNKNOWN_UNTIL_ENV,
    add_dependency_defines,
    build_env,
    cc_version,
    key_inputs,
    key_unknown,
    package_knobs,
    toolchain_env,
)
from ..builds.knobs import Knobs
from ..builds.packing import pack_tree
from ..cache.key import KeyInputs, compute_key, describe
from ..cache.request import BuiltWheel
from ..cache.wheels import cache_for
from ..errors import HostFailed
from ..ops import pyenv as pyenv_ops
from ..ops import toolkit as toolkit_ops
from ..ops.build_patches import (
    PATCHED_MARKER,
    Patched,
    ensure_patched,
    package_patches,
    patch_key,
    patch_steps,
)
from ..ops.build_source import (
    Source,
    SourcePlan,
    ensure_source,
    git_resolve,
    index_sdist,
    plan_source,
)
from ..ops.compile import make_builder, plan_build
from ..ops.deps import ensure_dependencies, store_record
from ..ops.install import env_drift, install, installed_marker
from ..ops.prerequisites import ensure_prerequisites
from ..runner.host_context import HostContext
from ..runner.pool import HostOp
from ..runner.results import StepResult
from ..state import PackageRecord, ProvisionState
from ..steps import Step, commands
from .build_explain import dependency_rows, explain, source_rows, target_explain
from .plan import PlanOptions, package_names, prepare


def _ensure_prerequisites(ctx: HostContext, state: ProvisionState) -> None:
    """The toolkit and env, so that `invoke build` works on its own (provision did them)."""
    if state.toolkit is None:
        state.toolkit = toolkit_ops.ensure_toolkit(ctx, state)
    if state.env is None:
        state.env = pyenv_ops.ensure_env(ctx, state)


def ensure_package(ctx: HostContext, state: ProvisionState, name: str) -> PackageRecord:
    """Source, patches, wheel (built or from the cache), install: see the module docstring."""
    pkg = state.resolved.packages[name]
    version = pkg.version
    # Asked once per build; every step that acts on it is handed the answer.
    checked = cmake_checked(pkg)
    knobs = package_knobs(state, name)
    problems = state.resolved.problems.get(name)
    if problems:
        if state.flags.explain:
            extra = source_rows(state, name, Source("", "", False), Patched(""))
            extra += dependency_rows(state, name)
            extra += target_explain(ctx, state, name, knobs, "", cmake_checked=checked)
            explain(ctx, state, name, knobs, extra)
        raise HostFailed(
            f"{name} {version} cannot be built with recipe {state.resolved.recipe.name}: "
            + "; ".join(problems)
        )

    record: PackageRecord = {"version": version, "wheel_from": None}
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
    if checked:
        ensure_prerequisites(ctx, state, name, knobs)
    ready = (
        source.present
        and (deps is None or deps.complete)
        and state.toolkit is not None
        and state.env is not None
    )
    if state.flags.explain:
        extra = source_rows(state, name, source, patched)
        extra += deps.rows if deps is not None else []
        tree = patched.tree if ready else ""
        extra += target_explain(ctx, state, name, knobs, tree, cmake_checked=checked)
        for row in extra:
            row.setdefault("package", name)
        explain(ctx, state, name, knobs, extra)
    record["env"] = build_env(state, knobs)
    record["pip_args"] = list(knobs.pip_args)
    if deps is not None and not deps.complete:
        source = Source(source.path, "", source.present)  # the key needs every digest
    if not source.digest or state.toolkit is None or key_unknown(state):
        # Check mode before the toolkit/env/source exist: the key is not known yet (a planned
        # env's torch is the recipe's `2.13.0`, not the `2.13.0+cpu` the build would hash).
        with ctx.step(f"wheel:{name}") as step:
            # The commands are known without the key: plan shows what a build would run.
            ctx.may_act(
                step,
                f"build or fetch {name} {version} (key known once it exists)",
                commands(plan_build(state, name, patched.tree, knobs, "")),
            )
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
    rebuild = state.flags.rebuild
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
                {
                    "wheel": installed.get("wheel"),
                    "sha256": installed.get("sha256"),
                    "wheel_from": installed.get("wheel_from"),
                    "log": installed.get("log"),
                    "seconds": 0.0,
                }
            )
            step.message = f"installed wheel has key {key[:12]}"
        else:
            _obtain(ctx, state, name, inputs, key, patched.tree, knobs, record, step, checked)
    with ctx.step(f"install:{name}") as step:
        if already:
            step.message = f"{name} {version} installed ({key[:12]})"
            record["installed"] = "already"
        else:
            install(ctx, state, name, record, marker_path, step, why=drift)
    return record


def _obtain(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    inputs: KeyInputs,
    key: str,
    tree: str,
    knobs: Knobs,
    record: PackageRecord,
    step: StepResult,
    checked: bool,
) -> None:
    ran: list[Step] = []  # the build's Steps, when it runs (a cache miss)
    builder = make_builder(ctx, state, name, tree, knobs, key, ran, cmake_checked=checked)
    dest = posixpath.join(state.paths.build(name), "wheels")
    built: dict[str, Any] = {}

    def build() -> BuiltWheel:
        wheel = builder()
        built.update(seconds=wheel.seconds, log=wheel.log)
        return wheel

    rebuild = state.flags.rebuild
    obtained = cache_for(ctx.runner).obtain(ctx, inputs, build, dest, rebuild=rebuild)
    record.update(
        {
            "wheel": obtained.path or None,
            "sha256": obtained.sha256 or None,
            "wheel_from": obtained.wheel_from,
            "log": built.get("log"),
            "seconds": round(float(built.get("seconds") or 0.0), 3),
        }
    )
    if ctx.check_mode:
        if obtained.wheel_from.startswith("cache:"):
            ctx.may_act(step, f"fetch {name} ({key[:12]}) from {obtained.wheel_from[6:]}")
        else:
            configure = configure_steps(state, knobs, tree) if checked else []
            shown = commands([*configure, *plan_build(state, name, tree, knobs, key)])
            ctx.may_act(step, f"build {name} ({key[:12]})", shown)
        return
    step.commands = commands(ran)  # what the build ran; none when the cache had the wheel
    what = (
        f"built in {record['seconds']:.0f}s"
        if obtained.wheel_from == "build"
        else f"from {obtained.wheel_from}"
    )
    if obtained.wheel_from == "build" and record.get("compile_cache"):
        what += f", {compile_cache.summary(record['compile_cache'])}"
    ctx.may_act(step, f"{os.path.basename(obtained.path)} {what} (key {key[:12]})")


def build_op(opts: PlanOptions) -> HostOp:
    """`invoke build --package P` (and the per-package build tasks): `opts.package`."""
    package = opts.package

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


def key_op(opts: PlanOptions) -> HostOp:
    """`invoke cache.key --package P` (`opts.package`): every key input on each host, and the
    key; builds nothing.

    The toolkit and env are probed in check mode: where they do not exist yet, the key is the
    one they would give (recipe versions), and the JSON says ``"predicted": true``.
    """
    package = opts.package

    def run(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        package_names(state, opts)
        with ctx.probing():  # the toolkit and env it would get; nothing changes
            _ensure_prerequisites(ctx, state)
        with ctx.step(f"key:{package}") as step:
            plan = plan_source(ctx, state, package)
            digest = plan.digest
            if not digest and plan.kind == "git":
                digest = "git:" + git_resolve(plan.args["repo"], plan.args["commit"])
            pkg = state.resolved.packages[package]
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
            unknown = key_unknown(state)
            rows = [list(row) for row in describe(inputs)]
            key: str | None = None
            if unknown:
                # No key the build would never use: torch and the key say why they are not
                # known, every other input is shown as it will be.
                rows = [
                    [label, UNKNOWN_UNTIL_ENV if label in ("torch", "key") else value]
                    for label, value in rows
                ]
                step.message = f"key {UNKNOWN_UNTIL_ENV} ({unknown})"
            else:
                key = compute_key(inputs)
                step.message = key
        ctx.set(
            package=package,
            key=key,
            key_unknown=unknown,
            inputs=rows,
            key_inputs=inputs.to_dict() if not unknown else None,
            # A toolkit or env that would be installed: its versions are the recipe's.
            predicted=any(s.message.startswith("would ") for s in ctx.result.steps),
        )

    return run


def _q(text: str) -> str:
    return shlex.quote(text)


__all__ = [
    "PATCHED_MARKER",
    "Patched",
    "Source",
    "SourcePlan",
    "add_dependency_defines",
    "build_env",
    "build_op",
    "cc_version",
    "ensure_package",
    "ensure_patched",
    "ensure_source",
    "env_drift",
    "explain",
    "git_resolve",
    "index_sdist",
    "key_inputs",
    "key_op",
    "make_builder",
    "pack_tree",
    "package_knobs",
    "package_patches",
    "patch_steps",
    "plan_source",
    "target_explain",
    "toolchain_env",
]
