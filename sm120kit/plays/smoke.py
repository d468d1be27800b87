"""The `smoke` check on each host, and the smoke step of `provision`.

Smoke runs the stdlib-only probe (sm120kit/remote/extension_probe.py) on each host against one
Python env: the recipe's managed env (never created here: a missing one fails the host and
names --python), or any interpreter or venv given with --python. The probe's JSON is kept
whole (`"smoke"`); per package the checks are judged into pass / warn / fail / skip
(`"packages"`). A package the recipe lists but the env lacks is a skip; one named with
--package, or one `provision` just built, is a fail.

Without --package, smoke checks the whole serving env: besides the recipe's packages, every
package of the serving stack the env holds (`packages/stack.py`: sglang-kernel, sgl-flash-mla,
...), ``import sglang`` (through a driver stub where there is no GPU), sglang's pins, and the
CUDA toolchain each JIT package would compile with (`"stack"`). What a run checked is said
(`"checked"`); one that found nothing to check says "checked nothing: none of ... is
installed" instead of a bare ok.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ChecksFailed, HostFailed, RecipeError, Sm120Error
from ..facts import gather
from ..inventory.host import Host
from ..ops.pyenv import EnvSpec
from ..packages import registry
from ..packages import stack as serving
from ..python_choice import serving_lock
from ..recipes.select import PackageSpec, Recipe, ResolvedRecipe, load_recipes
from ..recipes.target_arch import TargetArch, choose_target_arch
from ..remote.lib.arch import Arch
from ..runner.pool import HostContext, HostOp
from ..smoke import report as probe
from ..smoke.verdicts import checked_summary, failure, judge_packages, judge_stack
from ..smoke.verdicts import rows as rows
from ..smoke.verdicts import stack_rows as stack_rows
from ..stack.choice import provision_parts
from ..state import ProvisionState
from .plan import PlanOptions, prepare
from .stack import env_path as stack_env_path

#: Seconds per probe subprocess (one import, one dlopen...) and for the whole probe command.
CHECK_TIMEOUT = 300.0
PROBE_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Target:
    """What one host's smoke run checks: which interpreter, which packages, judged for what."""

    python: str
    python_source: str  # "--python" | "serving stack env" | "managed env" | "provisioned env"
    env: str | None  # the managed env's directory (None with --python)
    packages: tuple[str, ...]
    explicit: bool  # named packages: absent ones fail instead of skipping
    arch: str | None
    arch_source: str
    gpu: bool
    #: Per package, what the recipe says smoke should know (see `declarations`).
    declared: Mapping[str, Mapping[str, Any]] | None = None
    #: What the package descriptors and the serving stack tell the probe
    #: (`packages.stack.probe_knowledge`): other distribution names, loader rules, module
    #: archs, and for a whole-env run the stack to discover, the JIT rules and the top package.
    knowledge: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------------- recipe


def _declaration(
    recipe: Recipe, pkg: PackageSpec, version: str, torch: str, arch: list[str], source: str
) -> dict[str, Any]:
    return {
        "recipe": recipe.name,
        "source": source,
        "version": version,
        "arch": list(arch),
        "torch": torch,
        "not_for_arch": dict(pkg.not_for_arch),
    }


def declarations(
    state: ProvisionState | None, opts: PlanOptions | None = None
) -> dict[str, dict[str, Any]]:
    """What the recipe tells the probe per package: its version, torch pin, target archs and
    the modules that carry no code for them by design (``[packages.smoke] not_for_arch``).

    Without a recipe for the host (``--python`` on a host no recipe serves), the first recipe
    listing the package stands in: these are facts about the package, not the host.
    """
    if state is not None:
        recipe = state.resolved.recipe
        out = {}
        for pkg in state.resolved.package_specs():
            values = state.resolved.packages[pkg.name]
            out[pkg.name] = _declaration(
                recipe,
                pkg,
                values.version or pkg.version,
                values.torch,
                list(state.arch_list or recipe.arch),
                f"recipe {recipe.name}",
            )
        return out

    try:
        recipes = opts.recipes() if opts is not None else load_recipes()
    except RecipeError:
        return {}
    fallback: dict[str, dict[str, Any]] = {}
    for name in sorted(recipes):
        recipe = recipes[name]
        for pkg in recipe.packages_for(recipe.torch.version):
            if pkg.name in fallback:
                continue
            fallback[pkg.name] = _declaration(
                recipe,
                pkg,
                pkg.version,
                str(pkg.torch) if pkg.torch is not None else "",
                list(recipe.arch),
                f"recipe {recipe.name} (no recipe for this host: the first listing {pkg.name})",
            )
    return fallback


# --------------------------------------------------------------------------------- arch


def normalize_cc(value: Any) -> str | None:
    """``12.0`` from "12.0", "12.0a", "12.0+PTX", "sm_120"; None when absent or not a capability."""
    if value in (None, ""):
        return None
    try:
        return Arch.parse(value).cc_text
    except ValueError:
        return None


def gpu_capability(facts: Mapping[str, Any] | None) -> str | None:
    """The first GPU's compute capability from the facts (None: no GPU or a driver too old)."""
    gpu = (facts or {}).get("gpu") or {}
    if not gpu.get("present"):
        return None
    for g in gpu.get("gpus") or []:
        cc = normalize_cc(g.get("compute_cap"))
        if cc:
            return cc
    return None


def choose_arch(
    host: Host,
    facts: Mapping[str, Any] | None,
    flag: str | None,
    resolved: ResolvedRecipe | None,
) -> TargetArch:
    """The arch smoke judges for: the host's target arch by the one rule of
    sm120kit/recipes/target_arch.py (``--arch``, host var ``target_arch``, the GPU, the recipe), the
    same the stack was verified for. With a recipe resolved for this run's flag, its target
    (`ResolvedRecipe.target`, decided by that rule) is the answer; without one (``--python``
    on a host no recipe serves) the rule is applied here. `preflight` asks this function too."""
    if resolved is not None:
        chosen = resolved.target.arch
        if flag in (None, "") or (chosen.kind == "flag" and chosen.cc == normalize_cc(flag)):
            return chosen
    recipe = None
    if resolved is not None:
        recipe = (resolved.recipe.name, resolved.recipe.source, list(resolved.arch))
    try:
        return choose_target_arch(host, facts, flag=flag, recipe=recipe)
    except RecipeError as exc:
        raise Sm120Error(str(exc)) from None


# --------------------------------------------------------------------------------- env


def managed_env_path(state: ProvisionState) -> str:
    """The recipe's managed env directory on the host (ops.pyenv's layout; nothing created)."""
    if state.env is not None:
        return state.env.path

    return EnvSpec.from_state(state).path


def managed_python(state: ProvisionState) -> tuple[str, str, str]:
    """(interpreter, its label, env directory) of the recipe's env."""
    if state.env is not None:
        return state.env.python, "provisioned env", state.env.path
    env = managed_env_path(state)
    return posixpath.join(env, "bin", "python"), "managed env", env


def default_python(state: ProvisionState, host_vars: Mapping[str, Any]) -> tuple[str, str, str]:
    """(interpreter, label, env directory) that `invoke smoke` checks without --python: the
    serving stack env where the host's provision is the stack alone (the default since the
    stack is; `stack.provision_parts`), else the recipe's build env. A host var that makes
    the parts an error leaves the choice to the build env; provision reports that error."""
    recipe = state.resolved.recipe
    lock = serving_lock(state)
    if lock is not None:
        try:
            parts = provision_parts(recipe=recipe.name, has_stack=True, host_vars=dict(host_vars))
        except RecipeError:
            parts = None
        if parts is not None and parts.stack and not parts.builds:
            env = stack_env_path(state, lock)
            return posixpath.join(env, "bin", "python"), "serving stack env", env
    return managed_python(state)


# --------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class SmokeRun:
    """One probe run on one host: the probe's JSON, parsed, and the per-package verdicts."""

    doc: dict[str, Any]
    report: probe.SmokeReport
    packages: dict[str, dict[str, Any]]
    stack: dict[str, Any] | None = None


def run_probe(ctx: HostContext, target: Target) -> SmokeRun:
    """Run the probe on the host for `target` (one command); nothing is judged fatal here."""
    args = probe.probe_args(
        target.packages,
        python=target.python,
        arch=target.arch,
        gpu=target.gpu,
        timeout=CHECK_TIMEOUT,
        declared=target.declared,
    )
    args.update(target.knowledge or {})
    ctx.runner.progress.step(
        ctx.host.name, "smoke", f"{len(target.packages)} package(s) in {target.python}"
    )
    doc = ctx.script(probe.SCRIPT, args, timeout=PROBE_TIMEOUT)
    report = probe.report_from_json(doc, ctx.host.name)
    packages = judge_packages(doc, target.packages, target.explicit)
    return SmokeRun(doc, report, packages, judge_stack(doc))


def raise_on_failure(ctx: HostContext, target: Target, run: SmokeRun) -> None:
    """HostFailed (one line) when the env is missing or uninspectable; ChecksFailed when the
    probe ran and a package or the stack fails its checks."""
    report = run.report
    if report.missing_python and target.env is not None:
        raise HostFailed(
            f"smoke failed: the {target.python_source} {target.env} does not exist on "
            f"{ctx.host.name} "
            f"({report.error}); provision it first, or pass --python PATH to check an "
            "interpreter or venv built by other means"
        )
    if report.error:
        raise HostFailed(f"smoke failed: {report.error}")
    why = failure(run.packages)
    stack = run.stack
    if stack and stack["status"] == "fail":
        failed = [c for c in stack["checks"] if c["status"] == "fail"]
        line = "; ".join(f"{stack['top']}: {c['reason']}" if c["check"] != "jit_toolchain"
                         else f"JIT toolchain: {c['reason']}" for c in failed)  # fmt: skip
        why = f"{why}; {line}" if why else line
    if why:
        raise ChecksFailed(f"smoke failed: {why}")


def nothing_checked(target: Target, run: SmokeRun) -> str | None:
    """For a whole-env run that found none of the packages it looks for: the line saying so
    (the run stays ok, as an env without kernel packages is not broken, but never silently)."""
    knowledge = target.knowledge or {}
    if not knowledge.get("top") or checked_summary(run.packages, run.stack) != "nothing":
        return None
    names = ", ".join(dict.fromkeys([*target.packages, *knowledge.get("discover", ())]))
    return (
        f"checked nothing: none of {names} (nor {knowledge['top']}) is installed in "
        f"{run.report.python or target.python}"
    )


def _summary(
    packages: Mapping[str, Mapping[str, Any]], stack: Mapping[str, Any] | None = None
) -> str:
    counts: dict[str, int] = {}
    for pkg in packages.values():
        counts[pkg["status"]] = counts.get(pkg["status"], 0) + 1
    text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no packages"
    if stack is not None:
        text += f", stack {stack['status']}; checked {checked_summary(packages, stack)}"
    return text


def _state_for_python(ctx: HostContext, opts: PlanOptions) -> ProvisionState | None:
    """The recipe when it resolves; with --python a host without one is still checked."""
    gather(ctx)
    try:
        return prepare(ctx, opts)
    except RecipeError as exc:
        step = ctx.result.steps[-1] if ctx.result.steps else None
        if step is not None and step.name == "recipe":
            step.status = "skipped"
            step.message = f"no recipe ({exc}); --python given: checking without one"
        return None


def smoke_op(
    opts: PlanOptions,
    *,
    package: str | None = None,
    python: str | None = None,
    arch: str | None = None,
) -> HostOp:
    """`invoke smoke`: check kernel packages in the managed env or the --python env per host."""
    if arch not in (None, "") and normalize_cc(arch) is None:
        raise Sm120Error(f"--arch {arch!r}: not a compute capability like 12.0")
    if python is not None and not str(python).strip():
        raise Sm120Error("--python is empty: give an interpreter path or a venv directory")

    def run(ctx: HostContext) -> None:
        env: str | None = None
        if python:
            state = _state_for_python(ctx, opts)
            py, py_source = str(python), "--python"
        else:
            try:
                state = prepare(ctx, opts)
            except RecipeError as exc:
                raise RecipeError(
                    f"{exc}; or pass --python PATH to check an env built by other means"
                ) from None
            py, py_source, env = default_python(state, ctx.host.vars)
        names: tuple[str, ...]
        knowledge: dict[str, Any]
        if package:
            names, explicit = (package,), True
            knowledge = {
                "distributions": {package: serving.distributions(package)},
                "facts": {package: serving.smoke_facts(package)},
            }
        elif state is not None:
            names, explicit = tuple(state.resolved.package_names()), False
        else:
            names, explicit = registry.smoke_defaults(), False
        if not package:
            knowledge = serving.probe_knowledge(names)
        chosen = choose_arch(ctx.host, ctx.facts, arch, state.resolved if state else None)
        cc, cc_source = chosen.cc, chosen.label
        gpu = gpu_capability(ctx.facts) is not None
        target = Target(
            py,
            py_source,
            env,
            names,
            explicit,
            cc,
            cc_source,
            gpu,
            declarations(state, opts),
            knowledge,
        )
        with ctx.step("smoke") as step:
            run = run_probe(ctx, target)
            ctx.set(
                smoke=run.doc,
                packages=run.packages,
                python=run.report.python or py,
                python_source=py_source,
                env=env,
                arch=cc,
                arch_source=cc_source,
                stack=run.stack,
                checked=checked_summary(run.packages, run.stack),
            )
            step.message = nothing_checked(target, run) or _summary(run.packages, run.stack)
            raise_on_failure(ctx, target, run)

    return run


def smoke_packages(ctx: HostContext, state: ProvisionState, names: list[str]) -> None:
    """`provision`'s last step: smoke the packages it built in the recipe's env.

    Judged for the host's target arch (`choose_arch`: the arch the build and the stack are
    for). A fail raises HostFailed;
    each package's verdict also lands in ``state.packages[name]["smoke"]``.
    """
    if not names:
        return
    py, py_source, env = managed_python(state)
    chosen = choose_arch(state.host, state.facts.json, None, state.resolved)
    cc, cc_source = chosen.cc, chosen.label
    gpu = gpu_capability(state.facts.json) is not None
    target = Target(py, py_source, env, tuple(names), True, cc, cc_source, gpu, declarations(state))
    with ctx.step("smoke") as step:
        run = run_probe(ctx, target)
        # `packages` in provision's JSON is the build record: the verdicts go inside it.
        ctx.set(smoke=run.doc)
        for name, verdict in run.packages.items():
            state.packages.setdefault(name, {})["smoke"] = {
                "status": verdict["status"],
                "checks": [
                    {k: c.get(k) for k in ("check", "status", "reason")} for c in verdict["checks"]
                ],
                "built_for": verdict.get("built_for"),
                "torch": verdict.get("torch"),
            }
        step.message = _summary(run.packages)
        raise_on_failure(ctx, target, run)


def stack_verdict_context(state: ProvisionState) -> dict[str, Any]:
    """What besides the serving env's files decides its smoke verdict (`plays.smoke_memo` keys a
    remembered verdict by it): the target arch, whether the host has a GPU (on a GPU-less
    host what needs the NVIDIA driver only warns), the recipe's declarations and what the
    probe is told about the stack's packages (their descriptors' data)."""
    names = tuple(state.resolved.package_names())
    knowledge = json.dumps(serving.probe_knowledge(names), sort_keys=True).encode()
    return {
        "of": "the serving env",
        "arch": choose_arch(state.host, state.facts.json, None, state.resolved).cc,
        "gpu": gpu_capability(state.facts.json) is not None,
        "declarations": declarations(state),
        "knowledge": hashlib.sha256(knowledge).hexdigest(),
    }


def failed_again(memo: Mapping[str, Any], what: str) -> str:
    """The line a remembered failed verdict fails the step with, instead of running the same
    checks again: when, where its log is, why, and how to run them anyway."""
    run = f", run {memo['run_dir']}" if memo.get("run_dir") else ""
    return (
        f"check failed last time ({memo.get('checked_at')}{run}): {memo.get('failed')}; "
        f"{what}, the checks and the target are unchanged since, so it was not run again "
        "(re-run it with invoke provision --recheck)"
    )


def smoke_stack(
    ctx: HostContext, state: ProvisionState, env: str, *, memo: dict[str, Any] | None
) -> dict[str, Any] | None:
    """`provision --stack`'s last step: smoke the serving env as ``invoke smoke --python ENV``
    does without ``--package`` (every stack package, ``import sglang``, its pins, each JIT
    package's toolchain), judged for the host's target arch (`choose_arch`: the arch the
    stack was verified for), or, given a remembered verdict (`memo`, found by
    `plays.smoke_memo.stack_smoke_or_reuse`), reuse it: a pass passes, a remembered fail fails again
    without running (`failed_again`). Returns the verdict to remember after a run that passed
    (None after a reuse); a fail raises ChecksFailed (HostFailed when the probe could not
    judge)."""
    gpu = gpu_capability(state.facts.json) is not None
    chosen = choose_arch(state.host, state.facts.json, None, state.resolved)
    cc, cc_source = chosen.cc, chosen.label
    names = tuple(state.resolved.package_names())
    with ctx.step("stack smoke") as step:
        if memo is not None:
            ctx.set(stack_smoke={**memo, "reused": True})
            if probe.reuse(memo, recheck=False) == "fail":
                raise HostFailed(failed_again(memo, "the serving env"))
            step.message = (
                f"reused the verdict of {memo.get('checked_at')} ({memo.get('summary')}): "
                "the serving env is unchanged"
            )
            return None
        target = Target(
            posixpath.join(env, "bin", "python"),
            "the serving env",
            None,
            names,
            False,
            cc,
            cc_source,
            gpu,
            declarations(state),
            serving.probe_knowledge(names),
        )
        run = run_probe(ctx, target)
        summary = _summary(run.packages, run.stack)
        doc = {
            "checked": checked_summary(run.packages, run.stack),
            "summary": summary,
            "arch": cc,
            "packages": {n: p["status"] for n, p in run.packages.items()},
            "stack": run.stack,
        }
        ctx.set(stack_smoke=doc)
        step.message = nothing_checked(target, run) or summary
        raise_on_failure(ctx, target, run)
        memo = {k: doc[k] for k in ("checked", "summary", "arch")}
        memo["gpu"] = gpu
        memo["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return memo


def __getattr__(name: str) -> Any:
    # DEFAULT_PACKAGES is asked of the registry when read, so a descriptor registered later
    # (a site's own package) is part of it.
    if name == "DEFAULT_PACKAGES":
        return registry.smoke_defaults()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
